//! A Redis that goes away, comes back, hangs or answers garbage: each
//! outage policy does what it says, recovery is prompt, and nothing panics.
#![cfg(feature = "redis")]

mod common;

use std::time::Duration;

use common::redis::{PrivateRedis, free_port, garbage_server};
use tokio::time::Instant;
use tower_limits::error::LimiterError;
use tower_limits::limiter::Admission;
use tower_limits::store::{Quota, RedisStore, StoreError, StoreErrorKind};
use tower_limits::{Failover, Limiter, OutagePolicy, RateLimiter};

const TIMEOUT: Duration = Duration::from_millis(100);

fn store_error(error: &LimiterError) -> &StoreError {
    error
        .get_ref()
        .downcast_ref::<StoreError>()
        .unwrap_or_else(|| panic!("a store error, not {error}"))
}

/// How many of `attempts` decisions are granted, spread over `over`.
async fn grants<L: Limiter>(limiter: &L, attempts: u32, over: Duration) -> u32 {
    let mut granted = 0;
    for _ in 0..attempts {
        if let Ok(Admission::Granted(_)) = limiter.try_acquire().await {
            granted += 1;
        }
        tokio::time::sleep(over / attempts).await;
    }
    granted
}

/// Tries `limiter` until its store answers; how long after `since` that was.
async fn recovery<L: Limiter, F: Limiter>(limiter: &Failover<L, F>, since: Instant) -> Duration {
    loop {
        let _ = limiter.try_acquire().await;
        if !limiter.is_down() {
            return since.elapsed();
        }
        assert!(since.elapsed() < Duration::from_secs(5), "never recovered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_policy_holds_while_redis_is_down_and_recovers_within_a_second() {
    if common::redis::url("the outage test (it needs redis-server)").is_none() {
        return;
    }
    let port = free_port();
    let server = PrivateRedis::start(port);
    let store = RedisStore::builder(server.url())
        .timeout(TIMEOUT)
        .connect()
        .await
        .unwrap();
    let quota = Quota::gcra(1_000, Duration::from_secs(1))
        .unwrap()
        .with_burst(1_000)
        .unwrap();
    let shared = |name: &str| RateLimiter::new(store.clone(), name, quota);
    let local = RateLimiter::in_memory(
        Quota::gcra(5, Duration::from_secs(60))
            .unwrap()
            .with_burst(5)
            .unwrap()
            .with_pacing_tolerance()
            .unwrap(),
    );
    let closed = Failover::fail_closed(shared("closed"));
    let open = Failover::fail_open(shared("open"));
    let fallback = Failover::new(shared("fallback"), OutagePolicy::Fallback(local));
    let window = Duration::from_millis(200);
    assert_eq!(
        grants(&closed, 10, window).await,
        10,
        "up: the store admits"
    );
    assert_eq!(grants(&open, 10, window).await, 10);
    assert_eq!(grants(&fallback, 10, window).await, 10);

    server.kill();
    let down = Duration::from_millis(600);
    for _ in 0..10 {
        let error = closed
            .try_acquire()
            .await
            .expect_err("fail closed admits nothing");
        let kind = store_error(&error).kind();
        assert!(
            matches!(kind, StoreErrorKind::Unavailable | StoreErrorKind::Timeout),
            "{kind:?}"
        );
    }
    assert!(closed.is_down());
    assert_eq!(
        grants(&open, 20, down).await,
        20,
        "fail open admits everyone"
    );
    assert_eq!(open.admitted_during_outage(), 20, "and counts them");
    assert_eq!(
        grants(&fallback, 20, down).await,
        5,
        "fallback holds its own limit"
    );

    let restarted = Instant::now();
    let _server = PrivateRedis::start(port);
    for (what, took) in [
        ("fail closed", recovery(&closed, restarted).await),
        ("fail open", recovery(&open, restarted).await),
        ("fallback", recovery(&fallback, restarted).await),
    ] {
        assert!(
            took < Duration::from_secs(1),
            "{what} recovered {took:?} after the restart"
        );
    }
    let before = open.admitted_during_outage();
    assert_eq!(grants(&open, 5, window).await, 5);
    assert_eq!(
        open.admitted_during_outage(),
        before,
        "the store decides again"
    );
}

/// Replies that are not decisions, and a server that never answers.
const GARBAGE: [(&[u8], StoreErrorKind); 6] = [
    (b"+OK\r\n", StoreErrorKind::BadReply),
    (b":42\r\n", StoreErrorKind::BadReply),
    (b"*2\r\n:1\r\n$3\r\nabc\r\n", StoreErrorKind::BadReply),
    (b"*2\r\n:7\r\n:1\r\n", StoreErrorKind::BadReply),
    (b"*2\r\n:0\r\n:-5\r\n", StoreErrorKind::BadReply),
    (b"-ERR the script exploded\r\n", StoreErrorKind::Refused),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_replies_are_typed_errors_not_panics() {
    for (reply, kind) in GARBAGE {
        let url = format!("redis://127.0.0.1:{}", garbage_server(reply));
        let store = RedisStore::builder(url)
            .timeout(TIMEOUT)
            .connect()
            .await
            .unwrap();
        let quota = Quota::fixed_window(10, Duration::from_secs(1)).unwrap();
        let shared = RateLimiter::new(store.clone(), "garbage", quota);
        let window = RateLimiter::builder("garbage", 10, Duration::from_secs(1))
            .store(store)
            .build()
            .unwrap();
        let shown = String::from_utf8_lossy(reply);
        for error in [
            shared.try_acquire().await.expect_err("garbage is no grant"),
            window.try_acquire().await.expect_err("garbage is no grant"),
            shared.peek(1).await.expect_err("garbage is no answer"),
        ] {
            assert_eq!(store_error(&error).kind(), kind, "reply {shown:?}: {error}");
        }
        let open = Failover::fail_open(shared);
        assert!(
            matches!(open.try_acquire().await, Ok(Admission::Granted(_))),
            "{shown:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_is_a_timeout() {
    let url = format!("redis://127.0.0.1:{}", garbage_server(b""));
    let store = RedisStore::builder(url)
        .timeout(TIMEOUT)
        .connect()
        .await
        .unwrap();
    let quota = Quota::gcra(10, Duration::from_secs(1)).unwrap();
    let limiter = Failover::fail_closed(RateLimiter::new(store, "hung", quota));
    let start = Instant::now();
    let error = limiter
        .try_acquire()
        .await
        .expect_err("no answer is no grant");
    assert_eq!(store_error(&error).kind(), StoreErrorKind::Timeout);
    assert!(
        start.elapsed() < TIMEOUT * 3,
        "gave up after {:?}",
        start.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_fails_to_connect_with_a_store_error() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let error = RedisStore::builder(url)
        .timeout(TIMEOUT)
        .connect()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");
}
