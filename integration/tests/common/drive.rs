//! Drives an adaptive client with its defaults against an upstream of
//! [`super::upstreams`] (from one process, or from four sharing the curve
//! through Redis), and reads what the upstream saw: served and refused, per
//! second, and the figures of issue 21 (share of the limit over the whole
//! run and from 5 s on, refusals, convergence).

use std::fmt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
use tower_limits::error::BoxError;
use tower_limits::http::FeedbackLayer;
use tower_limits::{AdaptiveRateLimiter, LimitLayer, Limiter, Rate};

use super::nginx::{Logged, unix_now};
use super::upstreams::{Kind, Upstream};

/// How long the rate must hold 90 % of the limit for the client to have
/// converged.
const CONVERGED: f64 = 3.0;
/// Callers in all, shared out between the processes.
pub(crate) const CALLERS: usize = 50;
/// The client starts this many times too fast.
pub(crate) const START_FACTOR: u32 = 5;
/// Processes in a fleet sharing one curve.
pub(crate) const PROCESSES: usize = 4;
/// The environment variable a fleet's worker finds its job in:
/// `<url> <redis prefix> <start rate> <seconds>`.
pub(crate) const WORKER_VAR: &str = "TOWER_LIMITS_ADAPTIVE_WORKER";

/// Set (to anything) to print `STALL` lines (see [`watch`]): for the
/// unexplained stalls of issue 21, which the upstream sees as seconds
/// without a request or a refusal.
pub(crate) const WATCHDOG_VAR: &str = "TOWER_LIMITS_ADAPTIVE_WATCHDOG";

/// Seconds of the one-process client's
/// [`hold`](tower_limits::limiters::AdaptiveRateLimiterBuilder::hold)
/// instead of the default, when set: to measure the option (the tests
/// never set it).
pub(crate) const HOLD_VAR: &str = "TOWER_LIMITS_ADAPTIVE_HOLD";

/// Sends requests from `callers` tasks through the feedback and limit
/// layers until stopped; counts the errors (every request ends in a
/// response or an error).
pub(crate) struct Driver {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    failed: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// How long a client may let no call through, while its limiter would admit
/// one, before it is a stall: longer than a fleet worker's spacing (four
/// processes at 20/s space their calls 200 ms apart).
const STALL: Duration = Duration::from_millis(300);

/// Prints a `STALL` line, every 100 ms, while no call was let through
/// (`sent` did not move) for [`STALL`] or more although the limiter says
/// one may go now, until `stop`: the stalls of issue 21 that no refusal
/// explains. (A limiter holding calls back, as after a refusal, is not one;
/// nor, in a fleet, is a process kept quiet while the others take the
/// slots of the shared rate: there, a stall is every worker quiet at once.)
async fn watch<L: Limiter>(limiter: L, sent: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    let start = tokio::time::Instant::now();
    let (mut last, mut quiet_since) = (0, start);
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = tokio::time::Instant::now();
        let count = sent.load(Ordering::Relaxed);
        if count != last {
            (last, quiet_since) = (count, now);
            continue;
        }
        let Ok(next) = limiter.next_available_time().await else {
            continue;
        };
        if now - quiet_since >= STALL && next <= now + Duration::from_millis(10) {
            println!(
                "STALL at {:.1} s: nothing let through for {} ms ({count} sent), \
                 though the limiter would admit a call",
                (now - start).as_secs_f64(),
                (now - quiet_since).as_millis(),
            );
        }
    }
}

/// The tenth of a second of a `STALL` line of [`watch`].
fn stall_tick(line: &str) -> Option<u64> {
    let seconds = line.strip_prefix("STALL at ")?.split_once(" s:")?.0;
    let seconds: f64 = seconds.parse().ok()?;
    Some((seconds * 10.0).round() as u64)
}

/// Prints a `FLEET STALL` line for each tenth of a second in which every
/// worker of a fleet was quiet (`quiet`: each worker's `STALL` ticks,
/// within a tick of each other, as the workers start a little apart):
/// the stalls that matter. A worker quiet alone is one the others kept
/// from the shared rate; those are only counted.
fn report_fleet_stalls(quiet: &[std::collections::BTreeSet<u64>]) {
    let Some(first) = quiet.first() else {
        return;
    };
    let near = |ticks: &std::collections::BTreeSet<u64>, tick: u64| {
        ticks
            .range(tick.saturating_sub(1)..=tick + 1)
            .next()
            .is_some()
    };
    for &tick in first {
        if quiet.iter().all(|ticks| near(ticks, tick)) {
            println!(
                "FLEET STALL at {:.1} s: every worker let nothing through for 300 ms \
                 or more, though each one's limiter would admit a call",
                tick as f64 / 10.0
            );
        }
    }
    let alone: usize = quiet.iter().map(|ticks| ticks.len()).sum();
    if alone > 0 {
        println!(
            "({alone} ticks in which one worker was quiet: in a fleet, the others \
             may have taken the shared rate)"
        );
    }
}

impl Driver {
    /// `callers` callers paced by `limiter`, reporting to `feedback`.
    pub(crate) fn through<L: Limiter + Clone>(
        url: &str,
        callers: usize,
        feedback: FeedbackLayer,
        limiter: L,
    ) -> Self {
        let http = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        let upstream = service_fn(move |request: Request<Empty<Bytes>>| {
            let http = http.clone();
            async move {
                let (parts, body) = http.request(request).await?.into_parts();
                body.collect().await?;
                Ok::<_, BoxError>(Response::from_parts(parts, ()))
            }
        });
        let client = ServiceBuilder::new()
            .layer(feedback)
            .layer(LimitLayer::new(limiter.clone()))
            .service(upstream);
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(Mutex::new(Vec::new()));
        let sent = Arc::new(AtomicU64::new(0));
        if std::env::var_os(WATCHDOG_VAR).is_some() {
            tokio::spawn(watch(limiter.clone(), sent.clone(), stop.clone()));
        }
        let tasks = (0..callers)
            .map(|_| {
                let mut client = client.clone();
                let (stop, answered, failed) = (stop.clone(), answered.clone(), failed.clone());
                let (url, sent) = (url.to_owned(), sent.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let request = Request::get(&url).body(Empty::new()).unwrap();
                        let outcome = match client.ready().await {
                            Ok(ready) => {
                                sent.fetch_add(1, Ordering::Relaxed);
                                ready.call(request).await.map(drop)
                            }
                            Err(error) => Err(error),
                        };
                        match outcome {
                            Ok(()) => drop(answered.fetch_add(1, Ordering::Relaxed)),
                            Err(error) => failed.lock().unwrap().push(error.to_string()),
                        }
                    }
                })
            })
            .collect();
        Self {
            stop,
            answered,
            failed,
            tasks,
        }
    }

    /// An adaptive client with the defaults, from `start` a second (with
    /// another [`hold`](tower_limits::limiters::AdaptiveRateLimiterBuilder::hold)
    /// when [`HOLD_VAR`] says so, to measure that option).
    pub(crate) fn adaptive(url: &str, callers: usize, start: u32) -> Self {
        let mut builder = AdaptiveRateLimiter::builder(Rate::per_second(start).unwrap());
        if let Some(seconds) = std::env::var(HOLD_VAR).ok().and_then(|s| s.parse().ok()) {
            builder = builder.hold(Duration::from_secs_f64(seconds));
        }
        let limiter = builder.build().unwrap();
        Self::through(
            url,
            callers,
            FeedbackLayer::adaptive(limiter.clone()),
            limiter,
        )
    }

    /// Stops the callers; the responses they got, and the errors.
    pub(crate) async fn stop(self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("a caller is stuck")
                .expect("a caller panicked");
        }
        let failed = std::mem::take(&mut *self.failed.lock().unwrap());
        (self.answered.load(Ordering::Relaxed), failed)
    }
}

/// How a run is made.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    pub(crate) kind: Kind,
    /// The upstream's first limit, a second.
    pub(crate) rate: u32,
    /// 1, or [`PROCESSES`] sharing through Redis.
    pub(crate) processes: usize,
    /// How long each limit lasts (three limits for [`Kind::Changing`]).
    pub(crate) seconds: u32,
}

impl Plan {
    /// The limits in force, each for `seconds`: R, or R -> 2R -> R/2.
    pub(crate) fn limits(&self) -> Vec<u32> {
        match self.kind {
            Kind::Changing => vec![self.rate, self.rate * 2, self.rate / 2],
            _ => vec![self.rate],
        }
    }
}

/// What the upstream saw in a run: every request, from `start`.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) plan: Plan,
    pub(crate) start: f64,
    pub(crate) log: Vec<Logged>,
    /// Requests that ended in an error at the client.
    pub(crate) failed: Vec<String>,
}

/// Runs `plan` against a new upstream; `None` if the upstream (nginx) or
/// Redis is not there (the test said it was skipped). `worker` makes the
/// command that starts one worker process of a fleet, with its job in the
/// environment (`WORKER_VAR`).
pub(crate) async fn run(plan: Plan, worker: impl Fn() -> Command) -> Option<Run> {
    let upstream = Upstream::start(plan.kind, plan.rate).await?;
    let url = upstream.url();
    let start = unix_now();
    let total = plan.seconds * plan.limits().len() as u32;
    let first = plan.rate * START_FACTOR;
    let (fleet, driver) = if plan.processes == 1 {
        (None, Some(Driver::adaptive(&url, CALLERS, first)))
    } else {
        let Ok(redis) = std::env::var("REDIS_URL") else {
            super::skip("a fleet sharing a curve", "REDIS_URL is not set");
            return None;
        };
        let prefix = format!("adaptive-fleet-{}-{start}", std::process::id());
        let job = format!("{url} {prefix}: {first} {total}");
        let workers: Vec<_> = (0..plan.processes)
            .map(|_| {
                worker()
                    .env(WORKER_VAR, &job)
                    .env("REDIS_URL", &redis)
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        (Some(workers), None)
    };
    for limit in plan.limits() {
        if limit != plan.rate || plan.kind == Kind::Changing {
            upstream.set_rate(limit);
        }
        tokio::time::sleep(Duration::from_secs(u64::from(plan.seconds))).await;
    }
    let mut failed = Vec::new();
    if let Some(driver) = driver {
        failed = driver.stop().await.1;
    }
    let mut quiet = Vec::new();
    for worker in fleet.into_iter().flatten() {
        let output = tokio::task::spawn_blocking(|| worker.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let said = String::from_utf8_lossy(&output.stdout);
        // A worker's watchdog (see `WATCHDOG_VAR`) speaks through its parent.
        quiet.push(said.lines().filter_map(stall_tick).collect());
        failed.extend(
            said.lines()
                .filter_map(|line| line.strip_prefix("failed: "))
                .map(str::to_owned),
        );
        assert!(output.status.success(), "a worker failed:\n{said}");
    }
    report_fleet_stalls(&quiet);
    Some(Run {
        plan,
        start,
        log: upstream.log(),
        failed,
    })
}

/// A worker of a fleet, if this process is one: `CALLERS / PROCESSES`
/// callers pacing through a curve shared in Redis, for the job's seconds.
/// Prints each error as `failed: <error>`.
#[cfg(feature = "redis")]
pub(crate) async fn work() -> bool {
    let Ok(job) = std::env::var(WORKER_VAR) else {
        return false;
    };
    let words: Vec<&str> = job.split(' ').collect();
    let [url, prefix, start, seconds] = words[..] else {
        panic!("a worker's job: {job}");
    };
    let redis = std::env::var("REDIS_URL").unwrap();
    let store = tower_limits::store::RedisStore::builder(redis)
        .prefix(prefix)
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let limiter = AdaptiveRateLimiter::builder(Rate::per_second(start.parse().unwrap()).unwrap())
        .build_shared(store, "upstream")
        .unwrap();
    let feedback = FeedbackLayer::adaptive(limiter.clone());
    let driver = Driver::through(url, CALLERS / PROCESSES, feedback, limiter.clone());
    tokio::time::sleep(Duration::from_secs(seconds.parse().unwrap())).await;
    let (_, failed) = driver.stop().await;
    for error in failed {
        println!("failed: {error}");
    }
    true
}

/// What the upstream served and refused from `from` to `to` (seconds into
/// the run).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Window {
    pub(crate) served: usize,
    pub(crate) refused: usize,
    pub(crate) seconds: f64,
}

impl Window {
    pub(crate) fn rate(&self) -> f64 {
        self.served as f64 / self.seconds
    }
}

impl Run {
    pub(crate) fn window(&self, from: f64, to: f64) -> Window {
        let (from, to) = (self.start + from, self.start + to);
        let mut window = Window {
            served: 0,
            refused: 0,
            seconds: to - from,
        };
        for entry in self.log.iter().filter(|e| e.at >= from && e.at < to) {
            match entry.status {
                200 => window.served += 1,
                429 => window.refused += 1,
                other => panic!("the upstream answered {other}"),
            }
        }
        window
    }

    /// The figures for each limit in force: from its start, and from 5 s
    /// after.
    pub(crate) fn phases(&self) -> Vec<Figures> {
        let seconds = f64::from(self.plan.seconds);
        self.plan
            .limits()
            .into_iter()
            .enumerate()
            .map(|(index, limit)| {
                let from = index as f64 * seconds;
                self.figures(limit, from, from + seconds)
            })
            .collect()
    }

    fn figures(&self, limit: u32, from: f64, to: f64) -> Figures {
        let limit = f64::from(limit);
        let whole = self.window(from, to);
        let settled = self.window(from + 5.0, to);
        let refusals_per_10s = (0..)
            .map(|n| from + 5.0 + f64::from(n))
            .take_while(|at| at + 10.0 <= to)
            .map(|at| self.window(at, at + 10.0).refused)
            .max()
            .unwrap_or(settled.refused);
        let to_90 = (0..)
            .map(|n| from + f64::from(n) * 0.1)
            .take_while(|at| at + CONVERGED <= to)
            .find(|at| self.window(*at, at + CONVERGED).rate() >= 0.9 * limit)
            .map(|at| at - from);
        let refused_before_90 = to_90.map(|at| self.window(from, from + at).refused);
        Figures {
            limit,
            whole_share: whole.rate() / limit,
            settled_share: settled.rate() / limit,
            requests: whole.served + whole.refused,
            refused: whole.refused,
            settled_refused: settled.refused,
            refusals_per_10s,
            to_90,
            refused_before_90,
        }
    }

    /// Served/refused, second by second.
    pub(crate) fn series(&self) -> String {
        let total = self.plan.seconds * self.plan.limits().len() as u32;
        (0..total)
            .map(|s| {
                let w = self.window(f64::from(s), f64::from(s) + 1.0);
                format!("{}/{}", w.served, w.refused)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The figures of one limit in force.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Figures {
    pub(crate) limit: f64,
    /// Served over the whole phase, as a share of the limit.
    pub(crate) whole_share: f64,
    /// Served from 5 s on, as a share of the limit.
    pub(crate) settled_share: f64,
    pub(crate) requests: usize,
    pub(crate) refused: usize,
    /// Refused from 5 s on.
    pub(crate) settled_refused: usize,
    /// The most refused in any 10 s from 5 s on.
    pub(crate) refusals_per_10s: usize,
    /// Seconds until the upstream served 90 % of the limit for
    /// [`CONVERGED`].
    pub(crate) to_90: Option<f64>,
    /// Refused until then.
    pub(crate) refused_before_90: Option<usize>,
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let to_90 = self.to_90.map_or("never".into(), |s| format!("{s:.1} s"));
        write!(
            f,
            "limit {:>3}/s | whole {:>5.1}% | from 5 s {:>5.1}% | refused {:>3} of {:>4} ({:.1}%) | \
             after 5 s {:>2}, most in 10 s {:>2} | 90% from {to_90}, {} refused before",
            self.limit,
            self.whole_share * 100.0,
            self.settled_share * 100.0,
            self.refused,
            self.requests,
            self.refused as f64 * 100.0 / self.requests.max(1) as f64,
            self.settled_refused,
            self.refusals_per_10s,
            self.refused_before_90.unwrap_or(0),
        )
    }
}
