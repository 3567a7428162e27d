//! [`Failover`]: what a store-backed limiter does while its store is down.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::time::Instant;

use crate::error::LimiterError;
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit};
use crate::limiters::strategies::NullLimiter;
use crate::quota_status::QuotaStatus;
use crate::store::is_outage;

/// What a [`Failover`] does while its store cannot answer (a
/// [`StoreError`](crate::store::StoreError): unreachable, timed out, or a
/// reply that is not a decision).
///
/// ```
/// use std::time::Duration;
/// use tower_limits::{OutagePolicy, RateLimiter};
/// use tower_limits::store::Quota;
///
/// # fn main() -> Result<(), tower_limits::error::ConfigError> {
/// // While the store is down, hold this process to 10 a second.
/// let policy = OutagePolicy::Fallback(RateLimiter::in_memory(Quota::gcra(10, Duration::from_secs(1))?));
/// # let _ = policy;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub enum OutagePolicy<F = NullLimiter> {
    /// Nobody passes: every decision fails with the store's error. For
    /// limits that prevent bans or runaway cost.
    FailClosed,
    /// Everybody passes, counted ([`Failover::admitted_during_outage`]) and
    /// logged. For soft limits where throughput matters more.
    FailOpen,
    /// This in-memory limiter decides until the store answers again. Size
    /// it as this process's share of the limit.
    Fallback(F),
}

/// A store-backed limiter with an [`OutagePolicy`].
///
/// Every decision first goes to the store; if it fails with a
/// [`StoreError`](crate::store::StoreError), the policy decides instead. The
/// next call tries the store again, so the limiter recovers as soon as the
/// store answers (the store reconnects by itself). Other errors (a cost too
/// high) pass through unchanged. Going down and coming back are logged
/// once each, at `warn` and `info`.
///
/// A permit granted by the fallback is released by the fallback; a refund
/// of it gives nothing back (the store never recorded it).
///
/// ```
/// use std::time::Duration;
/// use tower_limits::store::{MemoryStore, Quota};
/// use tower_limits::{Failover, Limiter, LimiterExt, OutagePolicy, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let quota = Quota::gcra(100, Duration::from_secs(1))?;
/// let shared = RateLimiter::new(MemoryStore::new(), "search", quota);
/// let local = RateLimiter::in_memory(Quota::gcra(25, Duration::from_secs(1))?);
/// let limiter = Failover::new(shared, OutagePolicy::Fallback(local));
/// drop(limiter.acquire().await?); // the store answered
/// assert_eq!(limiter.outages(), 0);
/// # Ok(())
/// # }
/// ```
pub struct Failover<L, F = NullLimiter> {
    inner: Arc<Inner<L, F>>,
}

struct Inner<L, F> {
    primary: L,
    policy: OutagePolicy<F>,
    down: AtomicBool,
    outages: AtomicU64,
    admitted_open: AtomicU64,
}

impl<L: Limiter> Failover<L> {
    /// Fails closed: while the store is down, every decision is an error.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota};
    /// use tower_limits::{Failover, RateLimiter};
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let quota = Quota::gcra(100, Duration::from_secs(1))?;
    /// let limiter = Failover::fail_closed(RateLimiter::new(MemoryStore::new(), "a", quota));
    /// assert!(!limiter.is_down());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fail_closed(primary: L) -> Self {
        Self::new(primary, OutagePolicy::FailClosed)
    }

    /// Fails open: while the store is down, every call is admitted.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota};
    /// use tower_limits::{Failover, RateLimiter};
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let quota = Quota::gcra(100, Duration::from_secs(1))?;
    /// let limiter = Failover::fail_open(RateLimiter::new(MemoryStore::new(), "a", quota));
    /// assert_eq!(limiter.admitted_during_outage(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn fail_open(primary: L) -> Self {
        Self::new(primary, OutagePolicy::FailOpen)
    }
}

impl<L: Limiter, F: Limiter> Failover<L, F> {
    /// `primary` under `policy`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota};
    /// use tower_limits::{Failover, OutagePolicy, RateLimiter};
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let quota = Quota::gcra(100, Duration::from_secs(1))?;
    /// let primary = RateLimiter::new(MemoryStore::new(), "a", quota);
    /// let fallback = RateLimiter::in_memory(Quota::gcra(20, Duration::from_secs(1))?);
    /// let limiter = Failover::new(primary, OutagePolicy::Fallback(fallback));
    /// # let _ = limiter;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(primary: L, policy: OutagePolicy<F>) -> Self {
        Self {
            inner: Arc::new(Inner {
                primary,
                policy,
                down: AtomicBool::new(false),
                outages: AtomicU64::new(0),
                admitted_open: AtomicU64::new(0),
            }),
        }
    }

    /// The limiter the store backs.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota};
    /// use tower_limits::{Failover, RateLimiter};
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let quota = Quota::gcra(100, Duration::from_secs(1))?;
    /// let limiter = Failover::fail_open(RateLimiter::new(MemoryStore::new(), "a", quota));
    /// assert_eq!(limiter.primary().name(), "a");
    /// # Ok(())
    /// # }
    /// ```
    pub fn primary(&self) -> &L {
        &self.inner.primary
    }

    /// Whether the last store call failed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota};
    /// use tower_limits::{Failover, RateLimiter};
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let quota = Quota::gcra(100, Duration::from_secs(1))?;
    /// let limiter = Failover::fail_closed(RateLimiter::new(MemoryStore::new(), "a", quota));
    /// assert!(!limiter.is_down());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_down(&self) -> bool {
        self.inner.down.load(Ordering::Acquire)
    }

    /// How many store calls have failed so far.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota};
    /// use tower_limits::{Failover, RateLimiter};
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let quota = Quota::gcra(100, Duration::from_secs(1))?;
    /// let limiter = Failover::fail_closed(RateLimiter::new(MemoryStore::new(), "a", quota));
    /// assert_eq!(limiter.outages(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn outages(&self) -> u64 {
        self.inner.outages.load(Ordering::Relaxed)
    }

    /// How many calls [`OutagePolicy::FailOpen`] admitted without the store.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota};
    /// use tower_limits::{Failover, RateLimiter};
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let quota = Quota::gcra(100, Duration::from_secs(1))?;
    /// let limiter = Failover::fail_open(RateLimiter::new(MemoryStore::new(), "a", quota));
    /// assert_eq!(limiter.admitted_during_outage(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn admitted_during_outage(&self) -> u64 {
        self.inner.admitted_open.load(Ordering::Relaxed)
    }
}

impl<L: Limiter, F: Limiter> Inner<L, F> {
    /// Runs `primary`; on an outage, answers with `open` (fail open) or
    /// `fallback` (fallback), or the error (fail closed).
    fn guarded<'a, T: Send + 'a>(
        &'a self,
        primary: LimiterFuture<'a, Result<T, LimiterError>>,
        open: impl FnOnce() -> T + Send + 'a,
        fallback: impl FnOnce(&'a F) -> LimiterFuture<'a, Result<T, LimiterError>> + Send + 'a,
    ) -> LimiterFuture<'a, Result<T, LimiterError>> {
        LimiterFuture::new(async move {
            let error = match primary.await {
                Ok(answer) => {
                    self.store_answered();
                    return Ok(answer);
                }
                Err(error) if is_outage(&error) => error,
                Err(error) => return Err(error),
            };
            self.store_failed(&error);
            match &self.policy {
                OutagePolicy::FailClosed => Err(error),
                OutagePolicy::FailOpen => Ok(open()),
                OutagePolicy::Fallback(limiter) => fallback(limiter).await,
            }
        })
    }

    fn store_answered(&self) {
        if self.down.swap(false, Ordering::AcqRel) {
            tracing::info!(
                outages = self.outages.load(Ordering::Relaxed),
                admitted_open = self.admitted_open.load(Ordering::Relaxed),
                "limiter store answers again"
            );
        }
    }

    fn store_failed(&self, error: &LimiterError) {
        self.outages.fetch_add(1, Ordering::Relaxed);
        if !self.down.swap(true, Ordering::AcqRel) {
            let policy = match self.policy {
                OutagePolicy::FailClosed => "failing closed",
                OutagePolicy::FailOpen => "failing open",
                OutagePolicy::Fallback(_) => "falling back to the local limiter",
            };
            tracing::warn!(%error, "limiter store is down: {policy} until it answers");
        }
    }

    fn admit_open(&self, cost: u32) -> Admission {
        let admitted = self.admitted_open.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::debug!(admitted, "admitted without the store (fail open)");
        Admission::Granted(Permit::unit().with_cost(cost))
    }
}

/// A fallback's grant, wrapped so that its refund and settlement go to the
/// fallback, never to the store.
fn from_fallback(admission: Admission) -> Admission {
    match admission {
        Admission::Granted(permit) => Admission::Granted(Permit::wrap(permit)),
        denied => denied,
    }
}

impl<L, F> Clone for Failover<L, F> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<L: Limiter, F: Limiter> Limiter for Failover<L, F> {
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let inner = &*self.inner;
        inner.guarded(
            inner.primary.try_acquire_many(cost),
            move || inner.admit_open(cost),
            move |fallback| {
                LimiterFuture::new(async move {
                    fallback.try_acquire_many(cost).await.map(from_fallback)
                })
            },
        )
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        let inner = &*self.inner;
        inner.guarded(inner.primary.can_proceed(), || true, |f| f.can_proceed())
    }

    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        let inner = &*self.inner;
        inner.guarded(inner.primary.peek(cost), || None, move |f| f.peek(cost))
    }

    /// The store's status; while it is down, the fallback's, or none when
    /// failing open.
    fn quota_status(&self) -> LimiterFuture<'_, Result<Option<QuotaStatus>, LimiterError>> {
        let inner = &*self.inner;
        inner.guarded(inner.primary.quota_status(), || None, |f| f.quota_status())
    }

    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let inner = &*self.inner;
        inner.guarded(inner.primary.record_start(), || (), |f| f.record_start())
    }

    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let inner = &*self.inner;
        inner.guarded(
            inner.primary.record_completion(),
            || (),
            |f| f.record_completion(),
        )
    }

    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        let inner = &*self.inner;
        let primary = inner.primary.next_available_time();
        inner.guarded(primary, Instant::now, |f| f.next_available_time())
    }

    /// Pauses the fallback too, so that a pause holds during an outage.
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let inner = &*self.inner;
        let primary = inner.primary.set_next_available_time(at);
        inner
            .guarded(primary, || (), move |_| LimiterFuture::ready(Ok(())))
            .and_also(inner.fallback().map(|f| f.set_next_available_time(at)))
    }

    /// Clears the fallback too.
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let inner = &*self.inner;
        let primary = inner.guarded(
            inner.primary.clear(),
            || (),
            |_| LimiterFuture::ready(Ok(())),
        );
        primary.and_also(inner.fallback().map(Limiter::clear))
    }

    /// Refunds a grant to the limiter that made it: the store's to the
    /// store, the fallback's to the fallback. A fail-open grant holds
    /// nothing to give back.
    fn refund(&self, permit: Permit) {
        match permit.unwrap_wrapped() {
            Ok(granted) => self.inner.fallback().map_or((), |f| f.refund(granted)),
            Err(permit) => self.inner.primary.refund(permit),
        }
    }

    /// Settles a grant with the limiter that made it (see
    /// [`refund`](Self::refund)); a fail-open grant charges nothing.
    fn settle(&self, permit: &mut Permit, actual: u32) {
        let Some(granted) = permit.wrapped_mut() else {
            return self.inner.primary.settle(permit, actual);
        };
        if let Some(fallback) = self.inner.fallback() {
            fallback.settle(granted, actual);
        }
        let cost = granted.cost();
        permit.settled(cost, None);
    }

    fn is_in_use(&self) -> bool {
        let fallback_in_use = self.inner.fallback().is_some_and(Limiter::is_in_use);
        Arc::strong_count(&self.inner) > 1 || fallback_in_use || self.inner.primary.is_in_use()
    }

    /// The calls running on the store's grants and on the fallback's
    /// together (both may run after an outage); `None` if neither counts
    /// them.
    fn in_flight(&self) -> Option<u64> {
        let fallback = self.inner.fallback().and_then(Limiter::in_flight);
        match (self.inner.primary.in_flight(), fallback) {
            (None, None) => None,
            (primary, fallback) => Some(primary.unwrap_or(0).saturating_add(fallback.unwrap_or(0))),
        }
    }
}

impl<L, F> Inner<L, F> {
    fn fallback(&self) -> Option<&F> {
        match &self.policy {
            OutagePolicy::Fallback(limiter) => Some(limiter),
            _ => None,
        }
    }
}

/// Runs a second, optional step after a first one.
trait AndAlso<'a> {
    fn and_also(self, then: Option<LimiterFuture<'a, Result<(), LimiterError>>>) -> Self;
}

impl<'a> AndAlso<'a> for LimiterFuture<'a, Result<(), LimiterError>> {
    fn and_also(self, then: Option<LimiterFuture<'a, Result<(), LimiterError>>>) -> Self {
        let Some(then) = then else {
            return self;
        };
        LimiterFuture::new(async move {
            let first = self.await;
            then.await?;
            first
        })
    }
}

impl<L: fmt::Debug, F: fmt::Debug> fmt::Debug for Failover<L, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Failover")
            .field("primary", &self.inner.primary)
            .field("policy", &self.inner.policy)
            .field("down", &self.inner.down)
            .field("outages", &self.inner.outages)
            .finish()
    }
}
