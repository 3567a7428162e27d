//! Precision at high rates through Redis: one process drives one shared
//! limit with 64 concurrent callers over one multiplexed connection, as fast
//! as it can, and no window ever admits more than the limit.
//!
//! Each limiter runs twice: at 20,000/s, about the most one process drives
//! through one connection (15,000 to 27,000 decisions a second on two cores
//! in a debug build, so some windows reach the limit and others fall short:
//! the test measures precision at the highest rate reachable), and at
//! 2,000/s, which it saturates (the limit is pressed all the time, and
//! admissions must reach 80% of it on a busy machine; a quiet one reaches
//! 95% and more). Each run prints its decisions and
//! admissions per second.
//!
//! # What each clock can prove
//!
//! The server decides on its own clock, and a local timestamp taken around
//! a call only brackets that decision: the request waited in the client's
//! queue, crossed the loopback, waited behind other scripts, and the reply
//! waited for a worker thread. With 64 callers that span is a millisecond or
//! more, 20 admissions at 20,000/s, so local timestamps cannot show that a
//! 100 ms window held 2,000 admissions and not 2,010. Hence:
//!
//! * the sliding log's and the fixed window's checks use the tickets, which
//!   the server stamps on its clock in the script that decides (the start
//!   time in µs; the window index): they are exact, no local clock involved;
//! * GCRA's ticket is the end of the grant's slot of GCRA's line, so it
//!   gives the server's order of grants but not the instants they were
//!   decided. Its check uses the local span `[before, after]` of each grant,
//!   which contains the decision: if grants `k` and `k + n` (in ticket
//!   order) came less than `(n + 1 - B) T` apart on the server, the rule of
//!   GCRA is broken, and since `after(k + n) - before(k)` is at least their
//!   server distance, a span shorter than that bound proves a violation. The
//!   converse does not hold: an over-admission shorter than a span goes
//!   unseen. This relies on the server's clock running at the local clock's
//!   rate, true on one machine unless the wall clock is stepped during the
//!   run. The slots themselves must not overlap (their ends at least `T`
//!   apart): every grant was one atomic step.
//!
//! Saturation is measured in whole windows of server time for the sliding
//! log and fixed window, and over the local span of the run for GCRA.
#![cfg(feature = "redis")]

mod common;

use std::time::Duration;

use common::tickets::{assert_saturated, fixed_window_counts, inner_fill, sliding_log_fill};
use tokio::sync::Mutex;
use tokio::time::Instant;
use tower_limits::limiter::Admission;
use tower_limits::store::{Quota, RedisStore};
use tower_limits::{Limiter, RateLimiter};

/// Concurrent callers, sharing one store (one multiplexed connection).
const CALLERS: usize = 64;
/// How long each limiter is driven.
const RUN: Duration = Duration::from_millis(1_500);
/// The window of the fixed window and the sliding log.
const WINDOW: Duration = Duration::from_millis(100);
/// Admissions per second at or above what one process drives.
const FAST: u32 = 20_000;
/// Admissions per second the callers saturate.
const SATURATED: u32 = 2_000;
/// GCRA's burst, as time at its rate: 10 ms, so that neither tokio's 1 ms
/// timer nor a reply held up behind 63 others decides the rate.
const BURST: Duration = Duration::from_millis(10);

/// The tests measure throughput: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// One grant: its ticket and the local span around the call that got it.
struct Grant {
    ticket: u64,
    before: Instant,
    after: Instant,
}

/// What driving a limiter for [`RUN`] gave.
struct Run {
    grants: Vec<Grant>,
    decisions: usize,
}

/// Runs `check` with a store on the shared Redis at [`FAST`] and at
/// [`SATURATED`] (whether the callers saturate the rate), one test at a
/// time; skips if `REDIS_URL` is unset.
async fn at_both_rates(check: impl AsyncFn(RedisStore, u32, bool)) {
    let Some(store) = common::redis::store("the Redis precision tests").await else {
        return;
    };
    let _alone = ONE_AT_A_TIME.lock().await;
    check(store.clone(), FAST, false).await;
    check(store, SATURATED, true).await;
}

/// Admissions per window of `window` at `per_second`.
fn per_window(per_second: u32, window: Duration) -> u32 {
    (f64::from(per_second) * window.as_secs_f64()).round() as u32
}

/// [`CALLERS`] tasks call `limiter` for [`RUN`], each waiting as its
/// denials say; prints the decisions and grants per second.
async fn drive<L: Limiter + Clone>(what: &str, limiter: L) -> Run {
    let started = Instant::now();
    let until = started + RUN;
    let tasks: Vec<_> = (0..CALLERS)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let (mut grants, mut decisions) = (Vec::new(), 0);
                while Instant::now() < until {
                    let before = Instant::now();
                    let answer = limiter.try_acquire().await.expect("Redis answers");
                    decisions += 1;
                    match answer {
                        Admission::Granted(permit) => grants.push(Grant {
                            ticket: permit.token().expect("a store ticket"),
                            before,
                            after: Instant::now(),
                        }),
                        Admission::Denied(denial) => {
                            let _ = tokio::time::timeout_at(until, denial.wait()).await;
                        }
                    }
                }
                (grants, decisions)
            })
        })
        .collect();
    let mut run = Run {
        grants: Vec::new(),
        decisions: 0,
    };
    for task in tasks {
        let (grants, decisions) = task.await.unwrap();
        run.grants.extend(grants);
        run.decisions += decisions;
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{what}: {:.0} decisions/s, {:.0} admissions/s ({CALLERS} callers, {seconds:.2} s)",
        run.decisions as f64 / seconds,
        run.grants.len() as f64 / seconds,
    );
    run
}

fn tickets(run: &Run) -> Vec<u64> {
    run.grants.iter().map(|grant| grant.ticket).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_never_admits_more_than_the_limit_per_window() {
    at_both_rates(async |store, rate, saturable| {
        let limit = per_window(rate, WINDOW);
        let quota = Quota::fixed_window(limit, WINDOW).unwrap();
        let what = format!("fixed window {limit}/{WINDOW:?}");
        let limiter = RateLimiter::new(store.clone(), format!("fixed-{rate}"), quota);
        let run = drive(&what, limiter).await;
        let counts = fixed_window_counts(&tickets(&run), limit);
        println!("{what}: per window {counts:?}");
        if saturable {
            let (filled, possible) = inner_fill(&counts, limit);
            assert_saturated(&what, filled, possible);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_log_never_admits_more_than_the_limit_per_window() {
    at_both_rates(async |store, rate, saturable| {
        let limit = per_window(rate, WINDOW);
        let what = format!("sliding log {limit}/{WINDOW:?}");
        let limiter = RateLimiter::builder(format!("log-{rate}"), limit, WINDOW)
            .without_backoff()
            .store(store.clone())
            .build()
            .unwrap();
        let run = drive(&what, limiter).await;
        let (counted, possible) = sliding_log_fill(&tickets(&run), limit, WINDOW);
        println!("{what}: {counted} starts in whole windows allowing {possible}");
        if saturable {
            assert_saturated(&what, counted, possible);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_never_admits_more_than_burst_plus_rate() {
    at_both_rates(async |store, rate, saturable| {
        let burst = per_window(rate, BURST);
        let quota = Quota::gcra(rate, Duration::from_secs(1))
            .unwrap()
            .with_burst(burst)
            .unwrap();
        let what = format!("GCRA {rate}/s, burst {burst}");
        let limiter = RateLimiter::new(store.clone(), format!("gcra-{rate}"), quota);
        let mut run = drive(&what, limiter).await;
        run.grants.sort_by_key(|grant| grant.ticket);
        // Each ticket is the end of the grant's slot of GCRA's line, in
        // quarters of a µs of server time: every grant held a slot of its
        // own, at least an interval long.
        let interval_quarters = 4_000_000 / u64::from(rate);
        let tickets = tickets(&run);
        let shared = tickets
            .windows(2)
            .find(|pair| pair[1] - pair[0] < interval_quarters);
        assert!(shared.is_none(), "{what}: slots overlap: {shared:?}");
        check_gcra(&what, &run.grants, rate, burst);
        if saturable {
            let (first, last) = (&run.grants[0], &run.grants[run.grants.len() - 1]);
            let span = last.after - first.before;
            let possible = (f64::from(rate) * span.as_secs_f64()) as u64 + u64::from(burst);
            assert_saturated(&what, run.grants.len() as u64, possible);
        }
    })
    .await;
}

/// Grants in ticket order: `k` and `k + n` are at least `(n + 1 - B) T`
/// apart on the server, so their local spans must allow it (see the
/// module docs), for every `n` up to a window's worth of grants.
fn check_gcra(what: &str, grants: &[Grant], rate: u32, burst: u32) {
    let interval = Duration::from_secs(1) / rate;
    let lags = (per_window(rate, WINDOW) + burst) as usize;
    for lag in burst as usize..=lags {
        let least = interval * (lag as u32 + 1 - burst);
        for (first, last) in grants.iter().zip(&grants[lag..]) {
            let most = last.after.saturating_duration_since(first.before);
            assert!(
                most >= least,
                "{what}: grants {} and {} within {most:?}, GCRA allows no less than {least:?}",
                first.ticket,
                last.ticket
            );
        }
    }
}
