//! Four OS processes share one limit through one SQLite file: every
//! admission is recorded (by its ticket, which the store stamps on the
//! machine's clock inside the write lock), and the combined admissions never
//! exceed the limit in any window, yet reach at least 95% of it under
//! saturation (the harness is `common/processes.rs`).
//!
//! The test binary re-runs itself as the workers; the workers' "prefix" is
//! the database file. `worker_process` does nothing unless it was spawned
//! as one.
#![cfg(feature = "sqlite")]

mod common;

use std::time::Duration;

use tower_limits::store::SqliteStore;

/// One worker process: a sliding log and a fixed window, both saturated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_process() {
    let Some(path) = common::processes::worker_prefix() else {
        return; // only a worker when spawned by `four_processes_share_one_limit`
    };
    let store = SqliteStore::builder(path)
        .timeout(Duration::from_secs(2))
        .open()
        .await
        .unwrap();
    common::processes::saturate(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_share_one_limit() {
    let db = common::sqlite::TempDb::new();
    // Creates the file, its tables and WAL mode before the workers start.
    drop(db.store().await);
    let path = db
        .path()
        .to_str()
        .expect("a UTF-8 temporary path")
        .to_owned();
    tokio::task::spawn_blocking(move || {
        common::processes::run_and_check("worker_process", &path);
    })
    .await
    .unwrap();
}
