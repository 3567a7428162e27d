//! [`LeaseStore`] for [`RedisStore`]: `leases.lua`.

use std::time::Duration;

use tokio::time::Instant;

use super::{
    RedisKey, RedisStore, args, decision, done, micros, micros_until, optional_instant, parsed,
    unsigned,
};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::store::{LeaseStore, WindowDecision, lease_names, names_of_all};

/// `arguments`, then the lease `names` as the script stores them (decimal
/// strings).
fn with_names(
    mut arguments: Vec<String>,
    names: Result<Vec<u64>, LimiterError>,
) -> Result<Vec<String>, LimiterError> {
    arguments.extend(names?.iter().map(u64::to_string));
    Ok(arguments)
}

impl RedisStore {
    /// Runs `op` of the lease script with `arguments` (unless they could
    /// not be made).
    fn leases<'a>(
        &'a self,
        key: &'a RedisKey,
        op: &'static str,
        arguments: Result<Vec<String>, LimiterError>,
    ) -> LimiterFuture<'a, Result<Vec<i64>, LimiterError>> {
        LimiterFuture::new(async move {
            let mut all = vec![op.to_owned()];
            all.extend(arguments?);
            self.run(&self.inner.scripts.leases, &key.parts(), &all)
                .await
        })
    }
}

impl LeaseStore for RedisStore {
    type LeaseKey = RedisKey;

    fn lease_key(&self, name: &str) -> RedisKey {
        RedisKey::new(&self.base_key(name), &["leases", "pause"])
    }

    fn lease<'a>(
        &'a self,
        key: &'a RedisKey,
        max: u32,
        ttl: Duration,
        lease: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>> {
        let arguments = with_names(args(&[&max, &micros(ttl), &cost]), lease_names(lease, cost));
        parsed(self.leases(key, "lease", arguments), move |reply| {
            if reply == [1] {
                return Ok(WindowDecision::Granted { ticket: lease });
            }
            decision(reply)
        })
    }

    fn renew<'a>(
        &'a self,
        key: &'a RedisKey,
        ttl: Duration,
        leases: &'a [(u64, u32)],
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        let arguments = with_names(args(&[&micros(ttl)]), names_of_all(leases));
        parsed(self.leases(key, "renew", arguments), |reply| {
            Ok(usize::try_from(unsigned(reply, 0)?).unwrap_or(usize::MAX))
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a RedisKey,
        lease: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let arguments = with_names(Vec::new(), lease_names(lease, cost));
        done(self.leases(key, "release", arguments))
    }

    fn leases_held<'a>(
        &'a self,
        key: &'a RedisKey,
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        parsed(self.leases(key, "held", Ok(Vec::new())), |reply| {
            Ok(usize::try_from(unsigned(reply, 0)?).unwrap_or(usize::MAX))
        })
    }

    fn pause_leases<'a>(
        &'a self,
        key: &'a RedisKey,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        done(self.leases(key, "pause", Ok(args(&[&micros_until(at)]))))
    }

    fn paused_until<'a>(
        &'a self,
        key: &'a RedisKey,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        parsed(self.leases(key, "paused", Ok(Vec::new())), optional_instant)
    }

    fn clear_leases<'a>(
        &'a self,
        key: &'a RedisKey,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        done(self.leases(key, "clear", Ok(Vec::new())))
    }
}
