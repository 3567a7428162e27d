//! [`RateLimiterStore`] for [`SqliteStore`]: the sliding log and the classic
//! backoff, by the rules of `MemoryStore` and `sliding_log.lua`.
//!
//! Starts are rows of `tower_limits_starts` (one per unit of cost, at the
//! start's time in microseconds, which is the grant's ticket); the pause,
//! the current backoff and what the last backoff replaced are one row of
//! `tower_limits_backoffs`. Times here are microseconds of Unix time.

use std::time::Duration;

use rusqlite::{OptionalExtension, Transaction, params};
use tokio::time::Instant;

use super::schema::GRACE;
use super::{
    Answer, Mode, SqliteKey, SqliteStore, after, count_at, micros, nanos_to_duration, nonnegative,
    stored,
};
use crate::algorithms::sliding_log::Pause;
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::quota_status::{QuotaStatus, try_search};
use crate::store::late::{self, Late};
use crate::store::{Backoff, RateLimiterStore, WindowDecision, WindowPolicy};

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

    fn refund(&self, ticket: u64, cost: u32) -> rusqlite::Result<()> {
        self.erase(super::signed(ticket), cost)?;
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
        let at = super::signed(ticket);
        if to < from {
            self.erase(at, from - to)
        } else {
            self.add(at, to - from)
        }
    }

    /// Starts within the last `window` (µs), oldest first, from `offset`.
    fn in_window(&self, window: i64, offset: usize) -> rusqlite::Result<Option<i64>> {
        let sql = "SELECT at FROM tower_limits_starts WHERE name = ?1 AND at > ?2 \
                   ORDER BY at LIMIT 1 OFFSET ?3";
        let horizon = self.now.saturating_sub(window);
        self.tx
            .prepare_cached(sql)?
            .query_row(params![self.name, horizon, count(offset)], |row| row.get(0))
            .optional()
    }

    fn count(&self, window: i64) -> rusqlite::Result<usize> {
        let sql = "SELECT COUNT(*) FROM tower_limits_starts WHERE name = ?1 AND at > ?2";
        let horizon = self.now.saturating_sub(window);
        self.tx
            .prepare_cached(sql)?
            .query_row(params![self.name, horizon], |row| count_at(row, 0))
    }

    fn clear(&self) -> rusqlite::Result<()> {
        for sql in [
            "DELETE FROM tower_limits_starts WHERE name = ?1",
            "DELETE FROM tower_limits_backoffs WHERE name = ?1",
        ] {
            self.tx.prepare_cached(sql)?.execute([self.name])?;
        }
        Ok(())
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

/// A count or offset as SQLite's integer.
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl SqliteStore {
    /// Runs `work` on the log of `key` in one transaction.
    async fn on_log<T, F>(
        &self,
        key: &SqliteKey,
        (mode, late): (Mode, Late<T>),
        policy: Option<WindowPolicy>,
        work: F,
    ) -> Result<T, LimiterError>
    where
        T: Send + 'static,
        F: FnOnce(&Log<'_>) -> rusqlite::Result<T> + Send + 'static,
    {
        let name = key.owned();
        self.call_late(mode, late, move |tx, now| {
            work(&Log {
                tx,
                name: &name,
                now: now.micros(),
                max: policy.map_or(0, |policy| policy.max_executions),
                window: policy.map_or(0, |policy| micros(policy.window)),
                backoff: policy.and_then(|policy| policy.backoff),
            })
        })
        .await
    }
}

impl RateLimiterStore for SqliteStore {
    type Key = SqliteKey;

    fn key(&self, name: &str) -> SqliteKey {
        SqliteKey::new(name)
    }

    /// Creates the tables if they are missing (opening the store already
    /// did).
    fn setup(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(self.call(Mode::Write, super::schema::create))
    }

    fn acquire<'a>(
        &'a self,
        key: &'a SqliteKey,
        policy: WindowPolicy,
        cost: u32,
        jitter: f64,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>> {
        LimiterFuture::new(async move {
            let work = move |log: &Log<'_>| log.acquire(cost, jitter);
            let undo = late::undo_start(self, key, policy, cost, key.owned().to_string());
            let write = (Mode::Write, undo.before(Answer::decision));
            let answer = self.on_log(key, write, Some(policy), work).await?;
            Ok(answer.decision())
        })
    }

    fn record_execution<'a>(
        &'a self,
        key: &'a SqliteKey,
        policy: WindowPolicy,
        jitter: f64,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        LimiterFuture::new(
            self.on_log(key, (Mode::Write, Late::Drop), Some(policy), move |log| {
                log.prune()?;
                log.update(|state| log.record(state, 1, jitter))
            }),
        )
    }

    fn refund<'a>(
        &'a self,
        key: &'a SqliteKey,
        policy: WindowPolicy,
        ticket: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let write = (Mode::Write, Late::Patient);
        LimiterFuture::new(self.on_log(key, write, Some(policy), move |log| {
            log.refund(ticket, cost)
        }))
    }

    fn settle<'a>(
        &'a self,
        key: &'a SqliteKey,
        policy: WindowPolicy,
        ticket: u64,
        from: u32,
        to: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let write = (Mode::Write, Late::Patient);
        LimiterFuture::new(self.on_log(key, write, Some(policy), move |log| {
            log.settle(ticket, from, to)
        }))
    }

    fn peek<'a>(
        &'a self,
        key: &'a SqliteKey,
        policy: WindowPolicy,
        cost: u32,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        LimiterFuture::new(async move {
            let work = move |log: &Log<'_>| {
                let at = log.blocked_until(&log.load()?, cost)?;
                Ok(log.until(at))
            };
            let blocked = self
                .on_log(key, (Mode::Read, Late::Drop), Some(policy), work)
                .await?;
            Ok(blocked.map(after))
        })
    }

    fn window_status<'a>(
        &'a self,
        key: &'a SqliteKey,
        policy: WindowPolicy,
    ) -> LimiterFuture<'a, Result<QuotaStatus, LimiterError>> {
        LimiterFuture::new(async move {
            let work = move |log: &Log<'_>| {
                let state = log.load()?;
                let blocked = |cost| log.blocked_until(&state, cost);
                let (remaining, at) = try_search(policy.max_executions(), blocked)?;
                Ok((remaining, log.until(at)))
            };
            let (remaining, wait) = self
                .on_log(key, (Mode::Read, Late::Drop), Some(policy), work)
                .await?;
            Ok(policy.status(u64::from(remaining), wait.map(nanos_to_duration)))
        })
    }

    fn execution_count<'a>(
        &'a self,
        key: &'a SqliteKey,
        window: Duration,
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        let window = micros(window);
        LimiterFuture::new(
            self.on_log(key, (Mode::Read, Late::Drop), None, move |log| {
                log.count(window)
            }),
        )
    }

    fn oldest_execution_at_offset<'a>(
        &'a self,
        key: &'a SqliteKey,
        window: Duration,
        offset: usize,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        let window = micros(window);
        LimiterFuture::new(async move {
            let work = move |log: &Log<'_>| {
                let start = log.in_window(window, offset)?;
                Ok(start.map(|start| log.now.saturating_sub(start).max(0)))
            };
            let age = self
                .on_log(key, (Mode::Read, Late::Drop), None, work)
                .await?;
            Ok(age.map(|age| {
                let age = Duration::from_micros(u64::try_from(age).unwrap_or(0));
                Instant::now().checked_sub(age).unwrap_or_else(Instant::now)
            }))
        })
    }

    fn next_available<'a>(
        &'a self,
        key: &'a SqliteKey,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        LimiterFuture::new(async move {
            let work = |log: &Log<'_>| Ok(log.until(Some(stored(log.load()?.next_available))));
            let paused = self
                .on_log(key, (Mode::Read, Late::Drop), None, work)
                .await?;
            Ok(paused.map(after))
        })
    }

    fn set_next_available<'a>(
        &'a self,
        key: &'a SqliteKey,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let pause = micros(at.saturating_duration_since(Instant::now()));
        LimiterFuture::new(
            self.on_log(key, (Mode::Write, Late::Drop), None, move |log| {
                log.update(|state| {
                    // A pause from outside is never undone by a refund.
                    state.pause_until(nonnegative(log.now.saturating_add(pause)));
                    Ok(())
                })
            }),
        )
    }

    fn clear<'a>(&'a self, key: &'a SqliteKey) -> LimiterFuture<'a, Result<(), LimiterError>> {
        LimiterFuture::new(self.on_log(key, (Mode::Write, Late::Drop), None, |log| log.clear()))
    }
}
