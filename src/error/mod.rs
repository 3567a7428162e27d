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

use std::borrow::Cow;
use std::fmt;
#[cfg(feature = "tonic")]
use std::sync::OnceLock;

use tokio::time::Instant;

/// The boxed error type of the layers, the same as tower's.
///
/// ```
/// use tower_limits::error::{BoxError, Overloaded};
///
/// let error: BoxError = Overloaded::new(10).into();
/// assert_eq!(error.downcast_ref::<Overloaded>().map(Overloaded::waiting), Some(10));
/// ```
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

#[cfg(feature = "tonic")]
mod grpc;

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
    rule: Cow<'static, str>,
}

impl ConfigError {
    pub(crate) fn new(
        field: &'static str,
        value: impl fmt::Debug,
        rule: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self {
            field,
            value: format!("{value:?}"),
            rule: rule.into(),
        }
    }

    /// The name of the offending parameter.
    ///
    /// ```
    /// use tower_limits::EvenlySpacedRateLimiter;
    ///
    /// let error = EvenlySpacedRateLimiter::new(0, std::time::Duration::from_secs(1)).unwrap_err();
    /// assert_eq!(error.field(), "max_executions");
    /// ```
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// The rule the parameter broke, such as `"must be at least 1"`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::DelayLimiter;
    ///
    /// let error = DelayLimiter::new(Duration::ZERO).unwrap_err();
    /// assert_eq!(error.rule(), "must be longer than zero");
    /// assert_eq!(error.to_string(), "invalid `delay` (0ns): must be longer than zero");
    /// ```
    pub fn rule(&self) -> &str {
        &self.rule
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

/// A limiter could not decide: the state behind it (a store) failed, or the
/// call asked for more than the limiter can ever grant ([`CostTooHigh`]).
///
/// In-memory limiters return it only for [`CostTooHigh`]; shared stores also
/// when they are unreachable or answer something unexpected.
///
/// ```
/// use std::error::Error;
/// use tower_limits::error::LimiterError;
///
/// let error = LimiterError::new("connection refused");
/// assert_eq!(error.to_string(), "limiter failed: connection refused");
/// // The underlying failure is the error's source.
/// let source = error.source().map(|source| source.to_string());
/// assert_eq!(source.as_deref(), Some("connection refused"));
/// ```
#[derive(Debug)]
pub struct LimiterError {
    source: BoxError,
}

impl LimiterError {
    /// Wraps the underlying failure.
    ///
    /// ```
    /// use std::error::Error;
    /// use std::io;
    /// use tower_limits::error::LimiterError;
    ///
    /// let refused = io::Error::new(io::ErrorKind::ConnectionRefused, "store unreachable");
    /// let error = LimiterError::new(refused);
    /// let kind = error
    ///     .source()
    ///     .and_then(|source| source.downcast_ref::<io::Error>())
    ///     .map(io::Error::kind);
    /// assert_eq!(kind, Some(io::ErrorKind::ConnectionRefused));
    /// ```
    pub fn new(source: impl Into<BoxError>) -> Self {
        Self {
            source: source.into(),
        }
    }

    /// The underlying failure, to inspect with `downcast_ref`.
    ///
    /// ```
    /// use tower_limits::error::{CostTooHigh, LimiterError};
    ///
    /// let error = LimiterError::new(CostTooHigh::new(5, 3));
    /// let cause = error.get_ref().downcast_ref::<CostTooHigh>();
    /// assert_eq!(cause.map(CostTooHigh::capacity), Some(3));
    /// ```
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.source
    }
}

/// A call costs more than the limiter can ever grant, so waiting would never
/// end: split the call or raise the limit.
///
/// ```
/// use tower_limits::error::CostTooHigh;
///
/// assert_eq!(
///     CostTooHigh::new(12, 10).to_string(),
///     "a call costing 12 can never be admitted by a limit of 10: split it or raise the limit"
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CostTooHigh {
    cost: u32,
    capacity: u64,
}

impl CostTooHigh {
    /// A call costing `cost` against a limit of `capacity`.
    ///
    /// ```
    /// let error = tower_limits::error::CostTooHigh::new(12, 10);
    /// assert_eq!((error.cost(), error.capacity()), (12, 10));
    /// ```
    pub fn new(cost: u32, capacity: u64) -> Self {
        Self { cost, capacity }
    }

    /// What the call asked for.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::error::CostTooHigh;
    /// use tower_limits::{Limiter, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::in_memory(Quota::gcra(10, Duration::from_secs(1))?.with_burst(5)?);
    /// let error = limiter.try_acquire_many(8).await.unwrap_err();
    /// let too_high = error.get_ref().downcast_ref::<CostTooHigh>();
    /// assert_eq!(too_high.map(CostTooHigh::cost), Some(8));
    /// # Ok(())
    /// # }
    /// ```
    pub fn cost(&self) -> u32 {
        self.cost
    }

    /// The most the limiter can ever grant at once.
    ///
    /// ```
    /// use tower_limits::error::CostTooHigh;
    /// use tower_limits::{ConcurrencyLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ConcurrencyLimiter::new(4)?;
    /// let error = limiter.try_acquire_many(5).await.unwrap_err();
    /// let too_high = error.get_ref().downcast_ref::<CostTooHigh>();
    /// assert_eq!(too_high.map(CostTooHigh::capacity), Some(4)); // split the call in 4s
    /// # Ok(())
    /// # }
    /// ```
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// `Ok` if `cost` fits in `capacity`; else this error, as a [`LimiterError`].
    #[inline]
    pub(crate) fn check(cost: u32, capacity: u32) -> Result<(), LimiterError> {
        if cost > capacity {
            return Err(LimiterError::new(Self::new(cost, u64::from(capacity))));
        }
        Ok(())
    }
}

impl fmt::Display for CostTooHigh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a call costing {} can never be admitted by a limit of {}: split it or raise the limit",
            self.cost, self.capacity
        )
    }
}

impl std::error::Error for CostTooHigh {}

/// A [`LeakyBucketLimiter`](crate::LeakyBucketLimiter)'s queue is full: the
/// call would have to wait behind more than `capacity` units already booked
/// on its drip, so it is turned away (the bucket overflows) instead of
/// queued.
///
/// It arrives inside a [`LimiterError`]; [`retry_at`](BucketFull::retry_at)
/// says when the queue will have drained enough to take the call.
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use tower_limits::error::BucketFull;
/// use tower_limits::limiter::Admission;
/// use tower_limits::{LeakyBucketLimiter, Limiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // One call a second, one more may wait.
/// let bucket = LeakyBucketLimiter::new(1, Duration::from_secs(1), 1)?;
/// let start = Instant::now();
/// assert!(matches!(bucket.try_acquire().await?, Admission::Granted(_)));
/// // Booked: its slot is in 1 s; the denial holds its place in the queue.
/// let queued = bucket.try_acquire().await?;
/// assert!(matches!(queued, Admission::Denied(_)));
///
/// let error = bucket.try_acquire().await.unwrap_err();
/// let full = error.get_ref().downcast_ref::<BucketFull>().expect("the queue is full");
/// assert_eq!(full.capacity(), 1);
/// assert_eq!(full.retry_at(), start + Duration::from_secs(1));
/// assert_eq!(
///     full.to_string(),
///     "leaky bucket full: its queue of 1 units has no room for the call"
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketFull {
    capacity: u32,
    retry_at: Instant,
}

impl BucketFull {
    /// A full queue of `capacity` units, with room again at `retry_at`.
    pub(crate) fn new(capacity: u32, retry_at: Instant) -> Self {
        Self { capacity, retry_at }
    }

    /// How many units the queue holds at most.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::error::BucketFull;
    /// use tower_limits::{LeakyBucketLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // One call a second, up to 3 units queued behind the drip.
    /// let bucket = LeakyBucketLimiter::new(1, Duration::from_secs(1), 3)?;
    /// drop(bucket.try_acquire_many(1).await?); // drips now
    /// let _queued = bucket.try_acquire_many(3).await?; // booked: fills the queue
    /// let error = bucket.try_acquire().await.unwrap_err();
    /// let full = error.get_ref().downcast_ref::<BucketFull>();
    /// assert_eq!(full.map(BucketFull::capacity), Some(3));
    /// # Ok(())
    /// # }
    /// ```
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// When the queue will have room for the call, if nobody else books in
    /// the meantime: a server can turn it into `Retry-After`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::error::BucketFull;
    /// use tower_limits::{LeakyBucketLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // One call every 2 s, one more may wait.
    /// let bucket = LeakyBucketLimiter::new(1, Duration::from_secs(2), 1)?;
    /// drop(bucket.try_acquire().await?);
    /// let _queued = bucket.try_acquire().await?; // booked behind the first
    /// let error = bucket.try_acquire().await.unwrap_err();
    /// let full = error.get_ref().downcast_ref::<BucketFull>().expect("the queue is full");
    /// let retry_after = full.retry_at().saturating_duration_since(Instant::now());
    /// assert_eq!(retry_after, Duration::from_secs(2));
    /// # Ok(())
    /// # }
    /// ```
    pub fn retry_at(&self) -> Instant {
        self.retry_at
    }
}

impl fmt::Display for BucketFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "leaky bucket full: its queue of {} units has no room for the call",
            self.capacity
        )
    }
}

impl std::error::Error for BucketFull {}

/// A [`KeyedLimiter`](crate::KeyedLimiter) holds as many keys as it may,
/// and every one of them is in use (a call is running or waiting on it, or
/// a handle to its limiter is held), so a new key cannot be taken in without
/// forgetting a running call.
///
/// It arrives inside a [`LimiterError`] from the keyed limiter's
/// `try_acquire`, and from its `limiter`. Raise
/// [`max_keys`](crate::limiters::KeyedLimiterBuilder::max_keys) above the number of
/// keys with calls in flight at once, or treat it as overload.
///
/// ```
/// use tower_limits::error::KeysFull;
/// use tower_limits::limiter::Admission;
/// use tower_limits::{ConcurrencyLimiter, KeyedLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let per_peer = KeyedLimiter::of(ConcurrencyLimiter::new(1)?)
///     .max_keys(1)
///     .build()?;
/// let Admission::Granted(_running) = per_peer.try_acquire(&1).await? else { unreachable!() };
/// let error = per_peer.try_acquire(&2).await.unwrap_err();
/// let full = error.get_ref().downcast_ref::<KeysFull>().expect("every key is busy");
/// assert_eq!(full.max_keys(), 1);
/// assert_eq!(
///     full.to_string(),
///     "keyed limiter full: all 1 keys of the new key's shard have calls running; raise max_keys"
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeysFull {
    max_keys: usize,
}

impl KeysFull {
    /// A keyed limiter whose shard of `max_keys` keys is all in use.
    pub(crate) fn new(max_keys: usize) -> Self {
        Self { max_keys }
    }

    /// How many keys the new key's shard holds at most (the keyed limiter's
    /// `max_keys`, shared out among its shards).
    ///
    /// ```
    /// use tower_limits::error::KeysFull;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{ConcurrencyLimiter, KeyedLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_peer = KeyedLimiter::of(ConcurrencyLimiter::new(1)?).max_keys(1).build()?;
    /// let Admission::Granted(_running) = per_peer.try_acquire(&"a").await? else { unreachable!() };
    /// let error = per_peer.try_acquire(&"b").await.unwrap_err();
    /// assert_eq!(error.get_ref().downcast_ref::<KeysFull>().map(KeysFull::max_keys), Some(1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }
}

impl fmt::Display for KeysFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "keyed limiter full: all {} keys of the new key's shard have calls running; raise max_keys",
            self.max_keys
        )
    }
}

impl std::error::Error for KeysFull {}

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
    ///
    /// For middleware of your own that bounds a queue the same way.
    ///
    /// ```
    /// use tower_limits::error::Overloaded;
    ///
    /// let error = Overloaded::new(64);
    /// assert_eq!(error.waiting(), 64);
    /// assert_eq!(error, Overloaded::new(64));
    /// ```
    pub fn new(waiting: usize) -> Self {
        Self { waiting }
    }

    /// How many callers were waiting when this one was turned away.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::error::Overloaded;
    /// use tower_limits::{LimitLayer, ConcurrencyLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let layer = LimitLayer::new(ConcurrencyLimiter::new(1)?).max_waiting(1);
    /// let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));
    /// let mut waiter = service.clone();
    /// let mut late = service.clone();
    ///
    /// service.ready().await?; // takes the only slot
    /// let waiting = tokio::spawn(async move { waiter.ready().await.map(|_| ()) });
    /// tokio::task::yield_now().await; // the waiter joins the queue
    ///
    /// let Err(error) = late.ready().await?.call(2).await else {
    ///     unreachable!("the queue is full");
    /// };
    /// assert_eq!(error.downcast_ref::<Overloaded>().map(Overloaded::waiting), Some(1));
    ///
    /// service.call(1).await?; // frees the slot for the waiter
    /// waiting.await??;
    /// # Ok(())
    /// # }
    /// ```
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

impl std::error::Error for Overloaded {
    /// With the `tonic` feature, a `RESOURCE_EXHAUSTED` `tonic::Status`, for
    /// tonic to find.
    #[cfg(feature = "tonic")]
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        static STATUS: OnceLock<tonic::Status> = OnceLock::new();
        Some(grpc::shared_status(
            &STATUS,
            "queue full: too many callers are waiting for the limiter",
        ))
    }
}

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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Elapsed {
    retry_at: Option<Instant>,
    #[cfg(feature = "tonic")]
    status: grpc::LazyStatus,
}

impl Elapsed {
    /// A timeout; `retry_at` is when the limiter would have admitted the
    /// caller, if it said.
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// use tower_limits::error::Elapsed;
    ///
    /// let at = Instant::now() + Duration::from_secs(90);
    /// assert_eq!(Elapsed::new(Some(at)).retry_at(), Some(at));
    /// assert_eq!(Elapsed::new(None).retry_at(), None);
    /// ```
    pub fn new(retry_at: Option<Instant>) -> Self {
        Self {
            retry_at,
            #[cfg(feature = "tonic")]
            status: grpc::LazyStatus::default(),
        }
    }

    /// When the limiter would have admitted the caller, if it said.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::error::Elapsed;
    /// use tower_limits::{LimitLayer, DelayLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let limiter = DelayLimiter::new(Duration::from_secs(10))?;
    /// let layer = LimitLayer::new(limiter).max_wait(Duration::from_secs(1));
    /// let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));
    ///
    /// let start = Instant::now();
    /// service.ready().await?.call(1).await?;
    /// let Err(error) = service.ready().await?.call(2).await else {
    ///     unreachable!("10 s is longer than the maximum wait");
    /// };
    /// let retry_at = error.downcast_ref::<Elapsed>().and_then(Elapsed::retry_at);
    /// assert_eq!(retry_at, Some(start + Duration::from_secs(10)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("limiter wait exceeded the maximum wait")
    }
}

impl std::error::Error for Elapsed {
    /// With the `tonic` feature, a `RESOURCE_EXHAUSTED` `tonic::Status`
    /// with this error's message, and the time until the retry in
    /// `grpc-retry-pushback-ms` and `retry-after` when it is known, for
    /// tonic to find.
    #[cfg(feature = "tonic")]
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.status.get(self, self.retry_at))
    }
}

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
/// assert_eq!(rejected.to_string(), "concurrency limit reached: retry when a running call completes");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    retry_at: Option<Instant>,
    #[cfg(feature = "tonic")]
    status: grpc::LazyStatus,
}

impl Rejected {
    /// A rejection that may be retried at `retry_at`.
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// use tower_limits::error::Rejected;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let rejected = Rejected::new(Some(Instant::now() + Duration::from_secs(2)));
    /// assert_eq!(rejected.to_string(), "rate limited: retry in 2s");
    /// # }
    /// ```
    pub fn new(retry_at: Option<Instant>) -> Self {
        Self {
            retry_at,
            #[cfg(feature = "tonic")]
            status: grpc::LazyStatus::default(),
        }
    }

    /// The earliest instant at which a retry may be admitted, if known.
    ///
    /// A server can turn it into a `Retry-After` header.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::error::Rejected;
    /// use tower_limits::{LimitLayer, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_limits::error::BoxError> {
    /// let limiter = RateLimiter::builder("api", 1, Duration::from_secs(60))
    ///     .without_backoff()
    ///     .build()?;
    /// let layer = LimitLayer::new(limiter).reject();
    /// let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));
    ///
    /// service.ready().await?.call(1).await?;
    /// let Err(error) = service.ready().await?.call(2).await else {
    ///     unreachable!("one call a minute");
    /// };
    /// let retry_at = error.downcast_ref::<Rejected>().and_then(Rejected::retry_at);
    /// let retry_after = retry_at.map(|at| at.saturating_duration_since(Instant::now()));
    /// assert_eq!(retry_after, Some(Duration::from_secs(60)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }
}

impl Rejected {
    /// What refused: a limit that names when to retry is a rate, one that
    /// waits for a running call to complete a concurrency limit.
    pub(crate) fn refused_by(&self) -> &'static str {
        match self.retry_at {
            Some(_) => "rate limited",
            None => "concurrency limit reached",
        }
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.retry_at {
            Some(at) => write!(
                f,
                "{}: retry in {:?}",
                self.refused_by(),
                at.saturating_duration_since(Instant::now())
            ),
            None => write!(
                f,
                "{}: retry when a running call completes",
                self.refused_by()
            ),
        }
    }
}

impl std::error::Error for Rejected {
    /// With the `tonic` feature, a `RESOURCE_EXHAUSTED` `tonic::Status`
    /// with this error's message, and the time until the retry in
    /// `grpc-retry-pushback-ms` and `retry-after` when it is known, for
    /// tonic to find.
    #[cfg(feature = "tonic")]
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.status.get(self, self.retry_at))
    }
}
