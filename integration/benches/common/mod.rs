//! What the wall-clock benchmarks (`limiters`, `paired`) share: the
//! limiters and services they measure, set up alike, and how one call
//! through each is made.

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tower::{Layer, Service};
use tower_limits::clock::Clock;
use tower_limits::limiter::Admission;
use tower_limits::store::{MemoryStore, Quota};
use tower_limits::{ConcurrencyLimiter, KeyedLimiter, LimitLayer, Limiter, RateLimiter};

/// A concurrency no benchmark run can exhaust.
pub(crate) const UNBOUNDED: u32 = 1 << 30;

/// One cell per nanosecond with a second's worth of burst: like the
/// governor quota beside it, no benchmark can outrun it.
pub(crate) const CELLS_PER_SECOND: u32 = 1_000_000_000;

/// A window no benchmark can fill: a million starts take far longer than
/// its millisecond, and the log holds that millisecond's starts (some
/// thousands of entries).
pub(crate) fn sliding_window(clock: Clock) -> RateLimiter {
    RateLimiter::builder("bench", 1_000_000, Duration::from_millis(1))
        .without_backoff()
        .store(MemoryStore::new().with_clock(clock))
        .build()
        .expect("valid configuration")
}

/// [`CELLS_PER_SECOND`] with as much burst, strict (the default: no
/// pacing tolerance), as governor's quota beside it.
pub(crate) fn gcra_quota() -> Quota {
    Quota::gcra(CELLS_PER_SECOND, Duration::from_secs(1))
        .and_then(|quota| quota.with_burst(CELLS_PER_SECOND))
        .expect("valid configuration")
}

/// GCRA on [`gcra_quota`] in a memory store on `clock`.
pub(crate) fn gcra(clock: Clock) -> RateLimiter {
    RateLimiter::new(MemoryStore::new().with_clock(clock), "bench", gcra_quota())
}

/// [`gcra`] with [`Quota::with_pacing_tolerance`], a non-default option.
pub(crate) fn gcra_paced(clock: Clock) -> RateLimiter {
    let quota = gcra_quota().with_pacing_tolerance().expect("a GCRA quota");
    RateLimiter::new(MemoryStore::new().with_clock(clock), "bench", quota)
}

/// A concurrency limiter no benchmark fills.
pub(crate) fn concurrency() -> ConcurrencyLimiter {
    ConcurrencyLimiter::new(UNBOUNDED).expect("valid configuration")
}

/// Our keyed limiter of GCRA limiters, each key's TAT inline in its map,
/// with room for `2 * keys` keys and a decision made on keys `0..keys`.
pub(crate) fn inline_keyed(keys: u64) -> KeyedLimiter<u64, RateLimiter> {
    let limiter = KeyedLimiter::of(gcra(Clock::fast()))
        .clock(Clock::fast())
        .max_keys(2 * keys as usize)
        .build()
        .expect("valid configuration");
    (0..keys).for_each(|key| drop(limiter.try_acquire(&key)));
    limiter
}

/// governor's keyed limiter beside [`inline_keyed`], with a decision made
/// on keys `0..keys`.
pub(crate) fn governor_keyed(keys: u64) -> governor::DefaultKeyedRateLimiter<u64> {
    let quota = governor::Quota::per_second(std::num::NonZeroU32::MAX);
    let limiter = governor::RateLimiter::keyed(quota);
    (0..keys).for_each(|key| drop(limiter.check_key(&key)));
    limiter
}

/// One grant from `limiter`, its permit dropped at once.
pub(crate) fn admit(limiter: &impl Limiter) {
    let answer = limiter.try_acquire().into_ready().ok();
    match answer {
        Some(Ok(Admission::Granted(permit))) => drop(black_box(permit)),
        other => panic!("benchmark limiter must admit, got {other:?}"),
    }
}

/// Polls `future` once; the services measured here never wait.
pub(crate) fn poll_once<F: Future>(future: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("benchmark service must not wait"),
    }
}

/// `ready` then `call`, polled by hand.
pub(crate) fn ready_call<S: Service<()>>(service: &mut S)
where
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    match service.poll_ready(&mut cx) {
        Poll::Ready(Ok(())) => {}
        other => panic!("benchmark service must be ready, got {other:?}"),
    }
    black_box(poll_once(service.call(())).expect("no-op service"));
}

/// A service that answers at once.
#[derive(Clone, Copy)]
pub(crate) struct Noop;

impl Service<()> for Noop {
    type Response = ();
    type Error = Infallible;
    type Future = Ready<Result<(), Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, (): ()) -> Self::Future {
        ready(Ok(()))
    }
}

/// tower's `ConcurrencyLimit` outside its `RateLimit`, neither of which
/// any run fills. `RateLimit` makes its timer in `new`: call it inside a
/// tokio runtime.
pub(crate) fn tower_stack() -> impl Service<(), Error = Infallible> {
    let rate = tower::limit::rate::Rate::new(u64::MAX, Duration::from_secs(1));
    let inner = tower::limit::RateLimit::new(Noop, rate);
    tower::limit::ConcurrencyLimit::new(inner, UNBOUNDED as usize)
}

/// Our concurrency layer outside a rate layer of `rate`.
pub(crate) fn ours_stack(
    rate: impl Limiter + Clone,
) -> impl Service<(), Error = tower_limits::error::BoxError> {
    LimitLayer::new(concurrency()).layer(LimitLayer::new(rate).layer(Noop))
}
