//! What an observed layer records: see the [module docs](super) ("Observing
//! a layer").

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{BoxError, Elapsed, Overloaded, Rejected};
use crate::limiter::Permit;

/// A caller's wait for admission.
pub(crate) type WaitFuture = Pin<Box<dyn Future<Output = Result<Permit, BoxError>> + Send>>;

/// How a layer decided one call.
///
/// ```
/// use tower_limits::limit::Outcome;
///
/// assert_eq!(Outcome::Granted.as_str(), "granted");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Admitted, at once or after waiting.
    Granted,
    /// Refused at once (reject mode), naming when to retry if the limiter
    /// knew.
    Refused {
        /// When the limiter would have admitted it.
        retry_at: Option<Instant>,
    },
    /// Turned away because the line was full
    /// ([`max_waiting`](super::LimitLayer::max_waiting)).
    Overloaded,
    /// Gave up at [`max_wait`](super::LimitLayer::max_wait).
    Elapsed,
    /// The limiter failed (a store error).
    Failed,
    /// The caller went away while waiting (a timeout, a dropped future).
    Abandoned,
}

impl Outcome {
    /// The outcome's name, as the `tracing` field and the metrics label
    /// spell it.
    ///
    /// ```
    /// use tower_limits::limit::Outcome;
    ///
    /// assert_eq!(Outcome::Refused { retry_at: None }.as_str(), "refused");
    /// ```
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Granted => "granted",
            Outcome::Refused { .. } => "refused",
            Outcome::Overloaded => "overloaded",
            Outcome::Elapsed => "elapsed",
            Outcome::Failed => "failed",
            Outcome::Abandoned => "abandoned",
        }
    }

    /// The outcome of a wait that ended with `result`.
    fn of(result: &Result<Permit, BoxError>) -> Self {
        match result {
            Ok(_) => Outcome::Granted,
            Err(error) => Outcome::of_error(error),
        }
    }

    fn of_error(error: &BoxError) -> Self {
        if let Some(rejected) = error.downcast_ref::<Rejected>() {
            Outcome::Refused {
                retry_at: rejected.retry_at(),
            }
        } else if error.is::<Overloaded>() {
            Outcome::Overloaded
        } else if error.is::<Elapsed>() {
            Outcome::Elapsed
        } else {
            Outcome::Failed
        }
    }

    fn index(&self) -> usize {
        match self {
            Outcome::Granted => 0,
            Outcome::Refused { .. } => 1,
            Outcome::Overloaded => 2,
            Outcome::Elapsed => 3,
            Outcome::Failed => 4,
            Outcome::Abandoned => 5,
        }
    }
}

/// One decision of an observed layer, as its
/// [`on_decision`](super::LimitLayer::on_decision) hook sees it.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::limit::{Decision, Outcome};
///
/// fn log(decision: &Decision<'_>) {
///     if decision.outcome != Outcome::Granted {
///         eprintln!("{} refused a call of cost {}", decision.limiter, decision.cost);
///     }
/// }
/// log(&Decision { limiter: "api", outcome: Outcome::Overloaded, cost: 1, waited: Duration::ZERO, shadow: false });
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Decision<'a> {
    /// The layer's name.
    pub limiter: &'a str,
    /// What it decided.
    pub outcome: Outcome,
    /// The call's cost.
    pub cost: u32,
    /// How long the caller waited for the decision.
    pub waited: Duration,
    /// Whether the layer is in shadow mode: the call went ahead whatever
    /// the outcome says.
    pub shadow: bool,
}

/// An observed layer's counts since it was built; every clone of the
/// layer and every service it built share them.
///
/// ```
/// use tower_limits::limit::LayerStats;
///
/// let stats = LayerStats::default();
/// assert_eq!(stats.decisions(), 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayerStats {
    /// Calls admitted (in shadow mode: calls the limit would have
    /// admitted).
    pub granted: u64,
    /// Calls refused at once (reject mode, or shadow mode).
    pub refused: u64,
    /// Calls turned away because the line was full.
    pub overloaded: u64,
    /// Calls that gave up at the maximum wait.
    pub elapsed: u64,
    /// Decisions that failed (a store error).
    pub failed: u64,
    /// Callers that went away while waiting.
    pub abandoned: u64,
    /// Calls running now, as the layer's limiter counts them
    /// ([`Limiter::in_flight`](crate::Limiter::in_flight): a concurrency
    /// limiter does, a rate limiter does not), across everything that
    /// shares the limiter. `None` where it does not count them, and on the
    /// keyed and fair layers, whose limiters are many.
    pub in_flight: Option<u64>,
    /// Callers waiting now.
    pub waiting: u64,
    /// The time admitted calls waited, in all.
    pub waited: Duration,
}

impl LayerStats {
    /// Every decision counted.
    ///
    /// ```
    /// use tower_limits::limit::LayerStats;
    ///
    /// let mut stats = LayerStats::default();
    /// stats.granted = 3;
    /// stats.refused = 1;
    /// assert_eq!(stats.decisions(), 4);
    /// ```
    pub fn decisions(&self) -> u64 {
        self.granted + self.refused + self.overloaded + self.elapsed + self.failed + self.abandoned
    }
}

/// A hook called with each decision.
pub(crate) type Hook = Arc<dyn Fn(&Decision<'_>) + Send + Sync>;

/// What an observed layer keeps: its name, counts, hook and metrics.
pub(crate) struct Observer {
    name: Arc<str>,
    shadow: bool,
    outcomes: [AtomicU64; 6],
    waiting: AtomicU64,
    waited_nanos: AtomicU64,
    hook: Option<Hook>,
    #[cfg(feature = "metrics")]
    metrics: metrics_handles::Handles,
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("name", &self.name)
            .field("shadow", &self.shadow)
            .field("hook", &self.hook.is_some())
            .finish_non_exhaustive()
    }
}

impl Observer {
    pub(crate) fn new(name: Arc<str>, hook: Option<Hook>, shadow: bool) -> Self {
        Self {
            #[cfg(feature = "metrics")]
            metrics: metrics_handles::Handles::new(&name, shadow),
            name,
            shadow,
            outcomes: Default::default(),
            waiting: AtomicU64::new(0),
            waited_nanos: AtomicU64::new(0),
            hook,
        }
    }

    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    pub(crate) fn hook(&self) -> Option<&Hook> {
        self.hook.as_ref()
    }

    pub(crate) fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// Records a decision made without waiting.
    #[inline]
    pub(crate) fn decided_at_once(&self, outcome: Outcome, cost: u32) {
        // One load when nothing listens at TRACE, instead of building an
        // empty span through the callsite's interest.
        if tracing::level_enabled!(tracing::Level::TRACE) {
            let span = tracing::trace_span!(
                target: "tower_limits::admission",
                "admission",
                limiter = &*self.name,
                cost,
                outcome = outcome.as_str(),
                waited_us = 0_u64,
                shadow = self.shadow,
            );
            drop(span);
        }
        self.record(outcome, cost, Duration::ZERO);
    }

    /// Counts, reports and hooks one decision.
    #[inline]
    fn record(&self, outcome: Outcome, cost: u32, waited: Duration) {
        self.outcomes[outcome.index()].fetch_add(1, Ordering::Relaxed);
        if outcome == Outcome::Granted && !waited.is_zero() {
            let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
            self.waited_nanos.fetch_add(nanos, Ordering::Relaxed);
        }
        #[cfg(feature = "metrics")]
        self.metrics.record(outcome, waited);
        if outcome != Outcome::Granted || self.hook.is_some() {
            self.report(outcome, cost, waited);
        }
    }

    /// Logs a decision that did not admit, and calls the hook: out of line,
    /// so that a grant with no hook stays a count.
    #[cold]
    #[inline(never)]
    fn report(&self, outcome: Outcome, cost: u32, waited: Duration) {
        if outcome != Outcome::Granted {
            tracing::debug!(
                target: "tower_limits::admission",
                limiter = &*self.name,
                cost,
                outcome = outcome.as_str(),
                shadow = self.shadow,
                "not admitted"
            );
        }
        if let Some(hook) = &self.hook {
            hook(&Decision {
                limiter: &self.name,
                outcome,
                cost,
                waited,
                shadow: self.shadow,
            });
        }
    }

    /// `wait`, observed: counted as waiting while it runs, inside a span,
    /// and recorded when it ends (or as abandoned if dropped before).
    pub(crate) fn observe_wait(self: &Arc<Self>, cost: u32, wait: WaitFuture) -> WaitFuture {
        let span = tracing::debug_span!(
            target: "tower_limits::admission",
            "admission",
            limiter = &*self.name,
            cost,
            outcome = tracing::field::Empty,
            waited_us = tracing::field::Empty,
            shadow = self.shadow,
        );
        self.waiting.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics.waiting.increment(1.0);
        let observed = Observed {
            observer: Arc::clone(self),
            cost,
            started: Instant::now(),
            span: span.clone(),
            wait: Some(wait),
        };
        Box::pin(observed.instrument(span))
    }

    /// Records the end of a wait that started at `started`.
    fn waited(&self, outcome: Outcome, cost: u32, started: Instant, span: &tracing::Span) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics.waiting.decrement(1.0);
        let waited = started.elapsed();
        let waited_us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        span.record("outcome", outcome.as_str());
        span.record("waited_us", waited_us);
        self.record(outcome, cost, waited);
    }

    /// The counts so far.
    pub(crate) fn stats(&self) -> LayerStats {
        let count = |outcome: Outcome| self.outcomes[outcome.index()].load(Ordering::Relaxed);
        LayerStats {
            granted: count(Outcome::Granted),
            refused: count(Outcome::Refused { retry_at: None }),
            overloaded: count(Outcome::Overloaded),
            elapsed: count(Outcome::Elapsed),
            failed: count(Outcome::Failed),
            abandoned: count(Outcome::Abandoned),
            in_flight: None,
            waiting: self.waiting.load(Ordering::Relaxed),
            waited: Duration::from_nanos(self.waited_nanos.load(Ordering::Relaxed)),
        }
    }
}

/// A wait being observed; records its outcome when it ends or is dropped.
struct Observed {
    observer: Arc<Observer>,
    cost: u32,
    started: Instant,
    span: tracing::Span,
    /// `None` once it ended and was recorded.
    wait: Option<WaitFuture>,
}

impl Future for Observed {
    type Output = Result<Permit, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(wait) = self.wait.as_mut() else {
            return Poll::Pending; // ended already: never polled again
        };
        let result = std::task::ready!(wait.as_mut().poll(cx));
        self.wait = None;
        self.observer
            .waited(Outcome::of(&result), self.cost, self.started, &self.span);
        Poll::Ready(result)
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        if self.wait.is_some() {
            let observer = Arc::clone(&self.observer);
            observer.waited(Outcome::Abandoned, self.cost, self.started, &self.span);
        }
    }
}

/// Records a failure that ended a wait before it started (a full line, a
/// denial past the deadline, a store error).
pub(crate) fn failed_at_once(observer: Option<&Arc<Observer>>, cost: u32, error: &BoxError) {
    if let Some(observer) = observer {
        observer.decided_at_once(Outcome::of_error(error), cost);
    }
}

#[cfg(feature = "metrics")]
mod metrics_handles {
    //! The `metrics` handles of one observed layer.

    use std::time::Duration;

    use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};

    use super::Outcome;

    pub(super) struct Handles {
        /// One counter per outcome, by [`Outcome::index`].
        decisions: [Counter; 6],
        wait: Histogram,
        pub(super) waiting: Gauge,
    }

    impl Handles {
        /// The handles of the layer `name`; a shadow layer's refusals are
        /// counted as `shadow_refused` (the calls went ahead).
        pub(super) fn new(name: &str, shadow: bool) -> Self {
            let limiter = name.to_owned();
            let refused = if shadow { "shadow_refused" } else { "refused" };
            let outcomes = [
                "granted",
                refused,
                "overloaded",
                "elapsed",
                "failed",
                "abandoned",
            ];
            Self {
                decisions: outcomes.map(|outcome| {
                    counter!("tower_limits_decisions_total", "limiter" => limiter.clone(), "outcome" => outcome)
                }),
                wait: histogram!("tower_limits_wait_seconds", "limiter" => limiter.clone()),
                waiting: gauge!("tower_limits_waiting", "limiter" => limiter),
            }
        }

        pub(super) fn record(&self, outcome: Outcome, waited: Duration) {
            self.decisions[outcome.index()].increment(1);
            if outcome == Outcome::Granted {
                self.wait.record(waited.as_secs_f64());
            }
        }
    }
}
