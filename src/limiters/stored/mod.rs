//! Limiters whose state is in a [store](crate::store), shared across
//! processes: a quota decided per call ([`RateLimiter`]), in batches
//! ([`BatchedLimiter`]), and leased concurrency slots
//! ([`LeasedConcurrencyLimiter`]).

mod batched;
mod leased;
mod rate;

pub(crate) use crate::store::late::spawn_or_warn;
pub use batched::{BatchedLimiter, BatchedLimiterBuilder};
pub use leased::LeasedConcurrencyLimiter;
pub use rate::{RateLimiter, RateLimiterBuilder};
