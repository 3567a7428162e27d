//! What the window quotas ([`Quota::fixed_window`](crate::store::Quota::fixed_window)
//! and [`Quota::sliding_window_counter`](crate::store::Quota::sliding_window_counter))
//! share in every store: the validated limit, the window length and the
//! arithmetic of windows aligned to Unix time.
//!
//! Window `k` covers the nanoseconds `[k·W − phase, (k + 1)·W − phase)` of
//! the store's time. The Redis, PostgreSQL and SQLite stores count time
//! from the Unix epoch (a phase of 0); a memory store counts it from its
//! clock's epoch, and [`Windows::placed`] picks the phase that puts every
//! boundary on a multiple of `W` since the Unix epoch there too.

use std::time::Duration;

use crate::clock::duration_nanos;
use crate::error::ConfigError;

/// Checks the `max_executions` per `window` of a window quota.
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

/// A validated window configuration, placed on a store's time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Windows {
    /// The most a window admits.
    max: u32,
    /// `W`, in nanoseconds; at least 1.
    length: u64,
    /// How far the store's origin lies into its window, in `[0, W)`.
    phase: u64,
}

impl Windows {
    /// A store's windows: `max_executions` per `window` (validated when its
    /// quota was built; a zero window counts as 1 ns), on times counted from
    /// the Unix epoch.
    pub(crate) fn validated(max_executions: u32, window: Duration) -> Self {
        Self {
            max: max_executions,
            length: duration_nanos(window).max(1),
            phase: 0,
        }
    }

    /// These windows on times counted from an origin `unix_epoch`
    /// nanoseconds after the Unix epoch (a memory store's clock's epoch),
    /// their boundaries still on multiples of the window in Unix time.
    pub(crate) fn placed(self, unix_epoch: u64) -> Self {
        Self {
            phase: unix_epoch % self.length,
            ..self
        }
    }

    /// Windows whose limit, length and phase were read back from where
    /// they were kept.
    #[inline]
    pub(crate) fn placed_at(max: u32, length: u64, phase: u64) -> Self {
        Self { max, length, phase }
    }

    /// How far the store's origin lies into its window.
    pub(crate) fn phase(&self) -> u64 {
        self.phase
    }

    pub(crate) fn max(&self) -> u32 {
        self.max
    }

    pub(crate) fn length(&self) -> u64 {
        self.length
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
        let windows = Windows::validated(3, Duration::from_nanos(10));
        assert_eq!(windows.index(0), 0);
        assert_eq!(windows.index(9), 0);
        assert_eq!(windows.index(10), 1);
        assert_eq!(windows.start(1), 10);
    }

    #[test]
    fn a_phase_moves_the_boundaries_earlier() {
        // An origin 17 ns after the Unix epoch lies 7 ns into its window.
        let windows = Windows::validated(3, Duration::from_nanos(10)).placed(17);
        assert_eq!(windows.phase(), 7);
        let windows = Windows::validated(3, Duration::from_nanos(10)).placed(3);
        assert_eq!(windows.index(6), 0);
        assert_eq!(windows.index(7), 1);
        assert_eq!(windows.start(1), 7);
        assert_eq!(windows.start(0), 0);
    }
}
