//! [`SharedLimiter`]: a [`Quota`] decided in a [`QuotaStore`], so that every
//! process using the same store and name shares one limit.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use tokio::time::Instant;

use crate::error::{CostTooHigh, LimiterError};
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit, ReleaseEvent};
use crate::quota_status::QuotaStatus;
use crate::store::late::until_applied;
use crate::store::{MemoryStore, Quota, QuotaStore, WindowDecision};

/// A GCRA, token bucket, fixed window or sliding window counter limit kept
/// in a store: the limit holds across every limiter with the same name on
/// the same store, in this process or another.
///
/// Each admission is one atomic [`QuotaStore::decide`] (one Lua script in
/// Redis). A denied caller waits for the instant the store named, or until
/// a refund in this process gives units back. Clones share the limiter.
///
/// On a [`MemoryStore`] it behaves as the in-memory limiter of its quota;
#[cfg_attr(
    feature = "redis",
    doc = "with [`RedisStore`](crate::store::RedisStore) (feature `redis`) it is"
)]
#[cfg_attr(
    not(feature = "redis"),
    doc = "with `RedisStore` (feature `redis`) it is"
)]
/// shared by processes. Wrap it in a [`Failover`](crate::Failover) to choose
/// what happens while the store is down.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::store::{MemoryStore, Quota};
/// use tower_limits::{Limiter, LimiterExt, SharedLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let quota = Quota::token_bucket(2, 1, Duration::from_secs(1))?;
/// let worker_a = SharedLimiter::new(store.clone(), "search-api", quota);
/// let worker_b = SharedLimiter::new(store, "search-api", quota);
///
/// drop(worker_a.acquire_many(2).await?); // empties the shared bucket
/// assert!(!worker_b.can_proceed().await?);
/// # Ok(())
/// # }
/// ```
pub struct SharedLimiter<S: QuotaStore = MemoryStore> {
    shared: Arc<Shared<S>>,
}

struct Shared<S: QuotaStore> {
    name: String,
    quota: RwLock<Quota>,
    store: S,
    key: S::QuotaKey,
    /// Fired when a refund or `clear` in this process gives units back.
    released: ReleaseEvent,
}

impl<S: QuotaStore> SharedLimiter<S> {
    /// A limiter enforcing `quota` under `name` in `store`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota};
    /// use tower_limits::SharedLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let quota = Quota::gcra(100, Duration::from_secs(1))?;
    /// let limiter = SharedLimiter::new(MemoryStore::new(), "geocoder", quota);
    /// assert_eq!(limiter.name(), "geocoder");
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(store: S, name: impl Into<String>, quota: Quota) -> Self {
        let name = name.into();
        let key = store.quota_key(&name);
        Self {
            shared: Arc::new(Shared {
                name,
                quota: RwLock::new(quota),
                store,
                key,
                released: ReleaseEvent::new(),
            }),
        }
    }

    /// The name the limit is shared under.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota};
    /// use tower_limits::SharedLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let quota = Quota::fixed_window(10, Duration::from_secs(1))?;
    /// assert_eq!(SharedLimiter::new(MemoryStore::new(), "a", quota).name(), "a");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The quota it enforces.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota};
    /// use tower_limits::SharedLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let quota = Quota::fixed_window(10, Duration::from_secs(1))?;
    /// assert_eq!(SharedLimiter::new(MemoryStore::new(), "a", quota).quota(), quota);
    /// # Ok(())
    /// # }
    /// ```
    pub fn quota(&self) -> Quota {
        self.shared.quota()
    }

    /// Enforces `quota` from the next decision on, in this process. A new
    /// rate or burst for a GCRA or token bucket quota keeps what was spent
    /// (the store's TAT: calls already admitted still count); a quota of
    /// another algorithm or window starts afresh. Every process sharing the
    /// name should change together
    /// ([`AdaptiveRateLimiter::build_shared`](crate::limiters::AdaptiveRateLimiterBuilder::build_shared)
    /// does this as it learns the rate).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota};
    /// use tower_limits::{Limiter, SharedLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let slow = Quota::gcra(1, Duration::from_secs(1))?;
    /// let limiter = SharedLimiter::new(MemoryStore::new(), "a", slow);
    /// let fast = Quota::gcra(10, Duration::from_secs(1))?.with_burst(10)?;
    /// limiter.set_quota(fast);
    /// assert_eq!(limiter.quota(), fast);
    /// for _ in 0..10 {
    ///     limiter.record_start().await?;
    /// }
    /// assert!(!limiter.can_proceed().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        *self
            .shared
            .quota
            .write()
            .unwrap_or_else(PoisonError::into_inner) = quota;
    }

    /// The store it decides in.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota, QuotaStore};
    /// use tower_limits::{Limiter, SharedLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let quota = Quota::gcra(1, Duration::from_secs(60))?;
    /// let limiter = SharedLimiter::new(MemoryStore::new(), "a", quota);
    /// limiter.record_start().await?;
    /// let store = limiter.store();
    /// assert!(store.look(&store.quota_key("a"), &quota, 1).await?.is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn store(&self) -> &S {
        &self.shared.store
    }
}

impl<S: QuotaStore> Shared<S> {
    fn quota(&self) -> Quota {
        *self.quota.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The quota in force, if it admits `cost` at all.
    fn check(&self, cost: u32) -> Result<Quota, LimiterError> {
        let quota = self.quota();
        CostTooHigh::check(cost, quota.capacity())?;
        Ok(quota)
    }

    /// Adjusts a grant now if the store answers at once, else in a task.
    /// Gives the grant's new ticket when known.
    fn adjust(self: &Arc<Self>, ticket: u64, from: u32, to: u32) -> Option<u64> {
        let quota = self.quota();
        let adjusting = self.store.adjust(&self.key, &quota, ticket, from, to);
        match adjusting.into_ready() {
            Ok(result) => self.adjusted(result).flatten(),
            Err(_unpolled) => {
                let shared = Arc::clone(self);
                spawn_or_warn(&self.name, "adjust a grant", async move {
                    let adjust = || shared.store.adjust(&shared.key, &quota, ticket, from, to);
                    if until_applied(&shared.name, "adjust a grant", adjust)
                        .await
                        .is_some()
                    {
                        shared.released.notify();
                    }
                });
                None
            }
        }
    }

    fn adjusted(&self, result: Result<Option<u64>, LimiterError>) -> Option<Option<u64>> {
        match result {
            Ok(ticket) => {
                self.released.notify();
                Some(ticket)
            }
            Err(error) => {
                tracing::warn!(limiter = %self.name, %error, "could not adjust a grant");
                None
            }
        }
    }
}

/// Runs `task` on the current tokio runtime; without one, logs that `what`
/// could not be done for the limiter `name` (a permit dropped outside a
/// runtime).
pub(crate) fn spawn_or_warn(
    name: &str,
    what: &'static str,
    task: impl std::future::Future<Output = ()> + Send + 'static,
) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn(task)),
        Err(_) => tracing::warn!(limiter = %name, "no tokio runtime to {what} in the store"),
    }
}

impl<S: QuotaStore> Clone for SharedLimiter<S> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: QuotaStore> Limiter for SharedLimiter<S> {
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let shared = &*self.shared;
        let quota = match shared.check(cost) {
            Ok(quota) => quota,
            Err(error) => return LimiterFuture::ready(Err(error)),
        };
        // Listen before deciding, so a refund in between is not missed.
        let listener = shared.released.listen();
        LimiterFuture::new(async move {
            Ok(
                match shared.store.decide(&shared.key, &quota, cost).await? {
                    WindowDecision::Granted { ticket } => {
                        Admission::Granted(Permit::with_token(ticket).with_cost(cost))
                    }
                    WindowDecision::Denied { retry_at } => {
                        Admission::Denied(Denial::until(retry_at).or_released(listener))
                    }
                },
            )
        })
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        let shared = &*self.shared;
        LimiterFuture::new(async move {
            let quota = shared.quota();
            Ok(shared.store.look(&shared.key, &quota, 1).await?.is_none())
        })
    }

    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        let shared = &*self.shared;
        LimiterFuture::new(async move {
            let quota = shared.check(cost)?;
            let blocked = shared.store.look(&shared.key, &quota, cost).await?;
            Ok(blocked.map(Denial::until))
        })
    }

    /// The quota's limit and window, and where it stands: one
    /// [`QuotaStore::quota_status`].
    fn quota_status(&self) -> LimiterFuture<'_, Result<Option<QuotaStatus>, LimiterError>> {
        let shared = &*self.shared;
        LimiterFuture::new(async move {
            let quota = shared.quota();
            Ok(Some(shared.store.quota_status(&shared.key, &quota).await?))
        })
    }

    /// Takes one unit even if the quota has none.
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let shared = &*self.shared;
        LimiterFuture::new(async move { shared.store.take(&shared.key, &shared.quota()).await })
    }

    /// Nothing to do: only starts count.
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }

    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        let shared = &*self.shared;
        LimiterFuture::new(async move {
            let now = Instant::now();
            let blocked = shared.store.look(&shared.key, &shared.quota(), 1).await?;
            Ok(blocked.map_or(now, |at| at.max(now)))
        })
    }

    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let shared = &*self.shared;
        LimiterFuture::new(
            async move { shared.store.pause(&shared.key, &shared.quota(), at).await },
        )
    }

    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let shared = &*self.shared;
        LimiterFuture::new(async move {
            shared.store.reset(&shared.key, &shared.quota()).await?;
            shared.released.notify();
            Ok(())
        })
    }

    /// Gives the units back where the quota's algorithm allows: a window
    /// grant's while its window counts, a GCRA or token bucket grant's time
    /// still ahead of now, whatever was granted since (see
    /// [`QuotaStore::adjust`]); in a task if the store is remote.
    fn refund(&self, permit: Permit) {
        if let (Some(ticket), cost) = permit.disarm() {
            self.shared.adjust(ticket, cost, 0);
        }
    }

    /// Charges or gives back the difference, up to the quota's capacity.
    /// With a store that answers in a task (Redis, PostgreSQL, SQLite), a
    /// GCRA or token bucket permit cannot learn its grant's new ticket: a
    /// later refund or settle of the same permit gives nothing back (never
    /// more admitted, only fewer units returned).
    fn settle(&self, permit: &mut Permit, actual: u32) {
        let (Some(ticket), from) = (permit.token(), permit.cost()) else {
            return;
        };
        let actual = actual.min(self.shared.quota().capacity());
        if from != actual {
            match self.shared.adjust(ticket, from, actual) {
                // A window grant's ticket (its window) stands; a GCRA
                // grant's (its slot's end) moved where the permit cannot
                // learn it.
                None if self.quota().kind().is_cells() => permit.settled_for_good(actual),
                ticket => permit.settled(actual, ticket),
            }
        }
    }

    fn is_in_use(&self) -> bool {
        Arc::strong_count(&self.shared) > 1
    }
}

impl<S: QuotaStore + fmt::Debug> fmt::Debug for SharedLimiter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedLimiter")
            .field("name", &self.shared.name)
            .field("quota", &self.shared.quota())
            .field("store", &self.shared.store)
            .finish()
    }
}
