//! Errors of the HTTP integration.

use std::fmt;
use std::time::{Duration, SystemTime};

use http::StatusCode;
use tokio::time::Instant;

use crate::limiter::far_future;

/// At most this many bytes of a bad header value are kept for messages.
const MAX_SHOWN: usize = 64;

/// A header value that could not be read; the header is ignored (and
/// logged). The message names the header, shows the start of the value
/// (escaped, at most 64 bytes) and says what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InvalidHeader {
    name: &'static str,
    value: String,
    reason: &'static str,
}

impl InvalidHeader {
    pub(crate) fn new(name: &'static str, value: &[u8], reason: &'static str) -> Self {
        let shown = &value[..value.len().min(MAX_SHOWN)];
        Self {
            name,
            value: shown.escape_ascii().to_string(),
            reason,
        }
    }
}

impl fmt::Display for InvalidHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid `{}` header (\"{}\"): {}",
            self.name, self.value, self.reason
        )
    }
}

impl std::error::Error for InvalidHeader {}

/// The upstream still throttled the request when the retry policy gave up
/// (attempts or budget exhausted, or the advertised wait too long): the
/// typed error for callers who queue the work themselves.
///
/// [`retry_at`](RetryLater::retry_at) is the instant in this process;
/// [`retry_date`](RetryLater::retry_date) the wall-clock date, to store in a
/// job queue shared with other processes.
///
/// ```
/// use std::time::Duration;
/// use http::StatusCode;
/// use tokio::time::Instant;
/// use tower_limits::http::RetryLater;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let later = RetryLater::new(StatusCode::TOO_MANY_REQUESTS, Duration::from_secs(30), 3);
/// assert_eq!(later.retry_at(), Instant::now() + Duration::from_secs(30));
/// assert_eq!(
///     later.to_string(),
///     "upstream answered 429 Too Many Requests after 3 attempts: retry in 30s"
/// );
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryLater {
    status: StatusCode,
    retry_at: Instant,
    retry_date: SystemTime,
    attempts: u32,
}

impl RetryLater {
    /// A request answered `status` after `attempts` attempts, to retry after
    /// `wait` from now.
    ///
    /// A wait too long to mean anything (such as a `Retry-After` of
    /// `99999999999999999999`) saturates at about 30 years, for
    /// [`retry_at`](RetryLater::retry_at) and
    /// [`retry_date`](RetryLater::retry_date) alike: never "retry now".
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::StatusCode;
    /// use tower_limits::http::RetryLater;
    ///
    /// let later = RetryLater::new(StatusCode::SERVICE_UNAVAILABLE, Duration::from_secs(5), 1);
    /// assert_eq!(later.status(), StatusCode::SERVICE_UNAVAILABLE);
    /// assert_eq!(later.attempts(), 1);
    /// ```
    pub fn new(status: StatusCode, wait: Duration, attempts: u32) -> Self {
        let now = Instant::now();
        let cap = far_future();
        let retry_at = now.checked_add(wait).map_or(cap, |at| at.min(cap));
        let system_now = SystemTime::now();
        // At most the cap's 30 years: a date that always exists.
        let retry_date = system_now
            .checked_add(retry_at.duration_since(now))
            .unwrap_or(system_now);
        Self {
            status,
            retry_at,
            retry_date,
            attempts,
        }
    }

    /// The status of the last answer (429 or 503).
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::StatusCode;
    /// use tower_limits::http::RetryLater;
    ///
    /// let later = RetryLater::new(StatusCode::TOO_MANY_REQUESTS, Duration::ZERO, 2);
    /// assert_eq!(later.status().as_u16(), 429);
    /// ```
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// When to send the request again, in this process.
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::StatusCode;
    /// use tokio::time::Instant;
    /// use tower_limits::http::RetryLater;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let later = RetryLater::new(StatusCode::TOO_MANY_REQUESTS, Duration::from_secs(2), 1);
    /// tokio::time::sleep_until(later.retry_at()).await;
    /// assert!(Instant::now() >= later.retry_at());
    /// # }
    /// ```
    pub fn retry_at(&self) -> Instant {
        self.retry_at
    }

    /// When to send the request again, as a wall-clock date (for a job queue
    /// read by other processes).
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use http::StatusCode;
    /// use tower_limits::http::RetryLater;
    ///
    /// let later = RetryLater::new(StatusCode::TOO_MANY_REQUESTS, Duration::from_secs(60), 1);
    /// assert!(later.retry_date() > SystemTime::now());
    /// ```
    pub fn retry_date(&self) -> SystemTime {
        self.retry_date
    }

    /// How many attempts were made.
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::StatusCode;
    /// use tower_limits::http::RetryLater;
    ///
    /// assert_eq!(RetryLater::new(StatusCode::TOO_MANY_REQUESTS, Duration::ZERO, 4).attempts(), 4);
    /// ```
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

impl fmt::Display for RetryLater {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "upstream answered {} after {} attempts: retry in {:?}",
            self.status,
            self.attempts,
            self.retry_at.saturating_duration_since(Instant::now())
        )
    }
}

impl std::error::Error for RetryLater {}
