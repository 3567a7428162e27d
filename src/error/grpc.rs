//! The layers' refusals as gRPC statuses (the `tonic` feature).
//!
//! tonic turns a service's error into a [`Status`] by looking for one in the
//! error's source chain, and answers `UNKNOWN` when it finds none. The source
//! of [`Overloaded`], [`Elapsed`] and [`Rejected`] is therefore a
//! `RESOURCE_EXHAUSTED` status: a tonic server answers a refused call with
//! it, and a tonic client reports it, as both do for tower's own `LoadShed`
//! errors. That shared status cannot say when to retry; converting the error
//! itself into a [`Status`] does, in the `grpc-retry-pushback-ms` metadata
//! that gRPC clients read:
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
//! assert_eq!(Status::from_error(error).code(), Code::ResourceExhausted); // found in the chain
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

/// The `RESOURCE_EXHAUSTED` status, made once, that a refusal of one kind
/// names as its source.
pub(super) fn shared_status(
    status: &'static OnceLock<Status>,
    message: &'static str,
) -> &'static (dyn std::error::Error + 'static) {
    status.get_or_init(|| Status::resource_exhausted(message))
}

/// A `RESOURCE_EXHAUSTED` status with `message`, and the time until
/// `retry_at` in `grpc-retry-pushback-ms` when it is known.
fn resource_exhausted(message: String, retry_at: Option<Instant>) -> Status {
    let mut status = Status::resource_exhausted(message);
    if let Some(at) = retry_at {
        let millis = at.saturating_duration_since(Instant::now()).as_millis();
        let millis = u64::try_from(millis).unwrap_or(u64::MAX);
        status
            .metadata_mut()
            .insert(RETRY_PUSHBACK, MetadataValue::from(millis));
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
