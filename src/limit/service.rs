//! The [`Limit`] service.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tower_service::Service;

use super::Options;
use super::future::ResponseFuture;
use super::observe::WaitFuture;
use super::waiting::{AtOnce, NotYet, granted_at_once, try_at_once, wait_for_admission};
use crate::error::BoxError;
use crate::limiter::{Limiter, Permit};
use crate::line::Queue;

/// Admits calls to `S` only when the limiter `L` allows; built by
/// [`LimitLayer`](super::LimitLayer).
///
/// `poll_ready` waits for admission; `call` uses the admission; the
/// [`ResponseFuture`] records completion when the inner future finishes,
/// fails or is dropped. An admission that fails (reject mode, a full queue, a
/// wait past the maximum, a limiter error) makes `poll_ready` ready at once
/// and `call` fail with the error without calling the inner service, as
/// tower's `LoadShed` does; `poll_ready` fails only when the inner service's
/// does.
///
/// Clones share the limiter and the queue, so the limit holds across all of
/// them. A clone starts without a reservation; a service dropped after
/// `poll_ready` but before `call` refunds its reservation.
///
/// # Panics
///
/// `call` panics if `poll_ready` has not returned `Ready(Ok(()))` since the
/// last `call`, as tower's own limit services do.
///
/// # Example
///
/// ```
/// use std::convert::Infallible;
/// use tower::{service_fn, Layer, Service, ServiceExt};
/// use tower_limits::error::Rejected;
/// use tower_limits::{LimitLayer, ConcurrencyLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower_limits::error::BoxError> {
/// let layer = LimitLayer::new(ConcurrencyLimiter::new(1)?).reject();
/// let mut first = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n * 2) }));
/// let mut second = first.clone();
///
/// first.ready().await?; // reserves the only slot, for both clones
/// let Err(error) = second.ready().await?.call(1).await else {
///     unreachable!("the clones share one limit");
/// };
/// assert!(error.is::<Rejected>());
///
/// assert_eq!(first.call(21).await?, 42); // completes and frees the slot
/// assert_eq!(second.ready().await?.call(1).await?, 2);
/// # Ok(())
/// # }
/// ```
pub struct Limit<S, L: Limiter> {
    inner: S,
    limiter: L,
    queue: Arc<Queue>,
    options: Options,
    state: State,
}

enum State {
    Idle,
    Waiting(WaitFuture),
    /// A permit acquired in `poll_ready` that `call` has not used yet.
    Ready(Permit),
    /// An admission that failed in `poll_ready`: `call` answers with it.
    Refused(BoxError),
}

impl<S, L: Limiter> Limit<S, L> {
    pub(crate) fn new(inner: S, limiter: L, queue: Arc<Queue>, options: Options) -> Self {
        Self {
            inner,
            limiter,
            queue,
            options,
            state: State::Idle,
        }
    }

    /// The inner service.
    ///
    /// ```
    /// use tower::Layer;
    /// use tower_limits::{LimitLayer, ConcurrencyLimiter};
    ///
    /// struct Client {
    ///     base_url: &'static str,
    /// }
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let layer = LimitLayer::new(ConcurrencyLimiter::new(4)?);
    /// let service = layer.layer(Client { base_url: "https://api.example.com" });
    /// assert_eq!(service.get_ref().base_url, "https://api.example.com");
    /// # Ok(())
    /// # }
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    ///
    /// ```
    /// use tower::Layer;
    /// use tower_limits::{LimitLayer, ConcurrencyLimiter};
    ///
    /// struct Client {
    ///     base_url: &'static str,
    /// }
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let layer = LimitLayer::new(ConcurrencyLimiter::new(4)?);
    /// let mut service = layer.layer(Client { base_url: "https://api.example.com" });
    /// service.get_mut().base_url = "https://eu.api.example.com";
    /// assert_eq!(service.get_ref().base_url, "https://eu.api.example.com");
    /// # Ok(())
    /// # }
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The limiter, shared with the layer and every clone of this service.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::{Limiter, LimitLayer, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let limiter = RateLimiter::builder("api", 100, Duration::from_secs(1)).build()?;
    /// let mut service = LimitLayer::new(limiter)
    ///     .layer(service_fn(|status: u16| async move { Ok::<_, Infallible>(status) }));
    ///
    /// if service.ready().await?.call(429).await? == 429 {
    ///     // Upstream said "Too Many Requests, retry after 30 s": pause every clone.
    ///     service.limiter().set_next_available_after(Duration::from_secs(30)).await?;
    /// }
    /// assert!(!service.limiter().can_proceed().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn limiter(&self) -> &L {
        &self.limiter
    }

    /// The layer's counts, shared by every service it built, if it is
    /// observed ([`LimitLayer::name`](super::LimitLayer::name)).
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::{LimitLayer, NullLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let mut service = LimitLayer::new(NullLimiter)
    ///     .name("free")
    ///     .layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));
    /// let mut clone = service.clone();
    /// service.ready().await?.call(1).await?;
    /// clone.ready().await?.call(2).await?;
    /// assert_eq!(service.stats().map(|stats| stats.granted), Some(2));
    /// # Ok(())
    /// # }
    /// ```
    pub fn stats(&self) -> Option<super::LayerStats> {
        self.options.stats_with(&self.limiter)
    }
}

impl<S, L: Limiter + Clone> Limit<S, L> {
    /// What to do when nobody holds a reservation: try at once if nobody is
    /// waiting, else wait. True if the quick attempt granted.
    #[inline]
    fn start(&mut self) -> bool {
        let started = match try_at_once(&self.limiter, 1, &self.queue, &self.options) {
            Ok(AtOnce::Granted(permit)) => {
                self.set_idle_state(State::Ready(permit));
                granted_at_once(&self.options, 1);
                return true;
            }
            Ok(AtOnce::LetThrough(permit)) => State::Ready(permit),
            Ok(AtOnce::NotYet(not_yet)) => self.wait(not_yet),
            Err(error) => State::Refused(error),
        };
        self.set_idle_state(started);
        false
    }

    /// Replaces the `Idle` state with `state`: `Idle` holds nothing, so
    /// forgetting it spares the call to the drop glue of a whole `State`
    /// that an assignment makes. The permit of a grant moves once, from the
    /// limiter's answer into the state.
    #[inline]
    fn set_idle_state(&mut self, state: State) {
        std::mem::forget(std::mem::replace(&mut self.state, state));
    }

    #[cold]
    #[inline(never)]
    fn wait(&self, not_yet: NotYet) -> State {
        let waiting = wait_for_admission(
            self.limiter.clone(),
            1,
            &self.queue,
            (),
            &self.options,
            not_yet,
        );
        waiting.map_or_else(State::Refused, State::Waiting)
    }
}

impl<S, L, Request> Service<Request> for Limit<S, L>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
    L: Limiter + Clone,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // A grant returns at once, without reading back the state it wrote.
        if let State::Idle = self.state
            && self.start()
        {
            return self.inner.poll_ready(cx).map_err(Into::into);
        }
        if let State::Waiting(wait) = &mut self.state {
            self.state = match ready!(wait.as_mut().poll(cx)) {
                Ok(permit) => State::Ready(permit),
                Err(error) => State::Refused(error),
            };
        }
        if let State::Refused(_) = self.state {
            return Poll::Ready(Ok(())); // `call` answers with the error
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        match self.call_holding(request) {
            Ok((future, permit)) => ResponseFuture::new(future, permit),
            Err(error) => ResponseFuture::refused(error),
        }
    }
}

impl<S, L: Limiter> Limit<S, L> {
    /// Calls the inner service with the reservation `poll_ready` made and
    /// hands its permit to the caller, for a response body that outlives the
    /// response future (`http::HttpLimit`); or hands over the error of an
    /// admission that failed, without calling the inner service.
    pub(crate) fn call_holding<Request>(
        &mut self,
        request: Request,
    ) -> Result<(S::Future, Permit), BoxError>
    where
        S: Service<Request>,
    {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Ready(permit) => Ok((self.inner.call(request), permit)),
            State::Refused(error) => Err(error),
            State::Idle | State::Waiting(_) => panic!(
                "Limit::call without a reservation: poll_ready must return Ready(Ok(())) first"
            ),
        }
    }
}

impl<S, L: Limiter> Drop for Limit<S, L> {
    /// Refunds a reservation that `call` never used.
    fn drop(&mut self) {
        if let State::Ready(permit) = std::mem::replace(&mut self.state, State::Idle) {
            self.limiter.refund(permit);
        }
    }
}

impl<S: Clone, L: Limiter + Clone> Clone for Limit<S, L> {
    /// Shares the limiter and the queue; the clone holds no reservation.
    fn clone(&self) -> Self {
        Self::new(
            self.inner.clone(),
            self.limiter.clone(),
            Arc::clone(&self.queue),
            self.options.clone(),
        )
    }
}

impl<S: fmt::Debug, L: Limiter + fmt::Debug> fmt::Debug for Limit<S, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Idle => "idle",
            State::Waiting(_) => "waiting",
            State::Ready(_) => "ready",
            State::Refused(_) => "refused",
        };
        f.debug_struct("Limit")
            .field("inner", &self.inner)
            .field("limiter", &self.limiter)
            .field("queue", &self.queue)
            .field("state", &state)
            .finish()
    }
}
