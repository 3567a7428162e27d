//! A sliding window counter, windows aligned to Unix time: a
//! [`SlidingWindowCounter`] state in one row of
//! `tower_limits_sliding_windows`.

use rusqlite::{OptionalExtension, Transaction, params};

use crate::algorithms::sliding_window_counter::Counts;
use crate::store::quota_state::SlidingWindowCounter;
use crate::store::sqlite::schema::Tables;
use crate::store::sqlite::{expires, nonnegative, stored};

pub(super) const TABLE: &str = "tower_limits_sliding_windows";

/// Its one table.
pub(super) const TABLES: Tables = Tables {
    names: &[TABLE],
    create: "
CREATE TABLE IF NOT EXISTS tower_limits_sliding_windows (
    name TEXT PRIMARY KEY,
    window_index INTEGER NOT NULL,
    current INTEGER NOT NULL,
    previous INTEGER NOT NULL,
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
    fresh: SlidingWindowCounter,
) -> rusqlite::Result<SlidingWindowCounter> {
    let sql = "SELECT window_index, current, previous, next_available, (SELECT cleared FROM \
               tower_limits_resets WHERE name = ?1 AND kind = 'tower_limits_sliding_windows') \
               FROM tower_limits_sliding_windows WHERE name = ?1";
    let row: Option<(i64, i64, i64, i64, Option<i64>)> = tx
        .prepare_cached(sql)?
        .query_row([name], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
            ))
        })
        .optional()?;
    Ok(match row {
        Some((index, current, previous, next_available, cleared)) => SlidingWindowCounter {
            counts: Counts {
                index: nonnegative(index),
                current: nonnegative(current),
                previous: nonnegative(previous),
            },
            not_before: nonnegative(next_available),
            cleared: cleared.map(nonnegative),
            ..fresh
        },
        None => fresh,
    })
}

pub(super) fn save(
    tx: &Transaction<'_>,
    name: &str,
    counter: &SlidingWindowCounter,
) -> rusqlite::Result<()> {
    let sql = "INSERT OR REPLACE INTO tower_limits_sliding_windows \
               (name, window_index, current, previous, next_available, expires) \
               VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
    let Counts {
        index,
        current,
        previous,
    } = counter.counts;
    // The counts matter until the next window has weighed them too, and a
    // reset (read with the row) as long as its window's.
    let last = index.max(counter.cleared.unwrap_or(0));
    let ends = counter.windows.start(last.saturating_add(2));
    tx.prepare_cached(sql)?.execute(params![
        name,
        stored(index),
        stored(current),
        stored(previous),
        stored(counter.not_before),
        expires(ends, counter.not_before)
    ])?;
    Ok(())
}

/// Keeps the window of the reset of `counter` (see [`super::RESETS`]) as
/// long as the row.
pub(super) fn save_reset(
    tx: &Transaction<'_>,
    name: &str,
    counter: &SlidingWindowCounter,
) -> rusqlite::Result<()> {
    let Some(cleared) = counter.cleared else {
        return Ok(());
    };
    let ends = counter.windows.start(cleared.saturating_add(2));
    super::save_reset(tx, name, TABLE, stored(cleared), expires(ends, 0))
}
