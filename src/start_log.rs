//! [`StartLog`]: the starts of a sliding window, weighted by their units.
//!
//! Shared by the in-memory sliding log ([`MemoryStore`](crate::store::MemoryStore))
//! and the window cap of [`EvenlySpacedRateLimiter`](crate::EvenlySpacedRateLimiter).
//! Times are nanoseconds since a clock's epoch; the window ending at `now`
//! is `(now - window, now]`.

use std::collections::VecDeque;

/// Start times with the units started at each, oldest first, one entry per
/// instant. A call's cost is a number on its entry, never a run of entries,
/// so memory follows the instants at which calls started, not numbers from
/// outside.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StartLog {
    starts: VecDeque<Start>,
    /// The units of all entries (saturating: a total past `u64::MAX` units
    /// only ever means "full").
    units: u64,
}

/// Units started at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Start {
    pub(crate) at: u64,
    pub(crate) units: u64,
}

impl StartLog {
    /// Drops the starts that have left the window ending at `now`.
    pub(crate) fn prune(&mut self, now: u64, window: u64) {
        let Some(horizon) = now.checked_sub(window) else {
            return;
        };
        while self.starts.front().is_some_and(|start| start.at <= horizon) {
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some(start) = self.starts.pop_front() {
            self.units = self.units.saturating_sub(start.units);
        }
    }

    /// The oldest entries that must leave the window for at most `room`
    /// units to stay: how many, and when the last of them leaves. `None` if
    /// the log holds no more than `room`. Walks only those entries.
    fn must_leave(&self, room: u64, window: u64) -> Option<(usize, u64)> {
        let mut excess = self.units.checked_sub(room).filter(|&excess| excess > 0)?;
        let mut leaving = self.starts.iter().enumerate();
        leaving.find_map(|(index, start)| {
            excess = excess.saturating_sub(start.units);
            (excess == 0).then(|| (index + 1, start.at.saturating_add(window)))
        })
    }

    /// When at most `room` units will be left in the window, if more are at
    /// `now`.
    pub(crate) fn frees_at(&self, now: u64, room: u64, window: u64) -> Option<u64> {
        let (_, frees_at) = self.must_leave(room, window)?;
        (frees_at > now).then_some(frees_at)
    }

    /// Drops the starts that had to leave the window for at most `room`
    /// units to stay (they have left, if [`frees_at`](Self::frees_at) said
    /// so): the log then holds no more than the window needs.
    pub(crate) fn make_room(&mut self, room: u64, window: u64) {
        if let Some((count, _)) = self.must_leave(room, window) {
            (0..count).for_each(|_| self.pop_front());
        }
    }

    /// The index of the entry at `at`, or where it would go.
    fn position(&self, at: u64) -> Result<usize, usize> {
        self.starts.binary_search_by_key(&at, |start| start.at)
    }

    /// Adds `units` started at `at`, keeping the log in time order.
    pub(crate) fn add(&mut self, at: u64, units: u64) {
        if units == 0 {
            return;
        }
        self.units = self.units.saturating_add(units);
        // Starts come in time order, but for a settle of an older grant:
        // at the newest entry or after it, without a search.
        match self.starts.back_mut() {
            Some(last) if last.at == at => last.units = last.units.saturating_add(units),
            Some(last) if last.at > at => match self.position(at) {
                Ok(index) => {
                    let start = &mut self.starts[index];
                    start.units = start.units.saturating_add(units);
                }
                Err(index) => self.starts.insert(index, Start { at, units }),
            },
            _ => self.starts.push_back(Start { at, units }),
        }
    }

    /// Removes up to `units` started at `at`.
    pub(crate) fn remove(&mut self, at: u64, units: u64) {
        let Ok(index) = self.position(at) else {
            return;
        };
        let start = &mut self.starts[index];
        let removed = units.min(start.units);
        start.units -= removed;
        self.units = self.units.saturating_sub(removed);
        if start.units == 0 {
            self.starts.remove(index);
        }
    }

    /// Turns `from` units started at `at` into `to`.
    pub(crate) fn resize(&mut self, at: u64, from: u32, to: u32) {
        if to < from {
            self.remove(at, u64::from(from - to));
        } else {
            self.add(at, u64::from(to - from));
        }
    }

    /// The entries within the window ending at `now`, oldest first: what the
    /// tests below read.
    #[cfg(test)]
    pub(crate) fn in_window(&self, now: u64, window: u64) -> impl Iterator<Item = Start> + '_ {
        let horizon = now.checked_sub(window);
        self.starts
            .iter()
            .copied()
            .filter(move |start| horizon.is_none_or(|horizon| start.at > horizon))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(starts: &[(u64, u64)]) -> StartLog {
        let mut log = StartLog::default();
        starts.iter().for_each(|&(at, units)| log.add(at, units));
        log
    }

    #[test]
    fn the_window_frees_when_enough_units_have_left() {
        // 3 units at 10, 5 at 20, 1 at 30; a window of 100.
        let log = log(&[(10, 3), (20, 5), (30, 1)]);
        assert_eq!(log.frees_at(0, 9, 100), None, "9 fit");
        assert_eq!(log.frees_at(0, 8, 100), Some(110), "the 3 at 10 must leave");
        assert_eq!(log.frees_at(0, 6, 100), Some(110));
        assert_eq!(log.frees_at(0, 5, 100), Some(120), "and the 5 at 20");
        assert_eq!(log.frees_at(0, 0, 100), Some(130));
        assert_eq!(log.frees_at(120, 5, 100), None, "already left");
    }

    #[test]
    fn units_at_one_instant_share_an_entry_and_are_removed_by_count() {
        let mut log = log(&[(10, 3), (10, 4)]);
        assert_eq!(log.in_window(10, 100).count(), 1);
        log.remove(10, 5);
        assert_eq!(log.units, 2);
        log.resize(10, 2, 0);
        assert_eq!(log.units, 0);
        assert_eq!(log.in_window(10, 100).count(), 0);
    }

    #[test]
    fn starts_added_out_of_order_keep_time_order() {
        // In order, at the newest instant, then older ones (a settle).
        let log = log(&[(10, 1), (30, 1), (30, 2), (20, 4), (10, 5), (5, 6)]);
        let starts: Vec<_> = log.in_window(30, 100).map(|s| (s.at, s.units)).collect();
        assert_eq!(starts, [(5, 6), (10, 6), (20, 4), (30, 3)]);
        assert_eq!(log.units, 19);
    }

    #[test]
    fn a_huge_weight_is_one_entry() {
        let mut log = StartLog::default();
        log.add(5, u64::from(u32::MAX));
        log.add(5, u64::MAX);
        assert_eq!(log.units, u64::MAX);
        assert_eq!(log.frees_at(5, u64::MAX - 1, 10), Some(15));
    }

    #[test]
    fn making_room_drops_only_what_had_to_leave() {
        let mut log = log(&[(10, 3), (20, 5), (30, 1)]);
        log.make_room(6, 100);
        assert_eq!(log.units, 6);
        log.prune(125, 100);
        assert_eq!(log.units, 1);
    }
}
