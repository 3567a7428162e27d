//! Job workers: what a worker does when a job fails in a way worth retrying
//! later (an upstream `429`, a `503`, a timeout).
//!
//! A worker of a job queue asks the limiter before it claims a job (a
//! [`LimitLayer`](crate::LimitLayer) in the worker's tower stack: its
//! `poll_ready` waits for admission, and a queue driven by tower claims a
//! job only once the service is ready), records the start and the
//! completion around the job (the layer's [`Permit`](crate::Permit)), and
//! when the job fails with a [`RetryableJobError`] asks [`reschedule`] when
//! to run it again:
//!
//! * at the error's own retry instant, if it carries one (the upstream's
//!   `Retry-After`), after pushing the limiter back to that instant, so that
//!   every worker sharing the limiter pauses instead of hitting the upstream
//!   again;
//! * else at the limiter's [`next_available_time`](Limiter::next_available_time).
//!
//! The job goes back to the queue with that date (never retried at once,
//! never dropped). `integration/examples/job_worker.rs` does this on
//! [apalis](https://docs.rs/apalis) workers sharing one Redis limit.
//!
//! An upstream's wait is capped, as on every path from an upstream's wait
//! to a pause: at most [`DEFAULT_MAX_UPSTREAM_WAIT`] (5 minutes), or the
//! [`max_wait`](Rescheduler::max_wait) of a [`Rescheduler`]. Both the pause
//! of the shared limiter and the job's retry instant are cut to it, with a
//! `tracing` warning, so that a hostile `Retry-After: 99999999999` cannot
//! park the fleet's workers for years; the job still goes back to the
//! queue.
//!
//! ```
//! use std::time::Duration;
//! use tokio::time::Instant;
//! use tower_limits::job::{RetryableJobError, reschedule};
//! use tower_limits::{Limiter, RateLimiter};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = RateLimiter::builder("geocoder", 20, Duration::from_secs(1)).build()?;
//! // The upstream answered 429 with `Retry-After: 30`.
//! let error = RetryableJobError::new("429 Too Many Requests").retry_after(Duration::from_secs(30));
//! let next = reschedule(&limiter, &error).await?;
//! assert_eq!(next.at(), Instant::now() + Duration::from_secs(30));
//! // Every worker sharing the limiter waits too.
//! assert!(!limiter.can_proceed().await?);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::error::{BoxError, LimiterError};
use crate::limiter::{DEFAULT_MAX_UPSTREAM_WAIT, Limiter, cap_upstream_wait, far_future};

/// A job failed in a way worth retrying later, perhaps at an instant the
/// failure named (a retryable job error).
///
/// Give it to [`reschedule`] to learn when to run the job again.
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::job::RetryableJobError;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let timeout = RetryableJobError::new("upstream timed out");
/// assert_eq!(timeout.retry_at(), None); // whenever the limiter allows
///
/// let throttled = RetryableJobError::new("429").retry_after(Duration::from_secs(2));
/// assert_eq!(throttled.retry_at(), Some(Instant::now() + Duration::from_secs(2)));
/// assert_eq!(throttled.to_string(), "retryable job error: 429");
/// # }
/// ```
#[derive(Debug)]
pub struct RetryableJobError {
    retry_at: Option<Instant>,
    source: BoxError,
}

impl RetryableJobError {
    /// A retryable failure caused by `source`, with no retry instant of its
    /// own: the job runs again when the limiter allows.
    ///
    /// ```
    /// use std::error::Error;
    /// use tower_limits::job::RetryableJobError;
    ///
    /// let error = RetryableJobError::new("503 Service Unavailable");
    /// assert_eq!(error.source().unwrap().to_string(), "503 Service Unavailable");
    /// ```
    pub fn new(source: impl Into<BoxError>) -> Self {
        Self {
            retry_at: None,
            source: source.into(),
        }
    }

    /// Retries no earlier than `at`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::job::RetryableJobError;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let at = Instant::now() + Duration::from_millis(300);
    /// assert_eq!(RetryableJobError::new("429").retry_at_instant(at).retry_at(), Some(at));
    /// # }
    /// ```
    pub fn retry_at_instant(mut self, at: Instant) -> Self {
        self.retry_at = Some(at);
        self
    }

    /// Retries no earlier than `wait` from now. A wait too long to mean
    /// anything saturates at about 30 years; [`reschedule`] caps it at
    /// [`DEFAULT_MAX_UPSTREAM_WAIT`] (5 minutes).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::job::RetryableJobError;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let error = RetryableJobError::new("429").retry_after(Duration::from_secs(1));
    /// assert_eq!(error.retry_at(), Some(Instant::now() + Duration::from_secs(1)));
    /// # }
    /// ```
    pub fn retry_after(self, wait: Duration) -> Self {
        let cap = far_future();
        let at = Instant::now()
            .checked_add(wait)
            .map_or(cap, |at| at.min(cap));
        self.retry_at_instant(at)
    }

    /// The instant the failure named, if any.
    ///
    /// ```
    /// use tower_limits::job::RetryableJobError;
    ///
    /// assert_eq!(RetryableJobError::new("connection reset").retry_at(), None);
    /// ```
    pub fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }

    /// The cause, given back.
    ///
    /// ```
    /// use tower_limits::job::RetryableJobError;
    ///
    /// let error = RetryableJobError::new("429");
    /// assert_eq!(error.into_source().to_string(), "429");
    /// ```
    pub fn into_source(self) -> BoxError {
        self.source
    }
}

impl fmt::Display for RetryableJobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "retryable job error: {}", self.source)
    }
}

impl std::error::Error for RetryableJobError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
impl From<crate::http::RetryLater> for RetryableJobError {
    /// A request the HTTP retry policy gave up on: retry at the instant the
    /// upstream named (which [`reschedule`] caps at
    /// [`DEFAULT_MAX_UPSTREAM_WAIT`] from now).
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::StatusCode;
    /// use tower_limits::http::RetryLater;
    /// use tower_limits::job::RetryableJobError;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let later = RetryLater::new(StatusCode::TOO_MANY_REQUESTS, Duration::from_secs(5), 3);
    /// let error = RetryableJobError::from(later);
    /// assert_eq!(error.retry_at(), Some(later.retry_at()));
    /// # }
    /// ```
    fn from(later: crate::http::RetryLater) -> Self {
        Self::new(later).retry_at_instant(later.retry_at())
    }
}

/// When to run a job again: an instant in this process and the same moment
/// as a wall-clock date, to store in a queue that other processes read.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use tower_limits::job::{RetryableJobError, reschedule};
/// use tower_limits::NullLimiter;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let error = RetryableJobError::new("429").retry_after(Duration::from_secs(60));
/// let next = reschedule(&NullLimiter, &error).await?;
/// assert!(next.date() > SystemTime::now() + Duration::from_secs(59));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reschedule {
    at: Instant,
    date: SystemTime,
}

impl Reschedule {
    /// The moment `at`, with its wall-clock date read now.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tokio::time::Instant;
    /// use tower_limits::job::Reschedule;
    ///
    /// let next = Reschedule::new(Instant::now() + Duration::from_secs(10));
    /// assert!(next.date() > SystemTime::now() + Duration::from_secs(9));
    /// ```
    pub fn new(at: Instant) -> Self {
        let now = Instant::now();
        let system_now = SystemTime::now();
        let date = if at >= now {
            system_now.checked_add(at - now).unwrap_or(system_now)
        } else {
            system_now.checked_sub(now - at).unwrap_or(system_now)
        };
        Self { at, date }
    }

    /// The instant, in this process.
    ///
    /// ```
    /// use tokio::time::Instant;
    /// use tower_limits::job::Reschedule;
    ///
    /// let at = Instant::now();
    /// assert_eq!(Reschedule::new(at).at(), at);
    /// ```
    pub fn at(&self) -> Instant {
        self.at
    }

    /// The wall-clock date.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tokio::time::Instant;
    /// use tower_limits::job::Reschedule;
    ///
    /// let next = Reschedule::new(Instant::now() - Duration::from_secs(5));
    /// assert!(next.date() < SystemTime::now());
    /// ```
    pub fn date(&self) -> SystemTime {
        self.date
    }
}

/// When to run a job that failed with `error`, as a rate-limited job worker decides:
/// at the error's retry instant, after pushing `limiter` back to it
/// ([`set_next_available_time`](Limiter::set_next_available_time), so that
/// every worker sharing the limiter pauses until then); without one, at the
/// limiter's [`next_available_time`](Limiter::next_available_time).
///
/// A retry instant more than [`DEFAULT_MAX_UPSTREAM_WAIT`] (5 minutes) away
/// is cut to it, for the limiter and the job alike, with a warning; a
/// [`Rescheduler`] sets another cap.
///
/// # Errors
///
/// The limiter's error, if it could not be asked or pushed back (a store
/// that is down). The job should still go back to the queue, at a date of
/// the caller's choosing.
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::job::{RetryableJobError, reschedule};
/// use tower_limits::{DelayLimiter, Limiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = DelayLimiter::new(Duration::from_millis(500))?;
/// limiter.record_start().await?; // a job just started
///
/// // A failure without a date: when the limiter would admit the next job.
/// let next = reschedule(&limiter, &RetryableJobError::new("timeout")).await?;
/// assert_eq!(next.at(), Instant::now() + Duration::from_millis(500));
/// # Ok(())
/// # }
/// ```
pub async fn reschedule<L: Limiter + ?Sized>(
    limiter: &L,
    error: &RetryableJobError,
) -> Result<Reschedule, LimiterError> {
    reschedule_within(limiter, error, DEFAULT_MAX_UPSTREAM_WAIT).await
}

/// Reschedules the jobs that fail with a [`RetryableJobError`] as
/// [`reschedule`] does, pausing one limiter, with a cap of your choosing
/// on the upstream's wait.
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::job::{RetryableJobError, Rescheduler};
/// use tower_limits::{Limiter, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RateLimiter::builder("geocoder", 20, Duration::from_secs(1)).build()?;
/// let rescheduler = Rescheduler::new(limiter.clone()).max_wait(Duration::from_secs(60));
///
/// // The upstream asked for an hour: the job, and every worker, wait a minute.
/// let error = RetryableJobError::new("429").retry_after(Duration::from_secs(3_600));
/// let next = rescheduler.reschedule(&error).await?;
/// assert_eq!(next.at(), Instant::now() + Duration::from_secs(60));
/// assert_eq!(limiter.next_available_time().await?, next.at());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Rescheduler<L> {
    limiter: L,
    max_wait: Duration,
}

impl<L: Limiter> Rescheduler<L> {
    /// Reschedules jobs by `limiter`, the one the workers share, with the
    /// default cap ([`DEFAULT_MAX_UPSTREAM_WAIT`], 5 minutes).
    ///
    /// ```
    /// use tower_limits::job::Rescheduler;
    /// use tower_limits::NullLimiter;
    ///
    /// let rescheduler = Rescheduler::new(NullLimiter);
    /// # let _ = rescheduler;
    /// ```
    pub fn new(limiter: L) -> Self {
        Self {
            limiter,
            max_wait: DEFAULT_MAX_UPSTREAM_WAIT,
        }
    }

    /// The longest an upstream's retry instant can pause the limiter and
    /// put the job off (default [`DEFAULT_MAX_UPSTREAM_WAIT`], 5 minutes);
    /// later ones are cut to it, with a warning.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::job::Rescheduler;
    /// use tower_limits::NullLimiter;
    ///
    /// let rescheduler = Rescheduler::new(NullLimiter).max_wait(Duration::from_secs(60));
    /// # let _ = rescheduler;
    /// ```
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// When to run a job that failed with `error`: as [`reschedule`], with
    /// this rescheduler's cap.
    ///
    /// # Errors
    ///
    /// The limiter's error, as [`reschedule`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::job::{RetryableJobError, Rescheduler};
    /// use tower_limits::NullLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let rescheduler = Rescheduler::new(NullLimiter);
    /// let error = RetryableJobError::new("503").retry_after(Duration::from_secs(30));
    /// let next = rescheduler.reschedule(&error).await?;
    /// assert_eq!(next.at(), Instant::now() + Duration::from_secs(30)); // within the cap
    /// # Ok(())
    /// # }
    /// ```
    pub async fn reschedule(&self, error: &RetryableJobError) -> Result<Reschedule, LimiterError> {
        reschedule_within(&self.limiter, error, self.max_wait).await
    }
}

/// [`reschedule`], with the error's retry instant at most `max_wait` away.
async fn reschedule_within<L: Limiter + ?Sized>(
    limiter: &L,
    error: &RetryableJobError,
    max_wait: Duration,
) -> Result<Reschedule, LimiterError> {
    let at = match error.retry_at() {
        Some(at) => {
            let at = cap_retry_instant(at, max_wait);
            limiter.set_next_available_time(at).await?;
            at
        }
        None => limiter.next_available_time().await?,
    };
    Ok(Reschedule::new(at))
}

/// `at`, or `max_wait` from now if that comes first (with a warning).
fn cap_retry_instant(at: Instant, max_wait: Duration) -> Instant {
    let now = Instant::now();
    let wait = cap_upstream_wait(at.saturating_duration_since(now), max_wait);
    at.min(now.checked_add(wait).unwrap_or_else(far_future))
}
