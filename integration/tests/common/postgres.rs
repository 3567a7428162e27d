//! PostgreSQL for the tests: the shared database named by `DATABASE_URL`.

use std::time::Duration;

use tower_limits::store::{PostgresStore, QuotaStore};

use super::conformance::unique;

/// The schema every test shares (keys are unique per test).
const SCHEMA: &str = "tower_limits_test";

/// The URL of the shared database, or `None` after saying (see
/// [`skip`](super::skip)) that the test `what` is skipped.
pub(crate) fn url(what: &str) -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            super::skip(
                what,
                "DATABASE_URL is not set (run `scripts/test`, or set \
                 DATABASE_URL=postgres://postgres@127.0.0.1:5432/test with PostgreSQL running)",
            );
            None
        }
    }
}

/// A store on the shared database under `prefix`, set up; panics if the
/// database is unreachable.
pub(crate) async fn connect(url: &str, prefix: String) -> PostgresStore {
    let store = PostgresStore::builder(url)
        .schema(SCHEMA)
        .prefix(prefix)
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap_or_else(|error| panic!("DATABASE_URL={url} is set but unreachable: {error}"));
    store.setup().await.unwrap();
    store
}

/// A set-up store on the shared database under a key prefix of its own;
/// `None` if `DATABASE_URL` is unset. Panics if it is set but unreachable.
pub(crate) async fn store(what: &str) -> Option<PostgresStore> {
    let url = url(what)?;
    Some(connect(&url, format!("{}:", unique("test"))).await)
}
