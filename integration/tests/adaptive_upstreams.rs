//! An adaptive client with its defaults
//! (`AdaptiveRateLimiter::builder(start).build()` and
//! `FeedbackLayer::adaptive`), 50 callers starting at five times the limit,
//! against every kind of upstream of `common::upstreams`, all on loopback,
//! from one process and from four sharing the curve through Redis. What
//! counts is what the upstream saw.
//!
//! These run on real time, one at a time (each measures a feedback loop;
//! another test's callers on the same cores would be part of it), about
//! two minutes in all. Their bounds on throughput are lenient, so that
//! they pass on a busy CI machine; the bounds on what must never happen
//! (a refusal after a stated quota, an error) are strict. The figures
//! quoted in the README come from `examples/adaptive_upstreams.rs`.

mod common;

use std::process::Command;

use common::drive::{self, Figures, PROCESSES, Plan, Run};
use common::upstreams::Kind;

/// One run at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The limit of every upstream, a second.
const LIMIT: u32 = 20;

/// A worker process of the fleet tests: only when spawned by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_process() {
    drive::work().await;
}

/// This test binary again, as one worker of a fleet.
fn worker() -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args([
        "worker_process",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ]);
    command
}

/// Runs `kind` for `seconds` (a limit) from `processes`; prints the
/// series and figures; `None` if the upstream or Redis is not there.
async fn measure(kind: Kind, processes: usize, seconds: u32) -> Option<(Run, Vec<Figures>)> {
    if std::env::var(drive::WORKER_VAR).is_ok() {
        return None;
    }
    let _alone = SERIAL.lock().await;
    let plan = Plan {
        kind,
        rate: LIMIT,
        processes,
        seconds,
    };
    let run = drive::run(plan, worker).await?;
    println!("{} from {processes} process(es):", kind.name());
    println!("  served/refused per second: {}", run.series());
    let figures = run.phases();
    for phase in &figures {
        println!("  {phase}");
    }
    assert_eq!(run.failed, Vec::<String>::new(), "requests that failed");
    Some((run, figures))
}

/// The bounds every run against a fixed limit keeps, even on a busy
/// machine: from 5 s on at least 80 % of the limit, at most 5 % of the
/// requests refused, and the client converged (90 % of the limit in a
/// second) within 5 s.
fn lenient(figures: &Figures) {
    assert!(figures.settled_share >= 0.8, "{figures}");
    assert!(figures.refused * 20 <= figures.requests, "{figures}");
    assert!(figures.to_90.is_some_and(|s| s <= 5.0), "{figures}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_nodelay_one_process() {
    if let Some((_, figures)) = measure(Kind::NginxNodelay, 1, 20).await {
        lenient(&figures[0]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_queueing_one_process() {
    if let Some((_, figures)) = measure(Kind::NginxQueueing, 1, 20).await {
        lenient(&figures[0]);
    }
}

/// Its `Retry-After: 0` pauses for 100 ms, after which its bucket is not
/// full: the estimates count what it refilled, so the client converges
/// within the first refusals (at most 3) and a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tower_governor_one_process() {
    if let Some((_, figures)) = measure(Kind::Governor, 1, 20).await {
        lenient(&figures[0]);
        assert!(figures[0].refused <= 3, "{}", figures[0]);
        assert!(figures[0].to_90.is_some_and(|s| s <= 3.0), "{}", figures[0]);
    }
}

/// A quota stated in `RateLimit-Policy` is adopted on the first response:
/// the upstream refuses nothing, and serves its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stated_quota_is_adopted_at_once() {
    if let Some((_, figures)) = measure(Kind::Stated, 1, 10).await {
        assert_eq!(figures[0].refused, 0, "{}", figures[0]);
        assert!(figures[0].settled_share >= 0.8, "{}", figures[0]);
    }
}

/// The limit goes R -> 2R -> R/2, 20 s each: the client follows it down
/// at once (at most 3 refusals), and keeps at least the old limit when it
/// doubles (it finds the new one when its 25 s hold ends, 7 s into this
/// phase; in the example's 30 s phases, at its start). After the halving,
/// an estimate that rests on a few calls is measured again before the
/// rate holds: at least 80 % of the new limit from 5 s on. The halving
/// costs at most 3 refusals until the client serves 90 % of the new
/// limit; after that the client probes as it does on any fixed limit, at
/// most once in any 10 s (issue 21's rule for a settled client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_limit_that_changes() {
    let Some((_, figures)) = measure(Kind::Changing, 1, 20).await else {
        return;
    };
    let [first, doubled, halved] = figures[..] else {
        unreachable!("three limits");
    };
    lenient(&first);
    assert!(doubled.settled_share >= 0.45, "{doubled}");
    assert!(doubled.refused <= 3, "{doubled}");
    assert!(halved.settled_share >= 0.8, "{halved}");
    assert!(halved.refused_before_90.is_some_and(|n| n <= 3), "{halved}");
    assert!(halved.refusals_per_10s <= 1, "{halved}");
    assert!(halved.refused * 20 <= halved.requests, "{halved}");
}

/// Four processes, a quarter of the callers each, sharing the curve
/// through Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_nodelay_four_processes_through_redis() {
    if let Some((_, figures)) = measure(Kind::NginxNodelay, PROCESSES, 20).await {
        lenient(&figures[0]);
    }
}
