//! GCRA, which is also the token bucket: the decision of
//! `crate::algorithms::gcra` (as the in-memory cells and `cells.lua`), on
//! one row of `tower_limits_cells`.

use std::time::Duration;

use rusqlite::{OptionalExtension, Transaction, params};

use super::quota_state::{QuotaState, Row};
use super::{stored, unix, unsigned};
use crate::algorithms::gcra::{CellConfig, judge};

/// One GCRA state: its configuration and its row.
pub(super) struct Cells {
    config: CellConfig,
    /// The theoretical arrival time (ns of Unix time).
    tat: u64,
    /// Bumped on every change of the TAT: a grant's ticket.
    generation: i64,
    row: Row,
}

impl Cells {
    pub(super) const TABLE: &'static str = "tower_limits_cells";

    /// The row called `name`, or a fresh state whose generation starts at
    /// `now`, so no ticket from before a sweep deleted the row matches it.
    pub(super) fn load(
        tx: &Transaction<'_>,
        name: &str,
        (interval, burst): (Duration, u32),
        now: i64,
    ) -> rusqlite::Result<Self> {
        let sql = "SELECT tat, next_available, generation FROM tower_limits_cells WHERE name = ?1";
        let row: Option<(i64, i64, i64)> = tx
            .prepare_cached(sql)?
            .query_row([name], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .optional()?;
        let (tat, next_available, generation) = row.unwrap_or((0, 0, now));
        Ok(Self {
            config: CellConfig::validated(interval, burst),
            tat: unix(tat),
            generation,
            row: Row {
                next_available,
                changed: false,
            },
        })
    }

    /// The GCRA test: the TAT a grant of `cost` leaves, or when it would
    /// conform.
    fn judge(&self, now: i64, cost: u32) -> Result<u64, i64> {
        judge(
            self.config,
            unix(now),
            self.row.not_before(),
            self.tat,
            cost,
        )
        .map_err(stored)
    }

    fn move_tat(&mut self, tat: u64) {
        self.tat = tat;
        self.generation = self.generation.wrapping_add(1);
        self.row.changed = true;
    }

    fn ticket(&self) -> u64 {
        unsigned(self.generation)
    }
}

impl QuotaState for Cells {
    fn decide(&mut self, now: i64, cost: u32) -> Result<u64, i64> {
        let tat = self.judge(now, cost)?;
        self.move_tat(tat);
        Ok(self.ticket())
    }

    fn blocked_until(&self, now: i64, cost: u32) -> Option<i64> {
        self.judge(now, cost).err()
    }

    fn take(&mut self, now: i64) {
        let interval = self.config.interval_nanos();
        self.move_tat(self.tat.max(unix(now)).saturating_add(interval));
    }

    fn adjust(&mut self, _now: i64, ticket: u64, from: u32, to: u32) -> Option<u64> {
        let matched = self.ticket() == ticket;
        let difference = self.config.weight(from.abs_diff(to));
        if to < from {
            // Give back only if nothing moved the TAT since the grant.
            if !matched {
                return None;
            }
            self.move_tat(self.tat.saturating_sub(difference));
        } else {
            self.move_tat(self.tat.saturating_add(difference));
        }
        matched.then(|| self.ticket())
    }

    fn row(&mut self) -> &mut Row {
        &mut self.row
    }

    fn save(&self, tx: &Transaction<'_>, name: &str) -> rusqlite::Result<()> {
        let sql = "INSERT OR REPLACE INTO tower_limits_cells \
                   (name, tat, next_available, generation, expires) VALUES (?1, ?2, ?3, ?4, ?5)";
        let tat = stored(self.tat);
        let expires = self.row.expires(tat);
        tx.prepare_cached(sql)?.execute(params![
            name,
            tat,
            self.row.next_available,
            self.generation,
            expires
        ])?;
        Ok(())
    }
}
