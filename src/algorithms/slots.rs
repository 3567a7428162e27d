//! GCRA's line of slots, with the gaps that refunds leave in it: the rule
//! by which the stores' GCRA and token bucket give a grant back, whatever
//! was granted since.
//!
//! [GCRA](super::gcra) keeps one number, the TAT: the end of a line of
//! cells ahead of now, onto which each grant of `n` cells appends `n·T`.
//! Here each grant *holds a slot* of that line, `[end − n·T, end)`, and its
//! ticket is the slot's end. Giving a grant back frees what is still ahead
//! of now in its slot: at the end of the line the TAT moves back; inside
//! the line the time becomes a *gap* that no grant holds. The next grants
//! take the first gap if they fit in it, else the end of the line. The
//! GCRA test counts the time held ahead of now, the line less its gaps:
//! a grant of `n` cells conforms iff `held + n·T ≤ B·T`.
//!
//! The bound stays GCRA's: after a grant the time held ahead of now is at
//! most `B·T` (extra cells a settle charges aside), and every slot starts
//! no earlier than its grant, so the grants of any window of length `t`,
//! those given back excepted, hold at most `B·T + t` of the line: at most
//! `B + t / T` cells. A paced quota's grant at the end of the line may
//! start up to [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE) τ
//! before it (a waiter woken late keeps its place, [`Line::grant`]): then
//! at most `B + (t + τ) / T`, as [`judge`](super::gcra::judge) says. A refund is exact whatever happened since its grant,
//! with one loss: a gap that passes before a grant takes it is time that
//! nobody used, as a full bucket's refill is (in a busy limiter, the next
//! caller in line takes it at once). At most [`MAX_GAPS`] gaps are kept;
//! past that the first is forgotten, and its time counts as held until it
//! passes.
//!
//! Times are nanoseconds from the store's origin. A ticket that does not
//! name a slot the line still holds (given back already, from a state that
//! expired since, or from before the interval changed) gives nothing back.
//! Nor does one from before a reset: a reset empties the line, and the
//! grants made since take slots from now on, where the old slots were, so
//! an old ticket may name time a new grant holds. The stores keep the end
//! the line had at the reset (`retuned`, as for a change of interval) and
//! give back no slot ending at or before it: a grant made after the reset
//! whose slot ends there is not given back either (its ticket cannot be
//! told from an old one), one ending later is, as before.

use crate::clock::paced_from;

/// The most gaps a line keeps.
pub(crate) const MAX_GAPS: usize = 1024;

/// The line: its end (the TAT) and its gaps ahead of now, sorted and
/// disjoint, each `[start, end)` with `start < end <= tat`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Line {
    pub(crate) tat: u64,
    pub(crate) gaps: Vec<(u64, u64)>,
}

impl Line {
    /// Forgets the time of the gaps that `now` has passed.
    pub(crate) fn pass(&mut self, now: u64) {
        self.gaps.retain(|&(_, end)| end > now);
        if let Some(first) = self.gaps.first_mut() {
            first.0 = first.0.max(now);
        }
    }

    /// The time of the gaps still ahead of `now`.
    fn free(&self, now: u64) -> u64 {
        self.gaps
            .iter()
            .map(|&(start, end)| end.saturating_sub(start.max(now)))
            .sum()
    }

    /// The time grants hold ahead of `now`.
    pub(crate) fn held(&self, now: u64) -> u64 {
        self.tat.saturating_sub(now).saturating_sub(self.free(now))
    }

    /// The first instant from `now` on at which at most `room` of the
    /// line is held: held time runs out as now passes it, and not while now
    /// passes a gap.
    pub(crate) fn held_at_most(&self, now: u64, room: u64) -> u64 {
        let Some(mut excess) = self
            .held(now)
            .checked_sub(room)
            .filter(|&excess| excess > 0)
        else {
            return now;
        };
        let mut at = now;
        for &(start, end) in &self.gaps {
            let (start, end) = (start.max(at), end.max(at));
            let before = start - at;
            if before >= excess {
                break;
            }
            excess -= before;
            at = end;
        }
        at.saturating_add(excess)
    }

    /// Gives `weight` taken at `now` a slot (the first gap it fits in, else
    /// the end of the line); the slot's end, the grant's ticket. Expects
    /// [`pass`](Self::pass) at `now` first.
    pub(crate) fn take(&mut self, now: u64, weight: u64) -> u64 {
        self.take_from(now, self.tat.max(now), weight)
    }

    /// Gives a grant of `weight` that GCRA's test admitted at `now` a slot,
    /// as [`take`](Self::take) does, except that a paced grant at the end
    /// of a line that ended before now starts where [`paced_from`] says: a
    /// waiter that woke late keeps its place, up to
    /// [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE) τ.
    pub(crate) fn grant(&mut self, now: u64, weight: u64, paced: bool) -> u64 {
        let from = if paced {
            paced_from(self.tat, now)
        } else {
            self.tat.max(now)
        };
        self.take_from(now, from, weight)
    }

    /// A slot of `weight` in the first gap it fits in, else from `from` at
    /// the end of the line (`from` is at least the line's end).
    fn take_from(&mut self, now: u64, from: u64, weight: u64) -> u64 {
        if weight == 0 {
            return self.tat.max(now);
        }
        if let Some(first) = self.gaps.first_mut() {
            let (start, end) = *first;
            if end - start >= weight {
                let slot_end = start + weight;
                if slot_end == end {
                    self.gaps.remove(0);
                } else {
                    first.0 = slot_end;
                }
                return slot_end;
            }
        }
        self.tat = from.saturating_add(weight);
        self.tat
    }

    /// Frees what is ahead of `now` of the last `weight` of the slot ending
    /// at `end`. Whether `end` named time the line still holds (`false`
    /// for a slot given back already or past the line's end: nothing is
    /// freed). Expects [`pass`](Self::pass) at `now` first.
    pub(crate) fn give_back(&mut self, now: u64, end: u64, weight: u64) -> bool {
        let start = end.saturating_sub(weight).max(now);
        if end > self.tat || self.gaps.iter().any(|&(s, e)| s < end && start < e) {
            return false;
        }
        if end <= start {
            return true; // passed: nothing ahead of now to free
        }
        if end == self.tat {
            self.tat = start;
            while let Some(&(gap_start, _)) = self.gaps.last().filter(|gap| gap.1 == self.tat) {
                self.tat = gap_start;
                self.gaps.pop();
            }
        } else {
            self.insert_gap(start, end);
        }
        true
    }

    /// Adds the gap `[start, end)`, joined to a gap it touches.
    fn insert_gap(&mut self, start: u64, end: u64) {
        let at = self.gaps.partition_point(|&(s, _)| s < start);
        self.gaps.insert(at, (start, end));
        if let Some(&(_, next_end)) = self.gaps.get(at + 1).filter(|next| next.0 == end) {
            self.gaps[at].1 = next_end;
            self.gaps.remove(at + 1);
        }
        if at > 0 && self.gaps[at - 1].1 == start {
            self.gaps[at - 1].1 = self.gaps[at].1;
            self.gaps.remove(at);
        }
        if self.gaps.len() > MAX_GAPS {
            self.gaps.remove(0);
        }
    }

    /// Charges `weight` more to the grant whose slot ends at `end`: its slot
    /// grows if it ends the line, else the line grows by a slot of its own.
    /// The grant's new ticket, or `None` if its time is no longer one slot.
    /// Expects [`pass`](Self::pass) at `now` first.
    pub(crate) fn charge(&mut self, now: u64, end: u64, weight: u64) -> Option<u64> {
        let grows = end == self.tat && end > now;
        self.tat = self.tat.max(now).saturating_add(weight);
        grows.then_some(self.tat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 10;

    /// A line ending at `tat`, with no gaps.
    fn ending_at(tat: u64) -> Line {
        Line {
            tat,
            gaps: Vec::new(),
        }
    }

    /// A line at `now` = 0 holding grants of one cell each, back to back.
    fn line_of(grants: u64) -> (Line, Vec<u64>) {
        let mut line = ending_at(0);
        let tickets = (0..grants).map(|_| line.take(0, T)).collect();
        (line, tickets)
    }

    #[test]
    fn a_refund_in_the_middle_leaves_a_gap_the_next_grant_takes() {
        let (mut line, tickets) = line_of(3);
        assert!(line.give_back(0, tickets[1], T));
        assert_eq!(line.gaps, [(T, 2 * T)]);
        assert_eq!(line.held(0), 2 * T);
        assert_eq!(line.take(0, T), 2 * T, "the gap's slot");
        assert!(line.gaps.is_empty());
        assert_eq!(line.tat, 3 * T);
    }

    #[test]
    fn refunds_in_any_order_empty_the_line() {
        for order in [
            [0, 1, 2],
            [2, 1, 0],
            [1, 0, 2],
            [1, 2, 0],
            [0, 2, 1],
            [2, 0, 1],
        ] {
            let (mut line, tickets) = line_of(3);
            for index in order {
                assert!(line.give_back(0, tickets[index], T), "{order:?}");
            }
            assert_eq!(line, ending_at(0), "{order:?}");
        }
    }

    #[test]
    fn a_refund_gives_back_only_what_is_ahead_of_now() {
        let (mut line, tickets) = line_of(3);
        line.pass(15);
        assert!(line.give_back(15, tickets[1], T));
        assert_eq!(line.gaps, [(15, 20)]);
        assert_eq!(line.held(15), 10, "the third slot");
        assert!(
            line.give_back(25, tickets[0], T),
            "a passed slot: nothing to free"
        );
        assert_eq!(line.held(15), 10);
    }

    #[test]
    fn a_second_refund_of_a_slot_gives_nothing() {
        let (mut line, tickets) = line_of(3);
        assert!(line.give_back(0, tickets[1], T));
        assert!(!line.give_back(0, tickets[1], T));
        assert!(line.give_back(0, tickets[2], T));
        assert!(!line.give_back(0, tickets[2], T), "past the line's end now");
        assert_eq!(line, ending_at(T));
    }

    #[test]
    fn time_held_runs_out_only_outside_gaps() {
        let (mut line, tickets) = line_of(4);
        assert!(line.give_back(0, tickets[1], T));
        // Held: [0, 10) and [20, 40). At most 10 held once 10 of it passed,
        // which is at 30: the gap [10, 20) does not count.
        assert_eq!(line.held_at_most(0, 10), 30);
        assert_eq!(line.held_at_most(0, 30), 0);
        assert_eq!(line.held_at_most(0, 0), 40);
    }

    #[test]
    fn the_gaps_kept_are_bounded_and_the_first_is_forgotten() {
        // Every other grant given back: one gap more than are kept (the
        // last one ends the line, which moves back instead).
        let (mut line, tickets) = line_of(2 * MAX_GAPS as u64 + 4);
        for ticket in tickets.iter().skip(1).step_by(2) {
            assert!(line.give_back(0, *ticket, T));
        }
        assert_eq!(line.gaps.len(), MAX_GAPS);
        assert_eq!(line.gaps[0], (3 * T, 4 * T), "the first gap was forgotten");
        assert_eq!(line.held(0), line.tat - MAX_GAPS as u64 * T);
    }

    #[test]
    fn a_charge_grows_the_last_slot_else_adds_one() {
        let (mut line, tickets) = line_of(2);
        assert_eq!(line.charge(0, tickets[1], T), Some(3 * T));
        assert_eq!(line.charge(0, tickets[0], T), None);
        assert_eq!(line.tat, 4 * T);
    }
}
