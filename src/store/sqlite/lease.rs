//! [`LeaseStore`] for [`SqliteStore`]: the rules of `MemoryStore`'s lease
//! table and `leases.lua`. Each lease is a row of `tower_limits_leases`
//! whose `expires` is the lease's expiry; a pause is a row of
//! `tower_limits_lease_pauses`. Times are nanoseconds of Unix time.

use std::time::Duration;

use rusqlite::{OptionalExtension, Transaction, params};
use tokio::time::Instant;

use super::{Answer, Mode, SqliteKey, SqliteStore, after, count_at, nanos, nanos_until, signed};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::store::late::{self, Late};
use crate::store::{LeaseStore, WindowDecision, lease_names, names_of_all};

/// The leases of one key inside a transaction, at `now`.
struct Leases<'a> {
    tx: &'a Transaction<'a>,
    name: &'a str,
    now: i64,
}

impl Leases<'_> {
    /// The end of the pause in force, if any.
    fn paused_until(&self) -> rusqlite::Result<Option<i64>> {
        let sql = "SELECT expires FROM tower_limits_lease_pauses WHERE name = ?1 AND expires > ?2";
        self.tx
            .prepare_cached(sql)?
            .query_row(params![self.name, self.now], |row| row.get(0))
            .optional()
    }

    /// How many unexpired leases are held, and the earliest expiry.
    fn held(&self) -> rusqlite::Result<(usize, Option<i64>)> {
        let sql = "SELECT COUNT(*), MIN(expires) FROM tower_limits_leases \
                   WHERE name = ?1 AND expires > ?2";
        self.tx
            .prepare_cached(sql)?
            .query_row(params![self.name, self.now], |row| {
                Ok((count_at(row, 0)?, row.get(1)?))
            })
    }

    /// Takes the leases `names` of the call `lease` if they fit.
    fn lease(&self, (max, ttl): (u32, i64), lease: u64, names: &[u64]) -> rusqlite::Result<Answer> {
        let retry = |at: i64| Answer::RetryIn(at.saturating_sub(self.now));
        if let Some(until) = self.paused_until()? {
            return Ok(retry(until));
        }
        let expires = self.now.saturating_add(ttl);
        let (held, earliest) = self.held()?;
        if held.saturating_add(names.len()) > max as usize {
            return Ok(retry(earliest.unwrap_or(expires)));
        }
        let sql = "INSERT OR REPLACE INTO tower_limits_leases (name, lease, expires) \
                   VALUES (?1, ?2, ?3)";
        let mut insert = self.tx.prepare_cached(sql)?;
        for &name in names {
            insert.execute(params![self.name, signed(name), expires])?;
        }
        Ok(Answer::Granted(lease))
    }

    fn renew(&self, ttl: i64, names: &[u64]) -> rusqlite::Result<usize> {
        let sql = "UPDATE tower_limits_leases SET expires = ?4 \
                   WHERE name = ?1 AND lease = ?2 AND expires > ?3";
        let mut update = self.tx.prepare_cached(sql)?;
        let expires = self.now.saturating_add(ttl);
        let mut renewed = 0;
        for &name in names {
            renewed += update.execute(params![self.name, signed(name), self.now, expires])?;
        }
        Ok(renewed)
    }

    fn release(&self, names: &[u64]) -> rusqlite::Result<()> {
        let sql = "DELETE FROM tower_limits_leases WHERE name = ?1 AND lease = ?2";
        let mut delete = self.tx.prepare_cached(sql)?;
        for &name in names {
            delete.execute(params![self.name, signed(name)])?;
        }
        Ok(())
    }

    fn pause(&self, until: i64) -> rusqlite::Result<()> {
        let sql = "INSERT INTO tower_limits_lease_pauses (name, expires) VALUES (?1, ?2) \
                   ON CONFLICT (name) DO UPDATE SET expires = MAX(expires, excluded.expires)";
        self.tx
            .prepare_cached(sql)?
            .execute(params![self.name, until])?;
        Ok(())
    }

    fn clear(&self) -> rusqlite::Result<()> {
        for sql in [
            "DELETE FROM tower_limits_leases WHERE name = ?1",
            "DELETE FROM tower_limits_lease_pauses WHERE name = ?1",
        ] {
            self.tx.prepare_cached(sql)?.execute([self.name])?;
        }
        Ok(())
    }
}

impl SqliteStore {
    /// Runs `work` on the leases of `key` in one transaction.
    async fn on_leases<T, F>(
        &self,
        key: &SqliteKey,
        (mode, late): (Mode, Late<T>),
        work: F,
    ) -> Result<T, LimiterError>
    where
        T: Send + 'static,
        F: FnOnce(&Leases<'_>) -> rusqlite::Result<T> + Send + 'static,
    {
        let name = key.owned();
        self.call_late(mode, late, move |tx, now| {
            work(&Leases {
                tx,
                name: &name,
                now: now.0,
            })
        })
        .await
    }
}

impl LeaseStore for SqliteStore {
    type LeaseKey = SqliteKey;

    fn lease_key(&self, name: &str) -> SqliteKey {
        SqliteKey::new(name)
    }

    fn lease<'a>(
        &'a self,
        key: &'a SqliteKey,
        max: u32,
        ttl: Duration,
        lease: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>> {
        let ttl = nanos(ttl);
        LimiterFuture::new(async move {
            let names = lease_names(lease, cost)?;
            let work = move |leases: &Leases<'_>| leases.lease((max, ttl), lease, &names);
            let undo = late::undo_lease(self, key, cost, key.owned().to_string());
            let write = (Mode::Write, undo.before(Answer::decision));
            Ok(self.on_leases(key, write, work).await?.decision())
        })
    }

    fn renew<'a>(
        &'a self,
        key: &'a SqliteKey,
        ttl: Duration,
        leases: &'a [(u64, u32)],
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        let (ttl, names) = (nanos(ttl), names_of_all(leases));
        LimiterFuture::new(async move {
            let names = names?;
            let work = move |leases: &Leases<'_>| leases.renew(ttl, &names);
            self.on_leases(key, (Mode::Write, Late::Drop), work).await
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a SqliteKey,
        lease: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        LimiterFuture::new(async move {
            let names = lease_names(lease, cost)?;
            let work = move |leases: &Leases<'_>| leases.release(&names);
            self.on_leases(key, (Mode::Write, Late::Patient), work)
                .await
        })
    }

    fn leases_held<'a>(
        &'a self,
        key: &'a SqliteKey,
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        LimiterFuture::new(
            self.on_leases(key, (Mode::Read, Late::Drop), |leases| Ok(leases.held()?.0)),
        )
    }

    fn pause_leases<'a>(
        &'a self,
        key: &'a SqliteKey,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let pause = nanos_until(at);
        LimiterFuture::new(
            self.on_leases(key, (Mode::Write, Late::Drop), move |leases| {
                leases.pause(leases.now.saturating_add(pause))
            }),
        )
    }

    fn paused_until<'a>(
        &'a self,
        key: &'a SqliteKey,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        LimiterFuture::new(async move {
            let work = |leases: &Leases<'_>| {
                let until = leases.paused_until()?;
                Ok(until.map(|until| until.saturating_sub(leases.now)))
            };
            Ok(self
                .on_leases(key, (Mode::Read, Late::Drop), work)
                .await?
                .map(after))
        })
    }

    fn clear_leases<'a>(
        &'a self,
        key: &'a SqliteKey,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        LimiterFuture::new(self.on_leases(key, (Mode::Write, Late::Drop), |leases| leases.clear()))
    }
}
