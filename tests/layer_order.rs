//! Why a concurrency limit goes *outside* a rate limit (seed 004, chaining
//! rule 1: "limit concurrency before rate").
//!
//! The workload: one call at a time, at most one start per second. The first
//! call runs for 2 s; the others take 10 ms. Several callers arrive at once,
//! each with its own clone of the stack, and the inner service records the
//! instant each call really starts (paused time, so instants are exact).
//!
//! * Concurrency outside rate: a caller first takes the concurrency slot, then
//!   waits for the rate limit, and starts the moment the rate limit admits
//!   it. The rate holds.
//! * Rate outside concurrency: callers are admitted by the rate limit while
//!   the long call runs, then queue for the slot. When it frees, they start
//!   back to back, 10 ms apart: the rate is broken although the rate limit
//!   itself admitted only one per second.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, sleep, timeout};
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_limits::error::BoxError;
use tower_limits::{ConcurrencyLimitLayer, ConcurrencyLimiter, RateLimitLayer, RateLimiter};

/// The rate: one start per this window.
const WINDOW: Duration = Duration::from_secs(1);
/// The first call's duration: longer than the window.
const FIRST_CALL: Duration = Duration::from_secs(2);
/// Every later call's duration: much shorter than the window.
const LATER_CALL: Duration = Duration::from_millis(10);
/// How many callers arrive together.
const CALLERS: usize = 4;

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn concurrency_layer() -> ConcurrencyLimitLayer {
    ConcurrencyLimitLayer::new(ConcurrencyLimiter::new(1).expect("valid concurrency limit"))
}

fn rate_layer() -> RateLimitLayer {
    let limiter = RateLimiter::builder("upstream", 1, WINDOW)
        .without_backoff()
        .build()
        .expect("valid rate limit");
    RateLimitLayer::new(limiter)
}

/// The inner service: records the instant each call starts, then runs for
/// [`FIRST_CALL`] (the first call) or [`LATER_CALL`] (the others).
#[derive(Clone, Default)]
struct Upstream {
    starts: Arc<Mutex<Vec<Instant>>>,
}

impl Upstream {
    /// The recorded starts as offsets from `origin`, in order.
    fn offsets(&self, origin: Instant) -> Vec<Duration> {
        let starts = self.starts.lock().unwrap_or_else(PoisonError::into_inner);
        starts.iter().map(|&start| start - origin).collect()
    }
}

impl Service<usize> for Upstream {
    type Response = usize;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<usize, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, id: usize) -> Self::Future {
        let duration = {
            let mut starts = self.starts.lock().unwrap_or_else(PoisonError::into_inner);
            starts.push(Instant::now());
            if starts.len() == 1 {
                FIRST_CALL
            } else {
                LATER_CALL
            }
        };
        Box::pin(async move {
            sleep(duration).await;
            Ok(id)
        })
    }
}

/// Sends [`CALLERS`] concurrent callers through `stack`, each in its own task
/// with its own clone, and returns when they have all finished.
async fn drive<S>(stack: S)
where
    S: Service<usize, Response = usize, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send,
{
    let callers: Vec<_> = (0..CALLERS)
        .map(|id| {
            let mut stack = stack.clone();
            tokio::spawn(async move { stack.ready().await?.call(id).await })
        })
        .collect();
    for caller in callers {
        // Paused time: a stuck caller fails the test instead of hanging it.
        let answer = timeout(Duration::from_secs(3600), caller)
            .await
            .expect("a caller is stuck")
            .expect("a caller panicked");
        answer.expect("call failed");
    }
}

/// The shortest gap between two consecutive starts.
fn shortest_gap(offsets: &[Duration]) -> Duration {
    offsets
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .min()
        .expect("at least two starts")
}

#[tokio::test(start_paused = true)]
async fn concurrency_outside_rate_keeps_starts_a_window_apart() {
    let origin = Instant::now();
    let upstream = Upstream::default();
    let stack = ServiceBuilder::new()
        .layer(concurrency_layer())
        .layer(rate_layer())
        .service(upstream.clone());

    drive(stack).await;

    let offsets = upstream.offsets(origin);
    assert_eq!(offsets.len(), CALLERS);
    assert!(
        shortest_gap(&offsets) >= WINDOW,
        "two starts closer than {WINDOW:?}: {offsets:?}"
    );
    // The second waits for the long call; each later one for the window.
    assert_eq!(offsets, [ms(0), ms(2000), ms(3000), ms(4000)]);
}

#[tokio::test(start_paused = true)]
async fn rate_outside_concurrency_breaks_the_rate() {
    let origin = Instant::now();
    let upstream = Upstream::default();
    let stack = ServiceBuilder::new()
        .layer(rate_layer())
        .layer(concurrency_layer())
        .service(upstream.clone());

    drive(stack).await;

    let offsets = upstream.offsets(origin);
    assert_eq!(offsets.len(), CALLERS);
    // Callers admitted by the rate limit at 1 s and 2 s queued for the slot
    // and started back to back once the long call ended.
    assert!(
        shortest_gap(&offsets) < WINDOW,
        "expected two starts closer than {WINDOW:?}: {offsets:?}"
    );
    assert_eq!(offsets[..3], [ms(0), ms(2000), ms(2010)]);
}
