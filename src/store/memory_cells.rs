//! The lock-free path of a [`MemoryStore`](super::MemoryStore)'s GCRA and
//! token bucket quotas: while the line of slots has no gaps, its state is
//! its TAT, and a decision is GCRA's test and one compare-and-swap, as in
//! the in-memory cells.
//!
//! The quota's state lives in its slot, behind the key's lock. While the
//! state is GCRA's with no gap in its line, the slot *opens* the line: it
//! copies the configuration and the pause into [`OpenLine`]'s atomics and
//! then the TAT, with the [`OPEN`] bit, into its word. A decision that
//! finds the bit set and the quota it was given equal to the copied
//! configuration decides on the word alone. Any other operation (a look,
//! a refund, a pause, another quota) takes the lock and *closes* the line
//! first: clearing the bit fails every compare-and-swap still in flight,
//! and the TAT the word held goes back into the slot, which decides by the
//! rules of [`slots`](crate::algorithms::slots) and opens the line again if
//! it has no gap.
//!
//! With no gap, a grant of the line (the first gap it fits in, else the
//! end) is a grant at the end, and the time held ahead of now is the TAT's
//! lead: the test and the slot a grant takes are GCRA's, so both paths
//! make the same decisions. A decision that read the word before a close
//! and swaps after a reopen that left the same TAT (a look, a pause, a new
//! rate) is made at its own reading of the clock, under the configuration
//! and pause it read, as a decision racing with the change would be under
//! the lock.

use std::sync::atomic::{AtomicU64, Ordering};

use super::quota::{Quota, QuotaKind};
use super::quota_state::QuotaState;
use crate::algorithms::gcra::{CellConfig, judge};
use crate::clock::Clock;

/// The bit of [`OpenLine::word`] that says the line is open; the other 63
/// hold the TAT (nanoseconds from the store's origin).
const OPEN: u64 = 1 << 63;

/// The atomics of an open line. Only the lock's holder writes them; the
/// configuration and the pause before the word that opens the line.
#[derive(Debug, Default)]
pub(super) struct OpenLine {
    /// [`OPEN`] and the TAT, or 0 (or a TAT without the bit) while closed.
    word: AtomicU64,
    /// The open line's configuration: `T` in nanoseconds, and `B`.
    interval: AtomicU64,
    burst: AtomicU64,
    /// Nothing starts before this.
    not_before: AtomicU64,
}

impl OpenLine {
    /// Decides `cost` under `quota` now on the open line: the grant's
    /// ticket (its slot's end), or when `cost` could be taken. `None` if
    /// the line is closed or open for another configuration: the caller
    /// decides under the lock.
    #[inline]
    pub(super) fn decide(
        &self,
        quota: &Quota,
        clock: &Clock,
        cost: u32,
    ) -> Option<Result<u64, u64>> {
        let QuotaKind::Cells(config) = quota.kind() else {
            return None;
        };
        // `SeqCst`, as `ReleaseEvent` requires of the second look.
        let mut word = self.word.load(Ordering::SeqCst);
        if word & OPEN == 0 || config != self.config() {
            return None;
        }
        let not_before = self.not_before.load(Ordering::Acquire);
        let now = clock.now_nanos();
        loop {
            let tat = word & !OPEN;
            let next = match judge(config, now, not_before, tat, cost) {
                // A grant of nothing takes no slot (and moves no TAT).
                Ok(_) if cost == 0 => return Some(Ok(tat.max(now))),
                Ok(next) if next < OPEN => next,
                Ok(_) => return None,
                Err(at) => return Some(Err(at)),
            };
            match self.word.compare_exchange_weak(
                word,
                OPEN | next,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Some(Ok(next)),
                Err(current) if current & OPEN != 0 => word = current,
                Err(_) => return None,
            }
        }
    }

    #[inline]
    fn config(&self) -> CellConfig {
        CellConfig::from_words([
            self.interval.load(Ordering::Acquire),
            self.burst.load(Ordering::Acquire),
        ])
    }

    /// Closes the line (the lock held): the TAT it held goes back into
    /// `state`, which decides alone until [`open`](Self::open).
    pub(super) fn close(&self, state: Option<&mut QuotaState>) {
        // Only an open line is written: a closed one stays off the bus.
        if self.word.load(Ordering::SeqCst) & OPEN == 0 {
            return;
        }
        // Only the lock's holder clears the bit: the line was still open.
        let word = self.word.fetch_and(!OPEN, Ordering::SeqCst);
        if let Some(QuotaState::Cells(cells)) = state {
            cells.line.tat = word & !OPEN;
        }
    }

    /// Opens the line of `state` (the lock held) if it is GCRA's with no
    /// gap; leaves it closed otherwise.
    pub(super) fn open(&self, state: Option<&QuotaState>) {
        let Some(QuotaState::Cells(cells)) = state else {
            return;
        };
        if !cells.line.gaps.is_empty() || cells.line.tat >= OPEN {
            return;
        }
        let [interval, burst] = cells.config.words();
        self.interval.store(interval, Ordering::Release);
        self.burst.store(burst, Ordering::Release);
        self.not_before.store(cells.not_before, Ordering::Release);
        self.word.store(OPEN | cells.line.tat, Ordering::SeqCst);
    }
}
