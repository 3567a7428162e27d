//! [`StoreError`]: a shared store could not decide.

use std::fmt;

use crate::error::LimiterError;

/// A shared store could not answer: it is unreachable, too slow, or sent a
/// reply this crate does not understand.
///
/// Store-backed limiters return it inside a [`LimiterError`]; a
/// [`Failover`](crate::Failover) treats it as an outage and applies its
/// [`OutagePolicy`](crate::OutagePolicy). Recover it with `downcast_ref`:
///
/// ```
/// use tower_limits::error::LimiterError;
/// use tower_limits::store::{StoreError, StoreErrorKind};
///
/// let error = LimiterError::from(StoreError::timeout("redis", std::time::Duration::from_millis(50)));
/// let store = error.get_ref().downcast_ref::<StoreError>().expect("a store error");
/// assert_eq!(store.kind(), StoreErrorKind::Timeout);
/// assert!(store.to_string().contains("50ms"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreError {
    backend: &'static str,
    kind: StoreErrorKind,
    detail: String,
    /// Known not to have reached the store, or to have been rolled back.
    unapplied: bool,
}

/// Why a [`StoreError`] happened.
///
/// ```
/// use tower_limits::store::{StoreError, StoreErrorKind};
///
/// let error = StoreError::bad_reply("redis", "expected an array of integers, got \"OK\"");
/// assert_eq!(error.kind(), StoreErrorKind::BadReply);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store could not be reached (connection refused or lost).
    Unavailable,
    /// The store did not answer within the configured timeout.
    Timeout,
    /// The store answered something that is not a valid decision.
    BadReply,
    /// The store refused the request (a script or server error).
    Refused,
}

impl StoreError {
    /// A store error of `kind` from `backend` (`"redis"`, `"postgres"`…).
    ///
    /// ```
    /// use tower_limits::store::{StoreError, StoreErrorKind};
    ///
    /// let error = StoreError::new("sqlite", StoreErrorKind::Refused, "database is locked");
    /// assert_eq!(error.backend(), "sqlite");
    /// ```
    pub fn new(backend: &'static str, kind: StoreErrorKind, detail: impl Into<String>) -> Self {
        Self {
            backend,
            kind,
            detail: detail.into(),
            unapplied: false,
        }
    }

    #[cfg(any(feature = "redis", feature = "postgres", feature = "sqlite"))]
    /// The same error, for a request known to have changed nothing: it
    /// never reached the store, or the store rolled it back. Such a request
    /// can be sent again without being applied twice.
    pub(crate) fn not_applied(self) -> Self {
        Self {
            unapplied: true,
            ..self
        }
    }

    /// Whether the request is known to have changed nothing (see
    /// [`not_applied`](Self::not_applied)); `false` when it may have.
    pub(crate) fn was_not_applied(&self) -> bool {
        self.unapplied
    }

    /// The store did not answer within `timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{StoreError, StoreErrorKind};
    ///
    /// let error = StoreError::timeout("redis", Duration::from_millis(100));
    /// assert_eq!(error.kind(), StoreErrorKind::Timeout);
    /// ```
    pub fn timeout(backend: &'static str, timeout: std::time::Duration) -> Self {
        Self::new(
            backend,
            StoreErrorKind::Timeout,
            format!("no answer within {timeout:?}; is the server overloaded or hung?"),
        )
    }

    /// The store answered something that is not a decision.
    ///
    /// ```
    /// use tower_limits::store::{StoreError, StoreErrorKind};
    ///
    /// assert_eq!(StoreError::bad_reply("redis", "nil").kind(), StoreErrorKind::BadReply);
    /// ```
    pub fn bad_reply(backend: &'static str, detail: impl Into<String>) -> Self {
        Self::new(backend, StoreErrorKind::BadReply, detail)
    }

    /// Why the store failed.
    ///
    /// ```
    /// use tower_limits::store::{StoreError, StoreErrorKind};
    ///
    /// let error = StoreError::new("redis", StoreErrorKind::Unavailable, "connection refused");
    /// assert_eq!(error.kind(), StoreErrorKind::Unavailable);
    /// ```
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// Which store failed.
    ///
    /// ```
    /// use tower_limits::store::StoreError;
    ///
    /// assert_eq!(StoreError::bad_reply("redis", "nil").backend(), "redis");
    /// ```
    pub fn backend(&self) -> &'static str {
        self.backend
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            StoreErrorKind::Unavailable => "is unreachable",
            StoreErrorKind::Timeout => "timed out",
            StoreErrorKind::BadReply => "sent a reply that is not a limiter decision",
            StoreErrorKind::Refused => "refused the request",
        };
        write!(f, "{} store {what}: {}", self.backend, self.detail)
    }
}

impl std::error::Error for StoreError {}

impl From<StoreError> for LimiterError {
    fn from(error: StoreError) -> Self {
        LimiterError::new(error)
    }
}

/// Whether `error` is a store outage (rather than, say, a cost too high).
pub(crate) fn is_outage(error: &LimiterError) -> bool {
    error.get_ref().is::<StoreError>()
}
