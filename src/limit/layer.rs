//! [`LimitLayer`], which wraps services in [`Limit`].

use std::sync::Arc;
use std::time::Duration;

use tower_layer::Layer;

use super::waiting::Queue;
use super::{Limit, Options};
use crate::limiter::Limiter;

/// Applies a [`Limiter`](crate::Limiter) to a service; see the
/// [module docs](crate::limit).
///
/// Every service this layer (or a clone of it) builds shares the limiter and
/// one queue of waiting callers, served in arrival order.
///
/// ```
/// use std::convert::Infallible;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_limits::{ConcurrencyLimitLayer, ConcurrencyLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower_limits::error::BoxError> {
/// let mut service = ServiceBuilder::new()
///     .layer(ConcurrencyLimitLayer::new(ConcurrencyLimiter::new(10)?).max_waiting(100))
///     .service(service_fn(|n: u32| async move { Ok::<_, Infallible>(n + 1) }));
/// assert_eq!(service.ready().await?.call(1).await?, 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct LimitLayer<L> {
    limiter: L,
    queue: Arc<Queue>,
    options: Options,
}

impl<L> LimitLayer<L> {
    /// A layer that waits for `limiter`'s admission, without bound.
    pub fn new(limiter: L) -> Self {
        Self {
            limiter,
            queue: Arc::default(),
            options: Options::default(),
        }
    }

    /// Past `max_waiting` callers already waiting, `poll_ready` fails at once
    /// with [`Overloaded`](crate::error::Overloaded) instead of queueing
    /// without bound (seed 004's queue overflow). 0 means never wait.
    ///
    /// ```
    /// use tower_limits::{ConcurrencyLimiter, LimitLayer};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = LimitLayer::new(ConcurrencyLimiter::new(4)?).max_waiting(1_000);
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_waiting(mut self, max_waiting: usize) -> Self {
        self.options.max_waiting = Some(max_waiting);
        self
    }

    /// A caller waits at most `max_wait` in all, then fails with
    /// [`Elapsed`](crate::error::Elapsed); it fails at once when the limiter
    /// names an instant past that deadline.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{DelayLimiter, LimitLayer};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = LimitLayer::new(DelayLimiter::default()).max_wait(Duration::from_secs(5));
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.options.max_wait = Some(max_wait);
        self
    }

    /// Reject mode: never wait; a denied `poll_ready` fails at once with
    /// [`Rejected`](crate::error::Rejected), which carries the instant at
    /// which to retry. For servers that shed load instead of queueing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{LimitLayer, RateLimiter};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 100, Duration::from_secs(1)).without_backoff().build()?;
    /// let layer = LimitLayer::new(limiter).reject();
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn reject(mut self) -> Self {
        self.options.reject = true;
        self
    }

    /// The limiter.
    pub fn limiter(&self) -> &L {
        &self.limiter
    }
}

impl<S, L: Limiter + Clone> Layer<S> for LimitLayer<L> {
    type Service = Limit<S, L>;

    fn layer(&self, inner: S) -> Limit<S, L> {
        Limit::new(
            inner,
            self.limiter.clone(),
            Arc::clone(&self.queue),
            self.options,
        )
    }
}
