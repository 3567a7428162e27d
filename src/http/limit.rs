//! [`HttpLimitLayer`]: a [`LimitLayer`] for HTTP services whose calls run
//! until their response bodies end.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::{HeaderMap, Response};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use super::body::LimitBody;
use super::server::{DefaultRefusal, MakeRefusal, rejection};
use crate::error::{BoxError, Rejected};
use crate::limit::future::CallOrRefusal;
use crate::limit::{Limit, LimitLayer};
use crate::limiter::{Limiter, Permit};

/// Applies a limiter to an HTTP service like [`LimitLayer`], except that a
/// call counts as running until its response body has been read to the end
/// or dropped, not only until the response headers arrive: the permit
/// travels in the body ([`LimitBody`]). A concurrency limit then holds for
/// streaming responses and for bodies read slowly.
///
/// It takes a configured [`LimitLayer`] (waiting bounds, reject mode) and
/// waits and fails exactly as it does.
///
/// ```
/// use http::{Request, Response};
/// use http_body_util::{BodyExt, Full};
/// use tower::{service_fn, Layer, Service, ServiceExt};
/// use tower_limits::http::HttpLimitLayer;
/// use tower_limits::{LimitLayer, ConcurrencyLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower_limits::error::BoxError> {
/// let limiter = ConcurrencyLimiter::new(1)?;
/// let layer = HttpLimitLayer::new(LimitLayer::new(limiter.clone()));
/// let mut service = layer.layer(service_fn(|_: Request<()>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(Full::new(&b"streamed"[..])))
/// }));
///
/// let response = service.ready().await?.call(Request::new(())).await?;
/// assert_eq!(limiter.running(), 1); // the body is still to be read
/// response.into_body().collect().await?;
/// assert_eq!(limiter.running(), 0);
/// # Ok(())
/// # }
/// ```
pub struct HttpLimitLayer<L, R = DefaultRefusal> {
    layer: LimitLayer<L>,
    /// Answers the refusals of reject mode instead of failing, when set.
    refusal: Option<Arc<R>>,
}

impl<L: fmt::Debug, R> fmt::Debug for HttpLimitLayer<L, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpLimitLayer")
            .field("layer", &self.layer)
            .field("refusal", &self.refusal.is_some())
            .finish()
    }
}

impl<L: Clone, R> Clone for HttpLimitLayer<L, R> {
    fn clone(&self) -> Self {
        Self {
            layer: self.layer.clone(),
            refusal: self.refusal.clone(),
        }
    }
}

impl<L> HttpLimitLayer<L> {
    /// Wraps a configured [`LimitLayer`] (or one of its aliases).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::HttpLimitLayer;
    /// use tower_limits::{LimitLayer, ConcurrencyLimiter};
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let layer = HttpLimitLayer::new(
    ///     LimitLayer::new(ConcurrencyLimiter::new(8)?).max_wait(Duration::from_secs(5)),
    /// );
    /// assert_eq!(layer.limiter().max_concurrent(), 8);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(layer: LimitLayer<L>) -> Self {
        Self {
            layer,
            refusal: None,
        }
    }

    /// In [reject mode](LimitLayer::reject), answers a refused request
    /// with what `refusal` builds ([`MakeRefusal`]) from the decision and
    /// the default answer, `429 Too Many Requests` with `Retry-After`,
    /// instead of failing with [`Rejected`]: the HTTP form of the refusal,
    /// as [`TooManyRequestsLayer::refusal`](super::TooManyRequestsLayer::refusal)
    /// gives. Pass [`DefaultRefusal`] for the default answer as it is. The
    /// other failures (a wait past the maximum, a full line, a store
    /// error) stay errors. Leave gRPC services without it: tonic turns the
    /// [`Rejected`] error into a status itself.
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::{Request, Response, StatusCode};
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::error::Rejected;
    /// use tower_limits::http::HttpLimitLayer;
    /// use tower_limits::{LimitLayer, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let limiter = RateLimiter::in_memory(Quota::gcra(1, Duration::from_secs(5))?);
    /// let layer = HttpLimitLayer::new(LimitLayer::new(limiter).reject())
    ///     .refusal(|_: &Rejected, head: Response<()>| head.map(|()| "slow down"));
    /// let mut service = layer.layer(service_fn(|_: Request<()>| async {
    ///     Ok::<_, std::convert::Infallible>(Response::new("hello"))
    /// }));
    ///
    /// service.ready().await?.call(Request::new(())).await?;
    /// let refused = service.ready().await?.call(Request::new(())).await?;
    /// assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    /// assert_eq!(refused.headers()["retry-after"], "5");
    /// # Ok(())
    /// # }
    /// ```
    pub fn refusal<R>(self, refusal: R) -> HttpLimitLayer<L, R> {
        HttpLimitLayer {
            layer: self.layer,
            refusal: Some(Arc::new(refusal)),
        }
    }
}

impl<L, R> HttpLimitLayer<L, R> {
    /// The limiter, shared by every service the layer builds.
    ///
    /// ```
    /// use tower_limits::http::HttpLimitLayer;
    /// use tower_limits::{LimitLayer, ConcurrencyLimiter};
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let layer = HttpLimitLayer::new(LimitLayer::new(ConcurrencyLimiter::new(2)?));
    /// assert_eq!(layer.limiter().running(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn limiter(&self) -> &L {
        self.layer.limiter()
    }
}

impl<L> From<LimitLayer<L>> for HttpLimitLayer<L> {
    fn from(layer: LimitLayer<L>) -> Self {
        Self::new(layer)
    }
}

impl<S, L: Limiter + Clone, R> Layer<S> for HttpLimitLayer<L, R> {
    type Service = HttpLimit<S, L, R>;

    fn layer(&self, inner: S) -> Self::Service {
        HttpLimit {
            limit: self.layer.layer(inner),
            refusal: self.refusal.clone(),
        }
    }
}

/// An HTTP service whose calls hold their permit until the response body
/// ends; built by [`HttpLimitLayer`], which has an example.
///
/// Clones share the limiter, as [`Limit`]'s do.
///
/// # Panics
///
/// `call` panics if `poll_ready` has not returned `Ready(Ok(()))` since the
/// last `call`, as [`Limit`] does.
pub struct HttpLimit<S, L: Limiter, R = DefaultRefusal> {
    limit: Limit<S, L>,
    refusal: Option<Arc<R>>,
}

impl<S, L: Limiter, R> HttpLimit<S, L, R> {
    /// The inner service.
    ///
    /// ```
    /// use tower::Layer;
    /// use tower_limits::http::HttpLimitLayer;
    /// use tower_limits::{LimitLayer, NullLimiter};
    ///
    /// let service = HttpLimitLayer::new(LimitLayer::new(NullLimiter)).layer("upstream");
    /// assert_eq!(*service.get_ref(), "upstream");
    /// ```
    pub fn get_ref(&self) -> &S {
        self.limit.get_ref()
    }
}

impl<S: Clone, L: Limiter + Clone, R> Clone for HttpLimit<S, L, R> {
    fn clone(&self) -> Self {
        Self {
            limit: self.limit.clone(),
            refusal: self.refusal.clone(),
        }
    }
}

impl<S: fmt::Debug, L: Limiter + fmt::Debug, R> fmt::Debug for HttpLimit<S, L, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpLimit")
            .field("limit", &self.limit)
            .field("refusal", &self.refusal.is_some())
            .finish()
    }
}

impl<S, L, R, Request, B> Service<Request> for HttpLimit<S, L, R>
where
    S: Service<Request, Response = Response<B>>,
    S::Error: Into<BoxError>,
    L: Limiter + Clone,
    R: MakeRefusal<B>,
{
    type Response = Response<LimitBody<B>>;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.limit.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let (inner, permit) = match self.limit.call_holding(request) {
            Ok((future, permit)) => (CallOrRefusal::call(future), Some(permit)),
            Err(error) => (CallOrRefusal::refusal(error), None),
        };
        ResponseFuture {
            inner,
            permit,
            refusal: self.refusal.clone(),
        }
    }
}

pin_project! {
    /// The response future of [`HttpLimit`]: on success, the permit moves
    /// into the response body; on failure or drop, it is released at once.
    ///
    /// ```
    /// use std::future::pending;
    /// use http::{Request, Response};
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::http::HttpLimitLayer;
    /// use tower_limits::{LimitLayer, ConcurrencyLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let limiter = ConcurrencyLimiter::new(1)?;
    /// let mut service = HttpLimitLayer::new(LimitLayer::new(limiter.clone()))
    ///     .layer(service_fn(|_: Request<()>| pending::<Result<Response<String>, std::io::Error>>()));
    /// let response = service.ready().await?.call(Request::new(()));
    /// assert_eq!(limiter.running(), 1);
    /// drop(response); // cancelled before the headers arrived
    /// assert_eq!(limiter.running(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub struct ResponseFuture<F, R = DefaultRefusal> {
        #[pin]
        inner: CallOrRefusal<F>,
        permit: Option<Permit>,
        refusal: Option<Arc<R>>,
    }
}

impl<F, B, E, R> Future for ResponseFuture<F, R>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
    R: MakeRefusal<B>,
{
    type Output = Result<Response<LimitBody<B>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let output = ready!(this.inner.poll(cx));
        let permit = this.permit.take(); // released here on failure
        let response = match (output, &permit, this.refusal.as_deref()) {
            (Ok(response), _, _) => response,
            // The layer's own refusal (no permit), with a hook to answer it.
            (Err(error), None, Some(refusal)) => match error.downcast::<Rejected>() {
                Ok(rejected) => {
                    let head = rejection(&rejected, HeaderMap::new());
                    return Poll::Ready(Ok(refusal.make_refusal(&rejected, head)));
                }
                Err(error) => return Poll::Ready(Err(error)),
            },
            (Err(error), _, _) => return Poll::Ready(Err(error)),
        };
        let permit = permit.expect("http::limit::ResponseFuture polled after completion");
        Poll::Ready(Ok(response.map(|body| LimitBody::new(body, permit))))
    }
}

impl<F, R> fmt::Debug for ResponseFuture<F, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("permit", &self.permit)
            .finish_non_exhaustive()
    }
}
