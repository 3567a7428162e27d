//! [`LeaseStore`]: concurrency slots leased for a TTL, shared by processes.

use std::time::Duration;

use tokio::time::Instant;

use super::WindowDecision;
use crate::error::{CostTooHigh, LimiterError};
use crate::limiter::LimiterFuture;

/// The most leases one call may hold, and so the largest `max` of a
/// [`LeasedConcurrencyLimiter`](crate::LeasedConcurrencyLimiter). Each unit
/// of a call's cost is one lease, one entry in the store: a store refuses a
/// larger cost with [`CostTooHigh`] rather than spend memory and bandwidth in
/// proportion to a number it was given.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::store::{LeaseStore, MemoryStore, MAX_LEASES};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MemoryStore::new();
/// let key = store.lease_key("gpu");
/// let ttl = Duration::from_secs(10);
/// assert!(store.lease(&key, u32::MAX, ttl, 1, MAX_LEASES).await.is_ok());
/// assert!(store.lease(&key, u32::MAX, ttl, 1, MAX_LEASES + 1).await.is_err());
/// # }
/// ```
pub const MAX_LEASES: u32 = 10_000;

/// The names of the `cost` leases from `lease` (`lease..lease + cost`,
/// wrapping), or [`CostTooHigh`] past [`MAX_LEASES`].
pub(crate) fn lease_names(lease: u64, cost: u32) -> Result<Vec<u64>, LimiterError> {
    CostTooHigh::check(cost, MAX_LEASES)?;
    Ok((0..u64::from(cost))
        .map(|k| lease.wrapping_add(k))
        .collect())
}

/// The names of every lease of `leases` (each `(lease, cost)` as granted).
pub(crate) fn names_of_all(leases: &[(u64, u32)]) -> Result<Vec<u64>, LimiterError> {
    let mut names = Vec::new();
    for &(lease, cost) in leases {
        names.extend(lease_names(lease, cost)?);
    }
    Ok(names)
}

/// A store of leased concurrency slots: the backing state of a
/// [`LeasedConcurrencyLimiter`](crate::LeasedConcurrencyLimiter).
///
/// A lease is a slot held until it is released or its TTL passes without a
/// renewal, so slots held by a process that crashed come back by themselves.
/// A lease is named by a `u64` its holder picks at random; a call costing
/// `n` holds `n` leases, named `lease..lease + n`, at most [`MAX_LEASES`]
/// (a larger cost is a [`CostTooHigh`] error). Every method is one
/// atomic step on one key; its future does nothing until polled.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::store::{LeaseStore, MemoryStore, WindowDecision};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let key = store.lease_key("gpu");
/// let ttl = Duration::from_secs(10);
/// assert!(matches!(store.lease(&key, 1, ttl, 7, 1).await?, WindowDecision::Granted { .. }));
/// assert!(matches!(store.lease(&key, 1, ttl, 8, 1).await?, WindowDecision::Denied { .. }));
///
/// tokio::time::advance(ttl).await; // the holder crashed: nobody renewed
/// assert!(matches!(store.lease(&key, 1, ttl, 8, 1).await?, WindowDecision::Granted { .. }));
/// # Ok(())
/// # }
/// ```
pub trait LeaseStore: Send + Sync + 'static {
    /// A key prepared for this store, made once per limiter by
    /// [`lease_key`](LeaseStore::lease_key).
    ///
    /// ```
    /// use tower_limits::store::{LeaseStore, MemoryLeaseKey, MemoryStore};
    ///
    /// let key: MemoryLeaseKey = MemoryStore::new().lease_key("gpu");
    /// # let _ = key;
    /// ```
    type LeaseKey: Send + Sync + 'static;

    /// Prepares the key of the concurrency limit called `name`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{LeaseStore, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// store.lease(&store.lease_key("gpu"), 4, Duration::from_secs(10), 1, 1).await?;
    /// assert_eq!(store.leases_held(&store.lease_key("gpu")).await?, 1);
    /// assert_eq!(store.leases_held(&store.lease_key("cpu")).await?, 0);
    /// # Ok(())
    /// # }
    /// ```
    fn lease_key(&self, name: &str) -> Self::LeaseKey;

    /// The atomic decision: if no pause is in force and at most
    /// `max - cost` unexpired leases are held, takes the `cost` leases named
    /// from `lease` for `ttl` and grants (the ticket is `lease`); otherwise
    /// takes nothing and names when to look again (the pause's end, or the
    /// earliest expiry of a lease held).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{LeaseStore, MemoryStore, WindowDecision};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let key = store.lease_key("db");
    /// let ttl = Duration::from_secs(10);
    /// let granted = store.lease(&key, 3, ttl, 100, 2).await?;
    /// assert_eq!(granted, WindowDecision::Granted { ticket: 100 });
    /// assert!(matches!(store.lease(&key, 3, ttl, 200, 2).await?, WindowDecision::Denied { .. }));
    /// # Ok(())
    /// # }
    /// ```
    fn lease<'a>(
        &'a self,
        key: &'a Self::LeaseKey,
        max: u32,
        ttl: Duration,
        lease: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>>;

    /// Extends the unexpired leases among `leases` (each `(lease, cost)` as
    /// granted) to `ttl` from now; answers how many leases it extended
    /// (fewer than asked means some had expired and were lost).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{LeaseStore, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let key = store.lease_key("db");
    /// let ttl = Duration::from_secs(10);
    /// store.lease(&key, 1, ttl, 5, 1).await?;
    /// tokio::time::advance(Duration::from_secs(8)).await;
    /// assert_eq!(store.renew(&key, ttl, &[(5, 1)]).await?, 1);
    /// tokio::time::advance(Duration::from_secs(8)).await; // 16 s in: renewed, still held
    /// assert_eq!(store.leases_held(&key).await?, 1);
    /// # Ok(())
    /// # }
    /// ```
    fn renew<'a>(
        &'a self,
        key: &'a Self::LeaseKey,
        ttl: Duration,
        leases: &'a [(u64, u32)],
    ) -> LimiterFuture<'a, Result<usize, LimiterError>>;

    /// Gives back the `cost` leases named from `lease`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{LeaseStore, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let key = store.lease_key("db");
    /// store.lease(&key, 1, Duration::from_secs(10), 5, 1).await?;
    /// store.release(&key, 5, 1).await?;
    /// assert_eq!(store.leases_held(&key).await?, 0);
    /// # Ok(())
    /// # }
    /// ```
    fn release<'a>(
        &'a self,
        key: &'a Self::LeaseKey,
        lease: u64,
        cost: u32,
    ) -> LimiterFuture<'a, Result<(), LimiterError>>;

    /// How many unexpired leases are held.
    ///
    /// ```
    /// use tower_limits::store::{LeaseStore, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// assert_eq!(store.leases_held(&store.lease_key("db")).await?, 0);
    /// # Ok(())
    /// # }
    /// ```
    fn leases_held<'a>(
        &'a self,
        key: &'a Self::LeaseKey,
    ) -> LimiterFuture<'a, Result<usize, LimiterError>>;

    /// No lease is granted before `at`; never shortens a pause in force.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::store::{LeaseStore, MemoryStore, WindowDecision};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let key = store.lease_key("db");
    /// let retry_at = Instant::now() + Duration::from_secs(30);
    /// store.pause_leases(&key, retry_at).await?;
    /// let ttl = Duration::from_secs(10);
    /// assert_eq!(store.lease(&key, 1, ttl, 1, 1).await?, WindowDecision::Denied { retry_at });
    /// assert_eq!(store.paused_until(&key).await?, Some(retry_at));
    /// # Ok(())
    /// # }
    /// ```
    fn pause_leases<'a>(
        &'a self,
        key: &'a Self::LeaseKey,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>>;

    /// The end of the pause in force, if any.
    ///
    /// ```
    /// use tower_limits::store::{LeaseStore, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// assert_eq!(store.paused_until(&store.lease_key("db")).await?, None);
    /// # Ok(())
    /// # }
    /// ```
    fn paused_until<'a>(
        &'a self,
        key: &'a Self::LeaseKey,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>>;

    /// Drops every lease and the pause of `key`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{LeaseStore, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let key = store.lease_key("db");
    /// store.lease(&key, 1, Duration::from_secs(10), 5, 1).await?;
    /// store.clear_leases(&key).await?;
    /// assert_eq!(store.leases_held(&key).await?, 0);
    /// # Ok(())
    /// # }
    /// ```
    fn clear_leases<'a>(
        &'a self,
        key: &'a Self::LeaseKey,
    ) -> LimiterFuture<'a, Result<(), LimiterError>>;
}
