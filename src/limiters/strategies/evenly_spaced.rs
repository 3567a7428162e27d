//! [`EvenlySpacedRateLimiter`]: starts spread evenly over the window.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::{Clock, duration_nanos, paced_from};
use crate::error::{ConfigError, CostTooHigh, LimiterError};
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit, ReleaseEvent};
use crate::start_log::StartLog;

/// Spaces starts `window / max_executions` apart instead of allowing a burst
/// of `max_executions` and then a long wait: a 60-per-minute API gets one call
/// a second, whatever the number of callers and however long calls take.
///
/// Each start takes a slot one interval after the previous one's (a call
/// costing `n` is followed by `n` intervals). The interval is
/// `window / max_executions` rounded up to a whole nanosecond, so no window
/// holds more than `max_executions` slots; for calls costing more than one,
/// the limiter also keeps the units started within the last `window`, at
/// their slots, and never lets them pass `max_executions`.
///
/// A waiting caller wakes on tokio's millisecond timer, up to about 2 ms
/// after its slot. A start that comes up to 10 ms late takes its slot, but
/// one no earlier than the
/// [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE) τ (2 ms) before
/// it, so late wake-ups do not cost the rate: two starts can then be less
/// than an interval apart, and a window of `window` holds at most
/// `max_executions + ⌈max_executions × τ / window⌉` starts of calls costing
/// one (1,002 for 1,000 a second).
///
/// # Evenly spaced, whatever the call duration
///
/// The source design shortens the wait after a start by the mean duration of
/// recent calls (`wait = max(0, interval - mean_duration)`), so that a worker
/// that runs calls one after another and waits *after* each completion still
/// starts on the beat. Measured from the start, as here, that worker already
/// starts on the beat: its next start is one interval after the previous
/// start, however long the call took. Applied to concurrent callers, the
/// shortened wait would break the very spacing it is for (20 per second with
/// 40 ms calls would start calls 10 ms apart), so this limiter keeps the
/// intent, starts at regular intervals, and credits no duration.
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
///     let _permit = limiter.acquire().await?;
///     tokio::time::sleep(Duration::from_millis(400)).await; // the call
/// }
/// // Starts at 0 s, 1 s and 2 s: one a second, the call time included.
/// assert_eq!(start.elapsed(), Duration::from_millis(2_400));
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
    max_executions: u32,
    window: u64,
    interval: u64,
    clock: Clock,
    spacing: Mutex<Spacing>,
}

#[derive(Default)]
struct Spacing {
    /// No start before this, in nanoseconds since the clock's epoch: the
    /// interval after the last start, or a pause.
    next_available: u64,
    /// The units started within the last window (and some before it), at
    /// the slots they took.
    starts: StartLog,
    /// The last grant's slot and the next-available time it replaced, for
    /// refunds.
    last_grant: Option<(u64, u64)>,
}

impl EvenlySpacedRateLimiter {
    /// A limiter spacing `max_executions` starts evenly over each `window`,
    /// a late start taking a slot up to
    /// [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE) τ (2 ms) before
    /// it: at most `max_executions + ⌈max_executions × τ / window⌉` starts
    /// in any window.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if `max_executions` is 0, `window` is zero, or
    /// `max_executions` is more than one per nanosecond of `window`.
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
    pub fn new(max_executions: u32, window: Duration) -> Result<Self, ConfigError> {
        crate::algorithms::windows::validate(max_executions, window)?;
        let window = duration_nanos(window);
        if u64::from(max_executions) <= window {
            return Ok(Self::build(max_executions, window, Clock::default()));
        }
        Err(ConfigError::new(
            "max_executions",
            max_executions,
            "must be at most one per nanosecond of `window`",
        ))
    }

    /// [`new`](EvenlySpacedRateLimiter::new) with the limit given as a
    /// [`Rate`](crate::Rate).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] on the rules of [`new`](EvenlySpacedRateLimiter::new).
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
    pub fn from_rate(rate: crate::rate::Rate) -> Result<Self, ConfigError> {
        Self::new(rate.count(), rate.per())
    }

    /// The same limiter reading `clock` (see [`Clock`]); state starts afresh.
    ///
    /// Call it before handing out clones: the limiter it returns shares no
    /// state with them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::clock::Clock;
    /// use tower_limits::{EvenlySpacedRateLimiter, Limiter};
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

    /// `max_executions` is at least 1 and at most `window`.
    fn build(max_executions: u32, window: u64, clock: Clock) -> Self {
        let max = u64::from(max_executions);
        Self {
            state: Arc::new(SpacingState {
                reopened: ReleaseEvent::new(),
                max_executions,
                window,
                interval: window.div_ceil(max),
                clock,
                spacing: Mutex::default(),
            }),
        }
    }

    /// The interval between starts, `window / max_executions`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::EvenlySpacedRateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// // 60 a minute: one a second.
    /// let limiter = EvenlySpacedRateLimiter::new(60, Duration::from_secs(60))?;
    /// assert_eq!(limiter.interval(), Duration::from_secs(1));
    /// // Rounded up to the nanosecond, so a window never holds a fourth.
    /// let limiter = EvenlySpacedRateLimiter::new(3, Duration::from_secs(1))?;
    /// assert_eq!(limiter.interval(), Duration::from_nanos(333_333_334));
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

    /// `max_executions` as units (it is at most the window's nanoseconds).
    fn max_units(&self) -> u64 {
        u64::from(self.max_executions)
    }

    /// The time `cost` starts occupy.
    fn gap(&self, cost: u32) -> u64 {
        self.interval.saturating_mul(u64::from(cost))
    }

    fn decide(&self, cost: u32) -> Admission {
        let mut spacing = self.lock();
        // Read under the lock, so starts are recorded in order.
        let now = self.clock.now_nanos();
        if let Some(retry_at) = self.blocked_until(&spacing, now, cost) {
            return Admission::Denied(Denial::until(self.clock.instant_at(retry_at)));
        }
        let room = self.max_units().saturating_sub(u64::from(cost));
        spacing.starts.make_room(room, self.window);
        let slot = paced_from(spacing.next_available, now);
        spacing.last_grant = Some((slot, spacing.next_available));
        self.record(&mut spacing, slot, cost);
        Admission::Granted(Permit::with_token(slot).with_cost(cost))
    }

    /// When a start costing `cost` may happen, if not at `now`: once the
    /// interval after the last start (or a pause) has passed and the window
    /// has room for it.
    fn blocked_until(&self, spacing: &Spacing, now: u64, cost: u32) -> Option<u64> {
        let spaced = (now < spacing.next_available).then_some(spacing.next_available);
        let room = self.max_units().saturating_sub(u64::from(cost));
        // `None` orders first: the later of the two, if either.
        spaced.max(spacing.starts.frees_at(now, room, self.window))
    }

    /// Records `cost` starts in the slot at `slot` and the intervals after
    /// them.
    fn record(&self, spacing: &mut Spacing, slot: u64, cost: u32) {
        spacing.starts.add(slot, u64::from(cost));
        let next = slot.saturating_add(self.gap(cost));
        spacing.next_available = spacing.next_available.max(next);
    }

    /// Turns the `from` starts recorded at `start` into `to` (0: gives them
    /// back), and the intervals after them.
    fn respace(&self, start: u64, from: u32, to: u32) {
        let mut spacing = self.lock();
        spacing.starts.resize(start, from, to);
        let respaced = start.saturating_add(self.gap(to));
        match spacing.last_grant {
            // The last grant: its interval is the one in force.
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

    /// What a call costing `cost` would get now.
    fn look(&self, cost: u32) -> Option<u64> {
        let spacing = self.lock();
        self.blocked_until(&spacing, self.clock.now_nanos(), cost)
    }
}

impl crate::limiters::FreshLimiter for EvenlySpacedRateLimiter {
    /// ```
    /// use tower_limits::limiters::FreshLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let template = tower_limits::EvenlySpacedRateLimiter::new(10, std::time::Duration::from_secs(1))?;
    /// let fresh = template.fresh();
    /// # let _ = fresh;
    /// # Ok(())
    /// # }
    /// ```
    fn fresh(&self) -> Self {
        Self::build(
            self.state.max_executions,
            self.state.window,
            self.state.clock.clone(),
        )
    }
}

impl Limiter for EvenlySpacedRateLimiter {
    /// A call costing `cost` counts as `cost` starts and is followed by
    /// `cost` intervals.
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let state = &self.state;
        let admission = CostTooHigh::check(cost, state.max_executions)
            .map(|()| state.reopened.decide(|| state.decide(cost)));
        LimiterFuture::ready(admission)
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        LimiterFuture::ready(Ok(self.state.look(1).is_none()))
    }

    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        let state = &self.state;
        let denial = state
            .look(cost)
            .map(|at| Denial::until(state.clock.instant_at(at)));
        LimiterFuture::ready(Ok(denial))
    }

    /// Records a start now, even if it comes early: the next one is an
    /// interval after it.
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let state = &self.state;
        let mut spacing = state.lock();
        let now = state.clock.now_nanos();
        spacing.starts.prune(now, state.window);
        state.record(&mut spacing, now, 1);
        LimiterFuture::ready(Ok(()))
    }

    /// Nothing to do: the spacing counts from starts.
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }

    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        let state = &self.state;
        let now = state.clock.now_nanos();
        let at = state.look(1).unwrap_or(now);
        LimiterFuture::ready(Ok(state.clock.instant_at(at)))
    }

    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let nanos = self.state.clock.nanos_at(at);
        let mut spacing = self.state.lock();
        spacing.next_available = spacing.next_available.max(nanos);
        // A pause from outside is never undone by a refund.
        spacing.last_grant = None;
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

    /// Counts the call as `actual` starts (at most `max_executions`),
    /// spaced accordingly.
    fn settle(&self, permit: &mut Permit, actual: u32) {
        if let Some(start) = permit.token() {
            let max = self.state.max_executions;
            let actual = actual.min(max);
            self.state.respace(start, permit.cost(), actual);
            permit.settled(actual, None);
        }
    }

    fn is_in_use(&self) -> bool {
        Arc::strong_count(&self.state) > 1
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
