//! Measures an adaptive client with its defaults
//! (`AdaptiveRateLimiter::builder(start).build()` and
//! `FeedbackLayer::adaptive`), 50 callers starting at five times the
//! limit, against every kind of rate-limited upstream, all on loopback:
//! nginx `limit_req` with `nodelay` and without, tower_governor, a token
//! bucket that states its quota, and one whose limit goes R -> 2R -> R/2;
//! each from one process and from four sharing the curve through Redis.
//! What counts is what the upstream saw.
//!
//! Prints, for each run, what the upstream served/refused second by second
//! and the figures, then a table of them all. The README's figures come
//! from here.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --release -p integration \
//!     --example adaptive_upstreams --features http,redis [-- SECONDS [KIND...]]
//! ```
//!
//! `SECONDS` (default 30) is how long each limit lasts; `KIND`s (default
//! all) are `nodelay`, `queueing`, `governor`, `stated`, `changing`,
//! each optionally suffixed with `:1` or `:4` for one process or four.
//! With `TOWER_LIMITS_ADAPTIVE_WATCHDOG=1` in the environment, a client
//! prints `STALL` lines while it let no call through for 300 ms or more
//! although its limiter would admit one (a stall no refusal explains); a
//! fleet prints `FLEET STALL` lines when every worker was quiet at once,
//! and only counts a worker quiet alone (the others took the shared rate).
//! With `TOWER_LIMITS_ADAPTIVE_HOLD=SECONDS`, the one-process client holds
//! that long instead of the default 25 s (to measure the option).

use std::io::Write;
use std::process::Command;

// The test helpers, of which this example uses a part.
#[allow(dead_code)]
#[path = "../tests/common/drive.rs"]
mod drive;
#[allow(dead_code)]
#[path = "../tests/common/nginx.rs"]
mod nginx;
#[allow(dead_code)]
#[path = "../tests/common/upstreams.rs"]
mod upstreams;

use drive::{PROCESSES, Plan};
use upstreams::Kind;

/// Says that a run was skipped, and why (nginx or Redis missing).
fn skip(what: &str, why: &str) {
    let _ = writeln!(std::io::stdout().lock(), "SKIPPED {what}: {why}");
}

fn kind(name: &str) -> Option<Kind> {
    Kind::ALL.into_iter().find(|kind| {
        let short = match kind {
            Kind::NginxNodelay => "nodelay",
            Kind::NginxQueueing => "queueing",
            Kind::Governor => "governor",
            Kind::Stated => "stated",
            Kind::Changing => "changing",
        };
        short == name
    })
}

/// The runs the arguments ask for: `(kind, processes)`.
fn runs(args: &[String]) -> Vec<(Kind, usize)> {
    if args.is_empty() {
        return Kind::ALL
            .into_iter()
            .flat_map(|kind| [(kind, 1), (kind, PROCESSES)])
            .collect();
    }
    args.iter()
        .flat_map(|arg| {
            let (name, processes) = arg.split_once(':').unwrap_or((arg, ""));
            let kind = kind(name).unwrap_or_else(|| panic!("unknown upstream {name}"));
            let processes: Vec<usize> = match processes {
                "" => vec![1, PROCESSES],
                n => vec![n.parse().expect("a number of processes")],
            };
            processes.into_iter().map(move |p| (kind, p))
        })
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if drive::work().await {
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (seconds, kinds) = match args.first().and_then(|first| first.parse().ok()) {
        Some(seconds) => (seconds, &args[1..]),
        None => (30, &args[..]),
    };
    let mut table = Vec::new();
    for (kind, processes) in runs(kinds) {
        let plan = Plan {
            kind,
            rate: 20,
            processes,
            seconds,
        };
        let worker = || Command::new(std::env::current_exe().unwrap());
        let Some(run) = drive::run(plan, worker).await else {
            continue;
        };
        println!(
            "{} from {processes} process(es), {seconds} s a limit:",
            kind.name()
        );
        println!("  served/refused per second: {}", run.series());
        if !run.failed.is_empty() {
            println!("  client errors: {:?}", run.failed);
        }
        for phase in run.phases() {
            println!("  {phase}");
            table.push(format!("| {} | {processes} | {phase} |", kind.name()));
        }
    }
    println!("\n| upstream | processes | figures |\n|---|---|---|");
    for row in table {
        println!("{row}");
    }
}
