//! The tables of a [`SqliteStore`](super::SqliteStore), each connection's
//! settings, and the sweep of rows that no longer matter.
//!
//! Every table has an `expires` column (nanoseconds of Unix time): once it
//! has passed, the row affects no decision and the sweep deletes it. Times
//! in the other columns are nanoseconds of Unix time, except the sliding
//! log's (`tower_limits_starts`, `tower_limits_backoffs`), which are in
//! microseconds as the log's tickets are.

use std::time::Duration;

use rusqlite::{Connection, Transaction};

use super::Now;

/// How often write calls sweep (nanoseconds).
pub(super) const SWEEP_EVERY: i64 = 10_000_000_000;

/// How long state outlives the last moment it affects a decision
/// (nanoseconds), as a Redis key outlives its window by a second.
pub(super) const GRACE: i64 = 1_000_000_000;

/// A kind of state's tables, each with an `expires` column, and the SQL
/// that creates them.
pub(super) struct Tables {
    pub(super) names: &'static [&'static str],
    pub(super) create: &'static str,
}

/// The leases' and the curves' tables.
const SHARED: Tables = Tables {
    names: &[
        "tower_limits_leases",
        "tower_limits_lease_pauses",
        "tower_limits_curves",
    ],
    create: "
CREATE TABLE IF NOT EXISTS tower_limits_leases (
    name TEXT NOT NULL,
    lease INTEGER NOT NULL,
    expires INTEGER NOT NULL,
    PRIMARY KEY (name, lease)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tower_limits_lease_pauses (
    name TEXT PRIMARY KEY,
    expires INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tower_limits_curves (
    name TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    w1 INTEGER NOT NULL,
    w2 INTEGER NOT NULL,
    w3 INTEGER NOT NULL,
    w4 INTEGER NOT NULL,
    w5 INTEGER NOT NULL,
    w6 INTEGER NOT NULL,
    expires INTEGER NOT NULL
) WITHOUT ROWID;
",
};

/// Every table: each quota algorithm's (`quota::TABLES`), then the
/// leases' and the curves'.
fn all_tables() -> impl Iterator<Item = &'static Tables> {
    super::quota::TABLES.iter().chain([&SHARED])
}

/// Sets up a new connection: the busy timeout, WAL (readers never wait for
/// the writer, and several processes share the file) and `NORMAL` syncing
/// (safe in WAL; a power cut may lose the last decisions, never corrupt).
pub(super) fn configure(connection: &mut Connection, timeout: Duration) -> rusqlite::Result<()> {
    connection.busy_timeout(timeout)?;
    connection
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0))?;
    connection.pragma_update(None, "synchronous", "NORMAL")
}

/// Creates every table and index that is missing, and brings a cells table
/// of an earlier version (a generation instead of slots) up to date.
pub(super) fn create(tx: &Transaction<'_>, _now: Now) -> rusqlite::Result<()> {
    for tables in all_tables() {
        tx.execute_batch(tables.create)?;
    }
    let has_generation: bool = tx
        .prepare("SELECT 1 FROM pragma_table_info('tower_limits_cells') WHERE name = 'generation'")?
        .exists([])?;
    if has_generation {
        // Its tickets named generations, not slots: with `cut` 0, the
        // first decision on each row takes its slots as cut with another
        // interval, and gives none of them back.
        tx.execute_batch(
            "ALTER TABLE tower_limits_cells DROP COLUMN generation;
             ALTER TABLE tower_limits_cells ADD COLUMN cut INTEGER NOT NULL DEFAULT 0;
             ALTER TABLE tower_limits_cells ADD COLUMN retuned INTEGER NOT NULL DEFAULT 0;
             ALTER TABLE tower_limits_cells ADD COLUMN gaps BLOB NOT NULL DEFAULT x'';",
        )?;
    }
    for &table in all_tables().flat_map(|tables| tables.names) {
        tx.execute_batch(&format!(
            "CREATE INDEX IF NOT EXISTS {table}_by_expiry ON {table} (expires)"
        ))?;
    }
    Ok(())
}

/// Deletes every expired row; answers how many.
pub(super) fn sweep(tx: &Transaction<'_>, now: Now) -> rusqlite::Result<usize> {
    let mut deleted = 0;
    for &table in all_tables().flat_map(|tables| tables.names) {
        let sql = format!("DELETE FROM {table} WHERE expires <= ?1");
        deleted += tx.prepare_cached(&sql)?.execute([now.0])?;
    }
    Ok(deleted)
}
