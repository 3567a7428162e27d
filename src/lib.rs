//! Composable rate and concurrency limiters as [tower] middleware.
//!
//! Call quota-limited APIs without tripping their limits, keep services fair,
//! and hold one limit across clones, workers and tasks. Every strategy
//! implements one [`Limiter`] trait (the six operations of the classic limiter
//! interface plus an atomic acquire) and becomes a tower layer through
//! [`LimitLayer`].
//!
//! | Limiter | Admits a call when |
//! |---|---|
//! | [`NullLimiter`] | always (no limit) |
//! | [`ConcurrencyLimiter`] | fewer than `max` calls are running |
//! | [`RateLimiter`] | its [`Quota`](store::Quota) in its [store] admits it: GCRA (as governor and redis-cell) or a token bucket (the same algorithm configured by its capacity), a fixed window ([`Quota::fixed_window`](store::Quota::fixed_window): 2× burst at a boundary) or a sliding window counter ([`Quota::sliding_window_counter`](store::Quota::sliding_window_counter): O(1) memory, bounded error), or the seed's sliding log of starts ([`RateLimiter::builder`]: fewer than `max` calls started in the window, backing off with jitter once it fills); in memory ([`RateLimiter::in_memory`]), or across processes in Redis (feature `redis`), PostgreSQL (feature `postgres`) or one SQLite file (feature `sqlite`) |
//! | [`DelayLimiter`] | at least `delay` has passed since the last start |
//! | [`EvenlySpacedRateLimiter`] | `window / max` has passed since the last start (cost × that, after a costly call), whatever the number of callers and the call duration |
//! | [`LeakyBucketLimiter`] | the constant drip is free (never a burst); else its slot is booked, up to a bounded queue |
//! | [`AdaptiveRateLimiter`] | the call conforms to a rate learned from the upstream: just under the capacity its refusals estimate, probing above it rarely, at a stated quota when there is one |
//! | [`AdaptiveConcurrencyLimiter`] | fewer calls are running than a limit that follows the upstream's latency (a gradient, as Netflix's concurrency-limits): more while calls are fast, fewer as they slow down |
//! | [`CompositeLimiter`] | every part admits it |
//! | [`KeyedLimiter`] | the limiter of the call's key (tenant, API key, route) admits it; bounded memory |
//! | [`BatchedLimiter`] | a fleet-wide GCRA quota in a store admits it, taken in batches and spent locally: millions of admissions a second, each process ahead of the fleet by at most one batch |
//! | [`LeasedConcurrencyLimiter`] | fewer than `max` leases are held across processes; leases expire unless renewed |
//! | [`Failover`] | its store-backed limiter admits it, or, while the store is down, its [`OutagePolicy`] does |
//!
//! [`KeyedLimitLayer`](limit::KeyedLimitLayer) takes the key (and a cost) from each request;
//! [`FairLimitLayer`](limit::FairLimitLayer) shares one limiter among keys, serving waiting callers
//! round-robin so that one tenant's backlog cannot starve the others.
//!
//! # Where the names live
//!
//! The crate root holds what most users name: the [`Limiter`] trait with
//! [`LimiterExt`] and [`Permit`], the limiters above, [`LimitLayer`] and its
//! service [`Limit`], [`Rate`] and [`QuotaStatus`]. The rest is one module
//! deep:
//!
//! | Module | Holds |
//! |---|---|
//! | [`limit`] | the layers: [`LimitLayer`], and the keyed, fair and cost-weighted ones |
//! | [`limiter`] | what implementing or driving a [`Limiter`] names: [`Admission`](limiter::Admission), [`Denial`](limiter::Denial), [`LimiterFuture`](limiter::LimiterFuture), release events, stats |
//! | [`limiters`] | every limiter with its builder and companions (the pacer of an adaptive limiter, the inline state of a keyed one) |
//! | [`store`] | quotas kept in memory, Redis, PostgreSQL or SQLite, shared across processes |
//! | `http` | upstream feedback, retries, `429` answers (feature `http`) |
//! | [`job`] | rescheduling the jobs of a queue worker |
//! | [`rate`], [`clock`], [`error`] | rates as strings, the clocks limiters read, the errors |
//!
//! With the `http` cargo feature, the `http` module obeys upstream `429`s and
//! `Retry-After` / `RateLimit` headers on the client, answers `429` with
//! those headers on the server, and holds permits until response bodies end.
//!
//! The [`job`] module is for job-queue workers: when a job fails with a
//! [`RetryableJobError`](job::RetryableJobError), [`job::reschedule`] says
//! when to run it again and pushes the shared limiter back, by at most
//! [`DEFAULT_MAX_UPSTREAM_WAIT`](limiter::DEFAULT_MAX_UPSTREAM_WAIT) (5 minutes), as every path from an
//! upstream's wait to a pause.
//!
//! Limits can be written as strings: a [`Rate`] parses `10/s`, `100/m` or
//! `2/500ms` and, with the `serde` cargo feature, reads them from a
//! configuration file (see [`rate`]).
//!
//! # Which limiter do I need?
//!
//! - **An API says "N requests per second/minute"**: a [`RateLimiter`] of
//!   [`Quota::gcra`](store::Quota::gcra) (exact pacing; add
//!   [`with_pacing_tolerance`](store::Quota::with_pacing_tolerance) so that
//!   late timer wake-ups do not cost a burst of 1 its rate), or
//!   [`Quota::token_bucket`](store::Quota::token_bucket) if the API states a
//!   bucket size; [`RateLimiter::builder`] for the seed's sliding log of
//!   starts.
//! - **You do not know the limit, or it changes**: [`AdaptiveRateLimiter`]
//!   with `http::FeedbackLayer::adaptive` (feature `http`).
//! - **A downstream that must never see a burst** (a fragile database, a
//!   legacy system): [`LeakyBucketLimiter`] or [`EvenlySpacedRateLimiter`].
//! - **At most N calls at once** (connections, CPU, GPU): [`ConcurrencyLimiter`];
//!   [`AdaptiveConcurrencyLimiter`] if the right N depends on how the
//!   upstream copes; put concurrency *outside* rate in a stack.
//! - **Per tenant, per API key, per route**: a [`KeyedLimiter`] through
//!   [`KeyedLimitLayer`](limit::KeyedLimitLayer); one shared limit split fairly among tenants:
//!   [`FairLimitLayer`](limit::FairLimitLayer); a server answering `429` per client:
//!   `http::TooManyRequestsLayer`.
//! - **A fleet of processes behind one limit**: [`RateLimiter`] on a shared
//!   store (the store decides every call), [`BatchedLimiter`] (batches, for high rates),
//!   [`LeasedConcurrencyLimiter`] (slots); wrap in [`Failover`] to choose
//!   what happens when the store is down.
//! - **Costs that vary per call** (tokens of an LLM API): any limiter with
//!   `try_acquire_many(cost)`, [`LimitLayer::cost`], and settling the real
//!   cost from the response.
//!
//! # Cargo features
//!
//! Only `fast-clock` is on by default.
//!
//! | Feature | What it adds |
//! |---|---|
//! | `serde` | [`Rate`] as a string in configuration files |
//! | `http` | the `http` module: upstream feedback, retries, `429` answers, permits held by bodies |
//! | `axum` | `http`, and axum's `ConnectInfo` as the peer of a request |
//! | `tonic` | `http`, and tonic's `TcpConnectInfo` as the peer of a request |
//! | `reqwest-middleware` | `http`, and `http::LimitMiddleware`: the limits, the upstream feedback and the retries for a `reqwest_middleware` client |
//! | `fast-clock` (default) | [`Clock::fast`], the default clock outside paused tokio time, reads the CPU's time-stamp counter (through `quanta`) instead of the system's monotonic clock |
//! | `metrics` | counters, a histogram and a gauge of observed layers, and gauges of named keyed and adaptive limiters, through the `metrics` facade |
//! | `redis` | `store::RedisStore` |
//! | `redis-cluster` | `redis`, and Redis Cluster for `store::RedisStore` |
//! | `postgres` | `store::PostgresStore` |
//! | `sqlite` | `store::SqliteStore` (SQLite compiled in) |
//! | `full` | all of the above |
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_limits::{LimitLayer, ConcurrencyLimiter, RateLimiter};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), tower_limits::error::BoxError> {
//! let rate = RateLimiter::builder("payments-api", 2, Duration::from_secs(1))
//!     .without_backoff()
//!     .build()?;
//! let client = ServiceBuilder::new()
//!     .layer(LimitLayer::new(ConcurrencyLimiter::new(4)?))
//!     .layer(LimitLayer::new(rate))
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
//!   so a call whose future is dropped releases what it held; a reservation
//!   never used is refunded, on every store.
//! * **Fast clock, testable time.** Limiters read [`Clock::fast`] (the CPU's
//!   time-stamp counter, with the default `fast-clock` feature) unless they
//!   are built under paused tokio time: then they read tokio's clock, so
//!   `tokio::time::pause` drives them. One built before time is paused
//!   needs `.with_clock(Clock::tokio())` to follow it.
//!
//! [tower]: https://docs.rs/tower
//! [`Clock::fast`]: clock::Clock::fast

#![cfg_attr(docsrs, feature(doc_cfg))]

mod algorithms;
pub mod clock;
pub mod error;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
pub mod job;
pub mod limit;
pub mod limiter;
pub mod limiters;
mod line;
mod quota_status;
pub mod rate;
mod start_log;
pub mod store;

/// The README's Rust examples, run as doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

pub use limit::{Limit, LimitLayer};
pub use limiter::{Limiter, LimiterExt, Permit};
pub use limiters::{
    AdaptiveConcurrencyLimiter, AdaptiveRateLimiter, BatchedLimiter, CompositeLimiter,
    ConcurrencyLimiter, DelayLimiter, EvenlySpacedRateLimiter, Failover, KeyedLimiter,
    LeakyBucketLimiter, LeasedConcurrencyLimiter, NullLimiter, OutagePolicy, RateLimiter,
};
pub use quota_status::QuotaStatus;
pub use rate::Rate;
