//! A sliding log [`Quota`] in a [`SqliteStore`]: the log and the classic
//! backoff, by the rules of `MemoryStore` and `sliding_log.lua`.
//!
//! Starts are rows of `tower_limits_starts` (one per unit of cost, at the
//! start's time in microseconds, which is the grant's ticket); the pause,
//! the current backoff and what the last backoff replaced are one row of
//! `tower_limits_backoffs`; the instant of the last reset, at or before
//! which a start gives nothing back, a row of `tower_limits_resets`. Times
//! here are microseconds of Unix time.

use rusqlite::{OptionalExtension, Transaction, params};
use tokio::time::Instant;

use crate::algorithms::sliding_log::Pause;
use crate::error::LimiterError;
use crate::quota_status::{QuotaStatus, try_search};
use crate::store::late::{self, Late};
use crate::store::sqlite::schema::{GRACE, Tables};
use crate::store::sqlite::{
    Answer, Mode, SqliteKey, SqliteStore, after, micros, nanos_to_duration, nonnegative, stored,
};
use crate::store::{Backoff, Quota, WindowDecision};

/// The starts, and the pause and backoff.
pub(super) const TABLES: Tables = Tables {
    names: &["tower_limits_starts", "tower_limits_backoffs"],
    create: "
CREATE TABLE IF NOT EXISTS tower_limits_starts (
    name TEXT NOT NULL,
    at INTEGER NOT NULL,
    expires INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS tower_limits_starts_by_name ON tower_limits_starts (name, at);
CREATE TABLE IF NOT EXISTS tower_limits_backoffs (
    name TEXT PRIMARY KEY,
    next_available INTEGER NOT NULL,
    backoff INTEGER,
    escalated INTEGER NOT NULL,
    escalated_next_available INTEGER NOT NULL,
    escalated_backoff INTEGER,
    expires INTEGER NOT NULL
) WITHOUT ROWID;
",
};

/// The kind of the log's resets in `tower_limits_resets`: its starts' table.
const KIND: &str = "tower_limits_starts";

/// One log inside a transaction, at `now`, under a policy (zeros without).
struct Log<'a> {
    tx: &'a Transaction<'a>,
    name: &'a str,
    now: i64,
    max: u32,
    window: i64,
    backoff: Option<Backoff>,
}

impl Log<'_> {
    /// Drops the starts that left the window `(now - window, now]`.
    fn prune(&self) -> rusqlite::Result<()> {
        let sql = "DELETE FROM tower_limits_starts WHERE name = ?1 AND at <= ?2";
        let horizon = self.now.saturating_sub(self.window);
        self.tx
            .prepare_cached(sql)?
            .execute(params![self.name, horizon])?;
        Ok(())
    }

    /// When the window has room for `cost` more starts, if it has not now:
    /// at most `max - cost` may stay, so the start before the newest of
    /// those must leave.
    fn frees_at(&self, cost: u32) -> rusqlite::Result<Option<i64>> {
        let room = self.max.saturating_sub(cost);
        let sql = "SELECT at FROM tower_limits_starts WHERE name = ?1 \
                   ORDER BY at DESC LIMIT 1 OFFSET ?2";
        let start: Option<i64> = self
            .tx
            .prepare_cached(sql)?
            .query_row(params![self.name, i64::from(room)], |row| row.get(0))
            .optional()?;
        let frees_at = start.map(|start| start.saturating_add(self.window));
        Ok(frees_at.filter(|&at| at > self.now))
    }

    /// When `cost` starts could be granted, if not now: the later of the
    /// pause and the full window freeing a place.
    fn blocked_until(&self, state: &Pause, cost: u32) -> rusqlite::Result<Option<i64>> {
        let frees_at = self.frees_at(cost)?.map(nonnegative);
        Ok(state
            .blocked_until(nonnegative(self.now), frees_at)
            .map(stored))
    }

    /// Adds `count` starts at `at`.
    fn add(&self, at: i64, units: u32) -> rusqlite::Result<()> {
        let sql = "INSERT INTO tower_limits_starts (name, at, expires) VALUES (?1, ?2, ?3)";
        // A start matters until it leaves the window, not a moment longer.
        let expires = at.saturating_add(self.window).saturating_mul(1_000);
        let mut insert = self.tx.prepare_cached(sql)?;
        for _ in 0..units {
            insert.execute(params![self.name, at, expires])?;
        }
        Ok(())
    }

    /// Erases `units` starts recorded at `at`.
    fn erase(&self, at: i64, units: u32) -> rusqlite::Result<()> {
        let sql = "DELETE FROM tower_limits_starts WHERE rowid IN \
                   (SELECT rowid FROM tower_limits_starts WHERE name = ?1 AND at = ?2 LIMIT ?3)";
        self.tx
            .prepare_cached(sql)?
            .execute(params![self.name, at, units])?;
        Ok(())
    }

    /// Records `cost` starts now; backs off if that fills the window.
    fn record(&self, state: &mut Pause, cost: u32, jitter: f64) -> rusqlite::Result<()> {
        self.add(self.now, cost)?;
        if let Some(backoff) = &self.backoff
            && let Some(frees_at) = self.frees_at(1)?
        {
            state.escalate(
                nonnegative(self.now),
                nonnegative(frees_at),
                backoff,
                jitter,
                1_000,
            );
        }
        Ok(())
    }

    fn load(&self) -> rusqlite::Result<Pause> {
        let sql = "SELECT next_available, backoff, escalated, escalated_next_available, \
                   escalated_backoff FROM tower_limits_backoffs WHERE name = ?1";
        let state = self
            .tx
            .prepare_cached(sql)?
            .query_row([self.name], |row| {
                let escalated: bool = row.get(2)?;
                let backoff = |index| -> rusqlite::Result<Option<u64>> {
                    Ok(row.get::<_, Option<i64>>(index)?.map(nonnegative))
                };
                Ok(Pause {
                    next_available: nonnegative(row.get(0)?),
                    backoff: backoff(1)?,
                    escalation: if escalated {
                        Some((nonnegative(row.get(3)?), backoff(4)?))
                    } else {
                        None
                    },
                })
            })
            .optional()?;
        Ok(state.unwrap_or_default())
    }

    /// Saves `state` if it changed from `loaded`.
    fn save(&self, loaded: &Pause, state: &Pause) -> rusqlite::Result<()> {
        if state == loaded {
            return Ok(());
        }
        let sql = "INSERT OR REPLACE INTO tower_limits_backoffs (name, next_available, backoff, \
                   escalated, escalated_next_available, escalated_backoff, expires) \
                   VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
        let (escalated_next, escalated_backoff) = state.escalation.unwrap_or((0, None));
        let next_available = stored(state.next_available);
        let until = self.now.saturating_add(self.window).max(next_available);
        self.tx.prepare_cached(sql)?.execute(params![
            self.name,
            next_available,
            state.backoff.map(stored),
            state.escalation.is_some(),
            stored(escalated_next),
            escalated_backoff.map(stored),
            expiry(until),
        ])?;
        Ok(())
    }

    /// Runs `change` on the loaded state, then saves it.
    fn update<T>(
        &self,
        change: impl FnOnce(&mut Pause) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let loaded = self.load()?;
        let mut state = loaded;
        let answer = change(&mut state)?;
        self.save(&loaded, &state)?;
        Ok(answer)
    }

    fn acquire(&self, cost: u32, jitter: f64) -> rusqlite::Result<Answer> {
        self.prune()?;
        self.update(|state| {
            if let Some(at) = self.blocked_until(state, cost)? {
                return Ok(self.retry(at));
            }
            state.granted();
            self.record(state, cost, jitter)?;
            Ok(Answer::Granted(u64::try_from(self.now).unwrap_or(0)))
        })
    }

    /// Whether the start at `at` may share its instant with starts made
    /// after a reset (at or before the last reset's): it gives nothing back.
    fn before_reset(&self, at: i64) -> rusqlite::Result<bool> {
        let cleared = super::reset_of(self.tx, self.name, KIND)?;
        Ok(cleared.is_some_and(|cleared| at <= cleared))
    }

    fn refund(&self, ticket: u64, cost: u32) -> rusqlite::Result<()> {
        if self.before_reset(crate::store::sqlite::signed(ticket))? {
            return Ok(());
        }
        self.erase(crate::store::sqlite::signed(ticket), cost)?;
        self.prune()?;
        if self.frees_at(1)?.is_some() {
            return Ok(());
        }
        self.update(|state| {
            state.undo_escalation();
            Ok(())
        })
    }

    fn settle(&self, ticket: u64, from: u32, to: u32) -> rusqlite::Result<()> {
        let at = crate::store::sqlite::signed(ticket);
        if to < from {
            if self.before_reset(at)? {
                return Ok(());
            }
            self.erase(at, from - to)
        } else {
            self.add(at, to - from)
        }
    }

    /// Empties the log and the pause, and keeps the reset's instant as long
    /// as a start made at it counts: the starts at or before it give
    /// nothing back.
    fn clear(&self) -> rusqlite::Result<()> {
        for sql in [
            "DELETE FROM tower_limits_starts WHERE name = ?1",
            "DELETE FROM tower_limits_backoffs WHERE name = ?1",
        ] {
            self.tx.prepare_cached(sql)?.execute([self.name])?;
        }
        let last = super::reset_of(self.tx, self.name, KIND)?;
        let cleared = self.now.max(last.unwrap_or(0));
        let until = self.now.saturating_add(self.window);
        super::save_reset(self.tx, self.name, KIND, cleared, expiry(until))
    }

    /// Denied until `at` (µs).
    fn retry(&self, at: i64) -> Answer {
        Answer::RetryIn(at.saturating_sub(self.now).saturating_mul(1_000))
    }

    /// Nanoseconds from now until `at` (µs), if it is later.
    fn until(&self, at: Option<i64>) -> Option<i64> {
        at.filter(|&at| at > self.now)
            .map(|at| (at - self.now).saturating_mul(1_000))
    }
}

/// `expires` (nanoseconds) for state that matters until `until` (µs).
fn expiry(until: i64) -> i64 {
    until.saturating_mul(1_000).saturating_add(GRACE)
}

impl SqliteStore {
    /// Runs `work` on the log of `key` under `quota` in one transaction.
    async fn on_log<T, F>(
        &self,
        key: &SqliteKey,
        quota: &Quota,
        (mode, late): (Mode, Late<T>),
        work: F,
    ) -> Result<T, LimiterError>
    where
        T: Send + 'static,
        F: FnOnce(&Log<'_>) -> rusqlite::Result<T> + Send + 'static,
    {
        let (name, quota) = (key.owned(), *quota);
        self.call_late(mode, late, move |tx, now| {
            work(&Log {
                tx,
                name: &name,
                now: now.micros(),
                max: quota.capacity(),
                window: micros(quota.window()),
                backoff: quota.backoff(),
            })
        })
        .await
    }

    /// [`QuotaStore::decide`](crate::store::QuotaStore::decide) on a log.
    pub(super) async fn log_decide(
        &self,
        key: &SqliteKey,
        quota: &Quota,
        cost: u32,
    ) -> Result<WindowDecision, LimiterError> {
        let jitter = quota.jitter();
        let work = move |log: &Log<'_>| log.acquire(cost, jitter);
        let undo = late::undo_grant(self, key, *quota, cost, key.owned().to_string());
        let write = (Mode::Write, undo.before(Answer::decision));
        let answer = self.on_log(key, quota, write, work).await?;
        Ok(answer.decision())
    }

    /// [`QuotaStore::take`](crate::store::QuotaStore::take) on a log.
    pub(super) async fn log_take(
        &self,
        key: &SqliteKey,
        quota: &Quota,
    ) -> Result<(), LimiterError> {
        let jitter = quota.jitter();
        self.on_log(key, quota, (Mode::Write, Late::Drop), move |log| {
            log.prune()?;
            log.update(|state| log.record(state, 1, jitter))
        })
        .await
    }

    /// [`QuotaStore::adjust`](crate::store::QuotaStore::adjust) on a log: a
    /// refund (to 0 units) or a resize; the start stays the ticket.
    pub(super) async fn log_adjust(
        &self,
        key: &SqliteKey,
        quota: &Quota,
        ticket: u64,
        (from, to): (u32, u32),
    ) -> Result<Option<u64>, LimiterError> {
        let write = (Mode::Write, Late::Patient);
        self.on_log(key, quota, write, move |log| match to {
            0 => log.refund(ticket, from),
            to => log.settle(ticket, from, to),
        })
        .await?;
        Ok(Some(ticket))
    }

    /// [`QuotaStore::look`](crate::store::QuotaStore::look) on a log.
    pub(super) async fn log_look(
        &self,
        key: &SqliteKey,
        quota: &Quota,
        cost: u32,
    ) -> Result<Option<Instant>, LimiterError> {
        let work = move |log: &Log<'_>| {
            let at = log.blocked_until(&log.load()?, cost)?;
            Ok(log.until(at))
        };
        let blocked = self
            .on_log(key, quota, (Mode::Read, Late::Drop), work)
            .await?;
        Ok(blocked.map(after))
    }

    /// [`QuotaStore::quota_status`](crate::store::QuotaStore::quota_status)
    /// of a log.
    pub(super) async fn log_status(
        &self,
        key: &SqliteKey,
        quota: &Quota,
    ) -> Result<QuotaStatus, LimiterError> {
        let capacity = quota.capacity();
        let work = move |log: &Log<'_>| {
            let state = log.load()?;
            let blocked = |cost| log.blocked_until(&state, cost);
            let (remaining, at) = try_search(capacity, blocked)?;
            Ok((remaining, log.until(at)))
        };
        let (remaining, wait) = self
            .on_log(key, quota, (Mode::Read, Late::Drop), work)
            .await?;
        Ok(quota.status(u64::from(remaining), wait.map(nanos_to_duration)))
    }

    /// [`QuotaStore::pause`](crate::store::QuotaStore::pause) of a log.
    pub(super) async fn log_pause(
        &self,
        key: &SqliteKey,
        quota: &Quota,
        at: Instant,
    ) -> Result<(), LimiterError> {
        let pause = micros(at.saturating_duration_since(Instant::now()));
        self.on_log(key, quota, (Mode::Write, Late::Drop), move |log| {
            log.update(|state| {
                // A pause from outside is never undone by a refund.
                state.pause_until(nonnegative(log.now.saturating_add(pause)));
                Ok(())
            })
        })
        .await
    }

    /// [`QuotaStore::reset`](crate::store::QuotaStore::reset) of a log.
    pub(super) async fn log_reset(
        &self,
        key: &SqliteKey,
        quota: &Quota,
    ) -> Result<(), LimiterError> {
        let write = (Mode::Write, Late::Drop);
        self.on_log(key, quota, write, |log| log.clear()).await
    }
}
