//! Composable rate and concurrency limiters as [tower] middleware.
//!
//! Call quota-limited APIs without tripping their limits, keep services fair,
//! and hold one limit across clones, workers and tasks. Every strategy
//! implements one [`Limiter`] trait (the six operations of the Workglow limiter
//! interface plus an atomic acquire) and becomes a tower layer through
//! [`LimitLayer`].
//!
//! | Limiter | Admits a call when |
//! |---|---|
//! | [`NullLimiter`] | always (no limit) |
//! | [`ConcurrencyLimiter`] | fewer than `max` calls are running |
//! | [`RateLimiter`] | fewer than `max` calls started in the sliding window; backs off with jitter once it fills |
//! | [`DelayLimiter`] | at least `delay` has passed since the last start |
//! | [`EvenlySpacedRateLimiter`] | `window / max` has passed since the last start (cost × that, after a costly call), whatever the number of callers and the call duration |
//! | [`GcraLimiter`] | its cells conform to `count` per `period` with at most `burst` at once (GCRA, as governor and redis-cell) |
//! | [`TokenBucketLimiter`] | the bucket holds enough tokens; it refills at a steady rate up to its capacity |
//! | [`LeakyBucketLimiter`] | the constant drip is free (never a burst); else its slot is booked, up to a bounded queue |
//! | [`FixedWindowLimiter`] | fewer than `max` calls started in the current calendar window (2× burst at a boundary) |
//! | [`SlidingWindowCounterLimiter`] | the weighted blend of this window's and the last one's counts leaves room (O(1) memory, bounded error) |
//! | [`AdaptiveRateLimiter`] | the call conforms to a rate learned from the upstream: lower on each refusal, climbing back while calls succeed (CUBIC), at a stated quota when there is one |
//! | [`AdaptiveConcurrencyLimiter`] | fewer calls are running than a limit that follows the upstream's latency (a gradient, as Netflix's concurrency-limits): more while calls are fast, fewer as they slow down |
//! | [`CompositeLimiter`] | every part admits it |
//! | [`KeyedLimiter`] | the limiter of the call's key (tenant, API key, route) admits it; bounded memory |
//! | [`SharedLimiter`] | a GCRA, token bucket or window [`Quota`](store::Quota) kept in a [store] (Redis with feature `redis`, PostgreSQL with feature `postgres`, one SQLite file with feature `sqlite`) admits it, across processes |
//! | [`LeasedConcurrencyLimiter`] | fewer than `max` leases are held across processes; leases expire unless renewed |
//! | [`Failover`] | its store-backed limiter admits it, or, while the store is down, its [`OutagePolicy`] does |
//!
//! [`KeyedLimitLayer`] takes the key (and a cost) from each request;
//! [`FairLimitLayer`] shares one limiter among keys, serving waiting callers
//! round-robin so that one tenant's backlog cannot starve the others.
//!
//! With the `http` cargo feature, the `http` module obeys upstream `429`s and
//! `Retry-After` / `RateLimit` headers on the client, answers `429` with
//! those headers on the server, and holds permits until response bodies end.
//!
//! Limits can be written as strings: a [`Rate`] parses `10/s`, `100/m` or
//! `2/500ms` and, with the `serde` cargo feature, reads them from a
//! configuration file (see [`rate`]).
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_limits::{ConcurrencyLimitLayer, ConcurrencyLimiter, RateLimitLayer, RateLimiter};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), tower_limits::error::BoxError> {
//! let rate = RateLimiter::builder("payments-api", 2, Duration::from_secs(1))
//!     .without_backoff()
//!     .build()?;
//! let client = ServiceBuilder::new()
//!     .layer(ConcurrencyLimitLayer::new(ConcurrencyLimiter::new(4)?))
//!     .layer(RateLimitLayer::new(rate))
//!     .service(service_fn(|id: u32| async move { Ok::<_, Infallible>(id) }));
//!
//! let start = tokio::time::Instant::now();
//! for id in 0..4 {
//!     // Clones share the limits.
//!     client.clone().ready().await?.call(id).await?;
//! }
//! // Two per second: the last two waited for the window to slide.
//! assert_eq!(start.elapsed(), Duration::from_secs(1));
//! # Ok(())
//! # }
//! ```
//!
//! # Guarantees
//!
//! * **Atomic admission.** [`Limiter::try_acquire`] decides and records in one
//!   step, so no interleaving of callers can be admitted past the limit
//!   (`can_proceed` then `record_start` would race).
//! * **Exact waits.** A denied caller sleeps until the instant the limiter
//!   named, or until a running call completes: no polling interval.
//! * **Cancellation is safe.** A [`Permit`] records completion when dropped,
//!   so a call whose future is dropped releases what it held.
//! * **Testable time.** Limiters read tokio's clock by default, so
//!   `tokio::time::pause` drives them; [`Clock::fast`] is the cheap clock for
//!   production.
//!
//! [tower]: https://docs.rs/tower

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod clock;
pub mod error;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
pub mod limit;
mod limiter;
mod limiters;
mod quota_status;
pub mod rate;
mod start_log;
pub mod store;

pub use clock::Clock;
pub use limit::{
    CompositeLimit, CompositeLimitLayer, ConcurrencyLimit, ConcurrencyLimitLayer, CostLimit,
    CostLimitLayer, DelayLimit, DelayLimitLayer, EvenlySpacedRateLimit, EvenlySpacedRateLimitLayer,
    FairLimit, FairLimitLayer, FixedWindowLimit, FixedWindowLimitLayer, GcraLimit, GcraLimitLayer,
    KeyedLimit, KeyedLimitLayer, LeakyBucketLimit, LeakyBucketLimitLayer, Limit, LimitLayer,
    NullLimit, NullLimitLayer, RateLimit, RateLimitLayer, SlidingWindowCounterLimit,
    SlidingWindowCounterLimitLayer, TokenBucketLimit, TokenBucketLimitLayer,
};
pub use limiter::{
    Admission, Denial, Limiter, LimiterExt, LimiterFuture, Permit, Release, ReleaseEvent,
    ReleaseListener,
};
pub use limiters::{
    AdaptiveConcurrencyLimiter, AdaptiveConcurrencyLimiterBuilder, AdaptiveRateLimiter,
    AdaptiveRateLimiterBuilder, CompositeLimiter, ConcurrencyLimiter, DelayLimiter,
    EvenlySpacedRateLimiter, FixedWindowLimiter, GcraLimiter, GcraState, KeyedLimiter,
    KeyedLimiterBuilder, LeakyBucketLimiter, NullLimiter, Pacer, RateLimiter, RateLimiterBuilder,
    SharedPacer, SlidingWindowCounterLimiter, TokenBucketLimiter,
};
pub use limiters::{Failover, LeasedConcurrencyLimiter, OutagePolicy, SharedLimiter};
pub use quota_status::QuotaStatus;
pub use rate::{ParseRateError, Rate};
