//! Limiters made of other limiters: all of several ([`CompositeLimiter`]),
//! one per key ([`KeyedLimiter`]), a stand-in while a store is down
//! ([`Failover`]).

mod composite;
mod failover;
mod inline;
mod keyed;

pub use composite::CompositeLimiter;
pub use failover::{Failover, OutagePolicy};
pub use inline::InlineState;
pub use keyed::{FreshLimiter, KeyedLimiter, KeyedLimiterBuilder};
