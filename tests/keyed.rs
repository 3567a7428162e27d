//! Keyed (per-tenant) limits.

use std::time::Duration;

use tokio::time::{Instant, advance};
use tower_limits::{Admission, ConcurrencyLimiter, KeyedLimiter, Limiter, RateLimiter};

fn per_key_rate(max: usize) -> KeyedLimiter<String, RateLimiter> {
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
    let handle = keyed.limiter(&"a".to_owned());
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
    let keyed = KeyedLimiter::builder(|_: &u8| ConcurrencyLimiter::new(1).unwrap())
        .max_keys(1)
        .build()
        .unwrap();
    let held = keyed.limiter(&1);
    let Admission::Granted(_permit) = held.try_acquire().await.unwrap() else {
        unreachable!()
    };
    keyed.limiter(&2); // evicts key 1
    let fresh = keyed.limiter(&1);
    assert_eq!(fresh.running(), 0);
    assert_eq!(held.running(), 1, "the old state lives on with its permits");
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
