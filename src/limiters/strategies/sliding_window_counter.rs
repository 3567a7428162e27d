//! [`SlidingWindowCounterLimiter`]: a fixed-window pair weighted into a
//! sliding estimate.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::window::{WindowBacked, WindowState};
use crate::algorithms::sliding_window_counter::Counts;
use crate::algorithms::windows::{Windows, refused};
use crate::clock::Clock;
use crate::error::ConfigError;
use crate::limiter::{Admission, Denial, Permit, ReleaseEvent};
use crate::rate::Rate;

/// About `max_executions` starts per rolling `window`, in O(1) memory: the
/// sliding window counter of Cloudflare and of most Redis limiters.
///
/// It keeps two counts, for the current fixed window and the one before it
/// (windows aligned to the clock's epoch, as for
/// [`FixedWindowLimiter`](crate::FixedWindowLimiter)), and estimates the
/// starts in the rolling window that ends now by assuming the previous
/// window's starts were spread evenly over it:
///
/// ```text
/// estimate = previous × (1 − f) + current      f = how far into the current window now is, in [0, 1)
/// ```
///
/// A call costing `c` is admitted iff `estimate + c ≤ max_executions`. The
/// estimate never rises as time passes, so a denial names the exact instant
/// the call would be admitted (the weight of the previous window has fallen
/// enough, or a new window has begun), computed in integers with no rounding.
///
/// # Error bound against the exact sliding log
///
/// Let `P` be the previous window's count, `p ≤ P` the part of it that lies in
/// the rolling window `(now − window, now]`, and `L = p + current` the count an
/// exact sliding log ([`RateLimiter`](crate::RateLimiter)) would see. Then
/// `estimate − L = P × (1 − f) − p`, so
///
/// * **under-count** (admitting what the log would refuse): at most `P × f`,
///   when the previous window's starts were bunched at its end. At every
///   admission `estimate ≤ max`, and the count of a rolling window only grows
///   at admissions, so **every interval of length `window` holds at most
///   `max + ⌊P × f⌋` units**, `f` and `P` taken at the interval's last
///   admission. As only admitted calls count (`P ≤ max`), that is **less
///   than `2 × max_executions`**. It approaches `2 × max` only when about
///   `max` starts bunch at the very end of one window (which needs the
///   window before it to have been nearly empty) and about `max` more come
///   late in the next.
/// * **over-count** (refusing what the log would admit): at most
///   `P × (1 − f)`, when the previous window's starts were bunched at its
///   beginning; a denied call always has `L + c > max − P × (1 − f)`.
/// * **evenly spread traffic**: when the previous window's starts were evenly
///   spaced, `p` is `P × (1 − f)` rounded one way or the other, and the
///   estimate is within one call of the log.
///
/// [`record_start`](crate::Limiter::record_start) and a higher
/// [`settle`](crate::Limiter::settle) may take a window past the limit; the
/// bounds then hold with `P` and `current` as counted.
///
/// A [refund](crate::Limiter::refund) gives a permit's units back while its
/// window is the current or the previous one (where they still weigh); a
/// higher settled cost is charged there, or to the current window once the
/// permit's no longer weighs.
///
/// # When to pick it
///
/// * A rolling limit ("100 per minute, in any minute") with O(1) memory per
///   limit, where occasional admissions slightly past the limit are fine:
///   the usual choice for per-key API limits. Unlike a
///   [`FixedWindowLimiter`](crate::FixedWindowLimiter), a full window is not
///   followed by a fresh burst at the boundary: the previous window's weight
///   holds it back.
/// * Prefer [`RateLimiter`](crate::RateLimiter) (an exact log, O(max) memory)
///   when no rolling window may ever exceed the limit.
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::limiter::Admission;
/// use tower_limits::{Limiter, SlidingWindowCounterLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = SlidingWindowCounterLimiter::new(4, Duration::from_secs(1))?;
/// let start = Instant::now();
/// drop(limiter.try_acquire_many(4).await?); // fills the first window
///
/// // A new window: the previous one still weighs 4 × (1 − 0) = 4.
/// tokio::time::advance(Duration::from_secs(1)).await;
/// let Admission::Denied(denial) = limiter.try_acquire().await? else { unreachable!() };
/// // 4 × (1 − f) + 1 ≤ 4 once f = 1/4.
/// assert_eq!(denial.retry_at(), Some(start + Duration::from_millis(1250)));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SlidingWindowCounterLimiter {
    state: Arc<SlidingState>,
}

pub(crate) struct SlidingState {
    windows: Windows,
    guarded: Mutex<Guarded>,
    /// Fired when a refund or `clear` gives room back early.
    reopened: ReleaseEvent,
    clock: Clock,
}

/// The counts and the pause, under one lock.
#[derive(Clone, Copy, Debug, Default)]
struct Guarded {
    counts: Counts,
    /// Nanoseconds since the clock's epoch before which nothing starts.
    not_before: u64,
    /// The window of the last `clear`: a grant counted in it or before
    /// gives nothing back ([`refused`]).
    cleared: Option<u64>,
}

impl Guarded {
    /// When a call costing `cost` may start: `None` if at `now`.
    #[inline]
    fn blocked_until(self, windows: &Windows, now: u64, cost: u32) -> Option<u64> {
        self.counts
            .blocked_until(windows, now, self.not_before, cost)
    }
}

impl SlidingWindowCounterLimiter {
    /// A limiter admitting about `max_executions` starts per rolling
    /// `window` (see the [error bound](Self#error-bound-against-the-exact-sliding-log)).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the field if `max_executions` is 0 or `window`
    /// is zero.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::SlidingWindowCounterLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = SlidingWindowCounterLimiter::new(100, Duration::from_secs(60))?;
    /// assert_eq!(limiter.max_executions(), 100);
    ///
    /// let error = SlidingWindowCounterLimiter::new(0, Duration::from_secs(1)).unwrap_err();
    /// assert_eq!(error.field(), "max_executions");
    /// let error = SlidingWindowCounterLimiter::new(1, Duration::ZERO).unwrap_err();
    /// assert_eq!(error.field(), "window");
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(max_executions: u32, window: Duration) -> Result<Self, ConfigError> {
        Ok(Self::build(
            Windows::new(max_executions, window)?,
            Clock::default(),
        ))
    }

    /// [`new`](SlidingWindowCounterLimiter::new) with the limit given as a
    /// [`Rate`].
    ///
    /// # Errors
    ///
    /// [`ConfigError`] on the rules of [`new`](SlidingWindowCounterLimiter::new).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{Rate, SlidingWindowCounterLimiter};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = SlidingWindowCounterLimiter::from_rate("100/m".parse::<Rate>()?)?;
    /// assert_eq!(limiter.window(), Duration::from_secs(60));
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_rate(rate: Rate) -> Result<Self, ConfigError> {
        Ok(Self::build(Windows::from_rate(rate)?, Clock::default()))
    }

    /// The same limiter reading `clock` (see [`Clock`]); state starts
    /// afresh, with windows aligned to the new clock's epoch.
    ///
    /// Call it before handing out clones: the limiter it returns shares no
    /// state with them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::clock::Clock;
    /// use tower_limits::{Limiter, SlidingWindowCounterLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = SlidingWindowCounterLimiter::new(1, Duration::from_secs(60))?;
    /// limiter.record_start().await?;
    /// assert!(!limiter.can_proceed().await?);
    ///
    /// let limiter = limiter.with_clock(Clock::fast());
    /// assert_eq!(limiter.max_executions(), 1); // same configuration
    /// assert!(limiter.can_proceed().await?); // fresh state
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_clock(self, clock: Clock) -> Self {
        Self::build(self.state.windows.for_clock(&clock), clock)
    }

    fn build(windows: Windows, clock: Clock) -> Self {
        Self {
            state: Arc::new(SlidingState {
                windows,
                guarded: Mutex::default(),
                reopened: ReleaseEvent::new(),
                clock,
            }),
        }
    }

    /// The limit per rolling window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::SlidingWindowCounterLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// assert_eq!(SlidingWindowCounterLimiter::new(5, Duration::from_secs(1))?.max_executions(), 5);
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_executions(&self) -> u32 {
        self.state.windows.max()
    }

    /// The window length.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::SlidingWindowCounterLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = SlidingWindowCounterLimiter::new(5, Duration::from_secs(10))?;
    /// assert_eq!(limiter.window(), Duration::from_secs(10));
    /// # Ok(())
    /// # }
    /// ```
    pub fn window(&self) -> Duration {
        self.state.windows.window()
    }
}

impl SlidingState {
    fn lock(&self) -> MutexGuard<'_, Guarded> {
        // Every update leaves the counts consistent, so a poisoned lock is usable.
        self.guarded.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl WindowState for SlidingState {
    fn windows(&self) -> &Windows {
        &self.windows
    }

    fn clock(&self) -> &Clock {
        &self.clock
    }

    fn reopened(&self) -> &ReleaseEvent {
        &self.reopened
    }

    #[inline]
    fn decide(&self, cost: u32) -> Admission {
        let mut guarded = self.lock();
        // Read under the lock: a reading older than the counts' window would
        // weigh them as if they were the previous window's.
        let now = self.clock.now_nanos();
        if let Some(at) = guarded.blocked_until(&self.windows, now, cost) {
            return Admission::Denied(Denial::until(self.clock.instant_at(at)));
        }
        let index = self.windows.index(now);
        let counts = &mut guarded.counts;
        *counts = counts.at(index);
        counts.current = counts.current.saturating_add(u64::from(cost));
        Admission::Granted(Permit::with_token(index).with_cost(cost))
    }

    fn look(&self, cost: u32) -> Option<u64> {
        let now = self.clock.now_nanos();
        self.lock().blocked_until(&self.windows, now, cost)
    }

    fn status(&self) -> (u32, Option<Duration>) {
        let now = self.clock.now_nanos();
        let guarded = *self.lock();
        self.windows
            .status(now, |cost| guarded.blocked_until(&self.windows, now, cost))
    }

    /// Moves the units counted for window `index` from `from` to `to` (see
    /// [`Counts::recount`]); a grant from before a `clear` only has its
    /// extra units charged. Returns whether room was given back.
    fn recount(&self, index: u64, from: u32, to: u32) -> bool {
        let mut guarded = self.lock();
        let current = self.windows.index(self.clock.now_nanos());
        let (index, from, to) = refused(guarded.cleared, current, index, from, to);
        match guarded.counts.recount(current, index, from, to) {
            Some(counts) => guarded.counts = counts,
            None => return false,
        }
        to < from
    }

    fn pause_until(&self, nanos: u64) {
        let mut guarded = self.lock();
        guarded.not_before = guarded.not_before.max(nanos);
    }

    fn reset(&self) {
        let index = self.windows.index(self.clock.now_nanos());
        let mut guarded = self.lock();
        let cleared = guarded.cleared.map_or(index, |cleared| cleared.max(index));
        *guarded = Guarded {
            cleared: Some(cleared),
            ..Guarded::default()
        };
    }
}

impl crate::limiters::FreshLimiter for SlidingWindowCounterLimiter {
    /// ```
    /// use tower_limits::limiters::FreshLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let template = tower_limits::SlidingWindowCounterLimiter::new(10, std::time::Duration::from_secs(1))?;
    /// let fresh = template.fresh();
    /// # let _ = fresh;
    /// # Ok(())
    /// # }
    /// ```
    fn fresh(&self) -> Self {
        Self::build(self.state.windows, self.state.clock.clone())
    }
}

impl WindowBacked for SlidingWindowCounterLimiter {
    type State = SlidingState;

    fn state(&self) -> &Arc<SlidingState> {
        &self.state
    }
}

impl fmt::Debug for SlidingWindowCounterLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let windows = &self.state.windows;
        f.debug_struct("SlidingWindowCounterLimiter")
            .field("max_executions", &windows.max())
            .field("window", &windows.window())
            .finish()
    }
}
