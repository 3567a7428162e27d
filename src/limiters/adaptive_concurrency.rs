//! [`AdaptiveConcurrencyLimiter`]: a concurrency limit that follows the
//! upstream's latency.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::internals::latency::LowestLatency;
use super::strategies::ConcurrencyLimiter;
use crate::error::{ConfigError, LimiterError};
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit, Release};

/// The base latency is the lowest of the last one to two of these.
const LATENCY_MEMORY: Duration = Duration::from_secs(30);
/// How far the limit moves toward each new estimate.
const SMOOTHING: f64 = 0.2;

/// Lets at most `limit` calls run at once, where the limit follows the
/// upstream's latency: it grows while calls are as fast as usual and
/// shrinks as soon as they slow down, for upstreams that degrade (queue,
/// slow down) before they refuse.
///
/// The algorithm is the gradient of Envoy's adaptive concurrency filter and
/// Netflix's concurrency-limits: each finished call's latency is compared
/// with the base latency, the lowest seen lately (over the last 30 to 60
/// s), which is what a call takes when nothing queues it:
///
/// ```text
/// gradient  = clamp(tolerance × base latency / latency, 0.5, 1)
/// estimate  = limit × gradient + √limit
/// limit     = limit × 0.8 + estimate × 0.2      (within min and max)
/// ```
///
/// While calls take less than `tolerance` times the base latency (2 by
/// default), the gradient is 1 and the limit grows by about `√limit / 5` a
/// call, probing for more; beyond, it shrinks, by at most half. It settles
/// where calls take about `tolerance` times the base latency: a short queue
/// upstream, all of its workers busy. A limit that is not used (fewer than
/// half of it running) does not grow. A permit given back unused (a
/// reservation refunded) says nothing about latency.
///
/// The base latency is forgotten after a minute at most: if the upstream
/// got slower for good, the limit follows it; while the limit keeps a
/// queue upstream, calls take longer than the true base latency, so over
/// long runs the limit can drift up by the tolerance's margin before a
/// quiet spell shows the base again.
///
/// Put it in front of an upstream with a
/// [`LimitLayer`](crate::LimitLayer), whose response future holds the
/// permit until the call ends: the latency measured is the call's.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::{AdaptiveConcurrencyLimiter, LimiterExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = AdaptiveConcurrencyLimiter::builder().initial(20).build()?;
/// // Rounds of 20 calls at once: fast ones, then ten times slower ones.
/// for (round, latency) in [10, 10, 100, 100].into_iter().enumerate() {
///     let calls: Vec<_> = (0..20)
///         .map(|_| {
///             let limiter = limiter.clone();
///             tokio::spawn(async move {
///                 let permit = limiter.acquire().await?;
///                 tokio::time::sleep(Duration::from_millis(latency)).await;
///                 drop(permit); // the call ended: its latency moves the limit
///                 Ok::<_, tower_limits::error::LimiterError>(())
///             })
///         })
///         .collect();
///     for call in calls {
///         call.await??;
///     }
///     if round == 1 {
///         assert!(limiter.limit() > 20, "fast calls: room for more");
///     }
/// }
/// assert!(limiter.limit() < 20, "slow calls: fewer at once");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct AdaptiveConcurrencyLimiter {
    shared: Arc<Shared>,
}

struct Shared {
    slots: ConcurrencyLimiter,
    gradient: Mutex<Gradient>,
    base: Instant,
    /// The gauge of a named limiter's limit.
    #[cfg(feature = "metrics")]
    gauge: Option<metrics::Gauge>,
}

/// The limit and the latencies it follows.
#[derive(Debug)]
struct Gradient {
    limit: f64,
    min: f64,
    max: f64,
    tolerance: f64,
    base: LowestLatency,
}

impl Gradient {
    /// A call that ran with `in_flight` calls (itself included) took
    /// `latency`, ending `now`; the new limit.
    fn sample(&mut self, latency: Duration, in_flight: u32, now: Instant) -> f64 {
        let base = self.base.observe(latency, now).as_secs_f64();
        if f64::from(in_flight) < self.limit / 2.0 {
            return self.limit; // not in use: no news about a larger limit
        }
        let latency = latency.as_secs_f64().max(1e-9);
        let gradient = (self.tolerance * base / latency).clamp(0.5, 1.0);
        let estimate = self.limit * gradient + self.limit.sqrt();
        self.limit =
            (self.limit * (1.0 - SMOOTHING) + estimate * SMOOTHING).clamp(self.min, self.max);
        self.limit
    }
}

impl AdaptiveConcurrencyLimiter {
    /// Starts building a limiter (initial limit 20, from 1 to 1,000,
    /// tolerance 2).
    ///
    /// ```
    /// use tower_limits::AdaptiveConcurrencyLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = AdaptiveConcurrencyLimiter::builder().build()?;
    /// assert_eq!(limiter.limit(), 20);
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder() -> AdaptiveConcurrencyLimiterBuilder {
        AdaptiveConcurrencyLimiterBuilder {
            initial: 20,
            min: 1,
            max: 1_000,
            tolerance: 2.0,
            #[cfg(feature = "metrics")]
            name: None,
        }
    }

    /// How many calls may run at once now.
    ///
    /// ```
    /// use tower_limits::AdaptiveConcurrencyLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = AdaptiveConcurrencyLimiter::builder().initial(8).build()?;
    /// assert_eq!(limiter.limit(), 8);
    /// # Ok(())
    /// # }
    /// ```
    pub fn limit(&self) -> u32 {
        self.shared.slots.max_concurrent()
    }

    /// How many calls are running.
    ///
    /// ```
    /// use tower_limits::{AdaptiveConcurrencyLimiter, LimiterExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = AdaptiveConcurrencyLimiter::builder().build()?;
    /// let _running = limiter.acquire().await?;
    /// assert_eq!(limiter.running(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn running(&self) -> u32 {
        self.shared.slots.running()
    }
}

impl Shared {
    /// Sets the gauge of a named limiter to `limit` (feature `metrics`).
    fn report(&self, limit: u32) {
        #[cfg(feature = "metrics")]
        if let Some(gauge) = &self.gauge {
            gauge.set(limit);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = limit;
    }

    fn nanos_since_base(&self) -> u64 {
        let since = Instant::now().saturating_duration_since(self.base);
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Release for Shared {
    /// A call that started `token` nanoseconds after `base` ended now.
    fn complete(self: Arc<Self>, token: u64) {
        let latency = Duration::from_nanos(self.nanos_since_base().saturating_sub(token));
        // The call's own slot is still held: its permit's parts drop after.
        let in_flight = self.slots.running();
        // Held until the limit is set, so that changes reach the gauge in order.
        let mut gradient = self.gradient.lock().unwrap_or_else(PoisonError::into_inner);
        let limit = gradient.sample(latency, in_flight, Instant::now());
        // The limit is within min and max, both valid.
        let limit = limit as u32;
        if limit != self.slots.max_concurrent() && self.slots.set_max_concurrent(limit).is_ok() {
            tracing::trace!(limit, ?latency, "adaptive concurrency limit changed");
            self.report(limit);
        }
    }

    /// An unused permit: no latency to learn from.
    fn refund(self: Arc<Self>, _token: u64) {}
}

impl Limiter for AdaptiveConcurrencyLimiter {
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let answer = match self.shared.slots.try_acquire_many(cost).into_ready() {
            Ok(answer) => answer,
            Err(_) => Err(LimiterError::new("a concurrency limiter answered later")),
        };
        LimiterFuture::ready(answer.map(|admission| match admission {
            Admission::Granted(slot) => {
                let started = self.shared.nanos_since_base();
                let timing = Permit::new(Arc::clone(&self.shared) as Arc<dyn Release>, started);
                let cost = slot.cost();
                // Parts release in order: the timing first, while the slot
                // still counts the call as running.
                Admission::Granted(Permit::many(vec![timing, slot]).with_cost(cost))
            }
            denied => denied,
        }))
    }
    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        self.shared.slots.can_proceed()
    }
    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        self.shared.slots.peek(cost)
    }
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.shared.slots.record_start()
    }
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.shared.slots.record_completion()
    }
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        self.shared.slots.next_available_time()
    }
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.shared.slots.set_next_available_time(at)
    }
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.shared.slots.clear()
    }
    fn is_in_use(&self) -> bool {
        Arc::strong_count(&self.shared) > 1
    }
    /// The running count, as [`running`](AdaptiveConcurrencyLimiter::running).
    fn in_flight(&self) -> Option<u64> {
        self.shared.slots.in_flight()
    }
}

impl fmt::Debug for AdaptiveConcurrencyLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveConcurrencyLimiter")
            .field("limit", &self.limit())
            .field("running", &self.running())
            .finish()
    }
}

/// Configures an [`AdaptiveConcurrencyLimiter`]; made by
/// [`AdaptiveConcurrencyLimiter::builder`].
///
/// ```
/// use tower_limits::AdaptiveConcurrencyLimiter;
///
/// # fn main() -> Result<(), tower_limits::error::ConfigError> {
/// let limiter = AdaptiveConcurrencyLimiter::builder()
///     .initial(10)
///     .min(2)
///     .max(100)
///     .tolerance(1.5)
///     .build()?;
/// assert_eq!(limiter.limit(), 10);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[must_use = "call `build` to get the limiter"]
pub struct AdaptiveConcurrencyLimiterBuilder {
    initial: u32,
    min: u32,
    max: u32,
    tolerance: f64,
    #[cfg(feature = "metrics")]
    name: Option<String>,
}

impl AdaptiveConcurrencyLimiterBuilder {
    /// The limit to start with (default 20).
    ///
    /// ```
    /// let builder = tower_limits::AdaptiveConcurrencyLimiter::builder().initial(4);
    /// # let _ = builder;
    /// ```
    pub fn initial(mut self, initial: u32) -> Self {
        self.initial = initial;
        self
    }

    /// The limit never goes below `min` (default 1).
    ///
    /// ```
    /// let builder = tower_limits::AdaptiveConcurrencyLimiter::builder().min(2);
    /// # let _ = builder;
    /// ```
    pub fn min(mut self, min: u32) -> Self {
        self.min = min;
        self
    }

    /// The limit never goes above `max` (default 1,000).
    ///
    /// ```
    /// let builder = tower_limits::AdaptiveConcurrencyLimiter::builder().max(64);
    /// # let _ = builder;
    /// ```
    pub fn max(mut self, max: u32) -> Self {
        self.max = max;
        self
    }

    /// How many times the usual latency a call may take before the limit
    /// shrinks (default 2; at least 1).
    ///
    /// ```
    /// let builder = tower_limits::AdaptiveConcurrencyLimiter::builder().tolerance(1.5);
    /// # let _ = builder;
    /// ```
    pub fn tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Names the limiter, which then reports its limit through the
    /// `metrics` facade: the gauge
    /// `tower_limits_concurrency_limit{limiter="<name>"}`, set to the
    /// initial limit when it is built and each time the limit changes (as
    /// [`limit`](AdaptiveConcurrencyLimiter::limit) reads it), and
    /// `tower_limits_in_flight{limiter="<name>"}`, its running calls (as
    /// [`ConcurrencyLimiter::name`] reports them). Unnamed (the
    /// default), it reports nothing. A recorder must be installed when the
    /// limiter is built.
    ///
    /// ```
    /// use tower_limits::AdaptiveConcurrencyLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = AdaptiveConcurrencyLimiter::builder()
    ///     .initial(10)
    ///     .name("db") // tower_limits_concurrency_limit{limiter="db"} = 10
    ///     .build()?;
    /// assert_eq!(limiter.limit(), 10);
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
    /// [`ConfigError`] naming the field if `min` is 0, `max` is below
    /// `min`, `initial` is outside them, or `tolerance` is below 1 (or not
    /// a number).
    ///
    /// ```
    /// use tower_limits::AdaptiveConcurrencyLimiter;
    ///
    /// let error = AdaptiveConcurrencyLimiter::builder().min(10).max(5).build().unwrap_err();
    /// assert_eq!(error.field(), "max");
    /// ```
    pub fn build(self) -> Result<AdaptiveConcurrencyLimiter, ConfigError> {
        if self.min == 0 {
            return Err(ConfigError::new("min", self.min, "must be at least 1"));
        }
        if self.max < self.min {
            return Err(ConfigError::new("max", self.max, "must be at least `min`"));
        }
        if !(self.min..=self.max).contains(&self.initial) {
            let rule = "must be between `min` and `max`";
            return Err(ConfigError::new("initial", self.initial, rule));
        }
        if self.tolerance.is_nan() || self.tolerance < 1.0 {
            let rule = "must be at least 1";
            return Err(ConfigError::new("tolerance", self.tolerance, rule));
        }
        let slots = ConcurrencyLimiter::new(self.initial)?;
        #[cfg(feature = "metrics")]
        let slots = match &self.name {
            Some(name) => slots.name(name),
            None => slots,
        };
        let shared = Shared {
            slots,
            gradient: Mutex::new(Gradient {
                limit: f64::from(self.initial),
                min: f64::from(self.min),
                max: f64::from(self.max),
                tolerance: self.tolerance,
                base: LowestLatency::new(LATENCY_MEMORY, Instant::now()),
            }),
            base: Instant::now(),
            #[cfg(feature = "metrics")]
            gauge: self
                .name
                .as_deref()
                .map(super::internals::gauge::concurrency_limit),
        };
        shared.report(self.initial);
        Ok(AdaptiveConcurrencyLimiter {
            shared: Arc::new(shared),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(limit: f64) -> Gradient {
        Gradient {
            limit,
            min: 1.0,
            max: 1_000.0,
            tolerance: 2.0,
            base: LowestLatency::new(LATENCY_MEMORY, Instant::now()),
        }
    }

    #[test]
    fn calls_near_the_base_latency_grow_the_limit_and_slow_calls_shrink_it() {
        let (ms, now) = (Duration::from_millis, Instant::now());
        let mut g = gradient(16.0);
        for _ in 0..50 {
            g.sample(ms(15), g.limit as u32, now);
        }
        g.sample(ms(10), g.limit as u32, now);
        let grown = g.limit;
        assert!(grown > 25.0, "{grown}");
        for _ in 0..20 {
            g.sample(ms(100), grown as u32, now);
        }
        assert!(g.limit < grown / 2.0, "{}", g.limit);
    }

    #[test]
    fn an_unused_limit_does_not_grow() {
        let mut g = gradient(40.0);
        for _ in 0..100 {
            g.sample(Duration::from_millis(10), 5, Instant::now());
        }
        assert_eq!(g.limit, 40.0);
    }
}
