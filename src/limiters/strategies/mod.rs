//! The strategies that count calls in memory: one module each, with the
//! core the window counters share (calendar windows).

mod concurrency;
mod delay;
mod evenly_spaced;
mod fixed_window;
mod leaky_bucket;
mod null;
mod sliding_window_counter;
mod window;

pub use concurrency::ConcurrencyLimiter;
pub use delay::DelayLimiter;
pub use evenly_spaced::EvenlySpacedRateLimiter;
pub use fixed_window::FixedWindowLimiter;
pub use leaky_bucket::LeakyBucketLimiter;
pub use null::NullLimiter;
pub use sliding_window_counter::SlidingWindowCounterLimiter;
