//! [`QuotaStore`] for [`RedisStore`]: `cells.lua` (GCRA and token bucket),
//! `fixed_window.lua`, `sliding_window_counter.lua` and `sliding_log.lua`.

use tokio::time::Instant;

use super::{
    RedisKey, RedisStore, ScriptName, args, blocked, decision, micros, micros_until, nothing,
    status_reply,
};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::quota_status::QuotaStatus;
use crate::store::late::{self, Late};
use crate::store::quota::{cells_op, log_adjustment, log_op};
use crate::store::{Quota, QuotaKind, QuotaStore, StoreError, WindowDecision};

/// The script of each quota algorithm: adding an algorithm adds its
/// script here and its arguments to [`RedisStore::quota_script`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum QuotaScript {
    Cells,
    FixedWindow,
    SlidingWindowCounter,
    SlidingLog,
}

impl QuotaScript {
    /// Every quota script, in the order of their discriminants.
    pub(super) const ALL: [Self; 4] = [
        Self::Cells,
        Self::FixedWindow,
        Self::SlidingWindowCounter,
        Self::SlidingLog,
    ];

    /// The script's Lua source (without `status.lua`).
    pub(super) fn source(self) -> &'static str {
        match self {
            Self::Cells => include_str!("cells.lua"),
            Self::FixedWindow => include_str!("fixed_window.lua"),
            Self::SlidingWindowCounter => include_str!("sliding_window_counter.lua"),
            Self::SlidingLog => include_str!("sliding_log.lua"),
        }
    }
}

impl RedisStore {
    /// The script of `quota`'s algorithm and its leading arguments.
    fn quota_script(quota: &Quota) -> (QuotaScript, Vec<String>) {
        match quota.kind() {
            QuotaKind::Cells(cells) => {
                let micros = cells.interval().as_secs_f64() * 1e6;
                (QuotaScript::Cells, args(&[&micros, &cells.burst()]))
            }
            QuotaKind::FixedWindow { max, window } => {
                (QuotaScript::FixedWindow, args(&[&max, &micros(window)]))
            }
            QuotaKind::SlidingWindowCounter { max, window } => (
                QuotaScript::SlidingWindowCounter,
                args(&[&max, &micros(window)]),
            ),
            QuotaKind::SlidingLog {
                max,
                window,
                backoff,
            } => {
                let (initial, multiplier, cap) = backoff.map_or((0, 1.0, 0), |b| {
                    (micros(b.initial).max(1), b.multiplier, micros(b.max))
                });
                let arguments = args(&[&max, &micros(window), &initial, &multiplier, &cap]);
                (QuotaScript::SlidingLog, arguments)
            }
        }
    }

    /// Runs operation `op` of `quota`'s script (its leading arguments, then
    /// `extra`) and reads the reply with `parse`; a late reply goes where
    /// `late` says. A sliding log names some operations its own way and
    /// takes a jitter where it may back off ([`log_op`]).
    fn quota_op<T: Send + 'static>(
        &self,
        key: &RedisKey,
        quota: &Quota,
        op: &'static str,
        mut extra: Vec<String>,
        parse: impl FnOnce(&[i64]) -> Result<T, StoreError> + Send + 'static,
        late: Late<T>,
    ) -> LimiterFuture<'static, Result<T, LimiterError>> {
        let (script, mut arguments) = Self::quota_script(quota);
        let op = match script {
            QuotaScript::SlidingLog => {
                let (op, jitter) = log_op(op, quota);
                extra.extend(jitter.map(|jitter| jitter.to_string()));
                op
            }
            QuotaScript::Cells => cells_op(op, quota),
            _ => op,
        };
        arguments.insert(0, op.to_owned());
        arguments.extend(extra);
        let keys = script_keys(key, script);
        self.run(ScriptName::Quota(script), keys, arguments, parse, late)
    }

    pub(super) async fn load_scripts(&self) -> Result<(), LimiterError> {
        let mut connection = self.inner.connection.clone();
        for script in self.inner.scripts.all() {
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
        RedisKey::new(&self.base_key(name), &["quota", "gaps", "log", "state"])
    }

    /// Loads every script, so the first decisions need no `SCRIPT LOAD`.
    fn setup(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(self.load_scripts())
    }

    /// A grant that answers after its caller gave up is given back.
    fn decide<'a>(
        &'a self,
        key: &'a RedisKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>> {
        let undo = late::undo_grant(self, key, *quota, cost, key.name().to_owned());
        self.quota_op(key, quota, "acquire", args(&[&cost]), decision, undo)
    }

    fn look<'a>(
        &'a self,
        key: &'a RedisKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        self.quota_op(key, quota, "peek", args(&[&cost]), blocked, Late::Drop)
    }

    fn quota_status<'a>(
        &'a self,
        key: &'a RedisKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<QuotaStatus, LimiterError>> {
        let quota_copy = *quota;
        let parse = move |reply: &[i64]| {
            let (remaining, wait) = status_reply(reply)?;
            Ok(quota_copy.status(remaining, wait))
        };
        self.quota_op(key, quota, "status", Vec::new(), parse, Late::Drop)
    }

    fn take<'a>(
        &'a self,
        key: &'a RedisKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.quota_op(key, quota, "take", Vec::new(), nothing, Late::Drop)
    }

    /// Waits for the answer well past the timeout: nobody waits for it, and
    /// an answer given up on could not be told from one never applied.
    fn adjust<'a>(
        &'a self,
        key: &'a RedisKey,
        quota: &'a Quota,
        ticket: u64,
        from: u32,
        to: u32,
    ) -> LimiterFuture<'a, Result<Option<u64>, LimiterError>> {
        let parse = |reply: &[i64]| {
            Ok(match decision(reply) {
                Ok(WindowDecision::Granted { ticket }) => Some(ticket),
                Ok(WindowDecision::Denied { .. }) => None,
                // `[0]`: the grant can no longer be adjusted down.
                Err(_) if reply == [0] => None,
                Err(error) => return Err(error),
            })
        };
        if let QuotaKind::SlidingLog { .. } = quota.kind() {
            // A start is its ticket: it stays whatever its size.
            let (op, extra) = log_adjustment(ticket, from, to);
            let extra = extra.iter().map(u64::to_string).collect();
            let parse = move |_: &[i64]| Ok(Some(ticket));
            return self.quota_op(key, quota, op, extra, parse, Late::Patient);
        }
        let extra = args(&[&ticket, &from, &to]);
        self.quota_op(key, quota, "adjust", extra, parse, Late::Patient)
    }

    fn pause<'a>(
        &'a self,
        key: &'a RedisKey,
        quota: &'a Quota,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let extra = args(&[&micros_until(at)]);
        self.quota_op(key, quota, "pause", extra, nothing, Late::Drop)
    }

    fn reset<'a>(
        &'a self,
        key: &'a RedisKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.quota_op(key, quota, "reset", Vec::new(), nothing, Late::Drop)
    }
}

/// The keys of `script` among a quota's four: a GCRA or window quota's state
/// (`quota`, `gaps`), or a sliding log's (`log`, `state`). Kept apart, so
/// that a limit whose quota changes algorithm never finds a key of the
/// other's type.
fn script_keys(key: &RedisKey, script: QuotaScript) -> &[String] {
    let (state, log) = key.parts.split_at(2.min(key.parts.len()));
    match script {
        QuotaScript::SlidingLog => log,
        _ => state,
    }
}

#[cfg(test)]
mod tests {
    use super::QuotaScript;

    /// `Scripts` finds a quota's script at its discriminant in `ALL`.
    #[test]
    fn every_quota_script_is_listed_at_its_discriminant() {
        for (index, script) in QuotaScript::ALL.into_iter().enumerate() {
            assert_eq!(script as usize, index, "{script:?}");
        }
    }
}
