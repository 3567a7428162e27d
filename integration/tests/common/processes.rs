//! Several OS processes sharing one limit through a store: the harness
//! behind every `tests/store_*_processes.rs`.
//!
//! A test binary re-runs itself as the workers. Its worker test calls
//! [`worker_prefix`] (which is `None` unless the binary was spawned as a
//! worker) and then [`saturate`] with a store under that prefix; its parent
//! test calls [`run_and_check`]. Each worker saturates a sliding log and a
//! fixed window and prints every admission's ticket (a ticket the store
//! stamps on its own clock); the parent checks that the combined admissions
//! never exceed the limit in any window, yet reach at least 95% of it.
//!
//! ```ignore
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! async fn worker_process() {
//!     let Some(prefix) = common::processes::worker_prefix() else { return };
//!     common::processes::saturate(make_store(prefix).await).await;
//! }
//!
//! #[test]
//! fn four_processes_share_one_limit() {
//!     common::processes::run_and_check("worker_process", &common::conformance::unique("p"));
//! }
//! ```

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;
use tower_limits::store::{Quota, QuotaStore};
use tower_limits::{Limiter, LimiterExt, RateLimiter};

use super::tickets;

/// Set (to the key prefix) in the environment of a spawned worker.
const PREFIX_VAR: &str = "TOWER_LIMITS_WORKER_PREFIX";
/// How many worker processes share the limit.
pub(crate) const PROCESSES: usize = 4;
/// Tasks per limiter in each worker.
const TASKS: usize = 8;
/// Admissions per window.
pub(crate) const LIMIT: u32 = 40;
/// The window of both limiters.
pub(crate) const WINDOW: Duration = Duration::from_millis(500);
/// How long each worker saturates its limiters.
const RUN: Duration = Duration::from_millis(3_000);

/// The key prefix to use if this process is a spawned worker, else `None`.
pub(crate) fn worker_prefix() -> Option<String> {
    std::env::var(PREFIX_VAR).ok()
}

/// Acquires from `limiter` with `TASKS` tasks until `until`; the tickets.
async fn admissions<L: Limiter + Clone>(limiter: L, until: Instant) -> Vec<u64> {
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut tickets = Vec::new();
                while let Ok(Ok(permit)) = tokio::time::timeout_at(until, limiter.acquire()).await {
                    tickets.extend(permit.token());
                }
                tickets
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

/// The worker's body: saturates a sliding log ("log") and a fixed window
/// ("fixed") on `store` for a few seconds and prints each admission's
/// ticket as `ADMIT <limiter> <ticket>`.
pub(crate) async fn saturate<S>(store: S)
where
    S: QuotaStore + Clone,
{
    let log = RateLimiter::builder("log", LIMIT, WINDOW)
        .without_backoff()
        .store(store.clone())
        .build()
        .unwrap();
    let fixed = RateLimiter::new(store, "fixed", Quota::fixed_window(LIMIT, WINDOW).unwrap());
    let until = Instant::now() + RUN;
    let (log, fixed) = tokio::join!(admissions(log, until), admissions(fixed, until));
    for ticket in log {
        println!("ADMIT log {ticket}");
    }
    for ticket in fixed {
        println!("ADMIT fixed {ticket}");
    }
}

/// Spawns [`PROCESSES`] copies of this test binary running the test
/// `worker` with keys under `prefix`, waits for them, and checks their
/// combined admissions. Does nothing inside a worker.
pub(crate) fn run_and_check(worker: &str, prefix: &str) {
    if worker_prefix().is_some() {
        return; // a worker does not spawn workers
    }
    let workers: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args([worker, "--exact", "--nocapture", "--test-threads=1"])
                .env(PREFIX_VAR, prefix)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<String> = workers
        .into_iter()
        .map(|worker| {
            let output = worker.wait_with_output().unwrap();
            assert!(output.status.success(), "a worker failed");
            String::from_utf8(output.stdout).unwrap()
        })
        .collect();
    let mut tickets = parse(&outputs);
    for (limiter, admitted) in &tickets {
        println!("{limiter}: {} admissions", admitted.len());
    }
    check_sliding_log(&tickets.remove("log").expect("sliding log admissions"));
    check_fixed_window(&tickets.remove("fixed").expect("fixed window admissions"));
}

/// The tickets the workers printed, by limiter.
fn parse(outputs: &[String]) -> BTreeMap<String, Vec<u64>> {
    let mut tickets: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in outputs.iter().flat_map(|output| output.lines()) {
        let mut words = line.split_whitespace();
        if let (Some("ADMIT"), Some(limiter), Some(ticket)) =
            (words.next(), words.next(), words.next())
        {
            tickets
                .entry(limiter.to_owned())
                .or_default()
                .push(ticket.parse().unwrap());
        }
    }
    tickets
}

/// Sliding log tickets are the server's start times (µs): no `LIMIT + 1`
/// starts within one window, and close to `LIMIT` per window over the run.
///
/// A sliding log reuses a slot one window after its start plus the time the
/// waiting worker takes to wake and ask the server again, so its starts drift
/// later window after window (94% of the possible starts were seen on a
/// loaded machine): the run may lose up to one window's worth.
fn check_sliding_log(starts: &[u64]) {
    let (counted, possible) = tickets::sliding_log_fill(starts, LIMIT, WINDOW);
    println!("sliding log: {counted} starts in whole windows ({possible} possible)");
    assert!(possible > 0, "sliding log: no whole window to measure");
    assert!(
        counted + u64::from(LIMIT) >= possible,
        "sliding log saturation: {counted} of {possible}, more than one window lost"
    );
}

/// Fixed window tickets are window indexes: at most `LIMIT` each, and the
/// full windows (not the first or last) filled to at least 95%.
fn check_fixed_window(indexes: &[u64]) {
    let counts = tickets::fixed_window_counts(indexes, LIMIT);
    println!("fixed window: {counts:?}");
    let (filled, possible) = tickets::inner_fill(&counts, LIMIT);
    tickets::assert_saturated("fixed window", filled, possible);
}
