//! [`AdaptiveRateLimiter`]: a rate that follows what the upstream says,
//! for limits the client does not know or that change.

mod pacer;
mod plateau;
#[cfg(test)]
mod simulation;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

pub use self::pacer::{Pacer, SharedPacer};

use self::pacer::WallClock;
use self::plateau::{Curve, Signal, Tuning};
use super::RateLimiter;
use super::stored::spawn_or_warn;
use crate::error::{ConfigError, LimiterError};
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit};
use crate::rate::Rate;
use crate::store::CurveStore;

/// How often the pacing rate follows the curve between signals (and a
/// shared limiter reads the shared curve).
const REFRESH: Duration = Duration::from_millis(50);
/// Attempts to write a signal into a shared curve that others are writing.
const SWAP_ATTEMPTS: usize = 4;
/// The fastest pace: one call per nanosecond.
const MAX_PER_SECOND: f64 = 1e9;
/// How long the rate holds under an estimated capacity before it probes.
const DEFAULT_HOLD: Duration = Duration::from_secs(25);
/// A rate change smaller than this fraction is not applied.
const NEGLIGIBLE: f64 = 0.001;

/// Paces calls at a rate it learns from the upstream: lower when the
/// upstream refuses, higher while it accepts, within a floor and a ceiling.
///
/// Use it when the client does not know the upstream's limit, or the limit
/// changes, or is shared with other clients: a quota-limited API whose plan
/// you do not control, a proxy with its own limit. Put it behind a
/// [`LimitLayer`](crate::LimitLayer) for pacing and give it to
/// `http::FeedbackLayer::adaptive`
/// (feature `http`), which reports every response; or report them yourself
/// with [`record_refusal`](Self::record_refusal),
/// [`record_success`](Self::record_success) and
/// [`adopt_quota`](Self::adopt_quota).
///
/// # How the rate moves
///
/// Calls are paced as by a [`RateLimiter`] of a GCRA quota with the
/// pacing tolerance (evenly, with a burst of 1 by default) at the current rate, which holds on a plateau just under the
/// upstream's capacity as the refusals estimate it, and probes above it
/// rarely:
///
/// * an upstream that limits a rate (a token bucket, GCRA, nginx's
///   `limit_req`, with or without `nodelay`) serves, from a moment its
///   bucket is full (the end of the pause it asked for), its burst `a` and
///   then its capacity `C`: the first call it refuses was sent after
///   `a + C·T` calls in `T` seconds. The **first refusal** cuts the rate
///   to a quarter (by [`decrease`](AdaptiveRateLimiterBuilder::decrease),
///   0.5 by default, squared: the starting rate was a guess); the
///   **second**, sent at another rate after the pause, gives the line
///   through both: `C` and `a`. From then on, **each refusal** tells the
///   capacity by itself: the one over which the calls sent since the
///   pause exceeded it by what the bucket held then (`a`, or what it
///   refilled since the refusal if the pause was shorter than that takes,
///   as tower_governor's `Retry-After: 0`);
/// * an estimate that rests on few calls (fewer than 12 at the capacity
///   between its refusals, as after a limit that fell far below the rate:
///   refused within a fraction of a second) is measured again first: the
///   rate goes just above it, so that the upstream refuses a call about
///   3 s after the pause, from calls enough to tell the capacity;
/// * with an estimate, the rate holds at 98 % of it for
///   [`hold`](AdaptiveRateLimiterBuilder::hold) (25 s by default), then
///   probes above it, by 5 % of the plateau 2 s after the hold, 40 % after
///   4 s, twice after 5.4 s: a limit that went up is found, and one that
///   did not refuses the probe, once, which gives a better estimate;
///   without one (the upstream is not a bucket that refills), the rate is
///   cut by `decrease` and probes again after a second, or, after a
///   probe, returns to the plateau it held;
/// * refusals of calls sent before the last decrease are the same overload
///   and do not decrease it again, so a burst of refusals is one decrease;
/// * the rate only grows while it is in use (callers were waiting for it),
///   so a client that sends little is not allowed a rate it never tried;
/// * a **stated quota** (`RateLimit-Policy`) is adopted at once, and the
///   rate stays at or below it;
/// * with [`queueing_delay`](AdaptiveRateLimiterBuilder::queueing_delay),
///   a success whose latency exceeds the lowest recent latency by that much
///   means the upstream queued it (an overloaded server): before any
///   refusal, the rate is cut by the share of a second the call waited in
///   the upstream's queue (its latency above the lowest), so that the queue
///   drains in about a second: by 3 % at least and by `decrease` at most,
///   and holds there for a second before it probes.
///
/// The pause an upstream asks for (`Retry-After`) is separate and obeyed
/// as it is: `http::FeedbackLayer` pauses the
/// limiter ([`set_next_available_time`](Limiter::set_next_available_time))
/// on top of the decrease. The plateau starts when the pause ends: the
/// time nobody may use the rate is counted once, not again as unused time.
///
/// What this reaches, measured against each kind of upstream, is in the
/// README (`examples/adaptive_upstreams.rs` in the repository measures it).
///
/// It reads tokio's clock, so paused-time tests drive it.
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::{AdaptiveRateLimiter, Rate};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = AdaptiveRateLimiter::builder(Rate::per_second(100)?).build()?;
/// assert_eq!(limiter.current_rate(), 100.0);
///
/// // The upstream refused a call: the first refusal cuts to a quarter.
/// limiter.record_refusal(Instant::now());
/// assert_eq!(limiter.current_rate(), 25.0);
/// # Ok(())
/// # }
/// ```
pub struct AdaptiveRateLimiter<P: Pacer = RateLimiter> {
    shared: Arc<Adaptive<P>>,
}

impl<P: Pacer> Clone for AdaptiveRateLimiter<P> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

struct Adaptive<P> {
    pacer: P,
    burst: u32,
    steering: Mutex<Steering>,
    /// Whether the curve is shared through the pacer's store.
    sharing: bool,
    /// The signals on their way to the shared curve (see `publish`).
    outbox: Mutex<Option<mpsc::UnboundedSender<Outgoing>>>,
    /// Signals in the outbox or being written: until they are, this
    /// process's curve may be ahead of the shared one.
    unshared: Arc<AtomicU64>,
    wall: WallClock,
    /// When the pace next follows the curve, in nanoseconds from `base`.
    refresh_at: AtomicU64,
    /// When a caller was last denied, in nanoseconds from `base` (at least
    /// 1; 0 while nobody ever was): until a little after it, the rate is in
    /// use, so it may grow.
    last_denial: AtomicU64,
    /// The calls granted so far (counted in one process only: the
    /// curve's segments count the calls sent from their start).
    granted: AtomicU64,
    /// The pace in force, as `f64` bits.
    applied: AtomicU64,
    base: Instant,
    /// The gauge of a named limiter's rate.
    #[cfg(feature = "metrics")]
    gauge: Option<metrics::Gauge>,
}

/// A signal on its way to the shared curve, counted in `unshared` until
/// it is written or dropped (with a task that cannot run, or ends).
struct Outgoing {
    signal: Signal,
    unshared: Arc<AtomicU64>,
}

impl Outgoing {
    fn new(signal: Signal, unshared: &Arc<AtomicU64>) -> Self {
        unshared.fetch_add(1, Ordering::Relaxed);
        Self {
            signal,
            unshared: Arc::clone(unshared),
        }
    }
}

impl Drop for Outgoing {
    fn drop(&mut self) {
        self.unshared.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The curve, when the pace last followed it, and the version of the
/// shared curve it mirrors (0 if none).
struct Steering {
    curve: Curve,
    refreshed: Instant,
    version: u64,
}

impl AdaptiveRateLimiter {
    /// Starts building a limiter whose rate starts at `start`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{AdaptiveRateLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = AdaptiveRateLimiter::builder("50/s".parse()?)
    ///     .floor("1/s".parse()?)
    ///     .ceiling("200/s".parse()?)
    ///     .queueing_delay(Duration::from_millis(40))
    ///     .build()?;
    /// assert_eq!(limiter.current_rate(), 50.0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(start: Rate) -> AdaptiveRateLimiterBuilder {
        AdaptiveRateLimiterBuilder {
            start,
            floor: None,
            ceiling: None,
            burst: 1,
            decrease: 0.5,
            queueing_delay: None,
            hold: DEFAULT_HOLD,
            #[cfg(feature = "metrics")]
            name: None,
        }
    }
}

impl<P: Pacer> AdaptiveRateLimiter<P> {
    /// The rate calls are paced at now, in calls per second.
    ///
    /// ```
    /// use tower_limits::{AdaptiveRateLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = AdaptiveRateLimiter::builder(Rate::per_minute(30)?).build()?;
    /// assert_eq!(limiter.current_rate(), 0.5);
    /// # Ok(())
    /// # }
    /// ```
    pub fn current_rate(&self) -> f64 {
        f64::from_bits(self.shared.applied.load(Ordering::Relaxed))
    }

    /// The upstream refused (or throttled) a call sent at `sent_at`: the
    /// rate decreases, unless the call was sent before the last decrease.
    ///
    /// ```
    /// use tokio::time::Instant;
    /// use tower_limits::{AdaptiveRateLimiter, Rate};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = AdaptiveRateLimiter::builder(Rate::per_second(10)?).build()?;
    /// let sent = Instant::now();
    /// limiter.record_refusal(sent);
    /// limiter.record_refusal(sent); // the same overload
    /// assert_eq!(limiter.current_rate(), 2.5); // the first refusal: a quarter
    /// # Ok(())
    /// # }
    /// ```
    pub fn record_refusal(&self, sent_at: Instant) {
        let granted = (!self.shared.sharing).then(|| self.shared.granted.load(Ordering::Relaxed));
        self.shared
            .steer(|curve, now| Some(curve.refusal(sent_at, granted, now)));
    }

    /// A call sent at `sent_at` succeeded now. With a
    /// [`queueing_delay`](AdaptiveRateLimiterBuilder::queueing_delay), its
    /// latency is compared with the lowest recent one; without, this only
    /// says the upstream accepts the pace (the rate grows with time).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::{advance, Instant};
    /// use tower_limits::{AdaptiveRateLimiter, Rate};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = AdaptiveRateLimiter::builder(Rate::per_second(20)?)
    ///     .queueing_delay(Duration::from_millis(30))
    ///     .build()?;
    /// let sent = Instant::now();
    /// advance(Duration::from_millis(5)).await;
    /// limiter.record_success(sent); // 5 ms: the base latency
    /// let sent = Instant::now();
    /// advance(Duration::from_millis(80)).await;
    /// limiter.record_success(sent); // 80 ms: queued upstream for 75 ms
    /// assert_eq!(limiter.current_rate(), 18.5); // 7.5 % slower
    /// # Ok(())
    /// # }
    /// ```
    pub fn record_success(&self, sent_at: Instant) {
        self.shared.steer(|curve, now| {
            let latency = now.saturating_duration_since(sent_at);
            curve.success(sent_at, latency, now)
        });
    }

    /// The upstream stated its quota (a `RateLimit-Policy`): the rate is
    /// set to it at once and stays at or below it (and within the floor and
    /// ceiling).
    ///
    /// ```
    /// use tower_limits::{AdaptiveRateLimiter, Rate};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = AdaptiveRateLimiter::builder(Rate::per_second(100)?).build()?;
    /// limiter.adopt_quota(Rate::per_minute(600)?);
    /// assert_eq!(limiter.current_rate(), 10.0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn adopt_quota(&self, quota: Rate) {
        let rate = quota.as_per_second_f64();
        self.shared.steer(|_, _| Some(Signal::Stated { rate }));
    }
}

impl<P: Pacer> Adaptive<P> {
    /// Moves the curve for the signal `classify` finds, if any; paces at
    /// the new rate at once, and writes the signal into the shared curve.
    fn steer(self: &Arc<Self>, classify: impl FnOnce(&mut Curve, Instant) -> Option<Signal>) {
        let now = Instant::now();
        let mut steering = self.steering();
        self.catch_up(&mut steering, now);
        let Some(signal) = classify(&mut steering.curve, now) else {
            return;
        };
        if steering
            .curve
            .apply(signal, now, self.granted.load(Ordering::Relaxed))
        {
            let rate = steering.curve.rate(now);
            tracing::debug!(rate, ?signal, "adaptive rate changed");
            self.apply(rate);
            if self.sharing {
                self.publish(signal);
            }
        }
    }

    /// Queues `signal` for the shared curve. One task per limiter writes
    /// them in the order they came: a refusal before the pause it asked
    /// for, as the curve needs them (it measures from the pause's end).
    fn publish(self: &Arc<Self>, signal: Signal) {
        let mut outbox = self.outbox.lock().unwrap_or_else(PoisonError::into_inner);
        let mut outgoing = Outgoing::new(signal, &self.unshared);
        if let Some(sender) = outbox.as_ref() {
            match sender.send(outgoing) {
                Ok(()) => return,
                Err(mpsc::error::SendError(back)) => outgoing = back,
            }
        }
        let (sender, mut receiver) = mpsc::unbounded_channel::<Outgoing>();
        // The receiver is alive: it is right here.
        let _ = sender.send(outgoing);
        let this = Arc::downgrade(self);
        spawn_or_warn("adaptive", "share a rate change", async move {
            while let Some(outgoing) = receiver.recv().await {
                let Some(this) = this.upgrade() else {
                    return;
                };
                this.share(outgoing.signal).await;
            }
        });
        *outbox = Some(sender);
    }

    /// Writes `signal` into the shared curve: read, move, compare-and-set,
    /// again if another process wrote first. The signal may find the shared
    /// curve already moved for the same overload: then nothing is written.
    async fn share(&self, signal: Signal) {
        for _ in 0..SWAP_ATTEMPTS {
            let Some(record) = self.load().await else {
                return;
            };
            let now = Instant::now();
            let (mut state, version) =
                match record.and_then(|r| Some((self.wall.state(&r)?, r.version()))) {
                    Some(shared) => shared,
                    None => (self.steering().curve.state, 0),
                };
            let tuning = self.steering().curve.tuning;
            if !state.apply(signal, &tuning, now) && version > 0 {
                // The store's curve judged it: follow that curve.
                self.mirror(state, version, true);
                return;
            }
            let Some(swap) = self.pacer.swap_curve(self.wall.record(&state, version)) else {
                return;
            };
            match swap.await {
                Ok(true) => {
                    self.mirror(state, version + 1, true);
                    return;
                }
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, "could not share an adaptive rate change");
                    return;
                }
            }
        }
    }

    /// The shared curve as the store has it (`Some(None)` if it has none);
    /// `None` if the store could not be read.
    async fn load(&self) -> Option<Option<crate::store::CurveRecord>> {
        match self.pacer.load_curve()?.await {
            Ok(record) => Some(record),
            Err(error) => {
                tracing::warn!(%error, "could not read a shared adaptive rate");
                None
            }
        }
    }

    /// Follows the shared curve: takes its `state` if it is newer than the
    /// one this process mirrors, or as new and `settled` (no signal of this
    /// process is on its way to the store: a curve that differs from the
    /// store's at the same version went off it, and would pace the shared
    /// quota at its own rate), and paces at its rate.
    fn mirror(&self, state: plateau::CurveState, version: u64, settled: bool) {
        let now = Instant::now();
        let mut steering = self.steering();
        let same = version == steering.version && settled && steering.curve.state != state;
        if version > steering.version || same {
            steering.curve.state = state;
            steering.version = version;
            self.apply(steering.curve.rate(now));
        }
    }

    /// Reads the shared curve and follows it; publishes this process's
    /// curve if the store has none.
    async fn sync(&self) {
        match self.load().await {
            Some(Some(record)) => match self.wall.state(&record) {
                Some(state) => {
                    let settled = self.unshared.load(Ordering::Relaxed) == 0;
                    self.mirror(state, record.version(), settled);
                }
                None => tracing::warn!(?record, "ignoring a shared adaptive rate that is not one"),
            },
            Some(None) => {
                let state = self.steering().curve.state;
                if let Some(swap) = self.pacer.swap_curve(self.wall.record(&state, 0))
                    && let Ok(true) = swap.await
                {
                    self.mirror(state, 1, true);
                }
            }
            None => {}
        }
    }

    /// Holds the curve for the time since the last look that the rate went
    /// unused: from a little after the last denial (two calls' spacing
    /// and a refresh, so that a saturated pace counts as in use). A pause
    /// is not unused time: it already moved the curve's start to its end.
    fn catch_up(&self, steering: &mut Steering, now: Instant) {
        if self.sharing {
            // Processes pacing together follow one curve: none holds it alone.
            steering.refreshed = now;
            return;
        }
        let rate = f64::from_bits(self.applied.load(Ordering::Relaxed));
        let grace = Duration::try_from_secs_f64(2.0 / rate).unwrap_or(Duration::MAX);
        let unused_from = match self.last_denial.load(Ordering::Relaxed) {
            0 => steering.refreshed,
            last => (self.base + Duration::from_nanos(last))
                .checked_add(grace.saturating_add(REFRESH))
                .unwrap_or(now)
                .max(steering.refreshed),
        };
        steering.curve.hold(unused_from, now);
        steering.refreshed = now;
    }

    fn steering(&self) -> std::sync::MutexGuard<'_, Steering> {
        // Every update leaves the curve consistent: a poisoned lock is usable.
        self.steering.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether it is time to bring the pace up to the curve (at most once
    /// per [`REFRESH`]); true for one caller only.
    #[inline]
    fn claim_refresh(&self) -> bool {
        let at = nanos(Instant::now().saturating_duration_since(self.base));
        let due = self.refresh_at.load(Ordering::Relaxed);
        at >= due
            && self
                .refresh_at
                .compare_exchange(
                    due,
                    at.saturating_add(nanos(REFRESH)),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Paces at the curve's rate now.
    fn follow_curve(&self) {
        let now = Instant::now();
        let mut steering = self.steering();
        self.catch_up(&mut steering, now);
        self.apply(steering.curve.rate(now));
    }

    /// Brings the pace up to the curve if it is time (a shared curve is
    /// read by decisions only).
    fn refresh(&self) {
        if !self.sharing && self.claim_refresh() {
            self.follow_curve();
        }
    }

    /// Passes `answer` on, counting a grant, and noting a denial: the rate
    /// is in use.
    fn noted(&self, answer: Result<Admission, LimiterError>) -> Result<Admission, LimiterError> {
        match &answer {
            Ok(Admission::Granted(permit)) => {
                self.granted
                    .fetch_add(u64::from(permit.cost()), Ordering::Relaxed);
            }
            Ok(Admission::Denied(_)) => {
                let at = nanos(Instant::now().saturating_duration_since(self.base)).max(1);
                self.last_denial.fetch_max(at, Ordering::Relaxed);
            }
            Err(_) => {}
        }
        answer
    }

    /// Paces at `rate` calls per second, unless that is a negligible change.
    fn apply(&self, rate: f64) {
        let applied = f64::from_bits(self.applied.load(Ordering::Relaxed));
        if (rate - applied).abs() <= applied * NEGLIGIBLE {
            return;
        }
        // The builder checked every rate from the floor to the ceiling.
        if let Ok(period) = Duration::try_from_secs_f64(1.0 / rate)
            && self.pacer.set_pace(period, self.burst).is_ok()
        {
            self.applied.store(rate.to_bits(), Ordering::Relaxed);
            #[cfg(feature = "metrics")]
            if let Some(gauge) = &self.gauge {
                gauge.set(rate);
            }
        }
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl<P: Pacer> Limiter for AdaptiveRateLimiter<P> {
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let shared = &*self.shared;
        if shared.sharing {
            // Nothing happens until polled: a future dropped unpolled (as
            // layers do with answers that are not ready) claims nothing.
            return LimiterFuture::new(async move {
                if shared.claim_refresh() {
                    shared.sync().await;
                    shared.follow_curve();
                }
                shared.noted(shared.pacer.try_acquire_many(cost).await)
            });
        }
        shared.refresh();
        match shared.pacer.try_acquire_many(cost).into_ready() {
            Ok(answer) => LimiterFuture::ready(shared.noted(answer)),
            Err(pending) => LimiterFuture::new(async move { shared.noted(pending.await) }),
        }
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        self.shared.refresh();
        self.shared.pacer.can_proceed()
    }
    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        self.shared.refresh();
        self.shared.pacer.peek(cost)
    }
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.shared.pacer.record_start()
    }
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.shared.pacer.record_completion()
    }
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        self.shared.pacer.next_available_time()
    }
    /// Pauses the pacer, and holds the rate's climb until `at`.
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.shared.steer(|_, _| Some(Signal::Paused { until: at }));
        self.shared.pacer.set_next_available_time(at)
    }
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.shared.pacer.clear()
    }
    fn refund(&self, permit: Permit) {
        self.shared.pacer.refund(permit);
    }
    fn settle(&self, permit: &mut Permit, actual: u32) {
        self.shared.pacer.settle(permit, actual);
    }
    fn in_flight(&self) -> Option<u64> {
        self.shared.pacer.in_flight()
    }
}

impl<P: Pacer> fmt::Debug for AdaptiveRateLimiter<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveRateLimiter")
            .field("current_rate", &self.current_rate())
            .field("burst", &self.shared.burst)
            .finish_non_exhaustive()
    }
}

/// Configures an [`AdaptiveRateLimiter`]; made by
/// [`AdaptiveRateLimiter::builder`].
///
/// ```
/// use tower_limits::{AdaptiveRateLimiter, Rate};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = AdaptiveRateLimiter::builder(Rate::per_second(10)?)
///     .decrease(0.5)
///     .burst(2)
///     .build()?;
/// # let _ = limiter;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[must_use = "call `build` to get the limiter"]
pub struct AdaptiveRateLimiterBuilder {
    start: Rate,
    floor: Option<Rate>,
    ceiling: Option<Rate>,
    burst: u32,
    decrease: f64,
    queueing_delay: Option<Duration>,
    hold: Duration,
    #[cfg(feature = "metrics")]
    name: Option<String>,
}

impl AdaptiveRateLimiterBuilder {
    /// The rate never goes below `floor` (default: one call a minute, or
    /// the starting rate if that is lower).
    ///
    /// ```
    /// use tower_limits::{AdaptiveRateLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let builder = AdaptiveRateLimiter::builder(Rate::per_second(10)?).floor(Rate::per_second(2)?);
    /// # let _ = builder;
    /// # Ok(())
    /// # }
    /// ```
    pub fn floor(mut self, floor: Rate) -> Self {
        self.floor = Some(floor);
        self
    }

    /// The rate never goes above `ceiling` (default: ten times the
    /// starting rate).
    ///
    /// ```
    /// use tower_limits::{AdaptiveRateLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let builder = AdaptiveRateLimiter::builder(Rate::per_second(10)?).ceiling(Rate::per_second(50)?);
    /// # let _ = builder;
    /// # Ok(())
    /// # }
    /// ```
    pub fn ceiling(mut self, ceiling: Rate) -> Self {
        self.ceiling = Some(ceiling);
        self
    }

    /// Up to `burst` calls at once after a quiet spell (default 1: evenly
    /// paced). A burst of 2 absorbs late timer wake-ups, so a saturated
    /// client keeps the full rate.
    ///
    /// ```
    /// use tower_limits::{AdaptiveRateLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let builder = AdaptiveRateLimiter::builder(Rate::per_second(10)?).burst(2);
    /// # let _ = builder;
    /// # Ok(())
    /// # }
    /// ```
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = burst;
        self
    }

    /// What a refusal multiplies the rate by when the refusals do not yet
    /// tell the upstream's capacity (default 0.5; the first refusal
    /// multiplies it by its square, a quarter); from 0 to 1, both excluded.
    ///
    /// ```
    /// use tower_limits::{AdaptiveRateLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let error = AdaptiveRateLimiter::builder(Rate::per_second(10)?).decrease(1.5).build().unwrap_err();
    /// assert_eq!(error.field(), "decrease");
    /// # Ok(())
    /// # }
    /// ```
    pub fn decrease(mut self, factor: f64) -> Self {
        self.decrease = factor;
        self
    }

    /// Slows down when a call's latency exceeds the lowest recent latency
    /// by `delay`: the upstream is queueing calls, as an overloaded server
    /// does before it refuses. The rate is cut by the share of a second the
    /// call waited (3 % at least, `decrease` at most). Off by default: the
    /// refusals alone find a rate limiter that queues (nginx's `limit_req`
    /// without `nodelay`), and a cut for a queue restarts the count of the
    /// calls they measure the capacity with. Pick a `delay` well above the
    /// upstream's normal jitter (it suits upstreams whose latency is
    /// steady; not one whose answers take seconds more or less).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{AdaptiveRateLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let builder = AdaptiveRateLimiter::builder(Rate::per_second(10)?)
    ///     .queueing_delay(Duration::from_millis(50));
    /// # let _ = builder;
    /// # Ok(())
    /// # }
    /// ```
    pub fn queueing_delay(mut self, delay: Duration) -> Self {
        self.queueing_delay = Some(delay);
        self
    }

    /// How long the rate holds just under the upstream's estimated capacity
    /// before it probes above it (default 25 s: from a start 5 times too
    /// fast, the first probe is refused about half a minute in). Every
    /// probe the upstream refuses costs the pause it asks for; a shorter
    /// hold finds a limit that went up sooner, at the price of more
    /// refusals.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{AdaptiveRateLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let builder = AdaptiveRateLimiter::builder(Rate::per_second(10)?).hold(Duration::from_secs(5));
    /// # let _ = builder;
    /// # Ok(())
    /// # }
    /// ```
    pub fn hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// Names the limiter, which then reports its rate through the `metrics`
    /// facade: the gauge `tower_limits_adaptive_rate{limiter="<name>"}`, in
    /// calls per second, set when it is built and each time the rate
    /// changes (as [`current_rate`](AdaptiveRateLimiter::current_rate)
    /// reads it). Unnamed (the default), it reports nothing. A recorder must
    /// be installed when the limiter is built.
    ///
    /// This name is for metrics only; a limiter
    /// [shared](Self::build_shared) through a store is named there too.
    ///
    /// ```
    /// use tokio::time::Instant;
    /// use tower_limits::{AdaptiveRateLimiter, Rate};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = AdaptiveRateLimiter::builder(Rate::per_second(100)?)
    ///     .name("search-api") // tower_limits_adaptive_rate{limiter="search-api"} = 100
    ///     .build()?;
    /// limiter.record_refusal(Instant::now()); // the gauge goes to 25
    /// assert_eq!(limiter.current_rate(), 25.0);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// Builds the limiter.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the field if `decrease` is not between 0 and
    /// 1, the floor is above the ceiling, the starting rate is outside
    /// them, the ceiling is faster than a call per nanosecond, `burst` is 0
    /// or `burst` calls at the floor's pace span more than 100 years, or
    /// the queueing delay is zero.
    ///
    /// ```
    /// use tower_limits::{AdaptiveRateLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let error = AdaptiveRateLimiter::builder(Rate::per_second(100)?)
    ///     .ceiling(Rate::per_second(50)?)
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(error.field(), "start");
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<AdaptiveRateLimiter, ConfigError> {
        let tuning = self.tuning()?;
        self.check_pacer(tuning)?;
        let quota = pacer::pace(Duration::from_secs(1), 1)?.with_pacing_tolerance()?;
        self.with_pacer(RateLimiter::in_memory(quota), tuning, false)
    }

    /// Builds a limiter shared by every process that builds one with the
    /// same `store` and `name`: they pace their calls through one GCRA
    /// quota in the store, and follow one learned rate, kept there as a
    /// small record ([`CurveStore`]). A refusal any of them sees lowers the
    /// rate for all, once per overload; a pause one of them is asked for
    /// ([`Retry-After`]) holds them all; the rate climbs back for all.
    /// Each process reads the shared rate every 50 ms (one store call),
    /// and writes it only when it changes it.
    ///
    /// Unlike a limiter in one process, a shared rate climbs whether or
    /// not the fleet uses it (a process cannot tell that the others are
    /// idle): after a quiet spell, the first calls may go at up to the
    /// ceiling until the upstream refuses, so set a ceiling near the rate
    /// you expect. Nor can a process count the others' calls: the
    /// capacity a refusal tells is reckoned from the pace the fleet was
    /// allowed, which a busy fleet may not have used in full. Each
    /// process writes its signals to the shared curve in the order they
    /// came. The processes' wall clocks should agree to a few
    /// milliseconds (they compare when calls were sent).
    ///
    /// [`Retry-After`]: crate::Limiter::set_next_available_time
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build).
    ///
    /// ```
    /// use tower_limits::store::MemoryStore;
    /// use tower_limits::{AdaptiveRateLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new(); // RedisStore across processes
    /// let limiter = AdaptiveRateLimiter::builder(Rate::per_second(20)?).build_shared(store, "search-api")?;
    /// assert_eq!(limiter.current_rate(), 20.0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn build_shared<S: CurveStore>(
        self,
        store: S,
        name: impl Into<String>,
    ) -> Result<AdaptiveRateLimiter<SharedPacer<S>>, ConfigError> {
        let tuning = self.tuning()?;
        self.check_pacer(tuning)?;
        let pacer = SharedPacer::new(store, name.into())?;
        self.with_pacer(pacer, tuning, true)
    }

    /// The limiter pacing with `pacer`, sharing its curve through it if
    /// `sharing` (the first decision then reads the shared curve).
    fn with_pacer<P: Pacer>(
        &self,
        pacer: P,
        tuning: Tuning,
        sharing: bool,
    ) -> Result<AdaptiveRateLimiter<P>, ConfigError> {
        let start = self.start.as_per_second_f64();
        if !(tuning.floor..=tuning.ceiling).contains(&start) {
            let rule = "must be between the floor and the ceiling";
            return Err(ConfigError::new("start", self.start, rule));
        }
        let now = Instant::now();
        let shared = Adaptive {
            pacer,
            burst: self.burst,
            steering: Mutex::new(Steering {
                curve: Curve::new(start, tuning, now),
                refreshed: now,
                version: 0,
            }),
            sharing,
            outbox: Mutex::new(None),
            unshared: Arc::new(AtomicU64::new(0)),
            wall: WallClock::now(),
            refresh_at: AtomicU64::new(if sharing { 0 } else { nanos(REFRESH) }),
            last_denial: AtomicU64::new(0),
            granted: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            base: now,
            #[cfg(feature = "metrics")]
            gauge: self
                .name
                .as_deref()
                .map(super::internals::gauge::adaptive_rate),
        };
        shared.apply(start);
        Ok(AdaptiveRateLimiter {
            shared: Arc::new(shared),
        })
    }

    fn tuning(&self) -> Result<Tuning, ConfigError> {
        if !(self.decrease > 0.0 && self.decrease < 1.0) {
            let rule = "must be between 0 and 1, both excluded";
            return Err(ConfigError::new("decrease", self.decrease, rule));
        }
        if self.queueing_delay == Some(Duration::ZERO) {
            let rule = "must be longer than zero";
            return Err(ConfigError::new("queueing_delay", Duration::ZERO, rule));
        }
        let start = self.start.as_per_second_f64();
        let floor = self
            .floor
            .map_or(start.min(1.0 / 60.0), |floor| floor.as_per_second_f64());
        let ceiling = self
            .ceiling
            .map_or((start * 10.0).min(MAX_PER_SECOND), |ceiling| {
                ceiling.as_per_second_f64()
            });
        if floor > ceiling {
            let rule = "must not be above the ceiling";
            return Err(ConfigError::new("floor", self.floor, rule));
        }
        if ceiling > MAX_PER_SECOND {
            let rule = "must be at most one call per nanosecond";
            return Err(ConfigError::new("ceiling", self.ceiling, rule));
        }
        Ok(Tuning {
            floor,
            ceiling,
            decrease: self.decrease,
            queueing_delay: self.queueing_delay,
            hold: self.hold,
        })
    }

    /// Checks that a pacer takes every rate from the floor to the ceiling.
    fn check_pacer(&self, tuning: Tuning) -> Result<(), ConfigError> {
        let period = |rate: f64| {
            Duration::try_from_secs_f64(1.0 / rate)
                .map_err(|_| ConfigError::new("floor", self.floor, "must be a positive rate"))
        };
        pacer::pace(period(tuning.floor)?, self.burst)?;
        pacer::pace(period(tuning.ceiling)?, self.burst)?;
        Ok(())
    }
}
