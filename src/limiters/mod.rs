//! The limiting strategies, one module each.

mod adaptive;
mod adaptive_concurrency;
mod batched;
mod cell;
mod composite;
mod concurrency;
mod delay;
mod evenly_spaced;
mod failover;
mod fixed_window;
mod gcra;
mod keyed;
mod latency;
mod leaky_bucket;
mod leased;
mod null;
mod policy_cell;
mod rate;
mod seq_cell;
mod shared;
mod sliding_window_counter;
mod token_bucket;
mod window;

#[cfg(feature = "http")]
pub(crate) use adaptive::Steer;
pub use adaptive::{AdaptiveRateLimiter, AdaptiveRateLimiterBuilder, Pacer, SharedPacer};
pub use adaptive_concurrency::{AdaptiveConcurrencyLimiter, AdaptiveConcurrencyLimiterBuilder};
pub use batched::{BatchedLimiter, BatchedLimiterBuilder};
pub use composite::CompositeLimiter;
pub use concurrency::ConcurrencyLimiter;
pub use delay::DelayLimiter;
pub use evenly_spaced::EvenlySpacedRateLimiter;
pub use failover::{Failover, OutagePolicy};
pub use fixed_window::FixedWindowLimiter;
pub use gcra::{GcraLimiter, GcraState};
pub use keyed::{FreshLimiter, KeyedLimiter, KeyedLimiterBuilder};
pub use leaky_bucket::LeakyBucketLimiter;
pub use leased::LeasedConcurrencyLimiter;
pub use null::NullLimiter;
pub use rate::{RateLimiter, RateLimiterBuilder};
pub use shared::SharedLimiter;
pub use sliding_window_counter::SlidingWindowCounterLimiter;
pub use token_bucket::TokenBucketLimiter;

/// Checks the `max_executions` per `window` shared by the window limiters.
pub(crate) fn validate_window(
    max_executions: u32,
    window: std::time::Duration,
) -> Result<(), crate::error::ConfigError> {
    use crate::error::ConfigError;
    if max_executions == 0 {
        return Err(ConfigError::new(
            "max_executions",
            max_executions,
            "must be at least 1",
        ));
    }
    if window.is_zero() {
        return Err(ConfigError::new(
            "window",
            window,
            "must be longer than zero",
        ));
    }
    Ok(())
}
