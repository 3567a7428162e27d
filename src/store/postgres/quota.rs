//! [`QuotaStore`] for [`PostgresStore`]: `cells.sql` (GCRA and token
//! bucket), `fixed_window.sql` and `sliding_window_counter.sql`.

use tokio::time::Instant;

use super::reply::{Reply, micros, micros_until, signed};
use super::{PostgresKey, PostgresStore};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::quota_status::QuotaStatus;
use crate::store::{Quota, QuotaKind, QuotaStore, StoreError, WindowDecision};

impl PostgresStore {
    /// Runs `op` of `quota`'s function with `args`, then reads its reply
    /// with `read`.
    fn quota_op<'a, T: Send + 'a>(
        &'a self,
        key: &'a PostgresKey,
        quota: &'a Quota,
        op: &'static str,
        args: Vec<i64>,
        read: impl FnOnce(Reply<'_>) -> Result<T, StoreError> + Send + 'a,
    ) -> LimiterFuture<'a, Result<T, LimiterError>> {
        LimiterFuture::new(async move {
            let statements = &self.inner.statements;
            let name = &key.name;
            let reply = match quota.kind() {
                QuotaKind::Cells { interval, burst } => {
                    let tick = interval.as_secs_f64() * 1e6;
                    let burst = i64::from(burst);
                    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
                        [&op, name, &tick, &burst, &args];
                    self.run(&statements.cells, &params).await?
                }
                QuotaKind::FixedWindow { max, window } => {
                    let (max, window) = (i64::from(max), micros(window));
                    let statement = &statements.fixed_window;
                    self.run(statement, &[&op, name, &max, &window, &args])
                        .await?
                }
                QuotaKind::SlidingWindowCounter { max, window } => {
                    let (max, window) = (i64::from(max), micros(window));
                    let statement = &statements.sliding_window_counter;
                    self.run(statement, &[&op, name, &max, &window, &args])
                        .await?
                }
            };
            Ok(read(Reply(&reply))?)
        })
    }
}

impl QuotaStore for PostgresStore {
    type QuotaKey = PostgresKey;

    fn quota_key(&self, name: &str) -> PostgresKey {
        PostgresKey {
            name: self.key_name(name),
        }
    }

    /// Creates the schema, its tables and functions if missing.
    fn prepare_quotas(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(self.create_schema())
    }

    fn decide<'a>(
        &'a self,
        key: &'a PostgresKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>> {
        self.quota_op(key, quota, "acquire", vec![i64::from(cost)], |r| {
            r.decision()
        })
    }

    fn look<'a>(
        &'a self,
        key: &'a PostgresKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        self.quota_op(key, quota, "peek", vec![i64::from(cost)], |r| r.blocked())
    }

    fn quota_status<'a>(
        &'a self,
        key: &'a PostgresKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<QuotaStatus, LimiterError>> {
        self.quota_op(key, quota, "status", Vec::new(), |r| {
            let (remaining, wait) = r.status()?;
            Ok(quota.status(remaining, wait))
        })
    }

    fn take<'a>(
        &'a self,
        key: &'a PostgresKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.quota_op(key, quota, "take", Vec::new(), |_| Ok(()))
    }

    fn adjust<'a>(
        &'a self,
        key: &'a PostgresKey,
        quota: &'a Quota,
        ticket: u64,
        from: u32,
        to: u32,
    ) -> LimiterFuture<'a, Result<Option<u64>, LimiterError>> {
        let args = vec![signed(ticket), i64::from(from), i64::from(to)];
        self.quota_op(key, quota, "adjust", args, |r| {
            // `[0]`: the grant can no longer be adjusted down.
            if r.0 == [0] {
                return Ok(None);
            }
            Ok(match r.decision()? {
                WindowDecision::Granted { ticket } => Some(ticket),
                WindowDecision::Denied { .. } => None,
            })
        })
    }

    fn pause<'a>(
        &'a self,
        key: &'a PostgresKey,
        quota: &'a Quota,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.quota_op(key, quota, "pause", vec![micros_until(at)], |_| Ok(()))
    }

    fn reset<'a>(
        &'a self,
        key: &'a PostgresKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.quota_op(key, quota, "reset", Vec::new(), |_| Ok(()))
    }
}
