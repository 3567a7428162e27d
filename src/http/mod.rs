//! HTTP: obey upstream throttling on the client, answer `429` on the server,
//! and hold permits until response bodies end. Needs the `http` cargo
//! feature.
//!
//! | Piece | Side | What it does |
//! |---|---|---|
//! | [`FeedbackLayer`] | client | on `429`/`503` with `Retry-After`, or an exhausted `RateLimit` quota, pauses every caller sharing the limiter |
//! | [`RetryPolicy`] | client | a `tower::retry` policy: retries `429`/`503` after the advertised time, with a budget and a maximum of attempts; gives up with [`RetryLater`] |
//! | [`HttpLimitLayer`] | both | a [`LimitLayer`](crate::LimitLayer) whose calls run until their response bodies end ([`LimitBody`]) |
//! | [`TooManyRequestsLayer`] | server | per client (peer address, or a key of yours): over the limit, `429` (gRPC `RESOURCE_EXHAUSTED`, or `UNAVAILABLE`) with `Retry-After` and `RateLimit` headers, at once, or the answer a [hook](TooManyRequestsLayer::refusal) shapes |
//! | `LimitMiddleware` (feature `reqwest-middleware`) | client | the limit, the feedback and the retries above as one `reqwest_middleware::Middleware` |
//! | [`Advice`] | client | what a response says to do: proceed, wait (`Retry-After`, the `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers, `X-RateLimit-*`), or back off; for clients outside tower |
//!
//! # A client that obeys its upstream
//!
//! ```
//! use std::time::Duration;
//! use http::{Request, Response, StatusCode};
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_limits::error::BoxError;
//! use tower_limits::http::{FeedbackLayer, HttpLimitLayer};
//! use tower_limits::{LimitLayer, ConcurrencyLimiter, RateLimiter};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), BoxError> {
//! let rate = RateLimiter::builder("upstream", 50, Duration::from_secs(1))
//!     .without_backoff()
//!     .build()?;
//! // Your HTTP client: a hyper-util `Client`, reqwest behind a `service_fn`...
//! let upstream = service_fn(|_: Request<String>| async {
//!     let response = Response::builder()
//!         .status(StatusCode::TOO_MANY_REQUESTS)
//!         .header("retry-after", "2")
//!         .body(String::new())?;
//!     Ok::<_, BoxError>(response)
//! });
//! let client = ServiceBuilder::new()
//!     .layer(FeedbackLayer::new(rate.clone()))
//!     .layer(HttpLimitLayer::new(LimitLayer::new(ConcurrencyLimiter::new(8)?)))
//!     .layer(LimitLayer::new(rate))
//!     .service(upstream);
//!
//! let start = tokio::time::Instant::now();
//! let first = client.clone().ready().await?.call(Request::new(String::new())).await?;
//! assert_eq!(first.status(), StatusCode::TOO_MANY_REQUESTS);
//! // Every clone now waits the 2 s the upstream asked for.
//! client.clone().ready().await?.call(Request::new(String::new())).await?;
//! assert_eq!(start.elapsed(), Duration::from_secs(2));
//! # Ok(())
//! # }
//! ```
//!
//! # Order
//!
//! Put [`FeedbackLayer`] outside the limit layers (it sees every response)
//! and `tower::retry::RetryLayer` with [`RetryPolicy`] outside both, so a
//! retry goes through the limits again. On a server, put
//! [`TooManyRequestsLayer`] outermost, so rejected requests cost nothing.

mod advice;
mod body;
mod error;
pub mod feedback;
pub mod limit;
#[cfg(feature = "reqwest-middleware")]
mod middleware;
mod peer;
mod ratelimit;
mod retry;
mod retry_after;
pub mod server;
mod sf;

pub use advice::Advice;
pub use body::LimitBody;
pub use error::RetryLater;
pub use feedback::{Feedback, FeedbackLayer};
pub use limit::{HttpLimit, HttpLimitLayer};
#[cfg(feature = "reqwest-middleware")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest-middleware")))]
pub use middleware::LimitMiddleware;
pub use peer::{ForwardedHeader, KeyOf, PeerAddr, PeerKey, TrustedProxies};
pub use retry::RetryPolicy;
pub use server::{TooManyRequests, TooManyRequestsLayer};
