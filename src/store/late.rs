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
//! store says they were not applied, for as long ([`until_applied`]).

use std::future::Future;
use std::time::Duration;

use super::StoreError;
use crate::error::LimiterError;

/// How long a refund is tried again while the store says it was not
/// applied, and the pauses between tries: from 10 ms, doubling up to 1 s.
const RETRY_FOR: Duration = Duration::from_secs(30);
const FIRST_RETRY: Duration = Duration::from_millis(10);
const LONGEST_RETRY: Duration = Duration::from_secs(1);

/// Runs `task` on the current tokio runtime, or warns that `what` cannot be
/// done in the store of limiter `name` without one.
pub(crate) fn spawn_or_warn(
    name: &str,
    what: &'static str,
    task: impl std::future::Future<Output = ()> + Send + 'static,
) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn(task)),
        Err(_) => tracing::warn!(limiter = %name, "no tokio runtime to {what} in the store"),
    }
}

/// Runs `op` until it succeeds, again while the store says a try changed
/// nothing (after 10 ms, then twice as long each time up to 1 s, for 30 s).
/// Its answer, or `None` after logging that `limiter` could not `what`.
pub(crate) async fn until_applied<T, F, Fut>(limiter: &str, what: &str, mut op: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LimiterError>>,
{
    let deadline = tokio::time::Instant::now() + RETRY_FOR;
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
        if !unapplied || tokio::time::Instant::now() + pause > deadline {
            tracing::warn!(
                limiter,
                %error,
                tries,
                "could not {what}: units it would give back return only when their time in the limit passes"
            );
            return None;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_RETRY);
        tries += 1;
    }
}

#[cfg(feature = "redis")]
pub(crate) use reconcile::LATE_ANSWER_BOUND;
#[cfg(any(feature = "redis", feature = "postgres", feature = "sqlite"))]
pub(crate) use reconcile::{Late, answer, undo_grant, undo_lease};

#[cfg(any(feature = "redis", feature = "postgres", feature = "sqlite"))]
mod reconcile {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
    use std::task::{Poll, Waker};
    use std::time::Duration;

    use super::until_applied;
    use crate::error::LimiterError;
    use crate::store::{LeaseStore, Quota, QuotaStore, StoreError, WindowDecision};

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
        let meeting = Arc::new(Meeting::new(undo));
        let caller = Caller {
            meeting: Arc::clone(&meeting),
            runtime: runtime.clone(),
        };
        drop(runtime.spawn(async move {
            match tokio::time::timeout(LATE_ANSWER_BOUND, work).await {
                Ok(answer) => meeting.answer(answer).await,
                Err(_) => tracing::warn!(
                    backend,
                    "a store call that may have taken units gave no answer within \
                     {LATE_ANSWER_BOUND:?}: they return only when their time in the limit passes"
                ),
            }
        }));
        match tokio::time::timeout(timeout, caller.wait()).await {
            Ok(answer) => answer,
            // Gone, unless the answer came in the meantime.
            Err(_) => caller
                .give_up()
                .unwrap_or_else(|| Err(StoreError::timeout(backend, timeout))),
        }
    }

    /// Where a store call's task leaves its answer for the caller, or
    /// gives back what an answer nobody takes granted. The lock makes
    /// "answered" and "the caller is gone" exclusive: every answer is
    /// either taken or undone.
    struct Meeting<T> {
        state: Mutex<Answer<T>>,
    }

    enum Answer<T> {
        /// The call runs; the caller waits (with this waker, once polled).
        Awaited(Option<Waker>, Undo<T>),
        /// The call answered; the caller has not taken it yet.
        Given(Result<T, StoreError>, Undo<T>),
        /// The caller is gone: an answer goes to the undo.
        Abandoned(Undo<T>),
        /// Taken, or undone.
        Done,
    }

    impl<T: Send + 'static> Meeting<T> {
        fn new(undo: Undo<T>) -> Self {
            Self {
                state: Mutex::new(Answer::Awaited(None, undo)),
            }
        }

        fn lock(&self) -> MutexGuard<'_, Answer<T>> {
            self.state.lock().unwrap_or_else(PoisonError::into_inner)
        }

        /// Leaves `answer` for the caller, or undoes it if the caller is
        /// gone.
        async fn answer(&self, answer: Result<T, StoreError>) {
            let undo = {
                let mut state = self.lock();
                match std::mem::replace(&mut *state, Answer::Done) {
                    Answer::Awaited(waker, undo) => {
                        *state = Answer::Given(answer, undo);
                        if let Some(waker) = waker {
                            waker.wake();
                        }
                        return;
                    }
                    Answer::Abandoned(undo) => undo,
                    given @ (Answer::Given(..) | Answer::Done) => {
                        *state = given;
                        return;
                    }
                }
            };
            if let Ok(granted) = answer {
                undo(granted).await;
            }
        }
    }

    /// The caller's side of a [`Meeting`]: abandons it when dropped.
    struct Caller<T: Send + 'static> {
        meeting: Arc<Meeting<T>>,
        runtime: tokio::runtime::Handle,
    }

    impl<T: Send + 'static> Caller<T> {
        /// The call's answer, when it comes.
        fn wait(&self) -> impl Future<Output = Result<T, StoreError>> + '_ {
            std::future::poll_fn(|cx| {
                let mut state = self.meeting.lock();
                match std::mem::replace(&mut *state, Answer::Done) {
                    Answer::Given(answer, _) => Poll::Ready(answer),
                    Answer::Awaited(_, undo) => {
                        *state = Answer::Awaited(Some(cx.waker().clone()), undo);
                        Poll::Pending
                    }
                    other => {
                        *state = other;
                        Poll::Pending
                    }
                }
            })
        }

        /// Stops waiting; the answer if it came already.
        fn give_up(self) -> Option<Result<T, StoreError>> {
            let mut state = self.meeting.lock();
            match std::mem::replace(&mut *state, Answer::Done) {
                Answer::Given(answer, _) => Some(answer),
                Answer::Awaited(_, undo) => {
                    *state = Answer::Abandoned(undo);
                    None
                }
                other => {
                    *state = other;
                    None
                }
            }
        }
    }

    impl<T: Send + 'static> Drop for Caller<T> {
        /// A caller dropped while the call runs abandons it; one dropped
        /// after the answer came without taking it undoes it.
        fn drop(&mut self) {
            let mut state = self.meeting.lock();
            match std::mem::replace(&mut *state, Answer::Done) {
                Answer::Awaited(_, undo) => *state = Answer::Abandoned(undo),
                Answer::Given(Ok(granted), undo) => {
                    drop(state);
                    drop(self.runtime.spawn(undo(granted)));
                }
                other => *state = other,
            }
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

    /// An undo that, for a grant, runs `give_back` with its ticket until
    /// the store applies it (see [`until_applied`]).
    fn undo<F, Fut>(name: String, what: &'static str, give_back: F) -> Late<WindowDecision>
    where
        F: Fn(u64) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), LimiterError>> + Send + 'static,
    {
        Late::undo(move |decision| async move {
            if let WindowDecision::Granted { ticket } = decision {
                until_applied(&name, what, || give_back(ticket)).await;
            }
        })
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
        undo(name, "give back a grant nobody took", move |ticket| {
            let (store, key) = (store.clone(), key.clone());
            async move { store.adjust(&key, &quota, ticket, cost, 0).await.map(drop) }
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
        undo(name, "release leases nobody took", move |lease| {
            let (store, key) = (store.clone(), key.clone());
            async move { store.release(&key, lease, cost).await }
        })
    }
}

#[cfg(all(test, any(feature = "redis", feature = "postgres", feature = "sqlite")))]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::{Late, answer};
    use crate::store::StoreError;

    const TIMEOUT: Duration = Duration::from_millis(10);

    /// A late answer's undo that counts the units it gives back.
    fn counting(undone: &Arc<AtomicU32>) -> Late<u32> {
        let undone = Arc::clone(undone);
        Late::undo(move |units: u32| async move {
            undone.fetch_add(units, Ordering::SeqCst);
        })
    }

    /// A store call answering `units` after `delay`.
    async fn call(delay: Duration, units: u32) -> Result<u32, StoreError> {
        tokio::time::sleep(delay).await;
        Ok(units)
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_is_the_callers() {
        let undone = Arc::new(AtomicU32::new(0));
        let late = counting(&undone);
        let answered = answer("test", TIMEOUT, late, call(TIMEOUT / 2, 3)).await;
        assert_eq!(answered, Ok(3));
        tokio::time::sleep(TIMEOUT * 10).await;
        assert_eq!(undone.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_after_the_timeout_is_undone() {
        let undone = Arc::new(AtomicU32::new(0));
        let late = counting(&undone);
        let answered = answer("test", TIMEOUT, late, call(TIMEOUT * 2, 3)).await;
        assert!(answered.is_err(), "{answered:?}");
        tokio::time::sleep(TIMEOUT * 10).await;
        assert_eq!(undone.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_for_a_dropped_caller_is_undone() {
        let undone = Arc::new(AtomicU32::new(0));
        let late = counting(&undone);
        let asking = answer("test", TIMEOUT, late, call(TIMEOUT / 2, 3));
        assert!(tokio::time::timeout(TIMEOUT / 4, asking).await.is_err());
        tokio::time::sleep(TIMEOUT * 10).await;
        assert_eq!(undone.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_answer_is_taken_or_undone_however_the_race_ends() {
        // Answers due right at the timeout, on two threads: whichever side
        // wins, the units end up with the caller or back, never lost.
        let undone = Arc::new(AtomicU32::new(0));
        let mut taken = 0;
        for _ in 0..300 {
            let late = counting(&undone);
            if let Ok(units) = answer("test", TIMEOUT, late, call(TIMEOUT, 1)).await {
                taken += units;
            }
        }
        tokio::time::sleep(TIMEOUT * 10).await;
        assert_eq!(taken + undone.load(Ordering::SeqCst), 300);
    }
}
