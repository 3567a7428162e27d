//! The [`Limit`] service.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::time::Instant;
use tower_service::Service;

use super::Options;
use super::future::ResponseFuture;
use super::waiting::{Queue, acquire_in_turn, acquire_or_reject};
use crate::error::{BoxError, Rejected};
use crate::limiter::{Admission, Denial, Limiter, Permit, far_future};

type WaitFuture = Pin<Box<dyn Future<Output = Result<Permit, BoxError>> + Send>>;

/// Admits calls to `S` only when the limiter `L` allows; built by
/// [`LimitLayer`](super::LimitLayer).
///
/// `poll_ready` waits for admission (or fails at once in reject mode, when the
/// queue is full, or when the wait would pass the maximum); `call` uses the
/// admission; the [`ResponseFuture`] records completion when the inner future
/// finishes, fails or is dropped.
///
/// Clones share the limiter and the queue, so the limit holds across all of
/// them. A clone starts without a reservation; a service dropped after
/// `poll_ready` but before `call` refunds its reservation.
///
/// # Panics
///
/// `call` panics if `poll_ready` has not returned `Ready(Ok(()))` since the
/// last `call`, as tower's own limit services do.
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
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The limiter.
    pub fn limiter(&self) -> &L {
        &self.limiter
    }
}

impl<S, L: Limiter + Clone> Limit<S, L> {
    /// What to do when nobody holds a reservation: try at once if nobody is
    /// waiting, else join the queue.
    fn start(&self) -> Result<State, BoxError> {
        let mut denial = None;
        if self.queue.is_empty()
            && let Ok(answer) = self.limiter.try_acquire().into_ready()
        {
            match answer? {
                Admission::Granted(permit) => return Ok(State::Ready(permit)),
                Admission::Denied(denied) if self.options.reject => {
                    return Err(Rejected::new(denied.retry_at()).into());
                }
                Admission::Denied(denied) => denial = Some(denied),
            }
        }
        Ok(State::Waiting(self.wait(denial)?))
    }

    #[cold]
    #[inline(never)]
    fn wait(&self, denial: Option<Denial>) -> Result<WaitFuture, BoxError> {
        let limiter = self.limiter.clone();
        if self.options.reject {
            return Ok(Box::pin(acquire_or_reject(limiter)));
        }
        let place = self.queue.enter(self.options.max_waiting)?;
        let deadline = self
            .options
            .max_wait
            .map(|wait| Instant::now().checked_add(wait).unwrap_or_else(far_future));
        Ok(Box::pin(acquire_in_turn(limiter, place, denial, deadline)))
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
        if let State::Idle = self.state {
            self.state = self.start()?;
        }
        if let State::Waiting(wait) = &mut self.state {
            let result = ready!(wait.as_mut().poll(cx));
            self.state = State::Idle;
            self.state = State::Ready(result?);
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let State::Ready(permit) = std::mem::replace(&mut self.state, State::Idle) else {
            panic!("Limit::call without a reservation: poll_ready must return Ready(Ok(())) first");
        };
        ResponseFuture::new(self.inner.call(request), permit)
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
            self.options,
        )
    }
}

impl<S: fmt::Debug, L: Limiter + fmt::Debug> fmt::Debug for Limit<S, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Idle => "idle",
            State::Waiting(_) => "waiting",
            State::Ready(_) => "ready",
        };
        f.debug_struct("Limit")
            .field("inner", &self.inner)
            .field("limiter", &self.limiter)
            .field("queue", &self.queue)
            .field("state", &state)
            .finish()
    }
}
