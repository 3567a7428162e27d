//! [`QuotaStore`] for [`SqliteStore`]: each quota is one row in its
//! algorithm's table (`cells`: GCRA and token bucket, `fixed_window`,
//! `sliding_window_counter`), loaded, decided on and saved in one
//! transaction.

use rusqlite::Transaction;
use tokio::time::Instant;

use super::cells::Cells;
use super::fixed_window::FixedWindow;
use super::quota_state::QuotaState;
use super::sliding_window_counter::SlidingWindowCounter;
use super::{Answer, Mode, Now, SqliteKey, SqliteStore, after, nanos_to_duration, nanos_until};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::quota_status::{QuotaStatus, search};
use crate::store::{Quota, QuotaKind, QuotaStore, WindowDecision};

/// The row of `quota` called `name`, in its algorithm's table.
fn load(
    tx: &Transaction<'_>,
    name: &str,
    quota: &Quota,
    now: Now,
) -> rusqlite::Result<Box<dyn QuotaState>> {
    Ok(match quota.kind() {
        QuotaKind::Cells { interval, burst } => {
            Box::new(Cells::load(tx, name, (interval, burst), now.0)?)
        }
        QuotaKind::FixedWindow { max, window } => {
            Box::new(FixedWindow::load(tx, name, max, window)?)
        }
        QuotaKind::SlidingWindowCounter { max, window } => {
            Box::new(SlidingWindowCounter::load(tx, name, max, window)?)
        }
    })
}

/// The table that holds `quota`'s rows.
fn table(quota: &Quota) -> &'static str {
    match quota.kind() {
        QuotaKind::Cells { .. } => Cells::TABLE,
        QuotaKind::FixedWindow { .. } => FixedWindow::TABLE,
        QuotaKind::SlidingWindowCounter { .. } => SlidingWindowCounter::TABLE,
    }
}

impl SqliteStore {
    /// Runs `work` on the state of `quota` at `key` in one transaction;
    /// saves it after a write.
    async fn on_quota<T, F>(
        &self,
        key: &SqliteKey,
        quota: &Quota,
        mode: Mode,
        work: F,
    ) -> Result<T, LimiterError>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn QuotaState, Now) -> T + Send + 'static,
    {
        let (name, quota) = (key.owned(), *quota);
        self.call(mode, move |tx, now| {
            let mut state = load(tx, &name, &quota, now)?;
            let answer = work(state.as_mut(), now);
            if mode == Mode::Write && state.row().changed {
                state.save(tx, &name)?;
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
    fn prepare_quotas(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(self.call(Mode::Write, super::schema::create))
    }

    fn decide<'a>(
        &'a self,
        key: &'a SqliteKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>> {
        LimiterFuture::new(async move {
            let work = move |state: &mut dyn QuotaState, now: Now| {
                Answer::new(state.decide(now.0, cost), now)
            };
            let answer = self.on_quota(key, quota, Mode::Write, work).await?;
            Ok(answer.decision())
        })
    }

    fn look<'a>(
        &'a self,
        key: &'a SqliteKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        LimiterFuture::new(async move {
            let work = move |state: &mut dyn QuotaState, now: Now| {
                let at = state.blocked_until(now.0, cost);
                at.map(|at| at.saturating_sub(now.0))
            };
            let blocked = self.on_quota(key, quota, Mode::Read, work).await?;
            Ok(blocked.map(after))
        })
    }

    fn quota_status<'a>(
        &'a self,
        key: &'a SqliteKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<QuotaStatus, LimiterError>> {
        let capacity = quota.capacity();
        LimiterFuture::new(async move {
            let work = move |state: &mut dyn QuotaState, now: Now| {
                let (remaining, at) = search(capacity, |cost| state.blocked_until(now.0, cost));
                (remaining, at.map(|at| at.saturating_sub(now.0)))
            };
            let (remaining, wait) = self.on_quota(key, quota, Mode::Read, work).await?;
            Ok(quota.status(u64::from(remaining), wait.map(nanos_to_duration)))
        })
    }

    fn take<'a>(
        &'a self,
        key: &'a SqliteKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        LimiterFuture::new(self.on_quota(key, quota, Mode::Write, |state, now| {
            state.take(now.0);
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
        LimiterFuture::new(self.on_quota(key, quota, Mode::Write, move |state, now| {
            state.adjust(now.0, ticket, from, to)
        }))
    }

    fn pause<'a>(
        &'a self,
        key: &'a SqliteKey,
        quota: &'a Quota,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let pause = nanos_until(at);
        LimiterFuture::new(self.on_quota(key, quota, Mode::Write, move |state, now| {
            state.pause(now.0.saturating_add(pause));
        }))
    }

    fn reset<'a>(
        &'a self,
        key: &'a SqliteKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let (name, sql) = (
            key.owned(),
            format!("DELETE FROM {} WHERE name = ?1", table(quota)),
        );
        LimiterFuture::new(self.call(Mode::Write, move |tx, _| {
            tx.prepare_cached(&sql)?.execute([&*name])?;
            Ok(())
        }))
    }
}
