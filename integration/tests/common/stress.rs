//! 1,000 concurrent callers on a multi-thread runtime (real time: paused
//! time needs a current-thread runtime), and the check that the limit held.
//!
//! Each grant is recorded as the [`Span`] `[before, after]` around the
//! attempt that succeeded; the limiter decided somewhere inside it. A window
//! is only charged with grants whose whole span lies inside it, so
//! preemption can widen a span but never fake a violation.

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tower::{Layer, Service, service_fn};
use tower_limits::clock::PACING_TOLERANCE;
use tower_limits::error::{BoxError, LimiterError};
use tower_limits::limiter::{Admission, Denial, LimiterFuture};
use tower_limits::{LimitLayer, Limiter, Permit};

pub(crate) const CALLERS: usize = 1_000;
/// Generous (the slowest run takes about a second): a hang fails the test
/// instead of stalling the suite.
pub(crate) const DEADLINE: Duration = Duration::from_secs(30);

/// The span of one granted attempt.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub(crate) before: Instant,
    pub(crate) after: Instant,
}

/// One grant: its span, and the token its permit carried (a fixed
/// window's index, for instance).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grant {
    pub(crate) span: Span,
    pub(crate) token: Option<u64>,
}

/// Wraps a limiter, records every granted attempt and counts the calls
/// its callers say are running.
#[derive(Clone)]
pub(crate) struct Recorder<L> {
    inner: L,
    grants: Arc<Mutex<Vec<Grant>>>,
    pub(crate) running: Arc<Running>,
}

impl<L> Recorder<L> {
    pub(crate) fn new(inner: L) -> Self {
        Self {
            inner,
            grants: Arc::default(),
            running: Arc::default(),
        }
    }

    pub(crate) fn inner(&self) -> &L {
        &self.inner
    }

    fn note(&self, before: Instant, answer: &Result<Admission, LimiterError>) {
        if let Ok(Admission::Granted(permit)) = answer {
            let span = Span {
                before,
                after: Instant::now(),
            };
            let token = permit.token();
            self.grants.lock().unwrap().push(Grant { span, token });
        }
    }

    /// The grants so far, by the start of their spans.
    pub(crate) fn grants(&self) -> Vec<Grant> {
        let mut grants = self.grants.lock().unwrap().clone();
        grants.sort_by_key(|grant| grant.span.before);
        grants
    }

    /// The spans of the grants so far, by start.
    pub(crate) fn spans(&self) -> Vec<Span> {
        self.grants().iter().map(|grant| grant.span).collect()
    }
}

impl<L: Limiter> Limiter for Recorder<L> {
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let before = Instant::now();
        match self.inner.try_acquire_many(cost).into_ready() {
            Ok(answer) => {
                self.note(before, &answer);
                LimiterFuture::ready(answer)
            }
            Err(pending) => LimiterFuture::new(async move {
                let answer = pending.await;
                self.note(before, &answer);
                answer
            }),
        }
    }
    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        self.inner.can_proceed()
    }
    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        self.inner.peek(cost)
    }
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.inner.record_start()
    }
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.inner.record_completion()
    }
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        self.inner.next_available_time()
    }
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.inner.set_next_available_time(at)
    }
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.inner.clear()
    }
    fn refund(&self, permit: Permit) {
        self.inner.refund(permit);
    }
    fn settle(&self, permit: &mut Permit, actual: u32) {
        self.inner.settle(permit, actual);
    }
    fn is_in_use(&self) -> bool {
        self.inner.is_in_use()
    }
}

/// How many calls run at once, and the most that ever did. A call counts
/// from just after its grant to just before its permit goes, so the count
/// never exceeds what the limiter had granted.
#[derive(Debug, Default)]
pub(crate) struct Running {
    now: AtomicUsize,
    max: AtomicUsize,
    starts: Mutex<Vec<Instant>>,
}

/// One running call; it stops counting when dropped (a cancelled call
/// included).
pub(crate) struct RunningCall<'a>(&'a Running);

impl Drop for RunningCall<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Running {
    pub(crate) fn enter(&self) -> RunningCall<'_> {
        self.starts.lock().unwrap().push(Instant::now());
        let running = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(running, Ordering::SeqCst);
        RunningCall(self)
    }

    /// Runs one call of `hold` (a yield when zero) on the tokio runtime.
    pub(crate) async fn call(&self, hold: Duration) {
        let _call = self.enter();
        if hold.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(hold).await;
        }
    }

    pub(crate) fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }

    pub(crate) fn now(&self) -> usize {
        self.now.load(Ordering::SeqCst)
    }

    /// The instants calls started, in order, as spans of no length: on
    /// paused time a call starts at the instant of its grant.
    pub(crate) fn starts(&self) -> Vec<Span> {
        let mut starts = self.starts.lock().unwrap().clone();
        starts.sort();
        starts
            .into_iter()
            .map(|at| Span {
                before: at,
                after: at,
            })
            .collect()
    }
}

/// `limiter` behind a `LimitLayer`, around a service whose calls run for
/// `hold` (counted in the recorder's `running`). Clones share the layer's
/// line.
pub(crate) fn limited<L: Limiter + Clone>(
    limiter: Recorder<L>,
    hold: Duration,
) -> impl Service<(), Response = (), Error = BoxError, Future: Send> + Clone + Send + 'static {
    let running = Arc::clone(&limiter.running);
    LimitLayer::new(limiter).layer(service_fn(move |()| {
        let running = Arc::clone(&running);
        async move {
            running.call(hold).await;
            Ok::<_, Infallible>(())
        }
    }))
}

/// Spawns `CALLERS` tasks running `caller` and returns how many finished.
pub(crate) async fn run_callers<F, Fut>(caller: F) -> usize
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let tasks: Vec<_> = (0..CALLERS).map(|_| tokio::spawn(caller())).collect();
    let mut finished = 0;
    for task in tasks {
        tokio::time::timeout(DEADLINE, task)
            .await
            .expect("callers finish")
            .expect("caller panicked");
        finished += 1;
    }
    finished
}

/// Runs `CALLERS` callers, each acquiring once (one decision per attempt,
/// waiting as each denial says), and returns the granted spans by start.
pub(crate) async fn spans_of_callers<L: Limiter + Clone>(limiter: L) -> Vec<Span> {
    let spans = Arc::new(Mutex::new(Vec::with_capacity(CALLERS)));
    let finished = run_callers(|| {
        let (limiter, spans) = (limiter.clone(), Arc::clone(&spans));
        async move {
            loop {
                let before = Instant::now();
                let answer = limiter.try_acquire().into_ready();
                match answer.expect("in-memory limiters answer at once") {
                    Ok(Admission::Granted(_permit)) => {
                        let after = Instant::now();
                        spans.lock().unwrap().push(Span { before, after });
                        return;
                    }
                    Ok(Admission::Denied(denial)) => denial.wait().await,
                    Err(error) => panic!("unexpected error: {error}"),
                }
            }
        }
    })
    .await;
    assert_eq!(finished, CALLERS, "callers finished");
    let mut spans = spans.lock().unwrap().clone();
    assert_eq!(spans.len(), CALLERS, "every caller got through");
    spans.sort_by_key(|span| span.before);
    spans
}

/// The most grants a pacer admits in a window of length `window` (grants
/// decided less than `window` apart), calls costing one: `burst` at once,
/// then one per `interval`, a late start taking a slot up to
/// [`PACING_TOLERANCE`] (τ) before it. The grants' slots are `interval`
/// apart from the burst on and at most τ before the grants, so `n` of them
/// span at least `(n − burst) × interval − τ`:
/// `n < burst + (window + τ) / interval`.
pub(crate) const fn paced_bound(burst: usize, interval: Duration, window: Duration) -> usize {
    cell_bound(burst, interval, window, PACING_TOLERANCE)
}

/// [`paced_bound`] for slots taken up to `tolerance` back: zero for a
/// store's cells, which decide by GCRA's strict test.
pub(crate) const fn cell_bound(
    burst: usize,
    interval: Duration,
    window: Duration,
    tolerance: Duration,
) -> usize {
    let span = window.as_nanos() + tolerance.as_nanos();
    burst + span.div_ceil(interval.as_nanos()) as usize - 1
}

/// No interval of length `window` holds more than `max` of the `spans`
/// (sorted by start) whose whole span lies inside it; and the busiest holds
/// at least `min`, so the check has teeth.
pub(crate) fn assert_at_most_per_window(spans: &[Span], max: usize, window: Duration, min: usize) {
    let mut busiest = 0;
    for (i, first) in spans.iter().enumerate() {
        let end = first.before + window;
        let inside = spans[i..]
            .iter()
            .take_while(|span| span.before < end)
            .filter(|span| span.after < end)
            .count();
        assert!(
            inside <= max,
            "{inside} grants inside a {window:?} window starting at grant {i}, bound {max}"
        );
        busiest = busiest.max(inside);
    }
    assert!(
        busiest >= min,
        "the busiest {window:?} window held only {busiest} (bound {max}, at least {min} \
         expected): the test saw no pressure"
    );
}
