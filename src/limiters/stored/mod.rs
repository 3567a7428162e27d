//! Limiters whose state is in a [store](crate::store), shared across
//! processes: a quota decided per call ([`SharedLimiter`]), in batches
//! ([`BatchedLimiter`]), and leased concurrency slots
//! ([`LeasedConcurrencyLimiter`]).

mod batched;
mod leased;
mod shared;

pub use batched::{BatchedLimiter, BatchedLimiterBuilder};
pub use leased::LeasedConcurrencyLimiter;
pub use shared::SharedLimiter;
pub(crate) use shared::spawn_or_warn;
