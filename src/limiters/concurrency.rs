//! [`ConcurrencyLimiter`]: at most `max` calls running at once.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::time::Instant;

use crate::clock::Clock;
use crate::error::{ConfigError, LimiterError};
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit, Release, ReleaseEvent};

/// Caps the number of calls running at the same time.
///
/// A call may start while fewer than `max_concurrent` are running and the
/// time is past any pause set with
/// [`set_next_available_time`](Limiter::set_next_available_time). A caller
/// denied for lack of a slot is woken the moment a running call completes.
///
/// State lives in this process; clones share it.
///
/// ```
/// use tower_limits::{ConcurrencyLimiter, Limiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = ConcurrencyLimiter::new(3)?;
/// assert!(limiter.can_proceed().await?); // 0 running
/// limiter.record_start().await?; // 1 running
/// limiter.record_start().await?; // 2 running
/// limiter.record_start().await?; // 3 running
/// assert!(!limiter.can_proceed().await?); // at capacity
/// limiter.record_completion().await?; // 2 running
/// assert!(limiter.can_proceed().await?);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ConcurrencyLimiter {
    state: Arc<ConcurrencyState>,
}

struct ConcurrencyState {
    max_concurrent: usize,
    running: AtomicUsize,
    /// Nanoseconds since the clock's epoch before which nothing starts.
    not_before: AtomicU64,
    released: ReleaseEvent,
    clock: Clock,
}

impl ConcurrencyLimiter {
    /// A limiter admitting at most `max_concurrent` calls at once.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if `max_concurrent` is 0.
    ///
    /// ```
    /// use tower_limits::ConcurrencyLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = ConcurrencyLimiter::new(8)?;
    /// assert_eq!(limiter.max_concurrent(), 8);
    ///
    /// let error = ConcurrencyLimiter::new(0).unwrap_err();
    /// assert_eq!(error.field(), "max_concurrent");
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(max_concurrent: usize) -> Result<Self, ConfigError> {
        if max_concurrent == 0 {
            return Err(ConfigError::new(
                "max_concurrent",
                max_concurrent,
                "must be at least 1",
            ));
        }
        Ok(Self::build(max_concurrent, Clock::default()))
    }

    /// The same limiter reading `clock` (see [`Clock`]); state starts afresh.
    ///
    /// Call it before handing out clones: the limiter it returns shares no
    /// state with them.
    ///
    /// ```
    /// use tower_limits::{Clock, ConcurrencyLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ConcurrencyLimiter::new(2)?;
    /// limiter.record_start().await?;
    /// let limiter = limiter.with_clock(Clock::fast());
    /// assert_eq!(limiter.max_concurrent(), 2); // same configuration
    /// assert_eq!(limiter.running(), 0); // fresh state
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_clock(self, clock: Clock) -> Self {
        Self::build(self.state.max_concurrent, clock)
    }

    fn build(max_concurrent: usize, clock: Clock) -> Self {
        Self {
            state: Arc::new(ConcurrencyState {
                max_concurrent,
                running: AtomicUsize::new(0),
                not_before: AtomicU64::new(0),
                released: ReleaseEvent::new(),
                clock,
            }),
        }
    }

    /// The configured maximum.
    ///
    /// ```
    /// use tower_limits::ConcurrencyLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = ConcurrencyLimiter::new(4)?;
    /// assert_eq!(limiter.max_concurrent(), 4);
    /// assert_eq!(limiter.clone().max_concurrent(), 4);
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_concurrent(&self) -> usize {
        self.state.max_concurrent
    }

    /// How many calls are running now.
    ///
    /// ```
    /// use tower_limits::{ConcurrencyLimiter, LimiterExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ConcurrencyLimiter::new(4)?;
    /// let first = limiter.acquire().await?;
    /// let _second = limiter.clone().acquire().await?; // clones share the count
    /// assert_eq!(limiter.running(), 2);
    /// drop(first);
    /// assert_eq!(limiter.running(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn running(&self) -> usize {
        self.state.running.load(Ordering::Acquire)
    }
}

impl ConcurrencyState {
    // `SeqCst` on taking and releasing, as `ReleaseEvent` requires.
    #[inline]
    fn try_take_slot(&self) -> bool {
        self.running
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |running| {
                (running < self.max_concurrent).then_some(running + 1)
            })
            .is_ok()
    }

    #[inline]
    fn release_slot(&self) {
        // Saturating: `record_completion` without a start, or after `clear`,
        // must not wrap the count.
        let _ = self
            .running
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |running| {
                Some(running.saturating_sub(1))
            });
        self.released.notify();
    }

    /// The pause's end, if one is in force now.
    #[inline]
    fn paused_until(&self) -> Option<u64> {
        let not_before = self.not_before.load(Ordering::Acquire);
        (not_before != 0 && self.clock.now_nanos() < not_before).then_some(not_before)
    }

    #[inline]
    fn admit(self: &Arc<Self>) -> Admission {
        if self.paused_until().is_none() && self.try_take_slot() {
            return self.grant();
        }
        self.admit_or_listen()
    }

    #[cold]
    fn admit_or_listen(self: &Arc<Self>) -> Admission {
        self.released.decide(|| {
            if let Some(until) = self.paused_until() {
                Admission::Denied(Denial::until(self.clock.instant_at(until)))
            } else if self.try_take_slot() {
                self.grant()
            } else {
                Admission::Denied(Denial::until_release())
            }
        })
    }

    #[inline]
    fn grant(self: &Arc<Self>) -> Admission {
        Admission::Granted(Permit::new(Arc::clone(self) as Arc<dyn Release>, 0))
    }
}

impl Release for ConcurrencyState {
    #[inline]
    fn complete(self: Arc<Self>, _token: u64) {
        self.release_slot();
    }
}

impl Limiter for ConcurrencyLimiter {
    #[inline]
    fn try_acquire(&self) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        LimiterFuture::ready(Ok(self.state.admit()))
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        let state = &self.state;
        let free = state.running.load(Ordering::Acquire) < state.max_concurrent;
        LimiterFuture::ready(Ok(free && state.paused_until().is_none()))
    }

    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.state.running.fetch_add(1, Ordering::AcqRel);
        LimiterFuture::ready(Ok(()))
    }

    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.state.release_slot();
        LimiterFuture::ready(Ok(()))
    }

    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        let state = &self.state;
        let at = state
            .not_before
            .load(Ordering::Acquire)
            .max(state.clock.now_nanos());
        LimiterFuture::ready(Ok(state.clock.instant_at(at)))
    }

    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let nanos = self.state.clock.nanos_at(at);
        self.state.not_before.fetch_max(nanos, Ordering::AcqRel);
        LimiterFuture::ready(Ok(()))
    }

    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.state.running.store(0, Ordering::SeqCst);
        self.state.not_before.store(0, Ordering::Release);
        self.state.released.notify();
        LimiterFuture::ready(Ok(()))
    }
}

impl fmt::Debug for ConcurrencyLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimiter")
            .field("max_concurrent", &self.state.max_concurrent)
            .field("running", &self.running())
            .finish()
    }
}
