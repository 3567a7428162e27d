//! GCRA, which is also the token bucket: a [`Cells`] state in one row of
//! `tower_limits_cells`, its gaps packed in a blob.

use rusqlite::{OptionalExtension, Transaction, params};

use crate::algorithms::slots::Line;
use crate::store::quota_state::Cells;
use crate::store::sqlite::schema::Tables;
use crate::store::sqlite::{expires, nonnegative, signed, stored, unsigned};

pub(super) const TABLE: &str = "tower_limits_cells";

/// Its one table.
pub(super) const TABLES: Tables = Tables {
    names: &[TABLE],
    create: "
CREATE TABLE IF NOT EXISTS tower_limits_cells (
    name TEXT PRIMARY KEY,
    tat INTEGER NOT NULL,
    next_available INTEGER NOT NULL,
    cut INTEGER NOT NULL DEFAULT 0,
    retuned INTEGER NOT NULL DEFAULT 0,
    gaps BLOB NOT NULL DEFAULT x'',
    expires INTEGER NOT NULL
) WITHOUT ROWID;
",
};

/// `fresh` with the numbers of the row called `name`, if there is one, at
/// `now` (a new interval rescales the line's lead over it).
pub(super) fn load(
    tx: &Transaction<'_>,
    name: &str,
    fresh: Cells,
    now: u64,
) -> rusqlite::Result<Cells> {
    let sql = "SELECT tat, next_available, cut, retuned, gaps FROM tower_limits_cells \
               WHERE name = ?1";
    let row: Option<(i64, i64, i64, i64, Vec<u8>)> = tx
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
    let Some((tat, next_available, cut, retuned, gaps)) = row else {
        return Ok(fresh);
    };
    let mut cells = Cells {
        line: Line {
            tat: nonnegative(tat),
            gaps: unpacked(&gaps),
        },
        cut: unsigned(cut),
        retuned: nonnegative(retuned),
        not_before: nonnegative(next_available),
        ..fresh
    };
    cells.recut(now);
    Ok(cells)
}

pub(super) fn save(tx: &Transaction<'_>, name: &str, cells: &Cells) -> rusqlite::Result<()> {
    let sql = "INSERT OR REPLACE INTO tower_limits_cells \
               (name, tat, next_available, cut, retuned, gaps, expires) \
               VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
    tx.prepare_cached(sql)?.execute(params![
        name,
        stored(cells.line.tat),
        stored(cells.not_before),
        signed(cells.cut),
        stored(cells.retuned),
        packed(&cells.line.gaps),
        expires(cells.ends(), cells.not_before)
    ])?;
    Ok(())
}

/// Gaps as 16 bytes each: start and end, little-endian.
fn packed(gaps: &[(u64, u64)]) -> Vec<u8> {
    gaps.iter()
        .flat_map(|&(start, end)| start.to_le_bytes().into_iter().chain(end.to_le_bytes()))
        .collect()
}

/// The gaps [`packed`] stored; anything else (a blob cut short, gaps out of
/// order) is read as no gaps, which gives nothing back that was not.
fn unpacked(blob: &[u8]) -> Vec<(u64, u64)> {
    let word = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().unwrap_or_default());
    let gaps: Vec<(u64, u64)> = blob
        .chunks_exact(16)
        .map(|gap| (word(&gap[..8]), word(&gap[8..])))
        .collect();
    let ordered = gaps.iter().all(|&(start, end)| start < end)
        && gaps.windows(2).all(|pair| pair[0].1 <= pair[1].0);
    if blob.len().is_multiple_of(16) && ordered {
        gaps
    } else {
        Vec::new()
    }
}
