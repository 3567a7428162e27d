//! Admission cost beside the peers, in one run.
//!
//! * `decision`: one admission decision of an in-memory limiter that has room,
//!   beside `governor`'s `check()` (GCRA, TSC clock); `gcra_*` and
//!   `token_bucket_*` run the same algorithm with the same quota, as a
//!   `RateLimiter` on a `MemoryStore` with the default (strict) quota, through
//!   the `Limiter` trait (a `Permit` per grant, where governor hands out
//!   nothing); `gcra_paced_*` adds `Quota::with_pacing_tolerance`.
//!   `*_default_clock` is the configuration a user gets without naming a clock, beside governor's default (both read the CPU's counter
//!   through quanta).
//! * `stack`: `ready` + `call` through concurrency-outside-rate layers around a
//!   no-op service, beside tower's `ConcurrencyLimit` + `RateLimit` and the
//!   bare service. Futures are polled by hand with a no-op waker, so no
//!   runtime scheduling is measured.
//! * `keyed`: one decision on one of 1, 1,000 or 100,000 keys, our
//!   `KeyedLimiter` of GCRA limiters beside governor's keyed limiter, on the
//!   same keys in the same order: `gcra_fast_clock` made by `builder` (a
//!   limiter per key, each `fresh` from one template, sharing its store),
//!   `gcra_inline_fast_clock` by `of` (each key's TAT kept inline in the
//!   map).
//! * `clock`: the time sources, since the clock is most of a decision.
//! * `observe`: a layer observed (counted, traced, measured) beside the same
//!   layer unobserved, with no subscriber or recorder installed.
//! * `threads`: one limiter shared by 1 and 2 OS threads deciding at once,
//!   beside tokio's `Semaphore` (borrowed and owned permits) and governor:
//!   the slowest thread's time per decision.
//!
//! Run with `cargo bench -p integration --bench limiters`. On a shared
//! machine, compare ours with a peer by `paired`, which times them in turns.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

mod common;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::Duration;

use common::{
    CELLS_PER_SECOND, Noop, UNBOUNDED, admit, concurrency, gcra, gcra_paced, gcra_quota,
    governor_keyed, inline_keyed, ours_stack, ready_call, sliding_window, tower_stack,
};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tower::{Layer, Service};
use tower_limits::clock::Clock;
use tower_limits::limiter::Admission;
use tower_limits::limiters::FreshLimiter;
use tower_limits::store::{MemoryStore, Quota};
use tower_limits::{KeyedLimiter, LeakyBucketLimiter, LimitLayer, Limiter, RateLimiter};

/// [`gcra`] with the default configuration's clock (the fast clock, since
/// no paused runtime is around).
fn gcra_default() -> RateLimiter {
    RateLimiter::in_memory(gcra_quota())
}

fn token_bucket(clock: Clock) -> RateLimiter {
    let per_second = CELLS_PER_SECOND;
    let quota = Quota::token_bucket(CELLS_PER_SECOND, per_second, Duration::from_secs(1))
        .expect("valid configuration");
    RateLimiter::new(MemoryStore::new().with_clock(clock), "bench", quota)
}

/// A drip of one call per nanosecond: a decision takes longer, so the drip
/// is almost always free. Two decisions can read the same nanosecond,
/// though (the counter's scale is coarser than a tick): the second then
/// books the next nanosecond's slot, which the queue has room for.
fn leaky_bucket(clock: Clock) -> LeakyBucketLimiter {
    LeakyBucketLimiter::new(CELLS_PER_SECOND, Duration::from_secs(1), 1_000_000)
        .expect("valid configuration")
        .with_clock(clock)
}

/// The most a window holds, per millisecond: no benchmark can fill it.
fn fixed_window(clock: Clock) -> RateLimiter {
    let quota = Quota::fixed_window(u32::MAX, Duration::from_millis(1));
    RateLimiter::new(
        MemoryStore::new().with_clock(clock),
        "bench",
        quota.expect("valid configuration"),
    )
}

/// Just under 2²⁴ per millisecond: the counter's lock-free path holds
/// counts below 2²⁴, and a millisecond window at the speed of a decision
/// never comes near that many, so this row never denies either.
fn sliding_window_counter(clock: Clock) -> RateLimiter {
    let quota = Quota::sliding_window_counter((1 << 24) - 1, Duration::from_millis(1));
    RateLimiter::new(
        MemoryStore::new().with_clock(clock),
        "bench",
        quota.expect("valid configuration"),
    )
}

/// `quota` run by [`RateLimiter`] in a [`MemoryStore`] on `clock`, as
/// given: strict GCRA beside [`gcra`]'s paced quota, and the windows with
/// a limit of `u32::MAX`.
fn stored(quota: Quota, clock: Clock) -> RateLimiter {
    RateLimiter::new(MemoryStore::new().with_clock(clock), "bench", quota)
}

/// One decision, whichever way it goes: for the leaky bucket, which may
/// book a slot a nanosecond ahead instead of granting.
fn decide(limiter: &impl Limiter) {
    match limiter.try_acquire().into_ready().ok() {
        Some(Ok(admission)) => drop(black_box(admission)),
        other => panic!("benchmark limiter must decide at once, got {other:?}"),
    }
}

fn decision(c: &mut Criterion) {
    let mut group = c.benchmark_group("decision");
    let governor = governor::RateLimiter::direct(governor::Quota::per_second(NonZeroU32::MAX));
    group.bench_function("governor_check", |b| {
        b.iter(|| black_box(governor.check()).is_ok())
    });
    let fast = sliding_window(Clock::fast());
    group.bench_function("sliding_window_fast_clock", |b| b.iter(|| admit(&fast)));
    let tokio_clock = sliding_window(Clock::tokio());
    group.bench_function("sliding_window_tokio_clock", |b| {
        b.iter(|| admit(&tokio_clock))
    });
    let limiter = concurrency();
    group.bench_function("concurrency", |b| b.iter(|| admit(&limiter)));
    let gcra_fast = gcra(Clock::fast());
    group.bench_function("gcra_fast_clock", |b| b.iter(|| admit(&gcra_fast)));
    let gcra_default = gcra_default();
    group.bench_function("gcra_default_clock", |b| b.iter(|| admit(&gcra_default)));
    let gcra_paced = gcra_paced(Clock::fast());
    group.bench_function("gcra_paced_fast_clock", |b| b.iter(|| admit(&gcra_paced)));
    let gcra_tokio = gcra(Clock::tokio());
    group.bench_function("gcra_tokio_clock", |b| b.iter(|| admit(&gcra_tokio)));
    let bucket_fast = token_bucket(Clock::fast());
    group.bench_function("token_bucket_fast_clock", |b| {
        b.iter(|| admit(&bucket_fast))
    });
    let bucket_tokio = token_bucket(Clock::tokio());
    group.bench_function("token_bucket_tokio_clock", |b| {
        b.iter(|| admit(&bucket_tokio))
    });
    let leaky = leaky_bucket(Clock::fast());
    group.bench_function("leaky_bucket_fast_clock", |b| b.iter(|| decide(&leaky)));
    let fixed = fixed_window(Clock::fast());
    group.bench_function("fixed_window_fast_clock", |b| b.iter(|| admit(&fixed)));
    let counter = sliding_window_counter(Clock::fast());
    group.bench_function("sliding_window_counter_fast_clock", |b| {
        b.iter(|| admit(&counter))
    });
    let second = Duration::from_secs(1);
    let millisecond = Duration::from_millis(1);
    let quotas = [
        (
            "stored_gcra_fast_clock",
            Quota::gcra(CELLS_PER_SECOND, second).and_then(|q| q.with_burst(CELLS_PER_SECOND)),
        ),
        (
            "stored_fixed_window_fast_clock",
            Quota::fixed_window(u32::MAX, millisecond),
        ),
        (
            "stored_sliding_window_counter_fast_clock",
            Quota::sliding_window_counter(u32::MAX, millisecond),
        ),
    ];
    for (name, quota) in quotas {
        let limiter = stored(quota.expect("valid configuration"), Clock::fast());
        group.bench_function(name, |b| b.iter(|| admit(&limiter)));
    }
    group.finish();
}

/// Our concurrency layer outside a rate layer of the sliding log on `clock`.
fn ours(clock: Clock) -> impl Service<(), Error = tower_limits::error::BoxError> {
    ours_stack(sliding_window(clock))
}

fn stack(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    // tower's RateLimit creates its timer in `new`, which needs a runtime.
    let _entered = runtime.enter();
    let mut group = c.benchmark_group("stack");

    let mut bare = Noop;
    group.bench_function("bare", |b| b.iter(|| ready_call(&mut bare)));

    let mut tower_pair = tower_stack();
    group.bench_function("tower_concurrency_rate", |b| {
        b.iter(|| ready_call(&mut tower_pair))
    });

    let mut ours_fast = ours(Clock::fast());
    group.bench_function("ours_concurrency_rate_fast_clock", |b| {
        b.iter(|| ready_call(&mut ours_fast))
    });
    let mut ours_tokio = ours(Clock::tokio());
    group.bench_function("ours_concurrency_rate_tokio_clock", |b| {
        b.iter(|| ready_call(&mut ours_tokio))
    });

    // One layer at a time.
    let mut tower_concurrency = tower::limit::ConcurrencyLimit::new(Noop, UNBOUNDED as usize);
    group.bench_function("tower_concurrency", |b| {
        b.iter(|| ready_call(&mut tower_concurrency))
    });
    let mut ours_concurrency = LimitLayer::new(concurrency()).layer(Noop);
    group.bench_function("ours_concurrency", |b| {
        b.iter(|| ready_call(&mut ours_concurrency))
    });
    let mut ours_rate = LimitLayer::new(sliding_window(Clock::fast())).layer(Noop);
    group.bench_function("ours_rate_fast_clock", |b| {
        b.iter(|| ready_call(&mut ours_rate))
    });
    // GCRA as the rate: one atomic word, where the sliding log above keeps
    // every start of its window.
    let mut ours_gcra = ours_stack(gcra(Clock::fast()));
    group.bench_function("ours_concurrency_gcra_fast_clock", |b| {
        b.iter(|| ready_call(&mut ours_gcra))
    });
    group.finish();
}

fn keyed(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed");
    for keys in [1_u64, 1_000, 100_000] {
        let governor = governor_keyed(keys);
        let template = gcra(Clock::fast());
        let ours = KeyedLimiter::builder(move |_: &u64| template.fresh())
            .clock(Clock::fast())
            .max_keys(2 * keys as usize)
            .build()
            .expect("valid configuration");
        for key in 0..keys {
            ours.limiter(&key).unwrap();
        }
        let inline = inline_keyed(keys);
        let mut key = 0;
        group.bench_function(BenchmarkId::new("governor_check_key", keys), |b| {
            b.iter(|| {
                key = (key + 1) % keys;
                black_box(governor.check_key(&key)).is_ok()
            })
        });
        group.bench_function(BenchmarkId::new("gcra_fast_clock", keys), |b| {
            b.iter(|| {
                key = (key + 1) % keys;
                match ours.try_acquire(&key).into_ready() {
                    Ok(Ok(Admission::Granted(permit))) => drop(black_box(permit)),
                    other => panic!("benchmark limiter must admit, got {other:?}"),
                }
            })
        });
        group.bench_function(BenchmarkId::new("gcra_inline_fast_clock", keys), |b| {
            b.iter(|| {
                key = (key + 1) % keys;
                match inline.try_acquire(&key).into_ready() {
                    Ok(Ok(Admission::Granted(permit))) => drop(black_box(permit)),
                    other => panic!("benchmark limiter must admit, got {other:?}"),
                }
            })
        });
    }
    group.finish();
}

/// The time sources. Decisions read the counter (`quanta_now`); an
/// `Instant` from the fast clock (`clock_fast_now`) is read from the system
/// clock, so that it agrees with tokio's timers however far the counter has
/// drifted: limiters make one only for a denial or a snapshot.
fn clock(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock");
    group.bench_function("std_instant_now", |b| b.iter(std::time::Instant::now));
    let quanta = quanta::Clock::new();
    group.bench_function("quanta_now", |b| b.iter(|| quanta.now()));
    let fast = Clock::fast();
    group.bench_function("clock_fast_now", |b| b.iter(|| fast.now()));
    let tokio_clock = Clock::tokio();
    group.bench_function("clock_tokio_now", |b| b.iter(|| tokio_clock.now()));
    group.finish();
}

/// An observed layer beside the same layer unobserved: what counting,
/// `tracing` (no subscriber) and `metrics` (no recorder, when the feature
/// is on) cost per decision.
fn observe(c: &mut Criterion) {
    let mut group = c.benchmark_group("observe");
    let mut plain = LimitLayer::new(concurrency()).layer(Noop);
    group.bench_function("concurrency_layer", |b| b.iter(|| ready_call(&mut plain)));
    let mut named = LimitLayer::new(concurrency()).name("bench").layer(Noop);
    group.bench_function("concurrency_layer_observed", |b| {
        b.iter(|| ready_call(&mut named))
    });
    group.finish();
}

/// Runs `decide` `iterations` times on each of `threads` OS threads, all
/// started together; the slowest thread's time, so that a decision's time
/// includes what the threads cost each other on one limiter.
fn on_threads(threads: usize, iterations: u64, decide: &(impl Fn() + Sync)) -> Duration {
    let barrier = Barrier::new(threads);
    std::thread::scope(|scope| {
        let runs: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    let start = std::time::Instant::now();
                    (0..iterations).for_each(|_| decide());
                    start.elapsed()
                })
            })
            .collect();
        runs.into_iter()
            .map(|run| run.join().expect("a benchmark thread"))
            .max()
            .unwrap_or_default()
    })
}

/// One limiter shared by 1 and 2 OS threads deciding at once, beside
/// tokio's `Semaphore::try_acquire` and `try_acquire_owned` (for the
/// concurrency limiter, whose permits are owned) and governor's `check()`
/// (for GCRA).
fn threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("threads");
    for threads in [1, 2] {
        let semaphore = tokio::sync::Semaphore::new(UNBOUNDED as usize);
        let take = || drop(black_box(semaphore.try_acquire().expect("room")));
        group.bench_function(BenchmarkId::new("tokio_semaphore", threads), |b| {
            b.iter_custom(|iterations| on_threads(threads, iterations, &take))
        });
        // Owned, like our permits: an `Arc` clone and drop per call too.
        let owned = std::sync::Arc::new(tokio::sync::Semaphore::new(UNBOUNDED as usize));
        let take_owned = || {
            let permit = std::sync::Arc::clone(&owned).try_acquire_owned();
            drop(black_box(permit.expect("room")));
        };
        group.bench_function(BenchmarkId::new("tokio_semaphore_owned", threads), |b| {
            b.iter_custom(|iterations| on_threads(threads, iterations, &take_owned))
        });
        let limiter = concurrency();
        group.bench_function(BenchmarkId::new("concurrency", threads), |b| {
            b.iter_custom(|iterations| on_threads(threads, iterations, &|| admit(&limiter)))
        });
        let quota = governor::Quota::per_second(NonZeroU32::MAX);
        let governor = governor::RateLimiter::direct(quota);
        let check = || assert!(black_box(governor.check()).is_ok());
        group.bench_function(BenchmarkId::new("governor_check", threads), |b| {
            b.iter_custom(|iterations| on_threads(threads, iterations, &check))
        });
        let gcra = gcra(Clock::fast());
        group.bench_function(BenchmarkId::new("gcra_fast_clock", threads), |b| {
            b.iter_custom(|iterations| on_threads(threads, iterations, &|| admit(&gcra)))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = decision, stack, keyed, clock, observe, threads
}
criterion_main!(benches);
