//! A fixed window counter, windows aligned to Unix time: a
//! [`FixedWindow`] state in one row of `tower_limits_fixed_windows`.

use rusqlite::{OptionalExtension, Transaction, params};

use crate::store::quota_state::FixedWindow;
use crate::store::sqlite::schema::Tables;
use crate::store::sqlite::{expires, nonnegative, stored};

pub(super) const TABLE: &str = "tower_limits_fixed_windows";

/// Its one table.
pub(super) const TABLES: Tables = Tables {
    names: &[TABLE],
    create: "
CREATE TABLE IF NOT EXISTS tower_limits_fixed_windows (
    name TEXT PRIMARY KEY,
    window_index INTEGER NOT NULL,
    count INTEGER NOT NULL,
    next_available INTEGER NOT NULL,
    expires INTEGER NOT NULL
) WITHOUT ROWID;
",
};

/// `fresh` with the numbers of the row called `name`, if there is one, and
/// the window of its last reset (kept apart, see [`super::RESETS`]).
pub(super) fn load(
    tx: &Transaction<'_>,
    name: &str,
    fresh: FixedWindow,
) -> rusqlite::Result<FixedWindow> {
    let sql = "SELECT window_index, count, next_available, (SELECT cleared FROM \
               tower_limits_resets WHERE name = ?1 AND kind = 'tower_limits_fixed_windows') \
               FROM tower_limits_fixed_windows WHERE name = ?1";
    let row: Option<(i64, i64, i64, Option<i64>)> = tx
        .prepare_cached(sql)?
        .query_row([name], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .optional()?;
    Ok(match row {
        Some((index, count, next_available, cleared)) => FixedWindow {
            // -1: no window counted yet.
            index: u64::try_from(index).ok(),
            count: nonnegative(count),
            not_before: nonnegative(next_available),
            cleared: cleared.map(nonnegative),
            ..fresh
        },
        None => fresh,
    })
}

pub(super) fn save(tx: &Transaction<'_>, name: &str, window: &FixedWindow) -> rusqlite::Result<()> {
    let sql = "INSERT OR REPLACE INTO tower_limits_fixed_windows \
               (name, window_index, count, next_available, expires) \
               VALUES (?1, ?2, ?3, ?4, ?5)";
    // The count matters until its window ends, and a reset (read with the
    // row) until the end of its window.
    let ends = window
        .index
        .max(window.cleared)
        .map_or(0, |index| window.windows.start(index.saturating_add(1)));
    tx.prepare_cached(sql)?.execute(params![
        name,
        window.index.map_or(-1, stored),
        stored(window.count),
        stored(window.not_before),
        expires(ends, window.not_before)
    ])?;
    Ok(())
}

/// Keeps the window of the reset of `window` (see [`super::RESETS`]) as
/// long as the row.
pub(super) fn save_reset(
    tx: &Transaction<'_>,
    name: &str,
    window: &FixedWindow,
) -> rusqlite::Result<()> {
    let Some(cleared) = window.cleared else {
        return Ok(());
    };
    let ends = window.windows.start(cleared.saturating_add(1));
    super::save_reset(tx, name, TABLE, stored(cleared), expires(ends, 0))
}
