//! Error types.
//!
//! Every error is a plain type that implements [`std::error::Error`]. The
//! layers return them boxed as tower's `BoxError`; recover the type with
//! `downcast_ref`:
//!
//! ```
//! use tower_limits::error::Overloaded;
//!
//! fn is_overload(error: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
//!     error.is::<Overloaded>()
//! }
//! # assert!(is_overload(&Overloaded::new(3)));
//! ```

use std::fmt;

use tokio::time::Instant;

/// The boxed error type of the layers, the same as tower's.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A limiter was built with a parameter it cannot work with.
///
/// The message names the field and the rule it broke, for example
/// ``invalid `max_executions` (0): must be at least 1``.
///
/// ```
/// use tower_limits::ConcurrencyLimiter;
///
/// let error = ConcurrencyLimiter::new(0).unwrap_err();
/// assert_eq!(error.field(), "max_concurrent");
/// assert!(error.to_string().contains("at least 1"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    field: &'static str,
    value: String,
    rule: &'static str,
}

impl ConfigError {
    pub(crate) fn new(field: &'static str, value: impl fmt::Debug, rule: &'static str) -> Self {
        Self {
            field,
            value: format!("{value:?}"),
            rule,
        }
    }

    /// The name of the offending parameter.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// The rule the parameter broke, such as `"must be at least 1"`.
    pub fn rule(&self) -> &'static str {
        self.rule
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid `{}` ({}): {}",
            self.field, self.value, self.rule
        )
    }
}

impl std::error::Error for ConfigError {}

/// A limiter could not decide, because the state behind it (a store) failed.
///
/// In-memory limiters never return it; shared stores do when they are
/// unreachable or answer something unexpected.
///
/// ```
/// use tower_limits::error::LimiterError;
///
/// let error = LimiterError::new("connection refused");
/// assert_eq!(error.to_string(), "limiter failed: connection refused");
/// ```
#[derive(Debug)]
pub struct LimiterError {
    source: BoxError,
}

impl LimiterError {
    /// Wraps the underlying failure.
    pub fn new(source: impl Into<BoxError>) -> Self {
        Self {
            source: source.into(),
        }
    }
}

impl fmt::Display for LimiterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "limiter failed: {}", self.source)
    }
}

impl std::error::Error for LimiterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// Too many callers were already waiting for the limiter
/// ([`LimitLayer::max_waiting`](crate::LimitLayer::max_waiting)).
///
/// ```
/// use tower_limits::error::Overloaded;
///
/// assert_eq!(
///     Overloaded::new(100).to_string(),
///     "limiter overloaded: 100 callers are already waiting"
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overloaded {
    waiting: usize,
}

impl Overloaded {
    /// An overload error for a queue holding `waiting` callers.
    pub fn new(waiting: usize) -> Self {
        Self { waiting }
    }

    /// How many callers were waiting when this one was turned away.
    pub fn waiting(&self) -> usize {
        self.waiting
    }
}

impl fmt::Display for Overloaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "limiter overloaded: {} callers are already waiting",
            self.waiting
        )
    }
}

impl std::error::Error for Overloaded {}

/// The caller would have waited longer than
/// [`LimitLayer::max_wait`](crate::LimitLayer::max_wait) allows.
///
/// It is returned as soon as the limiter names an instant past the deadline,
/// not only once the deadline has passed.
///
/// ```
/// use tower_limits::error::Elapsed;
///
/// assert!(Elapsed::new(None).to_string().contains("maximum wait"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elapsed {
    retry_at: Option<Instant>,
}

impl Elapsed {
    /// A timeout; `retry_at` is when the limiter would have admitted the
    /// caller, if it said.
    pub fn new(retry_at: Option<Instant>) -> Self {
        Self { retry_at }
    }

    /// When the limiter would have admitted the caller, if it said.
    pub fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("limiter wait exceeded the maximum wait")
    }
}

impl std::error::Error for Elapsed {}

/// The limiter denied the call and the layer is in reject mode
/// ([`LimitLayer::reject`](crate::LimitLayer::reject)).
///
/// `retry_at` is the instant the limiter named; `None` means "when a running
/// call completes" (a concurrency limit).
///
/// ```
/// use tower_limits::error::Rejected;
///
/// let rejected = Rejected::new(None);
/// assert_eq!(rejected.retry_at(), None);
/// assert_eq!(rejected.to_string(), "rate limited: retry when a running call completes");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejected {
    retry_at: Option<Instant>,
}

impl Rejected {
    /// A rejection that may be retried at `retry_at`.
    pub fn new(retry_at: Option<Instant>) -> Self {
        Self { retry_at }
    }

    /// The earliest instant at which a retry may be admitted, if known.
    pub fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.retry_at {
            Some(at) => write!(
                f,
                "rate limited: retry in {:?}",
                at.saturating_duration_since(Instant::now())
            ),
            None => f.write_str("rate limited: retry when a running call completes"),
        }
    }
}

impl std::error::Error for Rejected {}
