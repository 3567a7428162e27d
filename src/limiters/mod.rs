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
#[cfg(feature = "metrics")]
mod gauge;
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
pub use cell::InlineState;
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
