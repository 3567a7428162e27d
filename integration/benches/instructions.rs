//! Instructions per call of the hot paths beside the peers, counted under
//! callgrind: deterministic where wall-clock medians are not (a shared
//! virtual machine's steal time moves `limiters`' medians by a quarter).
//!
//! Each `calls_*` function runs one path [`CALLS`] times and is never
//! inlined (nor merged with another: each names itself), so its inclusive
//! instruction count divided by [`CALLS`] is one call's; the clocks are
//! calibrated before any of them runs. Build, run under callgrind, and read the counts:
//!
//! ```text
//! cargo bench -p integration --bench instructions --no-run
//! valgrind --tool=callgrind --callgrind-out-file=cg.out target/release/deps/instructions-<hash>
//! callgrind_annotate --inclusive=yes cg.out | grep 'instructions::calls_'
//! ```
//!
//! Arguments name the paths to run (all by default): `governor`, `gcra`,
//! `fixed_window`, `sliding_window_counter`, `sliding_log`, `concurrency`,
//! `semaphore`, `stack`, `sliding_log_stack`, `tower_stack`,
//! `concurrency_layer`, `tower_concurrency_layer`.
//! The quotas are `limiters`' (none of them ever denies). Compare binaries
//! built alike: how much the compiler inlines depends on what else the binary
//! holds, and with the default 16 code-generation units on how the code
//! happens to be split among them (governor's `check` read 67 or 98 in two
//! builds that changed only tower-limits). Building with
//! `CARGO_PROFILE_BENCH_CODEGEN_UNITS=1` takes that split away.

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tower::{Layer, Service};
use tower_limits::clock::Clock;
use tower_limits::limiter::Admission;
use tower_limits::store::{MemoryStore, Quota};
use tower_limits::{ConcurrencyLimiter, LimitLayer, Limiter, RateLimiter};

/// Calls per path.
const CALLS: u32 = 200_000;

/// Room no run can use up.
const UNBOUNDED: u32 = 1 << 30;

/// A service that answers at once.
#[derive(Clone)]
struct Noop;

impl Service<u32> for Noop {
    type Response = u32;
    type Error = Infallible;
    type Future = Ready<Result<u32, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: u32) -> Self::Future {
        ready(Ok(request))
    }
}

/// `ready` and `call`, each of which must finish at once.
fn ready_call<S: Service<u32>>(service: &mut S) {
    let mut cx = Context::from_waker(Waker::noop());
    assert!(matches!(service.poll_ready(&mut cx), Poll::Ready(Ok(()))));
    let response = pin!(service.call(1)).poll(&mut cx);
    assert!(matches!(response, Poll::Ready(Ok(_))));
}

/// One grant from `limiter`, its permit dropped.
fn grant(limiter: &impl Limiter) {
    match limiter.try_acquire().into_ready() {
        Ok(Ok(Admission::Granted(permit))) => drop(black_box(permit)),
        _ => panic!("the limiter must grant at once"),
    }
}

/// `fn $name($arg)`, never inlined, running `$call` [`CALLS`] times; it
/// names itself (`$path`), so that no two such functions are merged.
macro_rules! counted {
    ($name:ident, $path:literal, |$arg:ident: $ty:ty| $call:expr) => {
        #[inline(never)]
        fn $name($arg: $ty) {
            black_box($path);
            for _ in 0..CALLS {
                $call;
            }
        }
    };
}

counted!(
    calls_governor,
    "governor",
    |limiter: &governor::DefaultDirectRateLimiter| { assert!(black_box(limiter.check()).is_ok()) }
);
counted!(calls_gcra, "gcra", |limiter: &RateLimiter| grant(limiter));
counted!(
    calls_fixed_window,
    "fixed_window",
    |limiter: &RateLimiter| grant(limiter)
);
counted!(
    calls_sliding_window_counter,
    "sliding_window_counter",
    |limiter: &RateLimiter| { grant(limiter) }
);
counted!(calls_sliding_log, "sliding_log", |limiter: &RateLimiter| {
    grant(limiter)
});
counted!(
    calls_concurrency,
    "concurrency",
    |limiter: &ConcurrencyLimiter| grant(limiter)
);
counted!(
    calls_semaphore,
    "semaphore",
    |semaphore: &tokio::sync::Semaphore| {
        drop(black_box(semaphore.try_acquire()).expect("room"))
    }
);
counted!(calls_stack, "stack", |service: &mut impl Service<u32>| {
    ready_call(service)
});
counted!(
    calls_sliding_log_stack,
    "sliding_log_stack",
    |service: &mut impl Service<u32>| ready_call(service)
);
counted!(
    calls_tower_stack,
    "tower_stack",
    |service: &mut impl Service<u32>| { ready_call(service) }
);
counted!(
    calls_concurrency_layer,
    "concurrency_layer",
    |service: &mut impl Service<u32>| { ready_call(service) }
);
counted!(
    calls_tower_concurrency_layer,
    "tower_concurrency_layer",
    |service: &mut impl Service<u32>| ready_call(service)
);

/// `quota` in a memory store on the fast clock.
fn in_memory(quota: Result<Quota, tower_limits::error::ConfigError>) -> RateLimiter {
    let quota = quota.expect("a valid quota");
    RateLimiter::new(MemoryStore::new().with_clock(Clock::fast()), "probe", quota)
}

/// A nanosecond's cell with a second's burst, strict (the default).
fn gcra() -> RateLimiter {
    let per_second = 1_000_000_000;
    in_memory(
        Quota::gcra(per_second, Duration::from_secs(1))
            .and_then(|quota| quota.with_burst(per_second)),
    )
}

/// `limiters`' sliding log: a window no run fills, without the backoff
/// (which only a full window sets off).
fn sliding_log() -> RateLimiter {
    in_memory(Quota::sliding_log(1_000_000, Duration::from_millis(1)))
}

fn concurrency() -> ConcurrencyLimiter {
    ConcurrencyLimiter::new(UNBOUNDED).expect("a valid limit")
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    // tower's `RateLimit` makes its timer in `new`.
    let _entered = runtime.enter();
    // Calibrate both clocks (quanta's, millions of instructions) first.
    let _ = Clock::fast().now();
    let _ = governor::clock::DefaultClock::default();
    let chosen: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let runs = |path: &str| chosen.is_empty() || chosen.iter().any(|c| c == path);

    if runs("governor") {
        let quota = governor::Quota::per_second(NonZeroU32::MAX);
        calls_governor(&governor::RateLimiter::direct(quota));
    }
    if runs("gcra") {
        calls_gcra(&gcra());
    }
    if runs("fixed_window") {
        let window = Duration::from_millis(1);
        calls_fixed_window(&in_memory(Quota::fixed_window(u32::MAX, window)));
    }
    if runs("sliding_window_counter") {
        let quota = Quota::sliding_window_counter((1 << 24) - 1, Duration::from_millis(1));
        calls_sliding_window_counter(&in_memory(quota));
    }
    if runs("sliding_log") {
        calls_sliding_log(&sliding_log());
    }
    if runs("concurrency") {
        calls_concurrency(&concurrency());
    }
    if runs("semaphore") {
        calls_semaphore(&tokio::sync::Semaphore::new(UNBOUNDED as usize));
    }
    if runs("stack") {
        let rate = LimitLayer::new(gcra()).layer(Noop);
        calls_stack(&mut LimitLayer::new(concurrency()).layer(rate));
    }
    if runs("sliding_log_stack") {
        let rate = LimitLayer::new(sliding_log()).layer(Noop);
        calls_sliding_log_stack(&mut LimitLayer::new(concurrency()).layer(rate));
    }
    if runs("tower_stack") {
        let rate = tower::limit::rate::Rate::new(u64::MAX, Duration::from_secs(1));
        let inner = tower::limit::RateLimit::new(Noop, rate);
        let mut stack = tower::limit::ConcurrencyLimit::new(inner, UNBOUNDED as usize);
        calls_tower_stack(&mut stack);
    }
    if runs("concurrency_layer") {
        calls_concurrency_layer(&mut LimitLayer::new(concurrency()).layer(Noop));
    }
    if runs("tower_concurrency_layer") {
        let mut layer = tower::limit::ConcurrencyLimit::new(Noop, UNBOUNDED as usize);
        calls_tower_concurrency_layer(&mut layer);
    }
}
