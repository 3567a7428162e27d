//! [`ConcurrencyLimiter`]: at most `max` calls running at once.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::error::{ConfigError, CostTooHigh, LimiterError};
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

/// The slot word, which every grant and release writes, and what every
/// decision only reads sit on cache lines of their own (the `Arc`'s counts,
/// which grants and releases write too, on a third before them), so that
/// threads deciding at once do not take the read-only line from each
/// other's caches.
#[repr(C)]
struct ConcurrencyState {
    slots: Slots,
    read_mostly: CachePadded<ReadMostly>,
}

struct ReadMostly {
    max_concurrent: AtomicU32,
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
    pub fn new(max_concurrent: u32) -> Result<Self, ConfigError> {
        validate(max_concurrent)?;
        Ok(Self::build(max_concurrent, Clock::default()))
    }

    /// Changes the maximum at runtime. Running calls keep their slots: a
    /// lower maximum admits nobody new until enough of them finish; a higher
    /// one admits waiting callers at once.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] on the same rules as [`new`](ConcurrencyLimiter::new);
    /// the maximum is then unchanged.
    ///
    /// ```
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{ConcurrencyLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ConcurrencyLimiter::new(1)?;
    /// let Admission::Granted(_running) = limiter.try_acquire().await? else { unreachable!() };
    /// assert!(!limiter.can_proceed().await?);
    /// limiter.set_max_concurrent(2)?;
    /// assert!(limiter.can_proceed().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_max_concurrent(&self, max_concurrent: u32) -> Result<(), ConfigError> {
        validate(max_concurrent)?;
        self.state
            .read_mostly
            .max_concurrent
            .store(max_concurrent, Ordering::SeqCst);
        self.state.read_mostly.released.notify();
        Ok(())
    }

    /// The same limiter reading `clock` (see [`Clock`]); state starts afresh.
    ///
    /// Call it before handing out clones: the limiter it returns shares no
    /// state with them.
    ///
    /// ```
    /// use tower_limits::clock::Clock;
    /// use tower_limits::{ConcurrencyLimiter, Limiter};
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
        Self::build(self.max_concurrent(), clock)
    }

    fn build(max_concurrent: u32, clock: Clock) -> Self {
        Self {
            state: Arc::new(ConcurrencyState {
                slots: Slots::default(),
                read_mostly: CachePadded::new(ReadMostly {
                    max_concurrent: AtomicU32::new(max_concurrent),
                    not_before: AtomicU64::new(0),
                    released: ReleaseEvent::new(),
                    clock,
                }),
            }),
        }
    }

    /// Names the limiter, which then reports its running calls through the
    /// `metrics` facade: the gauge `tower_limits_in_flight{limiter="<name>"}`,
    /// set each time a call starts or completes. Unnamed (the default), it
    /// reports nothing. Clones share the name; a limiter is named once (a
    /// second name is ignored). A recorder must be installed when it is
    /// named. Name it after [`with_clock`](Self::with_clock), whose fresh
    /// state has no name.
    ///
    /// ```
    /// use tower_limits::{ConcurrencyLimiter, LimiterExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ConcurrencyLimiter::new(4)?.name("db");
    /// let _running = limiter.acquire().await?; // tower_limits_in_flight{limiter="db"} = 1
    /// assert_eq!(limiter.running(), 1);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn name(self, name: &str) -> Self {
        let gauge = crate::limiters::internals::gauge::in_flight(name);
        gauge.set(f64::from(self.running()));
        let _ = self.state.slots.in_flight.set(gauge);
        self
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
    pub fn max_concurrent(&self) -> u32 {
        self.state.max()
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
    pub fn running(&self) -> u32 {
        self.state.slots.running()
    }
}

fn validate(max_concurrent: u32) -> Result<(), ConfigError> {
    if max_concurrent == 0 {
        return Err(ConfigError::new(
            "max_concurrent",
            max_concurrent,
            "must be at least 1",
        ));
    }
    Ok(())
}

impl ConcurrencyState {
    /// `SeqCst`: a waiter's second look must see a raised maximum.
    #[inline]
    fn max(&self) -> u32 {
        self.read_mostly.max_concurrent.load(Ordering::SeqCst)
    }

    /// What a call costing `cost` would get now.
    fn peek(&self, cost: u32) -> Option<Denial> {
        if let Some(until) = self.paused_until() {
            return Some(Denial::until(self.read_mostly.clock.instant_at(until)));
        }
        let fits = u64::from(self.slots.running()) + u64::from(cost) <= u64::from(self.max());
        (!fits).then(|| Denial::until_released(self.read_mostly.released.listen()))
    }

    /// The pause's end, if one is in force now.
    #[inline]
    fn paused_until(&self) -> Option<u64> {
        let not_before = self.read_mostly.not_before.load(Ordering::Acquire);
        (not_before != 0 && self.read_mostly.clock.now_nanos() < not_before).then_some(not_before)
    }

    #[inline(always)]
    fn admit(self: &Arc<Self>, cost: u32) -> Admission {
        if self.paused_until().is_none()
            && let Some(generation) = self.slots.try_take(self.max(), cost)
        {
            return self.grant(generation, cost);
        }
        self.admit_or_listen(cost)
    }

    #[cold]
    fn admit_or_listen(self: &Arc<Self>, cost: u32) -> Admission {
        self.read_mostly.released.decide(|| {
            if let Some(until) = self.paused_until() {
                Admission::Denied(Denial::until(self.read_mostly.clock.instant_at(until)))
            } else if let Some(generation) = self.slots.try_take(self.max(), cost) {
                self.grant(generation, cost)
            } else {
                Admission::Denied(Denial::until_release())
            }
        })
    }

    /// Holds `to` slots instead of the `from` a permit of `generation` took;
    /// returns how many it holds now (fewer than `to` only if the count
    /// would overflow).
    fn resettle(&self, generation: u64, from: u32, to: u32) -> u32 {
        if to < from {
            if self.slots.release(Some(generation), u64::from(from - to)) {
                self.read_mostly.released.notify();
            }
            return to;
        }
        let taken = self
            .slots
            .force_take(Some(generation), u64::from(to - from));
        // At most `to - from`, a u32.
        from + u32::try_from(taken).unwrap_or(0)
    }

    #[inline(always)]
    fn grant(self: &Arc<Self>, generation: u64, cost: u32) -> Admission {
        // The release needs both: the token carries them side by side.
        let token = generation << 32 | u64::from(cost);
        Admission::Granted(Permit::new(Arc::clone(self) as Arc<dyn Release>, token).with_cost(cost))
    }
}

impl Release for ConcurrencyState {
    #[inline]
    fn complete(self: Arc<Self>, token: u64) {
        let (generation, cost) = (token >> 32, token & RUNNING);
        if self.slots.release(Some(generation), cost) {
            self.read_mostly.released.notify();
        }
    }
}

/// The running count and the generation of the limiter's state in one word:
/// `clear` starts a new generation, and a permit granted before it releases
/// nothing afterwards, so it cannot free a slot taken since.
///
/// Every operation is `SeqCst`, as [`ReleaseEvent`] requires.
#[derive(Default)]
struct Slots {
    word: AtomicU64,
    /// A named limiter's gauge of running calls, set after every change.
    #[cfg(feature = "metrics")]
    in_flight: std::sync::OnceLock<metrics::Gauge>,
}

/// The low half of a [`Slots`] word: the running count.
const RUNNING: u64 = u32::MAX as u64;

impl Slots {
    fn running(&self) -> u32 {
        // The low half holds the count: it fits.
        u32::try_from(self.word.load(Ordering::SeqCst) & RUNNING).unwrap_or(u32::MAX)
    }

    /// Takes `cost` slots if that leaves at most `max` taken; returns the
    /// generation.
    #[inline]
    fn try_take(&self, max: u32, cost: u32) -> Option<u64> {
        let (max, cost) = (u64::from(max), u64::from(cost));
        self.update(|word| ((word & RUNNING) + cost <= max).then_some(word + cost))
    }

    /// Takes `count` slots of `generation` (of any, if `None`) whatever the
    /// maximum: the interface's `record_start`, or a settled cost above the
    /// estimate. Returns how many it took: fewer only where the count would
    /// overflow its half of the word, none for an old generation.
    fn force_take(&self, generation: Option<u64>, count: u64) -> u64 {
        let mut taken = 0;
        self.update(|word| {
            let current = generation.is_none_or(|generation| word >> 32 == generation);
            taken = count.min(RUNNING - (word & RUNNING));
            current.then(|| word + taken)
        })
        .map_or(0, |_| taken)
    }

    /// Frees `count` slots of `generation` (of any, if `None`), never going
    /// below zero; whether any slot was freed.
    #[inline]
    fn release(&self, generation: Option<u64>, count: u64) -> bool {
        self.update(|word| {
            let current = generation.is_none_or(|generation| word >> 32 == generation);
            let running = word & RUNNING;
            (current && running > 0).then(|| word - running.min(count))
        })
        .is_some()
    }

    /// Frees every slot and starts a new generation.
    fn clear(&self) {
        self.update(|word| Some(((word >> 32) + 1) << 32));
    }

    /// Applies `change` atomically; the generation it applied to, if it did.
    #[inline]
    fn update(&self, change: impl FnMut(u64) -> Option<u64>) -> Option<u64> {
        let previous = self
            .word
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, change)
            .ok()?;
        #[cfg(feature = "metrics")]
        if let Some(gauge) = self.in_flight.get() {
            self.publish(gauge);
        }
        Some(previous >> 32)
    }

    /// Sets a named limiter's gauge to the running count: out of line, so
    /// that an unnamed limiter's decisions stay as small as without it.
    #[cfg(feature = "metrics")]
    #[cold]
    #[inline(never)]
    fn publish(&self, gauge: &metrics::Gauge) {
        crate::limiters::internals::gauge::publish(gauge, || u64::from(self.running()));
    }
}

impl crate::limiters::FreshLimiter for ConcurrencyLimiter {
    /// ```
    /// use tower_limits::limiters::FreshLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let template = tower_limits::ConcurrencyLimiter::new(4)?;
    /// let fresh = template.fresh();
    /// # let _ = fresh;
    /// # Ok(())
    /// # }
    /// ```
    fn fresh(&self) -> Self {
        Self::build(self.max_concurrent(), self.state.read_mostly.clock.clone())
    }
}

impl Limiter for ConcurrencyLimiter {
    /// Always inlined, with the admission it makes: see `try_at_once`.
    #[inline(always)]
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let admission = CostTooHigh::check(cost, self.state.max()).map(|()| self.state.admit(cost));
        LimiterFuture::ready(admission)
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        LimiterFuture::ready(Ok(self.state.peek(1).is_none()))
    }

    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        LimiterFuture::ready(Ok(self.state.peek(cost)))
    }

    /// A running call holds `actual` slots from now on (at most the
    /// maximum, which already admits nobody else): fewer frees some at once,
    /// more takes them even past the maximum.
    fn settle(&self, permit: &mut Permit, actual: u32) {
        let Some(token) = permit.token() else {
            return;
        };
        let (generation, from) = (token >> 32, permit.cost());
        let actual = actual.min(self.state.max());
        let held = self.state.resettle(generation, from, actual);
        permit.settled(held, Some(generation << 32 | u64::from(held)));
    }

    fn is_in_use(&self) -> bool {
        Arc::strong_count(&self.state) > 1
    }

    /// The running count, as [`running`](ConcurrencyLimiter::running).
    fn in_flight(&self) -> Option<u64> {
        Some(u64::from(self.running()))
    }

    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.state.slots.force_take(None, 1);
        LimiterFuture::ready(Ok(()))
    }

    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        if self.state.slots.release(None, 1) {
            self.state.read_mostly.released.notify();
        }
        LimiterFuture::ready(Ok(()))
    }

    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        let state = &self.state;
        let at = state
            .read_mostly
            .not_before
            .load(Ordering::Acquire)
            .max(state.read_mostly.clock.now_nanos());
        LimiterFuture::ready(Ok(state.read_mostly.clock.instant_at(at)))
    }

    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let nanos = self.state.read_mostly.clock.nanos_at(at);
        self.state
            .read_mostly
            .not_before
            .fetch_max(nanos, Ordering::AcqRel);
        LimiterFuture::ready(Ok(()))
    }

    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.state.slots.clear();
        self.state
            .read_mostly
            .not_before
            .store(0, Ordering::Release);
        self.state.read_mostly.released.notify();
        LimiterFuture::ready(Ok(()))
    }
}

impl fmt::Debug for ConcurrencyLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimiter")
            .field("max_concurrent", &self.max_concurrent())
            .field("running", &self.running())
            .finish()
    }
}
