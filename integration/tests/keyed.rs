//! Keyed (per-tenant) limits.

use std::time::Duration;

use tokio::time::{Instant, advance};
use tower_limits::limiter::Admission;
use tower_limits::{
    ConcurrencyLimiter, DelayLimiter, KeyedLimiter, Limiter, LimiterExt, RateLimiter,
};

fn per_key_rate(max: u32) -> KeyedLimiter<String, RateLimiter> {
    KeyedLimiter::builder(move |key: &String| {
        RateLimiter::builder(key.clone(), max, Duration::from_secs(1))
            .without_backoff()
            .build()
            .expect("valid configuration")
    })
    .max_keys(4)
    .idle_timeout(Duration::from_secs(60))
    .build()
    .expect("valid configuration")
}

async fn granted(keyed: &KeyedLimiter<String, RateLimiter>, key: &str) -> bool {
    let answer = keyed.try_acquire(&key.to_owned()).await;
    matches!(answer.expect("in-memory"), Admission::Granted(_))
}

#[tokio::test(start_paused = true)]
async fn each_key_has_its_own_limit() {
    let keyed = per_key_rate(2);
    assert!(granted(&keyed, "a").await);
    assert!(granted(&keyed, "a").await);
    assert!(!granted(&keyed, "a").await);
    assert!(granted(&keyed, "b").await, "a's backlog does not delay b");
    assert!(granted(&keyed, "b").await);
    assert!(!granted(&keyed, "b").await);
}

#[tokio::test(start_paused = true)]
async fn the_same_key_reaches_the_same_state() {
    let keyed = per_key_rate(1);
    let handle = keyed.limiter(&"a".to_owned()).unwrap();
    let at = Instant::now() + Duration::from_secs(30);
    handle.set_next_available_time(at).await.unwrap();
    assert!(
        !granted(&keyed, "a").await,
        "the pause set through a handle holds"
    );
}

#[tokio::test(start_paused = true)]
async fn the_bound_is_never_exceeded_and_the_least_recent_key_goes_first() {
    let keyed = per_key_rate(1);
    for key in ["a", "b", "c", "d"] {
        assert!(granted(&keyed, key).await);
        advance(Duration::from_millis(1)).await;
    }
    assert_eq!(keyed.len(), 4);
    // "a" is the least recently used: a fifth key pushes it out.
    assert!(granted(&keyed, "e").await);
    assert!(keyed.len() <= 4);
    assert!(!granted(&keyed, "d").await, "d kept its full window");
    assert!(granted(&keyed, "a").await, "a forgotten: it starts afresh");
}

#[tokio::test(start_paused = true)]
async fn idle_keys_are_forgotten_before_active_ones() {
    let keyed = per_key_rate(1);
    for key in ["a", "b", "c"] {
        assert!(granted(&keyed, key).await);
    }
    advance(Duration::from_secs(61)).await;
    assert!(granted(&keyed, "d").await);
    assert_eq!(keyed.evict_idle(), 3);
    assert_eq!(keyed.len(), 1);
    assert!(!granted(&keyed, "d").await, "d is active and kept");
}

#[tokio::test(start_paused = true)]
async fn a_forgotten_key_behaves_like_a_fresh_one() {
    let keyed = KeyedLimiter::builder(|_: &u8| DelayLimiter::new(Duration::from_secs(60)).unwrap())
        .max_keys(1)
        .build()
        .unwrap();
    assert!(matches!(
        keyed.try_acquire(&1).await.unwrap(),
        Admission::Granted(_)
    ));
    assert!(!matches!(
        keyed.try_acquire(&1).await.unwrap(),
        Admission::Granted(_)
    ));
    assert!(matches!(
        keyed.try_acquire(&2).await.unwrap(),
        Admission::Granted(_)
    )); // evicts key 1
    assert!(
        matches!(keyed.try_acquire(&1).await.unwrap(), Admission::Granted(_)),
        "fresh"
    );
}

#[tokio::test(start_paused = true)]
async fn a_key_whose_handle_is_held_is_kept() {
    let keyed = KeyedLimiter::builder(|_: &u8| ConcurrencyLimiter::new(1).unwrap())
        .max_keys(2)
        .build()
        .unwrap();
    let held = keyed.limiter(&1).unwrap();
    for key in 2..10 {
        keyed.limiter(&key).unwrap(); // a flood of keys not in use
    }
    let _permit = held.acquire().await.unwrap();
    assert_eq!(
        keyed.limiter(&1).unwrap().running(),
        1,
        "still the same state"
    );
}

#[test]
fn a_zero_bound_is_a_config_error() {
    let error = KeyedLimiter::builder(|_: &u8| ConcurrencyLimiter::new(1).unwrap())
        .max_keys(0)
        .build()
        .unwrap_err();
    assert_eq!(error.field(), "max_keys");
    let error = KeyedLimiter::builder(|_: &u8| ConcurrencyLimiter::new(1).unwrap())
        .idle_timeout(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(error.field(), "idle_timeout");
}

/// A hot tenant split into four shards of its 100 a second, one per worker,
/// each worker calling as fast as its shard lets it for `span`; the
/// admission instants of all workers together.
async fn sharded_admissions(workers: u32, span: Duration) -> Vec<Instant> {
    use std::sync::{Arc, Mutex};
    use tower_limits::{LimiterExt, Rate};

    const SHARDS: u32 = 4;
    let rate: Rate = "100/s".parse().unwrap();
    let keyed = KeyedLimiter::builder(move |&(_, shard): &(&str, u32)| {
        let share = rate.share(shard, SHARDS).unwrap();
        let name = format!("acme#{shard}");
        RateLimiter::from_rate(name, share)
            .without_backoff()
            .build()
            .unwrap()
    })
    .build()
    .unwrap();
    let admitted = Arc::new(Mutex::new(Vec::new()));
    let end = Instant::now() + span;
    let tasks: Vec<_> = (0..workers)
        .map(|worker| {
            let shard = keyed.limiter(&("acme", worker % SHARDS)).unwrap();
            let admitted = Arc::clone(&admitted);
            tokio::spawn(async move {
                while Instant::now() < end {
                    drop(shard.acquire().await.unwrap());
                    admitted.lock().unwrap().push(Instant::now());
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let mut admitted = Arc::try_unwrap(admitted).unwrap().into_inner().unwrap();
    admitted.retain(|at| *at < end);
    admitted.sort();
    admitted
}

/// The most admissions in any window `[t, t + 1 s)`.
fn busiest_second(admitted: &[Instant]) -> usize {
    let second = Duration::from_secs(1);
    admitted
        .iter()
        .enumerate()
        .map(|(i, start)| admitted[i..].partition_point(|at| *at < *start + second))
        .max()
        .unwrap_or(0)
}

#[tokio::test(start_paused = true)]
async fn shards_of_a_hot_key_never_exceed_its_rate_together() {
    let admitted = sharded_admissions(4, Duration::from_secs(3)).await;
    assert_eq!(busiest_second(&admitted), 100);
    // Saturated: every second gets the whole rate.
    assert_eq!(admitted.len(), 300);
}

#[tokio::test(start_paused = true)]
async fn a_lone_worker_gets_its_shard_not_the_whole_rate() {
    // The looser side of sharding: one busy worker, three idle shards.
    let admitted = sharded_admissions(1, Duration::from_secs(3)).await;
    assert_eq!(busiest_second(&admitted), 25);
    assert_eq!(admitted.len(), 75);
}

/// A template validated once gives every key a limiter of its own: keys
/// do not share state with each other or with the template.
#[tokio::test(start_paused = true)]
async fn keys_of_a_template_each_get_a_fresh_limiter() {
    use tower_limits::limiter::Admission;
    use tower_limits::limiters::FreshLimiter;
    use tower_limits::store::Quota;
    use tower_limits::{KeyedLimiter, Limiter, RateLimiter};
    let quota = Quota::gcra(1, std::time::Duration::from_secs(1)).unwrap();
    let template = RateLimiter::in_memory(quota.with_pacing_tolerance().unwrap());
    drop(template.try_acquire().await.unwrap()); // the template's own state is used up
    let keyed = KeyedLimiter::of(template.clone()).build().unwrap();
    for key in ["a", "b", "c"] {
        assert!(matches!(
            keyed.try_acquire(&key).await.unwrap(),
            Admission::Granted(_)
        ));
        assert!(matches!(
            keyed.try_acquire(&key).await.unwrap(),
            Admission::Denied(_)
        ));
    }
    assert!(matches!(
        template.fresh().try_acquire().await.unwrap(),
        Admission::Granted(_)
    ));
    assert_eq!(keyed.limiter(&"a").unwrap().quota(), template.quota());
}
