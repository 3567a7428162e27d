//! The lock-free path of a [`MemoryStore`](super::MemoryStore)'s quotas:
//! GCRA and the token bucket while their line of slots has no gap, the
//! fixed window and the sliding window counter while their counts fit one
//! word. Their state is then one word, and a decision is the algorithm's
//! test and one compare-and-swap.
//!
//! The quota's state lives in its slot, behind the key's lock. While the
//! state fits one word, the slot *opens* the line: it copies the
//! configuration, the pause and the windows' placing into [`OpenLine`]'s
//! atomics and then the state, with the [`OPEN`] bit, into its word. A
//! decision that finds the bit set and the quota it was given equal to the
//! copied configuration decides on the word alone. Any other operation (a
//! look, a refund, a pause, another quota) takes the lock and *closes* the
//! line first: clearing the bit fails every compare-and-swap still in
//! flight, and the state the word held goes back into the slot, which
//! decides by the same rules and opens the line again if it can.
//!
//! GCRA's word is its TAT. With no gap, a grant of the line (the first gap
//! it fits in, else the end) is a grant at the end, and the time held
//! ahead of now is the TAT's lead: the test and the slot a grant takes are
//! GCRA's, so both paths make the same decisions.
//!
//! A window's word holds its counts (in as many bits as the limit needs)
//! and, above them, the absolute index of their window, so a word means the
//! same whenever it is read; a state whose index or counts do not fit (a
//! limit of 2^31 or more for a sliding window counter, or windows so short
//! that their index outgrows its bits) is decided under the lock. A caller that read the clock before another counted in a later
//! window decides in that later window, as the in-memory fixed window
//! did: writing an older window back would erase the newer one's count.
//!
//! A decision that read the word before a close and swaps after a reopen
//! that left the same word (a look, a pause, a new rate) is made at its own
//! reading of the clock, under the configuration and pause it read, as a
//! decision racing with the change would be under the lock.

use std::sync::atomic::{AtomicU64, Ordering};

use super::quota::{CELLS, FIXED_WINDOW, Quota, SLIDING_WINDOW_COUNTER};
use super::quota_state::QuotaState;
use crate::algorithms::fixed_window;
use crate::algorithms::gcra::{CellConfig, judge};
use crate::algorithms::sliding_window_counter::Counts;
use crate::algorithms::windows::Windows;
use crate::clock::Clock;

/// The bit of [`OpenLine::word`] that says the line is open; the other 63
/// hold the state.
const OPEN: u64 = 1 << 63;

/// The atomics of an open line. Only the lock's holder writes them; the
/// configuration, pause and placing before the word that opens the line.
/// They share one cache line: a decision reads them all.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(super) struct OpenLine {
    /// [`OPEN`] and the state, or 0 (or a state without the bit) while
    /// closed.
    word: AtomicU64,
    /// The quota the line is open for, as far as it decides by it
    /// ([`Quota::line_words`]).
    config: [AtomicU64; 3],
    /// Nothing starts before this.
    not_before: AtomicU64,
    /// A window quota's phase ([`Windows`]).
    phase: AtomicU64,
}

/// How a window quota's word holds its state: its window's index above
/// its counts (one for a fixed window; the current and the previous window's
/// for a sliding window counter), each count in as many bits as the limit
/// needs. The index is absolute, so a word means the same whenever it is
/// read; a state whose index or counts do not fit is decided under the
/// lock.
#[derive(Clone, Copy)]
struct Packing {
    /// Bits per count.
    bits: u32,
    /// Counts in the word: 1 or 2.
    counts: u32,
}

impl Packing {
    #[inline]
    fn new(max: u32, counts: u32) -> Self {
        Self {
            bits: u32::BITS - max.leading_zeros(),
            counts,
        }
    }

    #[inline]
    fn count_mask(self) -> u64 {
        (1 << self.bits) - 1
    }

    /// Packs the index and the counts (the current window's first), if
    /// they fit.
    #[inline]
    fn pack(self, index: u64, counts: [u64; 2]) -> Option<u64> {
        let shift = self.bits * self.counts;
        let fits = index < OPEN.checked_shr(shift).unwrap_or(0)
            && counts[..self.counts as usize]
                .iter()
                .all(|&count| count <= self.count_mask());
        fits.then(|| index << shift | counts[1] << self.bits | counts[0])
    }

    #[inline]
    fn unpack(self, word: u64) -> (u64, [u64; 2]) {
        let word = word & !OPEN;
        let current = word & self.count_mask();
        let previous = if self.counts == 2 {
            word >> self.bits & self.count_mask()
        } else {
            0
        };
        let index = word.checked_shr(self.bits * self.counts).unwrap_or(0);
        (index, [current, previous])
    }

    /// A sliding window counter's word as its counts.
    #[inline]
    fn counts(self, word: u64) -> Counts {
        let (index, [current, previous]) = self.unpack(word);
        Counts {
            index,
            current,
            previous,
        }
    }
}

/// What a decision asks of a word: `cost` units `now`, with nothing
/// starting before `not_before` (a pause).
#[derive(Clone, Copy)]
struct Ask {
    now: u64,
    not_before: u64,
    cost: u32,
}

/// A step's answer on a word: the grant's ticket and the word after it, or
/// when the call could be made; `None` if the word cannot hold the outcome.
type Step = Option<Result<(u64, u64), u64>>;

impl OpenLine {
    /// Decides `cost` under `quota` now on the open line: the grant's
    /// ticket (GCRA's slot end, a window's index), or when `cost` could be
    /// taken. `None` if the line is closed or open for another
    /// configuration, or the word cannot hold the outcome: the caller
    /// decides under the lock.
    #[inline]
    pub(super) fn decide(
        &self,
        quota: &Quota,
        clock: &Clock,
        cost: u32,
    ) -> Option<Result<u64, u64>> {
        // The words, not the decoded kind: the compare with the line's own
        // and the dispatch need nothing else.
        let words = quota.line_words();
        match words[0] {
            CELLS => {
                let config = CellConfig::from_words([words[1], words[2]]);
                self.decide_with(words, clock, cost, |tat, ask| Self::cells(config, tat, ask))
            }
            FIXED_WINDOW => self.decide_with(words, clock, cost, |word, ask| {
                Self::fixed_window(&self.windows(words), word, ask)
            }),
            SLIDING_WINDOW_COUNTER => self.decide_with(words, clock, cost, |word, ask| {
                Self::sliding_window_counter(&self.windows(words), word, ask)
            }),
            _ => None,
        }
    }

    /// Decides `cost` on the line if it is open for `words`, by `step` on
    /// its word (without the [`OPEN`] bit); a grant is one compare-and-swap,
    /// tried again on the word a racer left.
    #[inline]
    fn decide_with(
        &self,
        words: [u64; 3],
        clock: &Clock,
        cost: u32,
        step: impl Fn(u64, Ask) -> Step,
    ) -> Option<Result<u64, u64>> {
        // The clock first: its reading is the slowest input of the step,
        // and comes while the words load (`benches/paired`, GCRA decision,
        // AMD EPYC VM: 11.8-12.1 ns, 11.3 so, beside governor's `check` at
        // 9.9). A decision at an instant before the word it reads is one
        // that a racer's swap made retry, as the loop below does.
        let now = clock.now_nanos();
        // `SeqCst`, as `ReleaseEvent` requires of the second look.
        let mut word = self.word.load(Ordering::SeqCst);
        // Word by word: an array compare goes through the stack.
        let open_for = |i: usize| self.config[i].load(Ordering::Acquire) == words[i];
        if word & OPEN == 0 || !(open_for(0) && open_for(1) && open_for(2)) {
            return None;
        }
        let not_before = self.not_before.load(Ordering::Acquire);
        let ask = Ask {
            now,
            not_before,
            cost,
        };
        loop {
            let (ticket, next) = match step(word & !OPEN, ask)? {
                Ok(granted) => granted,
                Err(at) => return Some(Err(at)),
            };
            match self.word.compare_exchange_weak(
                word,
                OPEN | next,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Some(Ok(ticket)),
                Err(current) if current & OPEN != 0 => word = current,
                Err(_) => return None,
            }
        }
    }

    /// The windows of a window quota's line, configured by `words`.
    #[inline]
    fn windows(&self, [_, max, length]: [u64; 3]) -> Windows {
        Windows::placed_at(max as u32, length, self.phase.load(Ordering::Acquire))
    }

    /// One GCRA step: the TAT after a grant, which is also its ticket.
    #[inline]
    fn cells(config: CellConfig, tat: u64, ask: Ask) -> Step {
        match judge(config, ask.now, ask.not_before, tat, ask.cost) {
            // A grant of nothing takes no slot (and moves no TAT).
            Ok(_) if ask.cost == 0 => Some(Ok((tat.max(ask.now), tat))),
            Ok(next) if next < OPEN => Some(Ok((next, next))),
            Ok(_) => None,
            Err(at) => Some(Err(at)),
        }
    }

    /// One fixed window step: counts `cost` in the newest window anyone
    /// has counted in, or the window of `now`.
    #[inline]
    fn fixed_window(windows: &Windows, word: u64, ask: Ask) -> Step {
        let packing = Packing::new(windows.max(), 1);
        let (counted_in, [counted, _]) = packing.unpack(word);
        let now = ask.now.max(windows.start(counted_in));
        let count_in = |index| if index == counted_in { counted } else { 0 };
        let (not_before, cost) = (ask.not_before, ask.cost);
        if let Some(at) = fixed_window::blocked_until(windows, now, not_before, cost, count_in) {
            return Some(Err(at));
        }
        let index = windows.index(now);
        let next = packing.pack(index, [count_in(index) + u64::from(cost), 0])?;
        Some(Ok((index, next)))
    }

    /// One sliding window counter step, in the newest window anyone has
    /// counted in, or the window of `now`.
    #[inline]
    fn sliding_window_counter(windows: &Windows, word: u64, ask: Ask) -> Step {
        let packing = Packing::new(windows.max(), 2);
        let counts = packing.counts(word);
        let now = ask.now.max(windows.start(counts.index));
        if let Some(at) = counts.blocked_until(windows, now, ask.not_before, ask.cost) {
            return Some(Err(at));
        }
        let index = windows.index(now);
        let counts = counts.at(index);
        let next = packing.pack(
            index,
            [counts.current + u64::from(ask.cost), counts.previous],
        )?;
        Some(Ok((index, next)))
    }

    /// Closes the line (the lock held): the state its word held goes back
    /// into `state`, which decides alone until [`open`](Self::open).
    ///
    /// Returns the instant no decision after the close may be made before:
    /// for a window quota, the start of the newest window its word counted
    /// in (a decision whose clock was read before the lock and before that
    /// window began would write its older window over the newer one's
    /// count); 0 otherwise (GCRA's test at an earlier instant is stricter).
    pub(super) fn close(&self, state: Option<&mut QuotaState>) -> u64 {
        // Only an open line is written: a closed one stays off the bus.
        if self.word.load(Ordering::SeqCst) & OPEN == 0 {
            return 0;
        }
        // Only the lock's holder clears the bit: the line was still open.
        let word = self.word.fetch_and(!OPEN, Ordering::SeqCst) & !OPEN;
        match state {
            Some(QuotaState::Cells(cells)) => {
                cells.line.tat = word;
                0
            }
            Some(QuotaState::FixedWindow(window)) => {
                let (index, [count, _]) = Packing::new(window.windows.max(), 1).unpack(word);
                (window.index, window.count) = (Some(index), count);
                window.windows.start(index)
            }
            Some(QuotaState::SlidingWindowCounter(counter)) => {
                counter.counts = Packing::new(counter.windows.max(), 2).counts(word);
                counter.windows.start(counter.counts.index)
            }
            Some(QuotaState::SlidingLog(_)) | None => 0,
        }
    }

    /// Opens the line of `state`, made for `quota` (the lock held), if its
    /// state fits one word; leaves it closed otherwise.
    pub(super) fn open(&self, quota: &Quota, state: &QuotaState) {
        let Some((not_before, phase, word)) = Self::word_of(state) else {
            return;
        };
        for (atomic, value) in self.config.iter().zip(quota.line_words()) {
            atomic.store(value, Ordering::Release);
        }
        self.not_before.store(not_before, Ordering::Release);
        self.phase.store(phase, Ordering::Release);
        self.word.store(OPEN | word, Ordering::SeqCst);
    }

    /// The pause, windows' phase and word of `state`, if its state fits
    /// one word.
    fn word_of(state: &QuotaState) -> Option<(u64, u64, u64)> {
        match state {
            QuotaState::Cells(cells) => (cells.line.gaps.is_empty() && cells.line.tat < OPEN)
                .then_some((cells.not_before, 0, cells.line.tat)),
            QuotaState::FixedWindow(window) => {
                let windows = &window.windows;
                let (index, count) = (window.index.unwrap_or(0), window.count);
                let word = Packing::new(windows.max(), 1).pack(index, [count, 0])?;
                Some((window.not_before, windows.phase(), word))
            }
            QuotaState::SlidingWindowCounter(counter) => {
                let (windows, counts) = (&counter.windows, counter.counts);
                let packing = Packing::new(windows.max(), 2);
                let word = packing.pack(counts.index, [counts.current, counts.previous])?;
                Some((counter.not_before, windows.phase(), word))
            }
            QuotaState::SlidingLog(_) => None,
        }
    }
}
