//! The strategies that count calls in memory with a state of their own
//! (the counting algorithms of a [`Quota`](crate::store::Quota) run in a
//! store, even in memory: [`RateLimiter`](crate::RateLimiter)): one module
//! each.

mod concurrency;
mod delay;
mod evenly_spaced;
mod leaky_bucket;
mod null;

pub use concurrency::ConcurrencyLimiter;
pub use delay::DelayLimiter;
pub use evenly_spaced::EvenlySpacedRateLimiter;
pub use leaky_bucket::LeakyBucketLimiter;
pub use null::NullLimiter;
