//! How a caller waits for a layer's limiter: a quick attempt, then a place
//! in [`Line`] after a denial.
//!
//! A decision that is ready at once (an in-memory limiter) is taken on the
//! spot. A decision that takes a round trip (a store) runs concurrently with
//! every other caller's: a caller with nobody in line ahead of it asks
//! without queueing, and joins the line only once denied; see [`line`](super::line)
//! for how the line serves retries.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::time::Instant;

use super::Options;
use super::observe::{Observer, Outcome, WaitFuture, failed_at_once};
use crate::error::{BoxError, Elapsed, LimiterError, Rejected};
use crate::limiter::{Admission, Denial, Limiter, Permit, far_future};
use crate::line::{Line, Order, Place};

/// What the quick attempt came to, when it did not fail.
pub(crate) enum AtOnce {
    /// The limiter granted. Not recorded yet: the caller records the
    /// grant with [`granted_at_once`] once it has stored the permit.
    Granted(Permit),
    /// The limiter refused, and shadow mode lets the call through without
    /// a permit of the limiter's (recorded as refused).
    LetThrough(Permit),
    /// Not admitted yet.
    NotYet(NotYet),
}

/// Why a caller was not admitted by its quick attempt.
pub(crate) enum NotYet {
    /// The limiter said no.
    Denied(Denial),
    /// The limiter answers later (a store round trip): ask again, without a
    /// place in line.
    Later,
    /// Others are in line: join them without asking.
    Behind,
}

/// The quick attempt: asks `limiter` if nobody is in `line` and uses the
/// answer if it is ready at once. A denial fails with [`Rejected`] in reject
/// mode, and lets the call through unlimited in shadow mode.
///
/// Always inlined, with an in-memory limiter's `try_acquire_many`: the
/// permit then goes from the limiter's decision into the layer's state
/// without a trip through a returned value in memory, whose copy right
/// after it was written stalls the CPU (`benches/paired`: the concurrency
/// layer 29.7 -> 26.5 ns with both inlined; with this one alone, before
/// the layer wrote its state in place, 31.4 -> 41.0 ns).
#[inline(always)]
pub(crate) fn try_at_once<L: Limiter, O: Order<N>, N>(
    limiter: &L,
    cost: u32,
    line: &Line<O, N>,
    options: &Options,
) -> Result<AtOnce, BoxError> {
    if !line.is_empty() {
        return Ok(AtOnce::NotYet(NotYet::Behind));
    }
    match limiter.try_acquire_many(cost).into_ready() {
        Ok(Ok(Admission::Granted(permit))) => Ok(AtOnce::Granted(permit)),
        Ok(Ok(Admission::Denied(denial))) => denied_at_once(denial, cost, options),
        Ok(Err(error)) => {
            let error = error.into();
            failed_at_once(options.observer.as_ref(), cost, &error);
            Err(error)
        }
        // The limiter must do nothing until polled: the unpolled future is
        // dropped, and made again by an owned `Decision`.
        Err(_later) => Ok(AtOnce::NotYet(NotYet::Later)),
    }
}

/// Records a grant of [`try_at_once`], after the caller stored its permit:
/// the observer is a call, and a permit held across a call is copied
/// through memory. With the flat [`AtOnce`] answer, this took the
/// permit's last copy off the profile of both layers' `poll_ready`
/// (`benches/paired`, the concurrency + GCRA layers, processes in the
/// machine's fast phase: 92.5-94.4 -> 85.4 ns).
#[inline]
pub(crate) fn granted_at_once(options: &Options, cost: u32) {
    if let Some(observer) = &options.observer {
        observer.decided_at_once(Outcome::Granted, cost);
    }
}

/// A denial the quick attempt got: a refusal in reject mode, a call let
/// through in shadow mode, else a wait.
#[cold]
fn denied_at_once(denial: Denial, cost: u32, options: &Options) -> Result<AtOnce, BoxError> {
    let retry_at = denial.retry_at();
    if let Some(observer) = options
        .observer
        .as_ref()
        .filter(|observer| observer.is_shadow())
    {
        observer.decided_at_once(Outcome::Refused { retry_at }, cost);
        return Ok(AtOnce::LetThrough(Permit::unit().with_cost(cost)));
    }
    if options.reject {
        let error = Rejected::new(retry_at).into();
        failed_at_once(options.observer.as_ref(), cost, &error);
        return Err(error);
    }
    Ok(AtOnce::NotYet(NotYet::Denied(denial)))
}

/// What a caller does once the quick attempt did not admit it: one more
/// attempt in reject (or shadow) mode, else a wait bounded by the options.
/// Fails at once with [`Overloaded`](crate::error::Overloaded) when the line
/// is full, and with [`Elapsed`] when a denial names an instant past the
/// deadline. An observed layer records how the wait ends.
pub(crate) fn wait_for_admission<L: Limiter + Clone, O: Order<N>, N: Send + Sync + 'static>(
    limiter: L,
    cost: u32,
    line: &Arc<Line<O, N>>,
    lane: N,
    options: &Options,
    not_yet: NotYet,
) -> Result<WaitFuture, BoxError> {
    let observer = options.observer.as_ref();
    if let Some(observer) = observer.filter(|observer| observer.is_shadow()) {
        return Ok(Box::pin(ask_in_shadow(limiter, cost, Arc::clone(observer))));
    }
    let wait = match start_waiting(limiter, cost, line, lane, options, not_yet) {
        Ok(wait) => wait,
        Err(error) => {
            failed_at_once(observer, cost, &error);
            return Err(error);
        }
    };
    Ok(match observer {
        Some(observer) => observer.observe_wait(cost, wait),
        None => wait,
    })
}

fn start_waiting<L: Limiter + Clone, O: Order<N>, N: Send + Sync + 'static>(
    limiter: L,
    cost: u32,
    line: &Arc<Line<O, N>>,
    lane: N,
    options: &Options,
    not_yet: NotYet,
) -> Result<WaitFuture, BoxError> {
    if options.reject {
        return Ok(Box::pin(ask_once(limiter, cost)));
    }
    let deadline = deadline(options.max_wait);
    let denial = match not_yet {
        NotYet::Later => {
            let line = Arc::clone(line);
            let wait = ask_then_line(limiter, cost, line, lane, options.max_waiting, deadline);
            return Ok(Box::pin(within(deadline, wait)));
        }
        NotYet::Denied(denial) => {
            check_deadline(&denial, deadline)?;
            Some(denial)
        }
        NotYet::Behind => None,
    };
    let place = line.enter(lane, options.max_waiting)?;
    let wait = admit_from_line(limiter, cost, place, denial, deadline);
    Ok(Box::pin(within(deadline, wait)))
}

/// Admits a caller for a request: at once if nobody waits in `line` and the
/// limiter agrees, else as [`wait_for_admission`] says.
pub(crate) async fn admit_in_line<L: Limiter + Clone, O: Order<N>, N: Send + Sync + 'static>(
    limiter: &L,
    cost: u32,
    line: &Arc<Line<O, N>>,
    lane: N,
    options: &Options,
) -> Result<Permit, BoxError> {
    match try_at_once(limiter, cost, line, options)? {
        AtOnce::Granted(permit) => {
            granted_at_once(options, cost);
            Ok(permit)
        }
        AtOnce::LetThrough(permit) => Ok(permit),
        AtOnce::NotYet(not_yet) => {
            wait_for_admission(limiter.clone(), cost, line, lane, options, not_yet)?.await
        }
    }
}

/// One attempt, in reject mode.
async fn ask_once<L: Limiter + Clone>(limiter: L, cost: u32) -> Result<Permit, BoxError> {
    match Decision::new(limiter, cost).await? {
        Admission::Granted(permit) => Ok(permit),
        Admission::Denied(denial) => Err(Rejected::new(denial.retry_at()).into()),
    }
}

/// One attempt in shadow mode: recorded, and the call goes ahead whatever
/// the answer (without a permit when denied).
async fn ask_in_shadow<L: Limiter + Clone>(
    limiter: L,
    cost: u32,
    observer: Arc<Observer>,
) -> Result<Permit, BoxError> {
    let answer = Decision::new(limiter, cost).await;
    let (outcome, permit) = match answer {
        Ok(Admission::Granted(permit)) => (Outcome::Granted, permit),
        Ok(Admission::Denied(denial)) => {
            let retry_at = denial.retry_at();
            (
                Outcome::Refused { retry_at },
                Permit::unit().with_cost(cost),
            )
        }
        Err(_) => (Outcome::Failed, Permit::unit().with_cost(cost)),
    };
    observer.decided_at_once(outcome, cost);
    Ok(permit)
}

/// A first attempt that takes a round trip, made without a place in line
/// (so it runs concurrently with others'); a place only after a denial.
async fn ask_then_line<L: Limiter + Clone, O: Order<N>, N: Send + Sync + 'static>(
    limiter: L,
    cost: u32,
    line: Arc<Line<O, N>>,
    lane: N,
    max_waiting: Option<usize>,
    deadline: Option<Instant>,
) -> Result<Permit, BoxError> {
    let denial = match Decision::new(limiter.clone(), cost).await? {
        Admission::Granted(permit) => return Ok(permit),
        Admission::Denied(denial) => denial,
    };
    check_deadline(&denial, deadline)?;
    let place = line.enter(lane, max_waiting)?;
    admit_from_line(limiter, cost, place, Some(denial), deadline).await
}

/// Waits for the turn, then until the limiter admits the caller: sleeps
/// exactly as long as each denial says (or until capacity is released),
/// holding the turn, and asks again. An answer that is not ready at once is
/// awaited without the turn. Fails with [`Elapsed`] at once when a denial
/// names an instant past the deadline.
///
/// `denial` is the answer the caller already got, if any. Dropping the
/// future at any point leaves the line and holds no permit.
async fn admit_from_line<L: Limiter + Clone, O: Order<N>, N: Send + Sync + 'static>(
    limiter: L,
    cost: u32,
    mut place: Place<O, N>,
    mut denial: Option<Denial>,
    deadline: Option<Instant>,
) -> Result<Permit, BoxError> {
    loop {
        place.turn().await;
        if let Some(denial) = denial.take() {
            denial.wait().await;
        }
        let answer = match limiter.try_acquire_many(cost).into_ready() {
            Ok(answer) => answer,
            Err(_later) => {
                place.asking();
                let answer = Decision::new(limiter.clone(), cost).await;
                place.answered(&answer);
                answer
            }
        };
        match answer? {
            Admission::Granted(permit) => return Ok(permit),
            Admission::Denied(next) => {
                check_deadline(&next, deadline)?;
                denial = Some(next);
            }
        }
    }
}

/// Fails with [`Elapsed`] if `denial` names an instant past `deadline`.
fn check_deadline(denial: &Denial, deadline: Option<Instant>) -> Result<(), Elapsed> {
    match (deadline, denial.retry_at()) {
        (Some(deadline), Some(retry_at)) if retry_at > deadline => {
            Err(Elapsed::new(Some(retry_at)))
        }
        _ => Ok(()),
    }
}

/// `wait`, failing with [`Elapsed`] once `deadline` passes.
async fn within<T>(
    deadline: Option<Instant>,
    wait: impl Future<Output = Result<T, BoxError>>,
) -> Result<T, BoxError> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, wait)
            .await
            .unwrap_or_else(|_| Err(Elapsed::new(None).into())),
        None => wait.await,
    }
}

/// The deadline `max_wait` from now, if any.
fn deadline(max_wait: Option<std::time::Duration>) -> Option<Instant> {
    max_wait.map(|wait| Instant::now().checked_add(wait).unwrap_or_else(far_future))
}

type Answer<L> = (L, Result<Admission, LimiterError>);
type PendingAnswer<L> = Pin<Box<dyn Future<Output = Answer<L>> + Send>>;

/// A decision that takes a round trip, owning its limiter: a caller dropped
/// while it is in flight leaves it to finish in a task, which refunds a
/// grant ([`Limiter::refund`]), so no capacity is lost.
struct Decision<L: Limiter> {
    /// `None` once answered.
    pending: Option<PendingAnswer<L>>,
    polled: bool,
}

impl<L: Limiter> Decision<L> {
    fn new(limiter: L, cost: u32) -> Self {
        Self {
            pending: Some(Box::pin(async move {
                let answer = limiter.try_acquire_many(cost).await;
                (limiter, answer)
            })),
            polled: false,
        }
    }
}

impl<L: Limiter> Future for Decision<L> {
    type Output = Result<Admission, LimiterError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.polled = true;
        let Some(pending) = self.pending.as_mut() else {
            return Poll::Pending; // answered already: never polled again
        };
        let (_, answer) = ready!(pending.as_mut().poll(cx));
        self.pending = None;
        Poll::Ready(answer)
    }
}

impl<L: Limiter> Drop for Decision<L> {
    fn drop(&mut self) {
        // An unpolled limiter future has done nothing.
        let Some(pending) = self.pending.take().filter(|_| self.polled) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(refund_when_granted(pending))),
            Err(_) => tracing::warn!("no tokio runtime to finish an abandoned limiter decision"),
        }
    }
}

/// Finishes a decision nobody waits for, and refunds a grant.
async fn refund_when_granted<L: Limiter>(pending: PendingAnswer<L>) {
    if let (limiter, Ok(Admission::Granted(permit))) = pending.await {
        limiter.refund(permit);
    }
}
