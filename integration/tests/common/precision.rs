//! Precision at high rates, on paused time: two ways to count what a limiter
//! admits over a span, and the check that the count is the rate within a
//! tenth of a percent.

use std::time::Duration;

use tokio::time::{Instant, advance};
use tower_limits::Limiter;
use tower_limits::limiter::Admission;

/// Admissions within `span` of paused time, retrying each denied call at
/// exactly the instant its denial names (no timer rounding).
pub(crate) async fn admissions_within(limiter: &impl Limiter, span: Duration) -> u64 {
    let end = Instant::now() + span;
    let mut admitted = 0;
    loop {
        match limiter.try_acquire().await.expect("no error") {
            Admission::Granted(_) => admitted += 1,
            Admission::Denied(denial) => {
                let at = denial.retry_at().expect("an instant");
                if at >= end {
                    return admitted;
                }
                advance(at - Instant::now()).await;
            }
        }
    }
}

/// Steps paused time by `step` for `duration`, admitting every call the
/// limiter allows at each step; returns the admissions after the first
/// step (so the initial burst is left out).
pub(crate) async fn admissions_while_stepping(
    limiter: &impl Limiter,
    step: Duration,
    duration: Duration,
) -> u64 {
    drain(limiter);
    let steps = duration.as_nanos() / step.as_nanos();
    let mut admitted = 0;
    for _ in 0..steps {
        advance(step).await;
        admitted += drain(limiter);
    }
    admitted
}

/// Takes calls costing 1 until one is denied; how many were granted.
pub(crate) fn drain(limiter: &impl Limiter) -> u64 {
    let mut granted = 0;
    loop {
        let answer = limiter.try_acquire_many(1).into_ready();
        match answer.expect("in-memory limiters answer at once") {
            Ok(Admission::Granted(_)) => granted += 1,
            Ok(Admission::Denied(_)) => return granted,
            Err(error) => panic!("unexpected error: {error}"),
        }
    }
}

/// `admitted` within `span` is `per_second × span` within 0.1%.
pub(crate) fn assert_within_a_thousandth(admitted: u64, per_second: u32, span: Duration) {
    let expected = f64::from(per_second) * span.as_secs_f64();
    let error = (admitted as f64 - expected).abs() / expected;
    assert!(
        error <= 0.001,
        "{admitted} admitted in {span:?} at {per_second}/s, expected {expected} ({:.4}% off)",
        error * 100.0
    );
}
