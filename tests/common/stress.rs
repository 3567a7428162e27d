//! 1,000 concurrent callers on a multi-thread runtime (real time: paused
//! time needs a current-thread runtime), and the check that the limit held.
//!
//! Each grant is recorded as the [`Span`] `[before, after]` around the
//! attempt that succeeded; the limiter decided somewhere inside it. A window
//! is only charged with grants whose whole span lies inside it, so
//! preemption can widen a span but never fake a violation.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tower_limits::{Admission, Limiter};

pub(crate) const CALLERS: usize = 1_000;
/// Generous (the slowest run takes about a second): a hang fails the test
/// instead of stalling the suite.
pub(crate) const DEADLINE: Duration = Duration::from_secs(30);

/// The span of one granted attempt.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub(crate) before: Instant,
    pub(crate) after: Instant,
}

/// Spawns `CALLERS` tasks running `caller` and returns how many finished.
pub(crate) async fn run_callers<F, Fut>(caller: F) -> usize
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let tasks: Vec<_> = (0..CALLERS).map(|_| tokio::spawn(caller())).collect();
    let mut finished = 0;
    for task in tasks {
        tokio::time::timeout(DEADLINE, task)
            .await
            .expect("callers finish")
            .expect("caller panicked");
        finished += 1;
    }
    finished
}

/// Runs `CALLERS` callers, each acquiring once (one decision per attempt,
/// waiting as each denial says), and returns the granted spans by start.
pub(crate) async fn spans_of_callers<L: Limiter + Clone>(limiter: L) -> Vec<Span> {
    let spans = Arc::new(Mutex::new(Vec::with_capacity(CALLERS)));
    let finished = run_callers(|| {
        let (limiter, spans) = (limiter.clone(), Arc::clone(&spans));
        async move {
            loop {
                let before = Instant::now();
                let answer = limiter.try_acquire().into_ready();
                match answer.expect("in-memory limiters answer at once") {
                    Ok(Admission::Granted(_permit)) => {
                        let after = Instant::now();
                        spans.lock().unwrap().push(Span { before, after });
                        return;
                    }
                    Ok(Admission::Denied(denial)) => denial.wait().await,
                    Err(error) => panic!("unexpected error: {error}"),
                }
            }
        }
    })
    .await;
    assert_eq!(finished, CALLERS, "callers finished");
    let mut spans = spans.lock().unwrap().clone();
    assert_eq!(spans.len(), CALLERS, "every caller got through");
    spans.sort_by_key(|span| span.before);
    spans
}

/// No interval of length `window` holds more than `max` of the `spans`
/// (sorted by start) whose whole span lies inside it; and the busiest holds
/// at least `min`, so the check has teeth.
pub(crate) fn assert_at_most_per_window(spans: &[Span], max: usize, window: Duration, min: usize) {
    let mut busiest = 0;
    for (i, first) in spans.iter().enumerate() {
        let end = first.before + window;
        let inside = spans[i..]
            .iter()
            .take_while(|span| span.before < end)
            .filter(|span| span.after < end)
            .count();
        assert!(
            inside <= max,
            "{inside} grants inside a {window:?} window starting at grant {i}, bound {max}"
        );
        busiest = busiest.max(inside);
    }
    assert!(
        busiest >= min,
        "the busiest {window:?} window held only {busiest} (bound {max}, at least {min} \
         expected): the test saw no pressure"
    );
}
