//! Where limits that must hold across processes keep their state.
//!
//! A store answers one atomic question per call, "may this key take this
//! cost now, under this policy?", with a grant or "not before T". It never
//! splits a decision into a read and a later write, so it can live in a
//! shared server (Redis: one Lua script; a database: one statement or one
//! transaction) and still hold the limit across processes.
//!
//! # Four store traits, one per kind of state
//!
//! | Trait | State per key | Limiter on top |
//! |---|---|---|
//! | [`RateLimiterStore`] | a sliding log of starts, the classic backoff and pause | [`RateLimiter<S>`](crate::RateLimiter) |
//! | [`QuotaStore`] | a [`Quota`]'s few numbers (GCRA's TAT, a window's counters) and a pause | [`SharedLimiter<S>`](crate::SharedLimiter) |
//! | [`LeaseStore`] | leased concurrency slots that expire unless renewed, and a pause | [`LeasedConcurrencyLimiter<S>`](crate::LeasedConcurrencyLimiter) |
//! | [`CurveStore`] (with [`QuotaStore`]) | the rate an adaptive limiter learned, one record written by compare-and-set | [`AdaptiveRateLimiter<SharedPacer<S>>`](crate::limiters::AdaptiveRateLimiterBuilder::build_shared) |
//!
//! [`RateLimiterStore`] also has the classic storage operations (record an
//! execution, count executions, the oldest execution at an offset, the next
//! available time, clear, set up). [`QuotaStore`] decides GCRA and the token
//! bucket (one algorithm, configured two ways), the fixed window and the
//! sliding window counter with one [`decide`](QuotaStore::decide); refunds
//! and settled costs go through one [`adjust`](QuotaStore::adjust).
//!
//! [`MemoryStore`] implements all four and needs no server; its quotas are
//! decided by the crate's in-memory limiters, so it is the reference the
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
//! Implement the four traits (each method is one atomic step on one key),
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
mod memory_quota;
#[cfg(feature = "postgres")]
mod postgres;
mod quota;
mod quota_state;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::time::Duration;

use tokio::time::Instant;

use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::quota_status::QuotaStatus;

pub use crate::algorithms::sliding_log::Backoff;
pub use curve::{CurveRecord, CurveStore};
pub(crate) use error::is_outage;
pub use error::{StoreError, StoreErrorKind};
pub use lease::{LeaseStore, MAX_LEASES};
pub(crate) use lease::{lease_names, names_of_all};
pub use memory::{MemoryKey, MemoryStore};
pub use memory_curve::MemoryCurveKey;
pub use memory_lease::MemoryLeaseKey;
pub use memory_quota::MemoryQuotaKey;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::{PostgresKey, PostgresStore, PostgresStoreBuilder};
pub use quota::Quota;
#[cfg(any(feature = "redis", feature = "postgres", feature = "sqlite"))]
pub(crate) use quota::QuotaKind;
pub use quota::QuotaStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::{RedisKey, RedisStore, RedisStoreBuilder};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use sqlite::{SqliteKey, SqliteStore, SqliteStoreBuilder};

/// The backing state of a sliding-window [`RateLimiter`](crate::RateLimiter).
///
/// Each method acts on one key (a named limit) in one atomic step. The
/// in-memory implementation is [`MemoryStore`].
///
/// [`RateLimiter`](crate::RateLimiter) is the usual caller; the store can
/// also be used directly, with a policy taken from a built limiter:
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::RateLimiter;
/// use tower_limits::store::{MemoryStore, RateLimiterStore, WindowDecision};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RateLimiter::builder("reports", 1, Duration::from_secs(10))
///     .without_backoff()
///     .build()?;
/// let policy = limiter.policy();
///
/// let store = MemoryStore::new();
/// let key = store.key("reports");
/// let start = Instant::now();
/// let WindowDecision::Granted { ticket } = store.acquire(&key, policy, 1, 0.0).await? else {
///     unreachable!("the window is empty");
/// };
/// let retry_at = start + Duration::from_secs(10);
/// assert_eq!(store.acquire(&key, policy, 1, 0.0).await?, WindowDecision::Denied { retry_at });
///
/// store.refund(&key, policy, ticket, 1).await?; // the start never happened
/// assert_eq!(store.execution_count(&key, policy.window()).await?, 0);
/// # Ok(())
/// # }
/// ```
pub trait RateLimiterStore: Send + Sync + 'static {
    /// A key prepared for this store (hashed, namespaced, or resolved to
    /// its state), made once per limiter by [`key`](RateLimiterStore::key).
    ///
    /// ```
    /// use tower_limits::store::{MemoryKey, MemoryStore, RateLimiterStore};
    ///
    /// /// Prepares the keys of several limits at once, for any store.
    /// fn keys<S: RateLimiterStore>(store: &S, names: &[&str]) -> Vec<S::Key> {
    ///     names.iter().map(|name| store.key(name)).collect()
    /// }
    ///
    /// let keys: Vec<MemoryKey> = keys(&MemoryStore::new(), &["search", "upload"]);
    /// assert_eq!(keys.len(), 2);
    /// ```
    type Key: Send + Sync + 'static;

    /// Prepares the key for the limit called `name`. Limiters with the same
    /// name on the same store share one window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, RateLimiterStore};
    /// use tower_limits::{Limiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let limiter = RateLimiter::builder("geocoder", 10, Duration::from_secs(1))
    ///     .store(store.clone())
    ///     .build()?;
    /// limiter.record_start().await?;
    ///
    /// let window = Duration::from_secs(1);
    /// assert_eq!(store.execution_count(&store.key("geocoder"), window).await?, 1);
    /// assert_eq!(store.execution_count(&store.key("other"), window).await?, 0);
    /// # Ok(())
    /// # }
    /// ```
    fn key(&self, name: &str) -> Self::Key;

    /// Creates whatever the store needs (tables, scripts); the classic
    /// `setupDatabase`. Idempotent.
    ///
    /// Run it once at start-up, before the first limiter uses the store.
    /// [`MemoryStore`] needs nothing set up.
    ///
    /// ```
    /// use tower_limits::store::{MemoryStore, RateLimiterStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_limits::error::LimiterError> {
    /// let store = MemoryStore::new();
    /// store.setup().await?;
    /// store.setup().await?; // idempotent
    /// let window = std::time::Duration::from_secs(1);
    /// assert_eq!(store.execution_count(&store.key("api"), window).await?, 0);
    /// # Ok(())
    /// # }
    /// ```
    fn setup(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }

    /// The atomic decision for a call costing `cost` starts: denies until the
    /// pause ends, or until enough starts leave the window for `cost` more to
    /// fit; otherwise records `cost` starts, resets the backoff, and, if the
    /// window is now full, applies the policy's backoff (see [`Backoff`])
    /// using `jitter` (uniform in `[0, 1)`). The caller checks that `cost`
    /// is at most `max_executions`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::RateLimiter;
    /// use tower_limits::store::{RateLimiterStore, WindowDecision};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // One start per second; default backoff: 1 s initial, ×2.
    /// let limiter = RateLimiter::builder("api", 1, Duration::from_secs(1)).build()?;
    /// let (store, policy) = (limiter.store(), limiter.policy());
    /// let key = store.key(limiter.name());
    ///
    /// let start = Instant::now();
    /// let granted = store.acquire(&key, policy, 1, 0.5).await?;
    /// assert!(matches!(granted, WindowDecision::Granted { .. }));
    /// // That start filled the window: a 2 s backoff, stretched by jitter 0.5 to 3 s.
    /// let retry_at = start + Duration::from_secs(3);
    /// assert_eq!(store.acquire(&key, policy, 1, 0.5).await?, WindowDecision::Denied { retry_at });
    /// # Ok(())
    /// # }
    /// ```
    fn acquire<'a>(
        &'a self,
        key: &'a Self::Key,
        policy: WindowPolicy,
        cost: u32,
        jitter: f64,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>>;

    /// Records a start whether or not the window had room, then applies the
    /// backoff if the window is full (`record_start`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    /// use tower_limits::store::RateLimiterStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 1, Duration::from_secs(60))
    ///     .without_backoff()
    ///     .build()?;
    /// let (store, policy) = (limiter.store(), limiter.policy());
    /// let key = store.key(limiter.name());
    ///
    /// store.record_execution(&key, policy, 0.0).await?;
    /// store.record_execution(&key, policy, 0.0).await?; // over the limit, still recorded
    /// assert_eq!(store.execution_count(&key, policy.window()).await?, 2);
    /// # Ok(())
    /// # }
    /// ```
    fn record_execution<'a>(
        &'a self,
        key: &'a Self::Key,
        policy: WindowPolicy,
        jitter: f64,
    ) -> LimiterFuture<'a, Result<(), LimiterError>>;

    /// Erases the `cost` starts recorded with `ticket`. If the window is then no
    /// longer full, the last backoff (set because it was full) is undone,
    /// unless a pause was set from outside since.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    /// use tower_limits::store::{RateLimiterStore, WindowDecision};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 1, Duration::from_secs(1)).build()?;
    /// let (store, policy) = (limiter.store(), limiter.policy());
    /// let key = store.key(limiter.name());
    ///
    /// let WindowDecision::Granted { ticket } = store.acquire(&key, policy, 1, 0.0).await? else {
    ///     unreachable!("the window is empty");
    /// };
    /// assert!(store.peek(&key, policy, 1).await?.is_some()); // full, backing off
    ///
    /// store.refund(&key, policy, ticket, 1).await?;
    /// assert_eq!(store.peek(&key, policy, 1).await?, None); // start and backoff undone
    /// # Ok(())
    /// # }
    /// ```
    fn refund<'a>(
        &'a self,
        key: &'a Self::Key,
        policy: WindowPolicy,
        ticket: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>>;

    /// Turns the `from` starts recorded with `ticket` into `to` starts, once
    /// a call's real cost is known: fewer erases the difference, more records
    /// the extra starts at the ticket's time, even past the limit.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    /// use tower_limits::store::{RateLimiterStore, WindowDecision};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(1))
    ///     .without_backoff()
    ///     .build()?;
    /// let (store, policy) = (limiter.store(), limiter.policy());
    /// let key = store.key(limiter.name());
    /// let WindowDecision::Granted { ticket } = store.acquire(&key, policy, 8, 0.0).await? else {
    ///     unreachable!()
    /// };
    /// store.settle(&key, policy, ticket, 8, 3).await?;
    /// assert_eq!(store.execution_count(&key, policy.window()).await?, 3);
    /// store.settle(&key, policy, ticket, 3, 12).await?;
    /// assert_eq!(store.execution_count(&key, policy.window()).await?, 12);
    /// # Ok(())
    /// # }
    /// ```
    fn settle<'a>(
        &'a self,
        key: &'a Self::Key,
        policy: WindowPolicy,
        ticket: u64,
        from: u32,
        to: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>>;

    /// The atomic peek: `None` if [`acquire`](RateLimiterStore::acquire)
    /// would grant `cost` now, otherwise the instant it names (the later of the
    /// pause and the full window freeing a place). Records nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::{Limiter, RateLimiter};
    /// use tower_limits::store::RateLimiterStore;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 1, Duration::from_secs(10))
    ///     .without_backoff()
    ///     .build()?;
    /// let (store, policy) = (limiter.store(), limiter.policy());
    /// let key = store.key(limiter.name());
    /// assert_eq!(store.peek(&key, policy, 1).await?, None); // would grant now
    ///
    /// let start = Instant::now();
    /// limiter.record_start().await?;
    /// let frees_at = start + Duration::from_secs(10);
    /// assert_eq!(store.peek(&key, policy, 1).await?, Some(frees_at));
    /// // Peeking recorded nothing.
    /// assert_eq!(store.execution_count(&key, policy.window()).await?, 1);
    /// # Ok(())
    /// # }
    /// ```
    fn peek<'a>(
        &'a self,
        key: &'a Self::Key,
        policy: WindowPolicy,
        cost: u32,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>>;

    /// The window under `policy` as it stands, from one reading of its
    /// state (one round trip): the policy's limit and window, how many
    /// starts [`acquire`](RateLimiterStore::acquire) would grant now (none
    /// during a pause or a backoff) and how long until it would grant more.
    /// What a [`RateLimiter`](crate::RateLimiter)'s
    /// [`quota_status`](crate::Limiter::quota_status) answers.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{Limiter, RateLimiter};
    /// use tower_limits::store::RateLimiterStore;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 3, Duration::from_secs(10))
    ///     .without_backoff()
    ///     .build()?;
    /// let (store, policy) = (limiter.store(), limiter.policy());
    /// let key = store.key(limiter.name());
    /// limiter.record_start().await?;
    ///
    /// let status = store.window_status(&key, policy).await?;
    /// assert_eq!((status.limit(), status.remaining()), (3, 2));
    /// assert_eq!(status.refill_in(), Some(Duration::from_secs(10)));
    /// # Ok(())
    /// # }
    /// ```
    fn window_status<'a>(
        &'a self,
        key: &'a Self::Key,
        policy: WindowPolicy,
    ) -> LimiterFuture<'a, Result<QuotaStatus, LimiterError>>;

    /// How many starts fall within the last `window`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{Limiter, RateLimiter};
    /// use tower_limits::store::RateLimiterStore;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(60)).build()?;
    /// let store = limiter.store();
    /// let key = store.key(limiter.name());
    ///
    /// limiter.record_start().await?;
    /// tokio::time::advance(Duration::from_secs(5)).await;
    /// limiter.record_start().await?;
    /// assert_eq!(store.execution_count(&key, Duration::from_secs(60)).await?, 2);
    /// assert_eq!(store.execution_count(&key, Duration::from_secs(2)).await?, 1);
    /// # Ok(())
    /// # }
    /// ```
    fn execution_count<'a>(
        &'a self,
        key: &'a Self::Key,
        window: Duration,
    ) -> LimiterFuture<'a, Result<usize, LimiterError>>;

    /// Among the starts within the last `window`, oldest first, the one at
    /// position `offset`, if any.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::{Limiter, RateLimiter};
    /// use tower_limits::store::RateLimiterStore;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(60)).build()?;
    /// let store = limiter.store();
    /// let key = store.key(limiter.name());
    ///
    /// let start = Instant::now();
    /// for _ in 0..3 {
    ///     limiter.record_start().await?; // at 0 s, 1 s and 2 s
    ///     tokio::time::advance(Duration::from_secs(1)).await;
    /// }
    /// let minute = Duration::from_secs(60);
    /// let second = Duration::from_secs(1);
    /// assert_eq!(store.oldest_execution_at_offset(&key, minute, 0).await?, Some(start));
    /// assert_eq!(
    ///     store.oldest_execution_at_offset(&key, minute, 2).await?,
    ///     Some(start + 2 * second)
    /// );
    /// assert_eq!(store.oldest_execution_at_offset(&key, minute, 3).await?, None);
    /// // Within the last 2 s (now is 3 s) only the start at 2 s remains.
    /// assert_eq!(
    ///     store.oldest_execution_at_offset(&key, 2 * second, 0).await?,
    ///     Some(start + 2 * second)
    /// );
    /// # Ok(())
    /// # }
    /// ```
    fn oldest_execution_at_offset<'a>(
        &'a self,
        key: &'a Self::Key,
        window: Duration,
        offset: usize,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>>;

    /// The end of the pause in force, if any.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::{Limiter, RateLimiter};
    /// use tower_limits::store::RateLimiterStore;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(60)).build()?;
    /// let store = limiter.store();
    /// let key = store.key(limiter.name());
    /// assert_eq!(store.next_available(&key).await?, None);
    ///
    /// let resume = Instant::now() + Duration::from_secs(30);
    /// limiter.set_next_available_time(resume).await?;
    /// assert_eq!(store.next_available(&key).await?, Some(resume));
    ///
    /// tokio::time::advance(Duration::from_secs(30)).await;
    /// assert_eq!(store.next_available(&key).await?, None); // the pause is over
    /// # Ok(())
    /// # }
    /// ```
    fn next_available<'a>(
        &'a self,
        key: &'a Self::Key,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>>;

    /// Extends the pause to `at`; never shortens it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::RateLimiter;
    /// use tower_limits::store::RateLimiterStore;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(60)).build()?;
    /// let store = limiter.store();
    /// let key = store.key(limiter.name());
    ///
    /// let now = Instant::now();
    /// store.set_next_available(&key, now + Duration::from_secs(30)).await?;
    /// store.set_next_available(&key, now + Duration::from_secs(10)).await?; // ignored
    /// assert_eq!(store.next_available(&key).await?, Some(now + Duration::from_secs(30)));
    /// # Ok(())
    /// # }
    /// ```
    fn set_next_available<'a>(
        &'a self,
        key: &'a Self::Key,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>>;

    /// Forgets every start, the pause and the backoff of `key`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{Limiter, RateLimiter};
    /// use tower_limits::store::RateLimiterStore;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 1, Duration::from_secs(60)).build()?;
    /// let (store, policy) = (limiter.store(), limiter.policy());
    /// let key = store.key(limiter.name());
    /// limiter.record_start().await?; // fills the window and backs off
    /// assert!(store.next_available(&key).await?.is_some());
    ///
    /// store.clear(&key).await?;
    /// assert_eq!(store.execution_count(&key, policy.window()).await?, 0);
    /// assert_eq!(store.next_available(&key).await?, None);
    /// assert!(limiter.can_proceed().await?);
    /// # Ok(())
    /// # }
    /// ```
    fn clear<'a>(&'a self, key: &'a Self::Key) -> LimiterFuture<'a, Result<(), LimiterError>>;
}

/// A store's answer to [`RateLimiterStore::acquire`].
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::RateLimiter;
/// use tower_limits::store::{RateLimiterStore, WindowDecision};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RateLimiter::builder("api", 1, Duration::from_secs(60))
///     .without_backoff()
///     .build()?;
/// let (store, policy) = (limiter.store(), limiter.policy());
/// let key = store.key(limiter.name());
///
/// let start = Instant::now();
/// let describe = |decision| match decision {
///     WindowDecision::Granted { .. } => "granted".to_owned(),
///     WindowDecision::Denied { retry_at } => format!("retry in {:?}", retry_at - start),
/// };
/// assert_eq!(describe(store.acquire(&key, policy, 1, 0.0).await?), "granted");
/// assert_eq!(describe(store.acquire(&key, policy, 1, 0.0).await?), "retry in 60s");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowDecision {
    /// A start was recorded; `ticket` identifies it for
    /// [`RateLimiterStore::refund`].
    Granted {
        /// Identifies the recorded start.
        ticket: u64,
    },
    /// The window is full or a pause is in force until `retry_at`.
    Denied {
        /// The earliest instant at which a start may be granted.
        retry_at: Instant,
    },
}

/// The rules of a sliding window: at most `max_executions` starts in any
/// `window`, with an optional [`Backoff`]. Built by
/// [`RateLimiter::builder`](crate::RateLimiter::builder), which validates it.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::RateLimiter;
///
/// # fn main() -> Result<(), tower_limits::error::ConfigError> {
/// let limiter = RateLimiter::builder("api", 100, Duration::from_secs(60)).build()?;
/// let policy = limiter.policy();
/// assert_eq!(policy.max_executions(), 100);
/// assert_eq!(policy.window(), Duration::from_secs(60));
/// assert!(policy.backoff().is_some()); // on by default
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowPolicy {
    pub(crate) max_executions: u32,
    pub(crate) window: Duration,
    pub(crate) backoff: Option<Backoff>,
}

impl WindowPolicy {
    /// Most starts in any window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::builder("api", 25, Duration::from_secs(1)).build()?;
    /// assert_eq!(limiter.policy().max_executions(), 25);
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_executions(&self) -> u32 {
        self.max_executions
    }

    /// [`max_executions`](Self::max_executions) as a count of units.
    pub(crate) fn max_units(&self) -> u64 {
        u64::from(self.max_executions)
    }

    /// The status of a window under this policy with `remaining` starts
    /// left, and more after `refill_in`.
    pub(crate) fn status(&self, remaining: u64, refill_in: Option<Duration>) -> QuotaStatus {
        QuotaStatus::new(self.max_units(), self.window, remaining, refill_in)
    }

    /// The window's length.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::builder("api", 25, Duration::from_secs(3600)).build()?;
    /// assert_eq!(limiter.policy().window(), Duration::from_secs(3600));
    /// # Ok(())
    /// # }
    /// ```
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The backoff applied when the window fills, if any.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let with = RateLimiter::builder("api", 25, Duration::from_secs(1)).build()?;
    /// let max = with.policy().backoff().map(|backoff| backoff.max());
    /// assert_eq!(max, Some(Duration::from_secs(600)));
    ///
    /// let without = RateLimiter::builder("api", 25, Duration::from_secs(1))
    ///     .without_backoff()
    ///     .build()?;
    /// assert!(without.policy().backoff().is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub fn backoff(&self) -> Option<&Backoff> {
        self.backoff.as_ref()
    }
}
