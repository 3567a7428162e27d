//! [`LeaseStore`] for [`PostgresStore`]: `leases.sql`.

use std::time::Duration;

use tokio::time::Instant;

use super::reply::{Reply, micros, micros_until, signed};
use super::{PostgresKey, PostgresStore};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::store::{LeaseStore, StoreError, WindowDecision};

/// The names of the `cost` leases from `lease`, as the table stores them.
fn names(lease: u64, cost: u32) -> impl Iterator<Item = i64> {
    (0..u64::from(cost)).map(move |k| signed(lease.wrapping_add(k)))
}

impl PostgresStore {
    /// Runs `op` of the lease function with `args`, then reads its reply
    /// with `read`.
    fn leases<'a, T: Send + 'a>(
        &'a self,
        key: &'a PostgresKey,
        op: &'static str,
        args: Vec<i64>,
        read: impl FnOnce(Reply<'_>) -> Result<T, StoreError> + Send + 'a,
    ) -> LimiterFuture<'a, Result<T, LimiterError>> {
        LimiterFuture::new(async move {
            let statement = &self.inner.statements.leases;
            let reply = self.run(statement, &[&op, &key.name, &args]).await?;
            Ok(read(Reply(&reply))?)
        })
    }
}

impl LeaseStore for PostgresStore {
    type LeaseKey = PostgresKey;

    fn lease_key(&self, name: &str) -> PostgresKey {
        PostgresKey {
            name: self.key_name(name),
        }
    }

    fn lease<'a>(
        &'a self,
        key: &'a PostgresKey,
        max: u32,
        ttl: Duration,
        lease: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>> {
        let mut args = vec![i64::from(max), micros(ttl), i64::from(cost)];
        args.extend(names(lease, cost));
        self.leases(key, "lease", args, move |r| {
            if r.0 == [1] {
                return Ok(WindowDecision::Granted { ticket: lease });
            }
            r.decision()
        })
    }

    fn renew<'a>(
        &'a self,
        key: &'a PostgresKey,
        ttl: Duration,
        leases: &'a [(u64, u32)],
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        let mut args = vec![micros(ttl)];
        args.extend(leases.iter().flat_map(|&(lease, cost)| names(lease, cost)));
        self.leases(key, "renew", args, |r| r.count())
    }

    fn release<'a>(
        &'a self,
        key: &'a PostgresKey,
        lease: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.leases(key, "release", names(lease, cost).collect(), |_| Ok(()))
    }

    fn leases_held<'a>(
        &'a self,
        key: &'a PostgresKey,
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        self.leases(key, "held", Vec::new(), |r| r.count())
    }

    fn pause_leases<'a>(
        &'a self,
        key: &'a PostgresKey,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.leases(key, "pause", vec![micros_until(at)], |_| Ok(()))
    }

    fn paused_until<'a>(
        &'a self,
        key: &'a PostgresKey,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        self.leases(key, "paused", Vec::new(), |r| r.optional_instant())
    }

    fn clear_leases<'a>(
        &'a self,
        key: &'a PostgresKey,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.leases(key, "clear", Vec::new(), |_| Ok(()))
    }
}
