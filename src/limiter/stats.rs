//! [`LimiterStats`]: where a limiter stands now, read in one call
//! ([`LimiterExt::stats`](super::LimiterExt::stats)).

use tokio::time::Instant;

use crate::quota_status::QuotaStatus;

/// A snapshot of a limiter for callers without a metrics stack: when it
/// would admit the next call, how many calls it counts as running, and its
/// quota. Made by [`LimiterExt::stats`](super::LimiterExt::stats) from
/// [`next_available_time`](super::Limiter::next_available_time),
/// [`in_flight`](super::Limiter::in_flight) and
/// [`quota_status`](super::Limiter::quota_status).
///
/// A limiter counts no decisions: how many calls were granted, refused or
/// waited is counted by a named layer
/// ([`LimitLayer::name`](crate::LimitLayer::name), then its `stats()`).
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::{ConcurrencyLimiter, LimiterExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = ConcurrencyLimiter::new(2)?;
/// let _running = limiter.acquire().await?;
/// let stats = limiter.stats().await?;
/// assert_eq!(stats.next_available, Instant::now()); // a slot is free
/// assert_eq!(stats.in_flight, Some(1));
/// assert_eq!(stats.quota, None); // no quota of units per window
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimiterStats {
    /// The earliest instant a new call could start, as far as the limiter
    /// can tell (see [`next_available_time`](super::Limiter::next_available_time)).
    pub next_available: Instant,
    /// How many calls the limiter counts as running; `None` if it does not
    /// count them (see [`in_flight`](super::Limiter::in_flight)).
    pub in_flight: Option<u64>,
    /// Its quota and how much of it is left; `None` for a limiter without a
    /// quota of units per window (see
    /// [`quota_status`](super::Limiter::quota_status)).
    pub quota: Option<QuotaStatus>,
}
