//! Tower middleware that applies a [`Limiter`](crate::Limiter) to a service.
//!
//! [`LimitLayer`] works with any limiter: one layer type for every strategy,
//! and for your own implementations of [`Limiter`](crate::Limiter).
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_limits::{LimitLayer, ConcurrencyLimiter, RateLimiter};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tower_limits::error::BoxError> {
//! let rate = RateLimiter::builder("upstream", 50, Duration::from_secs(1))
//!     .without_backoff()
//!     .build()?;
//! let mut client = ServiceBuilder::new()
//!     // Concurrency outside rate: see below.
//!     .layer(LimitLayer::new(ConcurrencyLimiter::new(8)?))
//!     .layer(LimitLayer::new(rate))
//!     .service(service_fn(|request: &'static str| async move {
//!         Ok::<_, Infallible>(request.len())
//!     }));
//! assert_eq!(client.ready().await?.call("hello").await?, 5);
//! # Ok(())
//! # }
//! ```
//!
//! # Waiting
//!
//! `poll_ready` asks the limiter once. If it is denied, the caller joins the
//! layer's line; the caller at its head sleeps on a tokio timer set to
//! exactly the instant the limiter named, or until a running call completes
//! (for a concurrency limit), then asks again. There is no polling interval
//! and no busy loop, and callers are admitted in the order they started
//! waiting. A newcomer only skips the line when it is empty.
//!
//! Waiting is cancel safe: dropping the service or the future driving
//! `poll_ready` leaves the line and holds nothing. A reservation made by
//! `poll_ready` and never used by `call` is refunded, so it costs no quota.
//!
//! Bounds: [`max_waiting`](LimitLayer::max_waiting) turns callers away with
//! [`Overloaded`](crate::error::Overloaded) when the line is full;
//! [`max_wait`](LimitLayer::max_wait) fails them with
//! [`Elapsed`](crate::error::Elapsed); [`reject`](LimitLayer::reject) never
//! waits and fails with [`Rejected`](crate::error::Rejected). All arrive as
//! tower's `BoxError`; use `downcast_ref` to tell them apart. A refused
//! caller's `poll_ready` is ready at once and its `call` fails with the
//! error without reaching the inner service, as with tower's `LoadShed`:
//! `poll_ready` errors are for services that are gone for good (tower's
//! `Buffer` stops forever on one), and tonic maps call errors to gRPC
//! statuses (these to `RESOURCE_EXHAUSTED`). The service stays usable after
//! any of them.
//!
//! # Limiters that answer after a round trip
//!
//! A limiter that keeps its state in a store ([`RateLimiter`](crate::RateLimiter),
//! a [`RateLimiter`](crate::RateLimiter) with a Redis store, a [`Failover`](crate::Failover)...)
//! answers after a round trip. The layers never hold their line across one,
//! so a layered store-backed limiter serves many callers per round trip:
//!
//! - A caller who finds nobody in line asks at once, concurrently with the
//!   others: 100 callers whose decisions take 10 ms each are through in
//!   10 ms, as with [`try_acquire`](crate::Limiter::try_acquire) called
//!   directly. These first attempts race in the store, which decides them
//!   in the order they reach it.
//! - A denied caller joins the line. The head sleeps until the instant named,
//!   sends its retry and hands the turn on: the callers behind it send theirs
//!   while it is in flight, as many at once as were granted since the last
//!   denial (at least one): the window doubles each round trip while retries
//!   are granted and falls back to one at a denial. A refill (or the end of a
//!   pause) that admits 100 callers admits them in about 8 round trips; a
//!   backlog behind a limit that admits one caller per refill costs the store
//!   two decisions per refill (the grant and one denial), not one per
//!   waiting caller.
//! - The line keeps its order: its callers get the turn in the order they
//!   joined it (when denied, or on finding others in line), and a caller
//!   whose retry is denied goes back ahead of everyone who joined after it.
//!   Retries in flight at the same time are decided in the order they reach
//!   the store.
//! - A caller dropped while its decision is in flight holds nothing either:
//!   the decision finishes in a task, which refunds a grant
//!   ([`Limiter::refund`](crate::Limiter::refund)).
//! - [`max_waiting`](LimitLayer::max_waiting) counts the callers in line,
//!   including those whose retry is in flight, so the line holds at most
//!   that many. A first attempt is not waiting and is not counted: the layer
//!   keeps nothing for it (the caller's own future holds it, as with a
//!   direct `try_acquire`), and a caller denied by it joins the line or is
//!   turned away. [`max_wait`](LimitLayer::max_wait) fails a caller as soon
//!   as a denial names an instant past its deadline.
//!
//! A limiter that answers at once (every in-memory one) is asked by the
//! caller holding the turn, which keeps it until admitted: admissions in
//! arrival order, exactly when the limiter allows.
//!
//! # Observing a layer
//!
//! A layer observes its decisions once it is given a name
//! ([`LimitLayer::name`]), a hook ([`LimitLayer::on_decision`], called with
//! each [`Decision`]) or shadow mode ([`LimitLayer::shadow`]); a layer given
//! none of them records nothing and costs nothing. An observed layer
//! counts its decisions by [`Outcome`] ([`LimitLayer::stats`] gives a
//! [`LayerStats`], a few atomic reads) and reports them:
//!
//! - **tracing**: every admission is a span named `admission` (target
//!   `tower_limits::admission`) with the fields `limiter` (the layer's
//!   name), `cost`, `outcome` (`granted`, `refused`, `overloaded`,
//!   `elapsed`, `failed`, `abandoned`), `waited_us` and `shadow`. Admissions
//!   granted at once are `TRACE` spans; waits are `DEBUG` spans, entered
//!   while the caller waits (a store's warnings land inside them); every
//!   refusal is also a `DEBUG` event. Nothing is at `INFO`.
//! - **metrics** (cargo feature `metrics`), through the `metrics` facade,
//!   labelled `limiter` with the layer's name: the counter
//!   `tower_limits_decisions_total` (also labelled `outcome`:
//!   `shadow_refused` for what a shadow layer let through), the histogram
//!   `tower_limits_wait_seconds` of admitted calls' waits, and the gauge
//!   `tower_limits_waiting` of callers waiting now. Handles are registered
//!   when the layer is named: install the recorder (for instance
//!   `metrics-exporter-prometheus`) before building layers. Keys never
//!   become labels, so the number of series stays bounded.
//!
//! # Order: concurrency outside rate
//!
//! Stack a concurrency limit *outside* a rate limit. Then at most `N` callers
//! wait on the rate limit, and each starts the moment the rate limit admits
//! it. The other order admits a caller by rate first and then makes it wait
//! for a concurrency slot: it starts later than the rate limit recorded, so
//! several delayed callers can start back to back and break the rate (the
//! `layer_order` test shows both).

/// The observing builder methods of a layer that has an `options` field,
/// as [`LimitLayer`]'s, each documented with `$example` (a doctest that
/// shows them on that layer).
macro_rules! observing_methods {
    ($example:literal) => {
        #[doc = concat!(
            "Observes the layer's decisions under `name`, as [`LimitLayer::name`](crate::limit::LimitLayer::name).\n\n```\n",
            $example,
            "\n```"
        )]
        pub fn name(mut self, name: &str) -> Self {
            self.options.name(name);
            self
        }

        #[doc = concat!(
            "Calls `hook` with every decision, as [`LimitLayer::on_decision`](crate::limit::LimitLayer::on_decision).\n\n```\n",
            $example,
            "\n```"
        )]
        pub fn on_decision(
            mut self,
            hook: impl Fn(&$crate::limit::Decision<'_>) + Send + Sync + 'static,
        ) -> Self {
            self.options.on_decision(std::sync::Arc::new(hook));
            self
        }

        #[doc = concat!(
            "Shadow mode: decides and records but lets every call through, as [`LimitLayer::shadow`](crate::limit::LimitLayer::shadow).\n\n```\n",
            $example,
            "\n```"
        )]
        pub fn shadow(mut self) -> Self {
            self.options.shadow();
            self
        }

        #[doc = concat!(
            "The decisions counted so far, if observed, as [`LimitLayer::stats`](crate::limit::LimitLayer::stats).\n\n```\n",
            $example,
            "\n```"
        )]
        pub fn stats(&self) -> Option<$crate::limit::LayerStats> {
            self.options.stats()
        }
    };
}

/// The waiting bounds of a layer that has an `options` field, written once:
/// `max_waiting` (callers waiting `$scope`, counted as `$counting` says),
/// `max_wait` and, where the layer has it, `reject`, each documented with
/// its example on that layer.
macro_rules! waiting_methods {
    (
        max_waiting: $scope:literal, $counting:literal, $max_waiting:literal;
        max_wait: $max_wait:literal;
        $(reject: $reject:literal;)?
    ) => {
        #[doc = concat!(
            "Past `max_waiting` callers waiting ", $scope, ", a caller fails at once with ",
            "[`Overloaded`](crate::error::Overloaded) (from `call`; its `poll_ready` is ready ",
            "at once) instead of queueing without bound. 0 means never wait.\n\n",
            $counting,
            "\n\n```\n", $max_waiting, "\n```"
        )]
        pub fn max_waiting(mut self, max_waiting: usize) -> Self {
            self.options.max_waiting = Some(max_waiting);
            self
        }

        #[doc = concat!(
            "A caller waits at most `max_wait` for admission in all, then fails with ",
            "[`Elapsed`](crate::error::Elapsed), which carries the instant the limiter named; ",
            "it fails at once when the limiter names an instant past that deadline.",
            "\n\n```\n", $max_wait, "\n```"
        )]
        pub fn max_wait(mut self, max_wait: std::time::Duration) -> Self {
            self.options.max_wait = Some(max_wait);
            self
        }

        $(
            #[doc = concat!(
                "Reject mode: never wait; a denied caller's `poll_ready` is ready at once and ",
                "its `call` fails with [`Rejected`](crate::error::Rejected), which carries the ",
                "instant at which to retry. For servers that shed load instead of queueing.",
                "\n\n```\n", $reject, "\n```"
            )]
            pub fn reject(mut self) -> Self {
                self.options.reject = true;
                self
            }
        )?
    };
}

mod cost;
mod costs;
mod fair;
mod keyed;
mod layer;
mod observe;
mod per_request;
mod service;
mod waiting;

pub mod future;

use std::sync::Arc;
use std::time::Duration;

use observe::{Hook, Observer};

pub use cost::CostLimitLayer;
pub use costs::{KeepEstimate, RequestCost, ResponseCost, UnitCost};
pub use fair::FairLimitLayer;
pub use keyed::KeyedLimitLayer;
pub use layer::LimitLayer;
pub use observe::{Decision, LayerStats, Outcome};
pub use per_request::{AdmitRequest, PerRequest};
pub use service::Limit;

/// How a layer's services wait, and who watches.
#[derive(Clone, Debug, Default)]
pub(crate) struct Options {
    pub(crate) max_waiting: Option<usize>,
    pub(crate) max_wait: Option<Duration>,
    pub(crate) reject: bool,
    pub(crate) observer: Option<Arc<Observer>>,
}

/// The name of a layer observed without one.
const UNNAMED: &str = "limit";

impl Options {
    /// Observed under `name`, keeping the hook and shadow mode.
    pub(crate) fn name(&mut self, name: &str) {
        let (hook, shadow) = self.observed_as();
        self.observer = Some(Arc::new(Observer::new(name.into(), hook, shadow)));
    }

    /// Observed, each decision also going to `hook`.
    pub(crate) fn on_decision(&mut self, hook: Hook) {
        let (_, shadow) = self.observed_as();
        self.observer = Some(Arc::new(Observer::new(
            self.observed_name(),
            Some(hook),
            shadow,
        )));
    }

    /// Observed in shadow mode: decides, records, lets every call through.
    pub(crate) fn shadow(&mut self) {
        let (hook, _) = self.observed_as();
        self.observer = Some(Arc::new(Observer::new(self.observed_name(), hook, true)));
    }

    /// The counts, if observed.
    pub(crate) fn stats(&self) -> Option<LayerStats> {
        self.observer.as_ref().map(|observer| observer.stats())
    }

    /// The counts, if observed, with the calls `limiter` counts running.
    pub(crate) fn stats_with(&self, limiter: &impl crate::limiter::Limiter) -> Option<LayerStats> {
        let mut stats = self.stats()?;
        stats.in_flight = limiter.in_flight();
        Some(stats)
    }

    fn observed_name(&self) -> Arc<str> {
        self.observer
            .as_ref()
            .map_or_else(|| UNNAMED.into(), |observer| Arc::clone(observer.name()))
    }

    fn observed_as(&self) -> (Option<Hook>, bool) {
        self.observer.as_ref().map_or((None, false), |observer| {
            (observer.hook().cloned(), observer.is_shadow())
        })
    }
}
