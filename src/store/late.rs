//! Store calls whose answer may come after their caller stopped waiting.
//!
//! A caller gives up on a store call at the store's timeout, or earlier if
//! it is dropped (a client timeout, a lost `select!`). The server does not
//! know: a decision sent before that still runs, and may grant. So a call
//! that may take units (a decision, a lease) is never abandoned halfway: it
//! runs to its end in a task, for up to [`LATE_ANSWER_BOUND`], and an answer
//! nobody took goes to an undo that gives the units back. Calls that give
//! units back (refunds, releases) have no caller waiting for them: they get
//! the same bound instead of the timeout, and are tried again while the
//! store says they were not applied ([`until_applied`]).

use std::future::Future;
use std::time::Duration;

use super::StoreError;
use crate::error::LimiterError;

/// How many times a refund is tried while the store says it was not applied
/// (the first try included), and the pause before the second.
const TRIES: u32 = 8;
const FIRST_RETRY: Duration = Duration::from_millis(10);

/// Runs `op` until it succeeds, again (after 10 ms, then twice as long each
/// time, up to 8 tries) while the store says a try changed nothing. Its
/// answer, or `None` after logging that `limiter` could not `what`.
pub(crate) async fn until_applied<T, F, Fut>(limiter: &str, what: &str, mut op: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LimiterError>>,
{
    let mut pause = FIRST_RETRY;
    let mut tries = 1;
    loop {
        let error = match op().await {
            Ok(answer) => return Some(answer),
            Err(error) => error,
        };
        let unapplied = error
            .get_ref()
            .downcast_ref::<StoreError>()
            .is_some_and(StoreError::was_not_applied);
        if !unapplied || tries == TRIES {
            tracing::warn!(
                limiter,
                %error,
                tries,
                "could not {what}: units it would give back return only when their time in the limit passes"
            );
            return None;
        }
        tokio::time::sleep(pause).await;
        pause *= 2;
        tries += 1;
    }
}

#[cfg(feature = "redis")]
pub(crate) use reconcile::LATE_ANSWER_BOUND;
#[cfg(any(feature = "redis", feature = "postgres", feature = "sqlite"))]
pub(crate) use reconcile::{Late, answer, undo_grant, undo_lease, undo_start};

#[cfg(any(feature = "redis", feature = "postgres", feature = "sqlite"))]
mod reconcile {
    use std::future::Future;
    use std::pin::Pin;
    use std::time::Duration;

    use tokio::sync::oneshot;

    use super::until_applied;
    use crate::store::{
        LeaseStore, Quota, QuotaStore, RateLimiterStore, StoreError, StoreErrorKind,
        WindowDecision, WindowPolicy,
    };

    /// How long a store call may run once its caller stopped waiting, and
    /// how long a refund waits for its answer: long enough for any
    /// overloaded store that still answers, short enough that a hung one
    /// does not pile up tasks.
    pub(crate) const LATE_ANSWER_BOUND: Duration = Duration::from_secs(30);

    type Undo<T> = Box<dyn FnOnce(T) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

    /// What becomes of a store call's answer if its caller stops waiting.
    pub(crate) enum Late<T> {
        /// Nothing: the call takes nothing (a read, a pause), and gives up
        /// at the timeout.
        Drop,
        /// The call may take units: it runs to its end, and an answer that
        /// nobody took goes to the undo.
        Undo(Undo<T>),
        /// Nobody waits for the call (a refund): it waits up to
        /// [`LATE_ANSWER_BOUND`] instead of the timeout.
        Patient,
    }

    impl<T> Late<T> {
        /// The call may take units; `undo` gives back what a late answer
        /// took.
        pub(crate) fn undo<F, Fut>(undo: F) -> Self
        where
            F: FnOnce(T) -> Fut + Send + 'static,
            Fut: Future<Output = ()> + Send + 'static,
        {
            Self::Undo(Box::new(move |answer| Box::pin(undo(answer))))
        }

        #[cfg(feature = "sqlite")]
        /// The same, for a call that answers `U`, which `convert` turns
        /// into the `T` an undo takes.
        pub(crate) fn before<U>(self, convert: impl FnOnce(U) -> T + Send + 'static) -> Late<U>
        where
            T: 'static,
        {
            match self {
                Self::Drop => Late::Drop,
                Self::Patient => Late::Patient,
                Self::Undo(undo) => Late::Undo(Box::new(move |answer| undo(convert(answer)))),
            }
        }

        #[cfg(any(feature = "postgres", feature = "sqlite"))]
        /// How long the caller of a store whose timeout is `timeout` waits.
        pub(crate) fn caller_wait(&self, timeout: Duration) -> Duration {
            match self {
                Self::Patient => LATE_ANSWER_BOUND,
                Self::Drop | Self::Undo(_) => timeout,
            }
        }
    }

    /// Runs `work` as `late` says, within `timeout` for the caller.
    pub(crate) async fn answer<T: Send + 'static>(
        backend: &'static str,
        timeout: Duration,
        late: Late<T>,
        work: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        let undo = match late {
            Late::Drop => return within(backend, timeout, work).await,
            Late::Patient => return within(backend, LATE_ANSWER_BOUND, work).await,
            Late::Undo(undo) => undo,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return within(backend, timeout, work).await;
        };
        let (answered, answer) = oneshot::channel();
        drop(runtime.spawn(async move {
            let Ok(result) = tokio::time::timeout(LATE_ANSWER_BOUND, work).await else {
                tracing::warn!(
                    backend,
                    "a store call that may have taken units gave no answer within \
                     {LATE_ANSWER_BOUND:?}: they return only when their time in the limit passes"
                );
                return;
            };
            if let Err(Ok(unclaimed)) = answered.send(result) {
                undo(unclaimed).await;
            }
        }));
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(StoreError::new(
                backend,
                StoreErrorKind::Refused,
                "the task running the call ended without an answer",
            )),
            Err(_) => Err(StoreError::timeout(backend, timeout)),
        }
    }

    /// `work`, failing with a timeout error after `timeout`.
    async fn within<T>(
        backend: &'static str,
        timeout: Duration,
        work: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(timeout, work)
            .await
            .unwrap_or_else(|_| Err(StoreError::timeout(backend, timeout)))
    }

    /// The undo of a quota decision: gives back the `cost` units of a
    /// grant nobody took.
    pub(crate) fn undo_grant<S>(
        store: &S,
        key: &S::QuotaKey,
        quota: Quota,
        cost: u32,
        name: String,
    ) -> Late<WindowDecision>
    where
        S: QuotaStore + Clone,
        S::QuotaKey: Clone,
    {
        let (store, key) = (store.clone(), key.clone());
        Late::undo(move |decision| async move {
            let WindowDecision::Granted { ticket } = decision else {
                return;
            };
            let refund = || store.adjust(&key, &quota, ticket, cost, 0);
            until_applied(&name, "give back a grant nobody took", refund).await;
        })
    }

    /// The undo of a sliding log decision: erases the `cost` starts of a
    /// grant nobody took.
    pub(crate) fn undo_start<S>(
        store: &S,
        key: &S::Key,
        policy: WindowPolicy,
        cost: u32,
        name: String,
    ) -> Late<WindowDecision>
    where
        S: RateLimiterStore + Clone,
        S::Key: Clone,
    {
        let (store, key) = (store.clone(), key.clone());
        Late::undo(move |decision| async move {
            let WindowDecision::Granted { ticket } = decision else {
                return;
            };
            let refund = || store.refund(&key, policy, ticket, cost);
            until_applied(&name, "erase the starts of a grant nobody took", refund).await;
        })
    }

    /// The undo of a lease: releases the `cost` leases nobody took (before
    /// their TTL would).
    pub(crate) fn undo_lease<S>(
        store: &S,
        key: &S::LeaseKey,
        cost: u32,
        name: String,
    ) -> Late<WindowDecision>
    where
        S: LeaseStore + Clone,
        S::LeaseKey: Clone,
    {
        let (store, key) = (store.clone(), key.clone());
        Late::undo(move |decision| async move {
            let WindowDecision::Granted { ticket } = decision else {
                return;
            };
            let release = || store.release(&key, ticket, cost);
            until_applied(&name, "release leases nobody took", release).await;
        })
    }
}
