//! A fixed window counter, windows aligned to Unix time: the rules of
//! `FixedWindowLimiter` and `fixed_window.lua`, on one row of
//! `tower_limits_fixed_windows`.

use std::time::Duration;

use rusqlite::{OptionalExtension, Transaction, params};

use super::quota_state::{QuotaState, Row};
use super::{nanos, signed};

/// One fixed window state: its configuration and its row.
pub(super) struct FixedWindow {
    max: i64,
    /// The window's length (ns).
    window: i64,
    /// The counted window's index (Unix time / window; -1: none).
    index: i64,
    count: i64,
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
            max: i64::from(max),
            window: nanos(window).max(1),
            index,
            count,
            row: Row {
                next_available,
                changed: false,
            },
        })
    }

    /// The index of the window holding `at`.
    fn index_of(&self, at: i64) -> i64 {
        at.div_euclid(self.window)
    }

    fn count_in(&self, index: i64) -> i64 {
        if self.index == index { self.count } else { 0 }
    }

    fn set(&mut self, index: i64, count: i64) {
        (self.index, self.count, self.row.changed) = (index, count, true);
    }

    /// Moves the `from` units counted in window `index` to `to`, in the
    /// window of `now`.
    fn recount(&mut self, now: i64, index: i64, from: u32, to: u32) {
        let current = self.index_of(now);
        let counted = self.count_in(current);
        let (from, to) = (i64::from(from), i64::from(to));
        if index == current {
            self.set(current, counted.saturating_sub(from).max(0) + to);
        } else if to > from {
            self.set(current, counted.saturating_add(to - from));
        }
    }
}

impl QuotaState for FixedWindow {
    fn decide(&mut self, now: i64, cost: u32) -> Result<u64, i64> {
        if let Some(at) = self.blocked_until(now, cost) {
            return Err(at);
        }
        let current = self.index_of(now);
        self.set(
            current,
            self.count_in(current).saturating_add(i64::from(cost)),
        );
        Ok(u64::try_from(current).unwrap_or(0))
    }

    fn blocked_until(&self, now: i64, cost: u32) -> Option<i64> {
        let from = now.max(self.row.next_available);
        let index = self.index_of(from);
        let mut at = from;
        if self.count_in(index).saturating_add(i64::from(cost)) > self.max {
            at = index.saturating_add(1).saturating_mul(self.window);
        }
        (at > now).then_some(at)
    }

    fn take(&mut self, now: i64) {
        self.recount(now, self.index_of(now), 0, 1);
    }

    fn adjust(&mut self, now: i64, ticket: u64, from: u32, to: u32) -> Option<u64> {
        self.recount(now, signed(ticket), from, to);
        Some(ticket)
    }

    fn row(&mut self) -> &mut Row {
        &mut self.row
    }

    fn save(&self, tx: &Transaction<'_>, name: &str) -> rusqlite::Result<()> {
        let sql = "INSERT OR REPLACE INTO tower_limits_fixed_windows \
                   (name, window_index, count, next_available, expires) \
                   VALUES (?1, ?2, ?3, ?4, ?5)";
        let expires = self
            .row
            .expires(self.index.saturating_add(1).saturating_mul(self.window));
        tx.prepare_cached(sql)?.execute(params![
            name,
            self.index,
            self.count,
            self.row.next_available,
            expires
        ])?;
        Ok(())
    }
}
