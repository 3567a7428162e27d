//! A sliding window counter, windows aligned to Unix time: the rules of
//! `SlidingWindowCounterLimiter` and `sliding_window_counter.lua`, on one
//! row of `tower_limits_sliding_windows`.

use std::time::Duration;

use rusqlite::{OptionalExtension, Transaction, params};

use super::quota_state::{QuotaState, Row};
use super::{nanos, signed};

/// One sliding window counter: its configuration and its row.
pub(super) struct SlidingWindowCounter {
    max: i64,
    /// The window's length (ns).
    window: i64,
    /// The current window's index (Unix time / window).
    index: i64,
    current: i64,
    previous: i64,
    row: Row,
}

impl SlidingWindowCounter {
    pub(super) const TABLE: &'static str = "tower_limits_sliding_windows";

    pub(super) fn load(
        tx: &Transaction<'_>,
        name: &str,
        max: u32,
        window: Duration,
    ) -> rusqlite::Result<Self> {
        let sql = "SELECT window_index, current, previous, next_available \
                   FROM tower_limits_sliding_windows WHERE name = ?1";
        let row: Option<(i64, i64, i64, i64)> = tx
            .prepare_cached(sql)?
            .query_row([name], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .optional()?;
        let (index, current, previous, next_available) = row.unwrap_or_default();
        Ok(Self {
            max: i64::from(max),
            window: nanos(window).max(1),
            index,
            current,
            previous,
            row: Row {
                next_available,
                changed: false,
            },
        })
    }

    fn index_of(&self, at: i64) -> i64 {
        at.div_euclid(self.window)
    }

    /// The counts as of window `index`: (current, previous).
    fn counts_at(&self, index: i64) -> (i64, i64) {
        match index.saturating_sub(self.index) {
            ..=0 => (self.current, self.previous),
            1 => (0, self.current),
            _ => (0, 0),
        }
    }

    /// How far into a window `previous` weighs little enough to leave
    /// `room`.
    fn offset_for(&self, previous: i64, room: i64) -> i64 {
        if previous <= room {
            return 0;
        }
        let kept = i128::from(room.max(0)) * i128::from(self.window) / i128::from(previous);
        self.window - i64::try_from(kept).unwrap_or(self.window)
    }

    /// Rolls the counts forward to the window of `now`; its index.
    fn roll(&mut self, now: i64) -> i64 {
        let index = self.index_of(now);
        (self.current, self.previous) = self.counts_at(index);
        self.index = self.index.max(index);
        self.row.changed = true;
        index
    }

    /// Moves the `from` units counted in window `index` to `to`.
    fn recount(&mut self, now: i64, index: i64, from: u32, to: u32) {
        let current = self.roll(now);
        let (from, to) = (i64::from(from), i64::from(to));
        let moved = |count: i64| count.saturating_sub(from).max(0).saturating_add(to);
        if index == current {
            self.current = moved(self.current);
        } else if index.saturating_add(1) == current {
            self.previous = moved(self.previous);
        } else if to > from {
            self.current = self.current.saturating_add(to - from);
        }
    }
}

impl QuotaState for SlidingWindowCounter {
    fn decide(&mut self, now: i64, cost: u32) -> Result<u64, i64> {
        if let Some(at) = self.blocked_until(now, cost) {
            return Err(at);
        }
        let index = self.roll(now);
        self.current = self.current.saturating_add(i64::from(cost));
        Ok(u64::try_from(index).unwrap_or(0))
    }

    fn blocked_until(&self, now: i64, cost: u32) -> Option<i64> {
        let cost = i64::from(cost);
        let from = now.max(self.row.next_available);
        let index = self.index_of(from);
        let (current, previous) = self.counts_at(index);
        let start = index.saturating_mul(self.window);
        let at = if current.saturating_add(cost) <= self.max {
            let room = self.max.saturating_sub(current).saturating_sub(cost);
            from.max(start.saturating_add(self.offset_for(previous, room)))
        } else {
            let next = start.saturating_add(self.window);
            next.saturating_add(self.offset_for(current, self.max - cost))
        };
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
        let sql = "INSERT OR REPLACE INTO tower_limits_sliding_windows \
                   (name, window_index, current, previous, next_available, expires) \
                   VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
        let expires = self
            .row
            .expires(self.index.saturating_add(2).saturating_mul(self.window));
        tx.prepare_cached(sql)?.execute(params![
            name,
            self.index,
            self.current,
            self.previous,
            self.row.next_available,
            expires
        ])?;
        Ok(())
    }
}
