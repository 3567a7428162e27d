//! [`LeaseStore`] for [`MemoryStore`]: a table of lease expiries per key.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::{LeaseStore, MemoryStore, WindowDecision, lease_names, names_of_all};
use crate::error::LimiterError;
use crate::limiter::{LimiterFuture, far_future};

/// A named concurrency limit in a [`MemoryStore`], made by
/// [`LeaseStore::lease_key`]. Keys for the same name share one table.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::store::{LeaseStore, MemoryLeaseKey, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let key: MemoryLeaseKey = store.lease_key("gpu");
/// store.lease(&key, 2, Duration::from_secs(5), 1, 1).await?;
/// assert_eq!(store.leases_held(&store.lease_key("gpu")).await?, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct MemoryLeaseKey(Arc<Mutex<LeaseTable>>);

#[derive(Default)]
struct LeaseTable {
    /// Each lease's expiry.
    expiries: HashMap<u64, Instant>,
    paused_until: Option<Instant>,
}

impl fmt::Debug for MemoryLeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MemoryLeaseKey")
    }
}

impl MemoryLeaseKey {
    /// The table with expired leases and pauses dropped as of `now`. Every
    /// update leaves it consistent, so a poisoned lock is usable.
    fn table(&self, now: Instant) -> MutexGuard<'_, LeaseTable> {
        let mut table = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        table.expiries.retain(|_, expiry| *expiry > now);
        table.paused_until = table.paused_until.filter(|at| *at > now);
        table
    }
}

/// When a lease taken or renewed at `now` expires.
fn expiry(now: Instant, ttl: Duration) -> Instant {
    now.checked_add(ttl).unwrap_or_else(far_future)
}

impl LeaseTable {
    /// Takes the leases `names` of the call `lease` if they fit.
    fn decide(
        &mut self,
        now: Instant,
        (max, ttl): (u32, Duration),
        lease: u64,
        names: Vec<u64>,
    ) -> WindowDecision {
        if let Some(retry_at) = self.paused_until {
            return WindowDecision::Denied { retry_at };
        }
        let expires = expiry(now, ttl);
        if self.expiries.len() + names.len() > max as usize {
            let earliest = self.expiries.values().min().copied();
            let retry_at = earliest.unwrap_or(expires);
            return WindowDecision::Denied { retry_at };
        }
        self.expiries
            .extend(names.into_iter().map(|name| (name, expires)));
        WindowDecision::Granted { ticket: lease }
    }
}

impl LeaseStore for MemoryStore {
    type LeaseKey = MemoryLeaseKey;

    fn lease_key(&self, name: &str) -> MemoryLeaseKey {
        self.lease_state(name)
    }

    fn lease<'a>(
        &'a self,
        key: &'a MemoryLeaseKey,
        max: u32,
        ttl: Duration,
        lease: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>> {
        let names = match lease_names(lease, cost) {
            Ok(names) => names,
            Err(error) => return LimiterFuture::ready(Err(error)),
        };
        let now = self.clock().now();
        let decision = key.table(now).decide(now, (max, ttl), lease, names);
        LimiterFuture::ready(Ok(decision))
    }

    fn renew<'a>(
        &'a self,
        key: &'a MemoryLeaseKey,
        ttl: Duration,
        leases: &'a [(u64, u32)],
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        let names = match names_of_all(leases) {
            Ok(names) => names,
            Err(error) => return LimiterFuture::ready(Err(error)),
        };
        let now = self.clock().now();
        let mut table = key.table(now);
        let mut renewed = 0;
        for name in names {
            if let Some(at) = table.expiries.get_mut(&name) {
                *at = expiry(now, ttl);
                renewed += 1;
            }
        }
        LimiterFuture::ready(Ok(renewed))
    }

    fn release<'a>(
        &'a self,
        key: &'a MemoryLeaseKey,
        lease: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let names = match lease_names(lease, cost) {
            Ok(names) => names,
            Err(error) => return LimiterFuture::ready(Err(error)),
        };
        let mut table = key.table(self.clock().now());
        for name in names {
            table.expiries.remove(&name);
        }
        LimiterFuture::ready(Ok(()))
    }

    fn leases_held<'a>(
        &'a self,
        key: &'a MemoryLeaseKey,
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        LimiterFuture::ready(Ok(key.table(self.clock().now()).expiries.len()))
    }

    fn pause_leases<'a>(
        &'a self,
        key: &'a MemoryLeaseKey,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let mut table = key.table(self.clock().now());
        table.paused_until = table.paused_until.max(Some(at));
        LimiterFuture::ready(Ok(()))
    }

    fn paused_until<'a>(
        &'a self,
        key: &'a MemoryLeaseKey,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        LimiterFuture::ready(Ok(key.table(self.clock().now()).paused_until))
    }

    fn clear_leases<'a>(
        &'a self,
        key: &'a MemoryLeaseKey,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        *key.table(self.clock().now()) = LeaseTable::default();
        LimiterFuture::ready(Ok(()))
    }
}
