//! The hot paths beside their peers, measured in turns: each round times a
//! burst of calls through ours and a burst through the peer's, one right
//! after the other (which goes first alternates), and the result is the
//! median of the rounds' ratios, with the middle half of them.
//!
//! `limiters` (criterion) measures each path for seconds on end, one after
//! the other, so on a shared machine a neighbour's burst lands on one path
//! and not on its peer: the same binary gave the concurrency layer 32.7 ns
//! and 41.5 ns in two runs a minute apart. Here both sides of a ratio are
//! timed within a fraction of a millisecond of each other, so what slows the
//! machine slows both.
//!
//! Within a process the middle half of a pair's ratios is narrow (about
//! ±2% on a shared 2-core VM); between processes a ratio sometimes settles
//! in one of two places (the concurrency + GCRA stack gave 1.01 in one
//! process and 1.30 in the next), so compare medians over several runs,
//! pinned to one CPU (`taskset -c 1`). A path paired with a copy of itself
//! gives 1.00.
//!
//! Run with `cargo bench -p integration --bench paired`; arguments select
//! the pairs whose names contain them (`-- stack` runs the stacks).

#![allow(missing_docs)]

mod common;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Instant;

use common::{
    Noop, admit, concurrency, gcra, gcra_paced, governor_keyed, inline_keyed, ours_stack,
    ready_call, sliding_window, tower_stack,
};
use tower::Layer;
use tower_limits::clock::Clock;
use tower_limits::limiter::Admission;
use tower_limits::{LimitLayer, RateLimiter};

/// Calls per burst: a burst takes tens of microseconds, well above the
/// clock's resolution and below a scheduler's time slice.
const BURST: u32 = 1_000;

/// Timed rounds per pair (odd, for a middle one), after as many untimed.
const ROUNDS: usize = 1_001;

/// Keys of the keyed pair.
const KEYS: u64 = 100_000;

/// Nanoseconds per call of one burst of `call`.
fn burst(call: &mut impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..BURST {
        call();
    }
    start.elapsed().as_nanos() as f64 / f64::from(BURST)
}

/// The value at `fraction` of `values`, sorted.
fn quantile(values: &mut [f64], fraction: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * fraction).round() as usize]
}

/// Times `ours` and `peer` in turns and prints the medians and the ratio.
fn pair(name: &str, peer_name: &str, mut ours: impl FnMut(), mut peer: impl FnMut()) {
    for _ in 0..ROUNDS {
        burst(&mut ours);
        burst(&mut peer);
    }
    let (mut ours_ns, mut peer_ns, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let (o, p) = if round % 2 == 0 {
            let o = burst(&mut ours);
            (o, burst(&mut peer))
        } else {
            let p = burst(&mut peer);
            (burst(&mut ours), p)
        };
        ours_ns.push(o);
        peer_ns.push(p);
        ratios.push(o / p);
    }
    println!(
        "{name:<24} ours {:>6.1} ns   {peer_name:<40} {:>6.1} ns   ratio {:.2} (middle half {:.2}-{:.2})",
        quantile(&mut ours_ns, 0.5),
        quantile(&mut peer_ns, 0.5),
        quantile(&mut ratios, 0.5),
        quantile(&mut ratios, 0.25),
        quantile(&mut ratios, 0.75),
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    // tower's `RateLimit` makes its timer in `new`.
    let _entered = runtime.enter();
    let chosen: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let runs = |name: &str| chosen.is_empty() || chosen.iter().any(|c| name.contains(c.as_str()));

    let beside_governor = |name: &str, ours: RateLimiter| {
        let governor = governor::RateLimiter::direct(governor::Quota::per_second(NonZeroU32::MAX));
        pair(
            name,
            "governor check",
            || admit(&ours),
            || assert!(black_box(governor.check()).is_ok()),
        );
    };
    if runs("decision_gcra") {
        beside_governor("decision_gcra", gcra(Clock::fast()));
    }
    if runs("decision_gcra_paced") {
        beside_governor("decision_gcra_paced", gcra_paced(Clock::fast()));
    }
    if runs("concurrency_limiter") {
        let ours = concurrency();
        let semaphore = tokio::sync::Semaphore::new(common::UNBOUNDED as usize);
        pair(
            "concurrency_limiter",
            "tokio Semaphore::try_acquire",
            || admit(&ours),
            || drop(black_box(semaphore.try_acquire().expect("room"))),
        );
    }
    if runs("concurrency_layer") {
        let mut ours = LimitLayer::new(concurrency()).layer(Noop);
        let mut tower = tower::limit::ConcurrencyLimit::new(Noop, common::UNBOUNDED as usize);
        pair(
            "concurrency_layer",
            "tower ConcurrencyLimit",
            || ready_call(&mut ours),
            || ready_call(&mut tower),
        );
    }
    if runs("stack_gcra") {
        let mut ours = ours_stack(gcra(Clock::fast()));
        let mut tower = tower_stack();
        pair(
            "stack_gcra",
            "tower ConcurrencyLimit + RateLimit",
            || ready_call(&mut ours),
            || ready_call(&mut tower),
        );
    }
    if runs("stack_sliding_log") {
        let mut ours = ours_stack(sliding_window(Clock::fast()));
        let mut gcra_stack = ours_stack(gcra(Clock::fast()));
        pair(
            "stack_sliding_log",
            "ours, GCRA as the rate",
            || ready_call(&mut ours),
            || ready_call(&mut gcra_stack),
        );
    }
    if runs("keyed_inline_100k") {
        let (ours, governor) = (inline_keyed(KEYS), governor_keyed(KEYS));
        let (mut our_key, mut governor_key) = (0, 0);
        pair(
            "keyed_inline_100k",
            "governor check_key",
            || {
                our_key = (our_key + 1) % KEYS;
                match ours.try_acquire(&our_key).into_ready() {
                    Ok(Ok(Admission::Granted(permit))) => drop(black_box(permit)),
                    other => panic!("benchmark limiter must admit, got {other:?}"),
                }
            },
            || {
                governor_key = (governor_key + 1) % KEYS;
                assert!(black_box(governor.check_key(&governor_key)).is_ok());
            },
        );
    }
}
