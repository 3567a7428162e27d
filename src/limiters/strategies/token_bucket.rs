//! [`TokenBucketLimiter`]: a bucket of tokens, refilled at a steady rate.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::cell::{Cells, InlineState, impl_limiter_for_cells};
use crate::algorithms::gcra::{CellConfig, Names};
use crate::clock::Clock;
use crate::error::ConfigError;
use crate::rate::Rate;

/// A bucket holding up to `capacity` tokens, refilled with `refill` tokens
/// per `period`; a call costing `n` takes `n` tokens, or waits until the
/// bucket holds them.
///
/// The bucket starts full. It refills continuously, one token every
/// `period / refill` (not `refill` tokens at once at the end of each
/// period), and lazily: nothing runs in the background, the content is
/// computed from the time elapsed. An idle period banks tokens up to the
/// capacity, never more, so a surge after a lull can spend them at once.
///
/// The state is one atomic word (the instant at which the bucket will be
/// full again) and a decision is one compare-and-swap. It is the same
/// algorithm as [`GcraLimiter`](crate::GcraLimiter) with a burst of
/// `capacity`; denials name the instant the bucket will hold enough tokens.
///
/// # When to pick it
///
/// When a downstream publishes "`R` per second on average, bursts of up to
/// `B`", which is how most rate-limited APIs state their contract (and the
/// usual recommendation for job workers). It tolerates short spikes and enforces the
/// average; for smooth output with no bursts use a capacity of 1, or
/// [`GcraLimiter`](crate::GcraLimiter), which reports redis-cell's numbers
/// for `RateLimit` headers. For batches, ask for all the tokens in one
/// decision with [`try_acquire_many`](crate::Limiter::try_acquire_many)
/// rather than one at a time.
///
/// Tokio timers fire on whole milliseconds, so a waiting caller wakes up to
/// about 2 ms after the instant it was told: as with
/// [`GcraLimiter`](crate::GcraLimiter), a call that comes up to 10 ms after
/// the bucket filled counts its tokens from then, but from no earlier than
/// the [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE) τ (2 ms)
/// before now. A full bucket can therefore give up to τ's refill beyond its
/// capacity: in any span `t`, calls take at most
/// `capacity + ⌊(t + τ) / refill_interval⌋` tokens.
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::{LimiterExt, TokenBucketLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Bursts of 5, 2 tokens a second on average.
/// let bucket = TokenBucketLimiter::new(5, 2, Duration::from_secs(1))?;
/// let start = Instant::now();
/// for _ in 0..7 {
///     drop(bucket.acquire().await?);
/// }
/// // Five at once, then one every 500 ms.
/// assert_eq!(start.elapsed(), Duration::from_secs(1));
///
/// // Idle for a minute: the bucket fills up to 5, not 120.
/// tokio::time::advance(Duration::from_secs(60)).await;
/// assert_eq!(bucket.tokens(), 5);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct TokenBucketLimiter {
    cells: Arc<Cells>,
}

/// What the parameters are called in [`TokenBucketLimiter`]'s constructors.
impl TokenBucketLimiter {
    /// A full bucket of `capacity` tokens, refilled with `refill` tokens per
    /// `period`. A late caller may take tokens refilled up to
    /// [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE) τ (2 ms) before
    /// it came: at most `capacity + ⌊(t + τ) / refill_interval⌋` tokens in
    /// any span `t`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the field if `capacity` or `refill` is 0,
    /// `period` is zero, `refill` exceeds one token per nanosecond of
    /// `period`, or refilling the whole bucket would take over 100 years.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::TokenBucketLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let bucket = TokenBucketLimiter::new(100, 10, Duration::from_secs(1))?;
    /// assert_eq!(bucket.capacity(), 100);
    /// assert_eq!(bucket.refill_interval(), Duration::from_millis(100));
    ///
    /// let error = TokenBucketLimiter::new(0, 10, Duration::from_secs(1)).unwrap_err();
    /// assert_eq!(error.field(), "capacity");
    /// let error = TokenBucketLimiter::new(100, 0, Duration::from_secs(1)).unwrap_err();
    /// assert_eq!(error.field(), "refill");
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(capacity: u32, refill: u32, period: Duration) -> Result<Self, ConfigError> {
        let config = CellConfig::new(Names::TOKEN_BUCKET, u64::from(refill), period, capacity)?;
        Ok(Self {
            cells: Cells::shared(config, Clock::default()),
        })
    }

    /// [`new`](TokenBucketLimiter::new) with the refill given as a [`Rate`].
    ///
    /// # Errors
    ///
    /// [`ConfigError`] on the rules of [`new`](TokenBucketLimiter::new).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{Rate, TokenBucketLimiter};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucketLimiter::from_rate(20, "100/s".parse::<Rate>()?)?;
    /// assert_eq!(bucket.refill_interval(), Duration::from_millis(10));
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_rate(capacity: u32, refill: Rate) -> Result<Self, ConfigError> {
        Self::new(capacity, refill.count(), refill.per())
    }

    /// The same bucket reading `clock` (see [`Clock`]); it starts full
    /// again.
    ///
    /// Call it before handing out clones: the limiter it returns shares no
    /// state with them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::clock::Clock;
    /// use tower_limits::{Limiter, TokenBucketLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucketLimiter::new(1, 1, Duration::from_secs(60))?;
    /// bucket.record_start().await?;
    /// assert_eq!(bucket.tokens(), 0);
    ///
    /// let bucket = bucket.with_clock(Clock::fast());
    /// assert_eq!(bucket.capacity(), 1); // same configuration
    /// assert_eq!(bucket.tokens(), 1); // full again
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_clock(self, clock: Clock) -> Self {
        Self {
            cells: Cells::shared(self.cells.config(), clock),
        }
    }

    /// Changes the capacity and refill rate at runtime, from the next
    /// decision on, on the rules of [`new`](TokenBucketLimiter::new). Tokens
    /// taken recently still count: the bucket keeps the tokens it is
    /// missing (refilling at the new rate), up to the new capacity, so a
    /// change never hands out a fresh burst. Callers waiting on the bucket
    /// are woken to ask again.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if the new values are invalid; the old ones stay.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{Limiter, TokenBucketLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucketLimiter::new(10, 10, Duration::from_secs(1))?;
    /// bucket.try_acquire_many(4).await?; // 6 left, 4 missing
    ///
    /// // The upstream's plan changed: 5 at once, 5 a second.
    /// bucket.set_limit(5, 5, Duration::from_secs(1))?;
    /// assert_eq!(bucket.capacity(), 5);
    /// assert_eq!(bucket.tokens(), 1); // still 4 missing, of 5
    /// assert!(bucket.set_limit(0, 5, Duration::from_secs(1)).is_err());
    /// assert_eq!(bucket.capacity(), 5);
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_limit(
        &self,
        capacity: u32,
        refill: u32,
        period: Duration,
    ) -> Result<(), ConfigError> {
        let config = CellConfig::new(Names::TOKEN_BUCKET, u64::from(refill), period, capacity)?;
        self.cells.retune(config);
        Ok(())
    }

    /// Takes one token if the bucket has one, else says when it will: a
    /// plain, synchronous check, cheaper than
    /// [`try_acquire`](crate::Limiter::try_acquire) because there is no
    /// permit to hand out. A denial takes nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::TokenBucketLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// // One token, back after 100 ms.
    /// let bucket = TokenBucketLimiter::new(1, 10, Duration::from_secs(1))?;
    /// assert!(bucket.check().is_ok());
    /// let retry_at = bucket.check().unwrap_err();
    /// tokio::time::sleep_until(retry_at).await;
    /// assert!(bucket.check().is_ok());
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub fn check(&self) -> Result<(), Instant> {
        self.cells.check_one()
    }

    /// The most tokens the bucket holds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::TokenBucketLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// assert_eq!(TokenBucketLimiter::new(8, 1, Duration::from_secs(1))?.capacity(), 8);
    /// # Ok(())
    /// # }
    /// ```
    pub fn capacity(&self) -> u32 {
        self.cells.config().burst()
    }

    /// The time one token takes to come back: `period / refill`, rounded up
    /// to a whole nanosecond.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::TokenBucketLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let bucket = TokenBucketLimiter::new(10, 60, Duration::from_secs(60))?;
    /// assert_eq!(bucket.refill_interval(), Duration::from_secs(1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn refill_interval(&self) -> Duration {
        self.cells.config().interval()
    }

    /// The whole tokens in the bucket now.
    ///
    /// A pause set with
    /// [`set_next_available_time`](crate::Limiter::set_next_available_time)
    /// holds calls back without draining the bucket: the tokens are still
    /// counted here, and spendable when the pause ends.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{Limiter, TokenBucketLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucketLimiter::new(10, 1, Duration::from_secs(1))?;
    /// drop(bucket.try_acquire_many(4).await?);
    /// assert_eq!(bucket.tokens(), 6);
    /// tokio::time::advance(Duration::from_millis(2500)).await;
    /// assert_eq!(bucket.tokens(), 8); // two and a half came back
    /// # Ok(())
    /// # }
    /// ```
    pub fn tokens(&self) -> u32 {
        self.cells.look(0).map_or(0, |outcome| outcome.available())
    }
}

impl crate::limiters::FreshLimiter for TokenBucketLimiter {
    /// ```
    /// use tower_limits::limiters::FreshLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let template = tower_limits::TokenBucketLimiter::new(10, 10, std::time::Duration::from_secs(1))?;
    /// let fresh = template.fresh();
    /// # let _ = fresh;
    /// # Ok(())
    /// # }
    /// ```
    fn fresh(&self) -> Self {
        Self {
            cells: Cells::shared(self.cells.config(), self.cells.clock().clone()),
        }
    }

    /// Its state is one TAT (when the bucket is full again), kept inline
    /// by a keyed limiter.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{KeyedLimiter, TokenBucketLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // A bucket of 2 per API key, one token back a second.
    /// let per_key = KeyedLimiter::of(TokenBucketLimiter::new(2, 1, Duration::from_secs(1))?).build()?;
    /// for _ in 0..2 {
    ///     assert!(matches!(per_key.try_acquire(&"k1").await?, Admission::Granted(_)));
    /// }
    /// assert!(matches!(per_key.try_acquire(&"k1").await?, Admission::Denied(_)));
    /// # Ok(())
    /// # }
    /// ```
    fn inline_state(&self) -> Option<crate::limiters::InlineState<Self>> {
        Some(InlineState::new(
            &self.cells,
            |cells| Self { cells },
            |it| &it.cells,
        ))
    }
}

impl_limiter_for_cells!(TokenBucketLimiter);

impl fmt::Debug for TokenBucketLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucketLimiter")
            .field("capacity", &self.capacity())
            .field("refill_interval", &self.refill_interval())
            .field("tokens", &self.tokens())
            .finish()
    }
}
