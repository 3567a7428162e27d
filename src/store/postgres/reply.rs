//! Reading the functions' replies (arrays of integers, times as durations
//! from now in µs) without trusting them: anything else is a
//! [`StoreError`] of kind [`BadReply`](crate::store::StoreErrorKind::BadReply).

use std::time::Duration;

use tokio::time::Instant;

use super::BACKEND;
use crate::store::{StoreError, WindowDecision};

/// A function's reply.
pub(super) struct Reply<'a>(pub(super) &'a [i64]);

impl Reply<'_> {
    /// The `index`th integer.
    pub(super) fn at(&self, index: usize) -> Result<i64, StoreError> {
        self.0.get(index).copied().ok_or_else(|| {
            StoreError::bad_reply(
                BACKEND,
                format!("expected at least {} integers, got {:?}", index + 1, self.0),
            )
        })
    }

    /// The `index`th integer, which must not be negative.
    pub(super) fn unsigned(&self, index: usize) -> Result<u64, StoreError> {
        let value = self.at(index)?;
        u64::try_from(value).map_err(|_| {
            StoreError::bad_reply(
                BACKEND,
                format!("expected a count or a duration, got {value}"),
            )
        })
    }

    /// A count.
    pub(super) fn count(&self) -> Result<usize, StoreError> {
        Ok(usize::try_from(self.unsigned(0)?).unwrap_or(usize::MAX))
    }

    /// `[1, ticket]` or `[0, µs until retry]`.
    pub(super) fn decision(&self) -> Result<WindowDecision, StoreError> {
        Ok(match self.at(0)? {
            1 => WindowDecision::Granted {
                ticket: self.unsigned(1)?,
            },
            0 => WindowDecision::Denied {
                retry_at: after(self.unsigned(1)?),
            },
            flag => {
                return Err(StoreError::bad_reply(
                    BACKEND,
                    format!("expected 0 or 1 as a decision, got {flag}"),
                ));
            }
        })
    }

    /// `[1, 0]` (free now) or `[0, µs until free]`.
    pub(super) fn blocked(&self) -> Result<Option<Instant>, StoreError> {
        Ok(match self.decision()? {
            WindowDecision::Granted { .. } => None,
            WindowDecision::Denied { retry_at } => Some(retry_at),
        })
    }

    /// `[remaining, µs until more]`, or `[remaining, -1]` when the whole
    /// limit is free.
    pub(super) fn status(&self) -> Result<(u64, Option<Duration>), StoreError> {
        let remaining = self.unsigned(0)?;
        let wait = match self.at(1)? {
            -1 => None,
            _ => Some(Duration::from_micros(self.unsigned(1)?)),
        };
        Ok((remaining, wait))
    }

    /// `[1, µs from now]` or `[0]`.
    pub(super) fn optional_instant(&self) -> Result<Option<Instant>, StoreError> {
        Ok(match self.at(0)? {
            0 => None,
            _ => Some(after(self.unsigned(1)?)),
        })
    }
}

/// The instant `micros` µs from now (rounded late, never early).
fn after(micros: u64) -> Instant {
    Instant::now() + Duration::from_micros(micros)
}

/// Whole µs in `duration`, rounded up, as the functions take them.
pub(super) fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos().div_ceil(1_000)).unwrap_or(i64::MAX)
}

/// µs from now until `at` (0 if past), rounded up.
pub(super) fn micros_until(at: Instant) -> i64 {
    micros(at.saturating_duration_since(Instant::now()))
}

/// A ticket or a lease name as the functions store it (a `bigint` with the
/// same bits).
pub(super) fn signed(value: u64) -> i64 {
    i64::from_ne_bytes(value.to_ne_bytes())
}
