//! Where limits that must hold across processes keep their state.
//!
//! A store answers one atomic question per call, "may this key take this
//! cost now, under this policy?", with a grant or "not before T". It never
//! splits a decision into a read and a later write, so it can live in a
//! shared server (Redis: one Lua script; a database: one statement or one
//! transaction) and still hold the limit across processes.
//!
//! # Three store traits, one per kind of state
//!
//! | Trait | State per key | Limiter on top |
//! |---|---|---|
//! | [`QuotaStore`] | a [`Quota`]'s state: GCRA's TAT, a window's counters, a sliding log of starts with the classic backoff; and a pause | [`RateLimiter<S>`](crate::RateLimiter) |
//! | [`LeaseStore`] | leased concurrency slots that expire unless renewed, and a pause | [`LeasedConcurrencyLimiter<S>`](crate::LeasedConcurrencyLimiter) |
//! | [`CurveStore`] (with [`QuotaStore`]) | the rate an adaptive limiter learned, one record written by compare-and-set | [`AdaptiveRateLimiter<SharedPacer<S>>`](crate::limiters::AdaptiveRateLimiterBuilder::build_shared) |
//!
//! [`QuotaStore`] decides GCRA and the token bucket (one algorithm,
//! configured two ways), the fixed window, the sliding window counter and
//! the sliding log with one [`decide`](QuotaStore::decide); refunds and
//! settled costs go through one [`adjust`](QuotaStore::adjust), the classic
//! interface's `record_start` through [`take`](QuotaStore::take).
//!
//! [`MemoryStore`] implements all three and needs no server; its quotas are
//! decided by the crate's algorithms in Rust, so it is the reference the
//! other stores are tested against (one conformance suite runs the same
//! assertions on every store). The others, each behind a cargo feature:
//!
#![cfg_attr(
    feature = "redis",
    doc = "- [`RedisStore`] (feature `redis`): the same state in Redis;"
)]
#![cfg_attr(
    not(feature = "redis"),
    doc = "- `RedisStore` (feature `redis`): the same state in Redis;"
)]
#![cfg_attr(
    feature = "postgres",
    doc = "- [`PostgresStore`] (feature `postgres`): in PostgreSQL,"
)]
#![cfg_attr(
    not(feature = "postgres"),
    doc = "- `PostgresStore` (feature `postgres`): in PostgreSQL,"
)]
//!   one statement per decision on the database's clock;
#![cfg_attr(
    feature = "sqlite",
    doc = "- [`SqliteStore`] (feature `sqlite`): in one SQLite file"
)]
#![cfg_attr(
    not(feature = "sqlite"),
    doc = "- `SqliteStore` (feature `sqlite`): in one SQLite file"
)]
//!   shared by the processes of one machine, one `BEGIN IMMEDIATE`
//!   transaction per decision.
//!
//! # Time
//!
//! Times cross the traits as [`tokio::time::Instant`]s of this process. A
//! store with its own clock (the Redis server's `TIME`, a database's `now()`)
//! decides on that clock alone and converts at the boundary, sending and
//! receiving *durations* ("retry in 40 ms", "pause for 30 s"), so the clocks
//! of the machines sharing a limit never meet in a decision: skew cannot
//! drift the rate.
//!
//! # Concurrency across processes
//!
//! A running call holds a *lease*: a slot that expires after a TTL unless
//! its holder renews it. [`LeasedConcurrencyLimiter`](crate::LeasedConcurrencyLimiter)
//! renews its leases from a background task every third of the TTL and
//! releases them when permits drop, so a crashed process's slots come back
//! by themselves once their TTL passes.
//!
//! # Outages
//!
//! A store that cannot answer returns a [`StoreError`] (unreachable, timed
//! out, garbage reply), never a panic. Wrap a store-backed limiter in a
//! [`Failover`](crate::Failover) to choose what happens then
//! ([`OutagePolicy`](crate::OutagePolicy)): fail closed, fail open, or fall
//! back to an in-memory limiter until the store answers again.
//!
//! A store's timeout bounds how long a caller waits, not the call: a
//! decision whose caller gave up (timed out, or dropped) still runs to its
//! end, for up to 30 s, and a grant nobody took is given back. Refunds wait
//! that long for their answer, and are sent again while the store says a
//! try changed nothing.
//!
//! # Adding a store
//!
//! Implement the three traits (each method is one atomic step on one key),
//! then add the store to `integration/tests/store_conformance.rs`: the suite
//! in `integration/tests/common/conformance.rs` takes any store that
//! implements them.
//!
//! # Example
//!
//! Two limiters with the same name on one store hold one limit:
//!
//! ```
//! use std::time::Duration;
//! use tower_limits::store::MemoryStore;
//! use tower_limits::{Limiter, LimiterExt, RateLimiter};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new();
//! let worker_a = RateLimiter::builder("crm-api", 1, Duration::from_secs(60))
//!     .store(store.clone())
//!     .build()?;
//! let worker_b = RateLimiter::builder("crm-api", 1, Duration::from_secs(60))
//!     .store(store.clone())
//!     .build()?;
//!
//! drop(worker_a.acquire().await?);
//! assert!(!worker_b.can_proceed().await?); // worker A used the shared quota
//! # Ok(())
//! # }
//! ```

pub(crate) mod curve;
mod error;
pub(crate) mod late;
mod lease;
mod memory;
mod memory_curve;
mod memory_lease;
mod memory_open_line;
mod memory_quota;
#[cfg(feature = "postgres")]
mod postgres;
mod quota;
mod quota_state;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sqlite")]
mod sqlite;

use tokio::time::Instant;

pub use crate::algorithms::sliding_log::Backoff;
pub use curve::{CurveRecord, CurveStore};
pub(crate) use error::is_outage;
pub use error::{StoreError, StoreErrorKind};
pub use lease::{LeaseStore, MAX_LEASES};
pub(crate) use lease::{lease_names, names_of_all};
pub use memory::MemoryStore;
pub use memory_curve::MemoryCurveKey;
pub use memory_lease::MemoryLeaseKey;
pub use memory_quota::MemoryQuotaKey;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::{PostgresKey, PostgresStore, PostgresStoreBuilder};
pub use quota::Quota;
pub(crate) use quota::QuotaKind;
pub use quota::QuotaStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::{RedisKey, RedisStore, RedisStoreBuilder};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use sqlite::{SqliteKey, SqliteStore, SqliteStoreBuilder};

/// A store's answer to [`QuotaStore::decide`] (and to
/// [`LeaseStore::lease`]).
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::store::{MemoryStore, Quota, QuotaStore, WindowDecision};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let quota = Quota::sliding_log(1, Duration::from_secs(60))?;
/// let key = store.quota_key("api");
///
/// let start = Instant::now();
/// let describe = |decision| match decision {
///     WindowDecision::Granted { .. } => "granted".to_owned(),
///     WindowDecision::Denied { retry_at } => format!("retry in {:?}", retry_at - start),
/// };
/// assert_eq!(describe(store.decide(&key, &quota, 1).await?), "granted");
/// assert_eq!(describe(store.decide(&key, &quota, 1).await?), "retry in 60s");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowDecision {
    /// The cost was taken; `ticket` identifies the grant for
    /// [`QuotaStore::adjust`] (a lease, for [`LeaseStore::release`]).
    Granted {
        /// Identifies the grant.
        ticket: u64,
    },
    /// The window is full or a pause is in force until `retry_at`.
    Denied {
        /// The earliest instant at which a start may be granted.
        retry_at: Instant,
    },
}
