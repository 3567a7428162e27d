//! [`SqliteStore`]: limits shared by the processes of one machine through
//! one SQLite file.
//!
//! Each decision is one `BEGIN IMMEDIATE` transaction: it takes the file's
//! write lock first, so the read-modify-write inside is serialized with
//! every other process's. The file is in WAL mode (readers never wait for
//! the writer) with a busy timeout, and calls run on tokio's blocking pool
//! over a small pool of connections (a list of idle ones; a semaphore
//! bounds how many exist, so a call never waits for one on a blocking
//! thread, and a file that cannot be opened fails the call at once). Every process on the machine reads
//! the same system clock: a transaction reads the wall clock (Unix time)
//! once the lock is held, decides on it alone, and answers in durations,
//! converted to this process's [`Instant`]s at the boundary.
//!
//! One module per kind of state: `quota` with one module per algorithm
//! (`cells`, `fixed_window`, `sliding_window_counter`, `sliding_log`),
//! `lease`, `curve`, and `schema` (the tables and the sweep of expired
//! rows).

mod curve;
mod lease;
mod quota;
mod schema;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, ErrorCode, Transaction, TransactionBehavior};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::late::{self, Late};
use super::{StoreError, StoreErrorKind, WindowDecision};
use crate::clock::Clock;
use crate::error::LimiterError;

const BACKEND: &str = "sqlite";
const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);
const DEFAULT_CONNECTIONS: u32 = 4;

/// A store in one SQLite file, shared by every process on the machine that
/// opens it: a [`QuotaStore`](super::QuotaStore) (GCRA, token bucket,
/// fixed window, sliding window counter, sliding log), a
/// [`LeaseStore`](super::LeaseStore) (concurrency leases) and a
/// [`CurveStore`](super::CurveStore) (adaptive rates).
///
/// SQLite is compiled into the crate (cargo feature `sqlite`): no server,
/// no system library. Opening the store creates the file and its tables if
/// they are missing and puts the file in WAL mode. Every decision is one
/// `BEGIN IMMEDIATE` transaction, so several processes deciding on one key
/// never both take the last unit. Clones share one pool of connections.
///
/// Every call gives up after a timeout (250 ms unless set), which is also
/// SQLite's busy timeout: a database locked by another process for longer
/// is a [`StoreError`] of kind [`Timeout`](StoreErrorKind::Timeout), never a
/// hung caller. A decision that timed out may still be made: it runs to
/// its end (for up to 30 s, never begun once its caller gave up before it
/// could take the lock), and a grant nobody took is given back.
///
/// State that no longer matters (starts out of their window, past windows,
/// expired leases and pauses) is deleted by a [`sweep`](SqliteStore::sweep)
/// that write calls run every 10 seconds, so idle limits cost nothing.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::store::{Quota, SqliteStore};
/// use tower_limits::{Limiter, LimiterExt, RateLimiter};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = std::env::temp_dir().join(format!("tower-limits-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// # let path = dir.join("limits.db");
/// // Every worker process on the machine opens the same file.
/// let store = SqliteStore::open(&path).await?;
///
/// // A sliding window of 100 calls a minute, shared by every worker.
/// let window = RateLimiter::builder("crm-api", 100, Duration::from_secs(60))
///     .store(store.clone())
///     .build()?;
/// // 10 a second with bursts of 20, as a token bucket.
/// let quota = Quota::token_bucket(20, 10, Duration::from_secs(1))?;
/// let bucket = RateLimiter::new(store, "search-api", quota);
///
/// let _permit = window.acquire().await?;
/// let _permit = bucket.acquire().await?;
/// assert!(window.can_proceed().await?);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    /// Open connections not in use.
    idle: Mutex<Vec<Connection>>,
    /// One permit per connection that may exist: a call holds one while it
    /// uses a connection.
    connections: Arc<Semaphore>,
    /// Write transactions of this process queue here, in order, rather
    /// than in SQLite's busy handler, which sleeps between tries.
    writer: Arc<Semaphore>,
    timeout: Duration,
    /// When the last sweep ran (nanoseconds of Unix time).
    last_sweep: AtomicI64,
    /// The test clock read instead of Unix time, if one was given.
    clock: Option<Clock>,
}

/// Configures a [`SqliteStore`]: made by [`SqliteStore::builder`].
///
/// ```
/// use std::time::Duration;
/// use tower_limits::store::SqliteStore;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = std::env::temp_dir().join(format!("tower-limits-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// let store = SqliteStore::builder(dir.join("limits.db"))
///     .timeout(Duration::from_millis(100))
///     .connections(2)
///     .open()
///     .await?;
/// assert_eq!(store.timeout(), Duration::from_millis(100));
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "call `open` to get a store"]
pub struct SqliteStoreBuilder {
    path: PathBuf,
    timeout: Duration,
    connections: u32,
    clock: Option<Clock>,
}

impl SqliteStore {
    /// Starts configuring a store in the file at `path`.
    ///
    /// ```
    /// use tower_limits::store::SqliteStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = std::env::temp_dir().join(format!("tower-limits-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// let store = SqliteStore::builder(dir.join("limits.db")).open().await?;
    /// assert!(store.path().ends_with("limits.db"));
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(path: impl Into<PathBuf>) -> SqliteStoreBuilder {
        SqliteStoreBuilder {
            path: path.into(),
            timeout: DEFAULT_TIMEOUT,
            connections: DEFAULT_CONNECTIONS,
            clock: None,
        }
    }

    /// Opens (creating if missing) the store in the file at `path`, with
    /// the default timeout (250 ms) and 4 connections.
    ///
    /// ```
    /// use tower_limits::store::{SqliteStore, StoreErrorKind};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = std::env::temp_dir().join(format!("tower-limits-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// let store = SqliteStore::open(dir.join("limits.db")).await?;
    /// # drop(store);
    ///
    /// let missing = dir.join("no-such-directory").join("limits.db");
    /// let error = SqliteStore::open(missing).await.unwrap_err();
    /// assert_eq!(error.kind(), StoreErrorKind::Unavailable);
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::builder(path.as_ref()).open().await
    }

    /// The file this store keeps its state in.
    ///
    /// ```
    /// use tower_limits::store::SqliteStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = std::env::temp_dir().join(format!("tower-limits-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// let path = dir.join("limits.db");
    /// let store = SqliteStore::open(&path).await?;
    /// assert_eq!(store.path(), path);
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// How long a call may take, waiting for the database's lock included.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::SqliteStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = std::env::temp_dir().join(format!("tower-limits-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// let store = SqliteStore::open(dir.join("limits.db")).await?;
    /// assert_eq!(store.timeout(), Duration::from_millis(250));
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Deletes every row that no longer affects a decision (starts out of
    /// their window, state of windows long past, expired leases and
    /// pauses) and answers how many. Write calls run it by themselves every
    /// 10 seconds; call it to clean up at a time of your choosing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{LeaseStore, SqliteStore};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = std::env::temp_dir().join(format!("tower-limits-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// let store = SqliteStore::open(dir.join("limits.db")).await?;
    /// let key = store.lease_key("gpu");
    /// store.lease(&key, 4, Duration::from_millis(1), 7, 1).await?;
    /// tokio::time::sleep(Duration::from_millis(5)).await; // the lease expires
    /// assert_eq!(store.sweep().await?, 1);
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn sweep(&self) -> Result<usize, StoreError> {
        self.transact(Mode::Write, Late::Drop, schema::sweep).await
    }

    /// Runs `work` in one transaction on a pooled connection, on tokio's
    /// blocking pool, within the store's timeout. `work` gets the wall
    /// clock read once the transaction holds its lock. An answer that comes
    /// after the caller stopped waiting goes where `late` says; a
    /// transaction whose caller gave up before it could begin does not run.
    async fn transact<T, F>(&self, mode: Mode, late: Late<T>, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>, Now) -> rusqlite::Result<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let timeout = inner.timeout;
        let deadline = std::time::Instant::now() + late.caller_wait(timeout);
        let job = async move {
            // Held by the blocking task: a caller that gives up does not let
            // another transaction of this process start before this one ends.
            let writer = match mode {
                Mode::Write => Some(Arc::clone(&inner.writer).acquire_owned().await),
                Mode::Read => None,
            };
            let connection = Arc::clone(&inner.connections).acquire_owned().await;
            tokio::task::spawn_blocking(move || {
                let _permits = (writer, connection);
                // A transaction that failed was rolled back, or never began.
                inner
                    .run(mode, deadline, work)
                    .map_err(StoreError::not_applied)
            })
            .await
            .unwrap_or_else(|failed| {
                Err(StoreError::new(
                    BACKEND,
                    StoreErrorKind::Refused,
                    format!("the blocking task running the transaction failed: {failed}"),
                ))
            })
        };
        late::answer(BACKEND, timeout, late, job).await
    }

    /// [`transact`](Self::transact) for the trait methods, whose errors
    /// are [`LimiterError`]s; a call that takes nothing.
    async fn call<T, F>(&self, mode: Mode, work: F) -> Result<T, LimiterError>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>, Now) -> rusqlite::Result<T> + Send + 'static,
    {
        self.call_late(mode, Late::Drop, work).await
    }

    /// [`call`](Self::call) for a call that may take units or give them
    /// back: a late answer goes where `late` says.
    async fn call_late<T, F>(&self, mode: Mode, late: Late<T>, work: F) -> Result<T, LimiterError>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>, Now) -> rusqlite::Result<T> + Send + 'static,
    {
        Ok(self.transact(mode, late, work).await?)
    }
}

/// Whether a transaction writes: `BEGIN IMMEDIATE` (the write lock first,
/// and a sweep when one is due) or a plain read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
}

impl Inner {
    /// The blocking part of [`SqliteStore::transact`].
    /// Waits for the write lock no later than `deadline`, when the caller
    /// gives up.
    fn run<T>(
        &self,
        mode: Mode,
        deadline: std::time::Instant,
        work: impl FnOnce(&Transaction<'_>, Now) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(StoreError::timeout(BACKEND, self.timeout));
        }
        let mut connection = self.connection()?;
        connection
            .busy_timeout(left)
            .map_err(|error| self.error(error))?;
        let behavior = match mode {
            Mode::Read => TransactionBehavior::Deferred,
            Mode::Write => TransactionBehavior::Immediate,
        };
        let transacted = (|| {
            let tx = connection.transaction_with_behavior(behavior)?;
            let now = self.now();
            if mode == Mode::Write && self.sweep_due(now) {
                schema::sweep(&tx, now)?;
            }
            let answer = work(&tx, now)?;
            tx.commit()?;
            Ok(answer)
        })();
        // A failed transaction was rolled back: the connection is reusable.
        self.idle().push(connection);
        transacted.map_err(|error| self.error(error))
    }

    /// An idle connection, or a new one (the caller holds a permit for it).
    fn connection(&self) -> Result<Connection, StoreError> {
        if let Some(connection) = self.idle().pop() {
            return Ok(connection);
        }
        let mut connection = Connection::open(&self.path).map_err(|error| self.error(error))?;
        schema::configure(&mut connection, self.timeout).map_err(|error| self.error(error))?;
        Ok(connection)
    }

    /// The idle connections. Pushing and popping cannot leave the list
    /// inconsistent, so a poisoned lock is taken as is.
    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a sweep is due at `now`; if so, claims it.
    /// The store's time: the system's Unix time, or the test clock's.
    fn now(&self) -> Now {
        self.clock
            .as_ref()
            .map_or_else(Now::read, |clock| Now(stored(clock.now_nanos())))
    }

    fn sweep_due(&self, now: Now) -> bool {
        let last = self.last_sweep.load(Ordering::Relaxed);
        now.0.saturating_sub(last) >= schema::SWEEP_EVERY
            && self
                .last_sweep
                .compare_exchange(last, now.0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// The store error for a failed statement.
    fn error(&self, error: rusqlite::Error) -> StoreError {
        store_error(error, &self.path, self.timeout)
    }
}

/// Maps a SQLite error to the kind of store failure it is, with a message
/// that says what to check.
fn store_error(error: rusqlite::Error, path: &Path, timeout: Duration) -> StoreError {
    use rusqlite::Error as E;
    let path = path.display();
    let (kind, detail) = match &error {
        E::SqliteFailure(failure, _) => match failure.code {
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => (
                StoreErrorKind::Timeout,
                format!(
                    "{path} stayed locked by another connection for more than {timeout:?} \
                     ({error}); shorten that connection's transactions or raise the timeout"
                ),
            ),
            ErrorCode::CannotOpen => (
                StoreErrorKind::Unavailable,
                format!(
                    "cannot open {path}: {error}; check that its directory exists and is writable"
                ),
            ),
            ErrorCode::PermissionDenied
            | ErrorCode::ReadOnly
            | ErrorCode::DiskFull
            | ErrorCode::SystemIoFailure
            | ErrorCode::NotADatabase
            | ErrorCode::DatabaseCorrupt => (
                StoreErrorKind::Unavailable,
                format!("cannot use {path}: {error}; check the file and its directory"),
            ),
            _ => (StoreErrorKind::Refused, format!("{path}: {error}")),
        },
        E::FromSqlConversionFailure(..)
        | E::IntegralValueOutOfRange(..)
        | E::InvalidColumnType(..)
        | E::InvalidColumnIndex(..)
        | E::InvalidColumnName(..) => (
            StoreErrorKind::BadReply,
            format!(
                "a row in {path} is not limiter state ({error}); was it written by something \
                 else? Clear the limit to start it afresh"
            ),
        ),
        _ => (StoreErrorKind::Refused, format!("{path}: {error}")),
    };
    StoreError::new(BACKEND, kind, detail)
}

impl SqliteStoreBuilder {
    /// Gives up on a call after `timeout` (default 250 ms), with a
    /// [`StoreError`] of kind [`Timeout`](StoreErrorKind::Timeout); it is
    /// also how long a call waits for another process's write lock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::SqliteStore;
    ///
    /// let builder = SqliteStore::builder("limits.db").timeout(Duration::from_millis(50));
    /// # let _ = builder;
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Keeps up to `connections` connections open (default 4, at least 1):
    /// reads run side by side, writes one at a time.
    ///
    /// ```
    /// use tower_limits::store::SqliteStore;
    ///
    /// let builder = SqliteStore::builder("limits.db").connections(8);
    /// # let _ = builder;
    /// ```
    pub fn connections(mut self, connections: u32) -> Self {
        self.connections = connections.max(1);
        self
    }

    /// Reads the store's time from `clock`, counted from the clock's epoch,
    /// instead of the system's Unix time: for tests in one process, where
    /// [`Clock::tokio`] under `tokio::time::pause` then drives the store's
    /// windows, pauses and expiry. Processes sharing a file must all read
    /// the same time, which only the default (Unix time) gives them; and a
    /// file written under one clock means nothing under another.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{Quota, SqliteStore};
    /// use tower_limits::clock::Clock;
    /// use tower_limits::{Limiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = std::env::temp_dir().join(format!("tower-limits-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// let store = SqliteStore::builder(dir.join("test.db"))
    ///     .clock(Clock::tokio())
    ///     .open()
    ///     .await?;
    /// let limiter = RateLimiter::new(store, "api", Quota::gcra(1, Duration::from_secs(60))?);
    /// assert!(limiter.can_proceed().await?);
    /// limiter.record_start().await?;
    /// assert!(!limiter.can_proceed().await?);
    /// tokio::time::advance(Duration::from_secs(60)).await; // no real waiting
    /// assert!(limiter.can_proceed().await?);
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Opens the file (creating it if missing), puts it in WAL mode and
    /// creates the tables if they are missing, failing if the file cannot
    /// be used now.
    ///
    /// ```
    /// use tower_limits::store::SqliteStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = std::env::temp_dir().join(format!("tower-limits-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// let store = SqliteStore::builder(dir.join("limits.db")).open().await?;
    /// # let _ = store;
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open(self) -> Result<SqliteStore, StoreError> {
        let mut inner = Inner {
            path: self.path,
            idle: Mutex::default(),
            connections: Arc::new(Semaphore::new(self.connections as usize)),
            writer: Arc::new(Semaphore::new(1)),
            timeout: self.timeout,
            clock: self.clock,
            last_sweep: AtomicI64::new(0),
        };
        // The first sweep is due a sweep interval after opening.
        inner.last_sweep = AtomicI64::new(inner.now().0);
        let store = SqliteStore {
            inner: Arc::new(inner),
        };
        store
            .transact(Mode::Write, Late::Drop, schema::create)
            .await?;
        Ok(store)
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

/// A named limit in a [`SqliteStore`]: the name its rows are stored
/// under, made by the store's `key`, `quota_key` and `lease_key`.
///
/// ```
/// use tower_limits::store::{QuotaStore, SqliteKey, SqliteStore};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = std::env::temp_dir().join(format!("tower-limits-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// let store = SqliteStore::open(dir.join("limits.db")).await?;
/// let key: SqliteKey = store.quota_key("search");
/// assert_eq!(key.name(), "search");
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqliteKey {
    name: Arc<str>,
}

impl SqliteKey {
    fn new(name: &str) -> Self {
        Self { name: name.into() }
    }

    /// The limit's name, as stored in every row of its state.
    ///
    /// ```
    /// use tower_limits::store::{QuotaStore, SqliteStore};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = std::env::temp_dir().join(format!("tower-limits-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// let store = SqliteStore::open(dir.join("limits.db")).await?;
    /// assert_eq!(store.quota_key("crm").name(), "crm");
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name, owned, for a transaction on the blocking pool.
    fn owned(&self) -> Arc<str> {
        Arc::clone(&self.name)
    }
}

/// The wall clock as a transaction read it: nanoseconds of Unix time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Now(i64);

impl Now {
    fn read() -> Self {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Self(nanos(since))
    }

    /// Microseconds of Unix time.
    fn micros(self) -> i64 {
        self.0 / 1_000
    }
}

/// Whole nanoseconds in `duration`, saturating.
fn nanos(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

/// Whole microseconds in `duration`, rounded up, saturating.
fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos().div_ceil(1_000)).unwrap_or(i64::MAX)
}

/// Nanoseconds from now until `at` (0 if past), read before a transaction:
/// how far past its own clock a pause must end.
fn nanos_until(at: Instant) -> i64 {
    nanos(at.saturating_duration_since(Instant::now()))
}

/// The instant `nanos` nanoseconds from now (late rather than early).
fn after(nanos: i64) -> Instant {
    Instant::now() + nanos_to_duration(nanos)
}

/// `nanos` nanoseconds (none if negative).
fn nanos_to_duration(nanos: i64) -> Duration {
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(0))
}

/// A decision as a transaction answers it: granted with a ticket, or
/// denied for a while (nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Granted(u64),
    RetryIn(i64),
}

impl Answer {
    /// `Ok(ticket)` grants; `Err(at)` denies until `at` (nanoseconds of
    /// Unix time).
    fn new(result: Result<u64, i64>, now: Now) -> Self {
        match result {
            Ok(ticket) => Self::Granted(ticket),
            Err(at) => Self::RetryIn(at.saturating_sub(now.0)),
        }
    }

    fn decision(self) -> WindowDecision {
        match self {
            Self::Granted(ticket) => WindowDecision::Granted { ticket },
            Self::RetryIn(nanos) => WindowDecision::Denied {
                retry_at: after(nanos),
            },
        }
    }
}

/// Column `index` of `row`, a count.
fn count_at(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<usize> {
    let count: i64 = row.get(index)?;
    usize::try_from(count).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(index, count))
}

/// A `u64` (a ticket, a lease name) as SQLite's signed integer, bit for bit.
fn signed(value: u64) -> i64 {
    i64::from_ne_bytes(value.to_ne_bytes())
}

/// The `u64` that [`signed`] stored.
fn unsigned(value: i64) -> u64 {
    u64::from_ne_bytes(value.to_ne_bytes())
}

/// A stored time (ns or µs of Unix time) or count as the algorithms of
/// `crate::algorithms` take it: nothing below 0.
fn nonnegative(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// A time or count of the algorithms as SQLite's integer, saturating.
fn stored(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// `expires` (ns) of a quota row whose numbers matter until `ends`, or
/// until the pause `not_before` ends if later.
fn expires(ends: u64, not_before: u64) -> i64 {
    stored(ends.max(not_before)).saturating_add(schema::GRACE)
}
