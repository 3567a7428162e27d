//! The store conformance suite: the same assertions for every store.
//!
//! Each check takes a fresh store (made by the caller, with its own key
//! prefix where the store has one) and runs on real time with short windows,
//! since a server's clock cannot be paused. Timing assertions allow
//! [`SLACK`] for a busy machine and a network round trip.
//!
//! `integration/tests/store_conformance.rs` runs every check against every store with
//! one [`conformance!`] call per store; other binaries (the Redis Cluster
//! test, which starts its own cluster) use the same macro.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use tower_limits::error::CostTooHigh;
use tower_limits::limiter::Admission;
use tower_limits::store::{
    CurveRecord, CurveStore, LeaseStore, MAX_LEASES, Quota, QuotaStore, WindowDecision,
};
use tower_limits::{AdaptiveRateLimiter, LeasedConcurrencyLimiter, Limiter, Rate, RateLimiter};

/// Runs every check of this suite against the store `$make` makes: one test
/// per check, in a module named `$store`. `$make` is an async expression
/// giving `Option<store>`: `None` (after saying why, see [`skip`](super::skip)) skips.
///
/// ```ignore
/// conformance!(memory, Some(MemoryStore::new()));
/// ```
#[macro_export]
macro_rules! conformance {
    ($store:ident, $make:expr) => {
        mod $store {
            use super::*;

            $crate::conformance!(@checks $make;
                quota_grants_capacity_then_names_retry,
                quota_refund_and_peek,
                quota_refund_after_later_grants,
                quota_settle,
                quota_pause,
                quota_take_and_reset,
                quota_status_agrees_with_look,
                quota_decisions_are_atomic,
                shared_limiter_shares_one_limit,
                a_new_algorithm_starts_afresh,
                a_new_rate_rescales_what_was_spent,
                a_new_window_limit_keeps_the_count,
                a_longer_window_is_not_held_by_the_shorter_ones_count,
                sliding_log_limits_and_reports,
                sliding_log_refund_settle_pause_clear,
                sliding_log_backoff,
                leases_limit_expire_and_renew,
                leases_past_the_bound_are_refused,
                leased_limiter_renews_and_releases,
                curves_swap_by_version_and_are_shared,
            );
        }
    };
    (@checks $make:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                if let Some(store) = $make {
                    $crate::common::conformance::$check(store).await;
                }
            }
        )*
    };
}

/// What every store implements.
pub(crate) trait Store: QuotaStore + LeaseStore + CurveStore + Clone {}
impl<S: QuotaStore + LeaseStore + CurveStore + Clone> Store for S {}

/// Timing tolerance.
pub(crate) const SLACK: Duration = Duration::from_millis(60);
const WINDOW: Duration = Duration::from_millis(300);

/// A name no other test or run uses.
pub(crate) fn unique(what: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let seq = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{what}-{}-{nanos}-{seq}", std::process::id())
}

/// Sleeps until just after a boundary of `window` in Unix time, so a fixed
/// window test does not straddle one.
async fn after_boundary(window: Duration) {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let into = since % window.as_nanos();
    let left = window.as_nanos() - into;
    tokio::time::sleep(Duration::from_nanos(left as u64) + Duration::from_millis(5)).await;
}

/// The five quotas, each 3 per [`WINDOW`] with 3 at once.
pub(crate) fn quotas() -> Vec<(&'static str, Quota)> {
    let per_call = WINDOW / 3;
    vec![
        (
            "gcra",
            Quota::gcra(1, per_call).unwrap().with_burst(3).unwrap(),
        ),
        ("token_bucket", Quota::token_bucket(3, 3, WINDOW).unwrap()),
        ("fixed_window", Quota::fixed_window(3, WINDOW).unwrap()),
        (
            "sliding_window_counter",
            Quota::sliding_window_counter(3, WINDOW).unwrap(),
        ),
        ("sliding_log", Quota::sliding_log(3, WINDOW).unwrap()),
    ]
}

/// A day: the window of the count quotas, which no check should cross.
pub(crate) const DAY: Duration = Duration::from_secs(86_400);

/// The five quotas as plain counts of `capacity` units: GCRA and the token
/// bucket refill one unit an hour, the windows and the log last a day (Unix days), so
/// nothing a check does in seconds is refilled, unless it crosses midnight
/// UTC ([`day`] tells).
pub(crate) fn count_quotas(capacity: u32) -> Vec<(&'static str, Quota)> {
    let hour = Duration::from_secs(3_600);
    vec![
        (
            "gcra",
            Quota::gcra(1, hour).unwrap().with_burst(capacity).unwrap(),
        ),
        (
            "token_bucket",
            Quota::token_bucket(capacity, 1, hour).unwrap(),
        ),
        ("fixed_window", Quota::fixed_window(capacity, DAY).unwrap()),
        (
            "sliding_window_counter",
            Quota::sliding_window_counter(capacity, DAY).unwrap(),
        ),
        ("sliding_log", Quota::sliding_log(capacity, DAY).unwrap()),
    ]
}

/// The Unix day now: a check whose day changed may have seen a window roll.
pub(crate) fn day() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    now.as_secs() / DAY.as_secs()
}

fn granted(decision: WindowDecision) -> u64 {
    match decision {
        WindowDecision::Granted { ticket } => ticket,
        WindowDecision::Denied { retry_at } => panic!("denied until {retry_at:?}"),
    }
}

fn denied(decision: WindowDecision) -> Instant {
    match decision {
        WindowDecision::Denied { retry_at } => retry_at,
        WindowDecision::Granted { ticket } => panic!("granted with ticket {ticket}"),
    }
}

fn assert_near(at: Instant, expected: Instant, what: &str) {
    let early = expected.saturating_duration_since(at);
    let late = at.saturating_duration_since(expected);
    assert!(
        early <= Duration::from_millis(2) && late <= SLACK,
        "{what}: {at:?} is not within [-2ms, +{SLACK:?}] of {expected:?}"
    );
}

/// Runs `check` on every quota, each under a name of its own.
async fn each_quota<S, F, Fut>(store: &S, check: F)
where
    S: Store,
    F: Fn(S, S::QuotaKey, Quota, &'static str) -> Fut,
    Fut: Future<Output = ()>,
{
    for (what, quota) in quotas() {
        after_boundary(WINDOW).await;
        let key = store.quota_key(&unique(what));
        check(store.clone(), key, quota, what).await;
    }
}

/// Grants the capacity at once, then denies until the instant it names,
/// and grants again at that instant.
pub(crate) async fn quota_grants_capacity_then_names_retry<S: Store>(store: S) {
    each_quota(&store, |store, key, quota, what| async move {
        let start = Instant::now();
        for _ in 0..3 {
            granted(store.decide(&key, &quota, 1).await.unwrap());
        }
        let retry_at = denied(store.decide(&key, &quota, 1).await.unwrap());
        assert!(retry_at > Instant::now(), "{what}: retry in the future");
        // The sliding window counter waits up to a third into the next
        // window, for the full one to weigh little enough.
        let latest = start + WINDOW * 4 / 3 + SLACK;
        let after = retry_at - start;
        assert!(
            retry_at <= latest,
            "{what}: retry {after:?} after the start"
        );
        tokio::time::sleep_until(retry_at).await;
        granted(store.decide(&key, &quota, 1).await.unwrap());
    })
    .await;
}

/// A refund gives the units back; peeking takes nothing.
pub(crate) async fn quota_refund_and_peek<S: Store>(store: S) {
    each_quota(&store, |store, key, quota, what| async move {
        assert_eq!(store.look(&key, &quota, 3).await.unwrap(), None, "{what}");
        assert_eq!(
            store.look(&key, &quota, 3).await.unwrap(),
            None,
            "{what}: peek took"
        );
        full_then_refunded(&store, &key, &quota, what).await;
        granted(store.decide(&key, &quota, 3).await.unwrap());
    })
    .await;
}

/// Grants all 3 units of `quota` at `key`, then refunds them: full, then
/// all 3 back.
pub(crate) async fn full_then_refunded<S: QuotaStore>(
    store: &S,
    key: &S::QuotaKey,
    quota: &Quota,
    what: &str,
) {
    let ticket = granted(store.decide(key, quota, 3).await.unwrap());
    assert!(
        store.look(key, quota, 1).await.unwrap().is_some(),
        "{what}: full"
    );
    store.adjust(key, quota, ticket, 3, 0).await.unwrap();
    assert_eq!(
        store.look(key, quota, 3).await.unwrap(),
        None,
        "{what}: refunded"
    );
}

/// A GCRA or token bucket grant is given back whatever was granted since,
/// in any order: a refund inside the line leaves a gap the next grant
/// takes. (Each quota refills once an hour: no time in the check counts.)
pub(crate) async fn quota_refund_after_later_grants<S: Store>(store: S) {
    for (what, quota) in count_quotas(4).into_iter().take(2) {
        let key = store.quota_key(&unique(what));
        let mut tickets = Vec::new();
        for _ in 0..4 {
            tickets.push(granted(store.decide(&key, &quota, 1).await.unwrap()));
        }
        assert!(full(&store, &key, &quota).await, "{what}: full");
        // The second grant, inside the line: its unit is free again (once:
        // a second refund gives nothing), and the next grant takes it.
        assert!(
            store
                .adjust(&key, &quota, tickets[1], 1, 0)
                .await
                .unwrap()
                .is_some()
        );
        assert_eq!(
            store.adjust(&key, &quota, tickets[1], 1, 0).await.unwrap(),
            None,
            "{what}"
        );
        assert_eq!(
            store.look(&key, &quota, 1).await.unwrap(),
            None,
            "{what}: one back"
        );
        assert!(
            store.look(&key, &quota, 2).await.unwrap().is_some(),
            "{what}: only one"
        );
        let refilled = granted(store.decide(&key, &quota, 1).await.unwrap());
        assert!(full(&store, &key, &quota).await, "{what}: taken again");
        // The rest, out of order: everything comes back.
        for ticket in [tickets[0], tickets[3], refilled, tickets[2]] {
            assert!(
                store
                    .adjust(&key, &quota, ticket, 1, 0)
                    .await
                    .unwrap()
                    .is_some(),
                "{what}"
            );
        }
        assert_eq!(
            store.look(&key, &quota, 4).await.unwrap(),
            None,
            "{what}: all back"
        );
    }
}

/// Whether `quota` at `key` has no unit free now.
async fn full<S: Store>(store: &S, key: &S::QuotaKey, quota: &Quota) -> bool {
    store.look(key, quota, 1).await.unwrap().is_some()
}

/// Settling to a higher cost charges the difference; to a lower one gives
/// it back.
pub(crate) async fn quota_settle<S: Store>(store: S) {
    each_quota(&store, |store, key, quota, what| async move {
        let ticket = granted(store.decide(&key, &quota, 1).await.unwrap());
        let ticket = store.adjust(&key, &quota, ticket, 1, 3).await.unwrap();
        assert!(
            store.look(&key, &quota, 1).await.unwrap().is_some(),
            "{what}: charged"
        );
        store
            .adjust(&key, &quota, ticket.expect("still adjustable"), 3, 1)
            .await
            .unwrap();
        assert_eq!(
            store.look(&key, &quota, 2).await.unwrap(),
            None,
            "{what}: given back"
        );
    })
    .await;
}

/// A pause holds every quota until its end, and is never shortened.
pub(crate) async fn quota_pause<S: Store>(store: S) {
    each_quota(&store, |store, key, quota, what| async move {
        let resume = Instant::now() + Duration::from_millis(200);
        store.pause(&key, &quota, resume).await.unwrap();
        store.pause(&key, &quota, Instant::now()).await.unwrap();
        let retry_at = denied(store.decide(&key, &quota, 1).await.unwrap());
        assert_near(retry_at, resume, what);
        // A store sends the pause as a duration from its own clock, so it
        // ends up to one request's latency after `resume`: wait for the end
        // the store named, which `assert_near` held close to `resume`.
        tokio::time::sleep_until(retry_at.max(resume) + Duration::from_millis(2)).await;
        granted(store.decide(&key, &quota, 3).await.unwrap());
    })
    .await;
}

/// `refill_in`, a duration from the store's answer, is within the slack of
/// the wait until `at`, an instant a look named just before.
fn assert_refill_near(refill_in: Option<Duration>, at: Option<Instant>, what: &str) {
    let (Some(refill_in), Some(at)) = (refill_in, at) else {
        panic!("{what}: a refill ({refill_in:?}) and a look ({at:?}) that both wait");
    };
    let expected = at.saturating_duration_since(Instant::now());
    assert!(
        refill_in + SLACK >= expected && refill_in <= expected + SLACK,
        "{what}: refill in {refill_in:?}, a look waits {expected:?}"
    );
}

/// One status read: the limit and window, all of it free at first; after
/// two units, one left and more when a look for two says; nothing during a
/// pause.
pub(crate) async fn quota_status_agrees_with_look<S: Store>(store: S) {
    each_quota(&store, |store, key, quota, what| async move {
        let fresh = store.quota_status(&key, &quota).await.unwrap();
        assert_eq!((fresh.limit(), fresh.remaining()), (3, 3), "{what}");
        assert_eq!(fresh.window(), WINDOW, "{what}");
        assert_eq!(fresh.refill_in(), None, "{what}: nothing to come back");
        granted(store.decide(&key, &quota, 2).await.unwrap());
        let status = store.quota_status(&key, &quota).await.unwrap();
        assert_eq!(status.remaining(), 1, "{what}");
        let two = store.look(&key, &quota, 2).await.unwrap();
        assert_refill_near(status.refill_in(), two, what);
        let resume = Instant::now() + Duration::from_secs(60);
        store.pause(&key, &quota, resume).await.unwrap();
        let paused = store.quota_status(&key, &quota).await.unwrap();
        assert_eq!(paused.remaining(), 0, "{what}: paused");
        assert_refill_near(paused.refill_in(), Some(resume), what);
    })
    .await;
}

/// `take` counts past the limit; `reset` forgets everything.
pub(crate) async fn quota_take_and_reset<S: Store>(store: S) {
    each_quota(&store, |store, key, quota, what| async move {
        for _ in 0..4 {
            store.take(&key, &quota).await.unwrap();
        }
        assert!(
            store.look(&key, &quota, 1).await.unwrap().is_some(),
            "{what}: taken"
        );
        store
            .pause(&key, &quota, Instant::now() + Duration::from_secs(60))
            .await
            .unwrap();
        store.reset(&key, &quota).await.unwrap();
        granted(store.decide(&key, &quota, 3).await.unwrap());
    })
    .await;
}

/// 40 concurrent decisions on a quota of 3: exactly 3 are granted when they
/// all land within one refill (a third of the window); on a machine so busy
/// that they do not, at most 3 more per refill that passed.
pub(crate) async fn quota_decisions_are_atomic<S: Store>(store: S) {
    each_quota(&store, |store, key, quota, what| async move {
        let key = std::sync::Arc::new(key);
        let start = Instant::now();
        let tasks: Vec<_> = (0..40)
            .map(|_| {
                let (store, key) = (store.clone(), std::sync::Arc::clone(&key));
                tokio::spawn(async move { store.decide(&key, &quota, 1).await.unwrap() })
            })
            .collect();
        let mut grants = 0;
        for task in tasks {
            grants += usize::from(matches!(
                task.await.unwrap(),
                WindowDecision::Granted { .. }
            ));
        }
        let refills = (start.elapsed().as_nanos() / (WINDOW / 3).as_nanos()) as usize;
        if refills == 0 {
            assert_eq!(grants, 3, "{what}");
        } else {
            let most = 3 * (1 + refills);
            assert!(
                (3..=most).contains(&grants),
                "{what}: {grants} granted, at most {most}"
            );
        }
    })
    .await;
}

/// The shared limiter over the store: a limit for two handles, a cost above
/// the capacity refused.
pub(crate) async fn shared_limiter_shares_one_limit<S: Store>(store: S) {
    let quota = Quota::token_bucket(2, 2, WINDOW).unwrap();
    let name = unique("shared");
    let a = RateLimiter::new(store.clone(), name.clone(), quota);
    let b = RateLimiter::new(store, name, quota);
    assert!(matches!(
        a.try_acquire_many(2).await.unwrap(),
        Admission::Granted(_)
    ));
    assert!(matches!(
        b.try_acquire().await.unwrap(),
        Admission::Denied(_)
    ));
    assert!(!b.can_proceed().await.unwrap());
    assert!(
        b.try_acquire_many(3).await.is_err(),
        "a cost above the capacity"
    );
}

/// A limiter whose quota changes from a full sliding log to GCRA decides
/// afresh under GCRA, with no error from the log's state (in Redis, the
/// two keep apart keys).
/// A GCRA quota whose rate changes keeps what was spent, in cells: the
/// line's lead over now is rescaled to the new interval. One cell taken at
/// one a second is a 10 s wait at one per 10 s; one taken at one per 10 s
/// is a 1 s wait at one a second (with the TAT kept instead, 1 s and 10 s:
/// a faster rate would wait on the slower one's slot, and a slower one
/// would let its next call come a whole interval early). A delay `d`
/// between the grant and the look (a busy machine, a slow store) makes
/// the waits `10 (1 - d)` and `1 - d / 10`: the bounds hold up to
/// `d = 0.8 s`, and still tell the rescaled line from the kept one.
pub(crate) async fn a_new_rate_rescales_what_was_spent<S: Store>(store: S) {
    let second = Duration::from_secs(1);
    let ten = Duration::from_secs(10);
    for (from, to, at_least, at_most) in [(second, ten, 2.0, 10.5), (ten, second, 0.0, 5.0)] {
        let key = store.quota_key(&unique("rescale"));
        let before = Quota::gcra(1, from).unwrap();
        let after = Quota::gcra(1, to).unwrap();
        assert!(matches!(
            store.decide(&key, &before, 1).await.unwrap(),
            WindowDecision::Granted { .. }
        ));
        let asked = Instant::now();
        let retry_at = store.look(&key, &after, 1).await.unwrap();
        let wait = retry_at.expect("the cell is spent").duration_since(asked);
        let wait = wait.as_secs_f64();
        assert!(
            (at_least..=at_most).contains(&wait),
            "{from:?} then {to:?}: waits {wait:.3} s, not {at_least}-{at_most} s"
        );
    }
}

/// A window quota given a new limit (same window) keeps what its windows
/// counted, in every store: 3 of 4 taken, then a limit of 3 is full, and a
/// limit of 5 has 2 left. (The memory store once started afresh: 3 more
/// under the limit of 3, up to 6 in one window.)
pub(crate) async fn a_new_window_limit_keeps_the_count<S: Store>(store: S) {
    let kinds: [fn(u32) -> Quota; 2] = [
        |max| Quota::fixed_window(max, Duration::from_secs(86_400)).unwrap(),
        |max| Quota::sliding_window_counter(max, Duration::from_secs(86_400)).unwrap(),
    ];
    for (what, quota) in ["fixed window", "sliding window counter"]
        .into_iter()
        .zip(kinds)
    {
        let key = store.quota_key(&unique("window-limit"));
        assert!(matches!(
            store.decide(&key, &quota(4), 3).await.unwrap(),
            WindowDecision::Granted { .. }
        ));
        assert!(
            matches!(
                store.decide(&key, &quota(3), 1).await.unwrap(),
                WindowDecision::Denied { .. }
            ),
            "{what}: 3 counted, a limit of 3 is full"
        );
        let status = store.quota_status(&key, &quota(5)).await.unwrap();
        assert_eq!(status.remaining(), 2, "{what}: 3 counted, 2 left of 5");
    }
}

/// A sliding window counter whose window grows (1 ms to 10 ms) is not held
/// by what the shorter windows counted: once two of the new windows have
/// passed, its whole limit is free.
pub(crate) async fn a_longer_window_is_not_held_by_the_shorter_ones_count<S: Store>(store: S) {
    let key = store.quota_key(&unique("window-length"));
    let short = Quota::sliding_window_counter(2, Duration::from_millis(1)).unwrap();
    let long = Quota::sliding_window_counter(2, Duration::from_millis(10)).unwrap();
    assert!(matches!(
        store.decide(&key, &short, 2).await.unwrap(),
        WindowDecision::Granted { .. }
    ));
    tokio::time::sleep(Duration::from_millis(25)).await;
    let decision = store.decide(&key, &long, 2).await.unwrap();
    assert!(
        matches!(decision, WindowDecision::Granted { .. }),
        "two 10 ms windows later: {decision:?}"
    );
}

pub(crate) async fn a_new_algorithm_starts_afresh<S: Store>(store: S) {
    let limiter = window_limiter(store, &unique("switch"), false);
    assert!(matches!(
        limiter.try_acquire_many(3).await.unwrap(),
        Admission::Granted(_)
    ));
    assert!(!limiter.can_proceed().await.unwrap(), "the log is full");
    limiter.set_quota(Quota::gcra(1, WINDOW).unwrap().with_burst(2).unwrap());
    assert!(matches!(
        limiter.try_acquire_many(2).await.unwrap(),
        Admission::Granted(_)
    ));
    assert!(!limiter.can_proceed().await.unwrap(), "the burst is spent");
}

fn window_limiter<S: Store>(store: S, name: &str, backoff: bool) -> RateLimiter<S> {
    let builder = RateLimiter::builder(name, 3, WINDOW).store(store);
    let builder = if backoff {
        builder
            .initial_backoff(Duration::from_millis(100))
            .max_backoff(Duration::from_secs(1))
    } else {
        builder.without_backoff()
    };
    builder.build().unwrap()
}

/// The sliding log: the limit, then a retry when the first start leaves the
/// window, which frees the units it started.
pub(crate) async fn sliding_log_limits_and_reports<S: Store>(store: S) {
    let limiter = window_limiter(store.clone(), &unique("log"), false);
    let (quota, key) = (limiter.quota(), store.quota_key(limiter.name()));
    let first = Instant::now();
    granted(store.decide(&key, &quota, 2).await.unwrap());
    granted(store.decide(&key, &quota, 1).await.unwrap());
    let retry_at = denied(store.decide(&key, &quota, 1).await.unwrap());
    assert!(retry_at <= first + WINDOW + SLACK && retry_at >= first + WINDOW - SLACK);
    assert_eq!(
        store.quota_status(&key, &quota).await.unwrap().remaining(),
        0
    );
    tokio::time::sleep_until(retry_at).await;
    granted(store.decide(&key, &quota, 2).await.unwrap());
}

/// Refund and settle on the sliding log; pause and reset.
pub(crate) async fn sliding_log_refund_settle_pause_clear<S: Store>(store: S) {
    let limiter = window_limiter(store.clone(), &unique("log"), false);
    let (quota, key) = (limiter.quota(), store.quota_key(limiter.name()));
    let remaining = async || store.quota_status(&key, &quota).await.unwrap().remaining();
    let ticket = granted(store.decide(&key, &quota, 3).await.unwrap());
    assert_eq!(
        store.adjust(&key, &quota, ticket, 3, 1).await.unwrap(),
        Some(ticket)
    );
    assert_eq!(remaining().await, 2);
    store.adjust(&key, &quota, ticket, 1, 3).await.unwrap();
    assert_eq!(remaining().await, 0);
    let resume = Instant::now() + Duration::from_secs(30);
    store.pause(&key, &quota, resume).await.unwrap();
    store.pause(&key, &quota, Instant::now()).await.unwrap();
    store.adjust(&key, &quota, ticket, 3, 0).await.unwrap();
    let paused = store.look(&key, &quota, 1).await.unwrap();
    assert_near(paused.expect("a pause outlives a refund"), resume, "pause");
    store.reset(&key, &quota).await.unwrap();
    assert_eq!(store.look(&key, &quota, 3).await.unwrap(), None);
}

/// The seed's backoff: filling the window pauses for the initial delay ×2
/// (stretched by a jitter of up to as much again), each further start
/// escalates it, and a refund that unfills the window undoes the last
/// escalation.
pub(crate) async fn sliding_log_backoff<S: Store>(store: S) {
    let limiter = window_limiter(store.clone(), &unique("backoff"), true);
    let (quota, key) = (limiter.quota(), store.quota_key(limiter.name()));
    let start = Instant::now();
    let within = |at: Instant, from: u64, to: u64, what: &str| {
        let (from, to) = (Duration::from_millis(from), Duration::from_millis(to));
        let after = at.saturating_duration_since(start);
        assert!(
            after + Duration::from_millis(2) >= from && after <= to + SLACK,
            "{what}: {after:?} after the start, not within [{from:?}, {to:?}]"
        );
    };
    let ticket = granted(store.decide(&key, &quota, 3).await.unwrap());
    // max(now + 200 ms backoff (up to 400 ms with jitter), first start + 300 ms window).
    let paused = store
        .look(&key, &quota, 1)
        .await
        .unwrap()
        .expect("backing off");
    within(paused, 300, 400, "backoff or window");
    store.take(&key, &quota).await.unwrap(); // escalates to 400 ms (up to 800)
    let escalated = store
        .look(&key, &quota, 1)
        .await
        .unwrap()
        .expect("escalated");
    within(escalated, 400, 800, "escalated backoff");
    store.adjust(&key, &quota, ticket, 3, 0).await.unwrap();
    let undone = store.look(&key, &quota, 1).await.unwrap();
    assert!(
        undone.is_some_and(|at| at <= paused + SLACK),
        "{undone:?}, paused until {paused:?}"
    );
}

/// Leases: the limit, release, expiry without renewal, renewal, pause.
pub(crate) async fn leases_limit_expire_and_renew<S: Store>(store: S) {
    let key = store.lease_key(&unique("leases"));
    let ttl = Duration::from_millis(400);
    granted(store.lease(&key, 3, ttl, 10, 2).await.unwrap());
    granted(store.lease(&key, 3, ttl, 20, 1).await.unwrap());
    let retry_at = denied(store.lease(&key, 3, ttl, 30, 1).await.unwrap());
    assert!(
        retry_at <= Instant::now() + ttl + SLACK,
        "retry when a lease expires"
    );
    assert_eq!(store.leases_held(&key).await.unwrap(), 3);
    store.release(&key, 20, 1).await.unwrap();
    granted(store.lease(&key, 3, ttl, 30, 1).await.unwrap());
    tokio::time::sleep(ttl * 3 / 5).await;
    assert_eq!(store.renew(&key, ttl, &[(10, 2)]).await.unwrap(), 2);
    tokio::time::sleep(ttl * 3 / 5).await;
    // Lease 30 expired unrenewed; leases 10 and 11 were renewed.
    assert_eq!(store.leases_held(&key).await.unwrap(), 2);
    assert_eq!(store.renew(&key, ttl, &[(30, 1)]).await.unwrap(), 0, "lost");
    let resume = Instant::now() + Duration::from_secs(30);
    store.pause_leases(&key, resume).await.unwrap();
    assert_near(
        store.paused_until(&key).await.unwrap().unwrap(),
        resume,
        "pause",
    );
    assert_near(
        denied(store.lease(&key, 3, ttl, 40, 1).await.unwrap()),
        resume,
        "paused",
    );
    store.clear_leases(&key).await.unwrap();
    assert_eq!(store.leases_held(&key).await.unwrap(), 0);
    assert_eq!(store.paused_until(&key).await.unwrap(), None);
}

/// Each unit is one lease, one entry in the store: a cost past
/// `MAX_LEASES` is refused before anything is sent or stored (a cost of
/// `u32::MAX` used to allocate one entry per unit, 50 GB, and abort).
pub(crate) async fn leases_past_the_bound_are_refused<S: Store>(store: S) {
    let key = store.lease_key(&unique("bound"));
    let ttl = Duration::from_secs(10);
    let too_high = |error: tower_limits::error::LimiterError| {
        let refused = error.get_ref().downcast_ref::<CostTooHigh>().copied();
        assert_eq!(refused, Some(CostTooHigh::new(u32::MAX, MAX_LEASES.into())));
    };
    too_high(
        store
            .lease(&key, u32::MAX, ttl, 1, u32::MAX)
            .await
            .unwrap_err(),
    );
    too_high(store.renew(&key, ttl, &[(1, u32::MAX)]).await.unwrap_err());
    too_high(store.release(&key, 1, u32::MAX).await.unwrap_err());
    assert_eq!(store.leases_held(&key).await.unwrap(), 0);
    granted(store.lease(&key, MAX_LEASES, ttl, 1, 3).await.unwrap());
    assert_eq!(store.leases_held(&key).await.unwrap(), 3);
    store.clear_leases(&key).await.unwrap();
}

/// The leased limiter: permits hold leases, renewed while they run,
/// released when dropped.
pub(crate) async fn leased_limiter_renews_and_releases<S: Store>(store: S) {
    let name = unique("leased");
    let ttl = Duration::from_millis(300);
    let limiter = LeasedConcurrencyLimiter::new(store.clone(), name.clone(), 2, ttl).unwrap();
    let Admission::Granted(running) = limiter.try_acquire_many(2).await.unwrap() else {
        panic!("two slots are free");
    };
    tokio::time::sleep(ttl * 3).await; // outlives the TTL: renewed meanwhile
    let key = store.lease_key(&name);
    assert_eq!(store.leases_held(&key).await.unwrap(), 2, "renewed");
    assert!(matches!(
        limiter.try_acquire().await.unwrap(),
        Admission::Denied(_)
    ));
    drop(running);
    let released = Instant::now() + Duration::from_secs(1);
    while store.leases_held(&key).await.unwrap() > 0 {
        assert!(
            Instant::now() < released,
            "the dropped permit's leases are released"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(matches!(
        limiter.try_acquire_many(2).await.unwrap(),
        Admission::Granted(_)
    ));
}

/// A shared adaptive rate: a record is written only over the version it
/// was computed from, and read back as written; two limiters on the store
/// follow one rate, and a refusal both saw lowers it once.
pub(crate) async fn curves_swap_by_version_and_are_shared<S: Store>(store: S) {
    let key = store.curve_key(&unique("curve"));
    assert_eq!(store.load_curve(&key).await.unwrap(), None);
    let words = [
        20_000_000,
        2_000_000,
        1_800_000_000_000_000,
        0,
        0,
        7_000_000,
    ];
    let first = CurveRecord::from_words(0, words);
    assert!(store.swap_curve(&key, first).await.unwrap());
    assert!(
        !store.swap_curve(&key, first).await.unwrap(),
        "version 0 is gone"
    );
    let stored = store.load_curve(&key).await.unwrap();
    assert_eq!(stored, Some(CurveRecord::from_words(1, words)));
    let second = CurveRecord::from_words(1, [1, 2, 3, 4, 5, 6]);
    assert!(store.swap_curve(&key, second).await.unwrap());
    let stored = store.load_curve(&key).await.unwrap();
    assert_eq!(stored, Some(CurveRecord::from_words(2, [1, 2, 3, 4, 5, 6])));

    let name = unique("adaptive");
    let builder = AdaptiveRateLimiter::builder(Rate::per_second(100).unwrap());
    let a = builder
        .clone()
        .build_shared(store.clone(), name.clone())
        .unwrap();
    let b = builder.build_shared(store, name).unwrap();
    a.try_acquire().await.unwrap();
    b.try_acquire().await.unwrap();
    let sent = Instant::now();
    tokio::time::sleep(Duration::from_millis(5)).await;
    a.record_refusal(sent);
    b.record_refusal(sent); // the same overload
    tokio::time::sleep(Duration::from_millis(100)).await; // past a refresh
    b.try_acquire().await.unwrap();
    // Once (a quarter, held for a second), not twice (12.5).
    let rate = b.current_rate();
    assert!((24.9..25.1).contains(&rate), "{rate}");
}
