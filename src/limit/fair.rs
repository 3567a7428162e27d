//! [`FairLimitLayer`]: one shared limit, its waiting callers served
//! round-robin across their keys, so one tenant's backlog cannot starve the
//! others.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tower_layer::Layer;

use super::Options;
use super::keyed::{KeepEstimate, RequestCost, UnitCost};
use super::per_request::sealed::Sealed;
use super::per_request::{AdmitRequest, PerRequest};
use super::waiting::{admit_holding_turn, deadline, within};
use crate::error::{BoxError, Overloaded};
use crate::limiter::{Limiter, Permit};

type Weigh<K> = dyn Fn(&K) -> u32 + Send + Sync;

/// Shares one limiter among keys (tenants) fairly: while callers wait for
/// it, the turn to be admitted next goes round-robin across the keys that
/// have callers waiting, so a tenant with 10,000 queued calls and a tenant
/// with 10 each get every other admission. With
/// [`weight`](FairLimitLayer::weight), a key of weight 3 gets three turns per
/// round to another's one. Within a key, callers go in arrival order.
///
/// Like [`KeyedLimitLayer`](super::KeyedLimitLayer), it admits a request
/// when it is called (the key comes from the request): `poll_ready` is always
/// ready and the response future waits.
///
/// ```
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_limits::{FairLimitLayer, RateLimiter};
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
    queue: Arc<FairQueue<K>>,
    options: Options,
}

impl<K, L, F> FairLimitLayer<K, L, F, UnitCost, KeepEstimate> {
    /// A layer sharing `limiter` fairly among the keys `key_of` takes from
    /// requests.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::{ConcurrencyLimiter, FairLimitLayer};
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
            queue: Arc::new(FairQueue::new()),
            options: Options::default(),
        }
    }
}

impl<K, L, F, C, G> FairLimitLayer<K, L, F, C, G> {
    /// Gives each key `weigh(&key)` turns per round (at least 1; default 1).
    ///
    /// ```
    /// use tower_limits::{FairLimitLayer, NullLimiter};
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
    /// use tower_limits::{FairLimitLayer, GcraLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// // One unit a second, up to 5 at once; requests are (tenant, units).
    /// let shared = GcraLimiter::new(1, Duration::from_secs(1))?.with_burst(5)?;
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
            options: self.options,
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
    /// use tower_limits::{FairLimitLayer, GcraLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// // Requests are (tenant, estimated units); replies tell the units used.
    /// let shared = GcraLimiter::new(1, Duration::from_secs(1))?.with_burst(5)?;
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
            options: self.options,
        }
    }

    /// Past `max_waiting` callers waiting in all, a request fails at once
    /// with [`Overloaded`].
    ///
    /// A caller that holds the turn (it asks the limiter next) is not
    /// waiting: with `max_waiting(1)`, one caller waits for the limiter, one
    /// waits behind it, and the next is turned away, whatever its key.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::error::Overloaded;
    /// use tower_limits::{DelayLimiter, FairLimitLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// // Calls start at least a second apart, whatever their tenant.
    /// let shared = DelayLimiter::new(Duration::from_secs(1))?;
    /// let layer = FairLimitLayer::new(shared, |tenant: &u32| *tenant).max_waiting(1);
    /// let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));
    ///
    /// let start = Instant::now();
    /// service.ready().await?.call(1).await?; // admitted at once
    /// let second = tokio::spawn(service.ready().await?.call(2)); // waits for the limiter
    /// let third = tokio::spawn(service.ready().await?.call(3)); // waits behind it
    /// tokio::task::yield_now().await;
    ///
    /// let Err(error) = service.ready().await?.call(4).await else {
    ///     unreachable!("one caller is already waiting");
    /// };
    /// assert_eq!(error.downcast_ref::<Overloaded>().map(Overloaded::waiting), Some(1));
    ///
    /// assert_eq!(second.await??, 2);
    /// assert_eq!(third.await??, 3);
    /// assert_eq!(start.elapsed(), Duration::from_secs(2));
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_waiting(mut self, max_waiting: usize) -> Self {
        self.options.max_waiting = Some(max_waiting);
        self
    }

    /// A request waits at most `max_wait` for admission, then fails with
    /// [`Elapsed`](crate::error::Elapsed) (at once if the limiter names a
    /// later instant).
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::error::Elapsed;
    /// use tower_limits::{DelayLimiter, FairLimitLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let shared = DelayLimiter::new(Duration::from_secs(10))?;
    /// let layer = FairLimitLayer::new(shared, |tenant: &u32| *tenant).max_wait(Duration::from_secs(1));
    /// let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));
    ///
    /// let start = Instant::now();
    /// service.ready().await?.call(1).await?;
    /// let Err(error) = service.ready().await?.call(2).await else {
    ///     unreachable!("the next call is 10 s away");
    /// };
    /// let retry_at = error.downcast_ref::<Elapsed>().and_then(Elapsed::retry_at);
    /// assert_eq!(retry_at, Some(start + Duration::from_secs(10)));
    /// assert_eq!(start.elapsed(), Duration::ZERO); // failed without waiting
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.options.max_wait = Some(max_wait);
        self
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
            options: self.options,
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
    type Service = FairLimit<S, K, L, F, C, G>;

    fn layer(&self, inner: S) -> Self::Service {
        PerRequest::new(inner, self.clone())
    }
}

/// A service sharing one limiter fairly among request keys; built by
/// [`FairLimitLayer`], whose docs have more examples.
///
/// ```
/// use std::convert::Infallible;
/// use tower::{service_fn, Layer, Service, ServiceExt};
/// use tower_limits::{FairLimit, FairLimitLayer, NullLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower_limits::error::BoxError> {
/// let mut service: FairLimit<_, _, _, _> = FairLimitLayer::new(NullLimiter, |n: &u32| n % 2)
///     .layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n * 2) }));
/// assert_eq!(service.ready().await?.call(21).await?, 42);
/// # Ok(())
/// # }
/// ```
pub type FairLimit<S, K, L, F, C = UnitCost, G = KeepEstimate> =
    PerRequest<S, FairLimitLayer<K, L, F, C, G>>;

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
        let cost = self.cost_of.cost(request);
        let (limiter, queue, options) =
            (self.limiter.clone(), Arc::clone(&self.queue), self.options);
        async move {
            let deadline = deadline(options.max_wait);
            let permit = within(deadline, async {
                let _turn = queue.turn(key, weight, options.max_waiting)?.await;
                admit_holding_turn(&limiter, cost, None, deadline).await
            })
            .await?;
            Ok((limiter, permit))
        }
    }

    fn settle_with(&self) -> Arc<G> {
        Arc::clone(&self.settle_with)
    }
}

/// The turn to ask the shared limiter, passed round-robin across keys.
struct FairQueue<K> {
    state: Mutex<FairState<K>>,
}

struct FairState<K> {
    /// Someone holds the turn.
    held: bool,
    lanes: HashMap<K, Lane>,
    /// Keys with waiting callers, in the order they are served.
    ring: VecDeque<K>,
    waiting: usize,
}

/// One key's waiting callers.
struct Lane {
    tickets: VecDeque<Arc<Ticket>>,
    weight: u32,
    /// Turns taken in this round.
    served: u32,
}

/// A waiting caller: told when the turn is handed to it.
#[derive(Default)]
struct Ticket {
    granted: AtomicBool,
    notify: Notify,
}

impl<K> FairQueue<K> {
    fn new() -> Self {
        Self {
            state: Mutex::new(FairState {
                held: false,
                lanes: HashMap::new(),
                ring: VecDeque::new(),
                waiting: 0,
            }),
        }
    }
}

impl<K: Hash + Eq + Clone> FairQueue<K> {
    fn lock(&self) -> MutexGuard<'_, FairState<K>> {
        // Every update completes under the lock: a poisoned state is consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The turn for a caller of `key`: at once if nobody holds it, else once
    /// the round-robin reaches this caller. [`Overloaded`] at once if
    /// `max_waiting` callers already wait.
    fn turn(
        self: &Arc<Self>,
        key: K,
        weight: u32,
        max_waiting: Option<usize>,
    ) -> Result<impl Future<Output = Turn<K>> + Send + 'static, Overloaded>
    where
        K: Send + Sync + 'static,
    {
        let mut state = self.lock();
        let ticket = if state.held {
            if max_waiting.is_some_and(|max| state.waiting >= max) {
                return Err(Overloaded::new(state.waiting));
            }
            Some(state.enqueue(key.clone(), weight))
        } else {
            state.held = true;
            None
        };
        drop(state);
        let queue = Arc::clone(self);
        Ok(async move {
            if let Some(ticket) = ticket {
                let waiter = Waiter {
                    queue: &queue,
                    key,
                    ticket,
                    holds_turn: false,
                };
                waiter.granted().await;
            }
            Turn { queue }
        })
    }

    /// Hands the turn to the next caller in round-robin order, or frees it.
    fn pass_turn(state: &mut FairState<K>) {
        match state.next_ticket() {
            Some(ticket) => {
                ticket.granted.store(true, Ordering::Release);
                ticket.notify.notify_one();
            }
            None => state.held = false,
        }
    }
}

impl<K: Hash + Eq + Clone> FairState<K> {
    /// The next caller in round-robin order, taken out of its lane: the key
    /// at the front of the ring keeps it for `weight` turns, then goes to
    /// the back.
    fn next_ticket(&mut self) -> Option<Arc<Ticket>> {
        let key = self.ring.front()?.clone();
        let lane = self.lanes.get_mut(&key)?;
        let ticket = lane.tickets.pop_front()?;
        lane.served += 1;
        if lane.tickets.is_empty() {
            self.lanes.remove(&key);
            self.ring.pop_front();
        } else if lane.served >= lane.weight {
            lane.served = 0;
            self.ring.rotate_left(1);
        }
        self.waiting -= 1;
        Some(ticket)
    }

    fn enqueue(&mut self, key: K, weight: u32) -> Arc<Ticket> {
        let ticket = Arc::new(Ticket::default());
        let lane = self.lanes.entry(key.clone()).or_insert_with(|| Lane {
            tickets: VecDeque::new(),
            weight,
            served: 0,
        });
        if lane.tickets.is_empty() {
            self.ring.push_back(key);
        }
        lane.tickets.push_back(Arc::clone(&ticket));
        self.waiting += 1;
        ticket
    }

    /// Takes a caller who gave up out of its lane.
    fn withdraw(&mut self, key: &K, ticket: &Arc<Ticket>) {
        let Some(lane) = self.lanes.get_mut(key) else {
            return;
        };
        let Some(index) = lane.tickets.iter().position(|t| Arc::ptr_eq(t, ticket)) else {
            return;
        };
        lane.tickets.remove(index);
        self.waiting -= 1;
        if lane.tickets.is_empty() {
            self.lanes.remove(key);
            self.ring.retain(|k| k != key);
        }
    }
}

/// A caller waiting for the turn; if dropped before it is through, it gives
/// up its place, or passes on a turn it was handed.
struct Waiter<'a, K: Hash + Eq + Clone> {
    queue: &'a FairQueue<K>,
    key: K,
    ticket: Arc<Ticket>,
    /// The caller has the turn, and a `Turn` will release it.
    holds_turn: bool,
}

impl<K: Hash + Eq + Clone> Waiter<'_, K> {
    async fn granted(mut self) {
        while !self.ticket.granted.load(Ordering::Acquire) {
            // `notify_one` stores a permit: a grant before this await is kept.
            self.ticket.notify.notified().await;
        }
        self.holds_turn = true;
    }
}

impl<K: Hash + Eq + Clone> Drop for Waiter<'_, K> {
    fn drop(&mut self) {
        if self.holds_turn {
            return;
        }
        let mut state = self.queue.lock();
        if self.ticket.granted.load(Ordering::Acquire) {
            FairQueue::pass_turn(&mut state);
        } else {
            state.withdraw(&self.key, &self.ticket);
        }
    }
}

/// The turn to ask the shared limiter; passed on when dropped.
struct Turn<K: Hash + Eq + Clone> {
    queue: Arc<FairQueue<K>>,
}

impl<K: Hash + Eq + Clone> Drop for Turn<K> {
    fn drop(&mut self) {
        FairQueue::pass_turn(&mut self.queue.lock());
    }
}
