//! The response future of [`Limit`](super::Limit).
//!
//! [`ResponseFuture`] resolves to the inner service's response, with its
//! error boxed as tower's `BoxError`:
//!
//! ```
//! use std::io;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_limits::{LimitLayer, ConcurrencyLimiter};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tower_limits::error::BoxError> {
//! let mut service = ServiceBuilder::new()
//!     .layer(LimitLayer::new(ConcurrencyLimiter::new(1)?))
//!     .service(service_fn(|()| async { Err::<(), _>(io::Error::other("upstream down")) }));
//!
//! let Err(error) = service.ready().await?.call(()).await else {
//!     unreachable!("the inner service always fails");
//! };
//! assert!(error.is::<io::Error>());
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tower_service::Service;

use super::costs::ResponseCost;
use crate::error::BoxError;
use crate::limiter::{Limiter, Permit};

pin_project! {
    /// Drives the inner service's future and records the call's completion
    /// (drops its [`Permit`]) the moment it finishes, fails or is dropped.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::future::pending;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::{LimitLayer, ConcurrencyLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let limiter = ConcurrencyLimiter::new(1)?;
    /// let mut service = LimitLayer::new(limiter.clone())
    ///     .layer(service_fn(|()| pending::<Result<(), Infallible>>()));
    ///
    /// let response = service.ready().await?.call(()); // a call that never ends
    /// assert_eq!(limiter.running(), 1);
    /// drop(response); // cancelled: the slot is released
    /// assert_eq!(limiter.running(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub struct ResponseFuture<F> {
        #[pin]
        inner: CallOrRefusal<F>,
        permit: Permit,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, permit: Permit) -> Self {
        Self {
            inner: CallOrRefusal::call(inner),
            permit,
        }
    }

    /// A call the layer refused in `poll_ready`: it fails with `error`
    /// without reaching the inner service.
    pub(crate) fn refused(error: BoxError) -> Self {
        Self {
            inner: CallOrRefusal::refusal(error),
            permit: Permit::unit(),
        }
    }
}

pin_project! {
    /// The inner service's future, or the error of an admission that failed
    /// (a refusal, a full line, a wait past the maximum, a store error). The
    /// layers answer such a failure from `call`, as tower's `LoadShed` does,
    /// because an error from `poll_ready` tells callers such as tower's
    /// `Buffer` that the service is gone for good.
    #[project = CallOrRefusalProj]
    pub(crate) enum CallOrRefusal<F> {
        Call { #[pin] future: F },
        Refusal { error: Option<BoxError> },
    }
}

impl<F> CallOrRefusal<F> {
    pub(crate) fn call(future: F) -> Self {
        Self::Call { future }
    }

    pub(crate) fn refusal(error: BoxError) -> Self {
        Self::Refusal { error: Some(error) }
    }
}

impl<F, T, E> Future for CallOrRefusal<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            CallOrRefusalProj::Call { future } => future.poll(cx).map_err(Into::into),
            CallOrRefusalProj::Refusal { error } => Poll::Ready(Err(error
                .take()
                .expect("a refusal polled after completion"))),
        }
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let output = ready!(this.inner.poll(cx));
        // Released now, not when the future is dropped.
        this.permit.release_now();
        Poll::Ready(output)
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("permit", &self.permit)
            .finish_non_exhaustive()
    }
}

/// The response future of the layers that admit each request when it is
/// called ([`PerRequest`](super::PerRequest), the service of the keyed, fair and
/// cost-weighted layers): admission, then readiness of (a clone
/// of) the inner service, then the call. An admission not used by a call,
/// because the future was dropped or the inner service failed, is refunded.
///
/// Admission waits until the future is first polled:
///
/// ```
/// use std::convert::Infallible;
/// use tower::{service_fn, Layer, Service, ServiceExt};
/// use tower_limits::limit::future::PerRequestFuture;
/// use tower_limits::limit::FairLimitLayer;
/// use tower_limits::ConcurrencyLimiter;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower_limits::error::BoxError> {
/// let shared = ConcurrencyLimiter::new(1)?;
/// let mut service = FairLimitLayer::new(shared.clone(), |n: &u32| *n)
///     .layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n + 1) }));
///
/// let first: PerRequestFuture<u32> = service.ready().await?.call(1);
/// let second: PerRequestFuture<u32> = service.ready().await?.call(2);
/// assert_eq!(shared.running(), 0); // nothing admitted yet
/// drop(first); // never polled: it took nothing
/// assert_eq!(second.await?, 3);
/// assert_eq!(shared.running(), 0); // the call ended, its slot is free
/// # Ok(())
/// # }
/// ```
pub struct PerRequestFuture<T> {
    future: Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>,
}

impl<T> PerRequestFuture<T> {
    /// Calls `inner` with `request` once `admission` yields a permit (and the
    /// limiter that granted it, for a refund), then settles the call's cost
    /// with what `settle_with` reads from the response.
    pub(crate) fn new<S, L, Request, G>(
        admission: impl Future<Output = Result<(L, Permit), BoxError>> + Send + 'static,
        mut inner: S,
        request: Request,
        settle_with: Arc<G>,
    ) -> Self
    where
        S: Service<Request, Response = T> + Send + 'static,
        S::Future: Send,
        S::Error: Into<BoxError>,
        L: Limiter,
        Request: Send + 'static,
        G: ResponseCost<T> + Send + Sync + 'static,
    {
        let future = async move {
            let (limiter, permit) = admission.await?;
            let unused = Unused {
                limiter: &limiter,
                permit: Some(permit),
            };
            poll_fn(|cx| inner.poll_ready(cx))
                .await
                .map_err(Into::into)?;
            let mut permit = unused.into_used();
            let response = inner.call(request).await.map_err(Into::into)?;
            if let (Some(permit), Some(actual)) = (permit.as_mut(), settle_with.cost(&response)) {
                limiter.settle(permit, actual);
            }
            Ok(response)
        };
        Self {
            future: Box::pin(future),
        }
    }
}

impl<T> Future for PerRequestFuture<T> {
    type Output = Result<T, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.future.as_mut().poll(cx)
    }
}

impl<T> fmt::Debug for PerRequestFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerRequestFuture").finish_non_exhaustive()
    }
}

/// An admission not yet used by a call: refunded if dropped.
struct Unused<'a, L: Limiter> {
    limiter: &'a L,
    permit: Option<Permit>,
}

impl<L: Limiter> Unused<'_, L> {
    fn into_used(mut self) -> Option<Permit> {
        self.permit.take()
    }
}

impl<L: Limiter> Drop for Unused<'_, L> {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.limiter.refund(permit);
        }
    }
}
