//! [`DelayLimiter`]: a fixed minimum delay between starts.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::{Clock, duration_nanos};
use crate::error::{ConfigError, LimiterError};
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit, ReleaseEvent};

/// Keeps at least `delay` between consecutive starts (default 50 ms).
///
/// It does not limit concurrency or count a window: each start sets the next
/// available time to `start + delay`. The decision is one compare-and-swap.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::{DelayLimiter, Limiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = DelayLimiter::new(Duration::from_millis(200))?;
/// limiter.record_start().await?;
/// assert!(!limiter.can_proceed().await?);
/// tokio::time::advance(Duration::from_millis(200)).await;
/// assert!(limiter.can_proceed().await?);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct DelayLimiter {
    state: Arc<DelayState>,
}

struct DelayState {
    delay: AtomicU64,
    /// Fired when a refund or `clear` reopens the gap early.
    reopened: ReleaseEvent,
    /// Nanoseconds since the clock's epoch before which nothing starts.
    next_available: AtomicU64,
    clock: Clock,
}

/// The default delay.
const DEFAULT_DELAY: Duration = Duration::from_millis(50);

impl Default for DelayLimiter {
    /// A limiter with a default delay of 50 ms.
    fn default() -> Self {
        Self::build(duration_nanos(DEFAULT_DELAY), Clock::default())
    }
}

impl DelayLimiter {
    /// A limiter keeping `delay` between starts.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if `delay` is zero.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::DelayLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = DelayLimiter::new(Duration::from_millis(250))?;
    /// assert_eq!(limiter.delay(), Duration::from_millis(250));
    ///
    /// let error = DelayLimiter::new(Duration::ZERO).unwrap_err();
    /// assert_eq!(error.field(), "delay");
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(delay: Duration) -> Result<Self, ConfigError> {
        Ok(Self::build(validate(delay)?, Clock::default()))
    }

    /// Changes the delay at runtime; it applies from the next start (the gap
    /// after the last start stays as it was).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if `delay` is zero; the delay is then unchanged.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::DelayLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = DelayLimiter::default();
    /// limiter.set_delay(Duration::from_secs(1))?;
    /// assert_eq!(limiter.delay(), Duration::from_secs(1));
    /// assert!(limiter.set_delay(Duration::ZERO).is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_delay(&self, delay: Duration) -> Result<(), ConfigError> {
        let delay = validate(delay)?;
        self.state.delay.store(delay, Ordering::Relaxed);
        Ok(())
    }

    /// The same limiter reading `clock` (see [`Clock`]); state starts afresh.
    ///
    /// Call it before handing out clones: the limiter it returns shares no
    /// state with them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::clock::Clock;
    /// use tower_limits::{DelayLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = DelayLimiter::new(Duration::from_secs(60))?;
    /// limiter.record_start().await?;
    /// assert!(!limiter.can_proceed().await?);
    ///
    /// let limiter = limiter.with_clock(Clock::fast());
    /// assert_eq!(limiter.delay(), Duration::from_secs(60)); // same configuration
    /// assert!(limiter.can_proceed().await?); // fresh state
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_clock(self, clock: Clock) -> Self {
        Self::build(self.state.delay(), clock)
    }

    fn build(delay: u64, clock: Clock) -> Self {
        Self {
            state: Arc::new(DelayState {
                delay: AtomicU64::new(delay),
                reopened: ReleaseEvent::new(),
                next_available: AtomicU64::new(0),
                clock,
            }),
        }
    }

    /// The configured delay.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::DelayLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// assert_eq!(DelayLimiter::new(Duration::from_secs(2))?.delay(), Duration::from_secs(2));
    /// assert_eq!(DelayLimiter::default().delay(), Duration::from_millis(50));
    /// # Ok(())
    /// # }
    /// ```
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.state.delay())
    }
}

fn validate(delay: Duration) -> Result<u64, ConfigError> {
    if delay.is_zero() {
        return Err(ConfigError::new("delay", delay, "must be longer than zero"));
    }
    Ok(duration_nanos(delay))
}

impl DelayState {
    #[inline]
    fn delay(&self) -> u64 {
        self.delay.load(Ordering::Relaxed)
    }

    /// Turns the gap that a start costing `from` opened into `to` delays: a
    /// shorter one only if nothing moved the gap since, a longer one always.
    fn regap(&self, start: u64, from: u32, to: u32) {
        let (old, new) = (
            start.saturating_add(self.gap(from)),
            start.saturating_add(self.gap(to)),
        );
        let moved = self.next_available.compare_exchange(
            old,
            new.max(start),
            Ordering::SeqCst,
            Ordering::Relaxed,
        );
        if moved.is_err() && new > old {
            self.next_available.fetch_max(new, Ordering::SeqCst);
        }
        if to < from {
            self.reopened.notify();
        }
    }

    /// The end of the gap after the last start, if it is still open.
    fn closed_until(&self) -> Option<u64> {
        let next = self.next_available.load(Ordering::Acquire);
        (self.clock.now_nanos() < next).then_some(next)
    }

    #[inline]
    fn admit(&self, cost: u32) -> Admission {
        self.reopened.decide(|| self.decide(cost))
    }

    /// The gap a start costing `cost` opens: `cost` delays.
    fn gap(&self, cost: u32) -> u64 {
        self.delay().saturating_mul(u64::from(cost))
    }

    #[inline]
    fn decide(&self, cost: u32) -> Admission {
        let now = self.clock.now_nanos();
        let start_next = now.saturating_add(self.gap(cost));
        let mut next = self.next_available.load(Ordering::SeqCst);
        loop {
            if now < next {
                return Admission::Denied(Denial::until(self.clock.instant_at(next)));
            }
            // `SeqCst`, as `ReleaseEvent` requires of the second look.
            match self.next_available.compare_exchange_weak(
                next,
                start_next,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Admission::Granted(Permit::with_token(now).with_cost(cost)),
                Err(current) => next = current,
            }
        }
    }
}

impl crate::limiters::FreshLimiter for DelayLimiter {
    /// ```
    /// use tower_limits::limiters::FreshLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let template = tower_limits::DelayLimiter::new(std::time::Duration::from_millis(10))?;
    /// let fresh = template.fresh();
    /// # let _ = fresh;
    /// # Ok(())
    /// # }
    /// ```
    fn fresh(&self) -> Self {
        Self::build(self.state.delay(), self.state.clock.clone())
    }
}

impl Limiter for DelayLimiter {
    #[inline]
    /// A start costing `cost` keeps the next one `cost` delays away.
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        LimiterFuture::ready(Ok(self.state.admit(cost)))
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        LimiterFuture::ready(Ok(self.state.closed_until().is_none()))
    }

    /// The gap, whatever the cost: a cost lengthens the gap after a start.
    fn peek(&self, _cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        let state = &self.state;
        let denial = state
            .closed_until()
            .map(|until| Denial::until(state.clock.instant_at(until)));
        LimiterFuture::ready(Ok(denial))
    }

    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let state = &self.state;
        let next = state.clock.now_nanos().saturating_add(state.delay());
        state.next_available.fetch_max(next, Ordering::AcqRel);
        LimiterFuture::ready(Ok(()))
    }

    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }

    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        let state = &self.state;
        let next = state
            .next_available
            .load(Ordering::Acquire)
            .max(state.clock.now_nanos());
        LimiterFuture::ready(Ok(state.clock.instant_at(next)))
    }

    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let nanos = self.state.clock.nanos_at(at);
        self.state.next_available.fetch_max(nanos, Ordering::AcqRel);
        LimiterFuture::ready(Ok(()))
    }

    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.state.next_available.store(0, Ordering::SeqCst);
        self.state.reopened.notify();
        LimiterFuture::ready(Ok(()))
    }

    /// Reopens the gap the permit's start closed, unless something moved it
    /// since.
    fn refund(&self, permit: Permit) {
        if let (Some(start), cost) = permit.disarm() {
            self.state.regap(start, cost, 0);
        }
    }

    /// Moves the gap after the permit's start to `actual` delays. A delay
    /// limiter has no capacity to clamp to: a cost of `n` is `n` delays, as
    /// for [`try_acquire_many`](Limiter::try_acquire_many).
    fn settle(&self, permit: &mut Permit, actual: u32) {
        if let Some(start) = permit.token() {
            self.state.regap(start, permit.cost(), actual);
            permit.settled(actual, None);
        }
    }

    fn is_in_use(&self) -> bool {
        Arc::strong_count(&self.state) > 1
    }
}

impl fmt::Debug for DelayLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayLimiter")
            .field("delay", &self.delay())
            .finish()
    }
}
