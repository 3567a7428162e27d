//! [`LeaseStore`] for [`RedisStore`]: `leases.lua`.

use std::time::Duration;

use tokio::time::Instant;

use super::{
    RedisKey, RedisStore, ScriptName, args, decision, micros, micros_until, nothing,
    optional_instant, unsigned,
};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::store::late::{self, Late};
use crate::store::{LeaseStore, StoreError, WindowDecision, lease_names, names_of_all};

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
    /// not be made) and reads the reply with `parse`; a late reply goes
    /// where `late` says.
    fn leases<T: Send + 'static>(
        &self,
        key: &RedisKey,
        op: &'static str,
        arguments: Result<Vec<String>, LimiterError>,
        parse: impl FnOnce(&[i64]) -> Result<T, StoreError> + Send + 'static,
        late: Late<T>,
    ) -> LimiterFuture<'static, Result<T, LimiterError>> {
        match arguments {
            Ok(arguments) => {
                let mut all = vec![op.to_owned()];
                all.extend(arguments);
                self.run(ScriptName::Leases, &key.parts, all, parse, late)
            }
            Err(error) => LimiterFuture::ready(Err(error)),
        }
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
        let parse = move |reply: &[i64]| {
            if reply == [1] {
                return Ok(WindowDecision::Granted { ticket: lease });
            }
            decision(reply)
        };
        let undo = late::undo_lease(self, key, cost, key.name().to_owned());
        self.leases(key, "lease", arguments, parse, undo)
    }

    fn renew<'a>(
        &'a self,
        key: &'a RedisKey,
        ttl: Duration,
        leases: &'a [(u64, u32)],
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        let arguments = with_names(args(&[&micros(ttl)]), names_of_all(leases));
        let parse = |reply: &[i64]| Ok(usize::try_from(unsigned(reply, 0)?).unwrap_or(usize::MAX));
        self.leases(key, "renew", arguments, parse, Late::Drop)
    }

    fn release<'a>(
        &'a self,
        key: &'a RedisKey,
        lease: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let arguments = with_names(Vec::new(), lease_names(lease, cost));
        self.leases(key, "release", arguments, nothing, Late::Patient)
    }

    fn leases_held<'a>(
        &'a self,
        key: &'a RedisKey,
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        let parse = |reply: &[i64]| Ok(usize::try_from(unsigned(reply, 0)?).unwrap_or(usize::MAX));
        self.leases(key, "held", Ok(Vec::new()), parse, Late::Drop)
    }

    fn pause_leases<'a>(
        &'a self,
        key: &'a RedisKey,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let arguments = Ok(args(&[&micros_until(at)]));
        self.leases(key, "pause", arguments, nothing, Late::Drop)
    }

    fn paused_until<'a>(
        &'a self,
        key: &'a RedisKey,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        self.leases(key, "paused", Ok(Vec::new()), optional_instant, Late::Drop)
    }

    fn clear_leases<'a>(
        &'a self,
        key: &'a RedisKey,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.leases(key, "clear", Ok(Vec::new()), nothing, Late::Drop)
    }
}
