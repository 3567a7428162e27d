//! [`LimiterFuture`]: the one future type every limiter method returns.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The future every [`Limiter`](super::Limiter) method returns.
///
/// In-memory limiters answer at once with [`LimiterFuture::ready`], which
/// allocates nothing; limiters backed by a network store box their future
/// with [`LimiterFuture::new`]. Keeping one concrete type keeps [`Limiter`](super::Limiter)
/// usable as a trait object, so different limiters sit side by side in a
/// [`CompositeLimiter`](crate::CompositeLimiter).
///
/// ```
/// use tower_limits::limiter::LimiterFuture;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// assert_eq!(LimiterFuture::ready(7).await, 7);
/// assert_eq!(LimiterFuture::new(async { 7 }).await, 7);
/// # }
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct LimiterFuture<'a, T> {
    state: FutureState<'a, T>,
}

enum FutureState<'a, T> {
    Ready(Option<T>),
    Boxed(Pin<Box<dyn Future<Output = T> + Send + 'a>>),
}

// `T` is moved out, never pinned, so the future is `Unpin` whatever `T` is.
impl<T> Unpin for LimiterFuture<'_, T> {}

impl<'a, T> LimiterFuture<'a, T> {
    /// A future that resolves to `value` on its first poll, without allocating.
    ///
    /// ```
    /// use tower_limits::error::LimiterError;
    /// use tower_limits::limiter::LimiterFuture;
    ///
    /// // How an in-memory limiter answers `can_proceed`.
    /// let answer: LimiterFuture<'_, Result<bool, LimiterError>> = LimiterFuture::ready(Ok(true));
    /// // Known without polling: layers skip the await.
    /// assert!(matches!(answer.into_ready(), Ok(Ok(true))));
    /// ```
    #[inline]
    pub fn ready(value: T) -> Self {
        Self {
            state: FutureState::Ready(Some(value)),
        }
    }

    /// Boxes an asynchronous computation.
    ///
    /// ```
    /// use tower_limits::error::LimiterError;
    /// use tower_limits::limiter::LimiterFuture;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LimiterError> {
    /// // A store round trip, say.
    /// let round_trip = async { Ok::<_, LimiterError>(3_usize) };
    /// let future = LimiterFuture::new(round_trip);
    /// assert_eq!(future.await?, 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(future: impl Future<Output = T> + Send + 'a) -> Self {
        Self {
            state: FutureState::Boxed(Box::pin(future)),
        }
    }

    /// The value, if it is already known without polling; otherwise the
    /// future itself, to be awaited.
    ///
    /// ```
    /// use tower_limits::limiter::LimiterFuture;
    ///
    /// assert_eq!(LimiterFuture::ready(1).into_ready().ok(), Some(1));
    /// assert!(LimiterFuture::new(async { 1 }).into_ready().is_err());
    /// ```
    #[inline]
    pub fn into_ready(self) -> Result<T, Self> {
        match self.state {
            FutureState::Ready(Some(value)) => Ok(value),
            state => Err(Self { state }),
        }
    }
}

impl<T> Future for LimiterFuture<'_, T> {
    type Output = T;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match &mut self.get_mut().state {
            FutureState::Ready(value) => {
                Poll::Ready(value.take().expect("LimiterFuture polled after completion"))
            }
            FutureState::Boxed(future) => future.as_mut().poll(cx),
        }
    }
}

impl<T> fmt::Debug for LimiterFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            FutureState::Ready(_) => "ready",
            FutureState::Boxed(_) => "pending",
        };
        f.debug_struct("LimiterFuture")
            .field("state", &state)
            .finish()
    }
}
