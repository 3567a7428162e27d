//! [`LeakyBucketLimiter`]: a constant drip with a bounded queue.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::algorithms::gcra::{CellConfig, Names};
use crate::clock::{Clock, duration_nanos, paced_from};
use crate::error::{BucketFull, ConfigError, CostTooHigh, LimiterError};
use crate::limiter::{
    Admission, Booking, Denial, Limiter, LimiterFuture, Permit, ReleaseEvent, Unbook,
};
use crate::rate::Rate;

/// Starts calls at a constant drip of `count` per `period`, never in bursts
/// but for the slots a late caller catches up (see Timing), and queues at
/// most `queue_capacity` callers behind the drip: the leaky bucket *as a
/// queue*.
///
/// # How it works
///
/// The drip admits one unit every `interval = period / count` (rounded up to
/// a whole nanosecond, so the rate is never exceeded). A call costing `n`
/// occupies `n` slots of the drip: it is admitted only once the previous
/// call's slots have passed, and the next call may start `n` intervals after
/// its slots began. A call admitted up to 10 ms after the drip freed takes
/// the drip from when it freed, but from no earlier than the
/// [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE) τ (2 ms) before
/// its start (see Timing below): admissions are one interval apart on
/// average, and any span `t` holds at most `1 + ⌊(t + τ) / interval⌋` of
/// them (`1 + ⌊t / interval⌋` without the tolerance).
///
/// A call that finds the drip busy is not admitted but **booked**: it gets
/// the next free slots after the units already booked, and its [`Denial`]
/// names the start of its slot. The bookings are the bucket's queue: at most
/// `queue_capacity` units may be booked at once. A call that would book past
/// that fails at once with [`BucketFull`] (the bucket overflows), which names
/// when the queue will have room again as its callers start.
///
/// The [`Denial`] holds the booking: it is given back when the denial is
/// dropped or waited out, so a caller that gives up (a timeout, a lost
/// `select!` branch) leaves the queue at once and holds nothing. Callers
/// booked behind it keep their slots.
///
/// A booking is a place in the queue, not a ticket for its slot: the limiter
/// does not know who holds it. Whoever asks once the drip is free starts. A
/// caller that comes back to find the drip taken (it woke late, or a
/// newcomer took a slot that a caller who gave up left free) is booked
/// again, at the back.
/// Behind a [`LimitLayer`](crate::LimitLayer), whose queue is first come,
/// first served, only the caller at its head asks the bucket, so callers
/// start in arrival order and the layer's
/// [`max_waiting`](crate::LimitLayer::max_waiting) bounds the queue; the
/// bucket's own queue then matters for callers that share it directly
/// ([`LimiterExt::acquire`](crate::LimiterExt::acquire) in many tasks, or
/// several layers around one bucket).
///
/// The state is three atomic words (the end of the drip in progress, the
/// units booked, a pause); a decision is one compare-and-swap, and a
/// booking one more.
///
/// # When to pick it
///
/// * The downstream cannot absorb any burst (a legacy system, a fragile
///   database): output is smoothed to the drip whatever the arrival pattern.
/// * Excess demand should be turned away rather than queued without bound:
///   the queue capacity caps how long a caller can be told to wait
///   (`queue_capacity × interval`).
/// * Prefer a [`RateLimiter`](crate::RateLimiter) of a token bucket or GCRA
///   [`Quota`](crate::store::Quota) when short bursts are fine (most
///   APIs), and [`DelayLimiter`](crate::DelayLimiter) for a fixed gap with no
///   queue bound.
///
/// # Timing
///
/// A caller that waits wakes on a tokio timer, which fires on whole
/// milliseconds, up to about 2 ms after its slot, and later on a busy
/// runtime. Counted from when it did start, each late wake-up would cost
/// the rate its lateness (half the rate at 1,000 calls a second); taking
/// the drip from up to τ back, the bucket keeps its rate, at 10,000 calls
/// a second as at 20, and admits at most `count + ⌈count × τ / period⌉`
/// calls in any window of `period`. Lateness past τ is still lost.
///
/// A refund frees the drip time its permit took for the next caller that
/// asks; callers already booked keep their slots (they are not woken, so
/// they do not lose their place). [`clear`](Limiter::clear) forgets the
/// bookings and wakes every booked caller.
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::limiter::Admission;
/// use tower_limits::{LeakyBucketLimiter, Limiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 10 a second, up to 2 units waiting.
/// let bucket = LeakyBucketLimiter::new(10, Duration::from_secs(1), 2)?;
/// let start = Instant::now();
/// assert!(matches!(bucket.try_acquire().await?, Admission::Granted(_)));
///
/// // A burst: the next two are booked 100 ms apart (each denial holds its
/// // caller's booking)...
/// let mut booked = Vec::new();
/// for slot in 1..=2 {
///     let Admission::Denied(denial) = bucket.try_acquire().await? else { unreachable!() };
///     assert_eq!(denial.retry_at(), Some(start + Duration::from_millis(100 * slot)));
///     booked.push(denial);
/// }
/// // ...and the bucket overflows.
/// assert!(bucket.try_acquire().await.is_err());
///
/// // The first booked caller comes back at its slot and starts.
/// booked.remove(0).wait().await;
/// assert!(matches!(bucket.try_acquire().await?, Admission::Granted(_)));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LeakyBucketLimiter {
    state: Arc<BucketState>,
}

struct BucketState {
    config: CellConfig,
    /// Nanoseconds per unit.
    interval: u64,
    /// The end of the drip in progress, in nanoseconds since the clock's
    /// epoch: nothing starts before it.
    drip: AtomicU64,
    /// The units booked by callers that still hold their denial, in the low
    /// half; in the high half, the generation, which `clear` moves on so that
    /// bookings from before it give nothing back after it.
    booked: AtomicU64,
    /// Nothing starts before this (a pause).
    not_before: AtomicU64,
    /// Fired by `clear`.
    reopened: ReleaseEvent,
    clock: Clock,
}

/// What the parameters are called in [`LeakyBucketLimiter::new`].
const NAMES: Names = Names {
    count: "count",
    burst: "queue_capacity",
};

impl LeakyBucketLimiter {
    /// A bucket dripping `count` calls per `period`, with room for
    /// `queue_capacity` units waiting behind the drip. A call that starts
    /// after the drip freed takes it from up to
    /// [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE) τ (2 ms) back:
    /// at most `count + ⌈count × τ / period⌉` calls in any window of
    /// `period`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the field if `count` is 0, `period` is zero,
    /// `queue_capacity` is 0, `count` exceeds one per nanosecond of
    /// `period`, or the queue would span more than 100 years.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::LeakyBucketLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let bucket = LeakyBucketLimiter::new(50, Duration::from_secs(1), 100)?;
    /// assert_eq!(bucket.interval(), Duration::from_millis(20));
    /// assert_eq!(bucket.queue_capacity(), 100);
    ///
    /// let second = Duration::from_secs(1);
    /// assert_eq!(LeakyBucketLimiter::new(0, second, 1).unwrap_err().field(), "count");
    /// assert_eq!(LeakyBucketLimiter::new(1, Duration::ZERO, 1).unwrap_err().field(), "period");
    /// assert_eq!(LeakyBucketLimiter::new(1, second, 0).unwrap_err().field(), "queue_capacity");
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(count: u32, period: Duration, queue_capacity: u32) -> Result<Self, ConfigError> {
        let config = CellConfig::new(NAMES, u64::from(count), period, queue_capacity)?;
        Ok(Self::build(config, Clock::default()))
    }

    /// [`new`](LeakyBucketLimiter::new) with the drip given as a [`Rate`].
    ///
    /// # Errors
    ///
    /// [`ConfigError`] on the rules of [`new`](LeakyBucketLimiter::new).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{LeakyBucketLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = LeakyBucketLimiter::from_rate("5/s".parse::<Rate>()?, 10)?;
    /// assert_eq!(bucket.interval(), Duration::from_millis(200));
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_rate(rate: Rate, queue_capacity: u32) -> Result<Self, ConfigError> {
        Self::new(rate.count(), rate.per(), queue_capacity)
    }

    /// The same bucket reading `clock` (see [`Clock`]); state starts afresh.
    ///
    /// Call it before handing out clones: the limiter it returns shares no
    /// state with them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::clock::Clock;
    /// use tower_limits::{LeakyBucketLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = LeakyBucketLimiter::new(1, Duration::from_secs(60), 1)?;
    /// bucket.record_start().await?;
    /// assert!(!bucket.can_proceed().await?);
    ///
    /// let bucket = bucket.with_clock(Clock::fast());
    /// assert_eq!(bucket.interval(), Duration::from_secs(60)); // same configuration
    /// assert!(bucket.can_proceed().await?); // fresh state
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_clock(self, clock: Clock) -> Self {
        Self::build(self.state.config, clock)
    }

    fn build(config: CellConfig, clock: Clock) -> Self {
        let interval = duration_nanos(config.interval());
        Self {
            state: Arc::new(BucketState {
                config,
                interval,
                drip: AtomicU64::new(0),
                booked: AtomicU64::new(0),
                not_before: AtomicU64::new(0),
                reopened: ReleaseEvent::new(),
                clock,
            }),
        }
    }

    /// The drip interval, `period / count` rounded up to a whole nanosecond.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::LeakyBucketLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let bucket = LeakyBucketLimiter::new(3, Duration::from_secs(1), 1)?;
    /// assert_eq!(bucket.interval(), Duration::from_nanos(333_333_334));
    /// # Ok(())
    /// # }
    /// ```
    pub fn interval(&self) -> Duration {
        self.state.config.interval()
    }

    /// How many units may wait behind the drip.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::LeakyBucketLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// assert_eq!(LeakyBucketLimiter::new(1, Duration::from_secs(1), 8)?.queue_capacity(), 8);
    /// # Ok(())
    /// # }
    /// ```
    pub fn queue_capacity(&self) -> u32 {
        self.state.config.burst()
    }

    /// How many units are booked behind the drip now: those of the callers
    /// that hold a booking's [`Denial`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{LeakyBucketLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = LeakyBucketLimiter::new(1, Duration::from_secs(1), 5)?;
    /// drop(bucket.try_acquire().await?); // starts at once
    /// let booked = bucket.try_acquire_many(3).await?; // booked: 3 units
    /// assert_eq!(bucket.queued(), 3);
    /// drop(booked); // its caller gave up
    /// assert_eq!(bucket.queued(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn queued(&self) -> u32 {
        Bookings(self.state.booked.load(Ordering::Acquire)).units()
    }
}

/// The word of booked units and its generation.
#[derive(Clone, Copy)]
struct Bookings(u64);

impl Bookings {
    #[inline]
    fn units(self) -> u32 {
        self.0 as u32
    }

    #[inline]
    fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }

    #[inline]
    fn with_units(self, units: u32) -> Self {
        Self(u64::from(self.generation()) << 32 | u64::from(units))
    }

    /// No bookings, in a new generation.
    fn cleared(self) -> Self {
        Self(u64::from(self.generation().wrapping_add(1)) << 32)
    }
}

impl BucketState {
    /// The time `cost` units occupy on the drip.
    #[inline]
    fn weight(&self, cost: u32) -> u64 {
        self.interval.saturating_mul(u64::from(cost))
    }

    /// When the drip is next free: the end of the drip in progress or of a
    /// pause.
    #[inline]
    fn free_at(&self) -> u64 {
        let drip = self.drip.load(Ordering::SeqCst);
        drip.max(self.not_before.load(Ordering::SeqCst))
    }

    /// Starts a call costing `cost` at `now` if the drip is free; else
    /// says when it frees. A start at most
    /// [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE) after the drip
    /// freed takes the drip from then; the permit's token is where its drip
    /// starts, for refunds.
    #[inline]
    fn start(&self, now: u64, cost: u32) -> Result<Permit, u64> {
        let not_before = self.not_before.load(Ordering::SeqCst);
        let mut drip = self.drip.load(Ordering::SeqCst);
        loop {
            let free_at = drip.max(not_before);
            if now < free_at {
                return Err(free_at);
            }
            // `SeqCst`, as `ReleaseEvent` requires of the second look.
            let from = paced_from(free_at, now);
            let ends = from.saturating_add(self.weight(cost));
            match self
                .drip
                .compare_exchange_weak(drip, ends, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return Ok(Permit::with_token(from).with_cost(cost)),
                Err(current) => drip = current,
            }
        }
    }

    /// The slot a call costing `cost` would book behind the `ahead` units
    /// booked before it, the drip being busy until `free_at`; or
    /// [`BucketFull`].
    ///
    /// Each unit ahead starts one interval after the one before it, giving
    /// its booking back as it does; the error names when enough of them
    /// will have started for the call to fit.
    #[inline]
    fn slot(&self, ahead: u32, free_at: u64, cost: u32) -> Result<u64, BucketFull> {
        let capacity = self.config.burst();
        match (u64::from(ahead) + u64::from(cost)).checked_sub(u64::from(capacity)) {
            Some(excess) if excess > 0 => {
                let fits_at = free_at.saturating_add(self.interval.saturating_mul(excess - 1));
                Err(BucketFull::new(capacity, self.clock.instant_at(fits_at)))
            }
            _ => Ok(free_at.saturating_add(self.weight(ahead))),
        }
    }

    /// Books the slot of a call costing `cost`, the drip being busy until
    /// `free_at`: the slot, and the booking its denial holds.
    fn book(self: &Arc<Self>, free_at: u64, cost: u32) -> Result<(u64, Booking), BucketFull> {
        let mut word = self.booked.load(Ordering::SeqCst);
        loop {
            let booked = Bookings(word);
            let slot = self.slot(booked.units(), free_at, cost)?;
            let next = booked.with_units(booked.units() + cost);
            match self.booked.compare_exchange_weak(
                word,
                next.0,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    let token = booked.with_units(cost).0;
                    return Ok((
                        slot,
                        Booking::new(Arc::clone(self) as Arc<dyn Unbook>, token),
                    ));
                }
                Err(current) => word = current,
            }
        }
    }

    /// Starts the call, or books its slot (listening for `clear` first, so
    /// that a reset in between is not missed), or overflows.
    #[inline]
    fn admit(self: &Arc<Self>, cost: u32) -> Result<Admission, LimiterError> {
        CostTooHigh::check(cost, self.config.burst())?;
        let now = self.clock.now_nanos();
        match self.start(now, cost) {
            Ok(permit) => Ok(Admission::Granted(permit)),
            Err(_) => self.book_or_start(now, cost),
        }
    }

    /// The rest of [`admit`](Self::admit) once the drip was found busy.
    #[cold]
    #[inline(never)]
    fn book_or_start(self: &Arc<Self>, now: u64, cost: u32) -> Result<Admission, LimiterError> {
        let listener = self.reopened.listen();
        match self.start(now, cost) {
            Ok(permit) => Ok(Admission::Granted(permit)),
            Err(free_at) => {
                let (slot, booking) = self.book(free_at, cost).map_err(LimiterError::new)?;
                let denial = Denial::until(self.clock.instant_at(slot));
                Ok(Admission::Denied(
                    denial.or_released(listener).holding(booking),
                ))
            }
        }
    }

    /// What [`admit`](Self::admit) would answer now, booking nothing.
    fn look(&self, cost: u32) -> Result<Option<Denial>, LimiterError> {
        CostTooHigh::check(cost, self.config.burst())?;
        let now = self.clock.now_nanos();
        let free_at = self.free_at();
        if now >= free_at {
            return Ok(None);
        }
        let ahead = Bookings(self.booked.load(Ordering::SeqCst)).units();
        let slot = self.slot(ahead, free_at, cost).map_err(LimiterError::new)?;
        Ok(Some(Denial::until(self.clock.instant_at(slot))))
    }

    /// Moves the end of the drip that a start at `start` costing `from`
    /// opened to `to` units: shorter only if nothing moved it since, longer
    /// always (the difference is added to whatever the drip is now).
    fn redrip(&self, start: u64, from: u32, to: u32) {
        let old = start.saturating_add(self.weight(from));
        let new = start.saturating_add(self.weight(to));
        let moved = self
            .drip
            .compare_exchange(old, new, Ordering::SeqCst, Ordering::Relaxed);
        if moved.is_err() && to > from {
            self.drip
                .fetch_add(self.weight(to - from), Ordering::SeqCst);
        }
    }
}

impl Unbook for BucketState {
    /// Gives the units back, unless `clear` has started a new generation.
    fn unbook(&self, token: u64) {
        let given = Bookings(token);
        // Declines only for an older generation: nothing to give back then.
        let _ = self
            .booked
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |word| {
                let booked = Bookings(word);
                let units = booked.units().checked_sub(given.units())?;
                (booked.generation() == given.generation()).then(|| booked.with_units(units).0)
            });
    }
}

impl crate::limiters::FreshLimiter for LeakyBucketLimiter {
    /// ```
    /// use tower_limits::limiters::FreshLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let template = tower_limits::LeakyBucketLimiter::new(10, std::time::Duration::from_secs(1), 5)?;
    /// let fresh = template.fresh();
    /// # let _ = fresh;
    /// # Ok(())
    /// # }
    /// ```
    fn fresh(&self) -> Self {
        Self::build(self.state.config, self.state.clock.clone())
    }
}

impl Limiter for LeakyBucketLimiter {
    /// Starts a call costing `cost` if the drip is free (it then occupies
    /// `cost` intervals); else books its slot and names it, or fails with
    /// [`BucketFull`] when the queue has no room. A cost above the queue
    /// capacity fails with [`CostTooHigh`].
    #[inline]
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        LimiterFuture::ready(self.state.admit(cost))
    }

    /// Whether the drip is free now.
    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        let state = &self.state;
        LimiterFuture::ready(Ok(state.clock.now_nanos() >= state.free_at()))
    }

    /// The denial a call costing `cost` would get (naming the slot it would
    /// book), or the [`BucketFull`] error; books nothing.
    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        LimiterFuture::ready(self.state.look(cost))
    }

    /// Occupies one interval of the drip, after whatever occupies it now.
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let state = &self.state;
        let now = state.clock.now_nanos();
        // The closure never declines, so this cannot fail.
        let _ = state
            .drip
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |drip| {
                Some(drip.max(now).saturating_add(state.interval))
            });
        LimiterFuture::ready(Ok(()))
    }

    /// Nothing to do: only starts occupy the drip.
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }

    /// Now if the drip is free; else the slot a new call would book (behind
    /// every booking, whether or not the queue has room for it).
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        let state = &self.state;
        let now = state.clock.now_nanos();
        let free_at = state.free_at();
        let at = if now >= free_at {
            now
        } else {
            let ahead = Bookings(state.booked.load(Ordering::SeqCst)).units();
            free_at.saturating_add(state.weight(ahead))
        };
        LimiterFuture::ready(Ok(state.clock.instant_at(at)))
    }

    /// A pause: nothing starts before `at`. It never shortens a wait; the
    /// queue counts from the end of the pause.
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let nanos = self.state.clock.nanos_at(at);
        self.state.not_before.fetch_max(nanos, Ordering::SeqCst);
        LimiterFuture::ready(Ok(()))
    }

    /// A free drip, no bookings and no pause; booked callers are woken.
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let state = &self.state;
        state.drip.store(0, Ordering::SeqCst);
        // The closure never declines, so this cannot fail.
        let _ = state
            .booked
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |word| {
                Some(Bookings(word).cleared().0)
            });
        state.not_before.store(0, Ordering::SeqCst);
        state.reopened.notify();
        LimiterFuture::ready(Ok(()))
    }

    /// Frees the drip time the permit took, if nothing has started since,
    /// for the next caller that asks; booked callers keep their slots.
    fn refund(&self, permit: Permit) {
        if let (Some(start), cost) = permit.disarm() {
            self.state.redrip(start, cost, 0);
        }
    }

    /// Makes the permit occupy `actual` intervals of the drip (at most the
    /// queue capacity): fewer frees the rest if nothing has started since,
    /// more delays the drip by the difference.
    fn settle(&self, permit: &mut Permit, actual: u32) {
        if let Some(start) = permit.token() {
            let actual = actual.min(self.state.config.burst());
            self.state.redrip(start, permit.cost(), actual);
            permit.settled(actual, None);
        }
    }

    fn is_in_use(&self) -> bool {
        Arc::strong_count(&self.state) > 1
    }
}

impl fmt::Debug for LeakyBucketLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeakyBucketLimiter")
            .field("interval", &self.interval())
            .field("queue_capacity", &self.queue_capacity())
            .finish()
    }
}
