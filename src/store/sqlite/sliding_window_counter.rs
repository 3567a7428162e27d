//! A sliding window counter, windows aligned to Unix time: the decision of
//! `crate::algorithms::sliding_window_counter` (as
//! `SlidingWindowCounterLimiter` and `sliding_window_counter.lua`), on one
//! row of `tower_limits_sliding_windows`.

use std::time::Duration;

use rusqlite::{OptionalExtension, Transaction, params};

use super::quota_state::{QuotaState, Row};
use super::{stored, unix};
use crate::algorithms::sliding_window_counter::Counts;
use crate::algorithms::windows::Windows;

/// One sliding window counter: its configuration and its row.
pub(super) struct SlidingWindowCounter {
    windows: Windows,
    counts: Counts,
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
        let number = |value: i64| u64::try_from(value).unwrap_or(0);
        Ok(Self {
            windows: Windows::validated(max, window),
            counts: Counts {
                index: number(index),
                current: number(current),
                previous: number(previous),
            },
            row: Row {
                next_available,
                changed: false,
            },
        })
    }

    /// Rolls the counts forward to the window of `now`; its index.
    fn roll(&mut self, now: i64) -> u64 {
        let index = self.windows.index(unix(now));
        self.counts = self.counts.at(index);
        self.row.changed = true;
        index
    }

    /// Moves the `from` units counted in window `index` to `to`.
    fn recount(&mut self, now: i64, index: u64, from: u32, to: u32) {
        let current = self.roll(now);
        if let Some(counts) = self.counts.recount(current, index, from, to) {
            self.counts = counts;
        }
    }
}

impl QuotaState for SlidingWindowCounter {
    fn decide(&mut self, now: i64, cost: u32) -> Result<u64, i64> {
        if let Some(at) = self.blocked_until(now, cost) {
            return Err(at);
        }
        let index = self.roll(now);
        self.counts.current = self.counts.current.saturating_add(u64::from(cost));
        Ok(index)
    }

    fn blocked_until(&self, now: i64, cost: u32) -> Option<i64> {
        let not_before = self.row.not_before();
        self.counts
            .blocked_until(&self.windows, unix(now), not_before, cost)
            .map(stored)
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
        let sql = "INSERT OR REPLACE INTO tower_limits_sliding_windows \
                   (name, window_index, current, previous, next_available, expires) \
                   VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
        let Counts {
            index,
            current,
            previous,
        } = self.counts;
        let ends = self.windows.start(index.saturating_add(2));
        tx.prepare_cached(sql)?.execute(params![
            name,
            stored(index),
            stored(current),
            stored(previous),
            self.row.next_available,
            self.row.expires(stored(ends))
        ])?;
        Ok(())
    }
}
