//! [`GcraLimiter`]: the Generic Cell Rate Algorithm (governor, redis-cell).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::cell::{Cells, Outcome};
use crate::algorithms::gcra::{CellConfig, Names};
use crate::clock::Clock;
use crate::error::{ConfigError, LimiterError};
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit};
use crate::limiters::InlineState;
use crate::quota_status::QuotaStatus;
use crate::rate::Rate;

/// `count` calls per `period`, evenly paced, with at most `burst` at once:
/// the Generic Cell Rate Algorithm of ATM networks, governor and redis-cell.
///
/// Each call is a *cell* that occupies the emission interval
/// `T = period / count`. The limiter keeps one number, the theoretical
/// arrival time (TAT), in one atomic word, and decides with one
/// compare-and-swap: a call costing `n` is admitted iff
/// `TAT + n·T − burst·T ≤ now`, and then moves the TAT to
/// `max(TAT, now) + n·T`. A denial names the instant the call would conform.
///
/// A waiting caller wakes on tokio's millisecond timer, up to about 2 ms
/// after that instant: a grant that comes up to 10 ms after the TAT counts
/// its cells from the TAT, but from no earlier than the
/// [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE) τ (2 ms) before
/// now, so a late wake-up does not cost the rate its slot. In any interval
/// of length `t`, admitted calls cost at most `burst + ⌊(t + τ) / T⌋` in
/// total (`burst + ⌊t / T⌋` for a strict GCRA, as a store's [`Quota`](crate::store::Quota)
/// decides unless built [`with_pacing_tolerance`](crate::store::Quota::with_pacing_tolerance)).
///
/// # When to pick it
///
/// * **A rate with a bounded burst, in O(1) memory and one CAS.** With the
///   default burst of 1, calls take slots `T` apart, a late one up to τ
///   back, so no window of `period` holds more than
///   `count + ⌈count × τ / period⌉` of them (1,002 for 1,000 a second; like
///   [`EvenlySpacedRateLimiter`](crate::EvenlySpacedRateLimiter), lock-free
///   and without its duration credit). With [`with_burst`](Self::with_burst)
///   an idle limiter admits `burst` calls at once, then one per `T`.
/// * **Numbers for `RateLimit` headers.** [`peek_state`](Self::peek_state)
///   and [`try_acquire_with_state`](Self::try_acquire_with_state) report a
///   [`GcraState`] with the five values of redis-cell's `CL.THROTTLE` reply.
/// * **A token bucket.** [`token_bucket`](Self::token_bucket) configures the
///   same algorithm as "a bucket of `capacity` tokens, refilled with
///   `refill` per `period`", how most rate-limited APIs state their
///   contract ("`R` per second on average, bursts of up to `B`"), and
///   [`tokens`](Self::tokens) reads the bucket. A token bucket *is* GCRA
///   with a burst of `capacity`: the TAT is the instant the bucket will be
///   full again.
/// * Prefer [`RateLimiter`](crate::RateLimiter) for a limit shared through
///   a store.
///
/// # Precision
///
/// `T` is `period / count` rounded up to a whole nanosecond, so the rate is
/// never exceeded and is exact when `period` is a multiple of `count`
/// nanoseconds. Denials name nanosecond instants, but tokio timers fire on
/// whole milliseconds: the pacing tolerance is what lets callers who wait
/// keep up with the rate, at 10,000 calls a second as at 20.
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::{GcraLimiter, LimiterExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 10 per second, up to 3 at once.
/// let limiter = GcraLimiter::new(10, Duration::from_secs(1))?.with_burst(3)?;
/// let start = Instant::now();
/// for _ in 0..5 {
///     drop(limiter.acquire().await?);
/// }
/// // Three at once, then one every 100 ms.
/// assert_eq!(start.elapsed(), Duration::from_millis(200));
/// # Ok(())
/// # }
/// ```
#[doc(alias = "TokenBucketLimiter")]
#[doc(alias = "token bucket")]
#[derive(Clone)]
pub struct GcraLimiter {
    cells: Arc<Cells>,
}

/// What the parameters are called in [`GcraLimiter`]'s constructors.
impl GcraLimiter {
    /// A limiter admitting `count` calls per `period`, evenly paced (a burst
    /// of 1: calls take slots `period / count` apart).
    ///
    /// A call that comes after its slot (a waiter woken late) takes a slot
    /// at most [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE) τ
    /// (2 ms) before it, so the limiter delivers its rate to callers who
    /// wait, and admits at most `count + ⌈count × τ / period⌉` calls in any
    /// window of `period`: one more at up to 500 a second, 2 more at 1,000.
    ///
    /// Two differences from governor's `Quota`, both on the strict side:
    /// governor's burst defaults to `count` (10 at once for "10 per second";
    /// here, add [`with_burst(count)`](GcraLimiter::with_burst) for that),
    /// and the interval `period / count` is rounded up to a whole nanosecond
    /// where governor rounds it down, so the rate never exceeds `count` per
    /// `period`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the field if `count` is 0, `period` is zero,
    /// `count` exceeds one per nanosecond of `period`, or `period / count` is
    /// longer than 100 years.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::GcraLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = GcraLimiter::new(30, Duration::from_secs(60))?;
    /// assert_eq!(limiter.interval(), Duration::from_secs(2));
    /// assert_eq!(limiter.burst(), 1);
    ///
    /// let error = GcraLimiter::new(0, Duration::from_secs(60)).unwrap_err();
    /// assert_eq!(error.field(), "count");
    /// let error = GcraLimiter::new(30, Duration::ZERO).unwrap_err();
    /// assert_eq!(error.field(), "period");
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(count: u32, period: Duration) -> Result<Self, ConfigError> {
        let config = CellConfig::new(Names::GCRA, u64::from(count), period, 1)?;
        Ok(Self {
            cells: Cells::shared(config, Clock::default()),
        })
    }

    /// A token bucket: full at first with `capacity` tokens, refilled with
    /// `refill` tokens per `period`; a call costing `n` takes `n` tokens, or
    /// waits until the bucket holds them. The same algorithm as
    /// [`new`](GcraLimiter::new) with [`with_burst(capacity)`](GcraLimiter::with_burst),
    /// validated and reported with the bucket's names.
    ///
    /// The bucket refills continuously, one token every `period / refill`
    /// (not `refill` at once at the end of each period), and lazily:
    /// nothing runs in the background. An idle period banks tokens up to the
    /// capacity, never more, so a surge after a lull can spend them at once.
    /// As for every GCRA here, a late caller may take tokens refilled up to
    /// [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE) τ (2 ms) before
    /// it came: at most `capacity + ⌊(t + τ) / interval⌋` tokens in any
    /// span `t`. For batches, ask for all the tokens in one decision with
    /// [`try_acquire_many`](crate::Limiter::try_acquire_many).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the field if `capacity` or `refill` is 0,
    /// `period` is zero, `refill` exceeds one token per nanosecond of
    /// `period`, or refilling the whole bucket would take over 100 years.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::{GcraLimiter, LimiterExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Bursts of 5, 2 tokens a second on average.
    /// let bucket = GcraLimiter::token_bucket(5, 2, Duration::from_secs(1))?;
    /// assert_eq!((bucket.burst(), bucket.interval()), (5, Duration::from_millis(500)));
    /// let start = Instant::now();
    /// for _ in 0..7 {
    ///     drop(bucket.acquire().await?);
    /// }
    /// // Five at once, then one every 500 ms.
    /// assert_eq!(start.elapsed(), Duration::from_secs(1));
    ///
    /// // Idle for a minute: the bucket fills up to 5, not 120.
    /// tokio::time::advance(Duration::from_secs(60)).await;
    /// assert_eq!(bucket.tokens(), 5);
    ///
    /// let error = GcraLimiter::token_bucket(0, 2, Duration::from_secs(1)).unwrap_err();
    /// assert_eq!(error.field(), "capacity");
    /// let error = GcraLimiter::token_bucket(5, 0, Duration::from_secs(1)).unwrap_err();
    /// assert_eq!(error.field(), "refill");
    /// # Ok(())
    /// # }
    /// ```
    #[doc(alias = "TokenBucketLimiter")]
    pub fn token_bucket(capacity: u32, refill: u32, period: Duration) -> Result<Self, ConfigError> {
        let config = CellConfig::new(Names::TOKEN_BUCKET, u64::from(refill), period, capacity)?;
        Ok(Self {
            cells: Cells::shared(config, Clock::default()),
        })
    }

    /// [`new`](GcraLimiter::new) with the limit given as a [`Rate`].
    ///
    /// # Errors
    ///
    /// [`ConfigError`] on the rules of [`new`](GcraLimiter::new).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{GcraLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = GcraLimiter::from_rate("100/m".parse::<Rate>()?)?;
    /// assert_eq!(limiter.interval(), Duration::from_millis(600));
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_rate(rate: Rate) -> Result<Self, ConfigError> {
        Self::new(rate.count(), rate.per())
    }

    /// Changes the rate and the burst at runtime, from the next decision
    /// on, on the rules of [`new`](GcraLimiter::new) and
    /// [`with_burst`](GcraLimiter::with_burst). Calls admitted recently
    /// still count: the cells they took stay taken (their lead over now is
    /// rescaled to the new interval), so a change never hands out a fresh
    /// burst. Callers waiting on the limiter are woken to ask again.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if the new values are invalid; the old ones stay.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{GcraLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // One a second, then the upstream allows ten a second.
    /// let limiter = GcraLimiter::new(1, Duration::from_secs(1))?;
    /// limiter.try_acquire().await?;
    /// assert!(matches!(limiter.try_acquire().await?, Admission::Denied(_)));
    ///
    /// limiter.set_limit(10, Duration::from_secs(1), 1)?;
    /// assert_eq!(limiter.interval(), Duration::from_millis(100));
    /// // The last call's second is now a tenth of one.
    /// tokio::time::advance(Duration::from_millis(100)).await;
    /// assert!(matches!(limiter.try_acquire().await?, Admission::Granted(_)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_limit(&self, count: u32, period: Duration, burst: u32) -> Result<(), ConfigError> {
        let config = CellConfig::new(Names::GCRA, u64::from(count), period, burst)?;
        self.cells.retune(config);
        Ok(())
    }

    /// The same rate with up to `burst` calls (cells) at once; state starts
    /// afresh, so call it before handing out clones.
    ///
    /// `burst` counts the call itself: redis-cell's `max_burst` is
    /// `burst - 1`, and governor's `Quota::allow_burst(b)` is `burst = b`.
    /// The tolerance τ of the ITU definition is `(burst - 1) × interval`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `burst` if it is 0 or `burst × interval` is
    /// longer than 100 years.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{GcraLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = GcraLimiter::new(1, Duration::from_secs(1))?.with_burst(2)?;
    /// assert_eq!(limiter.burst(), 2);
    /// limiter.record_start().await?;
    /// assert!(limiter.can_proceed().await?); // the second of the burst
    /// limiter.record_start().await?;
    /// assert!(!limiter.can_proceed().await?);
    ///
    /// let error = GcraLimiter::new(1, Duration::from_secs(1))?.with_burst(0).unwrap_err();
    /// assert_eq!(error.field(), "burst");
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_burst(self, burst: u32) -> Result<Self, ConfigError> {
        let config = self.cells.config().with_burst(Names::GCRA, burst)?;
        Ok(Self {
            cells: Cells::shared(config, self.cells.clock().clone()),
        })
    }

    /// The same limiter reading `clock` (see [`Clock`]); state starts afresh.
    ///
    /// Call it before handing out clones: the limiter it returns shares no
    /// state with them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::clock::Clock;
    /// use tower_limits::{GcraLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = GcraLimiter::new(1, Duration::from_secs(60))?;
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
        Self {
            cells: Cells::shared(self.cells.config(), clock),
        }
    }

    /// The emission interval `T`: `period / count`, rounded up to a whole
    /// nanosecond.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::GcraLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = GcraLimiter::new(3, Duration::from_secs(1))?;
    /// assert_eq!(limiter.interval(), Duration::from_nanos(333_333_334));
    /// # Ok(())
    /// # }
    /// ```
    pub fn interval(&self) -> Duration {
        self.cells.config().interval()
    }

    /// How many calls (cells) may go at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::GcraLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = GcraLimiter::new(10, Duration::from_secs(1))?.with_burst(5)?;
    /// assert_eq!(limiter.burst(), 5);
    /// # Ok(())
    /// # }
    /// ```
    pub fn burst(&self) -> u32 {
        self.cells.config().burst()
    }

    /// The whole cells (a bucket's tokens) that could go now: up to the
    /// burst.
    ///
    /// A pause set with
    /// [`set_next_available_time`](crate::Limiter::set_next_available_time)
    /// holds calls back without draining the bucket: the tokens are still
    /// counted here, and spendable when the pause ends.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{GcraLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = GcraLimiter::token_bucket(10, 1, Duration::from_secs(1))?;
    /// drop(bucket.try_acquire_many(4).await?);
    /// assert_eq!(bucket.tokens(), 6);
    /// tokio::time::advance(Duration::from_millis(2500)).await;
    /// assert_eq!(bucket.tokens(), 8); // two and a half came back
    /// # Ok(())
    /// # }
    /// ```
    pub fn tokens(&self) -> u32 {
        self.cells.look(0).map_or(0, |outcome| outcome.available())
    }

    /// What [`try_acquire_with_state`](Self::try_acquire_with_state) would
    /// answer for a call costing `cost`, without taking anything: redis-cell's
    /// `CL.THROTTLE` reply, as if the call were made now.
    ///
    /// `peek_state(0)` reads the current state: how many calls fit now, and
    /// when the limiter is back to a full burst.
    ///
    /// # Errors
    ///
    /// [`CostTooHigh`](crate::error::CostTooHigh) inside a [`LimiterError`]
    /// if `cost` exceeds the burst.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{GcraLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = GcraLimiter::new(1, Duration::from_secs(1))?.with_burst(5)?;
    /// drop(limiter.try_acquire_many(2).await?);
    ///
    /// let now = limiter.peek_state(0)?;
    /// assert_eq!(now.remaining(), 3);
    /// assert_eq!(now.reset_after(), Duration::from_secs(2));
    ///
    /// let four = limiter.peek_state(4)?;
    /// assert!(four.is_limited());
    /// assert_eq!(four.retry_after(), Some(Duration::from_secs(1)));
    /// assert_eq!(limiter.peek_state(0)?, now); // peeking took nothing
    /// # Ok(())
    /// # }
    /// ```
    pub fn peek_state(&self, cost: u32) -> Result<GcraState, LimiterError> {
        Ok(self.state(self.cells.look(cost)?))
    }

    /// Takes one call's cell if it conforms now, else says when it will: a
    /// plain, synchronous check (governor's `check()`), cheaper than
    /// [`try_acquire`](crate::Limiter::try_acquire) because there is no
    /// permit to hand out. A denial takes nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::GcraLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = GcraLimiter::new(2, Duration::from_secs(1))?.with_burst(2)?;
    /// assert!(limiter.check().is_ok());
    /// assert!(limiter.check().is_ok());
    /// let retry_at = limiter.check().unwrap_err();
    /// tokio::time::sleep_until(retry_at).await; // one interval: 500 ms
    /// assert!(limiter.check().is_ok());
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub fn check(&self) -> Result<(), Instant> {
        self.cells.check_one()
    }

    /// [`try_acquire_many`](crate::Limiter::try_acquire_many), also reporting
    /// the limiter's state after the decision: the numbers an HTTP server
    /// puts in `RateLimit` and `Retry-After` headers.
    ///
    /// # Errors
    ///
    /// [`CostTooHigh`](crate::error::CostTooHigh) inside a [`LimiterError`]
    /// if `cost` exceeds the burst.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::GcraLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // redis-cell's `CL.THROTTLE user123 15 30 60 1`: 30 per minute, a
    /// // max_burst of 15 (so 16 at once).
    /// let limiter = GcraLimiter::new(30, Duration::from_secs(60))?.with_burst(16)?;
    /// let (admission, state) = limiter.try_acquire_with_state(1)?;
    /// assert!(matches!(admission, Admission::Granted(_)));
    /// assert!(!state.is_limited());
    /// assert_eq!(state.limit(), 16);
    /// assert_eq!(state.remaining(), 15);
    /// assert_eq!(state.retry_after(), None); // redis-cell's -1
    /// assert_eq!(state.reset_after(), Duration::from_secs(2));
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire_with_state(
        &self,
        cost: u32,
    ) -> Result<(Admission, GcraState), LimiterError> {
        let (admission, outcome) = self.cells.admit_reporting(cost)?;
        Ok((admission, self.state(outcome)))
    }

    fn state(&self, outcome: Outcome) -> GcraState {
        let since_now = |at: u64| Duration::from_nanos(at.saturating_sub(outcome.now));
        let paused = outcome.not_before > outcome.now;
        GcraState {
            limited: outcome.retry_at.is_some(),
            limit: outcome.config.burst(),
            remaining: if paused { 0 } else { outcome.available() },
            reset_after: since_now(outcome.tat.max(outcome.not_before)),
            retry_after: outcome.retry_at.map(since_now),
        }
    }
}

impl crate::limiters::FreshLimiter for GcraLimiter {
    /// ```
    /// use tower_limits::limiters::FreshLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let template = tower_limits::GcraLimiter::new(10, std::time::Duration::from_secs(1))?;
    /// let fresh = template.fresh();
    /// # let _ = fresh;
    /// # Ok(())
    /// # }
    /// ```
    fn fresh(&self) -> Self {
        Self {
            cells: Cells::shared(self.cells.config(), self.cells.clock().clone()),
        }
    }

    /// Its state is one TAT, kept inline by a keyed limiter.
    ///
    /// ```
    /// use tower_limits::limiters::FreshLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let template = tower_limits::GcraLimiter::new(10, std::time::Duration::from_secs(1))?;
    /// assert!(template.inline_state().is_some());
    /// # Ok(())
    /// # }
    /// ```
    fn inline_state(&self) -> Option<crate::limiters::InlineState<Self>> {
        let config = self.cells.config();
        let clock = self.cells.clock().clone();
        let make = |template: &Self, tat| {
            let (config, clock) = (template.cells.config(), template.cells.clock().clone());
            Self {
                cells: Cells::with_tat(config, clock, tat),
            }
        };
        let tat_of =
            |template: &Self, limiter: &Self| limiter.cells.inline_tat(template.cells.config());
        Some(InlineState::new(config, clock, self.fresh(), make, tat_of))
    }
}

impl Limiter for GcraLimiter {
    /// One CAS, taking one cell.
    #[inline]
    fn try_acquire(&self) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        self.try_acquire_many(1)
    }

    /// One CAS: a call costing `cost` takes `cost` cells.
    #[inline]
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        LimiterFuture::ready(self.cells.admit(cost))
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        LimiterFuture::ready(Ok(self.cells.can_proceed()))
    }

    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        LimiterFuture::ready(self.cells.peek(cost))
    }

    /// The burst, refilled from empty in burst × interval; the cells
    /// that could go now, and when more could.
    fn quota_status(&self) -> LimiterFuture<'_, Result<Option<QuotaStatus>, LimiterError>> {
        LimiterFuture::ready(Ok(Some(self.cells.quota_status())))
    }

    /// Takes one cell even if it does not conform.
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.cells.take_one();
        LimiterFuture::ready(Ok(()))
    }

    /// Nothing to do: only starts count.
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }

    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        LimiterFuture::ready(Ok(self.cells.next_available()))
    }

    /// A pause: nothing starts before `at`. It never shortens a wait
    /// and leaves the cells as they are.
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.cells.pause_until(at);
        LimiterFuture::ready(Ok(()))
    }

    /// Back to a full burst, with no pause.
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.cells.clear();
        LimiterFuture::ready(Ok(()))
    }

    /// Gives the cells back if nothing was granted, recorded or
    /// cleared since the permit's grant; otherwise they stay spent.
    fn refund(&self, permit: Permit) {
        self.cells.refund(permit);
    }

    /// A lower cost gives cells back on the rules of `refund`; a
    /// higher one (at most the burst) takes the extra cells, past the
    /// burst if need be.
    fn settle(&self, permit: &mut Permit, actual: u32) {
        self.cells.settle(permit, actual);
    }

    fn is_in_use(&self) -> bool {
        std::sync::Arc::strong_count(&self.cells) > 1
    }
}

impl fmt::Debug for GcraLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GcraLimiter")
            .field("interval", &self.interval())
            .field("burst", &self.burst())
            .field("tokens", &self.tokens())
            .finish()
    }
}

/// A [`GcraLimiter`]'s state around one decision: the reply of redis-cell's
/// `CL.THROTTLE`, with durations instead of whole seconds.
///
/// | `CL.THROTTLE key max_burst count period quantity` | tower-limits |
/// |---|---|
/// | `count`, `period` | [`GcraLimiter::new(count, period)`](GcraLimiter::new) |
/// | `max_burst` | [`with_burst(max_burst + 1)`](GcraLimiter::with_burst) |
/// | `quantity` | the call's cost; 0 peeks |
/// | reply 1: limited (0 or 1) | [`is_limited`](Self::is_limited) |
/// | reply 2: `X-RateLimit-Limit` (`max_burst + 1`) | [`limit`](Self::limit) |
/// | reply 3: `X-RateLimit-Remaining` | [`remaining`](Self::remaining) |
/// | reply 4: `Retry-After` (−1 if allowed) | [`retry_after`](Self::retry_after) (`None` if allowed) |
/// | reply 5: `X-RateLimit-Reset` | [`reset_after`](Self::reset_after) |
///
/// Two differences: a cost above the limit is an error
/// ([`CostTooHigh`](crate::error::CostTooHigh)) rather than a reply that is
/// limited forever; and a pause set with
/// [`set_next_available_time`](crate::Limiter::set_next_available_time)
/// (which redis-cell has not) shows as `remaining` 0 and a `retry_after` and
/// `reset_after` no earlier than its end.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::{GcraLimiter, Limiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = GcraLimiter::new(1, Duration::from_secs(1))?.with_burst(2)?;
/// limiter.try_acquire_with_state(2)?;
/// let (_, state) = limiter.try_acquire_with_state(1)?;
/// assert!(state.is_limited());
/// assert_eq!((state.limit(), state.remaining()), (2, 0));
/// assert_eq!(state.retry_after(), Some(Duration::from_secs(1)));
/// assert_eq!(state.reset_after(), Duration::from_secs(2));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcraState {
    limited: bool,
    limit: u32,
    remaining: u32,
    reset_after: Duration,
    retry_after: Option<Duration>,
}

impl GcraState {
    /// Whether the call was (or would be) denied.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::GcraLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = GcraLimiter::new(1, Duration::from_secs(1))?.with_burst(2)?;
    /// assert!(!limiter.try_acquire_with_state(1)?.1.is_limited());
    /// assert!(!limiter.try_acquire_with_state(1)?.1.is_limited());
    /// assert!(limiter.try_acquire_with_state(1)?.1.is_limited()); // the burst is spent
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_limited(&self) -> bool {
        self.limited
    }

    /// The burst: how many calls may go at once (redis-cell's
    /// `max_burst + 1`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::GcraLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // redis-cell's max_burst of 15.
    /// let limiter = GcraLimiter::new(30, Duration::from_secs(60))?.with_burst(16)?;
    /// assert_eq!(limiter.peek_state(0)?.limit(), 16);
    /// # Ok(())
    /// # }
    /// ```
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// How many calls costing 1 could go right after this decision, at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::GcraLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = GcraLimiter::new(1, Duration::from_secs(1))?.with_burst(5)?;
    /// let (_, state) = limiter.try_acquire_with_state(2)?;
    /// assert_eq!(state.remaining(), 3);
    /// tokio::time::advance(Duration::from_secs(1)).await; // one cell drips back
    /// assert_eq!(limiter.peek_state(0)?.remaining(), 4);
    /// # Ok(())
    /// # }
    /// ```
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// How long until the limiter is back to a full burst (its initial
    /// state; redis-cell lets the key expire then).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::GcraLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = GcraLimiter::new(1, Duration::from_secs(1))?.with_burst(5)?;
    /// assert_eq!(limiter.peek_state(0)?.reset_after(), Duration::ZERO); // untouched
    /// let (_, state) = limiter.try_acquire_with_state(3)?;
    /// assert_eq!(state.reset_after(), Duration::from_secs(3));
    /// tokio::time::advance(Duration::from_secs(1)).await;
    /// assert_eq!(limiter.peek_state(0)?.reset_after(), Duration::from_secs(2));
    /// # Ok(())
    /// # }
    /// ```
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }

    /// How long until the denied call would be admitted; `None` if it was
    /// admitted.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::GcraLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // One call every 2 s.
    /// let limiter = GcraLimiter::new(30, Duration::from_secs(60))?;
    /// assert_eq!(limiter.try_acquire_with_state(1)?.1.retry_after(), None);
    /// let (_, denied) = limiter.try_acquire_with_state(1)?;
    /// assert_eq!(denied.retry_after(), Some(Duration::from_secs(2))); // a `Retry-After` of 2
    /// # Ok(())
    /// # }
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}
