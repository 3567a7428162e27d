//! [`LeasedConcurrencyLimiter`]: a concurrency limit shared by processes,
//! held as leases that expire unless renewed.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::spawn_or_warn;
use crate::error::{ConfigError, CostTooHigh, LimiterError};
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit, Release, ReleaseEvent};
use crate::store::late::until_applied;
use crate::store::{LeaseStore, MAX_LEASES, MemoryStore, WindowDecision};

/// At most `max` calls running at once across every process sharing the
/// store and name; a running call holds a lease.
///
/// A lease lasts `ttl` unless renewed: a background task renews this
/// limiter's leases every `ttl / 3`, and dropping a permit releases its
/// lease. If a process dies, its slots come back once their TTL passes,
/// with nothing to clean up.
///
/// A caller denied because the slots are taken waits until a call in this
/// process completes, or until the poll interval passes (default 20 ms),
/// whichever comes first, and then asks the store again: releases in other
/// processes are seen within one poll interval. A call whose future is
/// dropped while the store is deciding may hold a lease nobody renews; it
/// comes back after `ttl`.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::store::MemoryStore;
/// use tower_limits::limiter::Admission;
/// use tower_limits::{LeasedConcurrencyLimiter, Limiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let limiter = LeasedConcurrencyLimiter::new(store, "gpu", 1, Duration::from_secs(30))?;
/// let Admission::Granted(running) = limiter.try_acquire().await? else { unreachable!() };
/// assert!(matches!(limiter.try_acquire().await?, Admission::Denied(_)));
/// drop(running); // releases the lease
/// assert!(limiter.can_proceed().await?);
/// # Ok(())
/// # }
/// ```
pub struct LeasedConcurrencyLimiter<S: LeaseStore = MemoryStore> {
    shared: Arc<LeaseShared<S>>,
}

struct LeaseShared<S: LeaseStore> {
    name: String,
    max: u32,
    ttl: Duration,
    poll: Duration,
    store: S,
    key: S::LeaseKey,
    /// The leases this process holds (first name, count), to renew.
    held: Mutex<HashMap<u64, u32>>,
    /// Leases taken by `record_start`, released by `record_completion`.
    recorded: Mutex<Vec<u64>>,
    renewing: AtomicBool,
    released: ReleaseEvent,
}

const DEFAULT_POLL: Duration = Duration::from_millis(20);
/// The longest lease.
const MAX_TTL: Duration = Duration::from_secs(86_400);

impl<S: LeaseStore> LeasedConcurrencyLimiter<S> {
    /// At most `max` calls at once under `name` in `store`, each lease
    /// lasting `ttl` unless renewed. `ttl` should be well above a store
    /// round trip (a second or more); `max` at least 1.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if `max` is 0 or above [`MAX_LEASES`] (each unit
    /// held is one entry in the store), or `ttl` is below 3 ms or above a
    /// day (a crashed process's slots would stay taken that long; renewals
    /// keep long calls' leases alive whatever the TTL).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::MemoryStore;
    /// use tower_limits::LeasedConcurrencyLimiter;
    ///
    /// let ttl = Duration::from_secs(10);
    /// assert!(LeasedConcurrencyLimiter::new(MemoryStore::new(), "db", 8, ttl).is_ok());
    /// assert!(LeasedConcurrencyLimiter::new(MemoryStore::new(), "db", 0, ttl).is_err());
    /// assert!(LeasedConcurrencyLimiter::new(MemoryStore::new(), "db", 1 << 20, ttl).is_err());
    /// ```
    pub fn new(
        store: S,
        name: impl Into<String>,
        max: u32,
        ttl: Duration,
    ) -> Result<Self, ConfigError> {
        if max == 0 || max > MAX_LEASES {
            let rule = format!("must be from 1 to {MAX_LEASES} (each unit held is one lease)");
            return Err(ConfigError::new("max", max, rule));
        }
        if ttl < Duration::from_millis(3) || ttl > MAX_TTL {
            return Err(ConfigError::new("ttl", ttl, "must be from 3 ms to a day"));
        }
        Ok(Self::build(store, name.into(), max, ttl, DEFAULT_POLL))
    }

    fn build(store: S, name: String, max: u32, ttl: Duration, poll: Duration) -> Self {
        let key = store.lease_key(&name);
        Self {
            shared: Arc::new(LeaseShared {
                name,
                max,
                ttl,
                poll,
                store,
                key,
                held: Mutex::default(),
                recorded: Mutex::default(),
                renewing: AtomicBool::new(false),
                released: ReleaseEvent::new(),
            }),
        }
    }

    /// How long a caller denied for want of a slot waits at most before
    /// asking the store again (default 20 ms). Call it before handing out
    /// clones: the limiter it returns shares nothing with them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::MemoryStore;
    /// use tower_limits::LeasedConcurrencyLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = LeasedConcurrencyLimiter::new(MemoryStore::new(), "db", 8, Duration::from_secs(10))?
    ///     .with_poll_interval(Duration::from_millis(5));
    /// assert_eq!(limiter.max(), 8);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_poll_interval(self, poll: Duration) -> Self
    where
        S: Clone,
    {
        let shared = &self.shared;
        let (store, name) = (shared.store.clone(), shared.name.clone());
        Self::build(store, name, shared.max, shared.ttl, poll)
    }

    /// The most calls at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::MemoryStore;
    /// use tower_limits::LeasedConcurrencyLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = LeasedConcurrencyLimiter::new(MemoryStore::new(), "db", 8, Duration::from_secs(10))?;
    /// assert_eq!(limiter.max(), 8);
    /// # Ok(())
    /// # }
    /// ```
    pub fn max(&self) -> u32 {
        self.shared.max
    }

    /// How many leases this process holds (calls running here).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::MemoryStore;
    /// use tower_limits::{LeasedConcurrencyLimiter, LimiterExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = LeasedConcurrencyLimiter::new(MemoryStore::new(), "db", 8, Duration::from_secs(10))?;
    /// let _running = limiter.acquire_many(3).await?;
    /// assert_eq!(limiter.held_here(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn held_here(&self) -> usize {
        self.shared.held().values().map(|&cost| cost as usize).sum()
    }
}

impl<S: LeaseStore> LeaseShared<S> {
    fn held(&self) -> MutexGuard<'_, HashMap<u64, u32>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the renewal task once, on the caller's runtime.
    fn keep_renewing(self: &Arc<Self>) {
        if self.renewing.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(self);
        spawn_or_warn(
            &self.name,
            "renew leases",
            renew_forever(weak, self.ttl / 3),
        );
    }

    async fn renew_held(&self) {
        let leases: Vec<(u64, u32)> = self.held().iter().map(|(&l, &c)| (l, c)).collect();
        if leases.is_empty() {
            return;
        }
        let units: usize = leases.iter().map(|&(_, cost)| cost as usize).sum();
        match self.store.renew(&self.key, self.ttl, &leases).await {
            Ok(renewed) if renewed < units => tracing::warn!(
                limiter = %self.name, lost = units - renewed,
                "leases expired before renewal: the limit may be exceeded; raise the TTL"
            ),
            Ok(_) => {}
            Err(error) => tracing::warn!(limiter = %self.name, %error, "could not renew leases"),
        }
    }

    /// Takes `cost` leases, even past the limit when `max` says so.
    async fn lease(self: &Arc<Self>, max: u32, cost: u32) -> Result<WindowDecision, LimiterError> {
        self.keep_renewing();
        let lease = fastrand::u64(..);
        let decision = self
            .store
            .lease(&self.key, max, self.ttl, lease, cost)
            .await?;
        if let WindowDecision::Granted { ticket } = decision {
            self.held().insert(ticket, cost);
        }
        Ok(decision)
    }

    fn give_back(self: Arc<Self>, lease: u64) {
        let Some(cost) = self.held().remove(&lease) else {
            return;
        };
        let answer = self.store.release(&self.key, lease, cost).into_ready().ok();
        match answer {
            Some(result) => self.released_lease(result),
            None => {
                let shared = Arc::clone(&self);
                spawn_or_warn(&self.name, "release a lease", async move {
                    let release = || shared.store.release(&shared.key, lease, cost);
                    until_applied(&shared.name, "release a lease before its TTL", release).await;
                    shared.released.notify();
                });
            }
        }
    }

    fn released_lease(&self, result: Result<(), LimiterError>) {
        if let Err(error) = result {
            tracing::warn!(limiter = %self.name, %error, "could not release a lease; it expires with its TTL");
        }
        self.released.notify();
    }
}

async fn renew_forever<S: LeaseStore>(shared: Weak<LeaseShared<S>>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.renew_held().await;
    }
}

impl<S: LeaseStore> Release for LeaseShared<S> {
    fn complete(self: Arc<Self>, lease: u64) {
        self.give_back(lease);
    }
}

impl<S: LeaseStore> Clone for LeasedConcurrencyLimiter<S> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: LeaseStore> Limiter for LeasedConcurrencyLimiter<S> {
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let shared = &self.shared;
        if let Err(error) = CostTooHigh::check(cost, shared.max) {
            return LimiterFuture::ready(Err(error));
        }
        let listener = shared.released.listen();
        LimiterFuture::new(async move {
            Ok(match shared.lease(shared.max, cost).await? {
                WindowDecision::Granted { ticket } => {
                    let release = Arc::clone(shared) as Arc<dyn Release>;
                    Admission::Granted(Permit::new(release, ticket).with_cost(cost))
                }
                WindowDecision::Denied { retry_at } => {
                    let poll_at = Instant::now() + shared.poll;
                    Admission::Denied(Denial::until(retry_at.min(poll_at)).or_released(listener))
                }
            })
        })
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        LimiterFuture::new(async move { Ok(self.peek(1).await?.is_none()) })
    }

    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        let shared = &*self.shared;
        LimiterFuture::new(async move {
            CostTooHigh::check(cost, shared.max)?;
            if let Some(at) = shared.store.paused_until(&shared.key).await? {
                return Ok(Some(Denial::until(at)));
            }
            let held = shared.store.leases_held(&shared.key).await?;
            let fits = held + cost as usize <= shared.max as usize;
            Ok((!fits).then(|| Denial::until(Instant::now() + shared.poll)))
        })
    }

    /// Takes a lease even past the limit; `record_completion` releases it.
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let shared = &self.shared;
        LimiterFuture::new(async move {
            if let WindowDecision::Granted { ticket } = shared.lease(u32::MAX, 1).await? {
                let mut recorded = shared
                    .recorded
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                recorded.push(ticket);
            }
            Ok(())
        })
    }

    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let shared = &self.shared;
        let lease = shared
            .recorded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        if let Some(lease) = lease {
            Arc::clone(shared).give_back(lease);
        }
        LimiterFuture::ready(Ok(()))
    }

    /// The end of a pause; a concurrency limit cannot know when a running
    /// call will finish.
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        let shared = &*self.shared;
        LimiterFuture::new(async move {
            let now = Instant::now();
            Ok(shared
                .store
                .paused_until(&shared.key)
                .await?
                .map_or(now, |at| at.max(now)))
        })
    }

    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.shared.store.pause_leases(&self.shared.key, at)
    }

    /// Drops every lease of every process and the pause.
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let shared = &*self.shared;
        LimiterFuture::new(async move {
            shared.store.clear_leases(&shared.key).await?;
            shared.held().clear();
            shared.released.notify();
            Ok(())
        })
    }

    fn is_in_use(&self) -> bool {
        Arc::strong_count(&self.shared) > 1
    }
}

impl<S: LeaseStore + fmt::Debug> fmt::Debug for LeasedConcurrencyLimiter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeasedConcurrencyLimiter")
            .field("name", &self.shared.name)
            .field("max", &self.shared.max)
            .field("ttl", &self.shared.ttl)
            .field("store", &self.shared.store)
            .finish()
    }
}
