//! Limiters made of other limiters: all of several ([`CompositeLimiter`]),
//! one per key ([`KeyedLimiter`]), a stand-in while a store is down
//! ([`Failover`]).

mod composite;
mod failover;
mod keyed;

pub use composite::CompositeLimiter;
pub use failover::{Failover, OutagePolicy};
pub use keyed::{FreshLimiter, KeyedLimiter, KeyedLimiterBuilder};
