//! [`QuotaStore`] for [`RedisStore`]: `cells.lua` (GCRA and token bucket),
//! `fixed_window.lua` and `sliding_window_counter.lua`.

use ::redis::Script;
use tokio::time::Instant;

use super::{
    RedisKey, RedisStore, args, blocked, decision, done, micros, micros_until, parsed, status_reply,
};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::quota_status::QuotaStatus;
use crate::store::{Quota, QuotaKind, QuotaStore, StoreError, WindowDecision};

impl RedisStore {
    /// The script of `quota`'s algorithm and its leading arguments.
    fn quota_script(&self, quota: &Quota) -> (&Script, [String; 2]) {
        let scripts = &self.inner.scripts;
        match quota.kind() {
            QuotaKind::Cells { interval, burst } => {
                let micros = interval.as_secs_f64() * 1e6;
                (&scripts.cells, [micros.to_string(), burst.to_string()])
            }
            QuotaKind::FixedWindow { max, window } => (
                &scripts.fixed_window,
                [max.to_string(), micros(window).to_string()],
            ),
            QuotaKind::SlidingWindowCounter { max, window } => (
                &scripts.sliding_window_counter,
                [max.to_string(), micros(window).to_string()],
            ),
        }
    }

    /// Runs `op` of `quota`'s script with `extra` arguments.
    fn quota_op<'a>(
        &'a self,
        key: &'a RedisKey,
        quota: &'a Quota,
        op: &'static str,
        extra: Vec<String>,
    ) -> LimiterFuture<'a, Result<Vec<i64>, LimiterError>> {
        LimiterFuture::new(async move {
            let (script, [first, second]) = self.quota_script(quota);
            let mut arguments = vec![op.to_owned(), first, second];
            arguments.extend(extra);
            self.run(script, &key.parts(), &arguments).await
        })
    }

    /// Loads every script into the server's cache.
    pub(super) async fn load_scripts(&self) -> Result<(), LimiterError> {
        let scripts = &self.inner.scripts;
        let all = [
            &scripts.curve,
            &scripts.sliding_log,
            &scripts.cells,
            &scripts.fixed_window,
            &scripts.sliding_window_counter,
            &scripts.leases,
        ];
        let mut connection = self.inner.connection.clone();
        for script in all {
            let loading = script.load_async(&mut connection);
            tokio::time::timeout(self.inner.timeout, loading)
                .await
                .map_err(|_| StoreError::timeout(super::BACKEND, self.inner.timeout))?
                .map_err(super::store_error)?;
        }
        Ok(())
    }
}

impl QuotaStore for RedisStore {
    type QuotaKey = RedisKey;

    fn quota_key(&self, name: &str) -> RedisKey {
        RedisKey::new(&self.base_key(name), &["quota"])
    }

    /// Loads every script, so the first decisions need no `SCRIPT LOAD`.
    fn prepare_quotas(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(self.load_scripts())
    }

    fn decide<'a>(
        &'a self,
        key: &'a RedisKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>> {
        parsed(
            self.quota_op(key, quota, "acquire", args(&[&cost])),
            decision,
        )
    }

    fn look<'a>(
        &'a self,
        key: &'a RedisKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        parsed(self.quota_op(key, quota, "peek", args(&[&cost])), blocked)
    }

    fn quota_status<'a>(
        &'a self,
        key: &'a RedisKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<QuotaStatus, LimiterError>> {
        parsed(self.quota_op(key, quota, "status", Vec::new()), |reply| {
            let (remaining, wait) = status_reply(reply)?;
            Ok(quota.status(remaining, wait))
        })
    }

    fn take<'a>(
        &'a self,
        key: &'a RedisKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        done(self.quota_op(key, quota, "take", Vec::new()))
    }

    fn adjust<'a>(
        &'a self,
        key: &'a RedisKey,
        quota: &'a Quota,
        ticket: u64,
        from: u32,
        to: u32,
    ) -> LimiterFuture<'a, Result<Option<u64>, LimiterError>> {
        let run = self.quota_op(key, quota, "adjust", args(&[&ticket, &from, &to]));
        parsed(run, |reply| {
            Ok(match decision(reply) {
                Ok(WindowDecision::Granted { ticket }) => Some(ticket),
                Ok(WindowDecision::Denied { .. }) => None,
                // `[0]`: the grant can no longer be adjusted down.
                Err(_) if reply == [0] => None,
                Err(error) => return Err(error),
            })
        })
    }

    fn pause<'a>(
        &'a self,
        key: &'a RedisKey,
        quota: &'a Quota,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        done(self.quota_op(key, quota, "pause", args(&[&micros_until(at)])))
    }

    fn reset<'a>(
        &'a self,
        key: &'a RedisKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        done(self.quota_op(key, quota, "reset", Vec::new()))
    }
}
