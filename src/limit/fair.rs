//! [`FairLimitLayer`]: one shared limit, its waiting callers served
//! round-robin across their keys, so one tenant's backlog cannot starve the
//! others.

use std::collections::HashMap;
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
use crate::line::{Line, Order};

type Weigh<K> = dyn Fn(&K) -> u32 + Send + Sync;

/// Shares one limiter among keys (tenants) fairly: while callers wait for
/// it, the turn to be admitted next goes round-robin across the keys that
/// have callers waiting, so a tenant with 10,000 queued calls and a tenant
/// with 10 each get every other admission. With
/// [`weight`](FairLimitLayer::weight), a key of weight 3 gets three turns per
/// round to another's one. Within a key, callers go in arrival order.
///
/// With a limiter that answers after a round trip (a store), first attempts
/// run concurrently and retries of callers in line overlap, as the
/// [module docs](crate::limit#limiters-that-answer-after-a-round-trip) say;
/// the turns still go across keys in the same proportions, and a caller whose
/// retry is denied keeps its place.
///
/// Like [`KeyedLimitLayer`](super::KeyedLimitLayer), it admits a request
/// when it is called (the key comes from the request): `poll_ready` is always
/// ready and the response future waits.
///
/// ```
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_limits::limit::FairLimitLayer;
/// use tower_limits::RateLimiter;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tower_limits::error::BoxError> {
/// // 10 requests a second to a shared downstream, shared fairly by tenant.
/// let shared = RateLimiter::builder("downstream", 10, Duration::from_secs(1))
///     .without_backoff()
///     .build()?;
/// let service = ServiceBuilder::new()
///     .layer(FairLimitLayer::new(shared, |(tenant, _): &(&'static str, u32)| *tenant))
///     .service(service_fn(|(_, n): (&'static str, u32)| async move { Ok::<_, Infallible>(n) }));
/// let mut calls = Vec::new();
/// for n in 0..3 {
///     let mut service = service.clone();
///     calls.push(tokio::spawn(async move { service.ready().await?.call(("acme", n)).await }));
/// }
/// for call in calls {
///     call.await??;
/// }
/// # Ok(())
/// # }
/// ```
pub struct FairLimitLayer<K, L, F, C = UnitCost, G = KeepEstimate> {
    limiter: L,
    key_of: Arc<F>,
    cost_of: Arc<C>,
    settle_with: Arc<G>,
    weigh: Option<Arc<Weigh<K>>>,
    queue: Arc<Line<FairShares<K>, Tenant<K>>>,
    options: Options,
}

impl<K, L, F> FairLimitLayer<K, L, F, UnitCost, KeepEstimate> {
    /// A layer sharing `limiter` fairly among the keys `key_of` takes from
    /// requests.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::limit::FairLimitLayer;
    /// use tower_limits::ConcurrencyLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// // Four calls at once in all, shared fairly by tenant; requests are (tenant, n).
    /// let shared = ConcurrencyLimiter::new(4)?;
    /// let layer = FairLimitLayer::new(shared.clone(), |(tenant, _): &(u32, u32)| *tenant);
    /// let mut service = layer.layer(service_fn(|(_, n): (u32, u32)| async move { Ok::<_, Infallible>(n + 1) }));
    ///
    /// assert_eq!(service.ready().await?.call((7, 41)).await?, 42);
    /// assert_eq!(shared.running(), 0); // the call ended and gave its slot back
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(limiter: L, key_of: F) -> Self {
        Self {
            limiter,
            key_of: Arc::new(key_of),
            cost_of: Arc::new(UnitCost),
            settle_with: Arc::new(KeepEstimate),
            weigh: None,
            queue: Arc::default(),
            options: Options::default(),
        }
    }
}

impl<K, L, F, C, G> FairLimitLayer<K, L, F, C, G> {
    /// Gives each key `weigh(&key)` turns per round (at least 1; default 1).
    ///
    /// ```
    /// use tower_limits::limit::FairLimitLayer;
    /// use tower_limits::NullLimiter;
    ///
    /// // Paying tenants get three turns to a free tenant's one.
    /// let layer = FairLimitLayer::new(NullLimiter, |tenant: &String| tenant.clone())
    ///     .weight(|tenant: &String| if tenant.starts_with("paid-") { 3 } else { 1 });
    /// # let _ = layer;
    /// ```
    pub fn weight(mut self, weigh: impl Fn(&K) -> u32 + Send + Sync + 'static) -> Self {
        self.weigh = Some(Arc::new(weigh));
        self
    }

    /// Charges each request `cost_of(&request)` units of the shared limit. A
    /// cost the limiter can never grant fails the request with a
    /// [`LimiterError`](crate::error::LimiterError) holding
    /// [`CostTooHigh`](crate::error::CostTooHigh).
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::error::{CostTooHigh, LimiterError};
    /// use tower_limits::limit::FairLimitLayer;
    /// use tower_limits::RateLimiter;
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// // One unit a second, up to 5 at once; requests are (tenant, units).
    /// let shared = RateLimiter::in_memory(Quota::gcra(1, Duration::from_secs(1))?.with_burst(5)?);
    /// let layer = FairLimitLayer::new(shared, |(tenant, _): &(u32, u32)| *tenant)
    ///     .cost(|(_, units): &(u32, u32)| *units);
    /// let mut service = layer.layer(service_fn(|(_, units): (u32, u32)| async move {
    ///     Ok::<_, Infallible>(units)
    /// }));
    ///
    /// let start = Instant::now();
    /// service.ready().await?.call((1, 5)).await?; // the whole burst at once
    /// service.ready().await?.call((2, 1)).await?; // one more unit: a second later
    /// assert_eq!(start.elapsed(), Duration::from_secs(1));
    ///
    /// let Err(error) = service.ready().await?.call((1, 6)).await else {
    ///     unreachable!("6 units never fit in a burst of 5");
    /// };
    /// let cause = error.downcast_ref::<LimiterError>().map(LimiterError::get_ref);
    /// assert!(cause.is_some_and(|cause| cause.is::<CostTooHigh>()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn cost<C2>(self, cost_of: C2) -> FairLimitLayer<K, L, F, C2, G> {
        FairLimitLayer {
            limiter: self.limiter,
            key_of: self.key_of,
            cost_of: Arc::new(cost_of),
            settle_with: self.settle_with,
            weigh: self.weigh,
            queue: self.queue,
            options: self.options.clone(),
        }
    }

    /// Estimate, then settle: `settle_with(&response)` tells a successful
    /// call's real cost; see [`KeyedLimitLayer::settle`](super::KeyedLimitLayer::settle).
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::limit::FairLimitLayer;
    /// use tower_limits::RateLimiter;
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// // Requests are (tenant, estimated units); replies tell the units used.
    /// let shared = RateLimiter::in_memory(Quota::gcra(1, Duration::from_secs(1))?.with_burst(5)?);
    /// let layer = FairLimitLayer::new(shared, |(tenant, _): &(u32, u32)| *tenant)
    ///     .cost(|(_, estimate): &(u32, u32)| *estimate)
    ///     .settle(|used: &u32| Some(*used));
    /// let mut service = layer.layer(service_fn(|_: (u32, u32)| async { Ok::<_, Infallible>(1_u32) }));
    ///
    /// let start = Instant::now();
    /// assert_eq!(service.ready().await?.call((1, 5)).await?, 1); // charged 5, used 1
    /// service.ready().await?.call((2, 4)).await?; // the 4 given back: no wait
    /// assert_eq!(start.elapsed(), Duration::ZERO);
    /// # Ok(())
    /// # }
    /// ```
    pub fn settle<G2>(self, settle_with: G2) -> FairLimitLayer<K, L, F, C, G2> {
        FairLimitLayer {
            limiter: self.limiter,
            key_of: self.key_of,
            cost_of: self.cost_of,
            settle_with: Arc::new(settle_with),
            weigh: self.weigh,
            queue: self.queue,
            options: self.options.clone(),
        }
    }

    observing_methods!(
        "use std::convert::Infallible;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_limits::limit::FairLimitLayer;
use tower_limits::ConcurrencyLimiter;

# #[tokio::main(flavor = \"current_thread\")]
# async fn main() -> Result<(), tower_limits::error::BoxError> {
let layer = FairLimitLayer::new(ConcurrencyLimiter::new(4)?, |(tenant, _): &(u32, u32)| *tenant)
    .name(\"shared\")
    .on_decision(|decision| assert_eq!(decision.limiter, \"shared\"));
let mut service = layer.layer(service_fn(|(_, n): (u32, u32)| async move { Ok::<_, Infallible>(n) }));
service.ready().await?.call((7, 1)).await?;
assert_eq!(layer.stats().map(|stats| stats.granted), Some(1));
let shadow = FairLimitLayer::new(ConcurrencyLimiter::new(1)?, |(t, _): &(u32, u32)| *t).shadow();
let mut watched = shadow.layer(service_fn(|(_, n): (u32, u32)| async move { Ok::<_, Infallible>(n) }));
watched.ready().await?.call((1, 1)).await?;
assert_eq!(shadow.stats().map(|stats| stats.granted), Some(1));
# Ok(())
# }"
    );

    waiting_methods! {
        max_waiting: "in all, whatever their key", "A caller that holds the turn (it asks the limiter next) is not
waiting: with `max_waiting(1)`, one caller waits for the limiter, one
waits behind it, and the next is turned away, whatever its key. With
a limiter that answers after a round trip, callers whose retry is in
flight count; a caller's first attempt does not.",
        "use std::convert::Infallible;
use std::time::Duration;
use tokio::time::Instant;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_limits::error::Overloaded;
use tower_limits::limit::FairLimitLayer;
use tower_limits::DelayLimiter;

# #[tokio::main(flavor = \"current_thread\", start_paused = true)]
# async fn main() -> Result<(), tower_limits::error::BoxError> {
// Calls start at least a second apart, whatever their tenant.
let shared = DelayLimiter::new(Duration::from_secs(1))?;
let layer = FairLimitLayer::new(shared, |tenant: &u32| *tenant).max_waiting(1);
let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));

let start = Instant::now();
service.ready().await?.call(1).await?; // admitted at once
let second = tokio::spawn(service.ready().await?.call(2)); // waits for the limiter
let third = tokio::spawn(service.ready().await?.call(3)); // waits behind it
tokio::task::yield_now().await;

let Err(error) = service.ready().await?.call(4).await else {
    unreachable!(\"one caller is already waiting\");
};
assert_eq!(error.downcast_ref::<Overloaded>().map(Overloaded::waiting), Some(1));

assert_eq!(second.await??, 2);
assert_eq!(third.await??, 3);
assert_eq!(start.elapsed(), Duration::from_secs(2));
# Ok(())
# }";
        max_wait: "use std::convert::Infallible;
use std::time::Duration;
use tokio::time::Instant;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_limits::error::Elapsed;
use tower_limits::limit::FairLimitLayer;
use tower_limits::DelayLimiter;

# #[tokio::main(flavor = \"current_thread\", start_paused = true)]
# async fn main() -> Result<(), tower_limits::error::BoxError> {
let shared = DelayLimiter::new(Duration::from_secs(10))?;
let layer = FairLimitLayer::new(shared, |tenant: &u32| *tenant).max_wait(Duration::from_secs(1));
let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));

let start = Instant::now();
service.ready().await?.call(1).await?;
let Err(error) = service.ready().await?.call(2).await else {
    unreachable!(\"the next call is 10 s away\");
};
let retry_at = error.downcast_ref::<Elapsed>().and_then(Elapsed::retry_at);
assert_eq!(retry_at, Some(start + Duration::from_secs(10)));
assert_eq!(start.elapsed(), Duration::ZERO); // failed without waiting
# Ok(())
# }";
    }
}

impl<K, L: Clone, F, C, G> Clone for FairLimitLayer<K, L, F, C, G> {
    fn clone(&self) -> Self {
        Self {
            limiter: self.limiter.clone(),
            key_of: Arc::clone(&self.key_of),
            cost_of: Arc::clone(&self.cost_of),
            settle_with: Arc::clone(&self.settle_with),
            weigh: self.weigh.clone(),
            queue: Arc::clone(&self.queue),
            options: self.options.clone(),
        }
    }
}

impl<K, L: fmt::Debug, F, C, G> fmt::Debug for FairLimitLayer<K, L, F, C, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairLimitLayer")
            .field("limiter", &self.limiter)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<S, K, L: Clone, F, C, G> Layer<S> for FairLimitLayer<K, L, F, C, G> {
    type Service = PerRequest<S, Self>;

    fn layer(&self, inner: S) -> Self::Service {
        PerRequest::new(inner, self.clone())
    }
}

impl<K, L, F, C, G> Sealed for FairLimitLayer<K, L, F, C, G> {}

impl<K, L, F, C, G, Request> AdmitRequest<Request> for FairLimitLayer<K, L, F, C, G>
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
        let key = (self.key_of)(request);
        let weight = self.weigh.as_ref().map_or(1, |weigh| weigh(&key).max(1));
        let tenant = Tenant { key, weight };
        let cost = self.cost_of.cost(request);
        let (limiter, queue, options) = (
            self.limiter.clone(),
            Arc::clone(&self.queue),
            self.options.clone(),
        );
        async move {
            let permit = admit_in_line(&limiter, cost, &queue, tenant, &options).await?;
            Ok((limiter, permit))
        }
    }

    fn settle_with(&self) -> Arc<G> {
        Arc::clone(&self.settle_with)
    }
}

/// Waiting callers ranked fairly across their keys (start-time fair
/// queueing): each caller of a key is ranked `1 / weight` after the key's
/// previous one, and never before the rank last handed the turn. Keys with
/// callers waiting thus take turns, a key of weight 3 three per round, and a
/// key that joins the line starts at the current round.
pub(super) struct FairShares<K> {
    /// The rank last handed the turn.
    now: u128,
    /// Keys with callers in line.
    keys: HashMap<K, Share>,
}

/// One key's standing in line.
struct Share {
    /// Rank of the key's latest caller.
    last: u128,
    /// Its callers in line.
    waiting: usize,
}

/// A rank step of weight 1; a key of weight `w` steps `ROUND / w`.
const ROUND: u128 = 1 << 32;

impl<K> Default for FairShares<K> {
    fn default() -> Self {
        Self {
            now: 0,
            keys: HashMap::new(),
        }
    }
}

/// What a waiting caller is filed under: its key, and the key's weight.
pub(super) struct Tenant<K> {
    key: K,
    weight: u32,
}

impl<K: Hash + Eq + Clone + Send + 'static> Order<Tenant<K>> for FairShares<K> {
    const HOLDER_WAITS: bool = false;

    fn rank(&mut self, tenant: &Tenant<K>) -> u128 {
        let now = self.now;
        let share = self.keys.entry(tenant.key.clone()).or_insert(Share {
            last: now,
            waiting: 0,
        });
        share.last = share.last.max(now) + ROUND / u128::from(tenant.weight.max(1));
        share.waiting += 1;
        share.last
    }

    fn served(&mut self, tenant: &Tenant<K>, rank: u128) {
        self.now = self.now.max(rank);
        self.left(tenant);
    }

    fn left(&mut self, tenant: &Tenant<K>) {
        if let Some(share) = self.keys.get_mut(&tenant.key) {
            share.waiting -= 1;
            if share.waiting == 0 {
                self.keys.remove(&tenant.key);
            }
        }
    }

    fn refiled(&mut self, tenant: &Tenant<K>, rank: u128) {
        let share = self.keys.entry(tenant.key.clone()).or_insert(Share {
            last: rank,
            waiting: 0,
        });
        share.waiting += 1;
    }
}
