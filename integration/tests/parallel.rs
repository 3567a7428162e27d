//! Every limiter under parallel callers for three seconds: two OS threads
//! that ask synchronously over and over (`try_acquire` answered at once),
//! and tasks on a two-worker tokio runtime that call through a
//! `LimitLayer`, all at once on one limit.
//!
//! A `Recorder` around the limiter notes each grant's span (the limiter
//! decided somewhere inside it) and its permit's token (a window's index);
//! a sliding window is charged only with grants whose whole span lies
//! inside it, so preemption can widen a span but never fake a violation.
//! Each check also asks that the busiest window reach the bound (or most of
//! it), so the test has teeth. The bounds are in `common::cases`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use common::cases::{self, Case};
use common::stress::{DEADLINE, Recorder, limited};
use tokio::runtime::{Handle, Runtime};
use tower::{Service, ServiceExt};
use tower_limits::Limiter;
use tower_limits::error::BoxError;
use tower_limits::limiter::Admission;

/// How long each limiter is driven.
const RUN: Duration = Duration::from_secs(3);
/// OS threads asking synchronously.
const THREADS: usize = 2;
/// Tasks on the runtime, calling through one layer.
const TASKS: usize = 8;

/// Drives the case's limiter for [`RUN`] and checks its bounds.
fn hammer(case: Case) {
    let limiter = Recorder::new((case.make)());
    let runtime = two_workers();
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (limiter, stop) = (limiter.clone(), Arc::clone(&stop));
            let runtime = runtime.handle().clone();
            thread::spawn(move || ask_synchronously(&limiter, &runtime, &stop, case))
        })
        .collect();
    let service = limited(limiter.clone(), case.hold);
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| runtime.spawn(call_through_layer(service.clone(), Arc::clone(&stop), case)))
        .collect();
    thread::sleep(RUN);
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().expect("a synchronous caller panicked");
    }
    runtime.block_on(async {
        for task in tasks {
            tokio::time::timeout(DEADLINE, task)
                .await
                .expect("a caller through the layer is stuck")
                .expect("a caller through the layer panicked");
        }
    });
    case.check_grants(&limiter);
    assert_eq!(limiter.running.now(), 0, "calls still counted as running");
}

fn two_workers() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// An OS thread's loop: ask, answered at once where the limiter can; hold a
/// grant for the case's hold (a blocking sleep); on a denial ask again at
/// once, so that decisions crowd every instant a window or a slot opens.
fn ask_synchronously<L: Limiter>(
    limiter: &Recorder<L>,
    runtime: &Handle,
    stop: &AtomicBool,
    case: Case,
) {
    let _context = runtime.enter();
    while !stop.load(Ordering::Relaxed) {
        let answer = match limiter.try_acquire().into_ready() {
            Ok(answer) => answer,
            Err(pending) => runtime.block_on(pending),
        };
        match answer {
            Ok(Admission::Granted(permit)) => {
                let call = limiter.running.enter();
                if !case.hold.is_zero() {
                    thread::sleep(case.hold);
                }
                drop(call);
                drop(permit);
            }
            Ok(Admission::Denied(_)) => thread::yield_now(),
            Err(error) if case.may_refuse => drop(error),
            Err(error) => panic!("an in-memory limiter failed: {error}"),
        }
    }
}

async fn call_through_layer<S>(mut service: S, stop: Arc<AtomicBool>, case: Case)
where
    S: Service<(), Response = (), Error = BoxError>,
{
    while !stop.load(Ordering::Relaxed) {
        let outcome = match service.ready().await {
            Ok(ready) => ready.call(()).await,
            Err(error) => Err(error),
        };
        match outcome {
            Ok(()) => {}
            Err(_) if case.may_refuse => tokio::task::yield_now().await,
            Err(error) => panic!("the layer failed: {error}"),
        }
    }
}

#[test]
fn concurrency_limiter() {
    hammer(cases::CONCURRENCY);
}

#[test]
fn sliding_log() {
    hammer(cases::SLIDING_LOG);
}

#[test]
fn sliding_log_with_backoff() {
    hammer(cases::SLIDING_LOG_WITH_BACKOFF);
}

#[test]
fn delay_limiter() {
    hammer(cases::DELAY);
}

#[test]
fn evenly_spaced_limiter() {
    hammer(cases::EVENLY_SPACED);
}

#[test]
fn gcra_limiter() {
    hammer(cases::GCRA);
}

#[test]
fn token_bucket_limiter() {
    hammer(cases::TOKEN_BUCKET);
}

#[test]
fn leaky_bucket_limiter() {
    hammer(cases::LEAKY_BUCKET);
}

/// A caller with a stale clock reading used to write its old window back
/// over the newer window's count (twice the limit in one window).
#[test]
fn fixed_window_limiter() {
    hammer(cases::FIXED_WINDOW);
}

#[test]
fn sliding_window_counter_limiter() {
    hammer(cases::SLIDING_WINDOW_COUNTER);
}

#[test]
fn composite_of_concurrency_and_gcra() {
    hammer(cases::COMPOSITE);
}

#[test]
fn keyed_limiter() {
    hammer(cases::KEYED);
}

#[test]
fn shared_gcra_in_the_memory_store() {
    hammer(cases::SHARED_GCRA);
}

#[test]
fn shared_fixed_window_behind_failover() {
    hammer(cases::SHARED_FIXED_WINDOW_BEHIND_FAILOVER);
}

#[test]
fn leased_concurrency_in_the_memory_store() {
    hammer(cases::LEASED_CONCURRENCY);
}

#[test]
fn batched_limiter_in_the_memory_store() {
    hammer(cases::BATCHED);
}
