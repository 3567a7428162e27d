//! [`QuotaStore`] for [`PostgresStore`]: `cells.sql` (GCRA and token
//! bucket), `fixed_window.sql`, `sliding_window_counter.sql` and
//! `sliding_log.sql`.

use tokio::time::Instant;

use super::reply::{Reply, micros, micros_until, signed};
use super::{Params, PostgresKey, PostgresStore, StatementName};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::quota_status::QuotaStatus;
use crate::store::late::{self, Late};
use crate::store::quota::{cells_op, log_adjustment, log_op};
use crate::store::{Quota, QuotaKind, QuotaStore, StoreError, WindowDecision};

/// The function of each quota algorithm, defined by its SQL file: adding
/// an algorithm adds it here and its parameters to
/// [`PostgresStore::quota_op`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum QuotaFunction {
    SlidingLog,
    Cells,
    FixedWindow,
    SlidingWindowCounter,
}

impl QuotaFunction {
    /// Every quota function, in the order of their discriminants (and in
    /// which their SQL runs).
    pub(super) const ALL: [Self; 4] = [
        Self::SlidingLog,
        Self::Cells,
        Self::FixedWindow,
        Self::SlidingWindowCounter,
    ];

    /// The function's name in the schema.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::SlidingLog => "sliding_log",
            Self::Cells => "cells",
            Self::FixedWindow => "fixed_window",
            Self::SlidingWindowCounter => "sliding_window_counter",
        }
    }

    /// How many parameters the function takes.
    pub(super) fn arity(self) -> usize {
        match self {
            Self::SlidingLog => 9,
            _ => 5,
        }
    }

    /// Its tables, each with an `expires` column, which `cleanup.sql`
    /// sweeps.
    pub(super) fn tables(self) -> &'static [&'static str] {
        match self {
            Self::SlidingLog => &["sliding_log", "sliding_state"],
            Self::Cells => &["cells"],
            Self::FixedWindow => &["fixed_windows"],
            Self::SlidingWindowCounter => &["sliding_window_counters"],
        }
    }

    /// The SQL that creates the function and its tables.
    pub(super) fn sql(self) -> &'static str {
        match self {
            Self::SlidingLog => include_str!("sliding_log.sql"),
            Self::Cells => include_str!("cells.sql"),
            Self::FixedWindow => include_str!("fixed_window.sql"),
            Self::SlidingWindowCounter => include_str!("sliding_window_counter.sql"),
        }
    }
}

impl PostgresStore {
    /// Runs operation `op` of `quota`'s function with `args` and reads the
    /// reply with `read`; a late reply goes where `late` says.
    fn quota_op<T: Send + 'static>(
        &self,
        key: &PostgresKey,
        quota: &Quota,
        op: &'static str,
        args: Vec<i64>,
        read: impl FnOnce(Reply<'_>) -> Result<T, StoreError> + Send + 'static,
        late: Late<T>,
    ) -> LimiterFuture<'static, Result<T, LimiterError>> {
        let name = key.name.clone();
        let (function, params): (_, Params) = match quota.kind() {
            QuotaKind::Cells(cells) => {
                let tick = cells.interval().as_secs_f64() * 1e6;
                let burst = i64::from(cells.burst());
                let params: Params = vec![
                    Box::new(cells_op(op, quota)),
                    Box::new(name),
                    Box::new(tick),
                    Box::new(burst),
                    Box::new(args),
                ];
                (QuotaFunction::Cells, params)
            }
            QuotaKind::FixedWindow { max, window } => (
                QuotaFunction::FixedWindow,
                window_params(op, name, max, micros(window), args),
            ),
            QuotaKind::SlidingWindowCounter { max, window } => (
                QuotaFunction::SlidingWindowCounter,
                window_params(op, name, max, micros(window), args),
            ),
            QuotaKind::SlidingLog { .. } => {
                (QuotaFunction::SlidingLog, log_params(op, name, quota, args))
            }
        };
        self.run(StatementName::Quota(function), params, read, late)
    }
}

/// The parameters of `window_op(op, name, max, window, args)`.
fn window_params(op: &'static str, name: String, max: u32, window: i64, args: Vec<i64>) -> Params {
    vec![
        Box::new(op),
        Box::new(name),
        Box::new(i64::from(max)),
        Box::new(window),
        Box::new(args),
    ]
}

/// The parameters of the sliding log's function: `op, name, max, window,
/// initial, multiplier, cap, jitter, args` (a backoff's zeros without one).
fn log_params(op: &'static str, name: String, quota: &Quota, args: Vec<i64>) -> Params {
    let (op, jitter) = log_op(op, quota);
    let (initial, multiplier, cap) = quota.backoff().map_or((0, 1.0, 0), |b| {
        (micros(b.initial).max(1), b.multiplier, micros(b.max))
    });
    vec![
        Box::new(op),
        Box::new(name),
        Box::new(i64::from(quota.capacity())),
        Box::new(micros(quota.window())),
        Box::new(initial),
        Box::new(multiplier),
        Box::new(cap),
        Box::new(jitter.unwrap_or(0.0)),
        Box::new(args),
    ]
}

impl QuotaStore for PostgresStore {
    type QuotaKey = PostgresKey;

    fn quota_key(&self, name: &str) -> PostgresKey {
        PostgresKey {
            name: self.key_name(name),
        }
    }

    /// Creates the schema, its tables and functions if missing.
    fn setup(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(self.create_schema())
    }

    fn decide<'a>(
        &'a self,
        key: &'a PostgresKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>> {
        let undo = late::undo_grant(self, key, *quota, cost, key.name.clone());
        let args = vec![i64::from(cost)];
        self.quota_op(key, quota, "acquire", args, |r| r.decision(), undo)
    }

    fn look<'a>(
        &'a self,
        key: &'a PostgresKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        let args = vec![i64::from(cost)];
        self.quota_op(key, quota, "peek", args, |r| r.blocked(), Late::Drop)
    }

    fn quota_status<'a>(
        &'a self,
        key: &'a PostgresKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<QuotaStatus, LimiterError>> {
        let quota_copy = *quota;
        let read = move |r: Reply<'_>| {
            let (remaining, wait) = r.status()?;
            Ok(quota_copy.status(remaining, wait))
        };
        self.quota_op(key, quota, "status", Vec::new(), read, Late::Drop)
    }

    fn take<'a>(
        &'a self,
        key: &'a PostgresKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.quota_op(key, quota, "take", Vec::new(), |_| Ok(()), Late::Drop)
    }

    fn adjust<'a>(
        &'a self,
        key: &'a PostgresKey,
        quota: &'a Quota,
        ticket: u64,
        from: u32,
        to: u32,
    ) -> LimiterFuture<'a, Result<Option<u64>, LimiterError>> {
        if let QuotaKind::SlidingLog { .. } = quota.kind() {
            // A start is its ticket: it stays whatever its size.
            let (op, args) = log_adjustment(ticket, from, to);
            let args = args.into_iter().map(signed).collect();
            let read = move |_: Reply<'_>| Ok(Some(ticket));
            return self.quota_op(key, quota, op, args, read, Late::Patient);
        }
        let args = vec![signed(ticket), i64::from(from), i64::from(to)];
        let read = |r: Reply<'_>| {
            // `[0]`: the grant can no longer be adjusted down.
            if r.0 == [0] {
                return Ok(None);
            }
            Ok(match r.decision()? {
                WindowDecision::Granted { ticket } => Some(ticket),
                WindowDecision::Denied { .. } => None,
            })
        };
        self.quota_op(key, quota, "adjust", args, read, Late::Patient)
    }

    fn pause<'a>(
        &'a self,
        key: &'a PostgresKey,
        quota: &'a Quota,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let args = vec![micros_until(at)];
        self.quota_op(key, quota, "pause", args, |_| Ok(()), Late::Drop)
    }

    fn reset<'a>(
        &'a self,
        key: &'a PostgresKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.quota_op(key, quota, "reset", Vec::new(), |_| Ok(()), Late::Drop)
    }
}

#[cfg(test)]
mod tests {
    use super::QuotaFunction;

    /// `Statements` finds a quota's statement at its discriminant in `ALL`.
    #[test]
    fn every_quota_function_is_listed_at_its_discriminant() {
        for (index, function) in QuotaFunction::ALL.into_iter().enumerate() {
            assert_eq!(function as usize, index, "{function:?}");
        }
    }
}
