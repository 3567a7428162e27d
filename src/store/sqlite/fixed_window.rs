//! A fixed window counter, windows aligned to Unix time: the decision of
//! `crate::algorithms::fixed_window` (as `FixedWindowLimiter` and
//! `fixed_window.lua`), on one row of `tower_limits_fixed_windows`.

use std::time::Duration;

use rusqlite::{OptionalExtension, Transaction, params};

use super::quota_state::{QuotaState, Row};
use super::{stored, unix};
use crate::algorithms::fixed_window::{blocked_until, recount};
use crate::algorithms::windows::Windows;

/// One fixed window state: its configuration and its row.
pub(super) struct FixedWindow {
    windows: Windows,
    /// The counted window's index (Unix time / window), if any.
    index: Option<u64>,
    count: u64,
    row: Row,
}

impl FixedWindow {
    pub(super) const TABLE: &'static str = "tower_limits_fixed_windows";

    pub(super) fn load(
        tx: &Transaction<'_>,
        name: &str,
        max: u32,
        window: Duration,
    ) -> rusqlite::Result<Self> {
        let sql = "SELECT window_index, count, next_available \
                   FROM tower_limits_fixed_windows WHERE name = ?1";
        let row: Option<(i64, i64, i64)> = tx
            .prepare_cached(sql)?
            .query_row([name], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .optional()?;
        let (index, count, next_available) = row.unwrap_or((-1, 0, 0));
        Ok(Self {
            windows: Windows::validated(max, window),
            index: u64::try_from(index).ok(),
            count: u64::try_from(count).unwrap_or(0),
            row: Row {
                next_available,
                changed: false,
            },
        })
    }

    fn count_in(&self, index: u64) -> u64 {
        if self.index == Some(index) {
            self.count
        } else {
            0
        }
    }

    fn set(&mut self, index: u64, count: u64) {
        (self.index, self.count, self.row.changed) = (Some(index), count, true);
    }

    /// Moves the `from` units counted in window `index` to `to`, in the
    /// window of `now`.
    fn recount(&mut self, now: i64, index: u64, from: u32, to: u32) {
        let current = self.windows.index(unix(now));
        let counted = self.count_in(current);
        if let Some(count) = recount(index, current, counted, from, to) {
            self.set(current, count);
        }
    }
}

impl QuotaState for FixedWindow {
    fn decide(&mut self, now: i64, cost: u32) -> Result<u64, i64> {
        if let Some(at) = self.blocked_until(now, cost) {
            return Err(at);
        }
        let current = self.windows.index(unix(now));
        let count = self.count_in(current).saturating_add(u64::from(cost));
        self.set(current, count);
        Ok(current)
    }

    fn blocked_until(&self, now: i64, cost: u32) -> Option<i64> {
        let count_in = |index| self.count_in(index);
        let not_before = self.row.not_before();
        blocked_until(&self.windows, unix(now), not_before, cost, count_in).map(stored)
    }

    fn take(&mut self, now: i64) {
        let current = self.windows.index(unix(now));
        self.recount(now, current, 0, 1);
    }

    fn adjust(&mut self, now: i64, ticket: u64, from: u32, to: u32) -> Option<u64> {
        self.recount(now, ticket, from, to);
        Some(ticket)
    }

    fn row(&mut self) -> &mut Row {
        &mut self.row
    }

    fn save(&self, tx: &Transaction<'_>, name: &str) -> rusqlite::Result<()> {
        let sql = "INSERT OR REPLACE INTO tower_limits_fixed_windows \
                   (name, window_index, count, next_available, expires) \
                   VALUES (?1, ?2, ?3, ?4, ?5)";
        let index = self.index.map_or(-1, stored);
        let ends = self
            .index
            .map_or(0, |index| self.windows.start(index.saturating_add(1)));
        let expires = self.row.expires(stored(ends));
        tx.prepare_cached(sql)?.execute(params![
            name,
            index,
            stored(self.count),
            self.row.next_available,
            expires
        ])?;
        Ok(())
    }
}
