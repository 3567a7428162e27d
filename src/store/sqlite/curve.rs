//! [`CurveStore`] for [`SqliteStore`]: the rules of `curve.lua`, one row of
//! `tower_limits_curves` per name. Times are nanoseconds of Unix time.

use rusqlite::{OptionalExtension, Transaction, params};

use super::{Mode, Now, SqliteKey, SqliteStore, nanos};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::store::curve::CURVE_TTL;
use crate::store::{CurveRecord, CurveStore};

/// The unexpired record called `name`.
fn load(tx: &Transaction<'_>, name: &str, now: Now) -> rusqlite::Result<Option<CurveRecord>> {
    let sql = "SELECT version, w1, w2, w3, w4, w5, w6 FROM tower_limits_curves \
               WHERE name = ?1 AND expires > ?2";
    tx.prepare_cached(sql)?
        .query_row(params![name, now.0], |row| {
            let version: i64 = row.get(0)?;
            let mut words = [0; 6];
            for (column, word) in words.iter_mut().enumerate() {
                *word = row.get(column + 1)?;
            }
            Ok(CurveRecord::from_words(version.unsigned_abs(), words))
        })
        .optional()
}

/// Writes `record` over its version; whether it did.
fn swap(tx: &Transaction<'_>, name: &str, now: Now, record: CurveRecord) -> rusqlite::Result<bool> {
    let current = load(tx, name, now)?.map_or(0, |stored| stored.version());
    if current != record.version() {
        return Ok(false);
    }
    let [w1, w2, w3, w4, w5, w6] = record.words();
    let version = i64::try_from(current + 1).unwrap_or(i64::MAX);
    let expires = now.0.saturating_add(nanos(CURVE_TTL));
    let sql = "INSERT OR REPLACE INTO tower_limits_curves \
               (name, version, w1, w2, w3, w4, w5, w6, expires) \
               VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
    tx.prepare_cached(sql)?
        .execute(params![name, version, w1, w2, w3, w4, w5, w6, expires])?;
    Ok(true)
}

impl CurveStore for SqliteStore {
    type CurveKey = SqliteKey;

    fn curve_key(&self, name: &str) -> SqliteKey {
        SqliteKey::new(name)
    }

    fn load_curve<'a>(
        &'a self,
        key: &'a SqliteKey,
    ) -> LimiterFuture<'a, Result<Option<CurveRecord>, LimiterError>> {
        let name = key.owned();
        LimiterFuture::new(self.call(Mode::Read, move |tx, now| load(tx, &name, now)))
    }

    fn swap_curve<'a>(
        &'a self,
        key: &'a SqliteKey,
        record: CurveRecord,
    ) -> LimiterFuture<'a, Result<bool, LimiterError>> {
        let name = key.owned();
        LimiterFuture::new(self.call(Mode::Write, move |tx, now| swap(tx, &name, now, record)))
    }
}
