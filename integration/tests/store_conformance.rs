//! One conformance suite, run against every store: the same assertions
//! (in `common/conformance.rs`), so no store is tested less than another.
//!
//! Adding a store is one `conformance!` line with an async expression that
//! makes a fresh store, or `None` (after saying why on stderr) when the
//! store's server is not configured.
//!
//! Redis runs when `REDIS_URL` is set, PostgreSQL when `DATABASE_URL` is
//! (`.ci/run` sets both); unset, their tests print that they were skipped;
//! set but unreachable, they fail.

mod common;

use tower_limits::store::MemoryStore;

conformance!(memory, Some(MemoryStore::new()));

#[cfg(feature = "redis")]
conformance!(redis, common::redis::store("conformance").await);

#[cfg(feature = "postgres")]
conformance!(postgres, common::postgres::store("conformance").await);

// The temporary database is a temporary of the checks' `if let`: it lives
// until they end.
#[cfg(feature = "sqlite")]
conformance!(sqlite, common::sqlite::TempDb::new().store().await);
