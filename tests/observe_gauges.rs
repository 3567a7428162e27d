//! Watching limiters: the snapshots of `LimiterExt::stats`.

use std::time::Duration;

use tokio::time::{Instant, advance};
use tower_limits::{CompositeLimiter, ConcurrencyLimiter, GcraLimiter, Limiter, LimiterExt};

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// A concurrency limiter with two permits held counts two calls running.
#[tokio::test(start_paused = true)]
async fn stats_of_a_concurrency_limiter_count_the_calls_running() {
    let limiter = ConcurrencyLimiter::new(3).unwrap();
    let first = limiter.acquire().await.unwrap();
    let _second = limiter.acquire().await.unwrap();
    let stats = limiter.stats().await.unwrap();
    assert_eq!(stats.in_flight, Some(2));
    assert_eq!(stats.next_available, Instant::now());
    assert_eq!(stats.quota, None);
    drop(first);
    assert_eq!(limiter.stats().await.unwrap().in_flight, Some(1));
}

/// A GCRA limiter reports its quota and when the next call could start,
/// and counts no running calls.
#[tokio::test(start_paused = true)]
async fn stats_of_a_gcra_limiter_report_its_quota_and_next_start() {
    let limiter = GcraLimiter::new(10, Duration::from_secs(1))
        .unwrap()
        .with_burst(3)
        .unwrap();
    let start = Instant::now();
    drop(limiter.acquire_many(3).await.unwrap());
    let stats = limiter.stats().await.unwrap();
    assert_eq!(stats.in_flight, None);
    assert_eq!(stats.next_available, start + ms(100));
    let quota = stats.quota.expect("a GCRA quota");
    assert_eq!((quota.limit(), quota.remaining()), (3, 0));
    assert_eq!(quota.refill_in(), Some(ms(100)));

    advance(ms(250)).await;
    let quota = limiter.stats().await.unwrap().quota.unwrap();
    assert_eq!(quota.remaining(), 2);
}

/// A composite counts the most calls any of its parts counts, and waits
/// for its latest part.
#[tokio::test(start_paused = true)]
async fn stats_of_a_composite_report_the_largest_part() {
    let (small, large) = (
        ConcurrencyLimiter::new(4).unwrap(),
        ConcurrencyLimiter::new(4).unwrap(),
    );
    let gcra = GcraLimiter::new(10, Duration::from_secs(1)).unwrap();
    let composite = CompositeLimiter::new()
        .with(small.clone())
        .with(gcra.clone())
        .with(large.clone());
    assert_eq!(composite.in_flight(), Some(0));
    let _one = small.acquire().await.unwrap();
    let _three = large.acquire_many(3).await.unwrap();
    let start = Instant::now();
    drop(gcra.acquire().await.unwrap());
    let stats = composite.stats().await.unwrap();
    assert_eq!(stats.in_flight, Some(3));
    assert_eq!(stats.next_available, start + ms(100));
    assert_eq!(stats.quota, None, "a composite states no quota");

    let rate_only = CompositeLimiter::new().with(gcra);
    assert_eq!(rate_only.stats().await.unwrap().in_flight, None);
}
