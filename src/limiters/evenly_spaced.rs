//! [`EvenlySpacedRateLimiter`]: starts spread evenly over the window.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::{Clock, duration_nanos};
use crate::error::{ConfigError, CostTooHigh, LimiterError};
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit, Release, ReleaseEvent};

/// Spaces starts `window / max_executions` apart instead of allowing a burst
/// of `max_executions` and then a long wait: a 60-per-minute API gets one call
/// a second.
///
/// As the seed describes, the spacing after a start is shortened by the mean
/// duration of the last `max_executions` completed calls
/// (`wait = max(0, interval - mean_duration)`), so a worker that runs its
/// calls one after another does not wait twice. On its own that rule would
/// let short calls start faster than the limit, so this limiter also keeps the
/// last `max_executions` start times and never admits more than
/// `max_executions` in any `window`, however calls overlap.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::{EvenlySpacedRateLimiter, LimiterExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = EvenlySpacedRateLimiter::new(60, Duration::from_secs(60))?;
/// let start = tokio::time::Instant::now();
/// for _ in 0..3 {
///     drop(limiter.acquire().await?); // instant calls: no duration credit
/// }
/// assert_eq!(start.elapsed(), Duration::from_secs(2));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct EvenlySpacedRateLimiter {
    state: Arc<SpacingState>,
}

struct SpacingState {
    /// Fired when a refund or `clear` frees a start early.
    reopened: ReleaseEvent,
    max_executions: usize,
    window: u64,
    interval: u64,
    clock: Clock,
    spacing: Mutex<Spacing>,
}

#[derive(Default)]
struct Spacing {
    /// No start before this, in nanoseconds since the clock's epoch.
    next_available: u64,
    /// The last `max_executions` starts, oldest first.
    starts: VecDeque<u64>,
    /// The last `max_executions` call durations and their sum.
    durations: VecDeque<u64>,
    duration_sum: u64,
    /// Starts recorded by `record_start`, awaiting `record_completion`.
    open_starts: VecDeque<u64>,
    /// The last grant and the next-available time it replaced, for refunds.
    last_grant: Option<(u64, u64)>,
}

impl EvenlySpacedRateLimiter {
    /// A limiter spacing `max_executions` starts evenly over each `window`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if `max_executions` is 0 or `window` is zero.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::EvenlySpacedRateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = EvenlySpacedRateLimiter::new(10, Duration::from_secs(1))?;
    /// assert_eq!(limiter.interval(), Duration::from_millis(100));
    ///
    /// let error = EvenlySpacedRateLimiter::new(10, Duration::ZERO).unwrap_err();
    /// assert_eq!(error.field(), "window");
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(max_executions: usize, window: Duration) -> Result<Self, ConfigError> {
        super::validate_window(max_executions, window)?;
        Ok(Self::build(
            max_executions,
            duration_nanos(window),
            Clock::default(),
        ))
    }

    /// [`new`](EvenlySpacedRateLimiter::new) with the limit given as a
    /// [`Rate`](crate::Rate).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if the count does not fit in a `usize`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{EvenlySpacedRateLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = EvenlySpacedRateLimiter::from_rate("60/m".parse::<Rate>()?)?;
    /// assert_eq!(limiter.interval(), Duration::from_secs(1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_rate(rate: crate::Rate) -> Result<Self, ConfigError> {
        Self::new(rate.count_as_usize()?, rate.per())
    }

    /// The same limiter reading `clock` (see [`Clock`]); state starts afresh.
    ///
    /// Call it before handing out clones: the limiter it returns shares no
    /// state with them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{Clock, EvenlySpacedRateLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = EvenlySpacedRateLimiter::new(1, Duration::from_secs(60))?;
    /// limiter.record_start().await?;
    /// assert!(!limiter.can_proceed().await?);
    ///
    /// let limiter = limiter.with_clock(Clock::fast());
    /// assert_eq!(limiter.interval(), Duration::from_secs(60)); // same configuration
    /// assert!(limiter.can_proceed().await?); // fresh state
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_clock(self, clock: Clock) -> Self {
        Self::build(self.state.max_executions, self.state.window, clock)
    }

    fn build(max_executions: usize, window: u64, clock: Clock) -> Self {
        let max = u64::try_from(max_executions).unwrap_or(u64::MAX);
        Self {
            state: Arc::new(SpacingState {
                reopened: ReleaseEvent::new(),
                max_executions,
                window,
                interval: window / max,
                clock,
                spacing: Mutex::default(),
            }),
        }
    }

    /// The ideal interval between starts, `window / max_executions`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::EvenlySpacedRateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// // 60 a minute: one a second.
    /// let limiter = EvenlySpacedRateLimiter::new(60, Duration::from_secs(60))?;
    /// assert_eq!(limiter.interval(), Duration::from_secs(1));
    /// // Rounded down to the nanosecond.
    /// let limiter = EvenlySpacedRateLimiter::new(3, Duration::from_secs(1))?;
    /// assert_eq!(limiter.interval(), Duration::from_nanos(333_333_333));
    /// # Ok(())
    /// # }
    /// ```
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.state.interval)
    }
}

impl SpacingState {
    fn lock(&self) -> MutexGuard<'_, Spacing> {
        // Every update leaves the state consistent, so a poisoned lock is usable.
        self.spacing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn admit(self: &Arc<Self>, cost: u32) -> Admission {
        self.reopened.decide(|| self.decide(cost))
    }

    fn decide(self: &Arc<Self>, cost: u32) -> Admission {
        let now = self.clock.now_nanos();
        let mut spacing = self.lock();
        if let Some(retry_at) = self.blocked_until(&mut spacing, now, cost) {
            return Admission::Denied(Denial::until(self.clock.instant_at(retry_at)));
        }
        spacing.last_grant = Some((now, spacing.next_available));
        self.record(&mut spacing, now, cost);
        drop(spacing);
        let release = Arc::clone(self) as Arc<dyn Release>;
        Admission::Granted(Permit::new(release, now).with_cost(cost))
    }

    /// When a start costing `cost` may happen, if not now.
    fn blocked_until(&self, spacing: &mut Spacing, now: u64, cost: u32) -> Option<u64> {
        if let Some(horizon) = now.checked_sub(self.window) {
            while spacing
                .starts
                .front()
                .is_some_and(|&start| start <= horizon)
            {
                spacing.starts.pop_front();
            }
        }
        let paused = (now < spacing.next_available).then_some(spacing.next_available);
        // At most `max_executions - cost` earlier starts may stay in the
        // window: the one before them must have left it.
        let room = self.max_executions.saturating_sub(cost as usize);
        let window_frees_at = spacing
            .starts
            .len()
            .checked_sub(room + 1)
            .map(|index| spacing.starts[index].saturating_add(self.window));
        // `None` orders first: the later of the two, if either.
        paused.max(window_frees_at)
    }

    /// Records `cost` starts at `now` and spaces the next one.
    fn record(&self, spacing: &mut Spacing, now: u64, cost: u32) {
        spacing
            .starts
            .extend(std::iter::repeat_n(now, cost as usize));
        let excess = spacing.starts.len().saturating_sub(self.max_executions);
        spacing.starts.drain(..excess);
        let wait = self.wait(spacing, cost);
        spacing.next_available = spacing.next_available.max(now.saturating_add(wait));
    }

    /// The spacing after a start costing `cost`: `cost` intervals less the
    /// mean call duration.
    fn wait(&self, spacing: &Spacing, cost: u32) -> u64 {
        let interval = self.interval.saturating_mul(u64::from(cost));
        interval.saturating_sub(spacing.mean_duration())
    }

    /// Turns the `from` starts recorded at `start` into `to` (0: gives them
    /// back), and the spacing after them.
    fn respace(&self, start: u64, from: u32, to: u32) {
        let mut spacing = self.lock();
        for _ in to..from {
            if let Some(index) = spacing.starts.iter().rposition(|&s| s == start) {
                spacing.starts.remove(index);
            }
        }
        let at = spacing.starts.partition_point(|&s| s <= start);
        for _ in from..to {
            spacing.starts.insert(at, start);
        }
        let respaced = start.saturating_add(self.wait(&spacing, to));
        match spacing.last_grant {
            // The last grant: its spacing is the one in force.
            Some((ticket, previous)) if ticket == start => {
                spacing.next_available = if to == 0 {
                    spacing.last_grant = None;
                    previous
                } else {
                    previous.max(respaced)
                };
            }
            _ if to > from => spacing.next_available = spacing.next_available.max(respaced),
            _ => {}
        }
        drop(spacing);
        if to < from {
            self.reopened.notify();
        }
    }

    fn record_duration(&self, start: u64) {
        let duration = self.clock.now_nanos().saturating_sub(start);
        let mut spacing = self.lock();
        if spacing.durations.len() >= self.max_executions
            && let Some(oldest) = spacing.durations.pop_front()
        {
            spacing.duration_sum -= oldest;
        }
        spacing.durations.push_back(duration);
        spacing.duration_sum = spacing.duration_sum.saturating_add(duration);
    }
}

impl Spacing {
    fn mean_duration(&self) -> u64 {
        let count = u64::try_from(self.durations.len()).unwrap_or(u64::MAX);
        self.duration_sum.checked_div(count).unwrap_or(0)
    }
}

impl Release for SpacingState {
    /// Records the call's duration for the mean.
    fn complete(self: Arc<Self>, start: u64) {
        self.record_duration(start);
    }
}

impl Limiter for EvenlySpacedRateLimiter {
    /// A call costing `cost` counts as `cost` starts and is followed by
    /// `cost` intervals.
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let admission =
            CostTooHigh::check(cost, self.state.max_executions).map(|()| self.state.admit(cost));
        LimiterFuture::ready(admission)
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        let now = self.state.clock.now_nanos();
        let blocked = self.state.blocked_until(&mut self.state.lock(), now, 1);
        LimiterFuture::ready(Ok(blocked.is_none()))
    }

    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        let state = &self.state;
        let now = state.clock.now_nanos();
        let blocked = state.blocked_until(&mut state.lock(), now, cost);
        LimiterFuture::ready(Ok(
            blocked.map(|at| Denial::until(state.clock.instant_at(at)))
        ))
    }

    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let now = self.state.clock.now_nanos();
        let mut spacing = self.state.lock();
        self.state.record(&mut spacing, now, 1);
        spacing.open_starts.push_back(now);
        LimiterFuture::ready(Ok(()))
    }

    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let start = self.state.lock().open_starts.pop_front();
        if let Some(start) = start {
            self.state.record_duration(start);
        }
        LimiterFuture::ready(Ok(()))
    }

    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        let state = &self.state;
        let now = state.clock.now_nanos();
        let at = state
            .blocked_until(&mut state.lock(), now, 1)
            .unwrap_or(now);
        LimiterFuture::ready(Ok(state.clock.instant_at(at)))
    }

    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let nanos = self.state.clock.nanos_at(at);
        let mut spacing = self.state.lock();
        spacing.next_available = spacing.next_available.max(nanos);
        LimiterFuture::ready(Ok(()))
    }

    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        *self.state.lock() = Spacing::default();
        self.state.reopened.notify();
        LimiterFuture::ready(Ok(()))
    }

    /// Erases the permit's starts and restores the spacing before it.
    fn refund(&self, permit: Permit) {
        if let (Some(start), cost) = permit.disarm() {
            self.state.respace(start, cost, 0);
        }
    }

    /// Counts the call as `actual` starts, spaced accordingly.
    fn settle(&self, permit: &mut Permit, actual: u32) {
        if let Some(start) = permit.token() {
            self.state.respace(start, permit.cost(), actual);
            permit.settled(actual, None);
        }
    }
}

impl fmt::Debug for EvenlySpacedRateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EvenlySpacedRateLimiter")
            .field("max_executions", &self.state.max_executions)
            .field("interval", &self.interval())
            .finish()
    }
}
