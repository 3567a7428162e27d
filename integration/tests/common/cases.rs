//! Every limiter of the crate as the whole-crate tests build it, with the
//! bounds its grants must keep, and the checks of those bounds on what a
//! [`Recorder`] saw.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tower_limits::clock::PACING_TOLERANCE;
use tower_limits::error::LimiterError;
use tower_limits::limiter::{Admission, LimiterFuture};
use tower_limits::store::{MemoryStore, Quota};
use tower_limits::{
    CompositeLimiter, ConcurrencyLimiter, DelayLimiter, EvenlySpacedRateLimiter, Failover,
    KeyedLimiter, LeakyBucketLimiter, LeasedConcurrencyLimiter, Limiter, Permit, RateLimiter,
};

use super::stress::{Recorder, assert_at_most_per_window, cell_bound, paced_bound};

/// The limits most cases use: 10 per 2 ms.
pub(crate) const MAX: usize = 10;
pub(crate) const WINDOW: Duration = Duration::from_millis(2);
/// `WINDOW / MAX`: the gap of the spacing limiters, the emission interval
/// of the cells.
pub(crate) const INTERVAL: Duration = Duration::from_micros(200);
/// The fixed window's: short, so that a run crosses many boundaries.
pub(crate) const SHORT_WINDOW: Duration = Duration::from_micros(500);

/// What a limiter's grants must keep.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Bound {
    /// At most this many calls run at once (and the test reached it).
    Concurrent(usize),
    /// No interval of `window` holds more than `max` grants; the busiest
    /// holds at least `min`.
    PerWindow {
        max: usize,
        window: Duration,
        min: usize,
    },
    /// No window index (the permits' tokens) holds more than `max` grants,
    /// and one holds `max`.
    PerWindowIndex(usize),
}

/// How a limiter's denials can be compared with a fresh one's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Denials {
    /// The same retry instants.
    Exact,
    /// Only whether each attempt was granted: the instants differ (jitter,
    /// or a store's windows, on Unix time as read when the store was made:
    /// two stores made at one paused instant place them apart).
    GrantsOnly,
}

/// One limiter to test.
#[derive(Clone, Copy)]
pub(crate) struct Case {
    pub(crate) make: fn() -> Arc<dyn Limiter>,
    pub(crate) bounds: &'static [Bound],
    /// How long a caller holds its grant.
    pub(crate) hold: Duration,
    pub(crate) denials: Denials,
    /// Whether an attempt may fail with an error (a leaky bucket's full
    /// queue), rather than only be granted or denied.
    pub(crate) may_refuse: bool,
}

impl Case {
    const fn new(make: fn() -> Arc<dyn Limiter>, bounds: &'static [Bound]) -> Self {
        Self {
            make,
            bounds,
            hold: Duration::ZERO,
            denials: Denials::Exact,
            may_refuse: false,
        }
    }

    const fn hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    const fn grants_only(mut self) -> Self {
        self.denials = Denials::GrantsOnly;
        self
    }

    const fn may_refuse(mut self) -> Self {
        self.may_refuse = true;
        self
    }

    /// Checks every bound on the grants `limiter` saw.
    pub(crate) fn check_grants<L>(&self, limiter: &Recorder<L>) {
        for bound in self.bounds {
            match *bound {
                Bound::Concurrent(max) => assert_concurrency(limiter, max),
                Bound::PerWindow { max, window, min } => {
                    assert_at_most_per_window(&limiter.spans(), max, window, min);
                }
                Bound::PerWindowIndex(max) => assert_per_window_index(limiter, max),
            }
        }
    }

    /// Checks the bounds on the calls that started, on paused time, where
    /// grants are not enough: a grant given back unused (a caller that gave
    /// up after `poll_ready`) leaves the limit, and another caller may take
    /// its place. A window's index is not checked here for that reason (a
    /// refunded grant leaves its window's count); the sliding bound is.
    /// Paused timers fire on whole milliseconds, so waiting callers cannot
    /// fill sub-millisecond limits: a window need only hold one call.
    pub(crate) fn check_starts<L>(&self, limiter: &Recorder<L>) {
        for bound in self.bounds {
            match *bound {
                Bound::Concurrent(max) => assert_concurrency(limiter, max),
                Bound::PerWindow { max, window, .. } => {
                    assert_at_most_per_window(&limiter.running.starts(), max, window, 1);
                }
                Bound::PerWindowIndex(_) => {}
            }
        }
    }
}

fn assert_concurrency<L>(limiter: &Recorder<L>, max: usize) {
    let most = limiter.running.max();
    assert!(most <= max, "{most} ran at once, limit {max}");
    assert_eq!(most, max, "the limit was never reached");
}

fn assert_per_window_index<L>(limiter: &Recorder<L>, max: usize) {
    let mut per_window = HashMap::<u64, usize>::new();
    for grant in limiter.grants() {
        let index = grant.token.expect("a window's permit names its window");
        *per_window.entry(index).or_default() += 1;
    }
    let (index, most) = per_window.iter().max_by_key(|(_, n)| **n).unwrap();
    assert!(*most <= max, "window {index} granted {most} of {max}");
    assert_eq!(*most, max, "no window was ever full");
}

/// A sliding `window` of grants: at most `max`, and at least `min` at the
/// busiest.
const fn per_window(max: usize, window: Duration, min: usize) -> Bound {
    Bound::PerWindow { max, window, min }
}

/// A pacer with emission interval [`INTERVAL`] and burst `b` (GCRA, token
/// bucket; 1 for the evenly spaced limiter and the leaky bucket): `n` cells
/// need `(n - b) × interval` to pass, less the pacing tolerance a late
/// start may take its slot back by ([`paced_bound`]; without it, at most
/// `b` in any interval and `b + MAX - 1` in any [`WINDOW`]).
/// A store's cells decide by the strict test: `cell_bounds!(b, strict)`.
macro_rules! cell_bounds {
    ($burst:expr) => {
        cell_bounds!($burst, PACING_TOLERANCE)
    };
    ($burst:expr, strict) => {
        cell_bounds!($burst, Duration::ZERO)
    };
    ($burst:expr, $tolerance:expr) => {
        &[
            per_window(
                cell_bound($burst, INTERVAL, INTERVAL, $tolerance),
                INTERVAL,
                1,
            ),
            per_window(
                cell_bound($burst, INTERVAL, WINDOW, $tolerance),
                WINDOW,
                MAX / 2,
            ),
        ]
    };
}

pub(crate) const CONCURRENCY: Case = Case::new(
    || Arc::new(ConcurrencyLimiter::new(4).unwrap()),
    &[Bound::Concurrent(4)],
)
.hold(Duration::from_micros(200));

pub(crate) const SLIDING_LOG: Case =
    Case::new(|| Arc::new(rate(false)), &[per_window(MAX, WINDOW, MAX)]);

pub(crate) const SLIDING_LOG_WITH_BACKOFF: Case =
    Case::new(|| Arc::new(rate(true)), &[per_window(MAX, WINDOW, MAX)]).grants_only();

pub(crate) const DELAY: Case = Case::new(
    || Arc::new(DelayLimiter::new(INTERVAL).unwrap()),
    &[per_window(1, INTERVAL, 1)],
);

/// Calls outlast the interval: starts stay spaced all the same.
pub(crate) const EVENLY_SPACED: Case = Case::new(
    || Arc::new(EvenlySpacedRateLimiter::new(MAX as u32, WINDOW).unwrap()),
    cell_bounds!(1),
)
.hold(Duration::from_millis(1));

pub(crate) const GCRA: Case = Case::new(|| Arc::new(gcra(5)), cell_bounds!(5));

pub(crate) const TOKEN_BUCKET: Case = Case::new(
    || {
        let quota = Quota::token_bucket(5, MAX as u32, WINDOW).unwrap();
        Arc::new(RateLimiter::in_memory(
            quota.with_pacing_tolerance().unwrap(),
        ))
    },
    cell_bounds!(5),
);

/// Room for every parallel caller in the queue (no `BucketFull` there).
pub(crate) const LEAKY_BUCKET: Case = Case::new(
    || Arc::new(LeakyBucketLimiter::new(MAX as u32, WINDOW, 1_000).unwrap()),
    cell_bounds!(1),
)
.may_refuse();

/// Each calendar window at most its limit; a sliding one up to twice that.
pub(crate) const FIXED_WINDOW: Case = Case::new(
    || {
        let quota = Quota::fixed_window(MAX as u32, SHORT_WINDOW).unwrap();
        Arc::new(RateLimiter::in_memory(quota))
    },
    &[
        Bound::PerWindowIndex(MAX),
        per_window(2 * MAX, SHORT_WINDOW, MAX),
    ],
)
.grants_only();

/// The blend charges each calendar window at most its limit; a sliding
/// window can see up to twice that (the last window's calls all late,
/// weighted as if spread).
pub(crate) const SLIDING_WINDOW_COUNTER: Case = Case::new(
    || {
        let quota = Quota::sliding_window_counter(MAX as u32, WINDOW).unwrap();
        Arc::new(RateLimiter::in_memory(quota))
    },
    &[
        Bound::PerWindowIndex(MAX),
        per_window(2 * MAX, WINDOW, MAX / 2),
    ],
)
.grants_only();

pub(crate) const COMPOSITE: Case = Case::new(
    || {
        Arc::new(
            CompositeLimiter::new()
                .with(ConcurrencyLimiter::new(2).unwrap())
                .with(gcra(3)),
        )
    },
    &[
        Bound::Concurrent(2),
        per_window(paced_bound(3, INTERVAL, INTERVAL), INTERVAL, 1),
        per_window(paced_bound(3, INTERVAL, WINDOW), WINDOW, MAX / 2),
    ],
)
.hold(Duration::from_micros(500));

/// One key's limit, every call through the keyed map.
pub(crate) const KEYED: Case = Case::new(
    || {
        let keyed = KeyedLimiter::builder(|_: &u8| gcra(2)).build().unwrap();
        Arc::new(OneKey::new(keyed, 7))
    },
    cell_bounds!(2),
);

pub(crate) const SHARED_GCRA: Case = Case::new(
    || {
        let quota = Quota::gcra(MAX as u32, WINDOW)
            .unwrap()
            .with_burst(4)
            .unwrap();
        Arc::new(RateLimiter::new(MemoryStore::new(), "gcra", quota))
    },
    cell_bounds!(4, strict),
);

pub(crate) const SHARED_FIXED_WINDOW_BEHIND_FAILOVER: Case = Case::new(
    || {
        let quota = Quota::fixed_window(MAX as u32, SHORT_WINDOW).unwrap();
        let shared = RateLimiter::new(MemoryStore::new(), "window", quota);
        Arc::new(Failover::fail_closed(shared))
    },
    &[per_window(2 * MAX, SHORT_WINDOW, MAX)],
)
.grants_only();

/// 10 per 2 ms for the fleet, taken 5 at a time (burst 20): a window sees
/// at most the burst, the rate and the batch and a half a process can hold.
pub(crate) const BATCHED: Case = Case::new(
    || {
        let rate = tower_limits::Rate::new(MAX as u32, WINDOW).unwrap();
        let limiter = tower_limits::BatchedLimiter::builder(MemoryStore::new(), "batched", rate)
            .batch(5)
            .burst(20)
            .build()
            .unwrap();
        Arc::new(limiter)
    },
    &[per_window(20 + MAX + 8, WINDOW, MAX)],
);

pub(crate) const LEASED_CONCURRENCY: Case = Case::new(
    || {
        let ttl = Duration::from_secs(10);
        Arc::new(LeasedConcurrencyLimiter::new(MemoryStore::new(), "leases", 3, ttl).unwrap())
    },
    &[Bound::Concurrent(3)],
)
.hold(Duration::from_micros(200));

fn rate(backoff: bool) -> RateLimiter {
    let builder = RateLimiter::builder("cases", MAX as u32, WINDOW);
    let builder = if backoff {
        builder
            .initial_backoff(Duration::from_millis(1))
            .backoff_multiplier(2.0)
            .max_backoff(Duration::from_millis(5))
    } else {
        builder.without_backoff()
    };
    builder.build().unwrap()
}

/// GCRA at [`MAX`] per [`WINDOW`], `burst` at once, with the pacing
/// tolerance, in memory.
fn gcra(burst: u32) -> RateLimiter {
    let quota = Quota::gcra(MAX as u32, WINDOW)
        .and_then(|quota| quota.with_burst(burst))
        .and_then(Quota::with_pacing_tolerance)
        .unwrap();
    RateLimiter::in_memory(quota)
}

/// One key of a keyed limiter, seen as a limiter of its own: every call
/// goes through the keyed map.
#[derive(Clone)]
pub(crate) struct OneKey {
    keyed: KeyedLimiter<u8, RateLimiter>,
    key: u8,
}

impl OneKey {
    pub(crate) fn new(keyed: KeyedLimiter<u8, RateLimiter>, key: u8) -> Self {
        Self { keyed, key }
    }

    fn limiter(&self) -> RateLimiter {
        self.keyed.limiter(&self.key).expect("the map has room")
    }
}

impl Limiter for OneKey {
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        self.keyed.try_acquire_many(&self.key, cost)
    }
    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        LimiterFuture::new(async move { self.limiter().can_proceed().await })
    }
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(async move { self.limiter().record_start().await })
    }
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(async move { self.limiter().record_completion().await })
    }
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        LimiterFuture::new(async move { self.limiter().next_available_time().await })
    }
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(async move { self.limiter().set_next_available_time(at).await })
    }
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(async move { self.limiter().clear().await })
    }
    fn refund(&self, permit: Permit) {
        self.limiter().refund(permit);
    }
    fn settle(&self, permit: &mut Permit, actual: u32) {
        self.limiter().settle(permit, actual);
    }
}
