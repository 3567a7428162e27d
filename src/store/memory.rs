//! [`MemoryStore`]: sliding windows in this process's memory.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::{RateLimiterStore, WindowDecision, WindowPolicy};
use crate::algorithms::sliding_log::Pause;
use crate::clock::{Clock, duration_nanos};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::quota_status::{QuotaStatus, search};
use crate::start_log::StartLog;

/// Keeps sliding windows in memory: fast, one process only.
///
/// Clones share the same windows. A window keeps one entry per instant at
/// which calls started, with how many units started then (a call's cost
/// is a number, never a run of entries), and drops entries as they leave
/// the window: memory per named limit is bounded by the starts within one
/// window, and a decision's work by the entries that leave for it.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::clock::Clock;
/// use tower_limits::{store::MemoryStore, Limiter, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new().with_clock(Clock::fast());
/// let limiter = RateLimiter::builder("emails", 100, Duration::from_secs(60))
///     .store(store)
///     .build()?;
/// assert!(limiter.can_proceed().await?);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    clock: Clock,
    windows: Mutex<HashMap<String, MemoryKey>>,
    quotas: Mutex<HashMap<String, super::memory_quota::MemoryQuotaKey>>,
    leases: Mutex<HashMap<String, super::memory_lease::MemoryLeaseKey>>,
    curves: Mutex<HashMap<String, super::memory_curve::MemoryCurveKey>>,
}

/// A named window in a [`MemoryStore`], made by
/// [`RateLimiterStore::key`]. Keys for the same name refer to the same window.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::RateLimiter;
/// use tower_limits::store::{MemoryKey, MemoryStore, RateLimiterStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(60)).build()?;
/// let policy = limiter.policy();
/// let store = MemoryStore::new();
///
/// let first: MemoryKey = store.key("api");
/// let again: MemoryKey = store.key("api");
/// store.record_execution(&first, policy, 0.0).await?;
/// assert_eq!(store.execution_count(&again, policy.window()).await?, 1);
/// assert_eq!(store.execution_count(&store.key("other"), policy.window()).await?, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MemoryKey(Arc<Mutex<SlidingLog>>);

impl fmt::Debug for MemoryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MemoryKey")
    }
}

#[derive(Default)]
struct SlidingLog {
    /// The starts still in the window (and some that left it since the
    /// last decision).
    starts: StartLog,
    pause: Pause,
}

impl MemoryStore {
    /// An empty store reading the default [`Clock`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, RateLimiterStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_limits::error::LimiterError> {
    /// let store = MemoryStore::new();
    /// let key = store.key("api");
    /// assert_eq!(store.execution_count(&key, Duration::from_secs(60)).await?, 0);
    /// assert_eq!(store.next_available(&key).await?, None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The same store reading `clock`; windows start empty.
    ///
    /// Call it before handing out clones: the store it returns shares no
    /// windows with them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::clock::Clock;
    /// use tower_limits::RateLimiter;
    /// use tower_limits::store::{MemoryStore, RateLimiterStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(60)).build()?;
    /// let policy = limiter.policy();
    ///
    /// let store = MemoryStore::new();
    /// store.record_execution(&store.key("api"), policy, 0.0).await?;
    /// let fast = store.with_clock(Clock::fast());
    /// assert_eq!(fast.execution_count(&fast.key("api"), policy.window()).await?, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_clock(self, clock: Clock) -> Self {
        Self {
            inner: Arc::new(Inner {
                clock,
                ..Inner::default()
            }),
        }
    }

    /// The clock every state of this store reads.
    pub(super) fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// The quota state called `name`, made on first use.
    pub(super) fn quota_state(&self, name: &str) -> super::memory_quota::MemoryQuotaKey {
        named(&self.inner.quotas, name)
    }

    /// The lease table called `name`, made on first use.
    pub(super) fn lease_state(&self, name: &str) -> super::memory_lease::MemoryLeaseKey {
        named(&self.inner.leases, name)
    }

    /// The shared curve called `name`, made on first use.
    pub(super) fn curve_state(&self, name: &str) -> super::memory_curve::MemoryCurveKey {
        named(&self.inner.curves, name)
    }

    #[inline]
    fn now(&self) -> u64 {
        self.inner.clock.now_nanos()
    }

    #[inline]
    fn instant(&self, nanos: u64) -> Instant {
        self.inner.clock.instant_at(nanos)
    }
}

/// The state called `name` in `states`, made on first use.
fn named<K: Clone + Default>(states: &Mutex<HashMap<String, K>>, name: &str) -> K {
    let mut states = states.lock().unwrap_or_else(PoisonError::into_inner);
    states.entry(name.to_owned()).or_default().clone()
}

/// Locks a window. A panic in another thread mid-update cannot leave a log
/// inconsistent (every update is a push, a pop or a field store), so a
/// poisoned lock is taken as is.
#[inline]
fn lock(key: &MemoryKey) -> MutexGuard<'_, SlidingLog> {
    key.0.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SlidingLog {
    /// When the window has room for `cost` more starts, if it has not at
    /// `now`: at most `max_executions - cost` units may stay.
    #[inline]
    fn window_frees_at(&self, now: u64, policy: &WindowPolicy, cost: u32) -> Option<u64> {
        let room = policy.max_units().saturating_sub(u64::from(cost));
        self.starts
            .frees_at(now, room, duration_nanos(policy.window))
    }

    /// When `cost` starts could be granted, if not at `now`.
    #[inline]
    fn blocked_until(&self, now: u64, policy: &WindowPolicy, cost: u32) -> Option<u64> {
        self.pause
            .blocked_until(now, self.window_frees_at(now, policy, cost))
    }

    #[inline]
    fn decide(
        &mut self,
        now: u64,
        policy: &WindowPolicy,
        cost: u32,
        jitter: f64,
    ) -> Result<u64, u64> {
        if let Some(retry_at) = self.blocked_until(now, policy, cost) {
            return Err(retry_at);
        }
        // The window has room, so the starts that had to leave for it have
        // left: drop them.
        let room = policy.max_units().saturating_sub(u64::from(cost));
        self.starts.make_room(room, duration_nanos(policy.window));
        self.pause.granted();
        self.record(now, policy, cost, jitter);
        Ok(now)
    }

    /// Records `cost` starts at `now`; backs off if that fills the window.
    #[inline]
    fn record(&mut self, now: u64, policy: &WindowPolicy, cost: u32, jitter: f64) {
        self.starts.add(now, u64::from(cost));
        if let (Some(backoff), Some(frees_at)) =
            (policy.backoff, self.window_frees_at(now, policy, 1))
        {
            self.pause.escalate(now, frees_at, &backoff, jitter, 1);
        }
    }

    fn refund(&mut self, now: u64, ticket: u64, cost: u32, policy: &WindowPolicy) {
        self.starts.remove(ticket, u64::from(cost));
        if self.window_frees_at(now, policy, 1).is_none() {
            self.pause.undo_escalation();
        }
    }
}

impl RateLimiterStore for MemoryStore {
    type Key = MemoryKey;

    fn key(&self, name: &str) -> MemoryKey {
        let mut windows = self
            .inner
            .windows
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        windows
            .entry(name.to_owned())
            .or_insert_with(|| MemoryKey(Arc::default()))
            .clone()
    }

    #[inline]
    fn acquire<'a>(
        &'a self,
        key: &'a MemoryKey,
        policy: WindowPolicy,
        cost: u32,
        jitter: f64,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>> {
        let mut log = lock(key);
        // Read under the lock, so starts are recorded in order.
        let now = self.now();
        let decision = match log.decide(now, &policy, cost, jitter) {
            Ok(ticket) => WindowDecision::Granted { ticket },
            Err(retry_at) => WindowDecision::Denied {
                retry_at: self.instant(retry_at),
            },
        };
        LimiterFuture::ready(Ok(decision))
    }

    fn record_execution<'a>(
        &'a self,
        key: &'a MemoryKey,
        policy: WindowPolicy,
        jitter: f64,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let mut log = lock(key);
        let now = self.now();
        log.starts.prune(now, duration_nanos(policy.window));
        log.record(now, &policy, 1, jitter);
        LimiterFuture::ready(Ok(()))
    }

    fn refund<'a>(
        &'a self,
        key: &'a MemoryKey,
        policy: WindowPolicy,
        ticket: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let mut log = lock(key);
        log.refund(self.now(), ticket, cost, &policy);
        LimiterFuture::ready(Ok(()))
    }

    fn settle<'a>(
        &'a self,
        key: &'a MemoryKey,
        _policy: WindowPolicy,
        ticket: u64,
        from: u32,
        to: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        lock(key).starts.resize(ticket, from, to);
        LimiterFuture::ready(Ok(()))
    }

    fn peek<'a>(
        &'a self,
        key: &'a MemoryKey,
        policy: WindowPolicy,
        cost: u32,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        let blocked = lock(key).blocked_until(self.now(), &policy, cost);
        LimiterFuture::ready(Ok(blocked.map(|nanos| self.instant(nanos))))
    }

    fn window_status<'a>(
        &'a self,
        key: &'a MemoryKey,
        policy: WindowPolicy,
    ) -> LimiterFuture<'a, Result<QuotaStatus, LimiterError>> {
        let now = self.now();
        let log = lock(key);
        let (remaining, at) = search(policy.max_executions(), |cost| {
            log.blocked_until(now, &policy, cost)
        });
        drop(log);
        let refill_in = at.map(|at| Duration::from_nanos(at.saturating_sub(now)));
        LimiterFuture::ready(Ok(policy.status(u64::from(remaining), refill_in)))
    }

    fn execution_count<'a>(
        &'a self,
        key: &'a MemoryKey,
        window: Duration,
    ) -> LimiterFuture<'a, Result<usize, LimiterError>> {
        let units: u64 = lock(key)
            .starts
            .in_window(self.now(), duration_nanos(window))
            .map(|start| start.units)
            .sum();
        LimiterFuture::ready(Ok(usize::try_from(units).unwrap_or(usize::MAX)))
    }

    fn oldest_execution_at_offset<'a>(
        &'a self,
        key: &'a MemoryKey,
        window: Duration,
        offset: usize,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        let log = lock(key);
        let mut before = 0_u64;
        let mut in_window = log.starts.in_window(self.now(), duration_nanos(window));
        let start = in_window.find(|start| {
            before = before.saturating_add(start.units);
            before > u64::try_from(offset).unwrap_or(u64::MAX)
        });
        LimiterFuture::ready(Ok(start.map(|start| self.instant(start.at))))
    }

    fn next_available<'a>(
        &'a self,
        key: &'a MemoryKey,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        let next = lock(key).pause.next_available;
        let pause = (next > self.now()).then(|| self.instant(next));
        LimiterFuture::ready(Ok(pause))
    }

    fn set_next_available<'a>(
        &'a self,
        key: &'a MemoryKey,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let nanos = self.inner.clock.nanos_at(at);
        // A pause from outside is never undone by a refund.
        lock(key).pause.pause_until(nanos);
        LimiterFuture::ready(Ok(()))
    }

    fn clear<'a>(&'a self, key: &'a MemoryKey) -> LimiterFuture<'a, Result<(), LimiterError>> {
        *lock(key) = SlidingLog::default();
        LimiterFuture::ready(Ok(()))
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("clock", &self.inner.clock)
            .finish_non_exhaustive()
    }
}
