//! What only the SQLite store has to prove, beyond the conformance suite:
//! separate connection pools (as separate processes have) decide on one
//! file atomically; a database locked by someone else is a timeout, not a
//! hung caller; rows that are not limiter state are a typed error, not a
//! panic; a missing directory is an outage; cancelled calls never let the
//! limit be exceeded; and the sweep deletes expired state.
#![cfg(feature = "sqlite")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::sqlite::TempDb;
use tokio::time::Instant;
use tower_limits::error::LimiterError;
use tower_limits::store::{
    LeaseStore, Quota, QuotaStore, SqliteStore, StoreError, StoreErrorKind, WindowDecision,
};
use tower_limits::{Limiter, RateLimiter};

fn kind(error: &LimiterError) -> StoreErrorKind {
    error
        .get_ref()
        .downcast_ref::<StoreError>()
        .unwrap_or_else(|| panic!("a store error, got {error}"))
        .kind()
}

fn is_granted(decision: WindowDecision) -> bool {
    matches!(decision, WindowDecision::Granted { .. })
}

/// Two stores on one file, each with its own pool and its own in-process
/// writer queue, as two processes would have: 40 concurrent decisions on a
/// quota of 3 grant exactly 3, whatever the algorithm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_pools_decide_atomically() {
    let db = TempDb::new();
    let stores = [db.open(secs(10)).await, db.open(secs(10)).await];
    let before = common::conformance::day();
    for (what, quota) in common::conformance::count_quotas(3) {
        let quota = Arc::new(quota);
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let (store, quota) = (stores[i % 2].clone(), Arc::clone(&quota));
                tokio::spawn(async move {
                    let key = store.quota_key(what);
                    store.decide(&key, &quota, 1).await.unwrap()
                })
            })
            .collect();
        let mut grants = 0;
        for task in tasks {
            grants += usize::from(is_granted(task.await.unwrap()));
        }
        // Nothing refills in the test's seconds, unless a day window rolled.
        let rolled = common::conformance::day() != before;
        assert!(grants == 3 || rolled, "{what}: {grants} of 3");
    }
}

/// Another connection holds the write lock: a decision gives up with a
/// timeout error after the configured timeout, and succeeds once the lock
/// is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locked_database_is_a_timeout() {
    let db = TempDb::new();
    let store = db.open(Duration::from_millis(100)).await;
    let quota = Quota::gcra(10, secs(1)).unwrap().with_burst(2).unwrap();
    let key = store.quota_key("locked");

    let holder = db.connection();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let start = Instant::now();
    let error = store.decide(&key, &quota, 1).await.unwrap_err();
    let waited = start.elapsed();
    assert_eq!(kind(&error), StoreErrorKind::Timeout, "{error}");
    assert!(
        waited >= Duration::from_millis(90) && waited < secs(1),
        "gave up after {waited:?}"
    );
    assert!(error.to_string().contains("timed out"), "{error}");

    holder.execute_batch("ROLLBACK").unwrap();
    // The call that timed out stops trying at its deadline; a last try
    // right then may still win the lock and take one of the two units.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(is_granted(store.decide(&key, &quota, 1).await.unwrap()));
}

/// Rows that are not limiter state (text where a number belongs) give a
/// bad-reply error naming the cure; absurd numbers give answers, not
/// panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rows_are_typed_errors() {
    let db = TempDb::new();
    let store = db.store().await.unwrap();
    let tamper = db.connection();
    tamper
        .execute_batch(
            "INSERT INTO tower_limits_cells (name, tat, next_available, expires)
                 VALUES ('text', 'soon', 0, 9e18);
             INSERT INTO tower_limits_cells VALUES ('gaps', 0, 0, 0, 0, x'0102ff', 9e18);
             INSERT INTO tower_limits_backoffs VALUES ('text', 'x', NULL, 0, 0, NULL, 9e18);
             INSERT INTO tower_limits_fixed_windows VALUES
                 ('huge', 9223372036854775807, -9223372036854775808, -1, 9e18);
             INSERT INTO tower_limits_sliding_windows VALUES
                 ('huge', -9223372036854775808, 9223372036854775807,
                  -9223372036854775808, 9223372036854775807, 9e18);",
        )
        .unwrap();

    let gcra = Quota::gcra(10, secs(1)).unwrap();
    let error = store
        .decide(&store.quota_key("text"), &gcra, 1)
        .await
        .unwrap_err();
    assert_eq!(kind(&error), StoreErrorKind::BadReply, "{error}");
    assert!(error.to_string().contains("Clear the limit"), "{error}");
    // Gaps that are not gaps are read as none: nothing given back.
    let key = store.quota_key("gaps");
    assert!(is_granted(store.decide(&key, &gcra, 1).await.unwrap()));
    let limiter = RateLimiter::builder("text", 3, secs(1))
        .store(store.clone())
        .build()
        .unwrap();
    let error = limiter.next_available_time().await.unwrap_err();
    assert_eq!(kind(&error), StoreErrorKind::BadReply, "{error}");

    for quota in [
        Quota::fixed_window(3, secs(1)).unwrap(),
        Quota::sliding_window_counter(3, secs(1)).unwrap(),
    ] {
        let key = store.quota_key("huge");
        store.decide(&key, &quota, 1).await.unwrap();
        store
            .adjust(&key, &quota, u64::MAX, u32::MAX, 0)
            .await
            .unwrap();
        store.look(&key, &quota, 3).await.unwrap();
    }
}

/// A file that cannot be created is an outage, reported at once.
#[tokio::test]
async fn missing_directory_is_unavailable() {
    let db = TempDb::new();
    let path = db.path().join("no-such-directory").join("limits.db");
    let error = SqliteStore::builder(&path)
        .timeout(Duration::from_millis(100))
        .open()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");
    assert!(error.to_string().contains("directory exists"), "{error}");
}

/// Calls cancelled at every point (timeouts from 0 to 2 ms) never let more
/// than the limit through: the grants callers saw, plus the grants still
/// possible afterwards, are at most the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_calls_never_exceed_the_limit() {
    let db = TempDb::new();
    let store = db.store().await.unwrap();
    let quota = Quota::fixed_window(5, Duration::from_secs(3600)).unwrap();
    let key = Arc::new(store.quota_key("cancelled"));
    let tasks: Vec<_> = (0..60u64)
        .map(|i| {
            let (store, key) = (store.clone(), Arc::clone(&key));
            tokio::spawn(async move {
                let patience = Duration::from_micros(i * 37 % 2_000);
                let decided = tokio::time::timeout(patience, store.decide(&key, &quota, 1)).await;
                matches!(decided, Ok(Ok(WindowDecision::Granted { .. })))
            })
        })
        .collect();
    let mut seen = 0;
    for task in tasks {
        seen += usize::from(task.await.unwrap());
    }
    let mut later = 0;
    while is_granted(store.decide(&key, &quota, 1).await.unwrap()) {
        later += 1;
    }
    assert!(seen + later <= 5, "{seen} seen + {later} later");
}

/// Expired leases, starts out of their window and state of windows past
/// are deleted by the sweep; live state is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_deletes_expired_state() {
    let db = TempDb::new();
    let store = db.store().await.unwrap();
    let short = Duration::from_millis(20);
    let leases = store.lease_key("gpu");
    store.lease(&leases, 4, short, 1, 2).await.unwrap();
    store.lease(&leases, 4, secs(60), 10, 1).await.unwrap();
    let log = RateLimiter::builder("log", 5, short)
        .without_backoff()
        .store(store.clone())
        .build()
        .unwrap();
    log.record_start().await.unwrap();

    tokio::time::sleep(short * 2).await;
    // Two expired leases and one start out of its window.
    assert_eq!(store.sweep().await.unwrap(), 3);
    assert_eq!(store.leases_held(&leases).await.unwrap(), 1);
    let rows = |table: &str| -> i64 {
        db.connection()
            .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
                row.get(0)
            })
            .unwrap()
    };
    assert_eq!(rows("tower_limits_leases"), 1);
    assert_eq!(rows("tower_limits_starts"), 0);
    assert_eq!(store.sweep().await.unwrap(), 0);
}

/// `setup` is idempotent, and a store reopened on the file finds the state
/// another left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopened_store_keeps_state() {
    let db = TempDb::new();
    let first = db.store().await.unwrap();
    first.setup().await.unwrap();
    first.setup().await.unwrap();
    let quota = Quota::gcra(1, secs(60)).unwrap();
    assert!(is_granted(
        first
            .decide(&first.quota_key("api"), &quota, 1)
            .await
            .unwrap()
    ));
    drop(first);
    let again = db.store().await.unwrap();
    again.setup().await.unwrap();
    let retry_at = again
        .look(&again.quota_key("api"), &quota, 1)
        .await
        .unwrap();
    assert!(retry_at.is_some_and(|at| at > Instant::now() + secs(50)));
}

fn secs(secs: u64) -> Duration {
    common::secs(secs)
}

/// A file written by an earlier version, whose cells kept a generation
/// instead of slots, is brought up to date when a store opens it: its
/// limits go on deciding, and give grants back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cells_table_of_an_earlier_version_is_brought_up_to_date() {
    let db = TempDb::new();
    db.connection()
        .execute_batch(
            "CREATE TABLE tower_limits_cells (
                 name TEXT PRIMARY KEY,
                 tat INTEGER NOT NULL,
                 next_available INTEGER NOT NULL,
                 generation INTEGER NOT NULL,
                 expires INTEGER NOT NULL
             ) WITHOUT ROWID;
             INSERT INTO tower_limits_cells VALUES ('old', 0, 0, 7, 9e18);",
        )
        .unwrap();
    let store = db.store().await.unwrap();
    let quota = Quota::gcra(1, secs(3_600)).unwrap().with_burst(2).unwrap();
    let key = store.quota_key("old");
    let WindowDecision::Granted { ticket } = store.decide(&key, &quota, 1).await.unwrap() else {
        panic!("a full bucket denied");
    };
    assert!(is_granted(store.decide(&key, &quota, 1).await.unwrap()));
    assert!(
        store
            .adjust(&key, &quota, ticket, 1, 0)
            .await
            .unwrap()
            .is_some()
    );
    assert!(is_granted(store.decide(&key, &quota, 1).await.unwrap()));
    assert!(!is_granted(store.decide(&key, &quota, 1).await.unwrap()));
}
