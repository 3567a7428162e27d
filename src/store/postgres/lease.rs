//! [`LeaseStore`] for [`PostgresStore`]: `leases.sql`.

use std::time::Duration;

use tokio::time::Instant;

use super::reply::{Reply, micros, micros_until, signed};
use super::{Params, PostgresKey, PostgresStore, StatementName};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::store::late::{self, Late};
use crate::store::{LeaseStore, StoreError, WindowDecision, lease_names, names_of_all};

/// `args`, then the lease `names` as the table stores them.
fn with_names(
    mut args: Vec<i64>,
    names: Result<Vec<u64>, LimiterError>,
) -> Result<Vec<i64>, LimiterError> {
    args.extend(names?.into_iter().map(signed));
    Ok(args)
}

impl PostgresStore {
    /// Runs `op` of the lease function with `args` (unless they could not
    /// be made), then reads its reply with `read`; a late reply goes where
    /// `late` says.
    fn leases<T: Send + 'static>(
        &self,
        key: &PostgresKey,
        op: &'static str,
        args: Result<Vec<i64>, LimiterError>,
        read: impl FnOnce(Reply<'_>) -> Result<T, StoreError> + Send + 'static,
        late: Late<T>,
    ) -> LimiterFuture<'static, Result<T, LimiterError>> {
        match args {
            Ok(args) => {
                let params: Params = vec![Box::new(op), Box::new(key.name.clone()), Box::new(args)];
                self.run(StatementName::Leases, params, read, late)
            }
            Err(error) => LimiterFuture::ready(Err(error)),
        }
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
        let args = vec![i64::from(max), micros(ttl), i64::from(cost)];
        let args = with_names(args, lease_names(lease, cost));
        let read = move |r: Reply<'_>| {
            if r.0 == [1] {
                return Ok(WindowDecision::Granted { ticket: lease });
            }
            r.decision()
        };
        let undo = late::undo_lease(self, key, cost, key.name.clone());
        self.leases(key, "lease", args, read, undo)
    }

    fn renew<'a>(
        &'a self,
        key: &'a PostgresKey,
        ttl: Duration,
        leases: &'a [(u64, u32)],
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        let args = with_names(vec![micros(ttl)], names_of_all(leases));
        self.leases(key, "renew", args, |r| r.count(), Late::Drop)
    }

    fn release<'a>(
        &'a self,
        key: &'a PostgresKey,
        lease: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let args = with_names(Vec::new(), lease_names(lease, cost));
        self.leases(key, "release", args, |_| Ok(()), Late::Patient)
    }

    fn leases_held<'a>(
        &'a self,
        key: &'a PostgresKey,
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        self.leases(key, "held", Ok(Vec::new()), |r| r.count(), Late::Drop)
    }

    fn pause_leases<'a>(
        &'a self,
        key: &'a PostgresKey,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let args = Ok(vec![micros_until(at)]);
        self.leases(key, "pause", args, |_| Ok(()), Late::Drop)
    }

    fn paused_until<'a>(
        &'a self,
        key: &'a PostgresKey,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        let read = |r: Reply<'_>| r.optional_instant();
        self.leases(key, "paused", Ok(Vec::new()), read, Late::Drop)
    }

    fn clear_leases<'a>(
        &'a self,
        key: &'a PostgresKey,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.leases(key, "clear", Ok(Vec::new()), |_| Ok(()), Late::Drop)
    }
}
