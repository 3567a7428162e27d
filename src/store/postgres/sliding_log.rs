//! [`RateLimiterStore`] for [`PostgresStore`]: `sliding_log.sql`.

use std::time::Duration;

use tokio::time::Instant;

use super::reply::{Reply, micros, micros_until};
use super::{Params, PostgresKey, PostgresStore, StatementName};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::quota_status::QuotaStatus;
use crate::store::late::{self, Late};
use crate::store::{RateLimiterStore, StoreError, WindowDecision, WindowPolicy};

/// The policy's arguments of the sliding log function: max, window,
/// initial backoff, multiplier, cap (zeros without a policy or a backoff).
fn policy_args(policy: Option<WindowPolicy>) -> (i64, i64, i64, f64, i64) {
    let (max, window) = policy.map_or((0, 0), |p| (i64::from(p.max_executions), micros(p.window)));
    let backoff = policy.and_then(|p| p.backoff);
    let (initial, multiplier, cap) = backoff.map_or((0, 1.0, 0), |b| {
        (micros(b.initial).max(1), b.multiplier, micros(b.max))
    });
    (max, window, initial, multiplier, cap)
}

impl PostgresStore {
    /// Runs `op` of the sliding log function, then reads its reply with
    /// `read`; a late reply goes where `late` says.
    fn sliding_log<T: Send + 'static>(
        &self,
        key: &PostgresKey,
        op: &'static str,
        policy: Option<WindowPolicy>,
        (jitter, args): (f64, Vec<i64>),
        read: impl FnOnce(Reply<'_>) -> Result<T, StoreError> + Send + 'static,
        late: Late<T>,
    ) -> LimiterFuture<'static, Result<T, LimiterError>> {
        let (max, window, initial, multiplier, cap) = policy_args(policy);
        let params: Params = vec![
            Box::new(op),
            Box::new(key.name.clone()),
            Box::new(max),
            Box::new(window),
            Box::new(initial),
            Box::new(multiplier),
            Box::new(cap),
            Box::new(jitter),
            Box::new(args),
        ];
        self.run(StatementName::SlidingLog, params, read, late)
    }
}

impl RateLimiterStore for PostgresStore {
    type Key = PostgresKey;

    fn key(&self, name: &str) -> PostgresKey {
        PostgresKey {
            name: self.key_name(name),
        }
    }

    /// Creates the schema, its tables and functions if missing (and
    /// replaces the functions with this version's).
    fn setup(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(self.create_schema())
    }

    fn acquire<'a>(
        &'a self,
        key: &'a PostgresKey,
        policy: WindowPolicy,
        cost: u32,
        jitter: f64,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>> {
        let args = (jitter, vec![i64::from(cost)]);
        let undo = late::undo_start(self, key, policy, cost, key.name.clone());
        self.sliding_log(key, "acquire", Some(policy), args, |r| r.decision(), undo)
    }

    fn window_status<'a>(
        &'a self,
        key: &'a PostgresKey,
        policy: WindowPolicy,
    ) -> LimiterFuture<'a, Result<QuotaStatus, LimiterError>> {
        let read = move |r: Reply<'_>| {
            let (remaining, wait) = r.status()?;
            Ok(policy.status(remaining, wait))
        };
        let args = (0.0, Vec::new());
        self.sliding_log(key, "status", Some(policy), args, read, Late::Drop)
    }

    fn record_execution<'a>(
        &'a self,
        key: &'a PostgresKey,
        policy: WindowPolicy,
        jitter: f64,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let args = (jitter, Vec::new());
        self.sliding_log(key, "record", Some(policy), args, |_| Ok(()), Late::Drop)
    }

    fn refund<'a>(
        &'a self,
        key: &'a PostgresKey,
        policy: WindowPolicy,
        ticket: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let args = (0.0, vec![super::reply::signed(ticket), i64::from(cost)]);
        self.sliding_log(key, "refund", Some(policy), args, |_| Ok(()), Late::Patient)
    }

    fn settle<'a>(
        &'a self,
        key: &'a PostgresKey,
        policy: WindowPolicy,
        ticket: u64,
        from: u32,
        to: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let ticket = super::reply::signed(ticket);
        let args = (0.0, vec![ticket, i64::from(from), i64::from(to)]);
        self.sliding_log(key, "settle", Some(policy), args, |_| Ok(()), Late::Patient)
    }

    fn peek<'a>(
        &'a self,
        key: &'a PostgresKey,
        policy: WindowPolicy,
        cost: u32,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        let args = (0.0, vec![i64::from(cost)]);
        self.sliding_log(key, "peek", Some(policy), args, |r| r.blocked(), Late::Drop)
    }

    fn execution_count<'a>(
        &'a self,
        key: &'a PostgresKey,
        window: Duration,
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        let args = (0.0, vec![micros(window)]);
        self.sliding_log(key, "count", None, args, |r| r.count(), Late::Drop)
    }

    fn oldest_execution_at_offset<'a>(
        &'a self,
        key: &'a PostgresKey,
        window: Duration,
        offset: usize,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        let offset = i64::try_from(offset).unwrap_or(i64::MAX);
        let args = (0.0, vec![micros(window), offset]);
        let read = |r: Reply<'_>| {
            if r.at(0)? == 0 {
                return Ok(None);
            }
            let age = Duration::from_micros(r.unsigned(1)?);
            Ok(Some(
                Instant::now().checked_sub(age).unwrap_or_else(Instant::now),
            ))
        };
        self.sliding_log(key, "oldest", None, args, read, Late::Drop)
    }

    fn next_available<'a>(
        &'a self,
        key: &'a PostgresKey,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        let args = (0.0, Vec::new());
        self.sliding_log(
            key,
            "next",
            None,
            args,
            |r| r.optional_instant(),
            Late::Drop,
        )
    }

    fn set_next_available<'a>(
        &'a self,
        key: &'a PostgresKey,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let args = (0.0, vec![micros_until(at)]);
        self.sliding_log(key, "pause", None, args, |_| Ok(()), Late::Drop)
    }

    fn clear<'a>(&'a self, key: &'a PostgresKey) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let args = (0.0, Vec::new());
        self.sliding_log(key, "clear", None, args, |_| Ok(()), Late::Drop)
    }
}
