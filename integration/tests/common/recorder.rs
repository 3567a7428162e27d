//! A recording inner service and the callers that drive a limited stack in
//! front of it.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};
use tower::{Service, ServiceExt};
use tower_limits::error::BoxError;

/// What [`Recorder`] saw.
#[derive(Default)]
struct Log {
    starts: Vec<(usize, Instant)>,
    running: usize,
    max_running: usize,
}

/// An inner service that records when each call starts (and its id), runs
/// for a set duration (the first call may have one of its own), and tracks
/// how many calls overlap.
#[derive(Clone)]
pub(crate) struct Recorder {
    log: Arc<Mutex<Log>>,
    /// How long the first call runs.
    first_call: Duration,
    /// How long every later call runs.
    duration: Duration,
}

impl Recorder {
    /// Every call runs for `duration`.
    pub(crate) fn new(duration: Duration) -> Self {
        Self::with_first_call(duration, duration)
    }

    /// The first call runs for `first`, every later one for `later`.
    pub(crate) fn with_first_call(first: Duration, later: Duration) -> Self {
        Self {
            log: Arc::default(),
            first_call: first,
            duration: later,
        }
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Each start as an offset from `origin`, in start order.
    pub(crate) fn offsets(&self, origin: Instant) -> Vec<Duration> {
        self.log()
            .starts
            .iter()
            .map(|&(_, at)| at - origin)
            .collect()
    }

    /// The ids of the calls, in start order.
    pub(crate) fn order(&self) -> Vec<usize> {
        self.log().starts.iter().map(|&(id, _)| id).collect()
    }

    pub(crate) fn max_running(&self) -> usize {
        self.log().max_running
    }
}

impl Service<usize> for Recorder {
    type Response = usize;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<usize, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, id: usize) -> Self::Future {
        let duration = {
            let mut log = self.log();
            log.starts.push((id, Instant::now()));
            log.running += 1;
            log.max_running = log.max_running.max(log.running);
            if log.starts.len() == 1 {
                self.first_call
            } else {
                self.duration
            }
        };
        let log = Arc::clone(&self.log);
        Box::pin(async move {
            if !duration.is_zero() {
                sleep(duration).await;
            }
            log.lock().unwrap_or_else(PoisonError::into_inner).running -= 1;
            Ok(id)
        })
    }
}

/// Waits for `service` to be ready, then calls it with `id`.
pub(crate) async fn ready_and_call<S>(mut service: S, id: usize) -> Result<usize, BoxError>
where
    S: Service<usize, Response = usize, Error = BoxError>,
{
    service.ready().await?.call(id).await
}

/// Spawns one caller per id, in order, each with its own clone of `service`.
/// Each caller runs its first poll (and so arrives) before the next is
/// spawned.
pub(crate) async fn spawn_callers<S>(
    service: &S,
    ids: impl IntoIterator<Item = usize>,
) -> Vec<JoinHandle<Result<usize, BoxError>>>
where
    S: Service<usize, Response = usize, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send,
{
    let mut callers = Vec::new();
    for id in ids {
        callers.push(tokio::spawn(ready_and_call(service.clone(), id)));
        tokio::task::yield_now().await;
    }
    callers
}

/// Longer than any test needs; on paused time a stuck caller fails the test
/// after this much virtual time instead of hanging it.
const STUCK: Duration = Duration::from_secs(3600);

/// Awaits `task`, failing the test if it is stuck.
pub(crate) async fn finish<T>(task: JoinHandle<T>) -> T {
    tokio::time::timeout(STUCK, task)
        .await
        .expect("a caller is stuck")
        .expect("a caller panicked")
}

/// Awaits every caller; each must have succeeded.
pub(crate) async fn join_all(callers: Vec<JoinHandle<Result<usize, BoxError>>>) {
    for caller in callers {
        finish(caller).await.expect("call failed");
    }
}
