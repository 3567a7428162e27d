//! [`PerRequest`]: the service of the layers that admit each request when it
//! is called, because its key or cost comes from the request.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower_service::Service;

use super::costs::ResponseCost;
use super::future::PerRequestFuture;
use crate::error::BoxError;
use crate::limiter::{Limiter, Permit};

/// How a per-request layer admits a request: implemented (only) by
/// [`KeyedLimitLayer`](super::KeyedLimitLayer),
/// [`FairLimitLayer`](super::FairLimitLayer) and
/// [`CostLimitLayer`](super::CostLimitLayer), which [`PerRequest`] serves;
/// see their docs for examples.
///
/// Its [`admission`](AdmitRequest::admission) is what a call's response
/// future awaits first; the permit it yields is held until the call ends.
///
/// ```
/// use tower_limits::error::BoxError;
/// use tower_limits::limit::AdmitRequest;
/// use tower_limits::limit::{FairLimitLayer, KeyedLimitLayer};
/// use tower_limits::{ConcurrencyLimiter, KeyedLimiter, Permit};
///
/// // Works with either per-request layer.
/// async fn admit<A: AdmitRequest<u32>>(layer: &A, request: u32) -> Result<Permit, BoxError> {
///     let (_limiter, permit) = layer.admission(&request).await?;
///     Ok(permit)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BoxError> {
/// let shared = ConcurrencyLimiter::new(2)?;
/// let fair = FairLimitLayer::new(shared.clone(), |tenant: &u32| *tenant);
/// let permit = admit(&fair, 7).await?;
/// assert_eq!(shared.running(), 1);
/// drop(permit);
/// assert_eq!(shared.running(), 0);
///
/// let per_tenant = KeyedLimiter::of(ConcurrencyLimiter::new(1)?).build()?;
/// let keyed = KeyedLimitLayer::new(per_tenant, |tenant: &u32| *tenant);
/// let _permit = admit(&keyed, 7).await?;
/// assert_eq!(keyed.keyed().limiter(&7)?.running(), 1);
/// # Ok(())
/// # }
/// ```
pub trait AdmitRequest<Request>: sealed::Sealed {
    /// The limiter that grants the permit (to refund or settle it).
    type Limiter: Limiter;
    /// Reads a call's real cost from its response.
    type Settle;

    /// Waits until `request` is admitted.
    fn admission(
        &self,
        request: &Request,
    ) -> impl Future<Output = Result<(Self::Limiter, Permit), BoxError>> + Send + 'static;

    /// What settles a call's cost once its response is in.
    fn settle_with(&self) -> Arc<Self::Settle>;
}

pub(super) mod sealed {
    /// Only this crate's layers admit per request.
    pub trait Sealed {}
}

/// A service that admits each request when it is called: `poll_ready` is
/// always ready; the response future waits for admission, then for (a clone
/// of) the inner service, then calls it. The one service of the
/// per-request layers ([`KeyedLimitLayer`](super::KeyedLimitLayer),
/// [`FairLimitLayer`](super::FairLimitLayer),
/// [`CostLimitLayer`](super::CostLimitLayer)), named as
/// `PerRequest<S, KeyedLimitLayer<..>>` and so on; their docs have examples.
///
/// ```
/// use std::convert::Infallible;
/// use tower::{service_fn, Layer, Service, ServiceExt};
/// use tower_limits::limit::PerRequest;
/// use tower_limits::limit::FairLimitLayer;
/// use tower_limits::NullLimiter;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower_limits::error::BoxError> {
/// let layer = FairLimitLayer::new(NullLimiter, |tenant: &u32| *tenant);
/// let mut service: PerRequest<_, _> =
///     layer.layer(service_fn(|tenant: u32| async move { Ok::<_, Infallible>(tenant + 1) }));
/// assert_eq!(service.ready().await?.call(41).await?, 42);
/// # Ok(())
/// # }
/// ```
pub struct PerRequest<S, A> {
    inner: S,
    admit: A,
}

impl<S, A> PerRequest<S, A> {
    pub(super) fn new(inner: S, admit: A) -> Self {
        Self { inner, admit }
    }
}

impl<S: Clone, A: Clone> Clone for PerRequest<S, A> {
    fn clone(&self) -> Self {
        Self::new(self.inner.clone(), self.admit.clone())
    }
}

impl<S: fmt::Debug, A: fmt::Debug> fmt::Debug for PerRequest<S, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerRequest")
            .field("inner", &self.inner)
            .field("admit", &self.admit)
            .finish()
    }
}

impl<S, A, Request> Service<Request> for PerRequest<S, A>
where
    S: Service<Request> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    S::Response: Send + 'static,
    Request: Send + 'static,
    A: AdmitRequest<Request>,
    A::Settle: ResponseCost<S::Response> + Send + Sync + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = PerRequestFuture<S::Response>;

    /// Always ready: admission waits in the response future.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let admission = self.admit.admission(&request);
        let settle_with = self.admit.settle_with();
        PerRequestFuture::new(admission, self.inner.clone(), request, settle_with)
    }
}
