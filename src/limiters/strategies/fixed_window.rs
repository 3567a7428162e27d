//! [`FixedWindowLimiter`]: a counter per calendar window.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::window::{WindowBacked, WindowState};
use crate::algorithms::fixed_window;
use crate::algorithms::windows::{Windows, refused};
use crate::clock::Clock;
use crate::error::ConfigError;
use crate::limiter::{Admission, Denial, Permit, ReleaseEvent};
use crate::rate::Rate;

/// At most `max_executions` starts per fixed window of `window`: one counter
/// that resets at every window boundary (the `INCR` + `EXPIRE` limiter).
///
/// Windows are calendar intervals, `[k·window, (k + 1)·window)`, aligned to
/// the epoch of the limiter's [`Clock`] (the instant the limiter was built,
/// for the default tokio clock), or with
/// [`aligned_to_unix_time`](Self::aligned_to_unix_time) to multiples of
/// `window` in Unix time, so a per-minute limit resets at the top of every
/// minute. A denied call may retry at the start of the next window, and the
/// denial says exactly that.
///
/// The state is one atomic word holding the window's index and its count,
/// and a decision is one compare-and-swap.
///
/// A [refund](crate::Limiter::refund) gives a permit's units back while its
/// window lasts; once the window has ended they are gone with it. A higher
/// [settled](crate::Limiter::settle) cost is always charged: to the
/// permit's window, or to the current one once that has ended.
///
/// # When to pick it
///
/// * A coarse, cheap quota that matches how an upstream counts: "1,000 per
///   calendar minute", reset at the top of the minute.
/// * Not when bursts matter: it **admits up to twice the limit across a
///   boundary**. `max_executions` calls at the very end of one window and
///   `max_executions` more at the very start of the next all pass, so a span
///   much shorter than `window` can hold `2 × max_executions` starts (1,000
///   at 11:00:59 and 1,000 at 11:01:00). Prefer
///   [`SlidingWindowCounterLimiter`](crate::SlidingWindowCounterLimiter)
///   (same cost, bounded boundary error) or [`RateLimiter`](crate::RateLimiter)
///   (an exact sliding log) when any rolling window must hold the limit.
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::limiter::Admission;
/// use tower_limits::{FixedWindowLimiter, Limiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = FixedWindowLimiter::new(3, Duration::from_secs(1))?;
/// let start = Instant::now(); // the first window begins here
///
/// // The boundary burst: three at the end of the first window...
/// tokio::time::advance(Duration::from_millis(999)).await;
/// for _ in 0..3 {
///     assert!(matches!(limiter.try_acquire().await?, Admission::Granted(_)));
/// }
/// let Admission::Denied(denial) = limiter.try_acquire().await? else { unreachable!() };
/// assert_eq!(denial.retry_at(), Some(start + Duration::from_secs(1)));
///
/// // ...and three more a millisecond later, at the start of the next.
/// tokio::time::advance(Duration::from_millis(1)).await;
/// for _ in 0..3 {
///     assert!(matches!(limiter.try_acquire().await?, Admission::Granted(_)));
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct FixedWindowLimiter {
    state: Arc<FixedState>,
}

pub(crate) struct FixedState {
    windows: Windows,
    /// The low 32 bits of the current window's index, then its count.
    counter: AtomicU64,
    /// Nanoseconds since the clock's epoch before which nothing starts.
    not_before: AtomicU64,
    /// The window of the last `clear`, plus one (0: never cleared): a
    /// grant counted in it or before gives nothing back ([`refused`]).
    cleared: AtomicU64,
    /// Fired when a refund or `clear` gives room back early.
    reopened: ReleaseEvent,
    clock: Clock,
}

/// The counter word: the window index (wrapping at 2³²) and the count.
///
/// An idle gap of exactly a multiple of 2³² windows (136 years of
/// one-second windows; 50 days of one-millisecond ones) would make an old
/// count look current for one window: a false denial, never an excess.
#[derive(Clone, Copy)]
struct Counter(u64);

impl Counter {
    #[inline]
    fn new(index: u64, count: u32) -> Self {
        Self(((index & 0xFFFF_FFFF) << 32) | u64::from(count))
    }

    /// The count recorded for window `index` (0 if the word is older).
    #[inline]
    fn count_in(self, index: u64) -> u32 {
        if self.0 >> 32 == index & 0xFFFF_FFFF {
            self.0 as u32
        } else {
            0
        }
    }

    /// The word's window, if it is later than window `index`: a caller that
    /// read the clock after this one has already moved the count on. (The
    /// word keeps the low 32 bits of its index; a lead under 2³¹ windows
    /// reads as later.)
    #[inline]
    fn later_than(self, index: u64) -> Option<u64> {
        let lead = ((self.0 >> 32) as u32).wrapping_sub(index as u32);
        (lead != 0 && lead < 1 << 31).then(|| index + u64::from(lead))
    }
}

impl FixedWindowLimiter {
    /// A limiter admitting `max_executions` starts per window of `window`,
    /// the windows aligned to the clock's epoch.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the field if `max_executions` is 0 or `window`
    /// is zero.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::FixedWindowLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = FixedWindowLimiter::new(100, Duration::from_secs(60))?;
    /// assert_eq!(limiter.max_executions(), 100);
    ///
    /// assert_eq!(FixedWindowLimiter::new(0, Duration::from_secs(1)).unwrap_err().field(), "max_executions");
    /// assert_eq!(FixedWindowLimiter::new(1, Duration::ZERO).unwrap_err().field(), "window");
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(max_executions: u32, window: Duration) -> Result<Self, ConfigError> {
        Ok(Self::build(
            Windows::new(max_executions, window)?,
            Clock::default(),
        ))
    }

    /// [`new`](FixedWindowLimiter::new) with the limit given as a [`Rate`].
    ///
    /// # Errors
    ///
    /// [`ConfigError`] on the rules of [`new`](FixedWindowLimiter::new).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{FixedWindowLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = FixedWindowLimiter::from_rate("1000/m".parse::<Rate>()?)?;
    /// assert_eq!(limiter.window(), Duration::from_secs(60));
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_rate(rate: Rate) -> Result<Self, ConfigError> {
        Ok(Self::build(Windows::from_rate(rate)?, Clock::default()))
    }

    /// The same limit with window boundaries on multiples of `window` in
    /// Unix time (a per-minute window resets at the top of each minute, as
    /// an upstream counting calendar minutes does); state starts afresh.
    ///
    /// The Unix time is read once, here and in
    /// [`with_clock`](Self::with_clock); the windows then follow the
    /// limiter's monotonic clock, so a later step of the system clock does
    /// not move them.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime, UNIX_EPOCH};
    /// use tower_limits::{FixedWindowLimiter, LimiterExt, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = FixedWindowLimiter::new(1, Duration::from_secs(1))?.aligned_to_unix_time();
    /// drop(limiter.acquire().await?);
    /// let reset = limiter.next_available_time().await?;
    /// // The next window starts on a whole second of Unix time.
    /// let unix = SystemTime::now() + reset.saturating_duration_since(tokio::time::Instant::now());
    /// let nanos = unix.duration_since(UNIX_EPOCH)?.subsec_nanos();
    /// assert!(nanos < 5_000_000 || nanos > 995_000_000, "{nanos}");
    /// # Ok(())
    /// # }
    /// ```
    pub fn aligned_to_unix_time(self) -> Self {
        let clock = self.state.clock.clone();
        Self::build(self.state.windows.aligned_to_unix_time(&clock), clock)
    }

    /// The same limiter reading `clock` (see [`Clock`]); state starts afresh,
    /// and the windows are aligned to the new clock's epoch (or to Unix
    /// time, if they were).
    ///
    /// Call it before handing out clones: the limiter it returns shares no
    /// state with them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::clock::Clock;
    /// use tower_limits::{FixedWindowLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = FixedWindowLimiter::new(1, Duration::from_secs(60))?;
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
            state: Arc::new(FixedState {
                windows,
                counter: AtomicU64::new(0),
                not_before: AtomicU64::new(0),
                cleared: AtomicU64::new(0),
                reopened: ReleaseEvent::new(),
                clock,
            }),
        }
    }

    /// The most a window admits.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::FixedWindowLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// assert_eq!(FixedWindowLimiter::new(5, Duration::from_secs(1))?.max_executions(), 5);
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
    /// use tower_limits::FixedWindowLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = FixedWindowLimiter::new(5, Duration::from_secs(10))?;
    /// assert_eq!(limiter.window(), Duration::from_secs(10));
    /// # Ok(())
    /// # }
    /// ```
    pub fn window(&self) -> Duration {
        self.state.windows.window()
    }

    /// How many more units the current window admits (ignoring a pause).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{FixedWindowLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = FixedWindowLimiter::new(5, Duration::from_secs(1))?;
    /// drop(limiter.try_acquire_many(3).await?);
    /// assert_eq!(limiter.remaining(), 2);
    /// tokio::time::advance(Duration::from_secs(1)).await;
    /// assert_eq!(limiter.remaining(), 5); // a new window
    /// # Ok(())
    /// # }
    /// ```
    pub fn remaining(&self) -> u32 {
        let state = &self.state;
        let index = state.windows.index(state.clock.now_nanos());
        let count = Counter(state.counter.load(Ordering::Acquire)).count_in(index);
        state.windows.max().saturating_sub(count)
    }
}

impl FixedState {
    /// `now`, or the start of the counter's window if that is later (another
    /// caller read the clock after this one and counted there first).
    #[inline]
    fn catch_up(&self, now: u64, counter: Counter) -> u64 {
        match counter.later_than(self.windows.index(now)) {
            Some(later) => now.max(self.windows.start(later)),
            None => now,
        }
    }

    /// The clock, the counter and the pause.
    fn read(&self) -> (u64, Counter, u64) {
        let now = self.clock.now_nanos();
        let not_before = self.not_before.load(Ordering::Acquire);
        let counter = Counter(self.counter.load(Ordering::Acquire));
        (now, counter, not_before)
    }

    /// When a call costing `cost` may start, given the counter and the
    /// pause: `None` if at `now`.
    #[inline]
    fn blocked_until(&self, now: u64, counter: Counter, not_before: u64, cost: u32) -> Option<u64> {
        let count_in = |index| u64::from(counter.count_in(index));
        fixed_window::blocked_until(&self.windows, now, not_before, cost, count_in)
    }
}

impl WindowState for FixedState {
    fn windows(&self) -> &Windows {
        &self.windows
    }

    fn clock(&self) -> &Clock {
        &self.clock
    }

    fn reopened(&self) -> &ReleaseEvent {
        &self.reopened
    }

    /// One compare-and-swap.
    #[inline]
    fn decide(&self, cost: u32) -> Admission {
        let mut now = self.clock.now_nanos();
        let not_before = self.not_before.load(Ordering::SeqCst);
        let mut word = self.counter.load(Ordering::SeqCst);
        loop {
            let counter = Counter(word);
            // Decide in the newest window anyone has counted in: writing an
            // older window back would erase the newer window's count.
            now = self.catch_up(now, counter);
            let index = self.windows.index(now);
            if let Some(at) = self.blocked_until(now, counter, not_before, cost) {
                return Admission::Denied(Denial::until(self.clock.instant_at(at)));
            }
            let next = Counter::new(index, counter.count_in(index) + cost);
            // `SeqCst`, as `ReleaseEvent` requires of the second look.
            match self.counter.compare_exchange_weak(
                word,
                next.0,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Admission::Granted(Permit::with_token(index).with_cost(cost)),
                Err(current) => word = current,
            }
        }
    }

    fn look(&self, cost: u32) -> Option<u64> {
        let (now, counter, not_before) = self.read();
        self.blocked_until(now, counter, not_before, cost)
    }

    fn status(&self) -> (u32, Option<Duration>) {
        let (now, counter, not_before) = self.read();
        let blocked = |cost| self.blocked_until(now, counter, not_before, cost);
        self.windows.status(now, blocked)
    }

    /// The units count while their window lasts, and until a `clear`.
    fn recount(&self, index: u64, from: u32, to: u32) -> bool {
        let now = self.clock.now_nanos();
        let mut gave_back = false;
        let updated = self
            .counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |word| {
                let current = self.windows.index(self.catch_up(now, Counter(word)));
                // Read after the word: a `clear` sets it before emptying it.
                let cleared = self.cleared.load(Ordering::SeqCst).checked_sub(1);
                let (index, from, to) = refused(cleared, current, index, from, to);
                gave_back = to < from;
                let count = u64::from(Counter(word).count_in(current));
                let count = fixed_window::recount(index, current, count, from, to)?;
                let count = u32::try_from(count).unwrap_or(u32::MAX);
                Some(Counter::new(current, count).0)
            });
        updated.is_ok() && gave_back
    }

    fn pause_until(&self, nanos: u64) {
        self.not_before.fetch_max(nanos, Ordering::SeqCst);
    }

    fn reset(&self) {
        let now = self.clock.now_nanos();
        let index = self
            .windows
            .index(self.catch_up(now, Counter(self.counter.load(Ordering::SeqCst))));
        self.cleared.fetch_max(index + 1, Ordering::SeqCst);
        self.counter.store(0, Ordering::SeqCst);
        self.not_before.store(0, Ordering::SeqCst);
    }
}

impl crate::limiters::FreshLimiter for FixedWindowLimiter {
    /// ```
    /// use tower_limits::limiters::FreshLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let template = tower_limits::FixedWindowLimiter::new(10, std::time::Duration::from_secs(1))?;
    /// let fresh = template.fresh();
    /// # let _ = fresh;
    /// # Ok(())
    /// # }
    /// ```
    fn fresh(&self) -> Self {
        Self::build(self.state.windows, self.state.clock.clone())
    }
}

impl WindowBacked for FixedWindowLimiter {
    type State = FixedState;

    fn state(&self) -> &Arc<FixedState> {
        &self.state
    }
}

impl fmt::Debug for FixedWindowLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let windows = &self.state.windows;
        f.debug_struct("FixedWindowLimiter")
            .field("max_executions", &windows.max())
            .field("window", &windows.window())
            .field("unix_aligned", &windows.is_unix_aligned())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::Counter;

    #[test]
    fn a_later_window_is_recognised_across_the_index_wrap() {
        assert_eq!(Counter::new(7, 3).later_than(5), Some(7));
        assert_eq!(Counter::new(5, 3).later_than(5), None, "the same window");
        assert_eq!(Counter::new(4, 3).later_than(5), None, "an older window");
        let wrap = 1 << 32;
        assert_eq!(
            Counter::new(wrap + 1, 1).later_than(wrap - 2),
            Some(wrap + 1)
        );
        assert_eq!(Counter::new(wrap - 2, 1).later_than(wrap + 1), None);
    }
}
