//! Four OS processes share one limit through Redis: every admission is
//! recorded (by its ticket, which the server stamps on its own clock), and
//! the combined admissions never exceed the limit in any window, yet reach
//! at least 95% of it under saturation (the harness is
//! `common/processes.rs`).
//!
//! The test binary re-runs itself as the workers: `worker_process` does
//! nothing unless it was spawned as one.
#![cfg(feature = "redis")]

mod common;

use std::time::Duration;

use tower_limits::store::RedisStore;

/// One worker process: a sliding log and a fixed window, both saturated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_process() {
    let (Some(prefix), Ok(url)) = (
        common::processes::worker_prefix(),
        std::env::var("REDIS_URL"),
    ) else {
        return; // only a worker when spawned by `four_processes_share_one_limit`
    };
    let store = RedisStore::builder(url)
        .prefix(prefix)
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    common::processes::saturate(store).await;
}

#[test]
fn four_processes_share_one_limit() {
    if common::redis::url("the cross-process test").is_none() {
        return;
    }
    let prefix = format!("{}:", common::conformance::unique("processes"));
    common::processes::run_and_check("worker_process", &prefix);
}
