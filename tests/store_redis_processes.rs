//! Four OS processes share one limit through Redis: every admission is
//! recorded (by its ticket, which the server stamps on its own clock), and
//! the combined admissions never exceed the limit in any window, yet reach
//! at least 95% of it under saturation.
//!
//! The test binary re-runs itself as the workers: `worker_process` does
//! nothing unless `TOWER_LIMITS_WORKER_PREFIX` is set.
#![cfg(feature = "redis")]

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;
use tower_limits::store::{Quota, RedisStore};
use tower_limits::{Limiter, LimiterExt, RateLimiter, SharedLimiter};

const PREFIX_VAR: &str = "TOWER_LIMITS_WORKER_PREFIX";
const PROCESSES: usize = 4;
const TASKS: usize = 8;
const LIMIT: u32 = 40;
const WINDOW: Duration = Duration::from_millis(500);
const RUN: Duration = Duration::from_millis(3_000);

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

/// One worker process: a sliding log and a fixed window, both saturated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_process() {
    let (Ok(prefix), Ok(url)) = (std::env::var(PREFIX_VAR), std::env::var("REDIS_URL")) else {
        return; // only a worker when spawned by `four_processes_share_one_limit`
    };
    let store = RedisStore::builder(url)
        .prefix(prefix)
        .timeout(Duration::from_secs(2));
    let store = store.connect().await.unwrap();
    let log = RateLimiter::builder("log", LIMIT as usize, WINDOW)
        .without_backoff()
        .store(store.clone())
        .build()
        .unwrap();
    let fixed = SharedLimiter::new(store, "fixed", Quota::fixed_window(LIMIT, WINDOW).unwrap());
    let until = Instant::now() + RUN;
    let (log, fixed) = tokio::join!(admissions(log, until), admissions(fixed, until));
    for ticket in log {
        println!("ADMIT log {ticket}");
    }
    for ticket in fixed {
        println!("ADMIT fixed {ticket}");
    }
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
/// starts within one window, and `LIMIT` per window over the run.
fn check_sliding_log(mut starts: Vec<u64>) {
    starts.sort_unstable();
    let window = WINDOW.as_micros() as u64;
    for (first, last) in starts.iter().zip(starts.iter().skip(LIMIT as usize)) {
        assert!(
            last - first >= window,
            "{} starts within {}µs",
            LIMIT + 1,
            last - first
        );
    }
    let span = starts.last().unwrap() - starts[0];
    let windows = span / window;
    let counted = starts
        .iter()
        .filter(|&&s| s < starts[0] + windows * window)
        .count();
    let expected = (windows * u64::from(LIMIT)) as f64;
    println!("sliding log: {counted} starts in {windows} windows ({expected} possible)");
    assert!(
        counted as f64 >= 0.95 * expected,
        "saturation: {counted} of {expected}"
    );
}

/// Fixed window tickets are window indexes: at most `LIMIT` each, and the
/// full windows (not the first or last) filled to at least 95%.
fn check_fixed_window(indexes: Vec<u64>) {
    let mut per_window: BTreeMap<u64, u32> = BTreeMap::new();
    for index in indexes {
        *per_window.entry(index).or_default() += 1;
    }
    assert!(
        per_window.values().all(|&count| count <= LIMIT),
        "{per_window:?}"
    );
    let counts: Vec<u32> = per_window.values().copied().collect();
    let inner = &counts[1..counts.len() - 1];
    println!("fixed window: {counts:?}");
    assert!(!inner.is_empty());
    let filled: u32 = inner.iter().sum();
    let possible = LIMIT as usize * inner.len();
    assert!(
        filled as f64 >= 0.95 * possible as f64,
        "saturation: {filled} of {possible}"
    );
}

#[test]
fn four_processes_share_one_limit() {
    let Some(_url) = common::redis::url("the cross-process test") else {
        return;
    };
    if std::env::var(PREFIX_VAR).is_ok() {
        return; // a worker does not spawn workers
    }
    let prefix = format!("{}:", common::conformance::unique("processes"));
    let workers: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "worker_process",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(PREFIX_VAR, &prefix)
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
    check_sliding_log(tickets.remove("log").expect("sliding log admissions"));
    check_fixed_window(tickets.remove("fixed").expect("fixed window admissions"));
}
