//! Changing a limit at runtime: the new limit applies from the next decision,
//! and what is running or recorded is kept.

mod common;

use std::time::Duration;

use common::secs;
use tokio::time::Instant;
use tower_limits::limiter::Admission;
use tower_limits::store::Quota;
use tower_limits::{ConcurrencyLimiter, DelayLimiter, Limiter, LimiterExt, Permit, RateLimiter};

async fn granted(limiter: &impl Limiter) -> Option<Permit> {
    match limiter
        .try_acquire()
        .await
        .expect("in-memory limiters do not fail")
    {
        Admission::Granted(permit) => Some(permit),
        Admission::Denied(_) => None,
    }
}

#[tokio::test(start_paused = true)]
async fn lowering_concurrency_keeps_running_calls_and_admits_none_until_below() {
    let limiter = ConcurrencyLimiter::new(3).unwrap();
    let mut running = vec![
        granted(&limiter).await.unwrap(),
        granted(&limiter).await.unwrap(),
        granted(&limiter).await.unwrap(),
    ];
    limiter.set_max_concurrent(1).unwrap();
    assert_eq!(limiter.running(), 3, "running calls keep their slots");
    running.pop();
    assert!(granted(&limiter).await.is_none(), "2 running, max 1");
    running.pop();
    assert!(granted(&limiter).await.is_none(), "1 running, max 1");
    running.pop();
    assert!(granted(&limiter).await.is_some());
}

#[tokio::test(start_paused = true)]
async fn raising_concurrency_wakes_a_waiting_caller_at_once() {
    let limiter = ConcurrencyLimiter::new(1).unwrap();
    let _running = granted(&limiter).await.unwrap();
    let waiter = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.acquire().await.map(|_| Instant::now()) })
    };
    tokio::task::yield_now().await;
    let raised_at = Instant::now();
    limiter.set_max_concurrent(2).unwrap();
    assert_eq!(waiter.await.unwrap().unwrap(), raised_at);
}

#[tokio::test(start_paused = true)]
async fn an_invalid_new_maximum_is_refused_and_the_old_one_kept() {
    let limiter = ConcurrencyLimiter::new(2).unwrap();
    assert_eq!(
        limiter.set_max_concurrent(0).unwrap_err().field(),
        "max_concurrent"
    );
    assert_eq!(limiter.max_concurrent(), 2);
    // A rate limiter's new quota is validated before it exists.
    assert_eq!(
        Quota::sliding_log(0, secs(1)).unwrap_err().field(),
        "max_executions"
    );
    assert_eq!(
        Quota::sliding_log(5, Duration::ZERO).unwrap_err().field(),
        "window"
    );
}

/// A sliding log quota without a backoff.
fn log(max: u32, window: Duration) -> Quota {
    Quota::sliding_log(max, window).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_new_rate_limit_counts_the_starts_already_recorded() {
    let limiter = RateLimiter::builder("r", 4, secs(10))
        .without_backoff()
        .build()
        .unwrap();
    for _ in 0..3 {
        drop(granted(&limiter).await.unwrap());
    }
    limiter.set_quota(log(2, secs(10)));
    assert!(granted(&limiter).await.is_none(), "3 recorded, new max 2");
    limiter.set_quota(log(5, secs(10)));
    assert!(granted(&limiter).await.is_some());
    assert!(granted(&limiter).await.is_some());
    assert!(granted(&limiter).await.is_none(), "5 recorded, max 5");
}

#[tokio::test(start_paused = true)]
async fn a_shorter_window_frees_starts_sooner() {
    let start = Instant::now();
    let limiter = RateLimiter::builder("r", 1, secs(60))
        .without_backoff()
        .build()
        .unwrap();
    drop(granted(&limiter).await.unwrap());
    limiter.set_quota(log(1, secs(5)));
    assert_eq!(
        limiter.next_available_time().await.unwrap(),
        start + secs(5)
    );
}

#[tokio::test(start_paused = true)]
async fn raising_a_rate_limit_wakes_a_waiting_caller() {
    let limiter = RateLimiter::builder("r", 1, secs(60))
        .without_backoff()
        .build()
        .unwrap();
    drop(granted(&limiter).await.unwrap());
    let waiter = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.acquire().await.map(|_| Instant::now()) })
    };
    tokio::task::yield_now().await;
    let raised_at = Instant::now();
    limiter.set_quota(log(2, secs(60)));
    assert_eq!(waiter.await.unwrap().unwrap(), raised_at);
}

#[tokio::test(start_paused = true)]
async fn a_new_delay_applies_from_the_next_start() {
    let start = Instant::now();
    let limiter = DelayLimiter::new(secs(1)).unwrap();
    drop(granted(&limiter).await.unwrap());
    limiter.set_delay(secs(3)).unwrap();
    // The gap after the last start stays 1 s; the next one opens 3 s.
    drop(limiter.acquire().await.unwrap());
    assert_eq!(Instant::now(), start + secs(1));
    drop(limiter.acquire().await.unwrap());
    assert_eq!(Instant::now(), start + secs(4));
}

/// GCRA and the token bucket as a `RateLimiter` in memory, paced. A new
/// rate keeps what was spent, in cells: the TAT's lead over now is rescaled
/// to the new interval (every store's rule), so a change never hands out a
/// fresh burst, and a slower rate never lets the next call come early.
mod gcra_and_token_bucket {
    use tower_limits::error::{ConfigError, CostTooHigh};

    use super::*;
    use crate::common::ms;

    /// GCRA, `count` per `period`, `burst` at once, paced.
    fn gcra(count: u32, period: Duration, burst: u32) -> Result<Quota, ConfigError> {
        Quota::gcra(count, period)?
            .with_burst(burst)?
            .with_pacing_tolerance()
    }

    fn remaining(limiter: &impl Limiter) -> u64 {
        let status = limiter.quota_status().into_ready();
        let status = status.expect("in memory: at once").unwrap();
        status.expect("a rate limit has a quota").remaining()
    }

    /// One a second, its cell taken, a caller waiting for the next, 100 ms
    /// on: the start, the limiter, and when the waiter passes.
    async fn one_a_second_spent_and_a_waiter()
    -> (Instant, RateLimiter, tokio::task::JoinHandle<Instant>) {
        let start = Instant::now();
        let limiter = RateLimiter::in_memory(gcra(1, secs(1), 1).unwrap());
        drop(granted(&limiter).await.unwrap());
        let waiter = {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.acquire().await.map(|_| Instant::now()).unwrap() })
        };
        tokio::time::sleep(ms(100)).await;
        (start, limiter, waiter)
    }

    /// 900 ms of the old second left, a tenth of it at ten a second: the
    /// waiter is woken and passes at 190 ms.
    #[tokio::test(start_paused = true)]
    async fn a_faster_rate_rescales_the_wait_and_wakes_the_waiter() {
        let (start, limiter, waiter) = one_a_second_spent_and_a_waiter().await;
        limiter.set_quota(gcra(10, secs(1), 1).unwrap());
        assert_eq!(waiter.await.unwrap(), start + ms(190));
        drop(limiter.acquire().await.unwrap());
        assert_eq!(Instant::now(), start + ms(290), "the new interval");
    }

    /// A larger burst makes room at once: the waiter is woken and passes,
    /// and what it leaves is the new burst less the cells held (the old
    /// cell's 900 ms, rescaled to 90 ms, and the waiter's 100 ms).
    #[tokio::test(start_paused = true)]
    async fn a_larger_burst_wakes_the_waiter_with_the_room_it_makes() {
        let (start, limiter, waiter) = one_a_second_spent_and_a_waiter().await;
        limiter.set_quota(gcra(10, secs(1), 10).unwrap());
        assert_eq!(waiter.await.unwrap(), start + ms(100));
        assert_eq!(remaining(&limiter), 8, "10 less 190 ms of cells held");
    }

    /// Five cells of 100 ms spent; at one a second they are five seconds:
    /// the next call waits for the first of them, and nothing is left.
    #[tokio::test(start_paused = true)]
    async fn a_slower_rate_stretches_the_cells_already_spent() {
        let start = Instant::now();
        let limiter = RateLimiter::in_memory(gcra(10, secs(1), 5).unwrap());
        for _ in 0..5 {
            drop(granted(&limiter).await.unwrap());
        }
        limiter.set_quota(gcra(1, secs(1), 5).unwrap());
        assert_eq!(remaining(&limiter), 0, "never a fresh burst");
        let next = limiter.acquire().await.map(|_| Instant::now()).unwrap();
        assert_eq!(next, start + secs(1));
        assert_eq!(remaining(&limiter), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_smaller_bucket_keeps_the_tokens_it_is_missing() {
        let bucket = RateLimiter::in_memory(
            Quota::token_bucket(10, 10, secs(1))
                .and_then(Quota::with_pacing_tolerance)
                .unwrap(),
        );
        let _batch = bucket.try_acquire_many(7).await.unwrap();
        // 10 a second, 8 at once.
        let smaller = Quota::token_bucket(8, 10, secs(1)).unwrap();
        bucket.set_quota(smaller.with_pacing_tolerance().unwrap());
        // 7 missing of 8: one left, and 7 more over 700 ms.
        assert_eq!(remaining(&bucket), 1);
        tokio::time::advance(ms(700)).await;
        assert_eq!(remaining(&bucket), 8);
        let error = bucket.try_acquire_many(9).await.unwrap_err();
        let too_high = error.get_ref().downcast_ref::<CostTooHigh>().unwrap();
        assert_eq!(too_high.capacity(), 8);
    }

    /// A new quota is validated before it exists: an invalid one never
    /// reaches the limiter, which keeps its own.
    #[tokio::test(start_paused = true)]
    async fn an_invalid_new_limit_is_refused_and_the_old_one_kept() {
        let limiter = RateLimiter::in_memory(gcra(10, secs(1), 1).unwrap());
        let error = gcra(10, Duration::ZERO, 1).unwrap_err();
        assert_eq!(error.field(), "period");
        assert_eq!(limiter.quota(), gcra(10, secs(1), 1).unwrap());
        assert_eq!(limiter.quota().window(), ms(100), "one cell of 100 ms");
        let bucket = RateLimiter::in_memory(Quota::token_bucket(4, 1, secs(1)).unwrap());
        assert_eq!(gcra(1, secs(1), 0).unwrap_err().field(), "burst");
        assert_eq!(bucket.quota().capacity(), 4);
    }
}
