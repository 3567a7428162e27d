//! The sliding log's pause and backoff, behind
//! [`RateLimiter`](crate::RateLimiter)'s stores: when a start fills the
//! window, nothing starts again before the window frees a place and a
//! backoff (the classic limiter's, growing on each fill) has passed; a
//! grant starts the backoff over, and a refund that unfills the window
//! undoes the last escalation.
//!
//! The log of starts itself is the store's: a [`StartLog`](crate::start_log)
//! in memory, rows in SQLite. Times are in a unit of the caller's (`unit`
//! nanoseconds each: 1 in memory, 1,000 in SQLite); delays are computed in
//! nanoseconds and truncated to the unit.

use std::time::Duration;

use crate::clock::duration_nanos;
use crate::error::ConfigError;

/// The pause and backoff of one log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pause {
    /// No start before this (0: none).
    pub(crate) next_available: u64,
    /// The current backoff; `None` means the policy's initial delay.
    pub(crate) backoff: Option<u64>,
    /// What the last backoff replaced (`next_available`, `backoff`), so a
    /// refund that unfills the window can undo it.
    pub(crate) escalation: Option<(u64, Option<u64>)>,
}

impl Pause {
    /// When a start may begin, if not at `now`: the later of the pause and
    /// `frees_at`, when the window has room for it.
    pub(crate) fn blocked_until(&self, now: u64, frees_at: Option<u64>) -> Option<u64> {
        let paused = (now < self.next_available).then_some(self.next_available);
        // `None` orders first: the later of the two, if either.
        paused.max(frees_at)
    }

    /// A grant: the next fill backs off from the initial delay again.
    pub(crate) fn granted(&mut self) {
        self.backoff = None;
    }

    /// Backs off after a start at `now` filled the window, which frees a
    /// place at `frees_at`: the delay grows by the policy's multiplier (up
    /// to its cap), stretched by `jitter`.
    pub(crate) fn escalate(
        &mut self,
        now: u64,
        frees_at: u64,
        backoff: &Backoff,
        jitter: f64,
        unit: u64,
    ) {
        let unit = unit.max(1);
        self.escalation = Some((self.next_available, self.backoff));
        let current = self.backoff.map_or_else(
            || duration_nanos(backoff.initial),
            |delay| delay.saturating_mul(unit),
        );
        let delay = backoff.escalate(current);
        self.backoff = Some(delay / unit);
        let ends = now.saturating_add(Backoff::jittered(delay, jitter) / unit);
        self.next_available = self.next_available.max(ends).max(frees_at);
    }

    /// Undoes the last backoff, if one is recorded (a refund unfilled the
    /// window).
    pub(crate) fn undo_escalation(&mut self) {
        if let Some((next_available, backoff)) = self.escalation.take() {
            self.next_available = next_available;
            self.backoff = backoff;
        }
    }

    /// Nothing starts before `until` (a pause never shortens), and the
    /// pause is no escalation a refund may undo.
    pub(crate) fn pause_until(&mut self, until: u64) {
        self.next_available = self.next_available.max(until);
        self.escalation = None;
    }
}

/// Exponential backoff with full jitter, applied when a start fills the
/// window (the classic rule):
///
/// ```text
/// backoff       = min(current * multiplier, max)
/// jittered      = backoff + random(0, backoff)
/// next_available = max(now + jittered, oldest start in the window + window)
/// ```
///
/// `current` starts at `initial` and returns to it whenever a call is
/// admitted; starts recorded while the window is already full escalate it.
/// The first backoff is therefore `initial * multiplier`.
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::limiter::Admission;
/// use tower_limits::{Limiter, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RateLimiter::builder("api", 1, Duration::from_secs(1))
///     .initial_backoff(Duration::from_secs(4))
///     .backoff_multiplier(3.0)
///     .max_backoff(Duration::from_secs(10))
///     .build()?;
///
/// let start = Instant::now();
/// limiter.try_acquire().await?; // fills the window
/// // min(4 s × 3, 10 s) = 10 s, stretched by a jitter of up to as much again.
/// let Admission::Denied(denial) = limiter.try_acquire().await? else { unreachable!() };
/// let wait = denial.retry_at().expect("a backoff") - start;
/// assert!(wait >= Duration::from_secs(10) && wait < Duration::from_secs(20));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    pub(crate) initial: Duration,
    pub(crate) multiplier: f64,
    pub(crate) max: Duration,
}

/// A jitter for one escalation in `[0, 1)`: drawn at random with a backoff,
/// else 0.
pub(crate) fn jitter(backoff: Option<&Backoff>) -> f64 {
    if backoff.is_some() {
        fastrand::f64()
    } else {
        0.0
    }
}

// The multiplier is validated finite, so equality is reflexive.
impl Eq for Backoff {}

impl Backoff {
    /// The seed's: 1 s, doubling on each fill, up to 10 minutes.
    pub(crate) const SEED: Backoff = Backoff {
        initial: Duration::from_secs(1),
        multiplier: 2.0,
        max: Duration::from_secs(600),
    };

    /// `Ok` if the delay is longer than zero, the multiplier a finite
    /// number of at least 1 and the cap at least the delay; else a
    /// [`ConfigError`] naming the builder's method.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.initial.is_zero() {
            return Err(ConfigError::new(
                "initial_backoff",
                self.initial,
                "must be longer than zero (use `without_backoff` for none)",
            ));
        }
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0) {
            return Err(ConfigError::new(
                "backoff_multiplier",
                self.multiplier,
                "must be a finite number of at least 1",
            ));
        }
        if self.max < self.initial {
            return Err(ConfigError::new(
                "max_backoff",
                self.max,
                "must be at least `initial_backoff`",
            ));
        }
        Ok(())
    }

    /// The delay `current` starts from (default 1 s).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(1)).build()?;
    /// let initial = limiter.quota().backoff().map(|backoff| backoff.initial());
    /// assert_eq!(initial, Some(Duration::from_secs(1)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The factor applied on each escalation (default 2).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(1)).build()?;
    /// let multiplier = limiter.quota().backoff().map(|backoff| backoff.multiplier());
    /// assert_eq!(multiplier, Some(2.0));
    /// # Ok(())
    /// # }
    /// ```
    pub fn multiplier(&self) -> f64 {
        self.multiplier
    }

    /// The cap (default 10 minutes).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(1))
    ///     .max_backoff(Duration::from_secs(90))
    ///     .build()?;
    /// let max = limiter.quota().backoff().map(|backoff| backoff.max());
    /// assert_eq!(max, Some(Duration::from_secs(90)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The escalated delay after `current` (both in nanoseconds).
    pub(crate) fn escalate(&self, current_nanos: u64) -> u64 {
        let next = current_nanos as f64 * self.multiplier;
        // `as` saturates and maps NaN to 0; the multiplier is validated finite.
        (next as u64).min(duration_nanos(self.max))
    }

    /// `delay` stretched by `jitter` in `[0, 1)`: `delay + jitter * delay`.
    pub(crate) fn jittered(delay_nanos: u64, jitter: f64) -> u64 {
        let extra = (delay_nanos as f64 * jitter.clamp(0.0, 1.0)) as u64;
        delay_nanos.saturating_add(extra)
    }
}
