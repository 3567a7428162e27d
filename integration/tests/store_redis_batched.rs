//! Four OS processes share one rate of 1,500,000 a second through Redis
//! with a `BatchedLimiter` (batches of 20,000): together they admit more
//! than a million calls a second, and never more than the store leased,
//! which never exceeds the rate over the run (plus the burst).
//!
//! The test binary re-runs itself as the workers: `batched_worker` does
//! nothing unless it was spawned as one.
#![cfg(feature = "redis")]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use tower_limits::limiter::Admission;
use tower_limits::store::RedisStore;
use tower_limits::{BatchedLimiter, Limiter, Rate};

/// Set (to the key prefix) in a spawned worker's environment.
const PREFIX_VAR: &str = "TOWER_LIMITS_BATCHED_PREFIX";
const PROCESSES: usize = 4;
const RATE: u32 = 1_500_000;
const BATCH: u32 = 20_000;
const BURST: u32 = 4 * BATCH;
/// How long each worker calls.
const RUN: Duration = Duration::from_secs(2);

fn unix_micros() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_micros()).unwrap()
}

/// Calls `try_acquire` as fast as it answers until `until`; the grants.
async fn call_until(limiter: BatchedLimiter<RedisStore>, until: Instant) -> u64 {
    let mut granted = 0;
    while Instant::now() < until {
        for _ in 0..1_024 {
            let answer = match limiter.try_acquire().into_ready() {
                Ok(answer) => answer,
                Err(pending) => pending.await,
            };
            match answer.expect("Redis answers") {
                Admission::Granted(_) => granted += 1,
                Admission::Denied(denial) => denial.wait().await,
            }
        }
    }
    granted
}

/// One worker: two tasks calling through one limiter; prints what it saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_worker() {
    let (Ok(prefix), Ok(url)) = (std::env::var(PREFIX_VAR), std::env::var("REDIS_URL")) else {
        return; // only a worker when spawned by the test below
    };
    let store = RedisStore::builder(url)
        .prefix(prefix)
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let limiter = BatchedLimiter::builder(store, "fleet", Rate::per_second(RATE).unwrap())
        .batch(BATCH)
        .burst(BURST)
        .build()
        .unwrap();
    let started = unix_micros();
    let until = Instant::now() + RUN;
    let tasks: Vec<_> = (0..2)
        .map(|_| tokio::spawn(call_until(limiter.clone(), until)))
        .collect();
    let mut granted = 0;
    for task in tasks {
        granted += task.await.unwrap();
    }
    let ended = unix_micros();
    println!("RESULT {granted} {} {started} {ended}", limiter.leased());
}

#[test]
fn four_processes_admit_a_million_a_second_within_the_rate() {
    if std::env::var(PREFIX_VAR).is_ok() || common::redis::url("the batched fleet test").is_none() {
        return;
    }
    let prefix = format!("{}:", common::conformance::unique("batched"));
    let workers: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "batched_worker",
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
    let (mut granted, mut leased, mut first, mut last) = (0, 0, u64::MAX, 0);
    for worker in workers {
        let output = worker.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "a worker failed:\n{stdout}");
        let line = stdout
            .lines()
            .find_map(|line| line.split_once("RESULT "))
            .unwrap()
            .1;
        let numbers: Vec<u64> = line.split(' ').map(|n| n.parse().unwrap()).collect();
        println!("worker: {} admitted, {} leased", numbers[0], numbers[1]);
        granted += numbers[0];
        leased += numbers[1];
        first = first.min(numbers[2]);
        last = last.max(numbers[3]);
    }
    let seconds = (last - first) as f64 / 1e6;
    let allowed = (RATE as f64 * seconds) as u64 + u64::from(BURST);
    println!(
        "{granted} admitted ({:.0} a second over {seconds:.2} s), {leased} leased, at most {allowed} allowed",
        granted as f64 / seconds
    );
    assert!(granted <= leased, "admitted more than leased");
    assert!(
        leased <= allowed,
        "the store leased {leased}, more than the rate allows"
    );
    assert!(
        granted as f64 >= 1_000_000.0 * RUN.as_secs_f64(),
        "{granted} in {:?}: under a million a second",
        RUN
    );
}
