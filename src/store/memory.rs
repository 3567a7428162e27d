//! [`MemoryStore`]: quotas, leases and curves in this process's memory.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use crate::clock::Clock;

/// Keeps quotas, leases and curves in memory: fast, one process only.
///
/// Clones share the same state, by name. A sliding log keeps one entry per
/// instant at which calls started, with how many units started then (a
/// call's cost is a number, never a run of entries), and drops entries as
/// they leave the window: memory per named limit is bounded by the starts
/// within one window, and a decision's work by the entries that leave for
/// it.
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

struct Inner {
    clock: Clock,
    /// Unix time at the clock's epoch, in nanoseconds, read once: every
    /// window quota of the store has its boundaries on multiples of its
    /// window in Unix time, placed from here.
    unix_epoch: u64,
    quotas: Mutex<HashMap<String, super::memory_quota::MemoryQuotaKey>>,
    leases: Mutex<HashMap<String, super::memory_lease::MemoryLeaseKey>>,
    curves: Mutex<HashMap<String, super::memory_curve::MemoryCurveKey>>,
}

impl MemoryStore {
    /// An empty store reading the default [`Clock`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota, QuotaStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let quota = Quota::sliding_log(10, Duration::from_secs(60))?;
    /// let key = store.quota_key("api");
    /// assert_eq!(store.quota_status(&key, &quota).await?.remaining(), 10);
    /// assert_eq!(store.look(&key, &quota, 1).await?, None);
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
    /// use tower_limits::store::{MemoryStore, Quota, QuotaStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let quota = Quota::sliding_log(10, Duration::from_secs(60))?;
    /// let store = MemoryStore::new();
    /// store.take(&store.quota_key("api"), &quota).await?;
    /// let fast = store.with_clock(Clock::fast());
    /// let status = fast.quota_status(&fast.quota_key("api"), &quota).await?;
    /// assert_eq!(status.remaining(), 10); // nothing shared with `store`
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_clock(self, clock: Clock) -> Self {
        Self {
            inner: Arc::new(Inner::new(clock)),
        }
    }

    /// The clock every state of this store reads.
    pub(crate) fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// Unix time at the clock's epoch, in nanoseconds.
    pub(crate) fn unix_epoch(&self) -> u64 {
        self.inner.unix_epoch
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
}

impl Default for Inner {
    fn default() -> Self {
        Self::new(Clock::default())
    }
}

impl Inner {
    fn new(clock: Clock) -> Self {
        Self {
            unix_epoch: clock.unix_epoch(),
            clock,
            quotas: Mutex::default(),
            leases: Mutex::default(),
            curves: Mutex::default(),
        }
    }
}

/// The state called `name` in `states`, made on first use.
fn named<K: Clone + Default>(states: &Mutex<HashMap<String, K>>, name: &str) -> K {
    let mut states = states.lock().unwrap_or_else(PoisonError::into_inner);
    states.entry(name.to_owned()).or_default().clone()
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("clock", &self.inner.clock)
            .finish_non_exhaustive()
    }
}
