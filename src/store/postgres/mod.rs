//! [`PostgresStore`]: limits shared by every process that reaches one
//! PostgreSQL database.
//!
//! Each decision is one statement, `SELECT schema.strategy(op, key, …)`,
//! calling a PL/pgSQL function that [`setup`](crate::store::QuotaStore::setup)
//! creates (the `.sql` files beside this one, one per strategy, the same
//! rules as the Redis scripts). A function takes a transaction-scoped
//! advisory lock on its key, then reads `clock_timestamp()`: the database's
//! clock is the only clock, read after the lock so that the decisions on one
//! key see times in the order they are made. Times cross to the client as
//! durations ("retry in N µs"). Decisions prune their key's dead rows;
//! [`PostgresStore::cleanup`] sweeps the rest.

mod curve;
mod lease;
mod quota;
mod reply;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use self::quota::QuotaFunction;
use self::reply::Reply;
use super::late::{self, Late};
use super::{StoreError, StoreErrorKind};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;

const BACKEND: &str = "postgres";
const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);
const DEFAULT_SCHEMA: &str = "tower_limits";
const DEFAULT_POOL_SIZE: usize = 16;
/// Set-up waits for other processes setting up the same schema.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The schema's SQL, in the order it must run; `__SCHEMA__` stands for the
/// quoted schema name, `__SCHEMA_LITERAL__` for it as a string literal,
/// `__QUOTA_TABLES__` for [`quota_tables`].
fn schema_sql() -> impl Iterator<Item = &'static str> {
    let quotas = QuotaFunction::ALL.map(QuotaFunction::sql);
    [include_str!("common.sql")]
        .into_iter()
        .chain(quotas)
        .chain([
            include_str!("leases.sql"),
            include_str!("curve.sql"),
            include_str!("cleanup.sql"),
        ])
}

/// The rows of the quota algorithms' tables for `cleanup.sql`'s list:
/// `('cells', 'expires'), ` and so on.
fn quota_tables() -> String {
    let tables = QuotaFunction::ALL
        .iter()
        .flat_map(|function| function.tables());
    tables
        .map(|table| format!("('{table}', 'expires'), "))
        .collect()
}

/// A store in PostgreSQL, shared by every process that connects to the
/// database: a [`QuotaStore`](super::QuotaStore) (GCRA, token bucket, fixed
/// window, sliding window counter, sliding log), a
/// [`LeaseStore`](super::LeaseStore) (concurrency leases) and a
/// [`CurveStore`](super::CurveStore) (adaptive rates).
///
/// Run [`setup`](super::QuotaStore::setup) once (it is idempotent and
/// safe to run from several processes at once) to create the schema's
/// tables and functions. Clones share one connection pool (no TLS), which
/// replaces broken connections by itself. Every call gives up after a
/// timeout (250 ms unless set), on the client and, as `statement_timeout`,
/// on the server, so a hung database is an outage with a
/// [`StoreError`](super::StoreError), never a hung caller; wrap the limiter
/// in a [`Failover`](crate::Failover) to choose what happens then. A
/// decision given up on after it was sent still runs to its end (its
/// answer is awaited for up to 30 s), and a grant nobody took is given
/// back; one not yet sent when its caller gave up is never sent.
///
/// ```no_run
/// use std::time::Duration;
/// use tower_limits::store::{PostgresStore, Quota, QuotaStore};
/// use tower_limits::{LimiterExt, RateLimiter};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::builder("postgres://postgres@127.0.0.1:5432/app")
///     .schema("limits")
///     .timeout(Duration::from_millis(100))
///     .connect()
///     .await?;
/// store.setup().await?;
///
/// // A sliding window of 100 calls a minute, shared by every worker.
/// let window = RateLimiter::builder("crm-api", 100, Duration::from_secs(60))
///     .store(store.clone())
///     .build()?;
/// // 10 a second with bursts of 20, as a token bucket.
/// let bucket = RateLimiter::new(store, "search-api", Quota::token_bucket(20, 10, Duration::from_secs(1))?);
///
/// let _permit = window.acquire().await?;
/// let _permit = bucket.acquire().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    schema: String,
    prefix: String,
    timeout: Duration,
    statements: Statements,
}

/// Which of the [`Statements`] a call runs.
#[derive(Clone, Copy, Debug)]
enum StatementName {
    Quota(QuotaFunction),
    Leases,
    Curve,
}

/// A statement's parameters, owned, so that a call can outlive its caller
/// (see [`late`]).
type Params = Vec<Box<dyn ToSql + Send + Sync>>;

impl Inner {
    /// Runs `statement` with `params`; the first column of its one row. A
    /// connection that comes from the pool past `deadline` is not used.
    async fn query<T>(
        &self,
        statement: &str,
        params: &[&(dyn ToSql + Sync)],
        deadline: Option<std::time::Instant>,
    ) -> Result<T, StoreError>
    where
        T: for<'r> tokio_postgres::types::FromSql<'r>,
    {
        let client = self.pool.get().await.map_err(pool_error)?;
        if deadline.is_some_and(|deadline| std::time::Instant::now() > deadline) {
            return Err(StoreError::timeout(BACKEND, self.timeout).not_applied());
        }
        let prepared = client
            .prepare_cached(statement)
            .await
            .map_err(|error| query_error(error).not_applied())?;
        let row = client
            .query_one(&prepared, params)
            .await
            .map_err(query_error)?;
        row.try_get::<_, T>(0).map_err(|error| {
            StoreError::bad_reply(BACKEND, format!("{statement} answered {row:?}: {error}"))
        })
    }
}

/// The one statement of each function.
struct Statements {
    quotas: [String; QuotaFunction::ALL.len()],
    leases: String,
    curve: String,
    cleanup: String,
}

impl Statements {
    fn new(schema: &str) -> Self {
        let call = |function: &str, arity: usize| {
            let params: Vec<String> = (1..=arity).map(|n| format!("${n}")).collect();
            format!("SELECT {schema}.{function}({})", params.join(", "))
        };
        Self {
            quotas: QuotaFunction::ALL.map(|quota| call(quota.name(), quota.arity())),
            leases: call("leases", 3),
            curve: call("curve", 3),
            cleanup: call("cleanup", 1),
        }
    }

    fn get(&self, name: StatementName) -> &str {
        match name {
            StatementName::Quota(function) => &self.quotas[function as usize],
            StatementName::Leases => &self.leases,
            StatementName::Curve => &self.curve,
        }
    }
}

/// Configures a [`PostgresStore`]: made by [`PostgresStore::builder`].
///
/// ```no_run
/// use std::time::Duration;
/// use tower_limits::store::PostgresStore;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), tower_limits::store::StoreError> {
/// let store = PostgresStore::builder("postgres://postgres@127.0.0.1:5432/app")
///     .schema("myapp_limits")
///     .prefix("billing:")
///     .pool_size(8)
///     .timeout(Duration::from_millis(50))
///     .connect()
///     .await?;
/// # let _ = store;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "call `connect` to get a store"]
pub struct PostgresStoreBuilder {
    url: String,
    schema: String,
    prefix: String,
    pool_size: usize,
    timeout: Duration,
}

impl PostgresStore {
    /// Starts configuring a store on the database at `url`
    /// (`postgres://user[:password]@host[:port]/database`, or the
    /// `host=… dbname=…` form). No TLS.
    ///
    /// ```no_run
    /// use tower_limits::store::PostgresStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), tower_limits::store::StoreError> {
    /// let store = PostgresStore::builder("postgres://postgres@127.0.0.1:5432/app").connect().await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(url: impl Into<String>) -> PostgresStoreBuilder {
        PostgresStoreBuilder {
            url: url.into(),
            schema: DEFAULT_SCHEMA.to_owned(),
            prefix: String::new(),
            pool_size: DEFAULT_POOL_SIZE,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Connects to the database at `url` with the default schema
    /// (`tower_limits`), no key prefix, a pool of 16 connections and a
    /// 250 ms timeout.
    ///
    /// ```no_run
    /// use tower_limits::store::PostgresStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), tower_limits::store::StoreError> {
    /// let store = PostgresStore::connect("postgres://postgres@127.0.0.1:5432/app").await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::builder(url).connect().await
    }

    /// The schema holding the store's tables and functions, as given.
    ///
    /// ```no_run
    /// use tower_limits::store::PostgresStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), tower_limits::store::StoreError> {
    /// let store = PostgresStore::connect("postgres://postgres@127.0.0.1:5432/app").await?;
    /// assert_eq!(store.schema(), "tower_limits");
    /// # Ok(())
    /// # }
    /// ```
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// Deletes rows that no longer say anything: expired leases and pauses,
    /// starts that left every window, state past its expiry. Returns how
    /// many it deleted. Decisions prune their own key as they go; run this
    /// now and then (say, every minute from one process) so that keys no
    /// longer used cost nothing. It never waits for running decisions.
    ///
    /// ```no_run
    /// use tower_limits::store::PostgresStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), tower_limits::error::LimiterError> {
    /// let store = PostgresStore::connect("postgres://postgres@127.0.0.1:5432/app").await?;
    /// let deleted = store.cleanup().await?;
    /// println!("deleted {deleted} dead rows");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn cleanup(&self) -> Result<u64, LimiterError> {
        let statement = &self.inner.statements.cleanup;
        let deleted: i64 = self.query(statement, &[&10_000_i32]).await?;
        Ok(u64::try_from(deleted).unwrap_or(0))
    }

    /// The key of the limit `name` in the store's tables.
    fn key_name(&self, name: &str) -> String {
        format!("{}{name}", self.inner.prefix)
    }

    /// Runs `statement` with `params` within the timeout; the first column
    /// of its one row.
    async fn query<T>(
        &self,
        statement: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<T, StoreError>
    where
        T: for<'r> tokio_postgres::types::FromSql<'r>,
    {
        let timeout = self.inner.timeout;
        let work = self.inner.query(statement, params, None);
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| StoreError::timeout(BACKEND, timeout))?
    }

    /// Runs a strategy's function with `params`, and reads its reply (an
    /// array of integers) with `read`. A reply that comes after the caller
    /// stopped waiting goes where `late` says; a call whose caller gave up
    /// before a pooled connection was free is not sent.
    fn run<T: Send + 'static>(
        &self,
        statement: StatementName,
        params: Params,
        read: impl FnOnce(Reply<'_>) -> Result<T, StoreError> + Send + 'static,
        late: Late<T>,
    ) -> LimiterFuture<'static, Result<T, LimiterError>> {
        let inner = Arc::clone(&self.inner);
        let timeout = inner.timeout;
        let deadline = std::time::Instant::now() + late.caller_wait(timeout);
        let work = async move {
            let params: Vec<&(dyn ToSql + Sync)> = params
                .iter()
                .map(|param| param.as_ref() as &(dyn ToSql + Sync))
                .collect();
            let statement = inner.statements.get(statement);
            let reply: Vec<i64> = inner.query(statement, &params, Some(deadline)).await?;
            read(Reply(&reply))
        };
        LimiterFuture::new(async move { Ok(late::answer(BACKEND, timeout, late, work).await?) })
    }

    /// Creates the schema, its tables and functions, in one transaction
    /// under an advisory lock, so processes setting up at once take turns.
    async fn create_schema(&self) -> Result<(), LimiterError> {
        let schema = quoted(&self.inner.schema);
        let literal = format!("'{}'", schema.replace('\'', "''"));
        let tables = quota_tables();
        let sql: String = schema_sql()
            .map(|part| {
                part.replace("__SCHEMA_LITERAL__", &literal)
                    .replace("__SCHEMA__", &schema)
                    .replace("__QUOTA_TABLES__", &tables)
            })
            .collect::<Vec<_>>()
            .join("\n");
        let work = async {
            let mut client = self.inner.pool.get().await.map_err(pool_error)?;
            let transaction = client.transaction().await.map_err(query_error)?;
            transaction
                .batch_execute(
                    "SET LOCAL statement_timeout = 0; \
                     SELECT pg_advisory_xact_lock(hashtextextended('tower-limits setup', 7230));",
                )
                .await
                .map_err(query_error)?;
            transaction.batch_execute(&sql).await.map_err(query_error)?;
            transaction.commit().await.map_err(query_error)
        };
        tokio::time::timeout(SETUP_TIMEOUT, work)
            .await
            .map_err(|_| StoreError::timeout(BACKEND, SETUP_TIMEOUT))??;
        Ok(())
    }
}

impl PostgresStoreBuilder {
    /// Keeps the store's tables and functions in `schema` (default
    /// `tower_limits`), created by `setup` if missing. Stores on different
    /// schemas share nothing.
    ///
    /// ```
    /// use tower_limits::store::PostgresStore;
    ///
    /// let builder = PostgresStore::builder("postgres://127.0.0.1/app").schema("shop_limits");
    /// # let _ = builder;
    /// ```
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Prefixes every key with `prefix` (default none), so that several
    /// applications share one schema without sharing limits.
    ///
    /// ```
    /// use tower_limits::store::PostgresStore;
    ///
    /// let builder = PostgresStore::builder("postgres://127.0.0.1/app").prefix("shop:");
    /// # let _ = builder;
    /// ```
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Opens at most `size` connections (default 16, at least 1); callers
    /// beyond that wait for one, within the timeout.
    ///
    /// ```
    /// use tower_limits::store::PostgresStore;
    ///
    /// let builder = PostgresStore::builder("postgres://127.0.0.1/app").pool_size(4);
    /// # let _ = builder;
    /// ```
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// Gives up on a call after `timeout` (default 250 ms), with a
    /// [`StoreError`] of kind [`Timeout`](StoreErrorKind::Timeout); the
    /// server cancels the statement after the same time
    /// (`statement_timeout`). Connection attempts use the same timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::PostgresStore;
    ///
    /// let builder = PostgresStore::builder("postgres://127.0.0.1/app").timeout(Duration::from_millis(50));
    /// # let _ = builder;
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Connects, failing if the database cannot be reached now. Once
    /// connected, the pool replaces broken connections by itself. Does not
    /// create the schema: run `setup` for that.
    ///
    /// ```no_run
    /// use tower_limits::store::PostgresStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), tower_limits::store::StoreError> {
    /// let store = PostgresStore::builder("postgres://postgres@127.0.0.1:5432/app").connect().await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(self) -> Result<PostgresStore, StoreError> {
        let pool = self.pool()?;
        let store = PostgresStore {
            inner: Arc::new(Inner {
                pool,
                statements: Statements::new(&quoted(&self.schema)),
                schema: self.schema,
                prefix: self.prefix,
                timeout: self.timeout,
            }),
        };
        let first = store.inner.pool.get();
        let wait = self.timeout.max(Duration::from_secs(1));
        let connection = tokio::time::timeout(wait, first)
            .await
            .map_err(|_| StoreError::timeout(BACKEND, wait))?
            .map_err(pool_error)?;
        drop(connection); // back to the pool
        Ok(store)
    }

    fn pool(&self) -> Result<Pool, StoreError> {
        let mut config = tokio_postgres::Config::from_str(&self.url).map_err(|error| {
            StoreError::new(
                BACKEND,
                StoreErrorKind::Refused,
                format!(
                    "`{}` is not a PostgreSQL connection string: {error}",
                    self.url
                ),
            )
        })?;
        let millis = self.timeout.as_millis().max(1);
        let options = config.get_options().unwrap_or_default().to_owned();
        config
            .options(format!("{options} -c statement_timeout={millis}").trim_start())
            .connect_timeout(self.timeout.max(Duration::from_secs(1)))
            .application_name("tower-limits");
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        Pool::builder(manager)
            .max_size(self.pool_size)
            .build()
            .map_err(|error| StoreError::new(BACKEND, StoreErrorKind::Refused, error.to_string()))
    }
}

/// `name` as a quoted SQL identifier.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The store error for a failed request on a connection.
fn query_error(error: tokio_postgres::Error) -> StoreError {
    let Some(db) = error.as_db_error() else {
        let kind = if error.is_closed()
            || std::error::Error::source(&error).is_some_and(|e| e.is::<std::io::Error>())
        {
            StoreErrorKind::Unavailable
        } else {
            StoreErrorKind::BadReply
        };
        return StoreError::new(BACKEND, kind, error.to_string());
    };
    let code = db.code();
    let kind = if *code == SqlState::QUERY_CANCELED {
        StoreErrorKind::Timeout
    } else if code.code().starts_with("08") || code.code().starts_with("57P") {
        StoreErrorKind::Unavailable
    } else {
        StoreErrorKind::Refused
    };
    let hint = if [
        SqlState::UNDEFINED_FUNCTION,
        SqlState::UNDEFINED_TABLE,
        SqlState::INVALID_SCHEMA_NAME,
    ]
    .contains(code)
    {
        " (run the store's `setup()` once to create its schema)"
    } else {
        ""
    };
    let error = StoreError::new(
        BACKEND,
        kind,
        format!("{}: {}{hint}", code.code(), db.message()),
    );
    // A statement the server refused or cancelled (a statement timeout, a
    // lock timeout, a serialization failure) was rolled back; one whose
    // connection broke may have committed.
    if kind == StoreErrorKind::Unavailable {
        error
    } else {
        error.not_applied()
    }
}

/// The store error for a connection the pool could not give.
fn pool_error(error: PoolError) -> StoreError {
    let error = match error {
        PoolError::Backend(error) => query_error(error),
        PoolError::Timeout(_) => StoreError::new(
            BACKEND,
            StoreErrorKind::Timeout,
            "no connection from the pool in time; is the database overloaded or the pool too small?",
        ),
        other => StoreError::new(BACKEND, StoreErrorKind::Unavailable, other.to_string()),
    };
    // Nothing was sent without a connection.
    error.not_applied()
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.inner.schema)
            .field("prefix", &self.inner.prefix)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

/// The key of one limit in a [`PostgresStore`]: its name with the store's
/// prefix, as the tables hold it. Made by the store's `key`, `quota_key` and
/// `lease_key`.
///
/// ```no_run
/// use tower_limits::store::{PostgresKey, PostgresStore, QuotaStore};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), tower_limits::store::StoreError> {
/// let store = PostgresStore::builder("postgres://postgres@127.0.0.1:5432/app")
///     .prefix("app:")
///     .connect()
///     .await?;
/// let key: PostgresKey = store.quota_key("search");
/// assert_eq!(key.name(), "app:search");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresKey {
    name: String,
}

impl PostgresKey {
    /// The key as the store's tables hold it.
    ///
    /// ```no_run
    /// use tower_limits::store::{PostgresStore, QuotaStore};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), tower_limits::store::StoreError> {
    /// let store = PostgresStore::connect("postgres://postgres@127.0.0.1:5432/app").await?;
    /// assert_eq!(store.quota_key("crm").name(), "crm");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
}
