//! The [`Limiter`] trait, its atomic acquire path and the permits it hands out.
//!
//! A limiter answers the six questions of the seed interface
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
//! use tower_limits::{Admission, ConcurrencyLimiter, Limiter};
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

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use event_listener::{Event, EventListener};
use tokio::time::Instant;

use crate::error::LimiterError;
use crate::quota_status::QuotaStatus;

/// The future every [`Limiter`] method returns.
///
/// In-memory limiters answer at once with [`LimiterFuture::ready`], which
/// allocates nothing; limiters backed by a network store box their future
/// with [`LimiterFuture::new`]. Keeping one concrete type keeps [`Limiter`]
/// usable as a trait object, so different limiters sit side by side in a
/// [`CompositeLimiter`](crate::CompositeLimiter).
///
/// ```
/// use tower_limits::LimiterFuture;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// assert_eq!(LimiterFuture::ready(7).await, 7);
/// assert_eq!(LimiterFuture::new(async { 7 }).await, 7);
/// # }
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct LimiterFuture<'a, T> {
    state: FutureState<'a, T>,
}

enum FutureState<'a, T> {
    Ready(Option<T>),
    Boxed(Pin<Box<dyn Future<Output = T> + Send + 'a>>),
}

// `T` is moved out, never pinned, so the future is `Unpin` whatever `T` is.
impl<T> Unpin for LimiterFuture<'_, T> {}

impl<'a, T> LimiterFuture<'a, T> {
    /// A future that resolves to `value` on its first poll, without allocating.
    ///
    /// ```
    /// use tower_limits::error::LimiterError;
    /// use tower_limits::LimiterFuture;
    ///
    /// // How an in-memory limiter answers `can_proceed`.
    /// let answer: LimiterFuture<'_, Result<bool, LimiterError>> = LimiterFuture::ready(Ok(true));
    /// // Known without polling: layers skip the await.
    /// assert!(matches!(answer.into_ready(), Ok(Ok(true))));
    /// ```
    #[inline]
    pub fn ready(value: T) -> Self {
        Self {
            state: FutureState::Ready(Some(value)),
        }
    }

    /// Boxes an asynchronous computation.
    ///
    /// ```
    /// use tower_limits::error::LimiterError;
    /// use tower_limits::LimiterFuture;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LimiterError> {
    /// // A store round trip, say.
    /// let round_trip = async { Ok::<_, LimiterError>(3_usize) };
    /// let future = LimiterFuture::new(round_trip);
    /// assert_eq!(future.await?, 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(future: impl Future<Output = T> + Send + 'a) -> Self {
        Self {
            state: FutureState::Boxed(Box::pin(future)),
        }
    }

    /// The value, if it is already known without polling; otherwise the
    /// future itself, to be awaited.
    ///
    /// ```
    /// use tower_limits::LimiterFuture;
    ///
    /// assert_eq!(LimiterFuture::ready(1).into_ready().ok(), Some(1));
    /// assert!(LimiterFuture::new(async { 1 }).into_ready().is_err());
    /// ```
    #[inline]
    pub fn into_ready(self) -> Result<T, Self> {
        match self.state {
            FutureState::Ready(Some(value)) => Ok(value),
            state => Err(Self { state }),
        }
    }
}

impl<T> Future for LimiterFuture<'_, T> {
    type Output = T;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match &mut self.get_mut().state {
            FutureState::Ready(value) => {
                Poll::Ready(value.take().expect("LimiterFuture polled after completion"))
            }
            FutureState::Boxed(future) => future.as_mut().poll(cx),
        }
    }
}

impl<T> fmt::Debug for LimiterFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            FutureState::Ready(_) => "ready",
            FutureState::Boxed(_) => "pending",
        };
        f.debug_struct("LimiterFuture")
            .field("state", &state)
            .finish()
    }
}

/// A limiting strategy: the seed's six operations plus an atomic acquire.
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
/// use tower_limits::{Admission, Denial, Limiter, LimiterFuture, Permit};
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
///     fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
///         LimiterFuture::ready(Ok(self.0.load(Ordering::Acquire)))
///     }
///     fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
///         LimiterFuture::ready(Ok(()))
///     }
///     fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
///         LimiterFuture::ready(Ok(()))
///     }
///     fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
///         LimiterFuture::ready(Ok(Instant::now()))
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
/// assert!(switch.can_proceed().await?);
/// # Ok(())
/// # }
/// ```
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
    /// use tower_limits::{Admission, Limiter, RateLimiter};
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
    /// use tower_limits::{Admission, Limiter, RateLimiter};
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
    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>>;

    /// What a call costing `cost` would get now, without recording
    /// anything: `None` if it would be admitted, else the [`Denial`] it
    /// would receive (an instant, or "when a running call completes").
    ///
    /// Like [`can_proceed`](Limiter::can_proceed), only a hint under
    /// concurrency. The default asks `can_proceed` and
    /// `next_available_time`, ignoring `cost`; the limiters of this crate
    /// answer exactly.
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
        let _ = cost;
        LimiterFuture::new(async move {
            if self.can_proceed().await? {
                return Ok(None);
            }
            Ok(Some(Denial::until(self.next_available_time().await?)))
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
    /// bucket limiters answer it, and so does a [`SharedLimiter`](crate::SharedLimiter);
    /// the default, `None`, suits the others (concurrency, delay, evenly
    /// spaced, leaky bucket, adaptive, composite). Like
    /// [`peek`](Limiter::peek), only a hint under concurrency.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{ConcurrencyLimiter, FixedWindowLimiter, Limiter, LimiterExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = FixedWindowLimiter::new(10, Duration::from_secs(60))?;
    /// drop(limiter.acquire_many(4).await?);
    /// let status = limiter.quota_status().await?.expect("a windowed quota");
    /// assert_eq!((status.limit(), status.remaining()), (10, 6));
    /// assert_eq!(status.refill_in(), Some(Duration::from_secs(60))); // the next window
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
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>>;

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
    /// use tower_limits::{Admission, Limiter, RateLimiter};
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
    /// use tower_limits::{Admission, Limiter, RateLimiter};
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
}

/// The answer of [`Limiter::try_acquire`].
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::{Admission, DelayLimiter, Limiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = DelayLimiter::new(Duration::from_secs(1))?;
/// let start = Instant::now();
/// match limiter.try_acquire().await? {
///     Admission::Granted(permit) => drop(permit), // run the call, then drop the permit
///     Admission::Denied(_) => unreachable!("nothing has started yet"),
/// }
/// match limiter.try_acquire().await? {
///     Admission::Granted(_) => unreachable!("a second has not passed"),
///     Admission::Denied(denial) => {
///         assert_eq!(denial.retry_at(), Some(start + Duration::from_secs(1)));
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub enum Admission {
    /// The call may start; drop the permit when it finishes.
    Granted(Permit),
    /// The call may not start yet.
    Denied(Denial),
}

/// Why and until when a call was denied.
///
/// A denial names either an instant ([`Denial::until`]) or a release event
/// ([`Denial::until_released`]: a running call must finish first). Waiting on
/// it ([`Denial::wait`]) sleeps exactly that long: no polling interval.
///
/// ```
/// use tower_limits::{Admission, ConcurrencyLimiter, Limiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = ConcurrencyLimiter::new(1)?;
/// let Admission::Granted(running) = limiter.try_acquire().await? else {
///     unreachable!("nothing is running yet");
/// };
/// let Admission::Denied(denial) = limiter.try_acquire().await? else {
///     unreachable!("the only slot is taken");
/// };
/// drop(running); // the running call completes...
/// denial.wait().await; // ...which ends the wait
/// assert!(matches!(limiter.try_acquire().await?, Admission::Granted(_)));
/// # Ok(())
/// # }
/// ```
///
/// A denial can also hold a place booked for the caller (a
/// [`LeakyBucketLimiter`](crate::LeakyBucketLimiter)'s slot): the place is
/// given back when the denial is dropped, or once [`wait`](Denial::wait)
/// ends, so a caller that gives up holds nothing.
#[derive(Debug)]
pub struct Denial {
    retry_at: Option<Instant>,
    released: Option<ReleaseListener>,
    booking: Option<Booking>,
}

/// A place a limiter booked for a denied caller, given back on drop.
pub(crate) struct Booking {
    booked: Arc<dyn Unbook>,
    /// What the limiter needs to give the place back (as a permit's token).
    token: u64,
}

/// A limiter that books places for denied callers.
pub(crate) trait Unbook: Send + Sync + 'static {
    /// Gives back the place booked with `token` for a caller that no longer
    /// waits.
    fn unbook(&self, token: u64);
}

impl Booking {
    pub(crate) fn new(booked: Arc<dyn Unbook>, token: u64) -> Self {
        Self { booked, token }
    }
}

impl Drop for Booking {
    fn drop(&mut self) {
        self.booked.unbook(self.token);
    }
}

impl fmt::Debug for Booking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Booking")
            .field("token", &self.token)
            .finish()
    }
}

impl Denial {
    /// Denied until `at`.
    ///
    /// ```
    /// use tokio::time::Instant;
    /// use tower_limits::Denial;
    ///
    /// let at = Instant::now();
    /// assert_eq!(Denial::until(at).retry_at(), Some(at));
    /// ```
    pub fn until(at: Instant) -> Self {
        Self {
            retry_at: Some(at),
            released: None,
            booking: None,
        }
    }

    /// Denied until the event behind `listener` fires (a running call
    /// completes).
    ///
    /// ```
    /// use tower_limits::{Denial, ReleaseEvent};
    ///
    /// let event = ReleaseEvent::new();
    /// let denial = Denial::until_released(event.listen());
    /// assert_eq!(denial.retry_at(), None);
    /// ```
    pub fn until_released(listener: ReleaseListener) -> Self {
        Self {
            retry_at: None,
            released: Some(listener),
            booking: None,
        }
    }

    /// Also ends the wait when the event behind `listener` fires, for a
    /// limiter whose capacity can come back early (a refund, a `clear`).
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// use tower_limits::{Denial, ReleaseEvent};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let refunded = ReleaseEvent::new();
    /// let start = Instant::now();
    /// let denial = Denial::until(start + Duration::from_secs(60)).or_released(refunded.listen());
    /// refunded.notify();
    /// denial.wait().await;
    /// assert_eq!(Instant::now(), start);
    /// # }
    /// ```
    pub fn or_released(mut self, listener: ReleaseListener) -> Self {
        self.released = Some(listener);
        self
    }

    /// The same denial, holding `booking` until it is dropped or waited out.
    pub(crate) fn holding(mut self, booking: Booking) -> Self {
        self.booking = Some(booking);
        self
    }

    /// A denial that [`ReleaseEvent::decide`] completes with a listener.
    pub(crate) fn until_release() -> Self {
        Self {
            retry_at: None,
            released: None,
            booking: None,
        }
    }

    /// The instant named by the limiter; `None` when the caller must wait for
    /// a running call to complete instead.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::{Admission, ConcurrencyLimiter, Limiter, LimiterExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ConcurrencyLimiter::new(1)?;
    /// let _running = limiter.acquire().await?;
    /// let Admission::Denied(full) = limiter.try_acquire().await? else { unreachable!() };
    /// assert_eq!(full.retry_at(), None); // when the running call completes
    ///
    /// let resume = Instant::now() + Duration::from_secs(5);
    /// limiter.set_next_available_time(resume).await?;
    /// let Admission::Denied(paused) = limiter.try_acquire().await? else { unreachable!() };
    /// assert_eq!(paused.retry_at(), Some(resume));
    /// # Ok(())
    /// # }
    /// ```
    pub fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }

    /// Waits until the call may be retried: the named instant, or the release
    /// event. Cancel safe: dropping the future holds nothing. A place the
    /// denial held is given back when the wait ends, just before the caller
    /// asks again.
    ///
    /// ```
    /// use tower_limits::Denial;
    /// use tokio::time::{Duration, Instant};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let at = Instant::now() + Duration::from_millis(250);
    /// Denial::until(at).wait().await;
    /// assert_eq!(Instant::now(), at);
    /// # }
    /// ```
    pub async fn wait(self) {
        // The booking stays held until the wait is over.
        let Self {
            retry_at,
            released,
            booking: _booking,
        } = self;
        match (retry_at, released) {
            (Some(at), Some(mut released)) => tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = &mut released.listener => {}
            },
            (Some(at), None) => tokio::time::sleep_until(at).await,
            (None, Some(mut released)) => (&mut released.listener).await,
            (None, None) => {}
        }
    }
}

/// Signals that capacity was released, waking callers denied with
/// [`Denial::until_released`]. For custom limiters.
///
/// [`notify`](ReleaseEvent::notify) costs one atomic load while nobody
/// listens. For that to be race free, follow this protocol:
///
/// * the waiter calls [`listen`](ReleaseEvent::listen) *before* its final
///   capacity check, and that check is a `SeqCst` atomic operation;
/// * the releaser frees capacity with a `SeqCst` atomic operation, then calls
///   `notify`.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
/// use tower_limits::{Denial, ReleaseEvent};
///
/// let free = AtomicUsize::new(0);
/// let released = ReleaseEvent::new();
///
/// // Waiter: listen, then look once more.
/// let listener = released.listen();
/// if free.load(SeqCst) == 0 {
///     let _denial = Denial::until_released(listener);
/// }
/// // Releaser: free capacity, then notify.
/// free.fetch_add(1, SeqCst);
/// released.notify();
/// ```
#[derive(Debug, Default)]
pub struct ReleaseEvent {
    inner: Arc<EventInner>,
}

#[derive(Debug, Default)]
struct EventInner {
    event: Event,
    listeners: AtomicUsize,
}

impl ReleaseEvent {
    /// A new event with no listeners.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::timeout;
    /// use tower_limits::{Denial, ReleaseEvent};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let released = ReleaseEvent::new();
    /// let denial = Denial::until_released(released.listen());
    /// released.notify();
    /// assert!(timeout(Duration::from_secs(1), denial.wait()).await.is_ok());
    /// # }
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers interest in the next [`notify`](ReleaseEvent::notify).
    ///
    /// Only listeners registered before the `notify` are woken by it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::timeout;
    /// use tower_limits::{Denial, ReleaseEvent};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let released = ReleaseEvent::new();
    /// let early = Denial::until_released(released.listen());
    /// released.notify();
    /// let late = Denial::until_released(released.listen());
    ///
    /// assert!(timeout(Duration::from_secs(1), early.wait()).await.is_ok());
    /// assert!(timeout(Duration::from_secs(1), late.wait()).await.is_err());
    /// # }
    /// ```
    pub fn listen(&self) -> ReleaseListener {
        // Registered with the event before it is counted: a releaser that
        // sees the count is sure to find the registration.
        let listener = self.inner.event.listen();
        self.inner.listeners.fetch_add(1, Ordering::SeqCst);
        ReleaseListener {
            listener,
            counted: Arc::clone(&self.inner),
        }
    }

    /// Runs `decide`; if it denies, listens and runs it once more, so capacity
    /// released in between is not missed. The final denial wakes on this
    /// event as well as at its own instant.
    #[inline]
    pub(crate) fn decide(&self, decide: impl Fn() -> Admission) -> Admission {
        if let granted @ Admission::Granted(_) = decide() {
            return granted;
        }
        let listener = self.listen();
        match decide() {
            Admission::Denied(denial) => Admission::Denied(denial.or_released(listener)),
            granted => granted,
        }
    }

    /// Wakes every registered listener.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::timeout;
    /// use tower_limits::{Denial, ReleaseEvent};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let released = ReleaseEvent::new();
    /// let first = Denial::until_released(released.listen());
    /// let second = Denial::until_released(released.listen());
    /// released.notify();
    /// assert!(timeout(Duration::from_secs(1), first.wait()).await.is_ok());
    /// assert!(timeout(Duration::from_secs(1), second.wait()).await.is_ok());
    /// # }
    /// ```
    #[inline]
    pub fn notify(&self) {
        if self.inner.listeners.load(Ordering::SeqCst) > 0 {
            self.inner.event.notify(usize::MAX);
        }
    }
}

/// A registration made by [`ReleaseEvent::listen`].
///
/// Hand it to [`Denial::until_released`] or [`Denial::or_released`]. It
/// keeps a notification that arrives before anyone waits on it; dropping it
/// withdraws the registration.
///
/// ```
/// use std::time::Duration;
/// use tokio::time::timeout;
/// use tower_limits::{Denial, ReleaseEvent, ReleaseListener};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let released = ReleaseEvent::new();
/// let listener: ReleaseListener = released.listen();
/// released.notify(); // before anyone waits: the listener keeps it
/// let denial = Denial::until_released(listener);
/// assert!(timeout(Duration::from_secs(1), denial.wait()).await.is_ok());
/// # }
/// ```
#[derive(Debug)]
pub struct ReleaseListener {
    listener: EventListener,
    counted: Arc<EventInner>,
}

impl Drop for ReleaseListener {
    fn drop(&mut self) {
        self.counted.listeners.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a limiter does when a [`Permit`] it granted goes away.
///
/// Implement it in a custom limiter that must learn about completions
/// (a concurrency count, call durations). `token` is whatever the limiter
/// put in the permit with [`Permit::new`], such as the start time.
///
/// Both methods take the `Arc` by value, so a limiter whose release is
/// asynchronous (a store round trip) can move it into a spawned task.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
/// use tower_limits::{Permit, Release};
///
/// /// Counts calls in flight.
/// #[derive(Default)]
/// struct InFlight(AtomicUsize);
///
/// impl Release for InFlight {
///     fn complete(self: Arc<Self>, _token: u64) {
///         self.0.fetch_sub(1, SeqCst);
///     }
/// }
///
/// let in_flight = Arc::new(InFlight::default());
/// in_flight.0.fetch_add(1, SeqCst); // admit a call...
/// let permit = Permit::new(in_flight.clone(), 0); // ...and hand out its permit
/// assert_eq!(in_flight.0.load(SeqCst), 1);
/// drop(permit); // the call finished
/// assert_eq!(in_flight.0.load(SeqCst), 0);
/// ```
pub trait Release: Send + Sync + 'static {
    /// The permitted call has finished (successfully, with an error, or
    /// because its future was dropped).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use tower_limits::{Permit, Release};
    ///
    /// /// Remembers the tokens of finished calls, in order.
    /// #[derive(Default)]
    /// struct Finished(Mutex<Vec<u64>>);
    ///
    /// impl Release for Finished {
    ///     fn complete(self: Arc<Self>, token: u64) {
    ///         self.0.lock().unwrap().push(token);
    ///     }
    /// }
    ///
    /// let finished = Arc::new(Finished::default());
    /// let first = Permit::new(finished.clone(), 1);
    /// let second = Permit::new(finished.clone(), 2);
    /// drop(second);
    /// drop(first);
    /// assert_eq!(*finished.0.lock().unwrap(), [2, 1]);
    /// ```
    fn complete(self: Arc<Self>, token: u64);

    /// The permit was never used: give the capacity back where the strategy
    /// allows. By default the same as [`complete`](Release::complete).
    ///
    /// [`Limiter::refund`] calls it for a permit made with [`Permit::new`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::error::LimiterError;
    /// use tower_limits::{Admission, Denial, Limiter, LimiterFuture, Permit, Release};
    ///
    /// /// A daily quota: finished calls use it up, unused permits give it back.
    /// struct Quota(AtomicUsize);
    ///
    /// impl Release for Quota {
    ///     fn complete(self: Arc<Self>, _token: u64) {} // the unit is spent
    ///     fn refund(self: Arc<Self>, _token: u64) {
    ///         self.0.fetch_add(1, SeqCst);
    ///     }
    /// }
    ///
    /// struct QuotaLimiter(Arc<Quota>);
    ///
    /// impl Limiter for QuotaLimiter {
    ///     fn try_acquire_many(&self, _cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
    ///         let taken = self.0.0.fetch_update(SeqCst, SeqCst, |left| left.checked_sub(1));
    ///         LimiterFuture::ready(Ok(match taken {
    ///             Ok(_) => Admission::Granted(Permit::new(self.0.clone(), 0)),
    ///             Err(_) => Admission::Denied(Denial::until(
    ///                 Instant::now() + Duration::from_secs(86_400),
    ///             )),
    ///         }))
    ///     }
    ///     // The six other operations are trivial here (hidden).
    /// #   fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> { LimiterFuture::ready(Ok(self.0.0.load(SeqCst) > 0)) }
    /// #   fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> { LimiterFuture::ready(Ok(())) }
    /// #   fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> { LimiterFuture::ready(Ok(())) }
    /// #   fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> { LimiterFuture::ready(Ok(Instant::now())) }
    /// #   fn set_next_available_time(&self, _at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> { LimiterFuture::ready(Ok(())) }
    /// #   fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> { LimiterFuture::ready(Ok(())) }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LimiterError> {
    /// let limiter = QuotaLimiter(Arc::new(Quota(AtomicUsize::new(2))));
    /// let Admission::Granted(used) = limiter.try_acquire().await? else { unreachable!() };
    /// drop(used); // the call ran: 1 left
    /// let Admission::Granted(unused) = limiter.try_acquire().await? else { unreachable!() };
    /// limiter.refund(unused); // never used: still 1 left
    /// assert_eq!(limiter.0.0.load(SeqCst), 1);
    /// # Ok(())
    /// # }
    /// ```
    fn refund(self: Arc<Self>, token: u64) {
        self.complete(token);
    }
}

/// Proof of admission. Dropping it records the call's completion.
///
/// A permit that was acquired but never used goes back with
/// [`Limiter::refund`], which also returns rate quota (the start is erased)
/// where the strategy allows it.
///
/// ```
/// use tower_limits::{Admission, ConcurrencyLimiter, Limiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = ConcurrencyLimiter::new(1)?;
/// if let Admission::Granted(permit) = limiter.try_acquire().await? {
///     assert_eq!(limiter.running(), 1);
///     drop(permit); // the call finished
/// }
/// assert_eq!(limiter.running(), 0);
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping a permit at once records the call as finished"]
pub struct Permit {
    kind: PermitKind,
    cost: u32,
}

enum PermitKind {
    Unit,
    Token(u64),
    Held {
        release: Arc<dyn Release>,
        token: u64,
    },
    Many(Vec<Permit>),
    /// A second limiter's grant, kept apart from the wrapping limiter's own
    /// (a [`Failover`](crate::Failover)'s fallback).
    Wrapped(Box<Permit>),
}

impl Permit {
    /// A permit with nothing to release (what [`NullLimiter`](crate::NullLimiter) grants).
    ///
    /// ```
    /// assert_eq!(tower_limits::Permit::unit().token(), None);
    /// ```
    #[inline]
    pub fn unit() -> Self {
        Self {
            kind: PermitKind::Unit,
            cost: 1,
        }
    }

    /// A permit that tells `release` about the call's end, passing `token`:
    /// for limiters that must learn of completions (a concurrency count,
    /// call durations).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use tower_limits::{Permit, Release};
    ///
    /// struct LastFinished(AtomicU64);
    /// impl Release for LastFinished {
    ///     fn complete(self: Arc<Self>, token: u64) {
    ///         self.0.store(token, Ordering::Relaxed);
    ///     }
    /// }
    ///
    /// let finished = Arc::new(LastFinished(AtomicU64::new(0)));
    /// drop(Permit::new(finished.clone(), 7));
    /// assert_eq!(finished.0.load(Ordering::Relaxed), 7);
    /// ```
    #[inline]
    pub fn new(release: Arc<dyn Release>, token: u64) -> Self {
        Self {
            kind: PermitKind::Held { release, token },
            cost: 1,
        }
    }

    /// A permit that only carries `token` (what the limiter recorded, such
    /// as the start time) for its [`Limiter::refund`]; dropping it does
    /// nothing. For limiters that count starts, not completions.
    ///
    /// ```
    /// assert_eq!(tower_limits::Permit::with_token(42).token(), Some(42));
    /// ```
    #[inline]
    pub fn with_token(token: u64) -> Self {
        Self {
            kind: PermitKind::Token(token),
            cost: 1,
        }
    }

    /// A permit made of several, released together (a composite's grant).
    ///
    /// ```
    /// use tower_limits::Permit;
    ///
    /// let permit = Permit::many(vec![Permit::unit(), Permit::with_token(1)]);
    /// assert_eq!(permit.token(), None);
    /// ```
    pub fn many(permits: Vec<Permit>) -> Self {
        let cost = permits.iter().map(Permit::cost).max().unwrap_or(1);
        Self {
            kind: PermitKind::Many(permits),
            cost,
        }
    }

    /// `permit`, wrapped so that its limiter's wrapper can tell it from its
    /// own grants.
    pub(crate) fn wrap(permit: Permit) -> Self {
        Self {
            cost: permit.cost,
            kind: PermitKind::Wrapped(Box::new(permit)),
        }
    }

    /// The permit inside a [`Permit::wrap`], if this is one.
    pub(crate) fn wrapped_mut(&mut self) -> Option<&mut Permit> {
        match &mut self.kind {
            PermitKind::Wrapped(permit) => Some(permit),
            _ => None,
        }
    }

    /// The permit inside a [`Permit::wrap`]; otherwise the permit itself.
    pub(crate) fn unwrap_wrapped(mut self) -> Result<Permit, Permit> {
        match std::mem::replace(&mut self.kind, PermitKind::Unit) {
            PermitKind::Wrapped(permit) => Ok(*permit),
            kind => {
                self.kind = kind;
                Err(self)
            }
        }
    }

    /// The token given to [`Permit::new`] or [`Permit::with_token`].
    ///
    /// ```
    /// use tower_limits::Permit;
    ///
    /// assert_eq!(Permit::with_token(9).token(), Some(9));
    /// assert_eq!(Permit::unit().token(), None);
    /// ```
    #[inline]
    pub fn token(&self) -> Option<u64> {
        match self.kind {
            PermitKind::Token(token) | PermitKind::Held { token, .. } => Some(token),
            PermitKind::Unit | PermitKind::Many(_) | PermitKind::Wrapped(_) => None,
        }
    }

    /// The same permit for a call costing `cost` units (1 unless set).
    ///
    /// ```
    /// assert_eq!(tower_limits::Permit::with_token(7).with_cost(5).cost(), 5);
    /// ```
    pub fn with_cost(mut self, cost: u32) -> Self {
        self.cost = cost;
        self
    }

    /// How many units the permitted call costs.
    ///
    /// ```
    /// assert_eq!(tower_limits::Permit::unit().cost(), 1);
    /// ```
    pub fn cost(&self) -> u32 {
        self.cost
    }

    /// The permits of a [`Permit::many`], in order; otherwise the permit itself.
    pub(crate) fn into_parts(mut self) -> Vec<Permit> {
        let cost = self.cost;
        match std::mem::replace(&mut self.kind, PermitKind::Unit) {
            PermitKind::Many(permits) => permits,
            kind => vec![Permit { kind, cost }],
        }
    }

    /// The token and cost, with the permit taken apart so that dropping it
    /// records nothing: for a limiter's own [`Limiter::refund`].
    pub(crate) fn disarm(mut self) -> (Option<u64>, u32) {
        let token = self.token();
        self.kind = PermitKind::Unit;
        (token, self.cost)
    }

    /// Changes the cost (and, for a permit that has one, the token) after a
    /// limiter settled it.
    pub(crate) fn settled(&mut self, cost: u32, token: Option<u64>) {
        self.cost = cost;
        if let (Some(new), PermitKind::Token(token) | PermitKind::Held { token, .. }) =
            (token, &mut self.kind)
        {
            *token = new;
        }
    }

    /// The permits of a [`Permit::many`], to settle one by one.
    pub(crate) fn parts_mut(&mut self) -> &mut [Permit] {
        if !matches!(self.kind, PermitKind::Many(_)) {
            return std::slice::from_mut(self);
        }
        match &mut self.kind {
            PermitKind::Many(permits) => permits,
            _ => &mut [],
        }
    }

    /// Returns an unused permit through its [`Release::refund`], if it has one.
    pub(crate) fn refund_held(mut self) {
        match std::mem::replace(&mut self.kind, PermitKind::Unit) {
            PermitKind::Held { release, token } => release.refund(token),
            PermitKind::Many(permits) => permits.into_iter().for_each(Permit::refund_held),
            PermitKind::Wrapped(permit) => permit.refund_held(),
            PermitKind::Unit | PermitKind::Token(_) => {}
        }
    }
}

impl Drop for Permit {
    #[inline]
    fn drop(&mut self) {
        // The permits of in-memory rate limiters hold nothing: keep their
        // drop to one test, inlined into the caller.
        if matches!(self.kind, PermitKind::Held { .. } | PermitKind::Many(_)) {
            self.release();
        }
    }
}

impl Permit {
    #[cold]
    #[inline(never)]
    fn release(&mut self) {
        match std::mem::replace(&mut self.kind, PermitKind::Unit) {
            PermitKind::Held { release, token } => release.complete(token),
            // A `Many`'s permits release themselves as they drop.
            other => drop(other),
        }
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            PermitKind::Unit => f.write_str("Permit"),
            PermitKind::Token(token) | PermitKind::Held { token, .. } => {
                f.debug_struct("Permit").field("token", token).finish()
            }
            PermitKind::Many(permits) => f.debug_tuple("Permit").field(permits).finish(),
            PermitKind::Wrapped(permit) => f.debug_tuple("Permit").field(permit).finish(),
        }
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
}

impl<L: Limiter + ?Sized> LimiterExt for L {}
