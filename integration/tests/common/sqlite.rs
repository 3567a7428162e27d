//! SQLite for the tests: a database file in a temporary directory of its
//! own, deleted when the [`TempDb`] drops. No server is needed, so SQLite
//! tests always run.

use std::path::PathBuf;
use std::time::Duration;

use tempfile::TempDir;
use tower_limits::store::SqliteStore;

/// A temporary directory holding one database file.
pub(crate) struct TempDb {
    dir: TempDir,
}

impl TempDb {
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    /// The database file (created when a store opens it).
    pub(crate) fn path(&self) -> PathBuf {
        self.dir.path().join("limits.db")
    }

    /// A store on the file, with a timeout generous enough for a busy
    /// machine; always `Some` (the shape `conformance!` takes).
    ///
    /// In `conformance!(sqlite, TempDb::new().store().await)` the `TempDb`
    /// is a temporary of the `if let` scrutinee, so it lives until the
    /// checks end.
    pub(crate) async fn store(&self) -> Option<SqliteStore> {
        Some(self.open(Duration::from_secs(2)).await)
    }

    /// A store on the file giving up after `timeout`.
    pub(crate) async fn open(&self, timeout: Duration) -> SqliteStore {
        SqliteStore::builder(self.path())
            .timeout(timeout)
            .open()
            .await
            .expect("a store in a temporary file")
    }

    /// A plain connection to the file, to look at or tamper with its rows.
    pub(crate) fn connection(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.path()).expect("the database file")
    }
}
