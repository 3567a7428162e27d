//! The layers' refusals as gRPC statuses (the `tonic` feature).
//!
//! tonic turns a service's error into a [`Status`] by looking for one in the
//! error's source chain, and answers `UNKNOWN` when it finds none. The source
//! of [`Overloaded`], [`Elapsed`] and [`Rejected`] is therefore a
//! `RESOURCE_EXHAUSTED` status: a tonic server answers a refused call with
//! it, and a tonic client reports it, as both do for tower's own `LoadShed`
//! errors. Its message says what refused (`rate limited`, `concurrency limit
//! reached`, `queue full`, a wait past the maximum), and when the limiter
//! named a retry instant, the wait is in the `grpc-retry-pushback-ms`
//! (milliseconds) and `retry-after` (seconds) metadata that gRPC clients
//! read. Converting the error into a [`Status`] gives the same status:
//!
//! ```
//! use std::time::Duration;
//! use tokio::time::Instant;
//! use tonic::{Code, Status};
//! use tower_limits::error::{BoxError, Rejected};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let error: BoxError = Rejected::new(Some(Instant::now() + Duration::from_secs(2))).into();
//! let status = Status::from_error(error); // found in the chain
//! assert_eq!(status.code(), Code::ResourceExhausted);
//! assert_eq!(status.message(), "rate limited: retry in 2s");
//! assert_eq!(status.metadata().get("grpc-retry-pushback-ms").unwrap(), "2000");
//! assert_eq!(status.metadata().get("retry-after").unwrap(), "2");
//!
//! let shed = Status::from_error(Rejected::new(None).into()); // a concurrency limit
//! assert_eq!(shed.message(), "concurrency limit reached: retry when a running call completes");
//! assert!(shed.metadata().get("grpc-retry-pushback-ms").is_none());
//!
//! let status = Status::from(Rejected::new(Some(Instant::now() + Duration::from_secs(2))));
//! assert_eq!(status.code(), Code::ResourceExhausted);
//! assert_eq!(status.metadata().get("grpc-retry-pushback-ms").unwrap(), "2000");
//! # }
//! ```

use std::sync::OnceLock;

use tokio::time::Instant;
use tonic::Status;
use tonic::metadata::MetadataValue;

use super::{Elapsed, Overloaded, Rejected};

/// The metadata in which a gRPC server tells a client when to retry.
const RETRY_PUSHBACK: &str = "grpc-retry-pushback-ms";
/// The same wait in whole seconds, as HTTP's `Retry-After`.
const RETRY_AFTER: &str = "retry-after";

/// The `RESOURCE_EXHAUSTED` status, made once, that a refusal of one kind
/// names as its source.
pub(super) fn shared_status(
    status: &'static OnceLock<Status>,
    message: &'static str,
) -> &'static (dyn std::error::Error + 'static) {
    status.get_or_init(|| Status::resource_exhausted(message))
}

/// The status a refusal names as its source, made the first time tonic
/// asks: its message, and the wait until its retry instant. Clones make
/// their own; every one is equal, as it follows from the refusal.
#[derive(Default)]
pub(super) struct LazyStatus(OnceLock<Status>);

impl LazyStatus {
    pub(super) fn get(&self, error: &dyn std::fmt::Display, retry_at: Option<Instant>) -> &Status {
        self.0
            .get_or_init(|| resource_exhausted(error.to_string(), retry_at))
    }
}

impl Clone for LazyStatus {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for LazyStatus {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for LazyStatus {}

impl std::fmt::Debug for LazyStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LazyStatus")
    }
}

/// A `RESOURCE_EXHAUSTED` status with `message`, and the time until
/// `retry_at` in `grpc-retry-pushback-ms` (milliseconds) and `retry-after`
/// (whole seconds, rounded up) when it is known.
fn resource_exhausted(message: String, retry_at: Option<Instant>) -> Status {
    let mut status = Status::resource_exhausted(message);
    if let Some(at) = retry_at {
        let wait = at.saturating_duration_since(Instant::now());
        let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        let metadata = status.metadata_mut();
        metadata.insert(RETRY_PUSHBACK, MetadataValue::from(millis));
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        metadata.insert(RETRY_AFTER, MetadataValue::from(seconds));
    }
    status
}

impl From<Rejected> for Status {
    /// `RESOURCE_EXHAUSTED`, with the time until the retry in
    /// `grpc-retry-pushback-ms` when the limiter named one.
    ///
    /// ```
    /// use tonic::{Code, Status};
    /// use tower_limits::error::Rejected;
    ///
    /// let status = Status::from(Rejected::new(None)); // a concurrency limit: no time
    /// assert_eq!(status.code(), Code::ResourceExhausted);
    /// assert!(status.metadata().get("grpc-retry-pushback-ms").is_none());
    /// ```
    fn from(rejected: Rejected) -> Self {
        resource_exhausted(rejected.to_string(), rejected.retry_at())
    }
}

impl From<Elapsed> for Status {
    /// `RESOURCE_EXHAUSTED`, with the time until the limiter would have
    /// admitted the call in `grpc-retry-pushback-ms` when it said.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tonic::{Code, Status};
    /// use tower_limits::error::Elapsed;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let status = Status::from(Elapsed::new(Some(Instant::now() + Duration::from_millis(1500))));
    /// assert_eq!(status.code(), Code::ResourceExhausted);
    /// assert_eq!(status.metadata().get("grpc-retry-pushback-ms").unwrap(), "1500");
    /// # }
    /// ```
    fn from(elapsed: Elapsed) -> Self {
        resource_exhausted(elapsed.to_string(), elapsed.retry_at())
    }
}

impl From<Overloaded> for Status {
    /// `RESOURCE_EXHAUSTED`: too many callers were waiting.
    ///
    /// ```
    /// use tonic::{Code, Status};
    /// use tower_limits::error::Overloaded;
    ///
    /// let status = Status::from(Overloaded::new(100));
    /// assert_eq!(status.code(), Code::ResourceExhausted);
    /// assert_eq!(status.message(), "limiter overloaded: 100 callers are already waiting");
    /// ```
    fn from(overloaded: Overloaded) -> Self {
        resource_exhausted(overloaded.to_string(), None)
    }
}
