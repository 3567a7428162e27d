//! The queue of callers waiting for one layer's limiter, served in arrival
//! order.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Mutex;
use tokio::time::Instant;

use super::Options;
use crate::error::{BoxError, Elapsed, Overloaded, Rejected};
use crate::limiter::{Admission, Denial, Limiter, Permit, far_future};

/// Shared by every service a layer builds.
///
/// Only the caller holding `turn` asks the limiter; the others wait in the
/// mutex's first-in, first-out queue. A newcomer skips the queue only when it
/// is empty.
#[derive(Default)]
pub(crate) struct Queue {
    turn: Mutex<()>,
    waiting: AtomicUsize,
}

impl Queue {
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.load(Ordering::Acquire) == 0
    }

    /// A place in the queue, unless `max_waiting` callers already hold one.
    pub(crate) fn enter(self: &Arc<Self>, max_waiting: Option<usize>) -> Result<Place, Overloaded> {
        let max = max_waiting.unwrap_or(usize::MAX);
        self.waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |waiting| {
                (waiting < max).then_some(waiting + 1)
            })
            .map_err(Overloaded::new)?;
        Ok(Place(Arc::clone(self)))
    }
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue")
            .field("waiting", &self.waiting.load(Ordering::Relaxed))
            .finish()
    }
}

/// Counts one waiting caller until dropped.
pub(crate) struct Place(Arc<Queue>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Waits in line, then until the limiter admits the caller.
///
/// `denial` is the answer the caller already got, if any. With a `deadline`,
/// fails with [`Elapsed`] as soon as the limiter names a later instant, or when
/// the deadline passes. Dropping the future at any point gives up the place
/// and holds no permit.
async fn acquire_in_turn<L: Limiter>(
    limiter: L,
    cost: u32,
    place: Place,
    denial: Option<Denial>,
    deadline: Option<Instant>,
) -> Result<Permit, BoxError> {
    within(deadline, async {
        let _turn = place.0.turn.lock().await;
        admit_holding_turn(&limiter, cost, denial, deadline).await
    })
    .await
}

/// `wait`, failing with [`Elapsed`] once `deadline` passes.
pub(crate) async fn within<T>(
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

/// Asks the limiter until it admits the caller, who holds the turn: sleeps
/// exactly as long as each denial says (or until capacity is released), and
/// fails with [`Elapsed`] at once when a denial names an instant past the
/// deadline.
pub(crate) async fn admit_holding_turn<L: Limiter>(
    limiter: &L,
    cost: u32,
    mut denial: Option<Denial>,
    deadline: Option<Instant>,
) -> Result<Permit, BoxError> {
    loop {
        if let Some(denial) = denial.take() {
            if let (Some(deadline), Some(retry_at)) = (deadline, denial.retry_at())
                && retry_at > deadline
            {
                return Err(Elapsed::new(Some(retry_at)).into());
            }
            denial.wait().await;
        }
        match limiter.try_acquire_many(cost).await? {
            Admission::Granted(permit) => return Ok(permit),
            Admission::Denied(next) => denial = Some(next),
        }
    }
}

/// The deadline `max_wait` from now, if any.
pub(crate) fn deadline(max_wait: Option<std::time::Duration>) -> Option<Instant> {
    max_wait.map(|wait| Instant::now().checked_add(wait).unwrap_or_else(far_future))
}

/// One attempt for a limiter that answers asynchronously, in reject mode.
async fn acquire_or_reject<L: Limiter>(limiter: L, cost: u32) -> Result<Permit, BoxError> {
    match limiter.try_acquire_many(cost).await? {
        Admission::Granted(permit) => Ok(permit),
        Admission::Denied(denial) => Err(Rejected::new(denial.retry_at()).into()),
    }
}

/// What a caller does once the quick attempt did not admit it: one more
/// attempt in reject mode, else a place in `queue` (or [`Overloaded`] at
/// once when the queue is full) and a wait bounded by the options.
///
/// `denial` is the quick attempt's answer, if it got one.
pub(crate) fn wait_for_admission<L: Limiter>(
    limiter: L,
    cost: u32,
    queue: &Arc<Queue>,
    options: Options,
    denial: Option<Denial>,
) -> Result<WaitFuture, BoxError> {
    if options.reject {
        return Ok(Box::pin(acquire_or_reject(limiter, cost)));
    }
    let place = queue.enter(options.max_waiting)?;
    let deadline = deadline(options.max_wait);
    Ok(Box::pin(acquire_in_turn(
        limiter, cost, place, denial, deadline,
    )))
}

/// A caller's wait for admission.
pub(crate) type WaitFuture = Pin<Box<dyn Future<Output = Result<Permit, BoxError>> + Send>>;

/// Admits a caller for a request: at once if nobody waits in `queue` and
/// the limiter agrees, else in line (or rejected, with `options.reject`).
pub(crate) async fn admit_in_line<L: Limiter + Clone>(
    limiter: &L,
    cost: u32,
    queue: &Arc<Queue>,
    options: Options,
) -> Result<Permit, BoxError> {
    let mut denial = None;
    if queue.is_empty() {
        match limiter.try_acquire_many(cost).await? {
            Admission::Granted(permit) => return Ok(permit),
            Admission::Denied(denied) if options.reject => {
                return Err(Rejected::new(denied.retry_at()).into());
            }
            Admission::Denied(denied) => denial = Some(denied),
        }
    }
    wait_for_admission(limiter.clone(), cost, queue, options, denial)?.await
}
