//! The sliding window counter of
//! [`Quota::sliding_window_counter`](crate::store::Quota::sliding_window_counter),
//! in every store: the counts of the current and the
//! previous fixed window, the previous one weighted by how much of it the
//! rolling window still covers.

use super::windows::Windows;

/// The two counts, as of window `index`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) index: u64,
    pub(crate) current: u64,
    pub(crate) previous: u64,
}

impl Counts {
    /// The counts as they stand in window `index`. Counts of the window
    /// after it stand as they are (a caller that read the clock a little
    /// before another, a clock stepped back); counts of a window further
    /// ahead were counted in windows of another length (a quota whose window
    /// grew), and count nothing here.
    #[inline]
    pub(crate) fn at(self, index: u64) -> Self {
        match index.checked_sub(self.index) {
            None if self.index - index > 1 => Self {
                index,
                current: 0,
                previous: 0,
            },
            None | Some(0) => self,
            Some(1) => Self {
                index,
                current: 0,
                previous: self.current,
            },
            Some(_) => Self {
                index,
                current: 0,
                previous: 0,
            },
        }
    }

    /// When a call costing `cost` may start: `None` if at `now`. Nothing
    /// starts before the pause `not_before`. The estimate never rises with
    /// time, so the first instant at which it leaves room is exact.
    #[inline]
    pub(crate) fn blocked_until(
        self,
        windows: &Windows,
        now: u64,
        not_before: u64,
        cost: u32,
    ) -> Option<u64> {
        let from = now.max(not_before);
        let index = windows.index(from);
        let counts = self.at(index);
        let max = u64::from(windows.max());
        let taken = counts.current.saturating_add(u64::from(cost));
        let at = match max.checked_sub(taken) {
            // Room in this window once the previous one weighs little enough.
            Some(room) => {
                let offset = offset_for(windows, counts.previous, room);
                from.max(windows.start(index).saturating_add(offset))
            }
            // Not in this window: this one becomes the previous.
            None => {
                let room = max.saturating_sub(u64::from(cost));
                let offset = offset_for(windows, counts.current, room);
                windows
                    .start(index.saturating_add(1))
                    .saturating_add(offset)
            }
        };
        (at > now).then_some(at)
    }

    /// The counts in window `current` once the `from` units a grant counted
    /// in window `index` become `to`: a change while the grant's window is
    /// the current or the previous one, an increase charged to the current
    /// window after that. `None` if nothing changes: a decrease once the
    /// grant's window has left the estimate.
    pub(crate) fn recount(self, current: u64, index: u64, from: u32, to: u32) -> Option<Self> {
        let (from, to) = (u64::from(from), u64::from(to));
        let mut counts = self.at(current);
        let moved = |count: u64| count.saturating_sub(from).saturating_add(to);
        if index == current {
            counts.current = moved(counts.current);
        } else if index.saturating_add(1) == current {
            counts.previous = moved(counts.previous);
        } else if to > from {
            counts.current = counts.current.saturating_add(to - from);
        } else {
            return None;
        }
        Some(counts)
    }
}

/// The smallest offset into a window, at most `W`, at which
/// `previous × (W − e) ≤ room × W`: when the previous window's weight
/// leaves `room` units.
#[inline]
fn offset_for(windows: &Windows, previous: u64, room: u64) -> u64 {
    let length = windows.length();
    if previous <= room {
        return 0;
    }
    // e ≥ W − room·W / previous; room < previous, so the quotient < W.
    let allowed = u128::from(room) * u128::from(length) / u128::from(previous);
    length - u64::try_from(allowed).unwrap_or(length)
}
