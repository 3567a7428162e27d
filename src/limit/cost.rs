//! [`CostLimitLayer`]: one shared limiter, with a cost taken from each
//! request.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tower_layer::Layer;

use super::Options;
use super::costs::{KeepEstimate, RequestCost};
use super::per_request::sealed::Sealed;
use super::per_request::{AdmitRequest, PerRequest};
use super::waiting::admit_in_line;
use crate::error::BoxError;
use crate::limiter::{Limiter, Permit};
use crate::line::Queue;

/// Applies one limiter to a service, charging each request
/// `cost_of(&request)` units in one decision: a batch of 5 downstream calls
/// takes 5 tokens. Made by [`LimitLayer::cost`](super::LimitLayer::cost),
/// which also sets how callers wait.
///
/// A plain [`LimitLayer`](super::LimitLayer) reserves a unit in `poll_ready`,
/// before it sees the request. This one admits when the request is known,
/// in `call`: `poll_ready` is always ready, and the response future waits
/// for admission (in arrival order, in one line shared by the layer's
/// services), then for the inner service (a clone of it, so `S: Clone`),
/// then calls it. A request dropped before the inner call gives its
/// admission back. A cost the limiter can never grant fails the request with
/// a [`LimiterError`](crate::error::LimiterError) holding
/// [`CostTooHigh`](crate::error::CostTooHigh).
///
/// ```
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_limits::{LimitLayer, RateLimiter};
/// use tower_limits::store::Quota;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tower_limits::error::BoxError> {
/// // 10 downstream calls per second, 10 at once; a request is a batch of calls.
/// let calls = RateLimiter::in_memory(Quota::token_bucket(10, 10, Duration::from_secs(1))?);
/// let mut client = ServiceBuilder::new()
///     .layer(LimitLayer::new(calls).cost(|batch: &Vec<u32>| batch.len() as u32))
///     .service(service_fn(|batch: Vec<u32>| async move { Ok::<_, Infallible>(batch.len()) }));
///
/// let start = Instant::now();
/// assert_eq!(client.ready().await?.call(vec![1; 8]).await?, 8); // 8 tokens at once
/// assert_eq!(client.ready().await?.call(vec![2; 5]).await?, 5); // 3 more refill first
/// assert_eq!(start.elapsed(), Duration::from_millis(300));
/// # Ok(())
/// # }
/// ```
pub struct CostLimitLayer<L, C, G = KeepEstimate> {
    limiter: L,
    queue: Arc<Queue>,
    cost_of: Arc<C>,
    settle_with: Arc<G>,
    options: Options,
}

impl<L, C> CostLimitLayer<L, C, KeepEstimate> {
    pub(super) fn new(limiter: L, queue: Arc<Queue>, options: Options, cost_of: C) -> Self {
        Self {
            limiter,
            queue,
            cost_of: Arc::new(cost_of),
            settle_with: Arc::new(KeepEstimate),
            options,
        }
    }
}

impl<L, C, G> CostLimitLayer<L, C, G> {
    /// Estimate, then settle: once a call succeeds, `settle_with(&response)`
    /// tells its real cost, and the difference from the charged estimate is
    /// given back or charged ([`Limiter::settle`]). For quotas known only
    /// from the response, like an LLM API's tokens per minute.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
    /// use tower_limits::{Limiter, LimitLayer, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// // 10,000 tokens a minute; a prompt reserves its maximum, the reply tells the real use.
    /// struct Prompt { max_tokens: u32 }
    /// struct Reply { tokens_used: u32 }
    /// let tokens = RateLimiter::builder("llm", 10_000, Duration::from_secs(60))
    ///     .without_backoff()
    ///     .build()?;
    /// let layer = LimitLayer::new(tokens.clone())
    ///     .cost(|prompt: &Prompt| prompt.max_tokens)
    ///     .settle(|reply: &Reply| Some(reply.tokens_used));
    /// let mut llm = ServiceBuilder::new()
    ///     .layer(layer)
    ///     .service(service_fn(|_: Prompt| async { Ok::<_, Infallible>(Reply { tokens_used: 700 }) }));
    ///
    /// llm.ready().await?.call(Prompt { max_tokens: 4_000 }).await?;
    /// // 4,000 reserved, 700 used: 9,300 tokens are left this minute.
    /// assert!(tokens.peek(9_300).await?.is_none());
    /// assert!(tokens.peek(9_301).await?.is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn settle<G2>(self, settle_with: G2) -> CostLimitLayer<L, C, G2> {
        CostLimitLayer {
            limiter: self.limiter,
            queue: self.queue,
            cost_of: self.cost_of,
            settle_with: Arc::new(settle_with),
            options: self.options.clone(),
        }
    }

    /// The limiter the layer applies.
    ///
    /// ```
    /// use tower_limits::{LimitLayer, ConcurrencyLimiter};
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let layer = LimitLayer::new(ConcurrencyLimiter::new(4)?).cost(|_: &()| 2);
    /// assert_eq!(layer.limiter().max_concurrent(), 4);
    /// # Ok(())
    /// # }
    /// ```
    pub fn limiter(&self) -> &L {
        &self.limiter
    }
}

impl<L: Clone, C, G> Clone for CostLimitLayer<L, C, G> {
    fn clone(&self) -> Self {
        Self {
            limiter: self.limiter.clone(),
            queue: Arc::clone(&self.queue),
            cost_of: Arc::clone(&self.cost_of),
            settle_with: Arc::clone(&self.settle_with),
            options: self.options.clone(),
        }
    }
}

impl<L: fmt::Debug, C, G> fmt::Debug for CostLimitLayer<L, C, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CostLimitLayer")
            .field("limiter", &self.limiter)
            .field("queue", &self.queue)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<S, L: Clone, C, G> Layer<S> for CostLimitLayer<L, C, G> {
    type Service = PerRequest<S, Self>;

    fn layer(&self, inner: S) -> Self::Service {
        PerRequest::new(inner, self.clone())
    }
}

impl<L, C, G> Sealed for CostLimitLayer<L, C, G> {}

impl<L, C, G, Request> AdmitRequest<Request> for CostLimitLayer<L, C, G>
where
    L: Limiter + Clone,
    C: RequestCost<Request>,
{
    type Limiter = L;
    type Settle = G;

    fn admission(
        &self,
        request: &Request,
    ) -> impl Future<Output = Result<(L, Permit), BoxError>> + Send + 'static {
        let cost = self.cost_of.cost(request);
        let (limiter, queue, options) = (
            self.limiter.clone(),
            Arc::clone(&self.queue),
            self.options.clone(),
        );
        async move {
            let permit = admit_in_line(&limiter, cost, &queue, (), &options).await?;
            Ok((limiter, permit))
        }
    }

    fn settle_with(&self) -> Arc<G> {
        Arc::clone(&self.settle_with)
    }
}
