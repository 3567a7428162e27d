//! [`LimitMiddleware`]: the limits, the upstream feedback and the retry
//! policy of the tower stack, as a `reqwest_middleware::Middleware`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Extensions;
use reqwest::ResponseBuilderExt;
use reqwest_middleware::{Middleware, Next};
use tokio::sync::Mutex;
use tower::retry::RetryLayer;
use tower::{Layer, Service, ServiceExt};

use super::{FeedbackLayer, HttpLimitLayer, RetryLater, RetryPolicy};
use crate::error::{BoxError, Elapsed, LimiterError, Overloaded, Rejected};
use crate::limit::LimitLayer;
use crate::limiter::Limiter;
use crate::limiters::{AdaptiveRateLimiter, Pacer};

/// A [`reqwest_middleware::Middleware`] that applies a limiter to every
/// request, pauses it when the upstream asks ([`FeedbackLayer`]) and retries
/// `429` and `503` answers ([`RetryPolicy`]): the tower stack
/// `RetryLayer(RetryPolicy) → FeedbackLayer → HttpLimitLayer(LimitLayer)`,
/// run by the same code, around the rest of the middleware chain. Needs the
/// `reqwest-middleware` cargo feature.
///
/// [`new`](LimitMiddleware::new) configures all three for one limiter; the
/// setters replace each part. A permit is held until the response body has
/// been read or dropped, so a concurrency limit holds for streaming
/// downloads. A request whose body is a stream cannot be sent again: it is
/// sent once, without retries. When the retries give up, the error is a
/// [`reqwest_middleware::Error::Middleware`] holding [`RetryLater`]; a
/// refusal of the limit itself (reject mode, a maximum wait) holds the
/// [error](crate::error) the tower layer returns.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::http::LimitMiddleware;
/// use tower_limits::RateLimiter;
///
/// # fn main() -> Result<(), tower_limits::error::ConfigError> {
/// let limit = RateLimiter::builder("api", 20, Duration::from_secs(1)).without_backoff().build()?;
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(LimitMiddleware::new(limit))
///     .build();
/// # let _ = client;
/// # Ok(())
/// # }
/// ```
pub struct LimitMiddleware<L> {
    limit: HttpLimitLayer<L>,
    feedback: FeedbackLayer,
    retry: Option<RetryPolicy>,
}

impl<L: Limiter + Clone> LimitMiddleware<L> {
    /// Limits requests with `limiter`, pauses it when the upstream asks
    /// ([`FeedbackLayer::new`]), and retries throttled requests no earlier
    /// than its next available time
    /// ([`RetryPolicy::new`]`().`[`wait_for`](RetryPolicy::wait_for)).
    ///
    /// ```
    /// use tower_limits::http::LimitMiddleware;
    /// use tower_limits::ConcurrencyLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let middleware = LimitMiddleware::new(ConcurrencyLimiter::new(8)?);
    /// # let _ = middleware;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(limiter: L) -> Self {
        Self {
            feedback: FeedbackLayer::new(limiter.clone()),
            retry: Some(RetryPolicy::new().wait_for(limiter.clone())),
            limit: HttpLimitLayer::new(LimitLayer::new(limiter)),
        }
    }

    /// Limits requests with the configured `layer` (a maximum wait, reject
    /// mode...) instead of a default [`LimitLayer`] of the same limiter.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::LimitMiddleware;
    /// use tower_limits::{LimitLayer, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::in_memory(Quota::gcra(20, Duration::from_secs(1))?);
    /// let middleware = LimitMiddleware::new(limiter.clone())
    ///     .limit(LimitLayer::new(limiter).max_wait(Duration::from_secs(5)));
    /// # let _ = middleware;
    /// # Ok(())
    /// # }
    /// ```
    pub fn limit(mut self, layer: LimitLayer<L>) -> Self {
        self.limit = HttpLimitLayer::new(layer);
        self
    }

    /// Reads responses with `feedback` (more limiters to pause, another
    /// maximum pause...) instead of [`FeedbackLayer::new`] of the limiter.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::{FeedbackLayer, LimitMiddleware};
    /// use tower_limits::RateLimiter;
    /// use tower_limits::store::Quota;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::in_memory(Quota::gcra(20, Duration::from_secs(1))?);
    /// let middleware = LimitMiddleware::new(limiter.clone())
    ///     .feedback(FeedbackLayer::new(limiter).max_wait(Duration::from_secs(60)));
    /// # let _ = middleware;
    /// # Ok(())
    /// # }
    /// ```
    pub fn feedback(mut self, feedback: FeedbackLayer) -> Self {
        self.feedback = feedback;
        self
    }

    /// Retries with `policy`, as it is (give it
    /// [`wait_for`](RetryPolicy::wait_for) the limiter to keep that bound).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::{LimitMiddleware, RetryPolicy};
    /// use tower_limits::RateLimiter;
    /// use tower_limits::store::Quota;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::in_memory(Quota::gcra(20, Duration::from_secs(1))?);
    /// let middleware = LimitMiddleware::new(limiter.clone())
    ///     .retry(RetryPolicy::new().max_attempts(5).wait_for(limiter));
    /// # let _ = middleware;
    /// # Ok(())
    /// # }
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Never retries: a throttled answer is returned as it came (the
    /// feedback still pauses the limiter).
    ///
    /// ```
    /// use tower_limits::http::LimitMiddleware;
    /// use tower_limits::NullLimiter;
    ///
    /// let middleware = LimitMiddleware::new(NullLimiter).without_retry();
    /// # let _ = middleware;
    /// ```
    pub fn without_retry(mut self) -> Self {
        self.retry = None;
        self
    }
}

impl<P: Pacer + fmt::Debug> LimitMiddleware<AdaptiveRateLimiter<P>> {
    /// Paces requests with an adaptive rate that the upstream's answers
    /// steer ([`FeedbackLayer::adaptive`]): for an upstream whose limit the
    /// client does not know.
    ///
    /// ```
    /// use tower_limits::http::LimitMiddleware;
    /// use tower_limits::{AdaptiveRateLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = AdaptiveRateLimiter::builder(Rate::per_second(50)?).build()?;
    /// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
    ///     .with(LimitMiddleware::adaptive(limiter))
    ///     .build();
    /// # let _ = client;
    /// # Ok(())
    /// # }
    /// ```
    pub fn adaptive(limiter: AdaptiveRateLimiter<P>) -> Self {
        Self::new(limiter.clone()).feedback(FeedbackLayer::adaptive(limiter))
    }
}

impl<L: Clone> Clone for LimitMiddleware<L> {
    fn clone(&self) -> Self {
        Self {
            limit: self.limit.clone(),
            feedback: self.feedback.clone(),
            retry: self.retry.clone(),
        }
    }
}

impl<L: fmt::Debug> fmt::Debug for LimitMiddleware<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitMiddleware")
            .field("limit", &self.limit)
            .field("feedback", &self.feedback)
            .field("retry", &self.retry)
            .finish()
    }
}

#[async_trait::async_trait]
impl<L> Middleware for LimitMiddleware<L>
where
    L: Limiter + Clone + Send + Sync + 'static,
{
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let rest = Rest {
            next,
            extensions: Arc::new(Mutex::new(extensions)),
        };
        let stack = self.feedback.layer(self.limit.layer(rest));
        // A body of bytes can be sent again; a stream cannot.
        let resendable = request.body().is_none_or(|body| body.as_bytes().is_some());
        let retry = self.retry.clone().filter(|_| resendable);
        let request = http::Request::new(Attempt(Some(request)));
        let result = match retry {
            Some(policy) => RetryLayer::new(policy).layer(stack).oneshot(request).await,
            None => stack.oneshot(request).await,
        };
        let response = result.map_err(into_middleware_error)?;
        Ok(reqwest::Response::from(response.map(reqwest::Body::wrap)))
    }
}

/// The request of one attempt; a retry sends a clone
/// (`reqwest::Request::try_clone`).
struct Attempt(Option<reqwest::Request>);

impl Clone for Attempt {
    fn clone(&self) -> Self {
        Self(self.0.as_ref().and_then(reqwest::Request::try_clone))
    }
}

/// The rest of the middleware chain, then the client, as the innermost
/// tower service of the stack: `reqwest::Response`s become `http`
/// responses (keeping their URL) that the layers read and the limit's
/// permit rides in.
struct Rest<'a> {
    next: Next<'a>,
    /// Every attempt passes the chain's extensions on in turn.
    extensions: Arc<Mutex<&'a mut Extensions>>,
}

impl Clone for Rest<'_> {
    fn clone(&self) -> Self {
        Self {
            next: self.next.clone(),
            extensions: Arc::clone(&self.extensions),
        }
    }
}

type RestFuture<'a> = Pin<
    Box<
        dyn Future<Output = Result<http::Response<reqwest::Body>, reqwest_middleware::Error>>
            + Send
            + 'a,
    >,
>;

impl<'a> Service<http::Request<Attempt>> for Rest<'a> {
    type Response = http::Response<reqwest::Body>;
    type Error = reqwest_middleware::Error;
    type Future = RestFuture<'a>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Attempt>) -> Self::Future {
        let next = self.next.clone();
        let extensions = Arc::clone(&self.extensions);
        Box::pin(async move {
            let Some(request) = request.into_body().0 else {
                let error = std::io::Error::other("the request body cannot be sent again");
                return Err(reqwest_middleware::Error::middleware(error));
            };
            let mut extensions = extensions.lock().await;
            let response = next.run(request, &mut extensions).await?;
            let url = response.url().clone();
            let mut response = http::Response::<reqwest::Body>::from(response);
            // Where `reqwest::Response::from` finds the URL again.
            let mut with_url = http::Response::builder().url(url);
            if let Some(url) = with_url.extensions_mut() {
                response.extensions_mut().extend(std::mem::take(url));
            }
            Ok(response)
        })
    }
}

/// The stack's error as reqwest-middleware's: the chain's own errors as
/// they were, the crate's refusals as middleware errors that downcast to
/// their type.
fn into_middleware_error(error: BoxError) -> reqwest_middleware::Error {
    let error = match error.downcast::<reqwest_middleware::Error>() {
        Ok(error) => return *error,
        Err(error) => error,
    };
    let typed = typed::<RetryLater>(error)
        .or_else(typed::<Rejected>)
        .or_else(typed::<Elapsed>)
        .or_else(typed::<Overloaded>)
        .or_else(typed::<LimiterError>);
    reqwest_middleware::Error::Middleware(typed.unwrap_or_else(anyhow::Error::from_boxed))
}

/// `error` as an `anyhow::Error` that downcasts to `E`, if it is one.
fn typed<E>(error: BoxError) -> Result<anyhow::Error, BoxError>
where
    E: std::error::Error + Send + Sync + 'static,
{
    error
        .downcast::<E>()
        .map(|error| anyhow::Error::new(*error))
}
