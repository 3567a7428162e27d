//! [`CurveStore`]: the rate an [`AdaptiveRateLimiter`] learned, shared by
//! the processes that pace through one store.
//!
//! [`AdaptiveRateLimiter`]: crate::AdaptiveRateLimiter

use std::time::Duration;

use super::QuotaStore;
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;

/// How long a shared curve outlives its last write.
#[cfg_attr(
    not(any(feature = "redis", feature = "postgres", feature = "sqlite")),
    allow(dead_code)
)]
pub(crate) const CURVE_TTL: Duration = Duration::from_secs(86_400);

/// A shared adaptive rate as a store keeps it: a version, bumped by every
/// write, and six whole numbers (the curve's plateau, how long it holds
/// it, its start, the end of the last overload, the upstream's burst or
/// last refusal, and a stated quota, in micro-units, microseconds and Unix
/// microseconds) that only the limiter reads. Every
/// word fits in 53 bits, so a script that stores numbers as doubles keeps
/// them exact.
///
/// ```
/// use tower_limits::store::CurveRecord;
///
/// let record = CurveRecord::from_words(3, [20_000_000, 2_000_000, 1_700_000_000_000_000, 0, 0, 0]);
/// assert_eq!(record.version(), 3);
/// assert_eq!(CurveRecord::from_words(record.version(), record.words()), record);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CurveRecord {
    version: u64,
    words: [i64; 6],
}

impl CurveRecord {
    /// A record as a store read it back.
    ///
    /// ```
    /// use tower_limits::store::CurveRecord;
    ///
    /// assert_eq!(CurveRecord::from_words(1, [0; 6]).words(), [0; 6]);
    /// ```
    pub fn from_words(version: u64, words: [i64; 6]) -> Self {
        Self { version, words }
    }

    /// The version: 0 for a curve no store has yet; each write adds one.
    ///
    /// ```
    /// use tower_limits::store::CurveRecord;
    ///
    /// assert_eq!(CurveRecord::from_words(7, [0; 6]).version(), 7);
    /// ```
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The six words to store.
    ///
    /// ```
    /// use tower_limits::store::CurveRecord;
    ///
    /// assert_eq!(CurveRecord::from_words(1, [1, 2, 3, 4, 5, 6]).words()[5], 6);
    /// ```
    pub fn words(&self) -> [i64; 6] {
        self.words
    }

    /// The same curve, written over `version`.
    pub(crate) fn over(self, version: u64) -> Self {
        Self { version, ..self }
    }

    /// A store's answer to a load: `[version, w1 .. w6]`, or `[0]` for none.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn from_reply(reply: &[i64]) -> Result<Option<Self>, String> {
        match reply {
            [0] => Ok(None),
            [version, words @ ..] if *version > 0 => {
                let words = <[i64; 6]>::try_from(words)
                    .map_err(|_| format!("expected a curve record, got {reply:?}"))?;
                Ok(Some(Self::from_words(version.unsigned_abs(), words)))
            }
            _ => Err(format!("expected a curve record, got {reply:?}")),
        }
    }

    /// The arguments of a store's compare-and-set: `[version, w1 .. w6]`.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn to_args(self) -> [i64; 7] {
        let [w1, w2, w3, w4, w5, w6] = self.words;
        let version = i64::try_from(self.version).unwrap_or(i64::MAX);
        [version, w1, w2, w3, w4, w5, w6]
    }
}

/// A store that shares the rate an
/// [`AdaptiveRateLimiter`](crate::AdaptiveRateLimiter) learned, so that the
/// processes pacing through one store learn it together: one refusal slows
/// them all, once. Reads and compare-and-set writes of one small record
/// per name; the pacing itself is a GCRA quota ([`QuotaStore`]).
///
/// ```
/// use tower_limits::store::{CurveRecord, CurveStore, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let key = store.curve_key("search-api");
/// assert_eq!(store.load_curve(&key).await?, None);
/// let first = CurveRecord::from_words(0, [1; 6]);
/// assert!(store.swap_curve(&key, first).await?); // written as version 1
/// assert!(!store.swap_curve(&key, first).await?); // version 0 is gone
/// assert_eq!(store.load_curve(&key).await?.map(|record| record.version()), Some(1));
/// # Ok(())
/// # }
/// ```
pub trait CurveStore: QuotaStore {
    /// A key prepared for this store, made once per limiter by
    /// [`curve_key`](CurveStore::curve_key).
    ///
    /// ```
    /// use tower_limits::store::{CurveStore, MemoryStore};
    ///
    /// let key = MemoryStore::new().curve_key("search-api");
    /// # let _ = key;
    /// ```
    type CurveKey: Send + Sync + 'static;

    /// Prepares the key of the shared rate called `name`.
    ///
    /// ```
    /// use tower_limits::store::{CurveStore, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// assert_eq!(store.load_curve(&store.curve_key("a")).await?, None);
    /// # Ok(())
    /// # }
    /// ```
    fn curve_key(&self, name: &str) -> Self::CurveKey;

    /// The record of `key`, or `None` if nobody wrote one (or it expired).
    ///
    /// ```
    /// use tower_limits::store::{CurveRecord, CurveStore, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let key = store.curve_key("a");
    /// store.swap_curve(&key, CurveRecord::from_words(0, [5; 6])).await?;
    /// assert_eq!(store.load_curve(&key).await?, Some(CurveRecord::from_words(1, [5; 6])));
    /// # Ok(())
    /// # }
    /// ```
    fn load_curve<'a>(
        &'a self,
        key: &'a Self::CurveKey,
    ) -> LimiterFuture<'a, Result<Option<CurveRecord>, LimiterError>>;

    /// Writes `record`'s words as version `record.version() + 1` if the
    /// stored version is still `record.version()` (0: none stored); true if
    /// it wrote. Idle records expire (a day without a write).
    ///
    /// ```
    /// use tower_limits::store::{CurveRecord, CurveStore, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let key = store.curve_key("a");
    /// assert!(!store.swap_curve(&key, CurveRecord::from_words(4, [0; 6])).await?);
    /// # Ok(())
    /// # }
    /// ```
    fn swap_curve<'a>(
        &'a self,
        key: &'a Self::CurveKey,
        record: CurveRecord,
    ) -> LimiterFuture<'a, Result<bool, LimiterError>>;
}
