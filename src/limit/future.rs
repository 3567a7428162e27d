//! The response future of [`Limit`](super::Limit).

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
