//! [`LimitLayer`], which wraps services in [`Limit`].

use std::sync::Arc;

use tower_layer::Layer;

use super::cost::CostLimitLayer;
use super::{Limit, Options};
use crate::limiter::Limiter;
use crate::line::Queue;

/// Applies a [`Limiter`](crate::Limiter) to a service; see the
/// [module docs](crate::limit).
///
/// Every service this layer (or a clone of it) builds shares the limiter and
/// one queue of waiting callers, served in arrival order.
///
/// ```
/// use std::convert::Infallible;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_limits::{LimitLayer, ConcurrencyLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower_limits::error::BoxError> {
/// let mut service = ServiceBuilder::new()
///     .layer(LimitLayer::new(ConcurrencyLimiter::new(10)?).max_waiting(100))
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
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::{DelayLimiter, LimitLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let layer = LimitLayer::new(DelayLimiter::new(Duration::from_secs(1))?);
    /// let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));
    ///
    /// let start = tokio::time::Instant::now();
    /// for n in 0..3 {
    ///     assert_eq!(service.ready().await?.call(n).await?, n);
    /// }
    /// // The second and third calls waited a second each.
    /// assert_eq!(start.elapsed(), Duration::from_secs(2));
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(limiter: L) -> Self {
        Self {
            limiter,
            queue: Arc::default(),
            options: Options::default(),
        }
    }

    waiting_methods! {
        max_waiting: "in the layer's line", "The count includes the caller at the head of the line and, with a
limiter that answers after a round trip, callers whose retry is in
flight; not a caller's first attempt (see the
[module docs](crate::limit#limiters-that-answer-after-a-round-trip)).",
        "use std::convert::Infallible;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_limits::error::Overloaded;
use tower_limits::{ConcurrencyLimiter, LimitLayer};

# #[tokio::main(flavor = \"current_thread\")]
# async fn main() -> Result<(), tower_limits::error::BoxError> {
let layer = LimitLayer::new(ConcurrencyLimiter::new(1)?).max_waiting(0);
let mut first = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));
let mut second = first.clone();

first.ready().await?; // takes the only slot
let Err(error) = second.ready().await?.call(2).await else {
    unreachable!(\"the slot is taken and nobody may wait\");
};
assert!(error.is::<Overloaded>());

first.call(1).await?; // the slot is free again
assert_eq!(second.ready().await?.call(2).await?, 2);
# Ok(())
# }";
        max_wait: "use std::convert::Infallible;
use std::time::Duration;
use tokio::time::Instant;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_limits::error::Elapsed;
use tower_limits::{DelayLimiter, LimitLayer};

# #[tokio::main(flavor = \"current_thread\", start_paused = true)]
# async fn main() -> Result<(), tower_limits::error::BoxError> {
let limiter = DelayLimiter::new(Duration::from_secs(10))?;
let layer = LimitLayer::new(limiter).max_wait(Duration::from_secs(5));
let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));

service.ready().await?.call(1).await?;
let start = Instant::now();
let Err(error) = service.ready().await?.call(2).await else {
    unreachable!(\"the next start is 10 s away\");
};
assert!(error.is::<Elapsed>());
assert_eq!(start.elapsed(), Duration::ZERO); // failed without waiting
# Ok(())
# }";
        reject: "use std::convert::Infallible;
use std::time::Duration;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_limits::error::Rejected;
use tower_limits::{LimitLayer, RateLimiter};

# #[tokio::main(flavor = \"current_thread\", start_paused = true)]
# async fn main() -> Result<(), tower_limits::error::BoxError> {
let limiter = RateLimiter::builder(\"api\", 1, Duration::from_secs(1))
    .without_backoff()
    .build()?;
let layer = LimitLayer::new(limiter).reject();
let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));

service.ready().await?.call(1).await?;
let Err(error) = service.ready().await?.call(2).await else {
    unreachable!(\"one call a second\");
};
assert!(error.is::<Rejected>());

tokio::time::advance(Duration::from_secs(1)).await;
assert_eq!(service.ready().await?.call(2).await?, 2); // still usable
# Ok(())
# }";
    }

    /// Observes the layer's decisions under `name`: counts
    /// ([`stats`](Self::stats)), `tracing` spans and, with the `metrics`
    /// cargo feature, metrics labelled `limiter = name`; see
    /// [observing a layer](crate::limit#observing-a-layer). Call it before building
    /// services (they share what the layer has then).
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::{ConcurrencyLimiter, LimitLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let layer = LimitLayer::new(ConcurrencyLimiter::new(4)?).name("payments");
    /// let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));
    /// service.ready().await?.call(1).await?;
    /// assert_eq!(layer.stats().map(|stats| stats.granted), Some(1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(mut self, name: &str) -> Self {
        self.options.name(name);
        self
    }

    /// Calls `hook` with every decision of the layer (an observed layer;
    /// named `limit` unless [`name`](Self::name) says otherwise). The hook
    /// runs on the caller's task: keep it short.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::limit::Outcome;
    /// use tower_limits::{LimitLayer, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let refused = Arc::new(AtomicU32::new(0));
    /// let counted = Arc::clone(&refused);
    /// let layer = LimitLayer::new(RateLimiter::in_memory(Quota::gcra(1, Duration::from_secs(1))?))
    ///     .reject()
    ///     .on_decision(move |decision| {
    ///         if let Outcome::Refused { .. } = decision.outcome {
    ///             counted.fetch_add(1, Ordering::Relaxed);
    ///         }
    ///     });
    /// let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));
    /// service.ready().await?.call(1).await?;
    /// assert!(service.ready().await?.call(2).await.is_err());
    /// assert_eq!(refused.load(Ordering::Relaxed), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_decision(
        mut self,
        hook: impl Fn(&super::Decision<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.options.on_decision(Arc::new(hook));
        self
    }

    /// Shadow mode: decides and records as this layer would in
    /// [`reject`](Self::reject) mode, but lets every call through at once
    /// (a denied call goes ahead without taking anything from the limiter).
    /// Roll a limit out this way and watch what it would refuse
    /// ([`stats`](Self::stats), the hook, `tracing`, metrics) before you
    /// enforce it.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::{LimitLayer, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let layer = LimitLayer::new(RateLimiter::in_memory(Quota::gcra(1, Duration::from_secs(1))?)).shadow();
    /// let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));
    /// for n in 0..3 {
    ///     assert_eq!(service.ready().await?.call(n).await?, n); // never waits
    /// }
    /// let stats = layer.stats().unwrap();
    /// assert_eq!((stats.granted, stats.refused), (1, 2)); // what enforcing would do
    /// # Ok(())
    /// # }
    /// ```
    pub fn shadow(mut self) -> Self {
        self.options.shadow();
        self
    }

    /// The limiter, shared with every service the layer builds.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::{ConcurrencyLimiter, LimitLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let layer = LimitLayer::new(ConcurrencyLimiter::new(4)?);
    /// assert_eq!(layer.limiter().max_concurrent(), 4);
    ///
    /// let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));
    /// let ready = service.ready().await?; // reserves a slot
    /// assert_eq!(layer.limiter().running(), 1);
    /// ready.call(1).await?;
    /// assert_eq!(layer.limiter().running(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn limiter(&self) -> &L {
        &self.limiter
    }

    /// Charges each request `cost_of(&request)` units in one decision,
    /// keeping this layer's waiting options: see [`CostLimitLayer`], which
    /// admits in `call`, once the request is known.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{LimitLayer, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// // 100 emails a minute; a request is a list of recipients.
    /// let emails = RateLimiter::in_memory(Quota::gcra(100, Duration::from_secs(60))?.with_burst(100)?);
    /// let layer = LimitLayer::new(emails)
    ///     .max_wait(Duration::from_secs(30))
    ///     .cost(|recipients: &Vec<String>| recipients.len().try_into().unwrap_or(u32::MAX));
    /// assert_eq!(layer.limiter().quota().capacity(), 100);
    /// # Ok(())
    /// # }
    /// ```
    pub fn cost<C>(self, cost_of: C) -> CostLimitLayer<L, C> {
        CostLimitLayer::new(self.limiter, self.queue, self.options, cost_of)
    }
}

impl<L: Limiter> LimitLayer<L> {
    /// The decisions counted so far by every service of this layer, if it is
    /// observed ([`name`](Self::name), [`on_decision`](Self::on_decision)
    /// or [`shadow`](Self::shadow)), and the calls its limiter counts
    /// running; a few atomic reads.
    ///
    /// ```
    /// use tower_limits::{LimitLayer, ConcurrencyLimiter, NullLimiter};
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// assert_eq!(LimitLayer::new(NullLimiter).stats(), None);
    /// let stats = LimitLayer::new(NullLimiter).name("x").stats().unwrap();
    /// assert_eq!((stats.decisions(), stats.in_flight), (0, None));
    ///
    /// let layer = LimitLayer::new(ConcurrencyLimiter::new(4)?).name("db");
    /// assert_eq!(layer.stats().unwrap().in_flight, Some(0));
    /// # Ok(())
    /// # }
    /// ```
    pub fn stats(&self) -> Option<super::LayerStats> {
        self.options.stats_with(&self.limiter)
    }
}

impl<S, L: Limiter + Clone> Layer<S> for LimitLayer<L> {
    type Service = Limit<S, L>;

    fn layer(&self, inner: S) -> Limit<S, L> {
        Limit::new(
            inner,
            self.limiter.clone(),
            Arc::clone(&self.queue),
            self.options.clone(),
        )
    }
}
