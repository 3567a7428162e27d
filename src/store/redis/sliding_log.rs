//! [`RateLimiterStore`] for [`RedisStore`]: `sliding_log.lua`.

use std::time::Duration;

use tokio::time::Instant;

use super::{
    RedisKey, RedisStore, args, blocked, decision, done, micros, micros_until, optional_instant,
    parsed, status_reply, unsigned,
};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::quota_status::QuotaStatus;
use crate::store::{RateLimiterStore, WindowDecision, WindowPolicy};

impl RedisStore {
    /// Runs one operation of the sliding log script: the policy's arguments,
    /// then `extra`.
    fn sliding_log<'a>(
        &'a self,
        key: &'a RedisKey,
        op: &'static str,
        policy: Option<WindowPolicy>,
        extra: Vec<String>,
    ) -> LimiterFuture<'a, Result<Vec<i64>, LimiterError>> {
        LimiterFuture::new(async move {
            let mut arguments = policy_args(op, policy);
            arguments.extend(extra);
            self.run(&self.inner.scripts.sliding_log, &key.parts(), &arguments)
                .await
        })
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
        let run = self.sliding_log(key, "acquire", Some(policy), args(&[&cost, &jitter]));
        parsed(run, decision)
    }

    fn record_execution<'a>(
        &'a self,
        key: &'a RedisKey,
        policy: WindowPolicy,
        jitter: f64,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        done(self.sliding_log(key, "record", Some(policy), args(&[&jitter])))
    }

    fn refund<'a>(
        &'a self,
        key: &'a RedisKey,
        policy: WindowPolicy,
        ticket: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        done(self.sliding_log(key, "refund", Some(policy), args(&[&ticket, &cost])))
    }

    fn settle<'a>(
        &'a self,
        key: &'a RedisKey,
        policy: WindowPolicy,
        ticket: u64,
        from: u32,
        to: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        done(self.sliding_log(key, "settle", Some(policy), args(&[&ticket, &from, &to])))
    }

    fn peek<'a>(
        &'a self,
        key: &'a RedisKey,
        policy: WindowPolicy,
        cost: u32,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        parsed(
            self.sliding_log(key, "peek", Some(policy), args(&[&cost])),
            blocked,
        )
    }

    fn window_status<'a>(
        &'a self,
        key: &'a RedisKey,
        policy: WindowPolicy,
    ) -> LimiterFuture<'a, Result<QuotaStatus, LimiterError>> {
        let run = self.sliding_log(key, "status", Some(policy), Vec::new());
        parsed(run, move |reply| {
            let (remaining, wait) = status_reply(reply)?;
            Ok(policy.status(remaining, wait))
        })
    }

    fn execution_count<'a>(
        &'a self,
        key: &'a RedisKey,
        window: Duration,
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        let run = self.sliding_log(key, "count", None, args(&[&micros(window)]));
        parsed(run, |reply| {
            let count = unsigned(reply, 0)?;
            Ok(usize::try_from(count).unwrap_or(usize::MAX))
        })
    }

    fn oldest_execution_at_offset<'a>(
        &'a self,
        key: &'a RedisKey,
        window: Duration,
        offset: usize,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        let run = self.sliding_log(key, "oldest", None, args(&[&micros(window), &offset]));
        parsed(run, |reply| {
            if super::at(reply, 0)? == 0 {
                return Ok(None);
            }
            let age = Duration::from_micros(unsigned(reply, 1)?);
            Ok(Some(
                Instant::now().checked_sub(age).unwrap_or_else(Instant::now),
            ))
        })
    }

    fn next_available<'a>(
        &'a self,
        key: &'a RedisKey,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        parsed(
            self.sliding_log(key, "next", None, Vec::new()),
            optional_instant,
        )
    }

    fn set_next_available<'a>(
        &'a self,
        key: &'a RedisKey,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        done(self.sliding_log(key, "pause", None, args(&[&micros_until(at)])))
    }

    fn clear<'a>(&'a self, key: &'a RedisKey) -> LimiterFuture<'a, Result<(), LimiterError>> {
        done(self.sliding_log(key, "clear", None, Vec::new()))
    }
}
