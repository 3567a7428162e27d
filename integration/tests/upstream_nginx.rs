//! Clients that know the limit against a real rate-limiting proxy: nginx's
//! `limit_req` on loopback (see `common::nginx`), driven by 50 callers
//! through a `LimitLayer` around a hyper-util client. What counts is what
//! nginx logged: the requests it served (200) and refused (429).
//!
//! The clients that do not know the limit (`AdaptiveRateLimiter`) are
//! measured against nginx and the other kinds of upstream in
//! `adaptive_upstreams.rs`.
//!
//! These run on real time, 10 s each: they measure pacing through a real
//! server.

mod common;

use std::time::Duration;

use common::drive::{CALLERS, Driver};
use common::nginx::{Limit, Nginx, unix_now};
use tower_limits::RateLimiter;
use tower_limits::http::FeedbackLayer;
use tower_limits::store::Quota;

/// One test at a time: each measures pacing in real time, and another
/// test's nginx and callers on the same two cores would be part of what it
/// measures.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A client that knows the limit, paced by a GCRA with a burst of 2 (which
/// absorbs late timer wake-ups) against nginx at the same rate: nothing
/// refused, and (see below) most of the limit. nginx allows a burst
/// of 2 beyond the first, one more than the client's: requests decided
/// apart can reach it closer together, delayed in the loopback stack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_limit_is_saturated_without_refusals() {
    saturates_a_known_limit(50, 2).await;
}

/// The same with GCRA's default burst of 1 at 20 a second: every call
/// waits for its slot on tokio's millisecond timer, and the pacing
/// tolerance keeps a late wake-up from costing the rate its slot (without
/// it: 19.5 a second, 97.6%). At most 21 calls in any second (the limit
/// and one slot of the 2 ms tolerance), which nginx's burst of 2 admits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_client_saturates_20_a_second_without_refusals() {
    saturates_a_known_limit(20, 1).await;
}

/// [`CALLERS`] callers paced by a GCRA of `rate` a second and `burst`
/// against nginx at `rate` a second with a burst of 2 (`nodelay`): nothing
/// refused, and at least 85% of the limit over 10 s. On a quiet machine it
/// is 99-100% (the run prints it); a busy one wakes callers later than the
/// pacing tolerance, and a slot nobody took in time is not given again
/// (88% with four CPU-bound processes beside the test on two cores).
async fn saturates_a_known_limit(rate: u32, burst: u32) {
    let _alone = SERIAL.lock().await;
    let Some(nginx) = Nginx::start(Limit {
        rate,
        burst: 2,
        nodelay: true,
        retry_after: 1,
    }) else {
        return;
    };
    let gcra = RateLimiter::in_memory(
        Quota::gcra(rate, Duration::from_secs(1))
            .unwrap()
            .with_burst(burst)
            .unwrap()
            .with_pacing_tolerance()
            .unwrap(),
    );
    let driver = Driver::through(
        &nginx.url(),
        CALLERS,
        FeedbackLayer::new(gcra.clone()),
        gcra,
    );
    let start = unix_now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let end = unix_now();
    let (_, failed) = driver.stop().await;
    assert_eq!(
        failed,
        Vec::<String>::new(),
        "requests that ended in an error"
    );
    let log = nginx.log();
    let window = log
        .iter()
        .filter(|entry| entry.at >= start && entry.at < end);
    let served = window.clone().filter(|entry| entry.status == 200).count();
    let refused = window.filter(|entry| entry.status == 429).count();
    let per_second = served as f64 / (end - start);
    let share = per_second / f64::from(rate);
    println!(
        "GCRA {rate}/s, burst {burst}, against nginx {rate}/s, burst 2: \
         served {served}, refused {refused}, {per_second:.1}/s, {:.1}%",
        share * 100.0
    );
    assert_eq!(refused, 0, "over-admissions");
    assert!(share >= 0.85, "{per_second:.1}/s of {rate}");
}
