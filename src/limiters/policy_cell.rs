//! [`PolicyCell`]: a sliding-window policy that can change at runtime, read
//! without a lock on every decision.

use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::clock::duration_nanos;
use crate::store::{Backoff, WindowPolicy};

/// A sequence lock over the policy's fields: readers copy the fields and
/// retry if a write overlapped (rare: only on reconfiguration); writers take a
/// mutex. Every field is an atomic, so a torn read is only ever discarded.
#[derive(Debug)]
pub(crate) struct PolicyCell {
    /// Odd while a write is under way.
    sequence: AtomicU64,
    max_executions: AtomicU64,
    window: AtomicU64,
    /// `u64::MAX`: no backoff.
    backoff_initial: AtomicU64,
    backoff_multiplier: AtomicU64,
    backoff_max: AtomicU64,
    writer: Mutex<()>,
}

const NO_BACKOFF: u64 = u64::MAX;

impl PolicyCell {
    pub(crate) fn new(policy: WindowPolicy) -> Self {
        let cell = Self {
            sequence: AtomicU64::new(0),
            max_executions: AtomicU64::new(0),
            window: AtomicU64::new(0),
            backoff_initial: AtomicU64::new(NO_BACKOFF),
            backoff_multiplier: AtomicU64::new(0),
            backoff_max: AtomicU64::new(0),
            writer: Mutex::new(()),
        };
        cell.store(policy);
        cell
    }

    /// A consistent copy of the policy.
    #[inline]
    pub(crate) fn load(&self) -> WindowPolicy {
        loop {
            let before = self.sequence.load(Ordering::Acquire);
            let policy = self.read_fields();
            fence(Ordering::Acquire);
            if before % 2 == 0 && self.sequence.load(Ordering::Relaxed) == before {
                return policy;
            }
            std::hint::spin_loop();
        }
    }

    /// Replaces the policy; the next [`load`](PolicyCell::load) sees it whole.
    pub(crate) fn store(&self, policy: WindowPolicy) {
        let _writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        self.sequence.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.write_fields(&policy);
        self.sequence.fetch_add(1, Ordering::Release);
    }

    #[inline]
    fn read_fields(&self) -> WindowPolicy {
        let initial = self.backoff_initial.load(Ordering::Relaxed);
        let backoff = (initial != NO_BACKOFF).then(|| Backoff {
            initial: Duration::from_nanos(initial),
            multiplier: f64::from_bits(self.backoff_multiplier.load(Ordering::Relaxed)),
            max: Duration::from_nanos(self.backoff_max.load(Ordering::Relaxed)),
        });
        WindowPolicy {
            max_executions: self.max_executions.load(Ordering::Relaxed) as usize,
            window: Duration::from_nanos(self.window.load(Ordering::Relaxed)),
            backoff,
        }
    }

    fn write_fields(&self, policy: &WindowPolicy) {
        let max = u64::try_from(policy.max_executions).unwrap_or(u64::MAX);
        self.max_executions.store(max, Ordering::Relaxed);
        self.window
            .store(duration_nanos(policy.window), Ordering::Relaxed);
        let (initial, multiplier, cap) = match policy.backoff {
            Some(backoff) => (
                duration_nanos(backoff.initial).min(NO_BACKOFF - 1),
                backoff.multiplier.to_bits(),
                duration_nanos(backoff.max),
            ),
            None => (NO_BACKOFF, 0, 0),
        };
        self.backoff_initial.store(initial, Ordering::Relaxed);
        self.backoff_multiplier.store(multiplier, Ordering::Relaxed);
        self.backoff_max.store(cap, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn policy(max_executions: usize) -> WindowPolicy {
        WindowPolicy {
            max_executions,
            window: Duration::from_millis(max_executions as u64),
            backoff: (max_executions % 2 == 0).then_some(Backoff {
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

    #[test]
    fn concurrent_readers_never_see_a_torn_policy() {
        let cell = Arc::new(PolicyCell::new(policy(1)));
        let writer = {
            let cell = Arc::clone(&cell);
            std::thread::spawn(move || {
                for round in 0..20_000 {
                    cell.store(policy(1 + round % 7));
                }
            })
        };
        for _ in 0..200_000 {
            let seen = cell.load();
            assert_eq!(seen, policy(seen.max_executions), "torn read: {seen:?}");
        }
        writer.join().expect("writer thread");
    }
}
