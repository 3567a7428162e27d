//! [`QuotaState`]: what each quota algorithm's row does, for `quota.rs`
//! to decide with, whatever the algorithm.

use rusqlite::Transaction;

use super::schema::GRACE;
use super::unix;

/// The state of one quota inside a transaction, by its algorithm's rules.
/// Times are nanoseconds of Unix time.
pub(super) trait QuotaState {
    /// Takes `cost` units and answers the ticket, or answers when `cost`
    /// could be taken.
    fn decide(&mut self, now: i64, cost: u32) -> Result<u64, i64>;

    /// When `cost` units could be taken, if not now.
    fn blocked_until(&self, now: i64, cost: u32) -> Option<i64>;

    /// Takes one unit, room or not.
    fn take(&mut self, now: i64);

    /// Turns the `from` units granted with `ticket` into `to`; the ticket
    /// that now stands for the grant, if it can still be adjusted down.
    fn adjust(&mut self, now: i64, ticket: u64, from: u32, to: u32) -> Option<u64>;

    /// The pause and change flag every quota row has.
    fn row(&mut self) -> &mut Row;

    /// Grants nothing before `until`; never shortens a pause.
    fn pause(&mut self, until: i64) {
        let row = self.row();
        row.next_available = row.next_available.max(until);
        row.changed = true;
    }

    /// Writes the row back.
    fn save(&self, tx: &Transaction<'_>, name: &str) -> rusqlite::Result<()>;
}

/// What every quota row has besides its algorithm's numbers.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Row {
    /// No grant before this (ns).
    pub(super) next_available: i64,
    /// Whether the row must be saved.
    pub(super) changed: bool,
}

impl Row {
    /// `expires` for a row whose numbers matter until `ends` (ns).
    pub(super) fn expires(&self, ends: i64) -> i64 {
        ends.max(self.next_available).saturating_add(GRACE)
    }

    /// The pause, as the algorithms count time.
    pub(super) fn not_before(&self) -> u64 {
        unix(self.next_available)
    }
}
