//! The response future of [`Limit`](super::Limit).
//!
//! [`ResponseFuture`] resolves to the inner service's response, with its
//! error boxed as tower's `BoxError`:
//!
//! ```
//! use std::io;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_limits::{ConcurrencyLimitLayer, ConcurrencyLimiter};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tower_limits::error::BoxError> {
//! let mut service = ServiceBuilder::new()
//!     .layer(ConcurrencyLimitLayer::new(ConcurrencyLimiter::new(1)?))
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
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;

use crate::error::BoxError;
use crate::limiter::Permit;

pin_project! {
    /// Drives the inner service's future and records the call's completion
    /// (drops its [`Permit`]) the moment it finishes, fails or is dropped.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::future::pending;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::{ConcurrencyLimitLayer, ConcurrencyLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let limiter = ConcurrencyLimiter::new(1)?;
    /// let mut service = ConcurrencyLimitLayer::new(limiter.clone())
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
        inner: F,
        permit: Option<Permit>,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, permit: Permit) -> Self {
        Self {
            inner,
            permit: Some(permit),
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
        this.permit.take();
        Poll::Ready(output.map_err(Into::into))
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("permit", &self.permit)
            .finish_non_exhaustive()
    }
}
