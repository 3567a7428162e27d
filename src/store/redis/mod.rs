//! [`RedisStore`]: limits shared by every process that reaches one Redis
//! (or Redis Cluster).
//!
//! Each decision is one Lua script (the files beside this one), loaded once
//! and run with `EVALSHA` (reloaded by itself after a `SCRIPT FLUSH` or a
//! restart). Scripts read the server's `TIME`, the only clock, and talk to
//! the client in durations; they `PEXPIRE` every key they write, so an idle
//! limit costs nothing. The keys of one limit are
//! `{prefix}{{name}}:{part}`: the hash tag `{name}` puts them in one Cluster
//! slot, so each script touches one slot.

mod curve;
mod lease;
mod quota;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::{Cmd, Pipeline, RedisError, RedisFuture, Script, Value};
use tokio::time::Instant;

use self::quota::QuotaScript;
use super::late::{self, Late};
use super::{StoreError, StoreErrorKind, WindowDecision};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;

const BACKEND: &str = "redis";
const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);
const DEFAULT_PREFIX: &str = "tower-limits:";

/// A store in Redis, shared by every process that connects to it: a
/// [`QuotaStore`](super::QuotaStore) (GCRA, token bucket, fixed window,
/// sliding window counter, sliding log), a [`LeaseStore`](super::LeaseStore)
/// (concurrency leases) and a [`CurveStore`](super::CurveStore) (adaptive
/// rates).
///
/// Clones share one multiplexed connection, which reconnects by itself
/// after the server goes away. Every call gives up after a timeout (250 ms
/// unless set), so a hung server is an outage with a
/// [`StoreError`](super::StoreError), never a hung caller; wrap the limiter
/// in a [`Failover`](crate::Failover) to choose what happens then. A
/// decision given up on still runs to its end (its reply is awaited for up
/// to 30 s), and a grant nobody took is given back.
///
/// ```no_run
/// use std::time::Duration;
/// use tower_limits::store::{Quota, RedisStore};
/// use tower_limits::{LimiterExt, RateLimiter};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::builder("redis://127.0.0.1:6379")
///     .prefix("billing:")
///     .timeout(Duration::from_millis(100))
///     .connect()
///     .await?;
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
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    connection: Connection,
    prefix: String,
    timeout: Duration,
    scripts: Scripts,
}

/// The store's scripts: one per [`QuotaScript`], and the lease and curve
/// scripts.
struct Scripts {
    quotas: [Script; QuotaScript::ALL.len()],
    curve: Script,
    leases: Script,
}

/// Which of the [`Scripts`] a call runs.
#[derive(Clone, Copy, Debug)]
enum ScriptName {
    Quota(QuotaScript),
    Curve,
    Leases,
}

impl Scripts {
    fn load() -> Self {
        Self {
            quotas: QuotaScript::ALL.map(|script| with_status(script.source())),
            curve: Script::new(include_str!("curve.lua")),
            leases: Script::new(include_str!("leases.lua")),
        }
    }

    fn get(&self, name: ScriptName) -> &Script {
        match name {
            ScriptName::Quota(script) => &self.quotas[script as usize],
            ScriptName::Curve => &self.curve,
            ScriptName::Leases => &self.leases,
        }
    }

    fn all(&self) -> impl Iterator<Item = &Script> {
        self.quotas.iter().chain([&self.curve, &self.leases])
    }
}

/// A script that answers the `status` operation of `status.lua`.
fn with_status(script: &str) -> Script {
    Script::new(&[include_str!("status.lua"), script].concat())
}

/// One server through a reconnecting manager, or a cluster.
#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    #[cfg(feature = "redis-cluster")]
    Cluster(::redis::cluster_async::ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(connection) => connection.req_packed_command(cmd),
            #[cfg(feature = "redis-cluster")]
            Self::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(connection) => connection.req_packed_commands(cmd, offset, count),
            #[cfg(feature = "redis-cluster")]
            Self::Cluster(connection) => connection.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(connection) => connection.get_db(),
            #[cfg(feature = "redis-cluster")]
            Self::Cluster(connection) => connection.get_db(),
        }
    }
}

/// What a [`RedisStoreBuilder`] connects to.
#[derive(Debug)]
enum Target {
    /// One server, at this URL.
    Server(String),
    /// A cluster, through any of these nodes (even one): the client learns
    /// the slot map from them and follows `MOVED` and `ASK` redirections.
    #[cfg(feature = "redis-cluster")]
    Cluster(Vec<String>),
}

/// Configures a [`RedisStore`]: made by [`RedisStore::builder`].
///
/// ```no_run
/// use std::time::Duration;
/// use tower_limits::store::RedisStore;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), tower_limits::store::StoreError> {
/// let store = RedisStore::builder("redis://127.0.0.1:6379")
///     .prefix("myapp:limits:")
///     .timeout(Duration::from_millis(50))
///     .connect()
///     .await?;
/// # let _ = store;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "call `connect` to get a store"]
pub struct RedisStoreBuilder {
    target: Target,
    prefix: String,
    timeout: Duration,
}

impl RedisStore {
    /// Starts configuring a store on the server at `url`
    /// (`redis://host:port/db`, `rediss://` for TLS if the `redis` crate
    /// has it).
    ///
    /// ```no_run
    /// use tower_limits::store::RedisStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), tower_limits::store::StoreError> {
    /// let store = RedisStore::builder("redis://127.0.0.1:6379").connect().await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            target: Target::Server(url.into()),
            prefix: DEFAULT_PREFIX.to_owned(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Connects to the server at `url` with the default prefix
    /// (`tower-limits:`) and timeout (250 ms).
    ///
    /// ```no_run
    /// use tower_limits::store::RedisStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), tower_limits::store::StoreError> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::builder(url).connect().await
    }

    /// Starts configuring a store on the Redis Cluster reached through
    /// `nodes` (the URLs of any of its nodes; one is enough). The store
    /// learns the slot map from them, follows `MOVED` and `ASK` when slots
    /// move, and loads its scripts on every node (a node that answers
    /// `NOSCRIPT`, after a restart or a failover, gets them again).
    ///
    /// When a master dies, calls on its slots fail with a [`StoreError`]
    /// (what a [`Failover`](crate::Failover) policy is for) until a replica
    /// takes over; then the store carries on by itself. Redis replicates
    /// asynchronously: grants the dead master had not yet passed to its
    /// replica are forgotten, so right after a failover a limit can admit
    /// up to that many calls too many.
    ///
    /// ```no_run
    /// use tower_limits::store::RedisStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), tower_limits::store::StoreError> {
    /// let nodes = ["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"];
    /// let store = RedisStore::cluster_builder(nodes).connect().await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "redis-cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-cluster")))]
    pub fn cluster_builder(
        nodes: impl IntoIterator<Item = impl Into<String>>,
    ) -> RedisStoreBuilder {
        RedisStoreBuilder {
            target: Target::Cluster(nodes.into_iter().map(Into::into).collect()),
            prefix: DEFAULT_PREFIX.to_owned(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The prefix of every key this store writes.
    ///
    /// ```no_run
    /// use tower_limits::store::RedisStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), tower_limits::store::StoreError> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// assert_eq!(store.prefix(), "tower-limits:");
    /// # Ok(())
    /// # }
    /// ```
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The key of the limit `name`: `{prefix}{name}` with `name` as the
    /// hash tag, which every key of the limit extends.
    fn base_key(&self, name: &str) -> String {
        format!("{}{{{name}}}", self.inner.prefix)
    }

    /// Runs `script` on `keys` with `args`, and reads its reply (an array
    /// of integers) with `parse`. A reply that comes after the caller
    /// stopped waiting goes where `late` says.
    fn run<T: Send + 'static>(
        &self,
        script: ScriptName,
        keys: &[String],
        args: Vec<String>,
        parse: impl FnOnce(&[i64]) -> Result<T, StoreError> + Send + 'static,
        late: Late<T>,
    ) -> LimiterFuture<'static, Result<T, LimiterError>> {
        let inner = Arc::clone(&self.inner);
        let keys = keys.to_vec();
        let work = async move {
            let mut invocation = inner.scripts.get(script).prepare_invoke();
            for key in &keys {
                invocation.key(key.as_str());
            }
            for arg in &args {
                invocation.arg(arg.as_str());
            }
            let mut connection = inner.connection.clone();
            let reply = invocation
                .invoke_async::<Value>(&mut connection)
                .await
                .map_err(store_error)?;
            parse(&integers(reply)?)
        };
        let timeout = self.inner.timeout;
        LimiterFuture::new(async move { Ok(late::answer(BACKEND, timeout, late, work).await?) })
    }
}

impl RedisStoreBuilder {
    /// Prefixes every key with `prefix` (default `tower-limits:`), so that
    /// several applications share one server without sharing limits.
    ///
    /// ```
    /// use tower_limits::store::RedisStore;
    ///
    /// let builder = RedisStore::builder("redis://127.0.0.1:6379").prefix("shop:");
    /// # let _ = builder;
    /// ```
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Gives up on a call after `timeout` (default 250 ms), with a
    /// [`StoreError`] of kind [`Timeout`](StoreErrorKind::Timeout). Connection
    /// attempts use the same timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::RedisStore;
    ///
    /// let builder = RedisStore::builder("redis://127.0.0.1:6379").timeout(Duration::from_millis(50));
    /// # let _ = builder;
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Connects, failing if the server cannot be reached now. Once
    /// connected, the store reconnects by itself whenever the connection
    /// drops.
    ///
    /// ```no_run
    /// use tower_limits::store::RedisStore;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), tower_limits::store::StoreError> {
    /// let store = RedisStore::builder("redis://127.0.0.1:6379").connect().await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(self) -> Result<RedisStore, StoreError> {
        let connecting = self.open();
        let connection = tokio::time::timeout(self.timeout.max(Duration::from_secs(1)), connecting)
            .await
            .map_err(|_| StoreError::timeout(BACKEND, self.timeout))?
            .map_err(store_error)?;
        Ok(RedisStore {
            inner: Arc::new(Inner {
                connection,
                prefix: self.prefix,
                timeout: self.timeout,
                scripts: Scripts::load(),
            }),
        })
    }

    async fn open(&self) -> Result<Connection, RedisError> {
        // Without `redis-cluster`, a server is the only target.
        #[cfg_attr(
            not(feature = "redis-cluster"),
            allow(clippy::infallible_destructuring_match)
        )]
        let url = match &self.target {
            Target::Server(url) => url,
            #[cfg(feature = "redis-cluster")]
            Target::Cluster(nodes) => {
                let client =
                    ::redis::cluster::ClusterClient::builder(nodes.iter().map(String::as_str))
                        .connection_timeout(self.timeout)
                        .response_timeout(late::LATE_ANSWER_BOUND)
                        .build()?;
                return Ok(Connection::Cluster(client.get_async_connection().await?));
            }
        };
        let client = ::redis::Client::open(url.as_str())?;
        // Retry quickly, a few times: a refused first connection fails at
        // once, and a request made while the server is away starts another
        // round, so a restarted server is back in use within a fraction of
        // a second.
        let config = ConnectionManagerConfig::new()
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100))
            .set_number_of_retries(3)
            .set_connection_timeout(Some(self.timeout))
            // A call that may take units waits for its reply after its
            // caller gave up (see `late`): only a bound that long drops one.
            .set_response_timeout(Some(late::LATE_ANSWER_BOUND));
        let manager = ConnectionManager::new_with_config(client, config).await?;
        Ok(Connection::Single(manager))
    }
}

/// The store error for a failed request.
fn store_error(error: RedisError) -> StoreError {
    let kind = if error.is_timeout() {
        StoreErrorKind::Timeout
    } else if error.is_io_error() || error.is_connection_refusal() || error.is_connection_dropped()
    {
        StoreErrorKind::Unavailable
    } else if matches!(
        error.kind(),
        ::redis::ErrorKind::Parse | ::redis::ErrorKind::UnexpectedReturnType
    ) {
        StoreErrorKind::BadReply
    } else {
        StoreErrorKind::Refused
    };
    let error_message = error.to_string();
    let store_error = StoreError::new(BACKEND, kind, error_message);
    if never_ran(&error) {
        store_error.not_applied()
    } else {
        store_error
    }
}

/// Whether the request that failed with `error` surely did not run: it was
/// never sent, or the server refused it before running it.
fn never_ran(error: &RedisError) -> bool {
    use ::redis::{ErrorKind, ServerErrorKind};
    error.is_connection_refusal()
        || match error.kind() {
            ErrorKind::Client
            | ErrorKind::InvalidClientConfig
            | ErrorKind::ClusterConnectionNotFound
            // OOM, BUSY, and the scripts' own refusals of a bad operation,
            // which change nothing.
            | ErrorKind::Extension => true,
            ErrorKind::Server(kind) => !matches!(
                kind,
                ServerErrorKind::ResponseError | ServerErrorKind::ExecAbort
            ),
            _ => false,
        }
}

/// A script's reply, which must be an array of integers.
fn integers(reply: Value) -> Result<Vec<i64>, StoreError> {
    let bad = |reply: &Value| {
        let mut shown = format!("{reply:?}");
        shown.truncate(200);
        StoreError::bad_reply(
            BACKEND,
            format!("expected an array of integers, got {shown}"),
        )
    };
    let Value::Array(items) = &reply else {
        return Err(bad(&reply));
    };
    items
        .iter()
        .map(|item| match item {
            Value::Int(n) => Ok(*n),
            _ => Err(bad(&reply)),
        })
        .collect()
}

/// The `index`th integer of a reply, or a bad-reply error.
fn at(reply: &[i64], index: usize) -> Result<i64, StoreError> {
    reply.get(index).copied().ok_or_else(|| {
        StoreError::bad_reply(
            BACKEND,
            format!("expected at least {} integers, got {reply:?}", index + 1),
        )
    })
}

/// A non-negative integer of a reply, or a bad-reply error.
fn unsigned(reply: &[i64], index: usize) -> Result<u64, StoreError> {
    let value = at(reply, index)?;
    u64::try_from(value).map_err(|_| {
        StoreError::bad_reply(
            BACKEND,
            format!("expected a non-negative integer, got {value}"),
        )
    })
}

/// `[1, ticket]` or `[0, microseconds until retry]`.
fn decision(reply: &[i64]) -> Result<WindowDecision, StoreError> {
    Ok(match at(reply, 0)? {
        1 => WindowDecision::Granted {
            ticket: unsigned(reply, 1)?,
        },
        0 => WindowDecision::Denied {
            retry_at: after(unsigned(reply, 1)?),
        },
        flag => {
            return Err(StoreError::bad_reply(
                BACKEND,
                format!("expected 0 or 1 as a decision, got {flag}"),
            ));
        }
    })
}

/// `[1, microseconds from now]` or `[0]`: an instant, if any.
fn optional_instant(reply: &[i64]) -> Result<Option<Instant>, StoreError> {
    Ok(match at(reply, 0)? {
        0 => None,
        _ => Some(after(unsigned(reply, 1)?)),
    })
}

/// `[1, 0]` (free now) or `[0, microseconds until free]`.
fn blocked(reply: &[i64]) -> Result<Option<Instant>, StoreError> {
    Ok(match decision(reply)? {
        WindowDecision::Granted { .. } => None,
        WindowDecision::Denied { retry_at } => Some(retry_at),
    })
}

/// `[remaining, microseconds until more]`, or `[remaining, -1]` when the
/// whole limit is free: what the `status` operations answer.
fn status_reply(reply: &[i64]) -> Result<(u64, Option<Duration>), StoreError> {
    let remaining = unsigned(reply, 0)?;
    let wait = match at(reply, 1)? {
        -1 => None,
        _ => Some(Duration::from_micros(unsigned(reply, 1)?)),
    };
    Ok((remaining, wait))
}

/// The instant `micros` microseconds from now (rounded late, never early).
fn after(micros: u64) -> Instant {
    Instant::now() + Duration::from_micros(micros)
}

/// Whole microseconds in `duration`, rounded up.
fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000)).unwrap_or(u64::MAX)
}

/// Microseconds from now until `at` (0 if past), rounded up.
fn micros_until(at: Instant) -> u64 {
    micros(at.saturating_duration_since(Instant::now()))
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.inner.prefix)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

/// The keys of one limit in a [`RedisStore`], all in one Cluster slot; made
/// by the store's `quota_key`, `lease_key` and `curve_key`.
///
/// ```no_run
/// use tower_limits::store::{QuotaStore, RedisKey, RedisStore};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), tower_limits::store::StoreError> {
/// let store = RedisStore::builder("redis://127.0.0.1:6379").prefix("app:").connect().await?;
/// let key: RedisKey = store.quota_key("search");
/// assert_eq!(key.parts()[..2], ["app:{search}:quota", "app:{search}:gaps"]);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RedisKey {
    parts: Vec<String>,
}

impl RedisKey {
    fn new(base: &str, parts: &[&str]) -> Self {
        Self {
            parts: parts.iter().map(|part| format!("{base}:{part}")).collect(),
        }
    }

    /// The first key: what logs call the limit.
    fn name(&self) -> &str {
        self.parts.first().map_or("", String::as_str)
    }

    /// The Redis keys of the limit.
    ///
    /// ```no_run
    /// use tower_limits::store::{QuotaStore, RedisStore};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), tower_limits::store::StoreError> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// let key = store.quota_key("crm");
    /// assert_eq!(
    ///     key.parts(),
    ///     [
    ///         "tower-limits:{crm}:quota",
    ///         "tower-limits:{crm}:gaps",
    ///         "tower-limits:{crm}:log",
    ///         "tower-limits:{crm}:state",
    ///     ]
    /// );
    /// # Ok(())
    /// # }
    /// ```
    pub fn parts(&self) -> Vec<&str> {
        self.parts.iter().map(String::as_str).collect()
    }
}

/// A reply that carries nothing.
fn nothing(_: &[i64]) -> Result<(), StoreError> {
    Ok(())
}

/// Arguments for a script, each formatted as Redis expects.
fn args(items: &[&dyn fmt::Display]) -> Vec<String> {
    items.iter().map(ToString::to_string).collect()
}
