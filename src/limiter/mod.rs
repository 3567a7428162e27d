//! The [`Limiter`] trait, its atomic acquire path and the permits it hands out.
//!
//! A limiter answers the six questions of the classic limiter interface
//! ([`can_proceed`](Limiter::can_proceed), [`record_start`](Limiter::record_start),
//! [`record_completion`](Limiter::record_completion),
//! [`next_available_time`](Limiter::next_available_time),
//! [`set_next_available_time`](Limiter::set_next_available_time),
//! [`clear`](Limiter::clear)). Calling `can_proceed` and then `record_start`
//! races: two tasks can both see "one left" and both start. The layers
//! therefore use [`try_acquire`](Limiter::try_acquire), which decides and
//! records in one atomic step and returns either a [`Permit`] or a [`Denial`]
//! that says when to try again.
//!
//! # Example
//!
//! ```
//! use tower_limits::limiter::Admission;
//! use tower_limits::{ConcurrencyLimiter, Limiter};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = ConcurrencyLimiter::new(1)?;
//! let Admission::Granted(permit) = limiter.try_acquire().await? else {
//!     unreachable!("nothing is running yet");
//! };
//! assert!(matches!(limiter.try_acquire().await?, Admission::Denied(_)));
//! drop(permit); // records the completion
//! assert!(limiter.can_proceed().await?);
//! # Ok(())
//! # }
//! ```

mod denial;
mod event;
mod future;
mod permit;
mod stats;
mod upstream_wait;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LimiterError;
use crate::quota_status::QuotaStatus;

pub use denial::{Admission, Denial};
pub(crate) use denial::{Booking, Unbook};
pub use event::{ReleaseEvent, ReleaseListener};
pub use future::LimiterFuture;
pub use permit::{Permit, Release};
pub use stats::LimiterStats;
pub use upstream_wait::DEFAULT_MAX_UPSTREAM_WAIT;
pub(crate) use upstream_wait::cap_upstream_wait;

/// A limiting strategy: the six classic operations plus an atomic acquire.
///
/// Implement it for your own strategy and it works with
/// [`LimitLayer`](crate::LimitLayer) and inside a [`CompositeLimiter`](crate::CompositeLimiter).
/// Every operation may be asynchronous (a limiter may keep its state in a
/// store); in-memory ones return [`LimiterFuture::ready`].
///
/// The limiters of this crate are cheap handles: cloning one shares its
/// state, so a clone handed to a layer and a clone kept for
/// [`set_next_available_time`](Limiter::set_next_available_time) act on the
/// same limit.
///
/// # Implementing
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
/// use tokio::time::Instant;
/// use tower_limits::error::LimiterError;
/// use tower_limits::limiter::{Admission, Denial, LimiterFuture};
/// use tower_limits::{Limiter, Permit};
///
/// /// Admits calls only while a switch is on.
/// #[derive(Clone, Default)]
/// struct Switch(Arc<AtomicBool>);
///
/// impl Limiter for Switch {
///     fn try_acquire_many(&self, _cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
///         let admission = if self.0.load(Ordering::Acquire) {
///             Admission::Granted(Permit::unit())
///         } else {
///             Admission::Denied(Denial::until(Instant::now() + std::time::Duration::from_secs(1)))
///         };
///         LimiterFuture::ready(Ok(admission))
///     }
///     fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
///         LimiterFuture::ready(Ok(()))
///     }
///     fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
///         LimiterFuture::ready(Ok(()))
///     }
///     fn set_next_available_time(&self, _at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
///         LimiterFuture::ready(Ok(()))
///     }
///     fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
///         self.0.store(true, Ordering::Release);
///         LimiterFuture::ready(Ok(()))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LimiterError> {
/// let switch = Switch::default();
/// assert!(!switch.can_proceed().await?);
/// switch.clear().await?;
/// assert!(switch.can_proceed().await?); // derived: a grant, refunded
/// # Ok(())
/// # }
/// ```
///
/// Five operations are required: the atomic
/// [`try_acquire_many`](Limiter::try_acquire_many) and the four classic ones
/// that change state ([`record_start`](Limiter::record_start),
/// [`record_completion`](Limiter::record_completion),
/// [`set_next_available_time`](Limiter::set_next_available_time),
/// [`clear`](Limiter::clear)). The questions
/// ([`can_proceed`](Limiter::can_proceed), [`peek`](Limiter::peek),
/// [`next_available_time`](Limiter::next_available_time)) are derived from
/// a grant given back at once; override them to look without taking.
pub trait Limiter: Send + Sync + 'static {
    /// Decides and records in one atomic step: either a [`Permit`] whose drop
    /// records the completion, or a [`Denial`] naming when to try again.
    ///
    /// No interleaving of concurrent callers can be granted more than the
    /// limit. The returned future must do nothing until it is first polled
    /// (as `async` blocks do): a layer may drop it unpolled.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{Limiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 1, Duration::from_secs(10))
    ///     .without_backoff()
    ///     .build()?;
    /// let start = Instant::now();
    /// let Admission::Granted(_permit) = limiter.try_acquire().await? else {
    ///     unreachable!("the window is empty");
    /// };
    /// let Admission::Denied(denial) = limiter.try_acquire().await? else {
    ///     unreachable!("the window is full");
    /// };
    /// // Retry when the first start leaves the window.
    /// assert_eq!(denial.retry_at(), Some(start + Duration::from_secs(10)));
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    fn try_acquire(&self) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        self.try_acquire_many(1)
    }

    /// [`try_acquire`](Limiter::try_acquire) for a call that costs `cost`
    /// units (a batch of 5 downstream calls takes 5 in one decision).
    ///
    /// A cost of 0 is free. A cost above what the limiter can ever grant
    /// fails with [`CostTooHigh`](crate::error::CostTooHigh) inside a
    /// [`LimiterError`] instead of waiting forever.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::error::CostTooHigh;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{Limiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(1))
    ///     .without_backoff()
    ///     .build()?;
    /// let Admission::Granted(batch) = limiter.try_acquire_many(8).await? else {
    ///     unreachable!("the window is empty");
    /// };
    /// assert_eq!(batch.cost(), 8);
    /// assert!(matches!(limiter.try_acquire_many(3).await?, Admission::Denied(_)));
    ///
    /// let error = limiter.try_acquire_many(11).await.unwrap_err();
    /// assert_eq!(error.get_ref().downcast_ref(), Some(&CostTooHigh::new(11, 10)));
    /// # Ok(())
    /// # }
    /// ```
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>>;

    /// Whether a call could start now, without recording anything.
    ///
    /// Only a hint: another caller may take the capacity before this one
    /// calls [`record_start`](Limiter::record_start). Use
    /// [`try_acquire`](Limiter::try_acquire) to admit calls.
    ///
    /// ```
    /// use tower_limits::{ConcurrencyLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ConcurrencyLimiter::new(1)?;
    /// assert!(limiter.can_proceed().await?);
    /// assert!(limiter.can_proceed().await?); // asking records nothing
    /// assert_eq!(limiter.running(), 0);
    ///
    /// limiter.record_start().await?;
    /// assert!(!limiter.can_proceed().await?);
    /// # Ok(())
    /// # }
    /// ```
    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        LimiterFuture::new(async move { Ok(self.peek(1).await?.is_none()) })
    }

    /// What a call costing `cost` would get now, without recording
    /// anything: `None` if it would be admitted, else the [`Denial`] it
    /// would receive (an instant, or "when a running call completes").
    ///
    /// Like [`can_proceed`](Limiter::can_proceed), only a hint under
    /// concurrency. The default asks for a grant of `cost` and gives it back
    /// at once ([`refund`](Limiter::refund)): exact for a limiter whose
    /// refunds return everything; the limiters of this crate look without
    /// taking.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::{Limiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(1))
    ///     .without_backoff()
    ///     .build()?;
    /// let start = Instant::now();
    /// drop(limiter.try_acquire_many(8).await?);
    /// assert!(limiter.peek(2).await?.is_none()); // two more fit now
    /// let denial = limiter.peek(3).await?.expect("three do not fit");
    /// assert_eq!(denial.retry_at(), Some(start + Duration::from_secs(1)));
    /// assert!(limiter.peek(2).await?.is_none()); // peeking took nothing
    /// # Ok(())
    /// # }
    /// ```
    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        LimiterFuture::new(async move {
            match self.try_acquire_many(cost).await? {
                Admission::Granted(permit) => {
                    self.refund(permit);
                    Ok(None)
                }
                Admission::Denied(denial) => Ok(Some(denial)),
            }
        })
    }

    /// The quota this limiter enforces and where it stands now, from one
    /// reading of its state (one lock, one store round trip): its limit and
    /// window, how many units it would grant now, and how long until it
    /// would grant more ([`QuotaStatus`]). What a server advertises in the
    /// `RateLimit` and `RateLimit-Policy` headers.
    ///
    /// `None` for a limiter without a quota of units per window. The
    /// sliding window, fixed window, sliding window counter, GCRA and token
    /// bucket limiters answer it, and so does a [`RateLimiter`](crate::RateLimiter);
    /// the default, `None`, suits the others (concurrency, delay, evenly
    /// spaced, leaky bucket, adaptive, composite). Like
    /// [`peek`](Limiter::peek), only a hint under concurrency.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::Quota;
    /// use tower_limits::{ConcurrencyLimiter, Limiter, LimiterExt, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let minute = Duration::from_secs(60);
    /// let limiter = RateLimiter::in_memory(Quota::fixed_window(10, minute)?);
    /// drop(limiter.acquire_many(4).await?);
    /// let status = limiter.quota_status().await?.expect("a windowed quota");
    /// assert_eq!((status.limit(), status.remaining()), (10, 6));
    /// // The next window, on a whole minute of Unix time.
    /// assert!(status.refill_in().is_some_and(|wait| wait <= minute));
    ///
    /// assert_eq!(ConcurrencyLimiter::new(4)?.quota_status().await?, None);
    /// # Ok(())
    /// # }
    /// ```
    fn quota_status(&self) -> LimiterFuture<'_, Result<Option<QuotaStatus>, LimiterError>> {
        LimiterFuture::ready(Ok(None))
    }

    /// Records that a call has started, whether or not the limiter had room.
    ///
    /// ```
    /// use tower_limits::{ConcurrencyLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ConcurrencyLimiter::new(1)?;
    /// limiter.record_start().await?;
    /// limiter.record_start().await?; // recorded even though the limit is reached
    /// assert_eq!(limiter.running(), 2);
    /// # Ok(())
    /// # }
    /// ```
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>>;

    /// Records that a call recorded with [`record_start`](Limiter::record_start)
    /// has finished, successfully or not.
    ///
    /// ```
    /// use tower_limits::{ConcurrencyLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ConcurrencyLimiter::new(1)?;
    /// limiter.record_start().await?;
    /// assert!(!limiter.can_proceed().await?);
    /// limiter.record_completion().await?;
    /// assert!(limiter.can_proceed().await?);
    /// # Ok(())
    /// # }
    /// ```
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>>;

    /// The earliest instant at which a new call could start, as far as the
    /// limiter can tell (a concurrency limit cannot know when a running call
    /// will finish, and reports the time gate only).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::{DelayLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = DelayLimiter::new(Duration::from_millis(500))?;
    /// let now = Instant::now();
    /// assert_eq!(limiter.next_available_time().await?, now); // free now
    /// limiter.record_start().await?;
    /// assert_eq!(limiter.next_available_time().await?, now + Duration::from_millis(500));
    /// # Ok(())
    /// # }
    /// ```
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        LimiterFuture::new(async move {
            let now = Instant::now();
            let denial = self.peek(1).await?;
            let at = denial.and_then(|denial| denial.retry_at()).unwrap_or(now);
            Ok(at.max(now))
        })
    }

    /// Imposes a pause: no call starts before `at` (for instance after an
    /// upstream 429 with `Retry-After`). It never shortens a wait the limiter
    /// itself requires.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::{ConcurrencyLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ConcurrencyLimiter::new(10)?;
    /// let resume = Instant::now() + Duration::from_secs(30); // from `Retry-After`
    /// limiter.set_next_available_time(resume).await?;
    /// limiter.set_next_available_time(Instant::now()).await?; // does not shorten it
    /// assert_eq!(limiter.next_available_time().await?, resume);
    /// assert!(!limiter.can_proceed().await?);
    ///
    /// tokio::time::advance(Duration::from_secs(30)).await;
    /// assert!(limiter.can_proceed().await?);
    /// # Ok(())
    /// # }
    /// ```
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>>;

    /// Resets the limiter to its initial state.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{Limiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 1, Duration::from_secs(60)).build()?;
    /// limiter.record_start().await?; // fills the window and starts a backoff
    /// limiter.set_next_available_after(Duration::from_secs(3600)).await?;
    /// assert!(!limiter.can_proceed().await?);
    ///
    /// limiter.clear().await?; // forgets the start, the backoff and the pause
    /// assert!(limiter.can_proceed().await?);
    /// # Ok(())
    /// # }
    /// ```
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>>;

    /// Gives back a permit this limiter granted that was never used: the
    /// call did not start, so the capacity (a concurrency slot, and for
    /// rate limiters the recorded start) returns where the strategy allows.
    /// Layers call it for reservations dropped before `call`; a composite
    /// calls it when a later part denies.
    ///
    /// The default releases a permit made with [`Permit::new`] through
    /// [`Release::refund`]; limiters that grant [`Permit::with_token`]
    /// override it, and a limiter that wraps another must forward it. It
    /// does not wait: a limiter whose refund needs a store round trip runs it
    /// in the background.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{Limiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 1, Duration::from_secs(60)).build()?;
    /// let Admission::Granted(permit) = limiter.try_acquire().await? else { unreachable!() };
    /// limiter.refund(permit);
    /// assert!(limiter.can_proceed().await?); // the start was erased
    /// # Ok(())
    /// # }
    /// ```
    fn refund(&self, permit: Permit) {
        permit.refund_held();
    }

    /// Settles an estimated cost once the real one is known (the tokens an
    /// LLM call used are only known from its response): gives back the
    /// difference when `actual` is lower than the permit's cost, charges it
    /// when higher, and makes `actual` the permit's cost.
    ///
    /// Charging can take a window or a bucket past its limit for a while;
    /// later calls then wait for it, so the limit holds on average. The
    /// default keeps the estimate (the permit is unchanged); the limiters of
    /// this crate settle.
    ///
    /// `actual` often comes from outside (an upstream's usage report), so
    /// the limiters of this crate **clamp it to the most they can ever
    /// grant** (a window's limit, a bucket's capacity, the concurrency
    /// maximum): past that the limiter is simply full, and a wrong or
    /// hostile number can hold it for at most about one full window or
    /// refill, never allocate in proportion to it. The permit's
    /// [`cost`](Permit::cost) says what was charged.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{Limiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // 1,000 tokens a minute; a call reserves its estimate of 600.
    /// let tokens = RateLimiter::builder("llm", 1_000, Duration::from_secs(60))
    ///     .without_backoff()
    ///     .build()?;
    /// let Admission::Granted(mut call) = tokens.try_acquire_many(600).await? else {
    ///     unreachable!()
    /// };
    /// assert!(tokens.peek(500).await?.is_some());
    /// tokens.settle(&mut call, 250); // the response says 250 were used
    /// assert_eq!(call.cost(), 250);
    /// assert!(tokens.peek(750).await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    fn settle(&self, permit: &mut Permit, actual: u32) {
        let _ = (permit, actual);
    }

    /// Whether anything besides this handle depends on the limiter's state:
    /// the permit of a running call that will report its completion, a
    /// caller waiting on it, or another handle (a clone).
    ///
    /// A [`KeyedLimiter`](crate::KeyedLimiter) never forgets a key whose
    /// limiter is in use, so a call that is still running keeps counting.
    /// The limiters of this crate answer it; the default, `false`, suits a
    /// limiter whose permits hold nothing. Implement it if yours counts
    /// completions.
    ///
    /// ```
    /// use tower_limits::{ConcurrencyLimiter, Limiter, LimiterExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ConcurrencyLimiter::new(2)?;
    /// assert!(!limiter.is_in_use());
    /// let running = limiter.acquire().await?;
    /// assert!(limiter.is_in_use()); // the running call's permit
    /// drop(running);
    /// assert!(!limiter.is_in_use());
    /// # Ok(())
    /// # }
    /// ```
    fn is_in_use(&self) -> bool {
        false
    }

    /// How many calls this limiter counts as running now, if it counts
    /// them: a snapshot, one atomic read for the limiters of this crate,
    /// cheap enough to take per request.
    ///
    /// `None` (the default) means "this limiter does not count running
    /// calls" (a rate limiter admits starts; when they end is not its
    /// business). A [`ConcurrencyLimiter`](crate::ConcurrencyLimiter) and an
    /// [`AdaptiveConcurrencyLimiter`](crate::AdaptiveConcurrencyLimiter)
    /// answer with their running count; a
    /// [`CompositeLimiter`](crate::CompositeLimiter) with the largest of
    /// its parts' answers; a limiter that wraps another forwards it.
    /// Like [`peek`](Limiter::peek), only a hint under concurrency.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{ConcurrencyLimiter, Limiter, LimiterExt, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ConcurrencyLimiter::new(4)?;
    /// let _running = limiter.acquire_many(3).await?;
    /// assert_eq!(limiter.in_flight(), Some(3));
    ///
    /// assert_eq!(RateLimiter::in_memory(Quota::gcra(10, Duration::from_secs(1))?).in_flight(), None);
    /// # Ok(())
    /// # }
    /// ```
    fn in_flight(&self) -> Option<u64> {
        None
    }

    /// The `Duration` form of
    /// [`set_next_available_time`](Limiter::set_next_available_time): pauses
    /// for `delay` from now.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{Limiter, DelayLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = DelayLimiter::new(Duration::from_millis(10))?;
    /// limiter.set_next_available_after(Duration::from_secs(30)).await?;
    /// assert!(!limiter.can_proceed().await?);
    /// tokio::time::advance(Duration::from_secs(30)).await;
    /// assert!(limiter.can_proceed().await?);
    /// # Ok(())
    /// # }
    /// ```
    fn set_next_available_after(
        &self,
        delay: Duration,
    ) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let at = Instant::now().checked_add(delay).unwrap_or_else(far_future);
        self.set_next_available_time(at)
    }
}

/// An instant far enough ahead to mean "not in this process's lifetime"
/// (about 30 years), for delays too large to add to `now`.
pub(crate) fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365 * 30)
}

impl<L: Limiter + ?Sized> Limiter for Arc<L> {
    fn try_acquire(&self) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        (**self).try_acquire()
    }
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        (**self).try_acquire_many(cost)
    }
    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        (**self).can_proceed()
    }
    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        (**self).peek(cost)
    }
    fn quota_status(&self) -> LimiterFuture<'_, Result<Option<QuotaStatus>, LimiterError>> {
        (**self).quota_status()
    }
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        (**self).record_start()
    }
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        (**self).record_completion()
    }
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        (**self).next_available_time()
    }
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        (**self).set_next_available_time(at)
    }
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        (**self).clear()
    }
    fn refund(&self, permit: Permit) {
        (**self).refund(permit);
    }
    fn settle(&self, permit: &mut Permit, actual: u32) {
        (**self).settle(permit, actual);
    }
    fn is_in_use(&self) -> bool {
        (**self).is_in_use()
    }
    fn in_flight(&self) -> Option<u64> {
        (**self).in_flight()
    }
}

/// Waiting acquisition for callers outside a layer (job runners, loops).
///
/// ```
/// use std::time::Duration;
/// use tower_limits::{DelayLimiter, LimiterExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = DelayLimiter::new(Duration::from_millis(100))?;
/// let start = tokio::time::Instant::now();
/// for _ in 0..3 {
///     let _permit = limiter.acquire().await?;
/// }
/// assert_eq!(start.elapsed(), Duration::from_millis(200));
/// # Ok(())
/// # }
/// ```
pub trait LimiterExt: Limiter {
    /// Waits until the limiter admits a call, then returns its permit.
    ///
    /// Cancel safe: dropping the future before it resolves holds no capacity.
    /// Callers are not queued: use a [`LimitLayer`](crate::LimitLayer) for
    /// first-come, first-served admission.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::{ConcurrencyLimiter, LimiterExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ConcurrencyLimiter::new(1)?;
    /// let first = limiter.acquire().await?;
    /// let start = Instant::now();
    /// tokio::spawn(async move {
    ///     tokio::time::sleep(Duration::from_secs(1)).await;
    ///     drop(first); // the first call finishes after a second
    /// });
    /// let _second = limiter.acquire().await?;
    /// assert_eq!(start.elapsed(), Duration::from_secs(1));
    /// # Ok(())
    /// # }
    /// ```
    fn acquire(&self) -> impl Future<Output = Result<Permit, LimiterError>> + Send + '_ {
        self.acquire_many(1)
    }

    /// Waits until the limiter admits a call costing `cost` units.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{LimiterExt, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(1))
    ///     .without_backoff()
    ///     .build()?;
    /// let start = tokio::time::Instant::now();
    /// drop(limiter.acquire_many(6).await?);
    /// drop(limiter.acquire_many(6).await?); // waits for the first six to leave
    /// assert_eq!(start.elapsed(), Duration::from_secs(1));
    /// # Ok(())
    /// # }
    /// ```
    fn acquire_many(
        &self,
        cost: u32,
    ) -> impl Future<Output = Result<Permit, LimiterError>> + Send + '_ {
        async move {
            loop {
                match self.try_acquire_many(cost).await? {
                    Admission::Granted(permit) => return Ok(permit),
                    Admission::Denied(denial) => denial.wait().await,
                }
            }
        }
    }

    /// Where the limiter stands now, in one snapshot ([`LimiterStats`]):
    /// when it would admit the next call, how many calls it counts as
    /// running, and its quota. An in-memory limiter answers at once,
    /// without allocating; a store-backed one in the round trips of
    /// [`next_available_time`](Limiter::next_available_time) and
    /// [`quota_status`](Limiter::quota_status).
    ///
    /// Limiters count no decisions: a named layer does
    /// ([`LimitLayer::name`](crate::LimitLayer::name), then its `stats()`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::store::Quota;
    /// use tower_limits::{LimiterExt, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::in_memory(Quota::gcra(1, Duration::from_secs(5))?.with_burst(2)?);
    /// drop(limiter.acquire_many(2).await?);
    /// let stats = limiter.stats().await?;
    /// assert_eq!(stats.next_available, Instant::now() + Duration::from_secs(5));
    /// assert_eq!(stats.in_flight, None); // a rate does not count running calls
    /// assert_eq!(stats.quota.map(|quota| quota.remaining()), Some(0));
    /// # Ok(())
    /// # }
    /// ```
    fn stats(&self) -> LimiterFuture<'_, Result<LimiterStats, LimiterError>> {
        let in_flight = self.in_flight();
        let next = self.next_available_time().into_ready();
        let quota = self.quota_status().into_ready();
        let stats = move |next: Result<Instant, _>, quota: Result<_, _>| {
            Ok(LimiterStats {
                next_available: next?,
                in_flight,
                quota: quota?,
            })
        };
        match (next, quota) {
            (Ok(next), Ok(quota)) => LimiterFuture::ready(stats(next, quota)),
            (next, quota) => LimiterFuture::new(async move {
                let next = settled(next).await;
                stats(next, settled(quota).await)
            }),
        }
    }
}

/// The value of a future split by [`LimiterFuture::into_ready`].
async fn settled<T>(answer: Result<T, LimiterFuture<'_, T>>) -> T {
    match answer {
        Ok(value) => value,
        Err(pending) => pending.await,
    }
}

impl<L: Limiter + ?Sized> LimiterExt for L {}
