//! [`AdaptiveRateLimiter`]: a rate that follows what the upstream says,
//! for limits the client does not know or that change.

mod cubic;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use self::cubic::{Curve, Tuning};
use super::GcraLimiter;
use crate::error::{ConfigError, LimiterError};
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit};
use crate::rate::Rate;

/// How often the pacing rate follows the curve between signals.
const REFRESH: Duration = Duration::from_millis(50);
/// The fastest pace: one call per nanosecond.
const MAX_PER_SECOND: f64 = 1e9;
/// A rate change smaller than this fraction is not applied.
const NEGLIGIBLE: f64 = 0.001;

/// Paces calls at a rate it learns from the upstream: lower when the
/// upstream refuses, higher while it accepts, within a floor and a ceiling.
///
/// Use it when the client does not know the upstream's limit, or the limit
/// changes, or is shared with other clients: a quota-limited API whose plan
/// you do not control, a proxy with its own limit. Put it behind a
/// [`LimitLayer`](crate::LimitLayer) for pacing and give it to
/// [`FeedbackLayer::adaptive`](crate::http::FeedbackLayer::adaptive)
/// (feature `http`), which reports every response; or report them yourself
/// with [`record_refusal`](Self::record_refusal),
/// [`record_success`](Self::record_success) and
/// [`adopt_quota`](Self::adopt_quota).
///
/// # How the rate moves
///
/// Calls are paced as by a [`GcraLimiter`] (evenly, with a burst of 1 by
/// default) at the current rate, which follows the CUBIC curve of TCP CUBIC
/// (RFC 9438) and of the AWS SDKs' adaptive retry mode:
///
/// * a **refusal** (a 429, a 503, an exhausted quota) multiplies the rate by
///   [`decrease`](AdaptiveRateLimiterBuilder::decrease) (0.7 by default).
///   Refusals of calls sent before the last decrease are the same overload
///   and do not decrease it again, so a burst of refusals is one decrease;
/// * while calls succeed, the rate climbs back along
///   `C·(t − K)³ + W`, where `W` is the rate that was refused and `K` the
///   time to regain it: fast at first, flat near `W`, then probing beyond
///   it, slowly and then faster, in case the limit went up;
/// * the rate only grows while it is in use (callers were waiting for it),
///   so a client that sends little is not allowed a rate it never tried;
/// * a **stated quota** (`RateLimit-Policy`) is adopted at once, and the
///   rate stays at or below it;
/// * with [`queueing_delay`](AdaptiveRateLimiterBuilder::queueing_delay),
///   a success whose latency exceeds the lowest recent latency by that much
///   means the upstream queued it (a leaky bucket that delays before it
///   refuses, an overloaded server): the rate is cut gently (× 0.95) before
///   any refusal.
///
/// The pause an upstream asks for (`Retry-After`) is separate and obeyed
/// as it is: [`FeedbackLayer`](crate::http::FeedbackLayer) pauses the
/// limiter ([`set_next_available_time`](Limiter::set_next_available_time))
/// on top of the decrease.
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
/// // The upstream refused a call: 30% slower.
/// limiter.record_refusal(Instant::now());
/// assert_eq!(limiter.current_rate(), 70.0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct AdaptiveRateLimiter {
    shared: Arc<Adaptive>,
}

struct Adaptive {
    pacer: GcraLimiter,
    burst: u32,
    steering: Mutex<Steering>,
    /// When the pace next follows the curve, in nanoseconds from `base`.
    refresh_at: AtomicU64,
    /// When a caller was last denied, in nanoseconds from `base`: until a
    /// little after it, the rate is in use, so it may grow.
    last_denial: AtomicU64,
    /// The pace in force, as `f64` bits.
    applied: AtomicU64,
    base: Instant,
}

/// The curve, and when the pace last followed it.
struct Steering {
    curve: Curve,
    refreshed: Instant,
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
            decrease: 0.7,
            queueing_delay: None,
        }
    }

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
    /// assert_eq!(limiter.current_rate().round(), 7.0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn record_refusal(&self, sent_at: Instant) {
        self.shared.steer(|curve, now| curve.refused(sent_at, now));
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
    /// limiter.record_success(sent); // 80 ms: queued upstream
    /// assert_eq!(limiter.current_rate(), 19.0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn record_success(&self, sent_at: Instant) {
        self.shared.steer(|curve, now| {
            let latency = now.saturating_duration_since(sent_at);
            curve.succeeded(sent_at, latency, now)
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
        self.shared.steer(|curve, now| curve.adopt(rate, now));
    }
}

impl Adaptive {
    /// Runs `change` on the curve; if it changed the rate, paces at the new
    /// one at once.
    fn steer(&self, change: impl FnOnce(&mut Curve, Instant) -> bool) {
        let now = Instant::now();
        let mut steering = self.steering();
        self.catch_up(&mut steering, now);
        if change(&mut steering.curve, now) {
            self.apply(steering.curve.rate(now));
        }
    }

    /// Holds the curve for the time since the last look that the rate went
    /// unused: from a little after the last denial (two calls' spacing
    /// and a refresh, so that a saturated pace counts as in use).
    fn catch_up(&self, steering: &mut Steering, now: Instant) {
        let rate = f64::from_bits(self.applied.load(Ordering::Relaxed));
        let grace = Duration::try_from_secs_f64(2.0 / rate).unwrap_or(Duration::MAX);
        let last_denial =
            self.base + Duration::from_nanos(self.last_denial.load(Ordering::Relaxed));
        let unused_from = last_denial
            .checked_add(grace.saturating_add(REFRESH))
            .unwrap_or(now)
            .max(steering.refreshed);
        steering
            .curve
            .hold(now.saturating_duration_since(unused_from));
        steering.refreshed = now;
    }

    fn steering(&self) -> std::sync::MutexGuard<'_, Steering> {
        // Every update leaves the curve consistent: a poisoned lock is usable.
        self.steering.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Brings the pace up to the curve, at most once per [`REFRESH`].
    #[inline]
    fn refresh(&self) {
        let now = Instant::now();
        let at = nanos(now.saturating_duration_since(self.base));
        let due = self.refresh_at.load(Ordering::Relaxed);
        if at < due {
            return;
        }
        let next = at.saturating_add(nanos(REFRESH));
        if self
            .refresh_at
            .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return; // another caller is refreshing
        }
        let mut steering = self.steering();
        self.catch_up(&mut steering, now);
        self.apply(steering.curve.rate(now));
    }

    fn note_denial(&self) {
        let at = nanos(Instant::now().saturating_duration_since(self.base));
        self.last_denial.fetch_max(at, Ordering::Relaxed);
    }

    /// Paces at `rate` calls per second, unless that is a negligible change.
    fn apply(&self, rate: f64) {
        let applied = f64::from_bits(self.applied.load(Ordering::Relaxed));
        if (rate - applied).abs() <= applied * NEGLIGIBLE {
            return;
        }
        // The builder checked every rate from the floor to the ceiling.
        if let Ok(period) = Duration::try_from_secs_f64(1.0 / rate)
            && self.pacer.set_limit(1, period, self.burst).is_ok()
        {
            self.applied.store(rate.to_bits(), Ordering::Relaxed);
        }
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl Limiter for AdaptiveRateLimiter {
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        self.shared.refresh();
        match self.shared.pacer.try_acquire_many(cost).into_ready() {
            Ok(answer) => {
                if let Ok(Admission::Denied(_)) = answer {
                    self.shared.note_denial();
                }
                LimiterFuture::ready(answer)
            }
            Err(pending) => pending,
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
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
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
}

impl fmt::Debug for AdaptiveRateLimiter {
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

    /// What a refusal multiplies the rate by (default 0.7, as the AWS
    /// SDKs); from 0 to 1, both excluded.
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

    /// Slows down a little (× 0.95) when a call's latency exceeds the lowest
    /// recent latency by `delay`: the upstream is queueing calls, as a
    /// leaky bucket that delays before it refuses does. Off by default:
    /// pick a `delay` well above the upstream's normal jitter (it suits
    /// upstreams whose latency is steady; not one whose answers take
    /// seconds more or less).
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
        let start = self.start.as_per_second_f64();
        if !(tuning.floor..=tuning.ceiling).contains(&start) {
            let rule = "must be between the floor and the ceiling";
            return Err(ConfigError::new("start", self.start, rule));
        }
        let pacer = self.pacer(tuning)?;
        let now = Instant::now();
        let shared = Adaptive {
            pacer,
            burst: self.burst,
            steering: Mutex::new(Steering {
                curve: Curve::new(start, tuning, now),
                refreshed: now,
            }),
            refresh_at: AtomicU64::new(nanos(REFRESH)),
            last_denial: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            base: now,
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
            gentle_decrease: 0.95,
            growth: 0.4,
            queueing_delay: self.queueing_delay,
        })
    }

    /// The pacer, checked at the slowest and fastest rates it may take.
    fn pacer(&self, tuning: Tuning) -> Result<GcraLimiter, ConfigError> {
        let period = |rate: f64| {
            Duration::try_from_secs_f64(1.0 / rate)
                .map_err(|_| ConfigError::new("floor", self.floor, "must be a positive rate"))
        };
        GcraLimiter::new(1, period(tuning.floor)?)?.with_burst(self.burst)?;
        GcraLimiter::new(1, period(tuning.ceiling)?)?.with_burst(self.burst)
    }
}
