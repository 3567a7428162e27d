//! [`QuotaState`]: one quota's state by its algorithm's rules (the
//! decisions of `crate::algorithms`), for the stores that decide in Rust:
//! the memory store keeps it behind a lock (and, while it fits one word,
//! in atomics too: `memory_open_line.rs`), SQLite loads it from a row and
//! saves it back in each transaction. Redis and PostgreSQL run the same
//! rules in Lua and PL/pgSQL.
//!
//! Times are nanoseconds from the store's origin: its clock's epoch in
//! memory, the Unix epoch in SQLite. A grant's ticket is the window it was
//! counted in, for GCRA the end of the slot it holds (see
//! [`slots`](crate::algorithms::slots)), for a sliding log its start.
//!
//! A reset ([`QuotaState::clear`]) empties the state but keeps a floor: the
//! tickets at or below it (the old line's end for GCRA, the reset's window
//! for the windows, the reset's instant for a sliding log) may name what
//! grants made before the reset held, so they give nothing back (extra
//! units are still charged).
//!
//! SQLite keeps a sliding log in rows of its own (`sqlite/sliding_log.rs`),
//! so only the memory store holds [`QuotaState::SlidingLog`].

use super::Backoff;
use super::quota::{Quota, QuotaKind};
use crate::algorithms::fixed_window;
use crate::algorithms::gcra::{CellConfig, rescale};
use crate::algorithms::sliding_log::{Pause, jitter};
use crate::algorithms::sliding_window_counter::Counts;
use crate::algorithms::slots::Line;
use crate::algorithms::windows::{Windows, refused};
use crate::clock::duration_nanos;
use crate::start_log::StartLog;

/// The state of one quota, by algorithm.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum QuotaState {
    Cells(Cells),
    FixedWindow(FixedWindow),
    SlidingWindowCounter(SlidingWindowCounter),
    /// Boxed: the other states are a few words, and a memory store keeps
    /// one per key.
    SlidingLog(Box<SlidingLog>),
}

/// GCRA (and the token bucket): the line of slots grants hold, which ends
/// at the theoretical arrival time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cells {
    pub(crate) config: CellConfig,
    pub(crate) line: Line,
    /// The interval the line's slots were cut with; a slot ending at or
    /// before `retuned` was cut with an earlier one, and is not given back
    /// (its length is not known), or was held before a reset.
    pub(crate) cut: u64,
    pub(crate) retuned: u64,
    /// Nothing starts before this.
    pub(crate) not_before: u64,
}

/// A fixed window's count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FixedWindow {
    pub(crate) windows: Windows,
    /// The window counted in, if any.
    pub(crate) index: Option<u64>,
    pub(crate) count: u64,
    /// Nothing starts before this.
    pub(crate) not_before: u64,
    /// The window of the last reset: tickets up to it give nothing back.
    pub(crate) cleared: Option<u64>,
}

/// A sliding window counter's two counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlidingWindowCounter {
    pub(crate) windows: Windows,
    pub(crate) counts: Counts,
    /// Nothing starts before this.
    pub(crate) not_before: u64,
    /// The window of the last reset: tickets up to it give nothing back.
    pub(crate) cleared: Option<u64>,
}

/// A sliding log: the starts in the window, and the pause and backoff.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SlidingLog {
    pub(crate) max: u32,
    /// The window, in nanoseconds.
    pub(crate) window: u64,
    pub(crate) backoff: Option<Backoff>,
    pub(crate) starts: StartLog,
    pub(crate) pause: Pause,
    /// The instant of the last reset: starts up to it give nothing back.
    pub(crate) cleared: Option<u64>,
}

impl QuotaState {
    /// A fresh state for `quota` (full capacity, no pause). `windows`
    /// places a window quota's boundaries on the store's time (they fall on
    /// multiples of the window in Unix time).
    pub(crate) fn fresh(quota: &Quota, windows: impl Fn(Windows) -> Windows) -> Self {
        match quota.kind() {
            QuotaKind::Cells(config) => Self::Cells(Cells {
                config,
                line: Line::default(),
                cut: config.interval_nanos(),
                retuned: 0,
                not_before: 0,
            }),
            QuotaKind::FixedWindow { max, window } => Self::FixedWindow(FixedWindow {
                windows: windows(Windows::validated(max, window)),
                index: None,
                count: 0,
                not_before: 0,
                cleared: None,
            }),
            QuotaKind::SlidingWindowCounter { max, window } => {
                Self::SlidingWindowCounter(SlidingWindowCounter {
                    windows: windows(Windows::validated(max, window)),
                    counts: Counts::default(),
                    not_before: 0,
                    cleared: None,
                })
            }
            QuotaKind::SlidingLog {
                max,
                window,
                backoff,
            } => Self::SlidingLog(Box::new(SlidingLog {
                max,
                window: duration_nanos(window),
                backoff,
                starts: StartLog::default(),
                pause: Pause::default(),
                cleared: None,
            })),
        }
    }

    /// Resets the state at `now`: full capacity, no pause, and a floor on
    /// the tickets that give anything back, past every ticket granted
    /// before (a ticket from before the reset may name what a grant made
    /// since holds, and can no longer be told from it).
    pub(crate) fn clear(&mut self, now: u64) {
        match self {
            Self::Cells(cells) => {
                cells.retuned = cells.retuned.max(cells.line.tat);
                (cells.line, cells.not_before) = (Line::default(), 0);
            }
            Self::FixedWindow(window) => {
                let cleared = window.windows.index(now).max(window.cleared.unwrap_or(0));
                (window.index, window.count, window.not_before) = (None, 0, 0);
                window.cleared = Some(cleared);
            }
            Self::SlidingWindowCounter(counter) => {
                let cleared = counter.windows.index(now).max(counter.cleared.unwrap_or(0));
                (counter.counts, counter.not_before) = (Counts::default(), 0);
                counter.cleared = Some(cleared);
            }
            Self::SlidingLog(log) => {
                let cleared = now.max(log.cleared.unwrap_or(0));
                (log.starts, log.pause) = (StartLog::default(), Pause::default());
                log.cleared = Some(cleared);
            }
        }
    }

    /// The state of `fresh`'s quota, which replaced the one `self` was
    /// made for: a GCRA state keeps its line (its lead rescaled at `now`)
    /// and pause under the new rate and burst, a window its counts, a log
    /// its starts (what was spent still counts); a new algorithm starts
    /// afresh.
    pub(crate) fn renewed(self, fresh: Self, now: u64) -> Self {
        match (self, fresh) {
            (Self::Cells(kept), Self::Cells(fresh)) => {
                let mut cells = Cells {
                    config: fresh.config,
                    ..kept
                };
                cells.recut(now);
                Self::Cells(cells)
            }
            // The starts and the pause stay; the new limits apply to them.
            (Self::SlidingLog(kept), Self::SlidingLog(fresh)) => {
                Self::SlidingLog(Box::new(SlidingLog {
                    starts: kept.starts,
                    pause: kept.pause,
                    cleared: kept.cleared,
                    ..*fresh
                }))
            }
            // A new limit applies to what the windows counted, as in the
            // other stores; windows of another length start afresh (their
            // indices count other windows).
            (Self::FixedWindow(kept), Self::FixedWindow(fresh))
                if kept.windows.length() == fresh.windows.length() =>
            {
                Self::FixedWindow(FixedWindow {
                    windows: fresh.windows,
                    ..kept
                })
            }
            (Self::SlidingWindowCounter(kept), Self::SlidingWindowCounter(fresh))
                if kept.windows.length() == fresh.windows.length() =>
            {
                Self::SlidingWindowCounter(SlidingWindowCounter {
                    windows: fresh.windows,
                    ..kept
                })
            }
            (_, fresh) => fresh,
        }
    }

    /// Takes `cost` units and answers the grant's ticket, or answers when
    /// `cost` could be taken.
    pub(crate) fn decide(&mut self, now: u64, cost: u32) -> Result<u64, u64> {
        match self {
            Self::Cells(cells) => cells.decide(now, cost),
            Self::FixedWindow(window) => window.decide(now, cost),
            Self::SlidingWindowCounter(counter) => counter.decide(now, cost),
            Self::SlidingLog(log) => log.decide(now, cost),
        }
    }

    /// When `cost` units could be taken, if not at `now`.
    pub(crate) fn blocked_until(&self, now: u64, cost: u32) -> Option<u64> {
        match self {
            Self::Cells(cells) => cells.blocked_until(now, cost),
            Self::FixedWindow(window) => window.blocked_until(now, cost),
            Self::SlidingWindowCounter(counter) => {
                let (windows, not_before) = (&counter.windows, counter.not_before);
                counter.counts.blocked_until(windows, now, not_before, cost)
            }
            Self::SlidingLog(log) => log.blocked_until(now, cost),
        }
    }

    /// Takes one unit, room or not.
    pub(crate) fn take(&mut self, now: u64) {
        match self {
            Self::Cells(cells) => {
                cells.line.pass(now);
                cells.line.take(now, cells.config.weight(1));
            }
            Self::FixedWindow(window) => {
                let current = window.windows.index(now);
                window.recount(now, current, 0, 1);
            }
            Self::SlidingWindowCounter(counter) => {
                let current = counter.windows.index(now);
                counter.recount(now, current, 0, 1);
            }
            Self::SlidingLog(log) => {
                log.starts.prune(now, log.window);
                log.record(now, 1);
            }
        }
    }

    /// Turns the `from` units granted with `ticket` into `to`; the ticket
    /// that now stands for the grant, if it can still be adjusted down.
    pub(crate) fn adjust(&mut self, now: u64, ticket: u64, from: u32, to: u32) -> Option<u64> {
        match self {
            Self::Cells(cells) => cells.adjust(now, ticket, from, to),
            Self::FixedWindow(window) => {
                window.recount(now, ticket, from, to);
                Some(ticket)
            }
            Self::SlidingWindowCounter(counter) => {
                counter.recount(now, ticket, from, to);
                Some(ticket)
            }
            Self::SlidingLog(log) => {
                log.adjust(now, ticket, from, to);
                Some(ticket)
            }
        }
    }

    /// Grants nothing before `until`; never shortens a pause.
    pub(crate) fn pause(&mut self, until: u64) {
        let not_before = match self {
            Self::Cells(cells) => &mut cells.not_before,
            Self::FixedWindow(window) => &mut window.not_before,
            Self::SlidingWindowCounter(counter) => &mut counter.not_before,
            Self::SlidingLog(log) => return log.pause.pause_until(until),
        };
        *not_before = (*not_before).max(until);
    }
}

impl Cells {
    /// Takes the slots cut with an interval other than the configuration's
    /// as unknown: they are not given back, and their gaps are forgotten.
    /// The line's lead over `now` is rescaled to the new interval
    /// ([`rescale`]): the cells spent stay spent, at the new rate. Run
    /// whenever a configuration meets a stored line.
    pub(crate) fn recut(&mut self, now: u64) {
        let interval = self.config.interval_nanos();
        if self.cut != interval {
            self.retuned = self.retuned.max(self.line.tat);
            self.line.tat = rescale(self.line.tat, now, self.cut, interval);
            self.cut = interval;
            self.line.gaps.clear();
        }
    }

    /// When a grant of `cost` would conform, if not at `now`: once at most
    /// a burst less its weight of the line is held ahead of now, and the
    /// pause is over. A cost above the burst (possible only if a retune
    /// lowered it since the caller's check) is told to retry now, when the
    /// check refuses it.
    fn blocked_until(&self, now: u64, cost: u32) -> Option<u64> {
        let config = self.config;
        if cost > config.burst() {
            return Some(now);
        }
        let room = config.span() - config.weight(cost);
        let ready = self.line.held_at_most(now, room).max(self.not_before);
        (ready > now).then_some(ready)
    }

    fn decide(&mut self, now: u64, cost: u32) -> Result<u64, u64> {
        if let Some(ready) = self.blocked_until(now, cost) {
            return Err(ready);
        }
        self.line.pass(now);
        let (weight, paced) = (self.config.weight(cost), self.config.is_paced());
        Ok(self.line.grant(now, weight, paced))
    }

    /// When the state stops mattering: once the TAT plus a whole burst has
    /// passed, since a settle may charge up to a burst on top of the TAT a
    /// grant left, and not before the line a reset emptied would have
    /// ended (its tickets give nothing back until then).
    #[cfg(feature = "sqlite")]
    pub(crate) fn ends(&self) -> u64 {
        let ends = self.line.tat.saturating_add(self.config.span());
        ends.max(self.retuned)
    }

    /// Gives back, or charges, the difference between `from` and `to` cells
    /// of the grant whose slot ends at `ticket`; its new ticket, if it can
    /// still be adjusted down. A slot ending at or before `retuned` (cut
    /// with another interval, or held before a reset) gives nothing back.
    fn adjust(&mut self, now: u64, ticket: u64, from: u32, to: u32) -> Option<u64> {
        self.line.pass(now);
        let cut_before = ticket <= self.retuned;
        let weight = self.config.weight(from.abs_diff(to));
        if to > from {
            let grown = self.line.charge(now, ticket, weight);
            return grown.filter(|_| !cut_before);
        }
        if cut_before || !self.line.give_back(now, ticket, weight) {
            return None;
        }
        Some(ticket.saturating_sub(weight))
    }
}

impl FixedWindow {
    fn count_in(&self, index: u64) -> u64 {
        if self.index == Some(index) {
            self.count
        } else {
            0
        }
    }

    fn decide(&mut self, now: u64, cost: u32) -> Result<u64, u64> {
        if let Some(at) = self.blocked_until(now, cost) {
            return Err(at);
        }
        let current = self.windows.index(now);
        self.count = self.count_in(current).saturating_add(u64::from(cost));
        self.index = Some(current);
        Ok(current)
    }

    fn blocked_until(&self, now: u64, cost: u32) -> Option<u64> {
        let count_in = |index| self.count_in(index);
        fixed_window::blocked_until(&self.windows, now, self.not_before, cost, count_in)
    }

    /// Moves the `from` units counted in window `index` to `to`, in the
    /// window of `now`; a grant from before a reset (see [`refused`]) only
    /// has its extra units charged.
    fn recount(&mut self, now: u64, index: u64, from: u32, to: u32) {
        let current = self.windows.index(now);
        let (index, from, to) = refused(self.cleared, current, index, from, to);
        let counted = self.count_in(current);
        if let Some(count) = fixed_window::recount(index, current, counted, from, to) {
            (self.index, self.count) = (Some(current), count);
        }
    }
}

impl SlidingWindowCounter {
    fn decide(&mut self, now: u64, cost: u32) -> Result<u64, u64> {
        let (windows, not_before) = (&self.windows, self.not_before);
        if let Some(at) = self.counts.blocked_until(windows, now, not_before, cost) {
            return Err(at);
        }
        let index = self.windows.index(now);
        self.counts = self.counts.at(index);
        self.counts.current = self.counts.current.saturating_add(u64::from(cost));
        Ok(index)
    }

    /// Moves the `from` units counted in window `index` to `to`; a grant
    /// from before a reset (see [`refused`]) only has its extra units
    /// charged.
    fn recount(&mut self, now: u64, index: u64, from: u32, to: u32) {
        let current = self.windows.index(now);
        let (index, from, to) = refused(self.cleared, current, index, from, to);
        self.counts = self.counts.at(current);
        if let Some(counts) = self.counts.recount(current, index, from, to) {
            self.counts = counts;
        }
    }
}

impl SlidingLog {
    /// The units that may be in the window beside a call costing `cost`.
    fn room(&self, cost: u32) -> u64 {
        u64::from(self.max.saturating_sub(cost))
    }

    fn blocked_until(&self, now: u64, cost: u32) -> Option<u64> {
        let frees_at = self.starts.frees_at(now, self.room(cost), self.window);
        self.pause.blocked_until(now, frees_at)
    }

    fn decide(&mut self, now: u64, cost: u32) -> Result<u64, u64> {
        // The starts that have left the window go first (as `take` drops
        // them): the log holds the window's starts alone, so its memory
        // follows the calls in the window, not the limit, and the checks
        // below walk no entry unless the window is full. A start that has
        // left decides nothing: it is not in the count, nor what must leave.
        self.starts.prune(now, self.window);
        if let Some(retry_at) = self.blocked_until(now, cost) {
            return Err(retry_at);
        }
        self.pause.granted();
        self.record(now, cost);
        Ok(now)
    }

    /// Logs `cost` units started at `now`; if they fill the window, backs
    /// off.
    fn record(&mut self, now: u64, cost: u32) {
        self.starts.add(now, u64::from(cost));
        let frees_at = self.starts.frees_at(now, self.room(1), self.window);
        if let (Some(backoff), Some(frees_at)) = (&self.backoff, frees_at) {
            let jitter = jitter(Some(backoff));
            self.pause.escalate(now, frees_at, backoff, jitter, 1);
        }
    }

    /// Resizes the grant that started at `ticket` from `from` to `to` units;
    /// a refund (to 0) that unfills the window undoes its backoff. A start
    /// at or before the last reset gives nothing back (it may share its
    /// instant with starts since); extra units are still charged.
    fn adjust(&mut self, now: u64, ticket: u64, from: u32, to: u32) {
        if self.cleared.is_some_and(|cleared| ticket <= cleared) && to <= from {
            return;
        }
        if to > 0 {
            return self.starts.resize(ticket, from, to);
        }
        self.starts.remove(ticket, u64::from(from));
        if self
            .starts
            .frees_at(now, self.room(1), self.window)
            .is_none()
        {
            self.pause.undo_escalation();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A log under a limit far above its calls holds the calls in its
    /// window, not every call until the limit: ten calls a second apart
    /// under 1,000 a second are all granted and leave one entry.
    #[test]
    fn a_sliding_log_keeps_only_the_starts_in_its_window() {
        let quota = Quota::sliding_log(1_000, Duration::from_secs(1)).unwrap();
        let mut state = QuotaState::fresh(&quota, |windows| windows);
        let second = 1_000_000_000;
        for call in 1..=10 {
            assert_eq!(state.decide(call * second, 1), Ok(call * second));
        }
        let QuotaState::SlidingLog(log) = &state else {
            panic!("a sliding log's state");
        };
        // Every entry: a window reaching back past the epoch.
        assert_eq!(log.starts.in_window(0, u64::MAX).count(), 1);
    }
}
