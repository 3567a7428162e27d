//! [`KeyedLimitLayer`]: a limit per key taken from each request.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use tower_layer::Layer;

use super::Options;
use super::costs::{KeepEstimate, RequestCost, UnitCost};
use super::per_request::sealed::Sealed;
use super::per_request::{AdmitRequest, PerRequest};
use super::waiting::admit_in_line;
use crate::error::BoxError;
use crate::limiter::{Limiter, Permit};
use crate::limiters::KeyedLimiter;

/// Applies a [`KeyedLimiter`] to a service: each request is admitted by the
/// limiter of its key (a tenant, an API key, a route, a peer address), taken
/// from the request by a function. One key's backlog never delays another
/// key's admission; within a key, waiting callers go in arrival order.
///
/// Admission happens when the request is known, in `call`: `poll_ready` is
/// always ready, and the response future waits for the key's admission, then
/// for the inner service (a clone of it, so `S: Clone`), then calls it. A
/// request dropped before the inner call gives its admission back.
///
/// ```
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_limits::limit::KeyedLimitLayer;
/// use tower_limits::{KeyedLimiter, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tower_limits::error::BoxError> {
/// // One request per second per tenant; requests are (tenant, payload).
/// let per_tenant = KeyedLimiter::builder(|tenant: &&'static str| {
///     RateLimiter::builder(*tenant, 1, Duration::from_secs(1))
///         .without_backoff()
///         .build()
///         .expect("valid configuration")
/// })
/// .build()?;
/// let mut service = ServiceBuilder::new()
///     .layer(KeyedLimitLayer::new(per_tenant, |(tenant, _): &(&'static str, u32)| *tenant))
///     .service(service_fn(|(_, n): (&'static str, u32)| async move { Ok::<_, Infallible>(n) }));
///
/// let start = tokio::time::Instant::now();
/// service.ready().await?.call(("acme", 1)).await?;
/// service.ready().await?.call(("globex", 2)).await?; // another tenant: at once
/// assert_eq!(start.elapsed(), Duration::ZERO);
/// service.ready().await?.call(("acme", 3)).await?; // acme's second: a second later
/// assert_eq!(start.elapsed(), Duration::from_secs(1));
/// # Ok(())
/// # }
/// ```
pub struct KeyedLimitLayer<K, L, F, C = UnitCost, G = KeepEstimate> {
    keyed: KeyedLimiter<K, L>,
    key_of: Arc<F>,
    cost_of: Arc<C>,
    settle_with: Arc<G>,
    options: Options,
}

impl<K, L, F> KeyedLimitLayer<K, L, F, UnitCost, KeepEstimate> {
    /// A layer admitting each request by the limiter of `key_of(&request)`.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::limit::KeyedLimitLayer;
    /// use tower_limits::{ConcurrencyLimiter, KeyedLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// // Two calls at once per tenant; requests are (tenant, body).
    /// let per_tenant = KeyedLimiter::of(ConcurrencyLimiter::new(2)?).build()?;
    /// let layer = KeyedLimitLayer::new(per_tenant, |(tenant, _): &(u32, &'static str)| *tenant);
    /// let mut service = layer.layer(service_fn(|(_, body): (u32, &'static str)| async move {
    ///     Ok::<_, Infallible>(body.len())
    /// }));
    ///
    /// assert_eq!(service.ready().await?.call((7, "hello")).await?, 5);
    /// assert_eq!(layer.keyed().len(), 1); // tenant 7's limiter, made on first use
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(keyed: KeyedLimiter<K, L>, key_of: F) -> Self {
        Self {
            keyed,
            key_of: Arc::new(key_of),
            cost_of: Arc::new(UnitCost),
            settle_with: Arc::new(KeepEstimate),
            options: Options::default(),
        }
    }
}

impl<K, L, F, C, G> KeyedLimitLayer<K, L, F, C, G> {
    /// Charges each request `cost_of(&request)` units in one decision (a
    /// batch of 5 calls takes 5). A cost the key's limiter can never grant
    /// fails the request with a [`LimiterError`](crate::error::LimiterError)
    /// holding [`CostTooHigh`](crate::error::CostTooHigh).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::limit::KeyedLimitLayer;
    /// use tower_limits::{KeyedLimiter, RateLimiter};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // 10,000 tokens a minute per API key; a request says how many it needs.
    /// struct Completion { api_key: String, max_tokens: u32 }
    /// let tokens = KeyedLimiter::builder(|key: &String| {
    ///     RateLimiter::builder(key.clone(), 10_000, Duration::from_secs(60)).build().unwrap()
    /// })
    /// .build()?;
    /// let layer = KeyedLimitLayer::new(tokens, |request: &Completion| request.api_key.clone())
    ///     .cost(|request: &Completion| request.max_tokens);
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn cost<C2>(self, cost_of: C2) -> KeyedLimitLayer<K, L, F, C2, G> {
        KeyedLimitLayer {
            keyed: self.keyed,
            key_of: self.key_of,
            cost_of: Arc::new(cost_of),
            settle_with: self.settle_with,
            options: self.options.clone(),
        }
    }

    /// Estimate, then settle: once a call succeeds, `settle_with(&response)`
    /// tells its real cost, and the difference from the charged estimate is
    /// given back or charged ([`Limiter::settle`]). For quotas known only
    /// from the response, like an LLM API's tokens per minute.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::limit::KeyedLimitLayer;
    /// use tower_limits::{KeyedLimiter, RateLimiter};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// struct Completion { api_key: String, max_tokens: u32 }
    /// struct Reply { tokens_used: u32 }
    /// let tokens = KeyedLimiter::builder(|key: &String| {
    ///     RateLimiter::builder(key.clone(), 10_000, Duration::from_secs(60)).build().unwrap()
    /// })
    /// .build()?;
    /// let layer = KeyedLimitLayer::new(tokens, |request: &Completion| request.api_key.clone())
    ///     .cost(|request: &Completion| request.max_tokens)
    ///     .settle(|reply: &Reply| Some(reply.tokens_used));
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn settle<G2>(self, settle_with: G2) -> KeyedLimitLayer<K, L, F, C, G2> {
        KeyedLimitLayer {
            keyed: self.keyed,
            key_of: self.key_of,
            cost_of: self.cost_of,
            settle_with: Arc::new(settle_with),
            options: self.options.clone(),
        }
    }

    waiting_methods! {
        max_waiting: "for the request's key", "The admitted caller does not count: with `max_waiting(1)`, one call
of a key runs, one waits, and the next is turned away. What counts
with a limiter that answers after a round trip is said in
[`LimitLayer::max_waiting`](super::LimitLayer::max_waiting).",
        "use std::convert::Infallible;
use std::time::Duration;
use tokio::time::Instant;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_limits::error::Overloaded;
use tower_limits::limit::KeyedLimitLayer;
use tower_limits::{DelayLimiter, KeyedLimiter};

# #[tokio::main(flavor = \"current_thread\", start_paused = true)]
# async fn main() -> Result<(), tower_limits::error::BoxError> {
// Calls of one tenant start at least a second apart.
let per_tenant = KeyedLimiter::of(DelayLimiter::new(Duration::from_secs(1))?).build()?;
let layer = KeyedLimitLayer::new(per_tenant, |tenant: &&'static str| *tenant).max_waiting(1);
let mut service = layer.layer(service_fn(|tenant: &'static str| async move {
    Ok::<_, Infallible>(tenant)
}));

let start = Instant::now();
service.ready().await?.call(\"acme\").await?; // admitted at once
let waiter = tokio::spawn(service.ready().await?.call(\"acme\"));
tokio::task::yield_now().await; // the second acme call waits

let Err(error) = service.ready().await?.call(\"acme\").await else {
    unreachable!(\"one acme call is already waiting\");
};
assert_eq!(error.downcast_ref::<Overloaded>().map(Overloaded::waiting), Some(1));
service.ready().await?.call(\"globex\").await?; // other tenants are not affected

waiter.await??;
assert_eq!(start.elapsed(), Duration::from_secs(1));
# Ok(())
# }";
        max_wait: "use std::convert::Infallible;
use std::time::Duration;
use tokio::time::Instant;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_limits::error::Elapsed;
use tower_limits::limit::KeyedLimitLayer;
use tower_limits::{DelayLimiter, KeyedLimiter};

# #[tokio::main(flavor = \"current_thread\", start_paused = true)]
# async fn main() -> Result<(), tower_limits::error::BoxError> {
let per_tenant = KeyedLimiter::of(DelayLimiter::new(Duration::from_secs(10))?)
    .build()?;
let layer = KeyedLimitLayer::new(per_tenant, |tenant: &u32| *tenant)
    .max_wait(Duration::from_secs(1));
let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));

let start = Instant::now();
service.ready().await?.call(7).await?;
let Err(error) = service.ready().await?.call(7).await else {
    unreachable!(\"tenant 7's next call is 10 s away\");
};
let retry_at = error.downcast_ref::<Elapsed>().and_then(Elapsed::retry_at);
assert_eq!(retry_at, Some(start + Duration::from_secs(10)));
assert_eq!(start.elapsed(), Duration::ZERO); // failed without waiting
# Ok(())
# }";
        reject: "use std::convert::Infallible;
use std::time::Duration;
use tokio::time::Instant;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_limits::error::Rejected;
use tower_limits::limit::KeyedLimitLayer;
use tower_limits::{DelayLimiter, KeyedLimiter};

# #[tokio::main(flavor = \"current_thread\", start_paused = true)]
# async fn main() -> Result<(), tower_limits::error::BoxError> {
let per_tenant = KeyedLimiter::of(DelayLimiter::new(Duration::from_secs(10))?)
    .build()?;
let layer = KeyedLimitLayer::new(per_tenant, |tenant: &u32| *tenant).reject();
let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));

let start = Instant::now();
service.ready().await?.call(7).await?;
let Err(error) = service.ready().await?.call(7).await else {
    unreachable!(\"tenant 7's next call is 10 s away\");
};
let retry_at = error.downcast_ref::<Rejected>().and_then(Rejected::retry_at);
assert_eq!(retry_at, Some(start + Duration::from_secs(10)));
assert_eq!(service.ready().await?.call(8).await?, 8); // another tenant's first call
# Ok(())
# }";
    }

    observing_methods!(
        "use std::convert::Infallible;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_limits::limit::KeyedLimitLayer;
use tower_limits::{ConcurrencyLimiter, KeyedLimiter};

# #[tokio::main(flavor = \"current_thread\")]
# async fn main() -> Result<(), tower_limits::error::BoxError> {
let per_tenant: KeyedLimiter<u32, _> = KeyedLimiter::of(ConcurrencyLimiter::new(1)?).build()?;
let layer = KeyedLimitLayer::new(per_tenant, |tenant: &u32| *tenant)
    .name(\"tenants\")
    .on_decision(|decision| assert_eq!(decision.limiter, \"tenants\"));
let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));
service.ready().await?.call(7).await?;
assert_eq!(layer.stats().map(|stats| stats.granted), Some(1));
let other: KeyedLimiter<u32, _> = KeyedLimiter::of(ConcurrencyLimiter::new(1)?).build()?;
assert!(KeyedLimitLayer::new(other, |t: &u32| *t).shadow().stats().is_some());
# Ok(())
# }"
    );

    /// The keyed limiter, for handles to keys' limiters.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::future::pending;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::limit::KeyedLimitLayer;
    /// use tower_limits::{ConcurrencyLimiter, KeyedLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let per_tenant = KeyedLimiter::of(ConcurrencyLimiter::new(2)?).build()?;
    /// let layer = KeyedLimitLayer::new(per_tenant, |tenant: &u32| *tenant);
    /// let mut service = layer.layer(service_fn(|_: u32| pending::<Result<(), Infallible>>()));
    ///
    /// let call = tokio::spawn(service.ready().await?.call(7)); // a call that never ends
    /// tokio::task::yield_now().await; // admitted in its response future
    /// assert_eq!(layer.keyed().limiter(&7)?.running(), 1);
    /// assert_eq!(layer.keyed().limiter(&8)?.running(), 0);
    ///
    /// call.abort(); // cancelled: tenant 7's slot is released
    /// let _ = call.await;
    /// assert_eq!(layer.keyed().limiter(&7)?.running(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn keyed(&self) -> &KeyedLimiter<K, L> {
        &self.keyed
    }
}

impl<K, L, F, C, G> Clone for KeyedLimitLayer<K, L, F, C, G> {
    fn clone(&self) -> Self {
        Self {
            keyed: self.keyed.clone(),
            key_of: Arc::clone(&self.key_of),
            cost_of: Arc::clone(&self.cost_of),
            settle_with: Arc::clone(&self.settle_with),
            options: self.options.clone(),
        }
    }
}

impl<S, K, L, F, C, G> Layer<S> for KeyedLimitLayer<K, L, F, C, G> {
    type Service = PerRequest<S, Self>;

    fn layer(&self, inner: S) -> Self::Service {
        PerRequest::new(inner, self.clone())
    }
}

impl<K, L, F, C, G> fmt::Debug for KeyedLimitLayer<K, L, F, C, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimitLayer")
            .field("keyed", &self.keyed)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<K, L, F, C, G> Sealed for KeyedLimitLayer<K, L, F, C, G> {}

impl<K, L, F, C, G, Request> AdmitRequest<Request> for KeyedLimitLayer<K, L, F, C, G>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    L: Limiter + Clone,
    F: Fn(&Request) -> K,
    C: RequestCost<Request>,
{
    type Limiter = L;
    type Settle = G;

    fn admission(
        &self,
        request: &Request,
    ) -> impl Future<Output = Result<(L, Permit), BoxError>> + Send + 'static {
        let lane = self.keyed.lane(&(self.key_of)(request));
        let cost = self.cost_of.cost(request);
        let options = self.options.clone();
        async move {
            let (limiter, queue) = lane?;
            let permit = admit_in_line(&limiter, cost, &queue, (), &options).await?;
            Ok((limiter, permit))
        }
    }

    fn settle_with(&self) -> Arc<G> {
        Arc::clone(&self.settle_with)
    }
}
