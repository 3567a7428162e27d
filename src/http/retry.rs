//! [`RetryPolicy`]: a `tower::retry` policy that retries throttled requests
//! (429, 503) after the time the upstream or the limiter names.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{Request, Response, StatusCode};
use tokio::time::Instant;
use tower::retry::Policy;
use tower::retry::budget::{Budget, TpsBudget};

use super::advice::Advice;
use super::error::RetryLater;
use crate::limiter::{DEFAULT_MAX_UPSTREAM_WAIT, Limiter, far_future};

const DEFAULT_MAX_ATTEMPTS: u32 = 3;
const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);

/// Retries a request answered `429 Too Many Requests` or `503 Service
/// Unavailable`, after the time the response advertises ([`Advice`]) or a
/// 1 s backoff doubling per attempt, and no earlier than the
/// next available time of the limiter it [waits for](RetryPolicy::wait_for).
///
/// Retries are bounded three ways: at most
/// [`max_attempts`](RetryPolicy::max_attempts) attempts in all (default 3),
/// a retry [`budget`](RetryPolicy::budget) shared by every request (by
/// default tower's `TpsBudget` of 10 retries a second plus 20% of
/// successful requests, over 10 s), and never a sleep longer than
/// [`max_wait`](RetryPolicy::max_wait) (default
/// [`DEFAULT_MAX_UPSTREAM_WAIT`], 5 minutes), whichever source (header,
/// backoff, limiter) asks for it. When it gives up on a throttled
/// response, the result becomes the error [`RetryLater`], which carries the
/// retry instant, for callers who queue work themselves.
///
/// Request bodies must be `Clone` to be sent again (`Full<Bytes>`,
/// `String`, `()`...).
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
/// use http::{Request, Response, StatusCode};
/// use tower::retry::RetryLayer;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_limits::error::BoxError;
/// use tower_limits::http::RetryPolicy;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let calls = Arc::new(AtomicU32::new(0));
/// let counter = calls.clone();
/// // The first call is throttled for 2 s, the second succeeds.
/// let upstream = service_fn(move |_: Request<()>| {
///     let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
///     async move {
///         let status = if first { StatusCode::TOO_MANY_REQUESTS } else { StatusCode::OK };
///         let response = Response::builder().status(status).header("retry-after", "2").body(())?;
///         Ok::<_, BoxError>(response)
///     }
/// });
/// let mut client = ServiceBuilder::new()
///     .layer(RetryLayer::new(RetryPolicy::new()))
///     .service(upstream);
///
/// let start = tokio::time::Instant::now();
/// let response = client.ready().await?.call(Request::new(())).await?;
/// assert_eq!(response.status(), StatusCode::OK);
/// assert_eq!(start.elapsed(), Duration::from_secs(2));
/// assert_eq!(calls.load(Ordering::SeqCst), 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RetryPolicy {
    attempts: u32,
    max_attempts: u32,
    max_wait: Duration,
    backoff: Duration,
    budget: Arc<dyn Budget + Send + Sync>,
    limiter: Option<Arc<dyn Limiter>>,
}

impl RetryPolicy {
    /// A policy with the defaults above.
    ///
    /// ```
    /// use tower::retry::RetryLayer;
    /// use tower_limits::http::RetryPolicy;
    ///
    /// let layer = RetryLayer::new(RetryPolicy::new());
    /// # let _ = layer;
    /// ```
    pub fn new() -> Self {
        Self {
            attempts: 1,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            max_wait: DEFAULT_MAX_UPSTREAM_WAIT,
            backoff: DEFAULT_BACKOFF,
            budget: Arc::new(TpsBudget::new(Duration::from_secs(10), 10, 0.2)),
            limiter: None,
        }
    }

    /// At most `max_attempts` attempts per request, the first included
    /// (1 never retries).
    ///
    /// ```
    /// use tower_limits::http::RetryPolicy;
    ///
    /// let policy = RetryPolicy::new().max_attempts(5);
    /// # let _ = policy;
    /// ```
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Gives up at once (with [`RetryLater`]) when the wait would be longer
    /// than `max_wait` (default [`DEFAULT_MAX_UPSTREAM_WAIT`], 5 minutes):
    /// the advertised wait, the backoff or the limiter's next available
    /// time. The policy never sleeps longer than this. The [`RetryLater`]
    /// keeps the wait the upstream asked for;
    /// [`job::reschedule`](crate::job::reschedule) caps it in turn.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::RetryPolicy;
    ///
    /// let policy = RetryPolicy::new().max_wait(Duration::from_secs(10));
    /// # let _ = policy;
    /// ```
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// The shared retry budget: a retry happens only if it can withdraw
    /// from it; every request that needs no retry deposits.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower::retry::budget::TpsBudget;
    /// use tower_limits::http::RetryPolicy;
    ///
    /// // One retry a second, plus one per 10 successful requests.
    /// let policy = RetryPolicy::new().budget(TpsBudget::new(Duration::from_secs(10), 1, 0.1));
    /// # let _ = policy;
    /// ```
    pub fn budget(mut self, budget: impl Budget + Send + Sync + 'static) -> Self {
        self.budget = Arc::new(budget);
        self
    }

    /// Waits at least until `limiter`'s next available time before a retry
    /// (the limiter a [`FeedbackLayer`](super::FeedbackLayer) pauses), and
    /// gives up with [`RetryLater`] when that time is past
    /// [`max_wait`](RetryPolicy::max_wait).
    ///
    /// An in-memory limiter answers at once, so the policy decides before it
    /// sleeps. A store-backed limiter answers after a round trip, so it is
    /// asked during the sleep, which then still ends after `max_wait` at the
    /// latest; the limit layers the retry goes through hold it from there.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::RetryPolicy;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::builder("upstream", 10, Duration::from_secs(1)).build()?;
    /// let policy = RetryPolicy::new().wait_for(limiter.clone());
    /// # let _ = policy;
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait_for(mut self, limiter: impl Limiter) -> Self {
        self.limiter = Some(Arc::new(limiter));
        self
    }

    /// The wait before the next attempt after a throttled `response`: the
    /// advertised one, or a backoff doubling per attempt.
    fn advertised_wait<B>(&self, response: &Response<B>) -> Duration {
        match Advice::from_parts(response.status(), response.headers(), SystemTime::now()) {
            Advice::Wait(wait) => wait,
            Advice::Proceed | Advice::BackOff => {
                let doublings = self.attempts.saturating_sub(1).min(31);
                self.backoff.saturating_mul(1 << doublings)
            }
        }
    }

    /// The limiter's next available time if it is known without waiting;
    /// the limiter to ask during the sleep if its answer comes later.
    fn limiter_time(&self) -> (Option<Instant>, Option<Arc<dyn Limiter>>) {
        let Some(limiter) = &self.limiter else {
            return (None, None);
        };
        match limiter.next_available_time().into_ready() {
            Ok(Ok(at)) => (Some(at), None),
            Ok(Err(error)) => {
                tracing::warn!(%error, "retrying without the limiter's next available time");
                (None, None)
            }
            Err(_pending) => (None, Some(Arc::clone(limiter))),
        }
    }
}

/// Sleeps until `at`, or until the `remote` limiter's next available time if
/// later, but never past `deadline`.
fn sleep_until(at: Instant, remote: Option<Arc<dyn Limiter>>, deadline: Instant) -> RetryFuture {
    Box::pin(async move {
        let limiter_at = match remote {
            Some(limiter) => limiter.next_available_time().await.ok(),
            None => None,
        };
        let until = limiter_at.map_or(at, |limiter_at| limiter_at.max(at));
        tokio::time::sleep_until(until.min(deadline)).await;
    })
}

/// `now + wait`, saturating at a far-future instant.
fn after(now: Instant, wait: Duration) -> Instant {
    now.checked_add(wait).unwrap_or_else(far_future)
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("attempts", &self.attempts)
            .field("max_attempts", &self.max_attempts)
            .field("max_wait", &self.max_wait)
            .field("limiter", &self.limiter.is_some())
            .finish_non_exhaustive()
    }
}

/// The wait before a retry.
type RetryFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

fn throttled(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE
}

impl<B: Clone, ResB, E: From<RetryLater>> Policy<Request<B>, Response<ResB>, E> for RetryPolicy {
    type Future = RetryFuture;

    fn retry(
        &mut self,
        _request: &mut Request<B>,
        result: &mut Result<Response<ResB>, E>,
    ) -> Option<RetryFuture> {
        let response = match result {
            Ok(response) if throttled(response.status()) => response,
            Ok(_) => {
                self.budget.deposit();
                return None;
            }
            Err(_) => return None,
        };
        let now = Instant::now();
        let (limiter_at, remote) = self.limiter_time();
        let limiter_wait =
            limiter_at.map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
        let wait = self.advertised_wait(response).max(limiter_wait);
        let exhausted = self.attempts >= self.max_attempts || wait > self.max_wait;
        if exhausted || !self.budget.withdraw() {
            *result = Err(RetryLater::new(response.status(), wait, self.attempts).into());
            return None;
        }
        self.attempts += 1;
        Some(sleep_until(
            after(now, wait),
            remote,
            after(now, self.max_wait),
        ))
    }

    fn clone_request(&mut self, request: &Request<B>) -> Option<Request<B>> {
        let mut clone = Request::new(request.body().clone());
        *clone.method_mut() = request.method().clone();
        *clone.uri_mut() = request.uri().clone();
        *clone.version_mut() = request.version();
        *clone.headers_mut() = request.headers().clone();
        *clone.extensions_mut() = request.extensions().clone();
        Some(clone)
    }
}
