//! Every limiter, with its builder and companions.
//!
//! The limiters themselves are also at the crate root
//! ([`RateLimiter`], [`KeyedLimiter`]...);
//! this module adds the names a user needs only to store a builder in a
//! field or to extend a limiter: the builders, the [`Pacer`] an adaptive
//! limiter paces with, and the [`FreshLimiter`] and [`InlineState`] of a
//! keyed one.
//!
//! ```
//! use std::time::Duration;
//! use tower_limits::limiters::RateLimiterBuilder;
//! use tower_limits::RateLimiter;
//! use tower_limits::store::MemoryStore;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let builder: RateLimiterBuilder<MemoryStore> =
//!     RateLimiter::builder("mail-api", 10, Duration::from_secs(1));
//! let limiter = builder.without_backoff().build()?;
//! # drop(limiter);
//! # Ok(())
//! # }
//! ```

mod adaptive;
mod adaptive_concurrency;
mod combinators;
mod internals;
mod stored;
mod strategies;

pub use adaptive::{AdaptiveRateLimiter, AdaptiveRateLimiterBuilder, Pacer, SharedPacer};
pub use adaptive_concurrency::{AdaptiveConcurrencyLimiter, AdaptiveConcurrencyLimiterBuilder};
pub use combinators::{
    CompositeLimiter, Failover, FreshLimiter, InlineState, KeyedLimiter, KeyedLimiterBuilder,
    OutagePolicy,
};
pub use stored::{
    BatchedLimiter, BatchedLimiterBuilder, LeasedConcurrencyLimiter, RateLimiter,
    RateLimiterBuilder,
};
pub use strategies::{
    ConcurrencyLimiter, DelayLimiter, EvenlySpacedRateLimiter, LeakyBucketLimiter, NullLimiter,
};

/// The pacing tolerance on each pacer, on paused time: a late start keeps
/// its slot or takes the one [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE)
/// before it, never an earlier one; an idle pacer counts from now.
#[cfg(test)]
mod pacing_tests {
    use std::time::Duration;

    use tokio::time::{Instant, advance};

    use super::*;
    use crate::limiter::{Admission, Limiter};
    use crate::store::{MemoryStore, Quota};

    const SECOND: Duration = Duration::from_secs(1);

    /// Walks a pacer of 1,000 a second (slots 1 ms apart) through late
    /// starts; `take` makes one attempt and says when it was denied until.
    async fn paces(take: impl Fn() -> Option<Instant>) {
        let start = Instant::now();
        let at = |millis: f64| start + Duration::from_secs_f64(millis / 1_000.0);
        let mut now = 0.0;
        // Advances to `to` ms, then expects `grants` at once and a denial
        // until `next` ms.
        let mut step = async |to: f64, grants: usize, next: f64| {
            advance(at(to) - at(now)).await;
            now = to;
            for grant in 0..grants {
                assert_eq!(take(), None, "at {to} ms, grant {grant}");
            }
            assert_eq!(take(), Some(at(next)), "at {to} ms, after {grants}");
        };
        step(0.0, 1, 1.0).await;
        // 1.5 ms late for the slot at 1 ms (within the 2 ms tolerance):
        // it takes that slot, and the one at 2 ms has come too.
        step(2.5, 2, 3.0).await;
        // 5 ms late for the slot at 3 ms: it takes the slot 2 ms before it
        // (6 ms), then those at 7 and 8 ms; 1 + 2 ms of slots at once.
        step(8.0, 3, 9.0).await;
        // 20 ms late: idle, from now.
        step(29.0, 1, 30.0).await;
    }

    fn denied_until(admission: Admission) -> Option<Instant> {
        match admission {
            Admission::Granted(_) => None,
            Admission::Denied(denial) => denial.retry_at(),
        }
    }

    fn take(limiter: &impl Limiter) -> Option<Instant> {
        let answer = limiter.try_acquire().into_ready();
        denied_until(answer.expect("answered at once").expect("no error"))
    }

    /// A store's GCRA and token bucket with the pacing tolerance, on the
    /// lock-free open line and under the lock (a look closes the line).
    #[tokio::test(start_paused = true)]
    async fn a_paced_quota_keeps_a_late_slot_in_a_store() {
        let gcra = Quota::gcra(1_000, SECOND).unwrap();
        let bucket = Quota::token_bucket(1, 1_000, SECOND).unwrap();
        for quota in [gcra, bucket] {
            let paced = quota.with_pacing_tolerance().unwrap();
            let limiter = RateLimiter::new(MemoryStore::new(), "paced", paced);
            paces(|| take(&limiter)).await;
            let limiter = RateLimiter::new(MemoryStore::new(), "closed", paced);
            paces(|| {
                limiter.peek(1).into_ready().ok();
                take(&limiter)
            })
            .await;
        }
    }

    /// Without the tolerance a late start counts from when it came: the
    /// slot after it is a whole interval later.
    #[tokio::test(start_paused = true)]
    async fn a_strict_quota_counts_a_late_start_from_now() {
        let quota = Quota::gcra(1_000, SECOND).unwrap();
        let limiter = RateLimiter::new(MemoryStore::new(), "strict", quota);
        let start = Instant::now();
        assert_eq!(take(&limiter), None);
        advance(Duration::from_micros(2_500)).await;
        assert_eq!(take(&limiter), None);
        let next = start + Duration::from_micros(3_500);
        assert_eq!(take(&limiter), Some(next));
    }

    #[tokio::test(start_paused = true)]
    async fn keyed_inline_gcra_keeps_a_late_slot() {
        let quota = Quota::gcra(1_000, SECOND).unwrap();
        let template = RateLimiter::in_memory(quota.with_pacing_tolerance().unwrap());
        let keyed = KeyedLimiter::of(template).build().unwrap();
        let take = || {
            let answer = keyed.try_acquire(&"key").into_ready();
            denied_until(answer.expect("answered at once").expect("no error"))
        };
        paces(take).await;
    }

    #[tokio::test(start_paused = true)]
    async fn evenly_spaced_keeps_a_late_slot() {
        let limiter = EvenlySpacedRateLimiter::new(1_000, SECOND).unwrap();
        paces(|| take(&limiter)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn leaky_bucket_keeps_a_late_slot() {
        let limiter = LeakyBucketLimiter::new(1_000, SECOND, 1).unwrap();
        paces(|| take(&limiter)).await;
    }
}
