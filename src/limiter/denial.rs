//! [`Admission`] and [`Denial`](super::Denial): what a limiter answers, and when to ask
//! again.

use std::fmt;
use std::sync::Arc;

use tokio::time::Instant;

use super::{Permit, ReleaseListener};

/// The answer of [`Limiter::try_acquire`](super::Limiter::try_acquire).
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::limiter::Admission;
/// use tower_limits::{DelayLimiter, Limiter};
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
/// A denial names either an instant ([`Denial::until`](super::Denial::until)) or a release event
/// ([`Denial::until_released`](super::Denial::until_released): a running call must finish first). Waiting on
/// it ([`Denial::wait`](super::Denial::wait)) sleeps exactly that long: no polling interval.
///
/// ```
/// use tower_limits::limiter::Admission;
/// use tower_limits::{ConcurrencyLimiter, Limiter};
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
    /// Boxed, so that an [`Admission`] is the size of a [`Permit`](super::Permit): grants,
    /// the hot path, move fewer bytes through the layers.
    inner: Box<DenialInner>,
}

#[derive(Debug)]
struct DenialInner {
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
    /// use tower_limits::limiter::Denial;
    ///
    /// let at = Instant::now();
    /// assert_eq!(Denial::until(at).retry_at(), Some(at));
    /// ```
    pub fn until(at: Instant) -> Self {
        Self::new(Some(at), None)
    }

    fn new(retry_at: Option<Instant>, released: Option<ReleaseListener>) -> Self {
        Self {
            inner: Box::new(DenialInner {
                retry_at,
                released,
                booking: None,
            }),
        }
    }

    /// Denied until the event behind `listener` fires (a running call
    /// completes).
    ///
    /// ```
    /// use tower_limits::limiter::{Denial, ReleaseEvent};
    ///
    /// let event = ReleaseEvent::new();
    /// let denial = Denial::until_released(event.listen());
    /// assert_eq!(denial.retry_at(), None);
    /// ```
    pub fn until_released(listener: ReleaseListener) -> Self {
        Self::new(None, Some(listener))
    }

    /// Also ends the wait when the event behind `listener` fires, for a
    /// limiter whose capacity can come back early (a refund, a `clear`).
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// use tower_limits::limiter::{Denial, ReleaseEvent};
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
        self.inner.released = Some(listener);
        self
    }

    /// The same denial, holding `booking` until it is dropped or waited out.
    pub(crate) fn holding(mut self, booking: Booking) -> Self {
        self.inner.booking = Some(booking);
        self
    }

    /// A denial that [`ReleaseEvent::decide`] completes with a listener.
    pub(crate) fn until_release() -> Self {
        Self::new(None, None)
    }

    /// The instant named by the limiter; `None` when the caller must wait for
    /// a running call to complete instead.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{ConcurrencyLimiter, Limiter, LimiterExt};
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
        self.inner.retry_at
    }

    /// Waits until the call may be retried: the named instant, or the release
    /// event. Cancel safe: dropping the future holds nothing. A place the
    /// denial held is given back when the wait ends, just before the caller
    /// asks again.
    ///
    /// ```
    /// use tower_limits::limiter::Denial;
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
        let DenialInner {
            retry_at,
            released,
            booking: _booking,
        } = *self.inner;
        match (retry_at, released) {
            (Some(at), Some(mut released)) => {
                // Whichever comes first: the instant, or the release.
                let _ = tokio::time::timeout_at(at, &mut released.listener).await;
            }
            (Some(at), None) => tokio::time::sleep_until(at).await,
            (None, Some(mut released)) => (&mut released.listener).await,
            (None, None) => {}
        }
    }
}
