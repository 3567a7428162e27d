//! Where a [`RateLimiter`](crate::RateLimiter) keeps its sliding window.
//!
//! A store answers one atomic question per call, "may this key start a call
//! now, under this policy?", with a grant or "not before T"
//! ([`RateLimiterStore::acquire`]). It never splits a decision into a read
//! and a later write, so it can live in a shared server and still hold the
//! limit across processes. The seed's storage operations (record an
//! execution, count executions, the oldest execution at an offset, the next
//! available time, clear, set up) are there too.
//!
//! Times cross the trait as [`tokio::time::Instant`]s of this process: a
//! store with its own clock (a database's) converts at the boundary, so
//! clock skew between machines never enters a decision.
//!
//! [`MemoryStore`] is the default and needs no server.

mod memory;

use std::time::Duration;

use tokio::time::Instant;

use crate::error::LimiterError;
use crate::limiter::LimiterFuture;

pub use memory::{MemoryKey, MemoryStore};

/// The backing state of a sliding-window [`RateLimiter`](crate::RateLimiter).
///
/// Each method acts on one key (a named limit) in one atomic step. The
/// in-memory implementation is [`MemoryStore`].
pub trait RateLimiterStore: Send + Sync + 'static {
    /// A key prepared for this store (hashed, namespaced, or resolved to
    /// its state), made once per limiter by [`key`](RateLimiterStore::key).
    type Key: Send + Sync + 'static;

    /// Prepares the key for the limit called `name`. Limiters with the same
    /// name on the same store share one window.
    fn key(&self, name: &str) -> Self::Key;

    /// Creates whatever the store needs (tables, scripts); the seed's
    /// `setupDatabase`. Idempotent.
    fn setup(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }

    /// The atomic decision: drops starts older than the window; denies until
    /// the pause ends or the oldest start leaves the window when it is full;
    /// otherwise records a start, resets the backoff, and, if the window is
    /// now full, applies the policy's backoff (see [`Backoff`]) using
    /// `jitter` (uniform in `[0, 1)`).
    fn acquire<'a>(
        &'a self,
        key: &'a Self::Key,
        policy: &'a WindowPolicy,
        jitter: f64,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>>;

    /// Records a start whether or not the window had room, then applies the
    /// backoff if the window is full (the seed's `recordJobStart`).
    fn record_execution<'a>(
        &'a self,
        key: &'a Self::Key,
        policy: &'a WindowPolicy,
        jitter: f64,
    ) -> LimiterFuture<'a, Result<(), LimiterError>>;

    /// Erases the start recorded with `ticket`. If the window is then no
    /// longer full, the last backoff (set because it was full) is undone,
    /// unless a pause was set from outside since.
    fn refund<'a>(
        &'a self,
        key: &'a Self::Key,
        policy: &'a WindowPolicy,
        ticket: u64,
    ) -> LimiterFuture<'a, Result<(), LimiterError>>;

    /// The atomic peek: `None` if [`acquire`](RateLimiterStore::acquire)
    /// would grant now, otherwise the instant it names (the later of the
    /// pause and the full window freeing a place). Records nothing.
    fn peek<'a>(
        &'a self,
        key: &'a Self::Key,
        policy: &'a WindowPolicy,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>>;

    /// How many starts fall within the last `window`.
    fn execution_count<'a>(
        &'a self,
        key: &'a Self::Key,
        window: Duration,
    ) -> LimiterFuture<'a, Result<usize, LimiterError>>;

    /// Among the starts within the last `window`, oldest first, the one at
    /// position `offset`, if any.
    fn oldest_execution_at_offset<'a>(
        &'a self,
        key: &'a Self::Key,
        window: Duration,
        offset: usize,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>>;

    /// The end of the pause in force, if any.
    fn next_available<'a>(
        &'a self,
        key: &'a Self::Key,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>>;

    /// Extends the pause to `at`; never shortens it.
    fn set_next_available<'a>(
        &'a self,
        key: &'a Self::Key,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>>;

    /// Forgets every start, the pause and the backoff of `key`.
    fn clear<'a>(&'a self, key: &'a Self::Key) -> LimiterFuture<'a, Result<(), LimiterError>>;
}

/// A store's answer to [`RateLimiterStore::acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowDecision {
    /// A start was recorded; `ticket` identifies it for
    /// [`RateLimiterStore::refund`].
    Granted {
        /// Identifies the recorded start.
        ticket: u64,
    },
    /// The window is full or a pause is in force until `retry_at`.
    Denied {
        /// The earliest instant at which a start may be granted.
        retry_at: Instant,
    },
}

/// The rules of a sliding window: at most `max_executions` starts in any
/// `window`, with an optional [`Backoff`]. Built by
/// [`RateLimiter::builder`](crate::RateLimiter::builder), which validates it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowPolicy {
    pub(crate) max_executions: usize,
    pub(crate) window: Duration,
    pub(crate) backoff: Option<Backoff>,
}

impl WindowPolicy {
    /// Most starts in any window.
    pub fn max_executions(&self) -> usize {
        self.max_executions
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The backoff applied when the window fills, if any.
    pub fn backoff(&self) -> Option<&Backoff> {
        self.backoff.as_ref()
    }
}

/// Exponential backoff with full jitter, applied when a start fills the
/// window (the seed's rule):
///
/// ```text
/// backoff       = min(current * multiplier, max)
/// jittered      = backoff + random(0, backoff)
/// next_available = max(now + jittered, oldest start in the window + window)
/// ```
///
/// `current` starts at `initial` and returns to it whenever a call is
/// admitted; starts recorded while the window is already full escalate it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    pub(crate) initial: Duration,
    pub(crate) multiplier: f64,
    pub(crate) max: Duration,
}

impl Backoff {
    /// The delay `current` starts from (default 1 s).
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The factor applied on each escalation (default 2).
    pub fn multiplier(&self) -> f64 {
        self.multiplier
    }

    /// The cap (default 10 minutes).
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The escalated delay after `current` (both in nanoseconds).
    pub(crate) fn escalate(&self, current_nanos: u64) -> u64 {
        let next = current_nanos as f64 * self.multiplier;
        // `as` saturates and maps NaN to 0; the multiplier is validated finite.
        (next as u64).min(crate::clock::duration_nanos(self.max))
    }

    /// `delay` stretched by `jitter` in `[0, 1)`: `delay + jitter * delay`.
    pub(crate) fn jittered(delay_nanos: u64, jitter: f64) -> u64 {
        let extra = (delay_nanos as f64 * jitter.clamp(0.0, 1.0)) as u64;
        delay_nanos.saturating_add(extra)
    }
}
