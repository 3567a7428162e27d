//! GCRA, which is also the token bucket: a [`Cells`] state in one row of
//! `tower_limits_cells`.

use rusqlite::{OptionalExtension, Transaction, params};

use super::{expires, nonnegative, signed, stored, unsigned};
use crate::store::quota_state::Cells;

pub(super) const TABLE: &str = "tower_limits_cells";

/// `fresh` with the numbers of the row called `name`, if there is one.
pub(super) fn load(tx: &Transaction<'_>, name: &str, fresh: Cells) -> rusqlite::Result<Cells> {
    let sql = "SELECT tat, next_available, generation FROM tower_limits_cells WHERE name = ?1";
    let row: Option<(i64, i64, i64)> = tx
        .prepare_cached(sql)?
        .query_row([name], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    Ok(match row {
        Some((tat, next_available, generation)) => Cells {
            tat: nonnegative(tat),
            not_before: nonnegative(next_available),
            generation: unsigned(generation),
            ..fresh
        },
        None => fresh,
    })
}

pub(super) fn save(tx: &Transaction<'_>, name: &str, cells: &Cells) -> rusqlite::Result<()> {
    let sql = "INSERT OR REPLACE INTO tower_limits_cells \
               (name, tat, next_available, generation, expires) VALUES (?1, ?2, ?3, ?4, ?5)";
    tx.prepare_cached(sql)?.execute(params![
        name,
        stored(cells.tat),
        stored(cells.not_before),
        signed(cells.generation),
        expires(cells.ends(), cells.not_before)
    ])?;
    Ok(())
}
