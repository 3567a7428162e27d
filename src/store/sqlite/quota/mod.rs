//! [`QuotaStore`] for [`SqliteStore`]: each quota is one row in its
//! algorithm's table (`cells`: GCRA and token bucket, `fixed_window`,
//! `sliding_window_counter`), loaded, decided on and saved in one
//! transaction; a window's or a log's last reset is a row of
//! `tower_limits_resets` ([`RESETS`]).

use rusqlite::{OptionalExtension, Transaction, params};
use tokio::time::Instant;

mod cells;
mod fixed_window;
mod sliding_log;
mod sliding_window_counter;

use super::schema::Tables;
use super::{
    Answer, Mode, Now, SqliteKey, SqliteStore, after, nanos_to_duration, nanos_until, nonnegative,
    stored,
};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::quota_status::{QuotaStatus, search};
use crate::store::late::{self, Late};
use crate::store::quota_state::QuotaState;
use crate::store::{Quota, QuotaKind, QuotaStore, WindowDecision};

/// The tables of every algorithm: adding one adds its module above, its
/// tables here, and its state to [`load`], [`save`] and [`save_resets`].
pub(super) const TABLES: [Tables; 5] = [
    cells::TABLES,
    fixed_window::TABLES,
    sliding_window_counter::TABLES,
    sliding_log::TABLES,
    RESETS,
];

/// The floor the last reset of a window or log quota left under the
/// tickets that give anything back (`QuotaState::clear`): its window, or
/// its instant (µs) for a log, by the quota's name and its rows' table
/// (`kind`). Apart from those rows, whose columns stay as they were. A
/// GCRA line keeps its own (`retuned`).
const RESETS: Tables = Tables {
    names: &["tower_limits_resets"],
    create: "
CREATE TABLE IF NOT EXISTS tower_limits_resets (
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    cleared INTEGER NOT NULL,
    expires INTEGER NOT NULL,
    PRIMARY KEY (name, kind)
) WITHOUT ROWID;
",
};

/// Keeps `cleared`, the last reset of the quota `name` whose rows are in
/// the table `kind`, until `expires`.
fn save_reset(
    tx: &Transaction<'_>,
    name: &str,
    kind: &str,
    cleared: i64,
    expires: i64,
) -> rusqlite::Result<()> {
    let sql = "INSERT OR REPLACE INTO tower_limits_resets (name, kind, cleared, expires) \
               VALUES (?1, ?2, ?3, ?4)";
    tx.prepare_cached(sql)?
        .execute(params![name, kind, cleared, expires])?;
    Ok(())
}

/// The last reset [`save_reset`] kept for `name` and `kind`, if any.
fn reset_of(tx: &Transaction<'_>, name: &str, kind: &str) -> rusqlite::Result<Option<i64>> {
    let sql = "SELECT cleared FROM tower_limits_resets WHERE name = ?1 AND kind = ?2";
    tx.prepare_cached(sql)?
        .query_row([name, kind], |row| row.get(0))
        .optional()
}

/// The state of `quota` called `name`: its row in its algorithm's table,
/// or a fresh state. Windows fall on multiples of their length in Unix
/// time, the store's times.
fn load(tx: &Transaction<'_>, name: &str, quota: &Quota, now: Now) -> rusqlite::Result<QuotaState> {
    Ok(match QuotaState::fresh(quota, |windows| windows) {
        QuotaState::Cells(fresh) => {
            QuotaState::Cells(cells::load(tx, name, fresh, nonnegative(now.0))?)
        }
        QuotaState::FixedWindow(fresh) => {
            QuotaState::FixedWindow(fixed_window::load(tx, name, fresh)?)
        }
        QuotaState::SlidingWindowCounter(fresh) => {
            QuotaState::SlidingWindowCounter(sliding_window_counter::load(tx, name, fresh)?)
        }
        // A log keeps its own rows (`sliding_log.rs`), never this state.
        log @ QuotaState::SlidingLog(_) => log,
    })
}

/// Writes the reset `state` keeps to [`RESETS`].
fn save_resets(tx: &Transaction<'_>, name: &str, state: &QuotaState) -> rusqlite::Result<()> {
    match state {
        QuotaState::FixedWindow(state) => fixed_window::save_reset(tx, name, state),
        QuotaState::SlidingWindowCounter(state) => {
            sliding_window_counter::save_reset(tx, name, state)
        }
        // The line keeps it in its row; a log writes its own.
        QuotaState::Cells(_) | QuotaState::SlidingLog(_) => Ok(()),
    }
}

/// Writes `state` back to its row.
fn save(tx: &Transaction<'_>, name: &str, state: &QuotaState) -> rusqlite::Result<()> {
    match state {
        QuotaState::Cells(state) => cells::save(tx, name, state),
        QuotaState::FixedWindow(state) => fixed_window::save(tx, name, state),
        QuotaState::SlidingWindowCounter(state) => sliding_window_counter::save(tx, name, state),
        QuotaState::SlidingLog(_) => Ok(()),
    }
}

/// When `cost` units of `state` could be taken, in nanoseconds from now.
/// Whether `quota` is a sliding log, which keeps rows of its own.
fn is_log(quota: &Quota) -> bool {
    matches!(quota.kind(), QuotaKind::SlidingLog { .. })
}

fn wait(state: &QuotaState, now: Now, cost: u32) -> Option<i64> {
    let at = state.blocked_until(nonnegative(now.0), cost)?;
    Some(stored(at).saturating_sub(now.0))
}

impl SqliteStore {
    /// Runs `work` on the state of `quota` at `key` in one transaction;
    /// saves it after a write.
    async fn on_quota<T, F>(
        &self,
        key: &SqliteKey,
        quota: &Quota,
        (mode, late): (Mode, Late<T>),
        work: F,
    ) -> Result<T, LimiterError>
    where
        T: Send + 'static,
        F: FnOnce(&mut QuotaState, Now) -> T + Send + 'static,
    {
        let (name, quota) = (key.owned(), *quota);
        self.call_late(mode, late, move |tx, now| {
            let loaded = load(tx, &name, &quota, now)?;
            let mut state = loaded.clone();
            let answer = work(&mut state, now);
            if mode == Mode::Write && state != loaded {
                save(tx, &name, &state)?;
            }
            Ok(answer)
        })
        .await
    }
}

impl QuotaStore for SqliteStore {
    type QuotaKey = SqliteKey;

    fn quota_key(&self, name: &str) -> SqliteKey {
        SqliteKey::new(name)
    }

    /// Creates the tables if they are missing (opening the store already
    /// did).
    fn setup(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(self.call(Mode::Write, super::schema::create))
    }

    fn decide<'a>(
        &'a self,
        key: &'a SqliteKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>> {
        if is_log(quota) {
            return LimiterFuture::new(self.log_decide(key, quota, cost));
        }
        LimiterFuture::new(async move {
            let work = move |state: &mut QuotaState, now: Now| {
                let decision = state.decide(nonnegative(now.0), cost);
                Answer::new(decision.map_err(stored), now)
            };
            let undo = late::undo_grant(self, key, *quota, cost, key.owned().to_string());
            let late = undo.before(Answer::decision);
            let answer = self.on_quota(key, quota, (Mode::Write, late), work).await?;
            Ok(answer.decision())
        })
    }

    fn look<'a>(
        &'a self,
        key: &'a SqliteKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        if is_log(quota) {
            return LimiterFuture::new(self.log_look(key, quota, cost));
        }
        LimiterFuture::new(async move {
            let work = move |state: &mut QuotaState, now: Now| wait(state, now, cost);
            let blocked = self
                .on_quota(key, quota, (Mode::Read, Late::Drop), work)
                .await?;
            Ok(blocked.map(after))
        })
    }

    fn quota_status<'a>(
        &'a self,
        key: &'a SqliteKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<QuotaStatus, LimiterError>> {
        if is_log(quota) {
            return LimiterFuture::new(self.log_status(key, quota));
        }
        let capacity = quota.capacity();
        LimiterFuture::new(async move {
            let work = move |state: &mut QuotaState, now: Now| {
                let waits = |cost| wait(state, now, cost);
                search(capacity, waits)
            };
            let (remaining, wait) = self
                .on_quota(key, quota, (Mode::Read, Late::Drop), work)
                .await?;
            Ok(quota.status(u64::from(remaining), wait.map(nanos_to_duration)))
        })
    }

    fn take<'a>(
        &'a self,
        key: &'a SqliteKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        if is_log(quota) {
            return LimiterFuture::new(self.log_take(key, quota));
        }
        let write = (Mode::Write, Late::Drop);
        LimiterFuture::new(self.on_quota(key, quota, write, |state, now| {
            state.take(nonnegative(now.0));
        }))
    }

    fn adjust<'a>(
        &'a self,
        key: &'a SqliteKey,
        quota: &'a Quota,
        ticket: u64,
        from: u32,
        to: u32,
    ) -> LimiterFuture<'a, Result<Option<u64>, LimiterError>> {
        if is_log(quota) {
            return LimiterFuture::new(self.log_adjust(key, quota, ticket, (from, to)));
        }
        let write = (Mode::Write, Late::Patient);
        LimiterFuture::new(self.on_quota(key, quota, write, move |state, now| {
            state.adjust(nonnegative(now.0), ticket, from, to)
        }))
    }

    fn pause<'a>(
        &'a self,
        key: &'a SqliteKey,
        quota: &'a Quota,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        if is_log(quota) {
            return LimiterFuture::new(self.log_pause(key, quota, at));
        }
        let pause = nanos_until(at);
        let write = (Mode::Write, Late::Drop);
        LimiterFuture::new(self.on_quota(key, quota, write, move |state, now| {
            state.pause(nonnegative(now.0.saturating_add(pause)));
        }))
    }

    /// Keeps the row, emptied, with the floor below which tickets of
    /// grants from before give nothing back (`QuotaState::clear`).
    fn reset<'a>(
        &'a self,
        key: &'a SqliteKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        if is_log(quota) {
            return LimiterFuture::new(self.log_reset(key, quota));
        }
        let (name, quota) = (key.owned(), *quota);
        LimiterFuture::new(self.call(Mode::Write, move |tx, now| {
            let mut state = load(tx, &name, &quota, now)?;
            state.clear(nonnegative(now.0));
            save(tx, &name, &state)?;
            save_resets(tx, &name, &state)
        }))
    }
}
