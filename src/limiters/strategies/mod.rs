//! The strategies that count calls in memory: one module each, with the
//! cores the counting ones share (GCRA cells, calendar windows).

mod cell;
mod concurrency;
mod delay;
mod evenly_spaced;
mod fixed_window;
mod gcra;
mod leaky_bucket;
mod null;
mod sliding_window_counter;
mod window;

pub(crate) use cell::{grant, quota_status, too_high};
pub use concurrency::ConcurrencyLimiter;
pub use delay::DelayLimiter;
pub use evenly_spaced::EvenlySpacedRateLimiter;
pub use fixed_window::FixedWindowLimiter;
pub use gcra::{GcraLimiter, GcraState};
pub use leaky_bucket::LeakyBucketLimiter;
pub use null::NullLimiter;
pub use sliding_window_counter::SlidingWindowCounterLimiter;
