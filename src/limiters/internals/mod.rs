//! What several limiters are built from: lock-free cells, the lowest
//! recent latency, and the gauges of named limiters.

#[cfg(feature = "metrics")]
pub(crate) mod gauge;
pub(crate) mod latency;
pub(crate) mod quota_cell;
pub(crate) mod seq_cell;
