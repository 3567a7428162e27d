//! [`BatchedLimiter`]: a fleet's shared rate, taken from the store in
//! batches and spent locally.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::rate::RateLimiter;
use super::spawn_or_warn;
use crate::error::{ConfigError, CostTooHigh, LimiterError};
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit, ReleaseEvent};
use crate::rate::Rate;
use crate::store::{MemoryStore, Quota, QuotaStore};

/// One rate for a fleet of processes, at millions of admissions a second:
/// each process takes `batch` units of a GCRA quota from the store in one
/// decision (one script call in Redis) and spends them locally, one atomic
/// operation per admission, asking for the next batch in the background
/// when half of it is spent.
///
/// A [`RateLimiter`] asks the store for every call; a `BatchedLimiter`
/// asks once per batch, so the store sees `rate / batch` decisions a second
/// in all, however many calls the fleet makes.
///
/// # What it allows
///
/// The store grants batches at the quota's pace (at most `burst` units at
/// once, then `rate`), so the fleet never *takes* more than the quota. A
/// process spends a batch as fast as its callers ask: in any interval, the
/// fleet admits at most what the quota allows in it, plus up to one batch
/// per process taken before the interval began (`processes × batch`: the
/// bound on the overshoot). A process that stops (a crash, a shutdown) with
/// units in hand has taken them from everyone: the fleet runs below the
/// rate for that much, never above. Pick the batch to match how far ahead
/// a process may run: the default is 1% of a second of the rate.
///
/// Units are not given back: a [refund](Limiter::refund) or a
/// [settle](Limiter::settle) to less leaves them spent, and a pause
/// ([`set_next_available_time`](Limiter::set_next_available_time)) drops
/// the units in hand along with pausing the quota.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::store::MemoryStore;
/// use tower_limits::limiter::Admission;
/// use tower_limits::{BatchedLimiter, Limiter, Rate};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 1,000 a second for the fleet, taken 100 at a time.
/// let store = MemoryStore::new(); // a RedisStore, across processes
/// let limiter = BatchedLimiter::builder(store, "search", Rate::per_second(1_000)?)
///     .batch(100)
///     .build()?;
/// for _ in 0..100 {
///     assert!(matches!(limiter.try_acquire().await?, Admission::Granted(_)));
/// }
/// assert_eq!(limiter.leased(), 100); // one decision in the store
/// # Ok(())
/// # }
/// ```
pub struct BatchedLimiter<S: QuotaStore = MemoryStore> {
    shared: Arc<Batched<S>>,
}

struct Batched<S: QuotaStore> {
    quota: RateLimiter<S>,
    batch: u32,
    /// Units taken from the store and not spent yet.
    tokens: AtomicU64,
    /// Whether a batch is being asked for.
    fetching: AtomicBool,
    /// Fired when a batch comes back (or the store said no).
    arrived: ReleaseEvent,
    /// Not before this may a batch be asked for again, in nanoseconds from
    /// `base` (the store's answer to the last one, or a pause).
    not_before: AtomicU64,
    /// Units taken from the store in all.
    leased: AtomicU64,
    base: Instant,
}

impl BatchedLimiter {
    /// Starts building a limiter of `rate` for the fleet, shared under
    /// `name` in `store`.
    ///
    /// ```
    /// use tower_limits::store::MemoryStore;
    /// use tower_limits::{BatchedLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = BatchedLimiter::builder(MemoryStore::new(), "api", Rate::per_second(10_000)?).build()?;
    /// assert_eq!(limiter.batch(), 100); // 1% of a second of the rate
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder<S: QuotaStore>(
        store: S,
        name: impl Into<String>,
        rate: Rate,
    ) -> BatchedLimiterBuilder<S> {
        BatchedLimiterBuilder {
            store,
            name: name.into(),
            rate,
            batch: None,
            burst: None,
        }
    }
}

impl<S: QuotaStore> BatchedLimiter<S> {
    /// How many units a process takes from the store at once.
    ///
    /// ```
    /// use tower_limits::store::MemoryStore;
    /// use tower_limits::{BatchedLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = BatchedLimiter::builder(MemoryStore::new(), "api", Rate::per_second(50)?)
    ///     .batch(5)
    ///     .build()?;
    /// assert_eq!(limiter.batch(), 5);
    /// # Ok(())
    /// # }
    /// ```
    pub fn batch(&self) -> u32 {
        self.shared.batch
    }

    /// Units this process has taken from the store, in all.
    ///
    /// ```
    /// use tower_limits::store::MemoryStore;
    /// use tower_limits::{BatchedLimiter, LimiterExt, Rate};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = BatchedLimiter::builder(MemoryStore::new(), "api", Rate::per_second(100)?)
    ///     .batch(10)
    ///     .build()?;
    /// assert_eq!(limiter.leased(), 0);
    /// drop(limiter.acquire().await?);
    /// assert_eq!(limiter.leased(), 10);
    /// # Ok(())
    /// # }
    /// ```
    pub fn leased(&self) -> u64 {
        self.shared.leased.load(Ordering::Relaxed)
    }

    /// Units this process holds and has not spent.
    ///
    /// ```
    /// use tower_limits::store::MemoryStore;
    /// use tower_limits::{BatchedLimiter, LimiterExt, Rate};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = BatchedLimiter::builder(MemoryStore::new(), "api", Rate::per_second(100)?)
    ///     .batch(10)
    ///     .build()?;
    /// drop(limiter.acquire().await?);
    /// assert_eq!(limiter.available(), 9);
    /// # Ok(())
    /// # }
    /// ```
    pub fn available(&self) -> u64 {
        self.shared.tokens.load(Ordering::Relaxed)
    }
}

impl<S: QuotaStore> Batched<S> {
    /// Spends `cost` units in hand, if there are that many.
    #[inline]
    fn take(&self, cost: u32) -> bool {
        let cost = u64::from(cost);
        self.tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tokens| {
                tokens.checked_sub(cost)
            })
            .is_ok()
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    fn not_before(&self) -> Option<Instant> {
        let nanos = self.not_before.load(Ordering::Relaxed);
        let at = self.base + Duration::from_nanos(nanos);
        (at > Instant::now()).then_some(at)
    }

    /// Asks the store for a batch (if nobody else is); true if this caller
    /// asked. Wakes whoever waits for it when the answer comes.
    async fn fetch(&self) -> Result<bool, LimiterError> {
        if self.not_before().is_some()
            || self
                .fetching
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return Ok(false);
        }
        let answer = self.quota.try_acquire_many(self.batch).await;
        match &answer {
            Ok(Admission::Granted(_)) => {
                let batch = u64::from(self.batch);
                self.tokens.fetch_add(batch, Ordering::AcqRel);
                self.leased.fetch_add(batch, Ordering::Relaxed);
            }
            Ok(Admission::Denied(denial)) => {
                let at = denial.retry_at().unwrap_or_else(Instant::now);
                self.not_before.fetch_max(self.nanos(at), Ordering::Relaxed);
            }
            Err(_) => {}
        }
        self.fetching.store(false, Ordering::Release);
        self.arrived.notify();
        answer.map(|_| true)
    }

    /// Asks for the next batch in the background once half of this one is
    /// spent, so that callers rarely wait for the store.
    fn prefetch(self: &Arc<Self>) {
        let low = self.tokens.load(Ordering::Relaxed) < u64::from(self.batch / 2 + 1);
        if low && !self.fetching.load(Ordering::Relaxed) && self.not_before().is_none() {
            let shared = Arc::clone(self);
            spawn_or_warn("batched", "take the next batch", async move {
                if let Err(error) = shared.fetch().await {
                    tracing::warn!(%error, "could not take a batch from the store");
                }
            });
        }
    }

    /// Spends `cost` units, taking a batch from the store first if needed.
    async fn admit(self: &Arc<Self>, cost: u32) -> Result<Admission, LimiterError> {
        loop {
            if self.take(cost) {
                self.prefetch();
                return Ok(Admission::Granted(Permit::unit().with_cost(cost)));
            }
            let arrived = self.arrived.listen();
            if let Some(at) = self.not_before() {
                return Ok(Admission::Denied(Denial::until(at).or_released(arrived)));
            }
            if !self.fetch().await? {
                // Another caller is asking: its batch wakes this one.
                return Ok(Admission::Denied(Denial::until_released(arrived)));
            }
        }
    }
}

impl<S: QuotaStore> Clone for BatchedLimiter<S> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: QuotaStore> Limiter for BatchedLimiter<S> {
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let shared = &self.shared;
        if let Err(error) = CostTooHigh::check(cost, shared.batch) {
            return LimiterFuture::ready(Err(error));
        }
        if shared.take(cost) {
            shared.prefetch();
            return LimiterFuture::ready(Ok(Admission::Granted(Permit::unit().with_cost(cost))));
        }
        LimiterFuture::new(async move { shared.admit(cost).await })
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        let shared = &*self.shared;
        if shared.tokens.load(Ordering::Relaxed) > 0 {
            return LimiterFuture::ready(Ok(true));
        }
        LimiterFuture::new(async move {
            Ok(shared.not_before().is_none() && shared.quota.peek(shared.batch).await?.is_none())
        })
    }

    /// `None` if `cost` units are in hand, or a batch could be taken now.
    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        let shared = &*self.shared;
        if let Err(error) = CostTooHigh::check(cost, shared.batch) {
            return LimiterFuture::ready(Err(error));
        }
        if shared.tokens.load(Ordering::Relaxed) >= u64::from(cost) {
            return LimiterFuture::ready(Ok(None));
        }
        LimiterFuture::new(async move {
            if let Some(at) = shared.not_before() {
                return Ok(Some(Denial::until(at)));
            }
            shared.quota.peek(shared.batch).await
        })
    }

    /// Spends a unit in hand, or takes one from the store even past the
    /// quota.
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        if self.shared.take(1) {
            return LimiterFuture::ready(Ok(()));
        }
        self.shared.quota.record_start()
    }

    /// Nothing to do: only starts count.
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }

    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        let shared = &*self.shared;
        LimiterFuture::new(async move {
            let now = Instant::now();
            if shared.tokens.load(Ordering::Relaxed) > 0 {
                return Ok(now);
            }
            let store = shared.quota.peek(shared.batch).await?;
            let at = store.and_then(|denial| denial.retry_at()).unwrap_or(now);
            Ok(shared.not_before().map_or(at, |pause| pause.max(at)))
        })
    }

    /// Pauses the fleet (the store's quota) and drops the units in hand.
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let shared = &*self.shared;
        shared.tokens.store(0, Ordering::Release);
        shared
            .not_before
            .fetch_max(shared.nanos(at), Ordering::Relaxed);
        shared.quota.set_next_available_time(at)
    }

    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let shared = &*self.shared;
        shared.tokens.store(0, Ordering::Release);
        shared.not_before.store(0, Ordering::Relaxed);
        LimiterFuture::new(async move {
            shared.quota.clear().await?;
            shared.arrived.notify();
            Ok(())
        })
    }

    fn is_in_use(&self) -> bool {
        Arc::strong_count(&self.shared) > 1
    }
}

impl<S: QuotaStore> fmt::Debug for BatchedLimiter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchedLimiter")
            .field("name", &self.shared.quota.name())
            .field("batch", &self.shared.batch)
            .field("available", &self.available())
            .field("leased", &self.leased())
            .finish()
    }
}

/// Configures a [`BatchedLimiter`]; made by [`BatchedLimiter::builder`].
///
/// ```
/// use tower_limits::store::MemoryStore;
/// use tower_limits::{BatchedLimiter, Rate};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = BatchedLimiter::builder(MemoryStore::new(), "api", Rate::per_second(1_000_000)?)
///     .batch(10_000)
///     .burst(40_000)
///     .build()?;
/// assert_eq!(limiter.batch(), 10_000);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "call `build` to get the limiter"]
pub struct BatchedLimiterBuilder<S> {
    store: S,
    name: String,
    rate: Rate,
    batch: Option<u32>,
    burst: Option<u32>,
}

impl<S: QuotaStore> BatchedLimiterBuilder<S> {
    /// Units a process takes at once (default: 1% of a second of the rate,
    /// at least 1): the most it can run ahead of the fleet's rate.
    ///
    /// ```
    /// use tower_limits::store::MemoryStore;
    /// use tower_limits::{BatchedLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let builder = BatchedLimiter::builder(MemoryStore::new(), "api", Rate::per_second(100)?).batch(20);
    /// # let _ = builder;
    /// # Ok(())
    /// # }
    /// ```
    pub fn batch(mut self, batch: u32) -> Self {
        self.batch = Some(batch);
        self
    }

    /// Units the store grants at once after a quiet spell (default: four
    /// batches, so four processes can each hold one); at least one batch.
    ///
    /// ```
    /// use tower_limits::store::MemoryStore;
    /// use tower_limits::{BatchedLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let builder = BatchedLimiter::builder(MemoryStore::new(), "api", Rate::per_second(100)?).burst(50);
    /// # let _ = builder;
    /// # Ok(())
    /// # }
    /// ```
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Builds the limiter.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the field if `batch` is 0, `burst` is below
    /// `batch`, or the quota is not one a store can keep (see
    /// [`Quota::gcra`]).
    ///
    /// ```
    /// use tower_limits::store::MemoryStore;
    /// use tower_limits::{BatchedLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let error = BatchedLimiter::builder(MemoryStore::new(), "api", Rate::per_second(100)?)
    ///     .batch(10)
    ///     .burst(5)
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(error.field(), "burst");
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<BatchedLimiter<S>, ConfigError> {
        let hundredth = self.rate.as_per_second_f64() / 100.0;
        let batch = self
            .batch
            .unwrap_or_else(|| hundredth.clamp(1.0, f64::from(u32::MAX)) as u32);
        if batch == 0 {
            return Err(ConfigError::new("batch", batch, "must be at least 1"));
        }
        let burst = self.burst.unwrap_or_else(|| batch.saturating_mul(4));
        if burst < batch {
            let rule = "must be at least `batch`: a batch is taken at once";
            return Err(ConfigError::new("burst", burst, rule));
        }
        let quota = Quota::gcra(self.rate.count(), self.rate.per())?.with_burst(burst)?;
        Ok(BatchedLimiter {
            shared: Arc::new(Batched {
                quota: RateLimiter::new(self.store, self.name, quota),
                batch,
                tokens: AtomicU64::new(0),
                fetching: AtomicBool::new(false),
                arrived: ReleaseEvent::new(),
                not_before: AtomicU64::new(0),
                leased: AtomicU64::new(0),
                base: Instant::now(),
            }),
        })
    }
}
