//! The limiting strategies, one module each.

mod composite;
mod concurrency;
mod delay;
mod evenly_spaced;
mod keyed;
mod null;
mod policy_cell;
mod rate;

pub use composite::CompositeLimiter;
pub use concurrency::ConcurrencyLimiter;
pub use delay::DelayLimiter;
pub use evenly_spaced::EvenlySpacedRateLimiter;
pub use keyed::{KeyedLimiter, KeyedLimiterBuilder};
pub use null::NullLimiter;
pub use rate::{RateLimiter, RateLimiterBuilder};
