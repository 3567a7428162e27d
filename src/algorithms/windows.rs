//! What the window limiters ([`FixedWindowLimiter`](crate::FixedWindowLimiter)
//! and [`SlidingWindowCounterLimiter`](crate::SlidingWindowCounterLimiter))
//! share, and the stores' window quotas with them: the validated limit, the
//! window length and the arithmetic of aligned windows.
//!
//! Window `k` covers the nanoseconds `[k·W − phase, (k + 1)·W − phase)` of
//! the clock (counted from its epoch). With a phase of 0 the windows are
//! aligned to the clock's epoch; [`Windows::aligned_to_unix_time`] picks the
//! phase that puts every boundary on a multiple of `W` since the Unix epoch.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::clock::{Clock, duration_nanos};
use crate::error::{ConfigError, CostTooHigh, LimiterError};
use crate::quota_status::search;
use crate::rate::Rate;

/// Checks the `max_executions` per `window` shared by the window limiters.
pub(crate) fn validate(max_executions: u32, window: Duration) -> Result<(), ConfigError> {
    if max_executions == 0 {
        return Err(ConfigError::new(
            "max_executions",
            max_executions,
            "must be at least 1",
        ));
    }
    if window.is_zero() {
        return Err(ConfigError::new(
            "window",
            window,
            "must be longer than zero",
        ));
    }
    Ok(())
}

/// A validated window configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Windows {
    /// The most a window admits.
    max: u32,
    /// `W`, in nanoseconds; at least 1.
    length: u64,
    /// Whether boundaries fall on multiples of `W` in Unix time.
    unix_aligned: bool,
    /// How far the clock's epoch lies into its window, in `[0, W)`.
    phase: u64,
}

impl Windows {
    /// `max_executions` per `window`, aligned to the clock's epoch.
    pub(crate) fn new(max_executions: u32, window: Duration) -> Result<Self, ConfigError> {
        validate(max_executions, window)?;
        Ok(Self {
            max: max_executions,
            length: duration_nanos(window),
            unix_aligned: false,
            phase: 0,
        })
    }

    /// A store's windows: `max_executions` per `window` (validated when its
    /// quota was built; a zero window counts as 1 ns), aligned to the
    /// origin of the store's times, the Unix epoch.
    pub(crate) fn validated(max_executions: u32, window: Duration) -> Self {
        Self {
            max: max_executions,
            length: duration_nanos(window).max(1),
            unix_aligned: true,
            phase: 0,
        }
    }

    /// `rate.count()` per `rate.per()`.
    pub(crate) fn from_rate(rate: Rate) -> Result<Self, ConfigError> {
        Self::new(rate.count(), rate.per())
    }

    /// The same windows for `clock`: a Unix alignment is computed afresh
    /// for its epoch.
    pub(crate) fn for_clock(self, clock: &Clock) -> Self {
        if !self.unix_aligned {
            return self;
        }
        // The Unix time of the clock's epoch: read both clocks once.
        let since_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(duration_nanos)
            .unwrap_or(0);
        let epoch_unix = since_unix.saturating_sub(clock.now_nanos());
        Self {
            phase: epoch_unix % self.length,
            ..self
        }
    }

    /// The same windows with boundaries on multiples of `W` in Unix time,
    /// for `clock`.
    pub(crate) fn aligned_to_unix_time(self, clock: &Clock) -> Self {
        Self {
            unix_aligned: true,
            ..self
        }
        .for_clock(clock)
    }

    pub(crate) fn max(&self) -> u32 {
        self.max
    }

    pub(crate) fn length(&self) -> u64 {
        self.length
    }

    pub(crate) fn window(&self) -> Duration {
        Duration::from_nanos(self.length)
    }

    pub(crate) fn is_unix_aligned(&self) -> bool {
        self.unix_aligned
    }

    /// `Ok` if `cost` fits in one window; else [`CostTooHigh`].
    #[inline]
    pub(crate) fn check(&self, cost: u32) -> Result<(), LimiterError> {
        CostTooHigh::check(cost, self.max)
    }

    /// What `blocked(cost)` (when `cost` units could start, if not at
    /// `now`) says of the limit: how many units could start now, and how
    /// long until more could.
    pub(crate) fn status(
        &self,
        now: u64,
        blocked: impl Fn(u32) -> Option<u64>,
    ) -> (u32, Option<Duration>) {
        let (remaining, at) = search(self.max, blocked);
        (
            remaining,
            at.map(|at| Duration::from_nanos(at.saturating_sub(now))),
        )
    }

    /// The index of the window holding `nanos`.
    #[inline]
    pub(crate) fn index(&self, nanos: u64) -> u64 {
        nanos.saturating_add(self.phase) / self.length
    }

    /// When window `index` begins (0 for a window that began before the
    /// epoch).
    #[inline]
    pub(crate) fn start(&self, index: u64) -> u64 {
        index.saturating_mul(self.length).saturating_sub(self.phase)
    }
}

/// The adjustment of a window grant counted in window `index`: as asked,
/// unless a reset happened in that window or after it (`cleared`), where
/// the grant's units can no longer be told from those counted since: then
/// a grant of nothing in the `current` window, settled to the extra units.
pub(crate) fn refused(
    cleared: Option<u64>,
    current: u64,
    index: u64,
    from: u32,
    to: u32,
) -> (u64, u32, u32) {
    if cleared.is_some_and(|cleared| index <= cleared) {
        (current, 0, to.saturating_sub(from))
    } else {
        (index, from, to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_tile_the_clock() {
        let windows = Windows::new(3, Duration::from_nanos(10)).unwrap();
        assert_eq!(windows.index(0), 0);
        assert_eq!(windows.index(9), 0);
        assert_eq!(windows.index(10), 1);
        assert_eq!(windows.start(1), 10);
    }

    #[test]
    fn a_phase_moves_the_boundaries_earlier() {
        let windows = Windows {
            phase: 3,
            ..Windows::new(3, Duration::from_nanos(10)).unwrap()
        };
        assert_eq!(windows.index(6), 0);
        assert_eq!(windows.index(7), 1);
        assert_eq!(windows.start(1), 7);
        assert_eq!(windows.start(0), 0);
    }
}
