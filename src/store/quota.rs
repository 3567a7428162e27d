//! [`Quota`] and [`QuotaStore`]: GCRA, token bucket, fixed window, sliding
//! window counter and sliding log, decided atomically in a store.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use super::{Backoff, WindowDecision};
use crate::algorithms::gcra::{CellConfig, Names};
use crate::algorithms::windows;
use crate::error::{ConfigError, LimiterError};
use crate::limiter::LimiterFuture;
use crate::quota_status::QuotaStatus;

/// The rules of a quota decided in a store: which algorithm, and its limits.
///
/// Each constructor validates, so a quota that exists is one a store can
/// enforce. GCRA and the token bucket are the same algorithm configured two
/// ways (GCRA by its rate and burst, the bucket by its capacity and
/// refill): they share one store script. A [`RateLimiter`](crate::RateLimiter)
/// runs any quota on any store.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::store::Quota;
///
/// # fn main() -> Result<(), tower_limits::error::ConfigError> {
/// let gcra = Quota::gcra(100, Duration::from_secs(1))?.with_burst(10)?;
/// assert_eq!(gcra.capacity(), 10);
/// let bucket = Quota::token_bucket(50, 10, Duration::from_secs(1))?;
/// assert_eq!(bucket.capacity(), 50);
/// let fixed = Quota::fixed_window(1_000, Duration::from_secs(60))?;
/// assert_eq!(fixed.capacity(), 1_000);
/// assert!(Quota::sliding_window_counter(0, Duration::from_secs(1)).is_err());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy)]
pub struct Quota {
    /// The quota as [`QuotaKind::words`] wrote it: a decision compares and
    /// reads these words without decoding them (two quotas are equal
    /// exactly when their kinds are).
    words: [u64; 6],
}

impl PartialEq for Quota {
    /// Word by word, inline: the derived comparison of the six words calls
    /// `memcmp`, and a decision under a key's lock compares its quota with
    /// the one the state was made for.
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        let differ = |(a, b): (&u64, &u64)| a ^ b;
        self.words
            .iter()
            .zip(&other.words)
            .map(differ)
            .fold(0, |all, one| all | one)
            == 0
    }
}

impl Eq for Quota {}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota").field("kind", &self.kind()).finish()
    }
}

/// A quota's algorithm and limits, validated.
//
// Adding a counting algorithm touches ten files: its decision in
// `algorithms/x.rs` (and `algorithms/mod.rs`), its kind and constructor
// here, its in-memory state in `quota_state.rs`, and in each remote store
// its code and the one table that lists it: `redis/x.lua` and
// `redis/quota.rs` (`QuotaScript`), `postgres/x.sql` and
// `postgres/quota.rs` (`QuotaFunction`, with the tables `cleanup.sql`
// sweeps), `sqlite/quota/x.rs` (its rows and tables)
// and `sqlite/quota/mod.rs`. The golden vectors and the conformance suite
// then hold it to the same answers on every store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QuotaKind {
    /// GCRA (and token bucket): one cell every `T`, `B` at once.
    Cells(CellConfig),
    /// At most `max` per calendar window of `window`, aligned to Unix time.
    FixedWindow { max: u32, window: Duration },
    /// The weighted blend of this window's and the last one's counts.
    SlidingWindowCounter { max: u32, window: Duration },
    /// At most `max` starts in any `window`, each start logged; with a
    /// backoff, filling the window pauses for a growing, jittered delay.
    SlidingLog {
        max: u32,
        window: Duration,
        backoff: Option<Backoff>,
    },
}

/// The first word of each kind of [`Quota`].
pub(crate) const CELLS: u64 = 0;
pub(crate) const FIXED_WINDOW: u64 = 1;
pub(crate) const SLIDING_WINDOW_COUNTER: u64 = 2;
const SLIDING_LOG: u64 = 3;
const SLIDING_LOG_WITH_BACKOFF: u64 = 4;

impl QuotaKind {
    /// The kind in six words: the algorithm, then its numbers (durations in
    /// nanoseconds; every valid duration fits), unused words zero.
    fn words(self) -> [u64; 6] {
        let nanos = crate::clock::duration_nanos;
        match self {
            Self::Cells(cells) => {
                let [interval, burst] = cells.words();
                [CELLS, interval, burst, 0, 0, 0]
            }
            Self::FixedWindow { max, window } => {
                [FIXED_WINDOW, u64::from(max), nanos(window), 0, 0, 0]
            }
            Self::SlidingWindowCounter { max, window } => [
                SLIDING_WINDOW_COUNTER,
                u64::from(max),
                nanos(window),
                0,
                0,
                0,
            ],
            Self::SlidingLog {
                max,
                window,
                backoff,
            } => {
                let (max, window) = (u64::from(max), nanos(window));
                match backoff {
                    None => [SLIDING_LOG, max, window, 0, 0, 0],
                    Some(b) => {
                        let multiplier = b.multiplier.to_bits();
                        let (initial, most) = (nanos(b.initial), nanos(b.max));
                        [
                            SLIDING_LOG_WITH_BACKOFF,
                            max,
                            window,
                            initial,
                            multiplier,
                            most,
                        ]
                    }
                }
            }
        }
    }

    /// The kind [`words`](QuotaKind::words) wrote.
    #[inline]
    fn from_words([kind, a, b, c, d, e]: [u64; 6]) -> Self {
        let max = || u32::try_from(a).unwrap_or(u32::MAX);
        let window = || Duration::from_nanos(b);
        match kind {
            CELLS => Self::Cells(CellConfig::from_words([a, b])),
            FIXED_WINDOW => Self::FixedWindow {
                max: max(),
                window: window(),
            },
            SLIDING_WINDOW_COUNTER => Self::SlidingWindowCounter {
                max: max(),
                window: window(),
            },
            _ => Self::SlidingLog {
                max: max(),
                window: window(),
                backoff: (kind == SLIDING_LOG_WITH_BACKOFF).then(|| Backoff {
                    initial: Duration::from_nanos(c),
                    multiplier: f64::from_bits(d),
                    max: Duration::from_nanos(e),
                }),
            },
        }
    }

    /// Whether this is GCRA or the token bucket.
    pub(crate) fn is_cells(self) -> bool {
        matches!(self, Self::Cells { .. })
    }
}

impl Quota {
    /// GCRA: `count` calls per `period`, evenly spaced, one at a time (raise
    /// the burst with [`with_burst`](Quota::with_burst)). Strict: no two
    /// calls closer than `period / count` while the burst is 1; see
    /// [`with_pacing_tolerance`](Quota::with_pacing_tolerance) for a pacer
    /// that keeps its rate when waiters wake late.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::Quota;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let quota = Quota::gcra(10, Duration::from_secs(1))?;
    /// assert_eq!(quota.capacity(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn gcra(count: u32, period: Duration) -> Result<Self, ConfigError> {
        Ok(Self::cells(CellConfig::new(
            Names::GCRA,
            u64::from(count),
            period,
            1,
        )?))
    }

    /// A token bucket holding up to `capacity` tokens, refilled with
    /// `refill` tokens per `period`: GCRA with a burst of `capacity`.
    /// Strict, as [`gcra`](Quota::gcra).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::Quota;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let quota = Quota::token_bucket(20, 5, Duration::from_secs(1))?;
    /// assert_eq!(quota.capacity(), 20);
    /// assert!(Quota::token_bucket(0, 5, Duration::from_secs(1)).is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn token_bucket(capacity: u32, refill: u32, period: Duration) -> Result<Self, ConfigError> {
        let names = Names::TOKEN_BUCKET;
        Ok(Self::cells(CellConfig::new(
            names,
            u64::from(refill),
            period,
            capacity,
        )?))
    }

    /// At most `max_executions` starts per fixed window of `window`: one
    /// counter that resets at every window boundary (the `INCR` + `EXPIRE`
    /// limiter).
    ///
    /// Windows are calendar intervals, `[k·window, (k + 1)·window)` in Unix
    /// time, in every store, so a per-minute limit resets at the top of
    /// every minute, as an upstream counting calendar minutes does. A denied
    /// call may retry at the start of the next window, and the denial says
    /// exactly that. In memory the state is one word (the window's index
    /// above its count) and a decision one compare-and-swap.
    ///
    /// A [refund](crate::Limiter::refund) gives a permit's units back while
    /// its window lasts; once the window has ended they are gone with it. A
    /// higher [settled](crate::Limiter::settle) cost is always charged: to
    /// the permit's window, or to the current one once that has ended.
    ///
    /// # When to pick it
    ///
    /// * A coarse, cheap quota that matches how an upstream counts: "1,000
    ///   per calendar minute", reset at the top of the minute.
    /// * Not when bursts matter: it **admits up to twice the limit across a
    ///   boundary**. `max_executions` calls at the very end of one window
    ///   and `max_executions` more at the very start of the next all pass
    ///   (1,000 at 11:00:59 and 1,000 at 11:01:00). Prefer
    ///   [`sliding_window_counter`](Quota::sliding_window_counter) (same
    ///   cost, bounded boundary error), [`gcra`](Quota::gcra) or
    ///   [`sliding_log`](Quota::sliding_log) (exact) when any rolling window
    ///   must hold the limit.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::store::Quota;
    /// use tower_limits::{Limiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let quota = Quota::fixed_window(3, Duration::from_secs(1))?;
    /// assert_eq!(quota.capacity(), 3);
    /// let limiter = RateLimiter::in_memory(quota);
    /// for _ in 0..3 {
    ///     assert!(matches!(limiter.try_acquire().await?, Admission::Granted(_)));
    /// }
    /// // Full until the next window, on a whole second of Unix time...
    /// let Admission::Denied(denial) = limiter.try_acquire().await? else { unreachable!() };
    /// let boundary = denial.retry_at().expect("the next window");
    /// assert!(boundary <= Instant::now() + Duration::from_secs(1));
    ///
    /// // ...where three more pass at once: the boundary burst.
    /// tokio::time::advance(boundary - Instant::now()).await;
    /// for _ in 0..3 {
    ///     assert!(matches!(limiter.try_acquire().await?, Admission::Granted(_)));
    /// }
    ///
    /// assert_eq!(Quota::fixed_window(0, Duration::from_secs(1)).unwrap_err().field(), "max_executions");
    /// assert_eq!(Quota::fixed_window(1, Duration::ZERO).unwrap_err().field(), "window");
    /// # Ok(())
    /// # }
    /// ```
    pub fn fixed_window(max_executions: u32, window: Duration) -> Result<Self, ConfigError> {
        windows::validate(max_executions, window)?;
        Ok(Self::of(QuotaKind::FixedWindow {
            max: max_executions,
            window,
        }))
    }

    /// About `max_executions` starts per rolling `window`, in O(1) memory:
    /// the sliding window counter of Cloudflare and of most Redis limiters.
    ///
    /// It keeps two counts, for the current fixed window and the one before
    /// it (windows aligned to Unix time, as for
    /// [`fixed_window`](Quota::fixed_window)), and estimates the starts in
    /// the rolling window that ends now by assuming the previous window's
    /// starts were spread evenly over it:
    ///
    /// ```text
    /// estimate = previous × (1 − f) + current      f = how far into the current window now is, in [0, 1)
    /// ```
    ///
    /// A call costing `c` is admitted iff `estimate + c ≤ max_executions`.
    /// The estimate never rises as time passes, so a denial names the exact
    /// instant the call would be admitted (the weight of the previous window
    /// has fallen enough, or a new window has begun), computed in integers
    /// with no rounding. In memory the state is one word (the window's index
    /// above the two counts) and a decision one compare-and-swap, while the
    /// index fits beside the counts: the smaller the limit, the more bits
    /// are left (a limit of 1,000 leaves 43, enough for millisecond windows
    /// for 278 years); past that, decisions take the key's lock.
    ///
    /// # Error bound against the exact sliding log
    ///
    /// Let `P` be the previous window's count, `p ≤ P` the part of it that
    /// lies in the rolling window `(now − window, now]`, and `L = p +
    /// current` the count an exact sliding log ([`sliding_log`](Quota::sliding_log))
    /// would see. Then `estimate − L = P × (1 − f) − p`, so
    ///
    /// * **under-count** (admitting what the log would refuse): at most
    ///   `P × f`, when the previous window's starts were bunched at its end.
    ///   At every admission `estimate ≤ max`, and the count of a rolling
    ///   window only grows at admissions, so **every interval of length
    ///   `window` holds at most `max + ⌊P × f⌋` units**, `f` and `P` taken
    ///   at the interval's last admission. As only admitted calls count
    ///   (`P ≤ max`), that is **less than `2 × max_executions`**. It
    ///   approaches `2 × max` only when about `max` starts bunch at the very
    ///   end of one window (which needs the window before it to have been
    ///   nearly empty) and about `max` more come late in the next.
    /// * **over-count** (refusing what the log would admit): at most
    ///   `P × (1 − f)`, when the previous window's starts were bunched at its
    ///   beginning; a denied call always has `L + c > max − P × (1 − f)`.
    /// * **evenly spread traffic**: when the previous window's starts were
    ///   evenly spaced, `p` is `P × (1 − f)` rounded one way or the other,
    ///   and the estimate is within one call of the log.
    ///
    /// [`record_start`](crate::Limiter::record_start) and a higher
    /// [`settle`](crate::Limiter::settle) may take a window past the limit;
    /// the bounds then hold with `P` and `current` as counted. A
    /// [refund](crate::Limiter::refund) gives a permit's units back while
    /// its window is the current or the previous one (where they still
    /// weigh); a higher settled cost is charged there, or to the current
    /// window once the permit's no longer weighs.
    ///
    /// # When to pick it
    ///
    /// * A rolling limit ("100 per minute, in any minute") with O(1) memory
    ///   per limit, where occasional admissions slightly past the limit are
    ///   fine: the usual choice for per-key API limits. Unlike a fixed
    ///   window, a full window is not followed by a fresh burst at the
    ///   boundary: the previous window's weight holds it back.
    /// * Prefer [`sliding_log`](Quota::sliding_log) (an exact log, O(max)
    ///   memory) or [`gcra`](Quota::gcra) when no rolling window may ever
    ///   exceed the limit.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::store::Quota;
    /// use tower_limits::{Limiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let quota = Quota::sliding_window_counter(4, Duration::from_secs(1))?;
    /// assert_eq!(quota.capacity(), 4);
    /// let limiter = RateLimiter::in_memory(quota);
    /// drop(limiter.try_acquire_many(4).await?); // fills this window
    ///
    /// // In the next window the four weigh 4 × (1 − f): one more call fits
    /// // once f = 1/4 (4 × 3/4 + 1 ≤ 4), a second once f = 1/2.
    /// let Admission::Denied(denial) = limiter.try_acquire().await? else { unreachable!() };
    /// let first = denial.retry_at().expect("a quarter into the next window");
    /// tokio::time::advance(first - Instant::now()).await;
    /// drop(limiter.try_acquire().await?);
    /// let Admission::Denied(denial) = limiter.try_acquire().await? else { unreachable!() };
    /// assert_eq!(denial.retry_at(), Some(first + Duration::from_millis(250)));
    ///
    /// let error = Quota::sliding_window_counter(0, Duration::from_secs(1)).unwrap_err();
    /// assert_eq!(error.field(), "max_executions");
    /// # Ok(())
    /// # }
    /// ```
    pub fn sliding_window_counter(
        max_executions: u32,
        window: Duration,
    ) -> Result<Self, ConfigError> {
        windows::validate(max_executions, window)?;
        Ok(Self::of(QuotaKind::SlidingWindowCounter {
            max: max_executions,
            window,
        }))
    }

    /// At most `max_executions` starts in any sliding `window`, exactly: the
    /// log of starts of the classic [`RateLimiter`](crate::RateLimiter),
    /// one entry per start (memory grows with the starts in a window, up to
    /// the limit). Without a backoff;
    /// [`RateLimiter::builder`](crate::RateLimiter::builder) adds the
    /// seed's (see [`Backoff`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::Quota;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let quota = Quota::sliding_log(100, Duration::from_secs(60))?;
    /// assert_eq!(quota.capacity(), 100);
    /// assert_eq!(quota.backoff(), None);
    /// assert_eq!(Quota::sliding_log(100, Duration::ZERO).unwrap_err().field(), "window");
    /// # Ok(())
    /// # }
    /// ```
    pub fn sliding_log(max_executions: u32, window: Duration) -> Result<Self, ConfigError> {
        windows::validate(max_executions, window)?;
        Ok(Self::of(QuotaKind::SlidingLog {
            max: max_executions,
            window,
            backoff: None,
        }))
    }

    /// The same sliding log, backing off by `backoff` whenever a start fills
    /// the window; `None` for no backoff. A backoff is made by
    /// [`RateLimiter::builder`](crate::RateLimiter::builder); this carries one
    /// over to a new quota.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `backoff` if this is not a sliding log quota.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    /// use tower_limits::store::Quota;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let seed = RateLimiter::builder("api", 10, Duration::from_secs(1)).build()?;
    /// let wider = Quota::sliding_log(20, Duration::from_secs(1))?.with_backoff(seed.quota().backoff())?;
    /// assert_eq!(wider.backoff(), seed.quota().backoff());
    ///
    /// let gcra = Quota::gcra(10, Duration::from_secs(1))?;
    /// assert_eq!(gcra.with_backoff(seed.quota().backoff()).unwrap_err().field(), "backoff");
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_backoff(self, backoff: Option<Backoff>) -> Result<Self, ConfigError> {
        let QuotaKind::SlidingLog { max, window, .. } = self.kind() else {
            return Err(ConfigError::new(
                "backoff",
                backoff,
                "applies only to sliding log quotas",
            ));
        };
        if let Some(backoff) = &backoff {
            backoff.validate()?;
        }
        Ok(Self::of(QuotaKind::SlidingLog {
            max,
            window,
            backoff,
        }))
    }

    /// The backoff of a sliding log quota, if it has one.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(1)).build()?;
    /// let backoff = limiter.quota().backoff().expect("the seed's backoff by default");
    /// assert_eq!(backoff.initial(), Duration::from_secs(1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn backoff(&self) -> Option<Backoff> {
        match self.kind() {
            QuotaKind::SlidingLog { backoff, .. } => backoff,
            _ => None,
        }
    }

    /// A jitter for one decision in `[0, 1)`: drawn at random for a sliding
    /// log with a backoff, else 0.
    #[cfg(any(feature = "redis", feature = "postgres", feature = "sqlite"))]
    pub(crate) fn jitter(&self) -> f64 {
        crate::algorithms::sliding_log::jitter(self.backoff().as_ref())
    }

    /// The same GCRA rate with `burst` calls at once. Only GCRA and token
    /// bucket quotas have a burst; others give a [`ConfigError`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::Quota;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let quota = Quota::gcra(10, Duration::from_secs(1))?.with_burst(5)?;
    /// assert_eq!(quota.capacity(), 5);
    /// let window = Quota::fixed_window(10, Duration::from_secs(1))?;
    /// assert_eq!(window.with_burst(5).unwrap_err().field(), "burst");
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_burst(self, burst: u32) -> Result<Self, ConfigError> {
        let QuotaKind::Cells(cells) = self.kind() else {
            return Err(ConfigError::new(
                "burst",
                burst,
                "applies only to GCRA and token bucket quotas",
            ));
        };
        let names = Names::GCRA;
        let config = cells.with_burst(names, burst)?;
        Ok(Self::cells(config))
    }

    /// The same GCRA or token bucket quota, letting a waiter that woke late
    /// keep its slot: a grant that comes after the cells were due takes
    /// them from up to [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE)
    /// τ (2 ms) before now, so that tokio's millisecond timer, which wakes a
    /// waiter up to about 2 ms after its instant, does not cost a paced
    /// rate its lateness (without it, a burst of 1 at 1,000 a second
    /// delivers about half the rate to callers waiting in a
    /// [`LimitLayer`](crate::LimitLayer)). The price: in any span `t`,
    /// grants cost at most `burst + ⌊(t + τ) / T⌋` cells instead of
    /// `burst + ⌊t / T⌋`, so a window of the rate's period may see
    /// `⌈rate × τ⌉` calls more than the rate (one at up to 500 a second).
    /// Keep the default, strict, when an upstream enforces exactly this
    /// rate with a sliding window. Every store decides it alike.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for a quota that is not GCRA or a token bucket.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::Quota;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let strict = Quota::gcra(1_000, Duration::from_secs(1))?;
    /// let paced = strict.with_pacing_tolerance()?;
    /// assert_ne!(strict, paced);
    /// assert_eq!(paced.capacity(), strict.capacity());
    ///
    /// let window = Quota::fixed_window(10, Duration::from_secs(1))?;
    /// assert_eq!(window.with_pacing_tolerance().unwrap_err().field(), "pacing_tolerance");
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_pacing_tolerance(self) -> Result<Self, ConfigError> {
        match self.kind() {
            QuotaKind::Cells(cells) => Ok(Self::cells(cells.paced(true))),
            _ => Err(ConfigError::new(
                "pacing_tolerance",
                crate::clock::PACING_TOLERANCE,
                "applies only to GCRA and token bucket quotas",
            )),
        }
    }

    fn cells(config: CellConfig) -> Self {
        Self::of(QuotaKind::Cells(config))
    }

    /// The most one call may cost: the burst, or the window's limit.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::Quota;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// assert_eq!(Quota::sliding_window_counter(7, Duration::from_secs(1))?.capacity(), 7);
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub fn capacity(&self) -> u32 {
        // A GCRA burst word holds the burst in its low 32 bits; the other
        // kinds keep their limit, a `u32`, in their first number.
        let [kind, max, burst_word, ..] = self.words;
        (if kind == CELLS { burst_word } else { max }) as u32
    }

    /// The window [`capacity`](Quota::capacity) applies to: a window's
    /// length, or the time a GCRA or bucket takes to refill from empty.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::Quota;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let log = Quota::sliding_log(7, Duration::from_secs(60))?;
    /// assert_eq!(log.window(), Duration::from_secs(60));
    /// let gcra = Quota::gcra(10, Duration::from_secs(1))?.with_burst(5)?;
    /// assert_eq!(gcra.window(), Duration::from_millis(500));
    /// # Ok(())
    /// # }
    /// ```
    pub fn window(&self) -> Duration {
        match self.kind() {
            QuotaKind::Cells(cells) => Duration::from_nanos(cells.span()),
            QuotaKind::FixedWindow { window, .. }
            | QuotaKind::SlidingWindowCounter { window, .. }
            | QuotaKind::SlidingLog { window, .. } => window,
        }
    }

    /// The status of this quota with `remaining` units left, and more after
    /// `refill_in`.
    pub(crate) fn status(&self, remaining: u64, refill_in: Option<Duration>) -> QuotaStatus {
        QuotaStatus::new(
            u64::from(self.capacity()),
            self.window(),
            remaining,
            refill_in,
        )
    }

    /// A quota of `kind`.
    fn of(kind: QuotaKind) -> Self {
        Self {
            words: kind.words(),
        }
    }

    /// The quota in six words, for a [`QuotaCell`](crate::limiters::internals::quota_cell::QuotaCell).
    #[inline]
    pub(crate) fn to_words(self) -> [u64; 6] {
        self.words
    }

    /// The quota [`to_words`](Quota::to_words) gave.
    #[inline]
    pub(crate) fn from_words(words: [u64; 6]) -> Self {
        Self { words }
    }

    /// The algorithm and its first two numbers (GCRA's interval and burst
    /// word, a window's limit and length): all of a quota that a memory
    /// store's open line decides by.
    #[inline]
    pub(crate) fn line_words(&self) -> [u64; 3] {
        let [kind, a, b, ..] = self.words;
        [kind, a, b]
    }

    /// What the stores dispatch on.
    #[inline]
    pub(crate) fn kind(&self) -> QuotaKind {
        QuotaKind::from_words(self.words)
    }
}

/// How the sliding log scripts (Lua, PL/pgSQL) name operation `op` of a
/// [`QuotaStore`], and the jitter it takes, where a start may fill the
/// window and back off: `take` is `record`, `reset` is `clear`.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn log_op(op: &'static str, quota: &Quota) -> (&'static str, Option<f64>) {
    match op {
        "acquire" => (op, Some(quota.jitter())),
        "take" => ("record", Some(quota.jitter())),
        "reset" => ("clear", None),
        op => (op, None),
    }
}

/// How the GCRA scripts (Lua, PL/pgSQL) name operation `op` of a
/// [`QuotaStore`]: a paced quota's `acquire` is `pace`
/// ([`Quota::with_pacing_tolerance`]).
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn cells_op(op: &'static str, quota: &Quota) -> &'static str {
    match quota.kind() {
        QuotaKind::Cells(cells) if op == "acquire" && cells.is_paced() => "pace",
        _ => op,
    }
}

/// The sliding log scripts' adjustment of a grant from `from` units to
/// `to`, and its arguments: a refund (which undoes the backoff its start
/// caused) or a resize.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn log_adjustment(ticket: u64, from: u32, to: u32) -> (&'static str, Vec<u64>) {
    match to {
        0 => ("refund", vec![ticket, u64::from(from)]),
        to => ("settle", vec![ticket, u64::from(from), u64::from(to)]),
    }
}

/// A store that decides [`Quota`]s atomically: the backing state of a
/// [`RateLimiter`](crate::RateLimiter).
///
/// Every method acts on one key (a named quota) in one atomic step, and its
/// future does nothing until polled. Tickets are opaque: what a grant
/// returns is what [`adjust`](QuotaStore::adjust) takes back. Limiters with
/// the same name on one store must use the same quota.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::store::{MemoryStore, Quota, QuotaStore, WindowDecision};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let quota = Quota::fixed_window(2, Duration::from_secs(60))?;
/// let key = store.quota_key("exports");
///
/// let WindowDecision::Granted { ticket } = store.decide(&key, &quota, 2).await? else {
///     unreachable!("the window is empty");
/// };
/// assert!(store.look(&key, &quota, 1).await?.is_some()); // full
/// store.adjust(&key, &quota, ticket, 2, 0).await?; // refund both
/// assert_eq!(store.look(&key, &quota, 2).await?, None);
/// # Ok(())
/// # }
/// ```
pub trait QuotaStore: Send + Sync + 'static {
    /// A key prepared for this store, made once per limiter by
    /// [`quota_key`](QuotaStore::quota_key). A limiter keeps a clone of it
    /// beside its shared state, so a clone should be cheap.
    ///
    /// ```
    /// use tower_limits::store::{MemoryStore, QuotaStore};
    ///
    /// fn keys<S: QuotaStore>(store: &S, names: &[&str]) -> Vec<S::QuotaKey> {
    ///     names.iter().map(|name| store.quota_key(name)).collect()
    /// }
    /// assert_eq!(keys(&MemoryStore::new(), &["a", "b"]).len(), 2);
    /// ```
    type QuotaKey: Clone + Send + Sync + 'static;

    /// Prepares the key of the quota called `name`. Keys for one name on one
    /// store share one state.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota, QuotaStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let quota = Quota::gcra(1, Duration::from_secs(60))?;
    /// store.take(&store.quota_key("geocoder"), &quota).await?;
    /// assert!(store.look(&store.quota_key("geocoder"), &quota, 1).await?.is_some());
    /// assert!(store.look(&store.quota_key("other"), &quota, 1).await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    fn quota_key(&self, name: &str) -> Self::QuotaKey;

    /// Creates what the store needs for quotas (tables, scripts). Idempotent;
    /// run it once at start-up. The default needs nothing.
    ///
    /// ```
    /// use tower_limits::store::{MemoryStore, QuotaStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_limits::error::LimiterError> {
    /// MemoryStore::new().setup().await?;
    /// # Ok(())
    /// # }
    /// ```
    fn setup(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }

    /// The atomic decision: takes `cost` units and answers
    /// [`Granted`](WindowDecision::Granted) with a ticket, or takes nothing
    /// and answers [`Denied`](WindowDecision::Denied) with the instant it
    /// would be granted (a pause in force included). The caller checks that
    /// `cost` is at most [`Quota::capacity`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::store::{MemoryStore, Quota, QuotaStore, WindowDecision};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let quota = Quota::gcra(1, Duration::from_secs(2))?;
    /// let key = store.quota_key("api");
    /// let start = Instant::now();
    /// assert!(matches!(store.decide(&key, &quota, 1).await?, WindowDecision::Granted { .. }));
    /// let retry_at = start + Duration::from_secs(2);
    /// assert_eq!(store.decide(&key, &quota, 1).await?, WindowDecision::Denied { retry_at });
    /// # Ok(())
    /// # }
    /// ```
    fn decide<'a>(
        &'a self,
        key: &'a Self::QuotaKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>>;

    /// [`decide`](QuotaStore::decide)'s answer if the store has it at once,
    /// without waiting on anything but a lock, else `None` (the default, for
    /// a store across a network): the in-memory store's decisions, which a
    /// [`RateLimiter`](crate::RateLimiter) takes first, so that the answer
    /// comes back as a value rather than a future.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota, QuotaStore, WindowDecision};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let quota = Quota::gcra(1, Duration::from_secs(60))?;
    /// let key = store.quota_key("api");
    /// // The first decision takes the key's lock (and opens its line for the next).
    /// let first = store.decide_at_once(&key, &quota, 1);
    /// assert!(matches!(first, Some(WindowDecision::Granted { .. })));
    /// let second = store.decide_at_once(&key, &quota, 1);
    /// assert!(matches!(second, Some(WindowDecision::Denied { .. })));
    /// # Ok(())
    /// # }
    /// ```
    #[doc(hidden)]
    #[inline]
    fn decide_at_once(
        &self,
        _key: &Self::QuotaKey,
        _quota: &Quota,
        _cost: u32,
    ) -> Option<WindowDecision> {
        None
    }

    /// The quota at `key` as it stands, from one reading of its state (one
    /// round trip): the quota's limit ([`Quota::capacity`]) and window (for
    /// GCRA and the token bucket, the time to refill from empty), how many
    /// units [`decide`](QuotaStore::decide) would grant now (none during a
    /// pause) and how long until it would grant more. What a
    /// [`RateLimiter`](crate::RateLimiter)'s
    /// [`quota_status`](crate::Limiter::quota_status) answers.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota, QuotaStore};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let quota = Quota::token_bucket(10, 1, Duration::from_secs(1))?;
    /// let key = store.quota_key("api");
    /// store.decide(&key, &quota, 4).await?;
    /// let status = store.quota_status(&key, &quota).await?;
    /// assert_eq!((status.limit(), status.remaining()), (10, 6));
    /// assert_eq!(status.window(), Duration::from_secs(10));
    /// assert_eq!(status.refill_in(), Some(Duration::from_secs(1)));
    /// # Ok(())
    /// # }
    /// ```
    fn quota_status<'a>(
        &'a self,
        key: &'a Self::QuotaKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<QuotaStatus, LimiterError>>;

    /// The atomic peek: `None` if [`decide`](QuotaStore::decide) would grant
    /// `cost` now, else the instant it names. Takes nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota, QuotaStore};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let quota = Quota::token_bucket(3, 1, Duration::from_secs(1))?;
    /// let key = store.quota_key("api");
    /// assert_eq!(store.look(&key, &quota, 3).await?, None);
    /// assert_eq!(store.look(&key, &quota, 3).await?, None); // looking took nothing
    /// # Ok(())
    /// # }
    /// ```
    fn look<'a>(
        &'a self,
        key: &'a Self::QuotaKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>>;

    /// Takes one unit whether or not the quota has room (the classic
    /// `record_start`): a start nobody admitted still counts.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota, QuotaStore};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let quota = Quota::fixed_window(1, Duration::from_secs(60))?;
    /// let key = store.quota_key("api");
    /// store.take(&key, &quota).await?;
    /// store.take(&key, &quota).await?; // over the limit, still counted
    /// assert!(store.look(&key, &quota, 1).await?.is_some());
    /// # Ok(())
    /// # }
    /// ```
    fn take<'a>(
        &'a self,
        key: &'a Self::QuotaKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>>;

    /// Turns the `from` units granted with `ticket` into `to`: a refund
    /// (`to` = 0) or a settled cost. `from` must be the cost the ticket
    /// was granted or last adjusted with. Units come back only where the
    /// algorithm allows: a window grant's while its window counts; a GCRA
    /// or token bucket grant's time still ahead of now, whatever was granted
    /// since (each grant holds a slot of GCRA's line, its ticket the slot's
    /// end; a refund inside the line leaves a gap the next grant takes, and
    /// up to 1,024 gaps are kept). A ticket given back already, or granted
    /// under another interval, gives nothing back. Nor does one at or below
    /// the floor the last [`reset`](QuotaStore::reset) left, which the
    /// grants made before it all are: a GCRA or token bucket slot ending at
    /// or before the end the line had at the reset, a window grant counted
    /// in the reset's window or earlier, a sliding log start at or before
    /// the reset's instant. A grant made after the reset whose ticket falls
    /// there too cannot be told from those (a slot inside the old line's
    /// time, a grant in the same window, a start at the same instant): it
    /// gives nothing back either; later ones do, as usual. Extra units are
    /// always charged. Answers the ticket that now stands for the grant, or
    /// `None` if it can no longer be adjusted down.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota, QuotaStore, WindowDecision};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let quota = Quota::sliding_window_counter(10, Duration::from_secs(60))?;
    /// let key = store.quota_key("llm");
    /// let WindowDecision::Granted { ticket } = store.decide(&key, &quota, 8).await? else {
    ///     unreachable!()
    /// };
    /// store.adjust(&key, &quota, ticket, 8, 3).await?; // used 3 of the 8
    /// assert_eq!(store.look(&key, &quota, 7).await?, None);
    /// # Ok(())
    /// # }
    /// ```
    fn adjust<'a>(
        &'a self,
        key: &'a Self::QuotaKey,
        quota: &'a Quota,
        ticket: u64,
        from: u32,
        to: u32,
    ) -> LimiterFuture<'a, Result<Option<u64>, LimiterError>>;

    /// Nothing is granted before `at` (an upstream's `Retry-After`); never
    /// shortens a pause in force.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::store::{MemoryStore, Quota, QuotaStore};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let quota = Quota::gcra(100, Duration::from_secs(1))?;
    /// let key = store.quota_key("api");
    /// let resume = Instant::now() + Duration::from_secs(30);
    /// store.pause(&key, &quota, resume).await?;
    /// assert_eq!(store.look(&key, &quota, 1).await?, Some(resume));
    /// # Ok(())
    /// # }
    /// ```
    fn pause<'a>(
        &'a self,
        key: &'a Self::QuotaKey,
        quota: &'a Quota,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>>;

    /// Forgets the state of `key`: full capacity, no pause. The grants
    /// made before it give nothing back any more (see
    /// [`adjust`](QuotaStore::adjust)): the store keeps, until it no longer
    /// matters, the floor their tickets fall under (the line's end, the
    /// window or the instant of the reset), or refunding one could free
    /// what a grant made since holds and let the limit be exceeded.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota, QuotaStore};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let quota = Quota::gcra(1, Duration::from_secs(60))?;
    /// let key = store.quota_key("api");
    /// store.take(&key, &quota).await?;
    /// store.reset(&key, &quota).await?;
    /// assert_eq!(store.look(&key, &quota, 1).await?, None);
    /// # Ok(())
    /// # }
    /// ```
    fn reset<'a>(
        &'a self,
        key: &'a Self::QuotaKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>>;
}
