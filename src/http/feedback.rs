//! [`FeedbackLayer`]: a client pauses every caller sharing its limiters when
//! the upstream says so (429 with `Retry-After`, an exhausted `RateLimit`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::Response;
use pin_project_lite::pin_project;
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use super::advice::{Advice, stated_quota};
use crate::error::LimiterError;
use crate::limiter::{
    DEFAULT_MAX_UPSTREAM_WAIT, Limiter, LimiterFuture, cap_upstream_wait, far_future,
};
use crate::limiters::{AdaptiveRateLimiter, Pacer};
use crate::rate::Rate;

/// What [`FeedbackLayer`](crate::http::FeedbackLayer) reports to, whatever
/// the pacer.
trait Steer: Send + Sync + fmt::Debug {
    fn record_refusal(&self, sent_at: Instant);
    fn record_success(&self, sent_at: Instant);
    fn adopt_quota(&self, quota: Rate);
}

impl<P: Pacer + fmt::Debug> Steer for AdaptiveRateLimiter<P> {
    fn record_refusal(&self, sent_at: Instant) {
        AdaptiveRateLimiter::record_refusal(self, sent_at);
    }
    fn record_success(&self, sent_at: Instant) {
        AdaptiveRateLimiter::record_success(self, sent_at);
    }
    fn adopt_quota(&self, quota: Rate) {
        AdaptiveRateLimiter::adopt_quota(self, quota);
    }
}

/// The first pause after a 429 without a hint.
const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);
/// The pause after a refusal that says to retry at once.
const DEFAULT_MIN_PAUSE: Duration = Duration::from_millis(100);

/// Reads every response and, when the upstream asks for a pause, pushes the
/// next available time of the limiters it was given
/// ([`Limiter::set_next_available_time`]): every clone, every caller and
/// every layer sharing those limiters then waits, not only the caller that
/// got the 429.
///
/// What counts as a request to pause is described by [`Advice`]: a 429 or
/// 503 with `Retry-After` (or tower_governor's `X-RateLimit-After`, or
/// gRPC's pushback), or an exhausted quota in the `RateLimit`,
/// `RateLimit-Remaining`/`-Reset` or `X-RateLimit-Remaining`/`-Reset`
/// headers (on any status: the client pauses before it is refused). A
/// refusal that says to retry at once (`Retry-After: 0`) still pauses for
/// [`min_pause`](FeedbackLayer::min_pause) (100 ms by default). A 429 or
/// 503 without a usable header, or an exhausted quota without a reset,
/// backs off exponentially: 1 s, then twice as long for each further one
/// in a row, until a call sent after the last of them succeeds (calls
/// already in flight when the upstream started refusing do not end the
/// run).
///
/// With [`FeedbackLayer::adaptive`], it also steers an
/// [`AdaptiveRateLimiter`]: every refusal moves its rate under the
/// upstream's estimated capacity, successes are counted for the next
/// estimate, and a quota the upstream states (`RateLimit-Policy`) is
/// adopted.
///
/// Every pause is capped by [`max_wait`](FeedbackLayer::max_wait) (default
/// [`DEFAULT_MAX_UPSTREAM_WAIT`], 5 minutes, as the other paths from an
/// upstream's wait to a pause), so a hostile or broken upstream cannot park
/// the client forever. A malformed header is ignored with a `tracing`
/// warning.
///
/// Put it outside (before) the limit layers in a `ServiceBuilder`, or
/// anywhere: the response passes through unchanged.
///
/// ```
/// use std::time::Duration;
/// use http::{Request, Response, StatusCode};
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_limits::http::FeedbackLayer;
/// use tower_limits::{Limiter, LimitLayer, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tower_limits::error::BoxError> {
/// let limiter = RateLimiter::builder("upstream", 100, Duration::from_secs(1))
///     .without_backoff()
///     .build()?;
/// let upstream = service_fn(|_: Request<()>| async {
///     let response = Response::builder()
///         .status(StatusCode::TOO_MANY_REQUESTS)
///         .header("retry-after", "30")
///         .body(())?;
///     Ok::<_, http::Error>(response)
/// });
/// let mut client = ServiceBuilder::new()
///     .layer(FeedbackLayer::new(limiter.clone()))
///     .layer(LimitLayer::new(limiter.clone()))
///     .service(upstream);
///
/// let start = tokio::time::Instant::now();
/// let response = client.ready().await?.call(Request::new(())).await?;
/// assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
/// // Every caller sharing the limiter now waits 30 s.
/// assert_eq!(limiter.next_available_time().await?, start + Duration::from_secs(30));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct FeedbackLayer {
    limiters: Vec<Arc<dyn Limiter>>,
    adaptive: Option<Arc<dyn Steer>>,
    max_wait: Duration,
    backoff: Duration,
    min_pause: Duration,
    streak: Arc<Streak>,
}

/// The run of refusals without a hint, and when the last one came.
#[derive(Debug)]
struct Streak {
    length: AtomicU32,
    /// When the last refusal of the run came, in nanoseconds from `base`.
    last: AtomicU64,
    base: Instant,
}

impl Streak {
    fn new() -> Self {
        Self {
            length: AtomicU32::new(0),
            last: AtomicU64::new(0),
            base: Instant::now(),
        }
    }

    fn nanos(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.base).as_nanos();
        u64::try_from(since).unwrap_or(u64::MAX)
    }

    /// One more refusal; how many came before it in the run.
    fn lengthen(&self) -> u32 {
        self.last
            .fetch_max(self.nanos(Instant::now()), Ordering::Relaxed);
        self.length.fetch_add(1, Ordering::Relaxed)
    }

    /// A call sent at `sent_at` succeeded: the run ends, unless the call
    /// was already in flight when the last refusal came.
    fn end_after(&self, sent_at: Instant) {
        if self.nanos(sent_at) > self.last.load(Ordering::Relaxed) {
            self.length.store(0, Ordering::Relaxed);
        }
    }
}

impl FeedbackLayer {
    /// A layer that pauses `limiter` when the upstream asks.
    ///
    /// ```
    /// use tower_limits::http::FeedbackLayer;
    /// use tower_limits::ConcurrencyLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let layer = FeedbackLayer::new(ConcurrencyLimiter::new(8)?);
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(limiter: impl Limiter) -> Self {
        Self {
            limiters: vec![Arc::new(limiter)],
            adaptive: None,
            max_wait: DEFAULT_MAX_UPSTREAM_WAIT,
            backoff: DEFAULT_BACKOFF,
            min_pause: DEFAULT_MIN_PAUSE,
            streak: Arc::new(Streak::new()),
        }
    }

    /// A layer that pauses `limiter` when the upstream asks, and steers its
    /// rate: every refusal lowers it ([`AdaptiveRateLimiter::record_refusal`]),
    /// every success reports its latency
    /// ([`AdaptiveRateLimiter::record_success`]), and a `RateLimit-Policy`
    /// the upstream states is adopted ([`AdaptiveRateLimiter::adopt_quota`]).
    ///
    /// ```
    /// use http::{Request, Response, StatusCode};
    /// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
    /// use tower_limits::http::FeedbackLayer;
    /// use tower_limits::{AdaptiveRateLimiter, LimitLayer, Rate};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let limiter = AdaptiveRateLimiter::builder(Rate::per_second(100)?).build()?;
    /// let upstream = service_fn(|_: Request<()>| async {
    ///     let response = Response::builder()
    ///         .status(StatusCode::TOO_MANY_REQUESTS)
    ///         .header("retry-after", "0")
    ///         .body(())?;
    ///     Ok::<_, http::Error>(response)
    /// });
    /// let mut client = ServiceBuilder::new()
    ///     .layer(FeedbackLayer::adaptive(limiter.clone()))
    ///     .layer(LimitLayer::new(limiter.clone()))
    ///     .service(upstream);
    ///
    /// client.ready().await?.call(Request::new(())).await?;
    /// assert_eq!(limiter.current_rate(), 25.0); // and a 100 ms pause
    /// # Ok(())
    /// # }
    /// ```
    pub fn adaptive<P: Pacer + fmt::Debug>(limiter: AdaptiveRateLimiter<P>) -> Self {
        Self {
            adaptive: Some(Arc::new(limiter.clone())),
            ..Self::new(limiter)
        }
    }

    /// Pauses `limiter` too when the upstream asks (a per-host limit
    /// beside a global one, say). Call it once per further limiter.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::FeedbackLayer;
    /// use tower_limits::{ConcurrencyLimiter, DelayLimiter};
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let layer = FeedbackLayer::new(ConcurrencyLimiter::new(8)?)
    ///     .also_pause(DelayLimiter::new(Duration::from_millis(100))?);
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn also_pause(mut self, limiter: impl Limiter) -> Self {
        self.limiters.push(Arc::new(limiter));
        self
    }

    /// The longest pause an upstream can impose (default
    /// [`DEFAULT_MAX_UPSTREAM_WAIT`], 5 minutes); longer ones are cut to it,
    /// with a warning.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::FeedbackLayer;
    /// use tower_limits::NullLimiter;
    ///
    /// let layer = FeedbackLayer::new(NullLimiter).max_wait(Duration::from_secs(60));
    /// # let _ = layer;
    /// ```
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// The first pause after a 429 that says nothing of when to retry
    /// (default 1 s); it doubles with each further such 429 in a row, up to
    /// [`max_wait`](FeedbackLayer::max_wait).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::FeedbackLayer;
    /// use tower_limits::NullLimiter;
    ///
    /// let layer = FeedbackLayer::new(NullLimiter).backoff(Duration::from_millis(250));
    /// # let _ = layer;
    /// ```
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// The pause after a refusal that says to retry at once
    /// (`Retry-After: 0`, which tower_governor sends for any wait under a
    /// second); default 100 ms. The refusal still counts as one: every
    /// caller pauses this long, and an adaptive rate decreases.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::FeedbackLayer;
    /// use tower_limits::NullLimiter;
    ///
    /// let layer = FeedbackLayer::new(NullLimiter).min_pause(Duration::from_millis(250));
    /// # let _ = layer;
    /// ```
    pub fn min_pause(mut self, pause: Duration) -> Self {
        self.min_pause = pause;
        self
    }

    /// Reports the answer to a call sent at `sent_at` to the adaptive
    /// limiter, if there is one.
    fn steer<B>(&self, response: &Response<B>, advice: Advice, sent_at: Instant) {
        let Some(adaptive) = &self.adaptive else {
            return;
        };
        match advice {
            Advice::Proceed => adaptive.record_success(sent_at),
            Advice::Wait(_) | Advice::BackOff => adaptive.record_refusal(sent_at),
        }
        if let Some(quota) = stated_quota(response.headers()) {
            adaptive.adopt_quota(quota);
        }
    }

    /// The pause `advice` asks for, capped; updates the run of hint-less
    /// refusals.
    fn pause_for(&self, advice: Advice, sent_at: Instant) -> Option<Duration> {
        let wait = match advice {
            Advice::Proceed => {
                self.streak.end_after(sent_at);
                return None;
            }
            Advice::Wait(wait) => wait.max(self.min_pause),
            Advice::BackOff => {
                let streak = self.streak.lengthen();
                let factor = 1_u32.checked_shl(streak.min(31)).unwrap_or(u32::MAX);
                self.backoff.saturating_mul(factor)
            }
        };
        Some(cap_upstream_wait(wait, self.max_wait)).filter(|wait| !wait.is_zero())
    }

    /// Pauses every limiter until `wait` from now; a future for those whose
    /// store answers later.
    fn pause(&self, wait: Duration) -> Option<LimiterFuture<'static, ()>> {
        let at = Instant::now().checked_add(wait).unwrap_or_else(far_future);
        tracing::debug!(?wait, "upstream asked for a pause");
        let pending: Vec<Arc<dyn Limiter>> = self
            .limiters
            .iter()
            .filter(
                |limiter| match limiter.set_next_available_time(at).into_ready() {
                    Ok(result) => {
                        log_failure(result);
                        false
                    }
                    Err(_pending) => true,
                },
            )
            .cloned()
            .collect();
        if pending.is_empty() {
            return None;
        }
        Some(LimiterFuture::new(async move {
            for limiter in pending {
                log_failure(limiter.set_next_available_time(at).await);
            }
        }))
    }
}

fn log_failure(result: Result<(), LimiterError>) {
    if let Err(error) = result {
        tracing::warn!(%error, "could not pause a limiter after the upstream asked");
    }
}

impl fmt::Debug for FeedbackLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeedbackLayer")
            .field("limiters", &self.limiters.len())
            .field("adaptive", &self.adaptive)
            .field("max_wait", &self.max_wait)
            .field("backoff", &self.backoff)
            .field("min_pause", &self.min_pause)
            .finish()
    }
}

impl<S> Layer<S> for FeedbackLayer {
    type Service = Feedback<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Feedback {
            inner,
            layer: Arc::new(self.clone()),
        }
    }
}

/// A service whose responses can pause its limiters; built by
/// [`FeedbackLayer`], which has an example.
#[derive(Clone, Debug)]
pub struct Feedback<S> {
    inner: S,
    layer: Arc<FeedbackLayer>,
}

impl<S> Feedback<S> {
    /// The inner service.
    ///
    /// ```
    /// use tower::Layer;
    /// use tower_limits::http::FeedbackLayer;
    /// use tower_limits::NullLimiter;
    ///
    /// let service = FeedbackLayer::new(NullLimiter).layer("upstream");
    /// assert_eq!(*service.get_ref(), "upstream");
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, Request, B> Service<Request> for Feedback<S>
where
    S: Service<Request, Response = Response<B>>,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        ResponseFuture {
            inner: self.inner.call(request),
            layer: Arc::clone(&self.layer),
            sent_at: Instant::now(),
            pausing: None,
        }
    }
}

pin_project! {
    /// The response future of [`Feedback`]: the inner response, once the
    /// pause it asked for (if any) is recorded in every limiter.
    ///
    /// ```
    /// use http::{Request, Response};
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::http::{feedback::ResponseFuture, FeedbackLayer};
    /// use tower_limits::NullLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), std::convert::Infallible> {
    /// let mut service = FeedbackLayer::new(NullLimiter)
    ///     .layer(service_fn(|_: Request<()>| async {
    ///         Ok::<_, std::convert::Infallible>(Response::new("ok"))
    ///     }));
    /// let future: ResponseFuture<_, &str> = service.ready().await?.call(Request::new(()));
    /// assert_eq!(*future.await?.body(), "ok");
    /// # Ok(())
    /// # }
    /// ```
    pub struct ResponseFuture<F, B> {
        #[pin]
        inner: F,
        layer: Arc<FeedbackLayer>,
        sent_at: Instant,
        pausing: Option<(Response<B>, LimiterFuture<'static, ()>)>,
    }
}

impl<F, B, E> Future for ResponseFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Some((_, pause)) = this.pausing.as_mut() {
            ready!(Pin::new(pause).poll(cx));
            let (response, _) = this.pausing.take().expect("checked above");
            return Poll::Ready(Ok(response));
        }
        let response = ready!(this.inner.poll(cx))?;
        let advice = Advice::from_response(&response);
        this.layer.steer(&response, advice, *this.sent_at);
        let wait = this.layer.pause_for(advice, *this.sent_at);
        let Some(mut pause) = wait.and_then(|wait| this.layer.pause(wait)) else {
            return Poll::Ready(Ok(response));
        };
        if Pin::new(&mut pause).poll(cx).is_ready() {
            return Poll::Ready(Ok(response));
        }
        *this.pausing = Some((response, pause));
        Poll::Pending
    }
}

impl<F, B> fmt::Debug for ResponseFuture<F, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("pausing", &self.pausing.is_some())
            .finish_non_exhaustive()
    }
}
