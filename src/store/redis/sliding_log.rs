//! [`RateLimiterStore`] for [`RedisStore`]: `sliding_log.lua`.

use std::time::Duration;

use tokio::time::Instant;

use super::{
    RedisKey, RedisStore, ScriptName, args, blocked, decision, micros, micros_until, nothing,
    optional_instant, status_reply, unsigned,
};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::quota_status::QuotaStatus;
use crate::store::late::{self, Late};
use crate::store::{RateLimiterStore, StoreError, WindowDecision, WindowPolicy};

impl RedisStore {
    /// Runs one operation of the sliding log script (the policy's
    /// arguments, then `extra`) and reads the reply with `parse`; a late
    /// reply goes where `late` says.
    fn sliding_log<T: Send + 'static>(
        &self,
        key: &RedisKey,
        op: &'static str,
        policy: Option<WindowPolicy>,
        extra: Vec<String>,
        parse: impl FnOnce(&[i64]) -> Result<T, StoreError> + Send + 'static,
        late: Late<T>,
    ) -> LimiterFuture<'static, Result<T, LimiterError>> {
        let mut arguments = policy_args(op, policy);
        arguments.extend(extra);
        self.run(ScriptName::SlidingLog, key, arguments, parse, late)
    }
}

/// `op, max, window, initial, multiplier, cap` (zeros without a policy or
/// a backoff).
fn policy_args(op: &str, policy: Option<WindowPolicy>) -> Vec<String> {
    let (max, window) = policy.map_or((0, 0), |p| (p.max_executions, micros(p.window)));
    let backoff = policy.and_then(|p| p.backoff);
    let (initial, multiplier, cap) = backoff.map_or((0, 1.0, 0), |b| {
        (micros(b.initial).max(1), b.multiplier, micros(b.max))
    });
    args(&[&op, &max, &window, &initial, &multiplier, &cap])
}

impl RateLimiterStore for RedisStore {
    type Key = RedisKey;

    fn key(&self, name: &str) -> RedisKey {
        RedisKey::new(&self.base_key(name), &["log", "state"])
    }

    /// Loads every script, so the first decisions need no `SCRIPT LOAD`.
    fn setup(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(self.load_scripts())
    }

    fn acquire<'a>(
        &'a self,
        key: &'a RedisKey,
        policy: WindowPolicy,
        cost: u32,
        jitter: f64,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>> {
        let undo = late::undo_start(self, key, policy, cost, key.name().to_owned());
        let extra = args(&[&cost, &jitter]);
        self.sliding_log(key, "acquire", Some(policy), extra, decision, undo)
    }

    fn record_execution<'a>(
        &'a self,
        key: &'a RedisKey,
        policy: WindowPolicy,
        jitter: f64,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let extra = args(&[&jitter]);
        self.sliding_log(key, "record", Some(policy), extra, nothing, Late::Drop)
    }

    fn refund<'a>(
        &'a self,
        key: &'a RedisKey,
        policy: WindowPolicy,
        ticket: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let extra = args(&[&ticket, &cost]);
        self.sliding_log(key, "refund", Some(policy), extra, nothing, Late::Patient)
    }

    fn settle<'a>(
        &'a self,
        key: &'a RedisKey,
        policy: WindowPolicy,
        ticket: u64,
        from: u32,
        to: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let extra = args(&[&ticket, &from, &to]);
        self.sliding_log(key, "settle", Some(policy), extra, nothing, Late::Patient)
    }

    fn peek<'a>(
        &'a self,
        key: &'a RedisKey,
        policy: WindowPolicy,
        cost: u32,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        let extra = args(&[&cost]);
        self.sliding_log(key, "peek", Some(policy), extra, blocked, Late::Drop)
    }

    fn window_status<'a>(
        &'a self,
        key: &'a RedisKey,
        policy: WindowPolicy,
    ) -> LimiterFuture<'a, Result<QuotaStatus, LimiterError>> {
        let parse = move |reply: &[i64]| {
            let (remaining, wait) = status_reply(reply)?;
            Ok(policy.status(remaining, wait))
        };
        self.sliding_log(key, "status", Some(policy), Vec::new(), parse, Late::Drop)
    }

    fn execution_count<'a>(
        &'a self,
        key: &'a RedisKey,
        window: Duration,
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        let parse = |reply: &[i64]| {
            let count = unsigned(reply, 0)?;
            Ok(usize::try_from(count).unwrap_or(usize::MAX))
        };
        let extra = args(&[&micros(window)]);
        self.sliding_log(key, "count", None, extra, parse, Late::Drop)
    }

    fn oldest_execution_at_offset<'a>(
        &'a self,
        key: &'a RedisKey,
        window: Duration,
        offset: usize,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        let parse = |reply: &[i64]| {
            if super::at(reply, 0)? == 0 {
                return Ok(None);
            }
            let age = Duration::from_micros(unsigned(reply, 1)?);
            Ok(Some(
                Instant::now().checked_sub(age).unwrap_or_else(Instant::now),
            ))
        };
        let extra = args(&[&micros(window), &offset]);
        self.sliding_log(key, "oldest", None, extra, parse, Late::Drop)
    }

    fn next_available<'a>(
        &'a self,
        key: &'a RedisKey,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        self.sliding_log(key, "next", None, Vec::new(), optional_instant, Late::Drop)
    }

    fn set_next_available<'a>(
        &'a self,
        key: &'a RedisKey,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let extra = args(&[&micros_until(at)]);
        self.sliding_log(key, "pause", None, extra, nothing, Late::Drop)
    }

    fn clear<'a>(&'a self, key: &'a RedisKey) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.sliding_log(key, "clear", None, Vec::new(), nothing, Late::Drop)
    }
}
