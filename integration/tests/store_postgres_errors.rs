//! PostgreSQL failures become typed store errors, never panics or hangs:
//! an unreachable or silent server, a schema never set up, a decision
//! stuck behind a lock, functions that answer garbage. And `cleanup`
//! deletes the rows that no longer say anything.
#![cfg(feature = "postgres")]

mod common;

use std::net::TcpListener;
use std::time::Duration;

use tokio::time::Instant;
use tower_limits::error::LimiterError;
use tower_limits::store::{
    LeaseStore, PostgresStore, Quota, QuotaStore, StoreError, StoreErrorKind,
};

use common::conformance::unique;

/// The store error inside `error`.
fn store_error(error: &LimiterError) -> &StoreError {
    error.get_ref().downcast_ref().expect("a store error")
}

/// A client on the shared database, for arranging what the store sees.
async fn client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// A store in a schema of its own (dropped by [`drop_schema`]).
async fn private_store(url: &str, timeout: Duration) -> (PostgresStore, String) {
    // Upper case and a quote: the store quotes the schema everywhere.
    let schema = unique("Err'ors").replace('-', "_");
    let store = PostgresStore::builder(url)
        .schema(schema.clone())
        .timeout(timeout)
        .connect()
        .await
        .unwrap();
    (store, schema)
}

async fn drop_schema(url: &str, schema: &str) {
    let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
    client(url).await.batch_execute(&sql).await.unwrap();
}

#[tokio::test]
async fn unreachable_server_is_unavailable() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/test");
    let error = PostgresStore::connect(&url).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");
}

#[tokio::test]
async fn silent_server_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/test");
    let started = Instant::now();
    let connecting = PostgresStore::builder(url)
        .timeout(Duration::from_millis(100))
        .connect();
    let error = connecting.await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Timeout, "{error}");
    assert!(started.elapsed() < Duration::from_secs(3));
    drop(listener);
}

#[tokio::test]
async fn bad_connection_string_is_refused() {
    let error = PostgresStore::connect("postgres://[::1").await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Refused, "{error}");
    assert!(error.to_string().contains("connection string"), "{error}");
}

#[tokio::test]
async fn missing_schema_says_run_setup() {
    let Some(url) = common::postgres::url("the missing schema test") else {
        return;
    };
    let (store, _) = private_store(&url, Duration::from_secs(2)).await;
    let quota = Quota::fixed_window(3, Duration::from_secs(1)).unwrap();
    let error = store
        .decide(&store.quota_key("a"), &quota, 1)
        .await
        .unwrap_err();
    let error = store_error(&error);
    assert_eq!(error.kind(), StoreErrorKind::Refused, "{error}");
    assert!(error.to_string().contains("setup()"), "{error}");
}

/// A decision stuck behind another session's lock on its key gives up
/// after the timeout, and the server cancels it too.
#[tokio::test]
async fn stuck_decision_times_out() {
    let Some(url) = common::postgres::url("the stuck decision test") else {
        return;
    };
    let store = common::postgres::connect(&url, String::new()).await;
    let store = PostgresStore::builder(url.clone())
        .schema(store.schema())
        .timeout(Duration::from_millis(100))
        .connect()
        .await
        .unwrap();
    let name = unique("stuck");
    let mut holder = client(&url).await;
    let holding = holder.transaction().await.unwrap();
    let lock = "SELECT pg_advisory_xact_lock(hashtextextended('leases:' || $1, 7230))";
    holding.execute(lock, &[&name]).await.unwrap();
    let started = Instant::now();
    let error = store
        .leases_held(&store.lease_key(&name))
        .await
        .unwrap_err();
    assert_eq!(
        store_error(&error).kind(),
        StoreErrorKind::Timeout,
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    holding.rollback().await.unwrap();
    assert_eq!(store.leases_held(&store.lease_key(&name)).await.unwrap(), 0);
}

/// Functions replaced with ones that answer garbage: a bad-reply error
/// each time, no panic.
#[tokio::test]
async fn garbage_replies_are_bad_replies() {
    let Some(url) = common::postgres::url("the garbage reply test") else {
        return;
    };
    let (store, schema) = private_store(&url, Duration::from_secs(2)).await;
    store.setup().await.unwrap();
    let quota = Quota::gcra(10, Duration::from_secs(1)).unwrap();
    let key = store.quota_key("garbage");
    for garbage in [
        "ARRAY[1, NULL]",
        "ARRAY[]::bigint[]",
        "ARRAY[0, -5]",
        "ARRAY[7, 1]",
        "NULL",
    ] {
        let sql = format!(
            "CREATE OR REPLACE FUNCTION \"{schema}\".cells(op text, k text, tick float8, burst bigint, args bigint[]) \
             RETURNS bigint[] LANGUAGE sql AS $$ SELECT {garbage}::bigint[] $$"
        );
        client(&url).await.batch_execute(&sql).await.unwrap();
        let error = store.decide(&key, &quota, 1).await.unwrap_err();
        assert_eq!(
            store_error(&error).kind(),
            StoreErrorKind::BadReply,
            "{garbage}: {error}"
        );
    }
    drop_schema(&url, &schema).await;
}

#[tokio::test]
async fn cleanup_deletes_dead_rows_only() {
    let Some(url) = common::postgres::url("the cleanup test") else {
        return;
    };
    let (store, schema) = private_store(&url, Duration::from_secs(2)).await;
    store.setup().await.unwrap();
    // A table of the application's in the same schema, with an `expires`
    // column of its own: cleanup never touches it.
    let theirs = format!(
        "CREATE TABLE \"{schema}\".sessions (id int, expires bigint); \
         INSERT INTO \"{schema}\".sessions VALUES (1, 0)"
    );
    client(&url).await.batch_execute(&theirs).await.unwrap();
    let short = store.lease_key("short");
    let long = store.lease_key("long");
    store
        .lease(&short, 5, Duration::from_millis(10), 1, 3)
        .await
        .unwrap();
    store
        .lease(&long, 5, Duration::from_secs(60), 1, 2)
        .await
        .unwrap();
    let log = Quota::sliding_log(5, Duration::from_millis(10)).unwrap();
    store
        .decide(&store.quota_key("log"), &log, 2)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    // 3 short leases and 2 starts; the sliding state lives a second longer.
    assert_eq!(store.cleanup().await.unwrap(), 5);
    assert_eq!(store.cleanup().await.unwrap(), 0);
    assert_eq!(store.leases_held(&long).await.unwrap(), 2);
    // Every other algorithm's row, a second after its window: one each,
    // and the log's sliding state.
    let window = Duration::from_millis(10);
    let quotas = [
        Quota::gcra(100, window).unwrap(),
        Quota::fixed_window(5, window).unwrap(),
        Quota::sliding_window_counter(5, window).unwrap(),
    ];
    for (index, quota) in quotas.iter().enumerate() {
        let key = store.quota_key(&format!("quota-{index}"));
        store.decide(&key, quota, 1).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(store.cleanup().await.unwrap(), 4);
    assert_eq!(store.leases_held(&long).await.unwrap(), 2);
    let count = format!("SELECT count(*) FROM \"{schema}\".sessions");
    let row = client(&url).await.query_one(&count, &[]).await.unwrap();
    assert_eq!(
        row.get::<_, i64>(0),
        1,
        "cleanup deleted an application's row"
    );
    drop_schema(&url, &schema).await;
}
