//! 1,000 concurrent callers per limiter on a multi-thread runtime, directly
//! (`LimiterExt::acquire`) and through `LimitLayer`: the limit must hold.
//!
//! These run on real time (paused time needs a current-thread runtime).
//! Each grant is recorded as the span `[before, after]` around the attempt
//! that succeeded; the limiter decided somewhere inside it. A window is only
//! charged with grants whose whole span lies inside it, so preemption can
//! widen a span but never fake a violation.

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use common::stress::{
    CALLERS, Recorder, Span, assert_at_most_per_window, paced_bound, run_callers,
};
use tower::{ServiceBuilder, ServiceExt, service_fn};
use tower_limits::{
    CompositeLimiter, ConcurrencyLimiter, DelayLimiter, EvenlySpacedRateLimiter, LimitLayer,
    Limiter, LimiterExt, RateLimiter,
};

// ---------------------------------------------------------------- helpers

/// Every caller acquires directly, holds its permit for `hold`, drops it.
async fn direct<L: Limiter + Clone>(limiter: Recorder<L>, hold: Duration) -> Outcome {
    let finished = run_callers(|| {
        let limiter = limiter.clone();
        async move {
            let permit = limiter
                .acquire()
                .await
                .expect("in-memory limiters do not fail");
            limiter.running.call(hold).await;
            drop(permit);
        }
    })
    .await;
    Outcome::new(finished, &limiter)
}

/// Every caller goes through one `LimitLayer` around a service that runs
/// for `hold`.
async fn layered<L: Limiter + Clone>(limiter: Recorder<L>, hold: Duration) -> Outcome {
    let counted = Arc::clone(&limiter.running);
    let service = ServiceBuilder::new()
        .layer(LimitLayer::new(limiter.clone()))
        .service(service_fn(move |()| {
            let running = Arc::clone(&counted);
            async move {
                running.call(hold).await;
                Ok::<_, Infallible>(())
            }
        }));
    let finished = run_callers(|| {
        let service = service.clone();
        async move {
            service
                .oneshot(())
                .await
                .expect("the layer admits every caller");
        }
    })
    .await;
    Outcome::new(finished, &limiter)
}

struct Outcome {
    finished: usize,
    spans: Vec<Span>,
    max_running: usize,
}

impl Outcome {
    fn new<L>(finished: usize, limiter: &Recorder<L>) -> Self {
        Self {
            finished,
            spans: limiter.spans(),
            max_running: limiter.running.max(),
        }
    }

    fn assert_all_got_through(&self) {
        assert_eq!(self.finished, CALLERS, "callers finished");
        assert_eq!(self.spans.len(), CALLERS, "grants recorded");
    }

    /// No `window` holds more than `max` grants whose span lies inside it;
    /// and some window does hold at least `max / 2`, so the check has teeth.
    fn assert_at_most_per_window(&self, max: u32, window: Duration) {
        let max = max as usize;
        assert_at_most_per_window(&self.spans, max, window, max.div_ceil(2));
    }

    fn assert_concurrency_reached(&self, max: u32) {
        let max = max as usize;
        assert!(
            self.max_running <= max,
            "{} ran at once, limit {max}",
            self.max_running
        );
        assert_eq!(self.max_running, max, "the limit was never reached");
    }
}

// -------------------------------------------------------------- limiters

const MAX_CONCURRENT: u32 = 8;
/// 100 per 100 ms: 1,000 callers take about a second.
const RATE_MAX: u32 = 100;
const RATE_WINDOW: Duration = Duration::from_millis(100);

fn concurrency() -> Recorder<ConcurrencyLimiter> {
    Recorder::new(ConcurrencyLimiter::new(MAX_CONCURRENT).unwrap())
}

fn plain_rate() -> RateLimiter {
    RateLimiter::builder("stress", RATE_MAX, RATE_WINDOW)
        .without_backoff()
        .build()
        .unwrap()
}

fn backoff_rate() -> RateLimiter {
    RateLimiter::builder("stress-backoff", RATE_MAX, RATE_WINDOW)
        .initial_backoff(Duration::from_millis(1))
        .backoff_multiplier(2.0)
        .max_backoff(Duration::from_millis(10))
        .build()
        .unwrap()
}

fn concurrency_and_rate() -> Recorder<CompositeLimiter> {
    Recorder::new(
        CompositeLimiter::new()
            .with(ConcurrencyLimiter::new(MAX_CONCURRENT).unwrap())
            .with(plain_rate()),
    )
}

// ----------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrency_limiter_holds_for_1000_concurrent_callers() {
    let outcome = direct(concurrency(), Duration::from_millis(1)).await;
    outcome.assert_all_got_through();
    outcome.assert_concurrency_reached(MAX_CONCURRENT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrency_limit_layer_holds_for_1000_concurrent_callers() {
    let outcome = layered(concurrency(), Duration::from_millis(1)).await;
    outcome.assert_all_got_through();
    outcome.assert_concurrency_reached(MAX_CONCURRENT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rate_limiter_without_backoff_holds_for_1000_concurrent_callers() {
    let outcome = direct(Recorder::new(plain_rate()), Duration::ZERO).await;
    outcome.assert_all_got_through();
    outcome.assert_at_most_per_window(RATE_MAX, RATE_WINDOW);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rate_limit_layer_without_backoff_holds_for_1000_concurrent_callers() {
    let outcome = layered(Recorder::new(plain_rate()), Duration::ZERO).await;
    outcome.assert_all_got_through();
    outcome.assert_at_most_per_window(RATE_MAX, RATE_WINDOW);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rate_limiter_with_backoff_holds_for_1000_concurrent_callers() {
    let outcome = direct(Recorder::new(backoff_rate()), Duration::ZERO).await;
    outcome.assert_all_got_through();
    outcome.assert_at_most_per_window(RATE_MAX, RATE_WINDOW);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rate_limit_layer_with_backoff_holds_for_1000_concurrent_callers() {
    let outcome = layered(Recorder::new(backoff_rate()), Duration::ZERO).await;
    outcome.assert_all_got_through();
    outcome.assert_at_most_per_window(RATE_MAX, RATE_WINDOW);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delay_limiter_holds_for_1000_concurrent_callers() {
    let delay = Duration::from_millis(1);
    let limiter = Recorder::new(DelayLimiter::new(delay).unwrap());
    let outcome = direct(limiter, Duration::ZERO).await;
    outcome.assert_all_got_through();
    outcome.assert_at_most_per_window(1, delay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn evenly_spaced_limiter_holds_for_1000_concurrent_callers() {
    // Calls outlast the 1 ms interval: starts stay spaced all the same.
    let limiter = EvenlySpacedRateLimiter::new(RATE_MAX, RATE_WINDOW).unwrap();
    let outcome = direct(Recorder::new(limiter), Duration::from_millis(3)).await;
    outcome.assert_all_got_through();
    // Without the pacing tolerance: `RATE_MAX` per window, one per interval.
    let interval = RATE_WINDOW / RATE_MAX;
    let bound = |window| paced_bound(1, interval, window) as u32;
    outcome.assert_at_most_per_window(bound(RATE_WINDOW), RATE_WINDOW);
    outcome.assert_at_most_per_window(bound(interval), interval);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn composite_of_concurrency_and_rate_holds_for_1000_concurrent_callers() {
    let outcome = direct(concurrency_and_rate(), Duration::from_millis(1)).await;
    outcome.assert_all_got_through();
    outcome.assert_concurrency_reached(MAX_CONCURRENT);
    outcome.assert_at_most_per_window(RATE_MAX, RATE_WINDOW);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn composite_limit_layer_holds_for_1000_concurrent_callers() {
    let outcome = layered(concurrency_and_rate(), Duration::from_millis(1)).await;
    outcome.assert_all_got_through();
    outcome.assert_concurrency_reached(MAX_CONCURRENT);
    outcome.assert_at_most_per_window(RATE_MAX, RATE_WINDOW);
}
