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

mod common;

use std::time::Duration;

use common::ms;
use common::recorder::{Recorder, join_all, spawn_callers};
use tokio::time::Instant;
use tower::{Service, ServiceBuilder};
use tower_limits::error::BoxError;
use tower_limits::{ConcurrencyLimiter, LimitLayer, RateLimiter};

/// The rate: one start per this window.
const WINDOW: Duration = Duration::from_secs(1);
/// The first call's duration: longer than the window.
const FIRST_CALL: Duration = Duration::from_secs(2);
/// Every later call's duration: much shorter than the window.
const LATER_CALL: Duration = Duration::from_millis(10);
/// How many callers arrive together.
const CALLERS: usize = 4;

fn concurrency_layer() -> LimitLayer<ConcurrencyLimiter> {
    LimitLayer::new(ConcurrencyLimiter::new(1).expect("valid concurrency limit"))
}

fn rate_layer() -> LimitLayer<RateLimiter> {
    let limiter = RateLimiter::builder("upstream", 1, WINDOW)
        .without_backoff()
        .build()
        .expect("valid rate limit");
    LimitLayer::new(limiter)
}

/// Wraps `stack` around the upstream, which records the instant each call
/// starts, then runs for [`FIRST_CALL`] (the first call) or [`LATER_CALL`]
/// (the others). Sends [`CALLERS`] concurrent callers through it, each in
/// its own task with its own clone, and once they have all finished returns
/// the recorded starts as offsets from their arrival, in order.
async fn start_offsets<S>(stack: impl FnOnce(Recorder) -> S) -> Vec<Duration>
where
    S: Service<usize, Response = usize, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send,
{
    let origin = Instant::now();
    let upstream = Recorder::with_first_call(FIRST_CALL, LATER_CALL);
    let stack = stack(upstream.clone());
    join_all(spawn_callers(&stack, 0..CALLERS).await).await;
    upstream.offsets(origin)
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
    let offsets = start_offsets(|upstream| {
        ServiceBuilder::new()
            .layer(concurrency_layer())
            .layer(rate_layer())
            .service(upstream)
    })
    .await;

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
    let offsets = start_offsets(|upstream| {
        ServiceBuilder::new()
            .layer(rate_layer())
            .layer(concurrency_layer())
            .service(upstream)
    })
    .await;

    assert_eq!(offsets.len(), CALLERS);
    // Callers admitted by the rate limit at 1 s and 2 s queued for the slot
    // and started back to back once the long call ended.
    assert!(
        shortest_gap(&offsets) < WINDOW,
        "expected two starts closer than {WINDOW:?}: {offsets:?}"
    );
    assert_eq!(offsets[..3], [ms(0), ms(2000), ms(2010)]);
}
