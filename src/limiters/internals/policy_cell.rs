//! [`PolicyCell`]: a sliding-window policy that can change at runtime, read
//! without a lock on every decision.

use std::time::Duration;

use crate::clock::duration_nanos;
use crate::limiters::internals::seq_cell::SeqCell;
use crate::store::{Backoff, WindowPolicy};

/// The policy's fields as five words of a [`SeqCell`]: max executions,
/// window, and the backoff's initial pause (`u64::MAX`: no backoff),
/// multiplier (as `f64` bits) and cap.
#[derive(Debug)]
pub(crate) struct PolicyCell(SeqCell<5>);

const NO_BACKOFF: u64 = u64::MAX;

impl PolicyCell {
    pub(crate) fn new(policy: WindowPolicy) -> Self {
        Self(SeqCell::new(encode(&policy)))
    }

    /// The policy in force, never torn.
    #[inline]
    pub(crate) fn load(&self) -> WindowPolicy {
        decode(self.0.load())
    }

    /// Replaces the policy.
    pub(crate) fn store(&self, policy: WindowPolicy) {
        self.0.store(encode(&policy));
    }
}

#[inline]
fn decode([max_executions, window, initial, multiplier, max]: [u64; 5]) -> WindowPolicy {
    let backoff = (initial != NO_BACKOFF).then(|| Backoff {
        initial: Duration::from_nanos(initial),
        multiplier: f64::from_bits(multiplier),
        max: Duration::from_nanos(max),
    });
    WindowPolicy {
        max_executions: u32::try_from(max_executions).unwrap_or(u32::MAX),
        window: Duration::from_nanos(window),
        backoff,
    }
}

fn encode(policy: &WindowPolicy) -> [u64; 5] {
    let max_executions = u64::from(policy.max_executions);
    let (initial, multiplier, max) = match policy.backoff {
        Some(backoff) => (
            duration_nanos(backoff.initial).min(NO_BACKOFF - 1),
            backoff.multiplier.to_bits(),
            duration_nanos(backoff.max),
        ),
        None => (NO_BACKOFF, 0, 0),
    };
    let window = duration_nanos(policy.window);
    [max_executions, window, initial, multiplier, max]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_executions: u32) -> WindowPolicy {
        WindowPolicy {
            max_executions,
            window: Duration::from_millis(max_executions as u64),
            backoff: max_executions.is_multiple_of(2).then_some(Backoff {
                initial: Duration::from_millis(1),
                multiplier: max_executions as f64,
                max: Duration::from_secs(1),
            }),
        }
    }

    #[test]
    fn load_returns_what_was_stored() {
        let cell = PolicyCell::new(policy(3));
        assert_eq!(cell.load(), policy(3));
        cell.store(policy(8));
        assert_eq!(cell.load(), policy(8));
    }
}
