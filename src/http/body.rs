//! [`LimitBody`]: a response body that holds its call's permit until it ends.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::limiter::Permit;

pin_project! {
    /// A response body holding the [`Permit`] of its call: the call counts as
    /// running until the body has been read to its end, has failed, or is
    /// dropped, so a concurrency limit holds for streaming responses.
    ///
    /// Built by [`HttpLimit`](super::HttpLimit) and
    /// [`TooManyRequests`](super::TooManyRequests); a rejected request's
    /// body is empty.
    ///
    /// ```
    /// use http_body_util::{BodyExt, Full};
    /// use tower_limits::http::LimitBody;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{ConcurrencyLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ConcurrencyLimiter::new(1)?;
    /// let Admission::Granted(permit) = limiter.try_acquire().await? else { unreachable!() };
    /// let body = LimitBody::new(Full::new(&b"hello"[..]), permit);
    /// assert_eq!(limiter.running(), 1); // the body is still to be read
    /// let bytes = body.collect().await?.to_bytes();
    /// assert_eq!(&bytes[..], b"hello");
    /// assert_eq!(limiter.running(), 0); // read to its end: released
    /// # Ok(())
    /// # }
    /// ```
    pub struct LimitBody<B> {
        #[pin]
        kind: Kind<B>,
        permit: Option<Permit>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Empty,
    }
}

impl<B> LimitBody<B> {
    /// `body`, holding `permit` until it ends or is dropped.
    ///
    /// ```
    /// use http_body_util::Empty;
    /// use tower_limits::http::LimitBody;
    /// use tower_limits::Permit;
    ///
    /// let body = LimitBody::new(Empty::<&[u8]>::new(), Permit::unit());
    /// # drop(body);
    /// ```
    pub fn new(body: B, permit: Permit) -> Self {
        Self {
            kind: Kind::Inner { body },
            permit: Some(permit),
        }
    }

    /// An empty body holding nothing: the body of a rejected request.
    ///
    /// ```
    /// use http_body::Body;
    /// use http_body_util::Full;
    /// use tower_limits::http::LimitBody;
    ///
    /// let body = LimitBody::<Full<&[u8]>>::empty();
    /// assert!(body.is_end_stream());
    /// ```
    pub fn empty() -> Self {
        Self {
            kind: Kind::Empty,
            permit: None,
        }
    }
}

impl<B: Body> Body for LimitBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let KindProj::Inner { mut body } = this.kind.project() else {
            return Poll::Ready(None);
        };
        let frame = ready!(body.as_mut().poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) || body.is_end_stream() {
            // The end of the body, or its failure: the call is over.
            this.permit.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Empty => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Empty => SizeHint::with_exact(0),
        }
    }
}

impl<B> fmt::Debug for LimitBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Inner { .. } => "inner",
            Kind::Empty => "empty",
        };
        f.debug_struct("LimitBody")
            .field("kind", &kind)
            .field("permit", &self.permit)
            .finish()
    }
}
