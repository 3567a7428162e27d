//! The cap on a wait an upstream asks for, shared by every path from an
//! upstream's answer to a pause.

use std::time::Duration;

/// The longest an upstream can make a client wait, unless set otherwise: 5
/// minutes.
///
/// Every path from an upstream's `Retry-After` (or `RateLimit` reset) to a
/// wait is capped by it, so a hostile or broken upstream
/// (`Retry-After: 99999999999`) cannot park the client, or a fleet of job
/// workers, for years:
///
/// * the pause `http::FeedbackLayer` puts on its limiters
///   (`FeedbackLayer::max_wait`, feature `http`);
/// * the sleep of `http::RetryPolicy` before a retry, which gives up past
///   it (`RetryPolicy::max_wait`);
/// * the pause [`job::reschedule`](crate::job::reschedule) puts on a job
///   worker's limiter, and the instant it returns for the job
///   ([`Rescheduler::max_wait`](crate::job::Rescheduler::max_wait)).
///
/// A longer wait is cut to the cap with a `tracing` warning.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::limiter::DEFAULT_MAX_UPSTREAM_WAIT;
///
/// assert_eq!(DEFAULT_MAX_UPSTREAM_WAIT, Duration::from_secs(5 * 60));
/// ```
pub const DEFAULT_MAX_UPSTREAM_WAIT: Duration = Duration::from_secs(300);

/// The `wait` an upstream asked for, at most `max_wait`; warns when it cuts.
pub(crate) fn cap_upstream_wait(wait: Duration, max_wait: Duration) -> Duration {
    if wait > max_wait {
        tracing::warn!(
            ?wait,
            ?max_wait,
            "upstream asked for a wait longer than the maximum: capped"
        );
    }
    wait.min(max_wait)
}
