//! Job workers on a Rust job queue: three [apalis] workers drain one Redis
//! queue into a loopback upstream that allows 20 requests a second, through
//! one rate limit that the workers share in Redis.
//!
//! Each worker's tower stack is
//!
//! ```text
//! LimitLayer(LeasedConcurrencyLimiter)   at most N jobs running, in all workers
//!   LimitLayer(RateLimiter GCRA 20/s)  one rate for every worker
//!     the job: one request upstream
//! ```
//!
//! apalis asks the stack's `poll_ready` before it claims a job from Redis,
//! so a worker claims a job only once it holds a concurrency lease and a
//! rate permit (the seed's worker asks `canProceed` before `next`); the
//! permits record the start and the completion around the job.
//!
//! The permit a worker takes in `poll_ready` is counted when taken: a worker
//! whose queue is empty holds it until a job comes, so after an idle spell
//! the first job of each worker may follow the last one more closely than
//! the rate allows (one job per worker at most).
//!
//! When the upstream answers `429` (or `503`), the job fails with a
//! [`RetryableJobError`]: [`reschedule`] pushes the shared limiter back to
//! the upstream's retry instant (every worker pauses; 5 minutes at most,
//! whatever the upstream says) and the job goes back to the queue for that
//! date: as its next attempt, a new task scheduled with an idempotency key
//! (apalis-redis 1.0 retries a failed task at a date of its own, whatever
//! the error says). apalis-redis schedules in whole seconds, so a job runs
//! at the first second boundary after its retry instant, at the back of the
//! queue.
//!
//! Run it with Redis up:
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p integration --example job_worker --features redis,http
//! ```
//!
//! It enqueues 300 jobs (a few of which the upstream refuses once) and
//! prints, each second, what the upstream served and refused and how many
//! jobs were rescheduled.
//!
//! [apalis]: https://docs.rs/apalis

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use apalis::prelude::{
    BackendExt, BoxDynError, Data, Task, TaskBuilder, TaskSink, WorkerBuilder, WorkerError,
};
use apalis_redis::{Config, RedisStorage};
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tower_limits::error::BoxError;
use tower_limits::http::Advice;
use tower_limits::job::{RetryableJobError, reschedule};
use tower_limits::limit::FairLimitLayer;
use tower_limits::store::{Quota, RedisStore};
use tower_limits::{ConcurrencyLimiter, LeasedConcurrencyLimiter, LimitLayer, RateLimiter};

/// Requests the upstream allows in any one-second window.
pub const RATE: u32 = 20;
/// The upstream's window.
pub const WINDOW: Duration = Duration::from_secs(1);

/// A job: one request upstream on behalf of a tenant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Which job (the same across its attempts).
    pub id: u32,
    /// Whose job.
    pub tenant: String,
    /// 0 for the first run; a rescheduled job is the next attempt.
    pub attempt: u32,
    /// A rescheduled job's retry instant (unix milliseconds), else 0.
    pub not_before_ms: u64,
}

impl Job {
    /// The first attempt of job `id`.
    pub fn new(id: u32, tenant: impl Into<String>) -> Self {
        Self {
            id,
            tenant: tenant.into(),
            attempt: 0,
            not_before_ms: 0,
        }
    }
}

/// What a job run came to (stored by apalis as the task's result).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Outcome {
    /// The upstream served it.
    Done,
    /// The upstream refused it: it runs again at this unix millisecond.
    Rescheduled(u64),
}

/// The unix time now, in milliseconds.
pub fn unix_ms() -> u64 {
    millis(SystemTime::now())
}

fn millis(date: SystemTime) -> u64 {
    date.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

// --- The upstream -----------------------------------------------------------

/// How the upstream refuses the first attempt of a job it was told to.
#[derive(Clone, Copy, Debug)]
pub enum Refusal {
    /// `429` with `Retry-After` in whole seconds.
    RetryAfter(u64),
    /// `429` with `X-RateLimit-Reset` this many milliseconds from now, as a
    /// unix time in milliseconds.
    ResetIn(u64),
    /// `503` without a hint: the job goes back at the limiter's next time.
    Unavailable,
}

/// One request the upstream saw.
#[derive(Clone, Debug)]
pub struct Arrival {
    /// The job.
    pub job: u32,
    /// Its attempt.
    pub attempt: u32,
    /// Its tenant.
    pub tenant: String,
    /// The worker that sent it.
    pub worker: String,
    /// The job's retry instant, 0 on a first attempt.
    pub not_before_ms: u64,
    /// When it arrived (unix milliseconds).
    pub at_ms: u64,
    /// The answer: 200, 429 or 503.
    pub status: u16,
    /// Whether the upstream finished it (a 200 sent); false while running,
    /// or if the client went away before the end.
    pub completed: bool,
    /// When a served request ended, completed or abandoned (unix ms).
    pub ended_ms: Option<u64>,
    /// When a refused request was told to retry (unix milliseconds), if it was.
    pub retry_at_ms: Option<u64>,
}

/// A loopback upstream that allows [`RATE`] requests per sliding
/// [`WINDOW`] (answering `429` and `Retry-After` past that), takes `work`
/// to serve a request, and logs every request.
#[derive(Clone, Debug)]
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Arc<UpstreamState>,
}

#[derive(Debug)]
struct UpstreamState {
    rate: usize,
    work: Duration,
    refuse: HashMap<u32, Refusal>,
    served: Mutex<VecDeque<u64>>,
    log: Mutex<Vec<Arrival>>,
    in_flight: AtomicU32,
    /// (unix ms, requests in flight) at each change.
    in_flight_log: Mutex<Vec<(u64, u32)>>,
}

#[derive(Debug, Deserialize)]
struct Request {
    id: u32,
    attempt: u32,
    tenant: String,
    worker: String,
    not_before_ms: u64,
}

impl Upstream {
    /// Serves on a loopback port until the process ends: at most `rate` per
    /// second, `work` per request, and the first attempt of each job in
    /// `refuse` refused as it says.
    pub async fn serve(
        rate: u32,
        work: Duration,
        refuse: HashMap<u32, Refusal>,
    ) -> Result<Self, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let upstream = Self {
            addr: listener.local_addr()?,
            shared: Arc::new(UpstreamState {
                rate: rate as usize,
                work,
                refuse,
                served: Mutex::default(),
                log: Mutex::default(),
                in_flight: AtomicU32::new(0),
                in_flight_log: Mutex::default(),
            }),
        };
        let app = Router::new()
            .route(
                "/job/{id}/{attempt}/{tenant}/{worker}/{not_before_ms}",
                get(answer),
            )
            .with_state(Arc::clone(&upstream.shared));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(upstream)
    }

    /// Every request so far, in arrival order.
    pub fn arrivals(&self) -> Vec<Arrival> {
        lock(&self.shared.log).clone()
    }

    /// (unix ms, requests in flight) at each change so far.
    pub fn in_flight_log(&self) -> Vec<(u64, u32)> {
        lock(&self.shared.in_flight_log).clone()
    }

    /// How many distinct jobs were served (completed with a 200).
    pub fn jobs_done(&self) -> usize {
        let log = lock(&self.shared.log);
        let mut done: Vec<u32> = log
            .iter()
            .filter(|arrival| arrival.completed)
            .map(|arrival| arrival.job)
            .collect();
        done.sort_unstable();
        done.dedup();
        done.len()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl UpstreamState {
    /// Admits a request into the sliding window, or says how long until it
    /// would be admitted.
    fn admit(&self, now_ms: u64) -> Result<(), u64> {
        let window = WINDOW.as_millis() as u64;
        let mut served = lock(&self.served);
        while served.front().is_some_and(|&at| now_ms >= at + window) {
            served.pop_front();
        }
        if served.len() < self.rate {
            served.push_back(now_ms);
            return Ok(());
        }
        Err(served[0] + window - now_ms)
    }

    fn in_flight(&self, change: i32) {
        let now = if change > 0 {
            self.in_flight.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            self.in_flight.fetch_sub(1, Ordering::SeqCst) - 1
        };
        lock(&self.in_flight_log).push((unix_ms(), now));
    }
}

/// Marks a request finished (completed or abandoned) when dropped.
struct Running {
    state: Arc<UpstreamState>,
    index: usize,
    completed: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut log = lock(&self.state.log);
        log[self.index].completed = self.completed;
        log[self.index].ended_ms = Some(unix_ms());
        drop(log);
        self.state.in_flight(-1);
    }
}

async fn answer(
    State(state): State<Arc<UpstreamState>>,
    Path(request): Path<Request>,
) -> (StatusCode, HeaderMap) {
    let at_ms = unix_ms();
    let mut headers = HeaderMap::new();
    let refusal = match request.attempt {
        0 => state.refuse.get(&request.id).copied(),
        _ => None,
    };
    let (status, retry_at_ms) = match refusal {
        Some(Refusal::RetryAfter(seconds)) => {
            headers.insert("retry-after", HeaderValue::from(seconds));
            (StatusCode::TOO_MANY_REQUESTS, Some(at_ms + seconds * 1_000))
        }
        Some(Refusal::ResetIn(ms)) => {
            headers.insert("x-ratelimit-remaining", HeaderValue::from(0));
            headers.insert("x-ratelimit-reset", HeaderValue::from(at_ms + ms));
            (StatusCode::TOO_MANY_REQUESTS, Some(at_ms + ms))
        }
        Some(Refusal::Unavailable) => (StatusCode::SERVICE_UNAVAILABLE, None),
        None => match state.admit(at_ms) {
            Ok(()) => (StatusCode::OK, None),
            Err(wait_ms) => {
                let seconds = wait_ms.div_ceil(1_000);
                headers.insert("retry-after", HeaderValue::from(seconds));
                (StatusCode::TOO_MANY_REQUESTS, Some(at_ms + seconds * 1_000))
            }
        },
    };
    let index = {
        let mut log = lock(&state.log);
        log.push(Arrival {
            job: request.id,
            attempt: request.attempt,
            tenant: request.tenant,
            worker: request.worker,
            not_before_ms: request.not_before_ms,
            at_ms,
            status: status.as_u16(),
            completed: false,
            ended_ms: None,
            retry_at_ms,
        });
        log.len() - 1
    };
    if status != StatusCode::OK {
        return (status, headers);
    }
    state.in_flight(1);
    let mut running = Running {
        state: Arc::clone(&state),
        index,
        completed: false,
    };
    tokio::time::sleep(state.work).await;
    running.completed = true;
    (status, headers)
}

// --- The workers -------------------------------------------------------------

/// One worker's settings.
#[derive(Clone, Debug)]
pub struct WorkerSettings {
    /// The Redis server of the queue and the limits.
    pub redis_url: String,
    /// Prefix of every key (queue and limits), so that runs do not mix.
    pub namespace: String,
    /// This worker's name (unique among the live workers).
    pub name: String,
    /// The queue it drains.
    pub queue: String,
    /// The upstream it calls.
    pub upstream: SocketAddr,
    /// The name of the upstream's rate limit: one limit per downstream,
    /// shared by the queues (and workers) that call it.
    pub downstream: String,
    /// Requests a second, shared by every worker in Redis.
    pub rate: u32,
    /// Jobs running at once, shared by every worker as leases in Redis.
    pub slots: u32,
    /// How long a lease outlives a worker that died.
    pub lease_ttl: Duration,
}

impl WorkerSettings {
    /// A worker `name` draining `queue` under `namespace` into `upstream` at
    /// [`RATE`] a second, 8 jobs at once, leases of 2 s.
    pub fn new(redis_url: &str, namespace: &str, name: &str, upstream: SocketAddr) -> Self {
        Self {
            redis_url: redis_url.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            queue: "jobs".to_owned(),
            upstream,
            downstream: "upstream".to_owned(),
            rate: RATE,
            slots: 8,
            lease_ttl: Duration::from_secs(2),
        }
    }
}

/// What a job needs: the upstream, the shared rate limit (to push it back)
/// and the queue (to put the job back).
#[derive(Clone)]
struct Deps {
    client: reqwest::Client,
    url: String,
    worker: String,
    rate: RateLimiter<RedisStore>,
    queue: RedisStorage<Job>,
    rescheduled: Arc<AtomicU32>,
}

/// The apalis-redis settings of a queue: one job claimed per fetch (a
/// worker claims no job it cannot start), a heartbeat a second, and a dead
/// worker's jobs back in the queue 3 to 4 s after its last heartbeat
/// (apalis-redis keeps heartbeats in whole seconds: a shorter grace would
/// declare live workers dead).
pub fn queue_config(settings: &WorkerSettings) -> Config {
    Config::default()
        .queue(format!("{}:{}", settings.namespace, settings.queue))
        .batch_size(1)
        .heartbeat_interval(Duration::from_secs(1))
        .missed_heartbeats(3)
}

/// The queue of `settings`, to push jobs into.
pub async fn queue(settings: &WorkerSettings) -> Result<RedisStorage<Job>, BoxError> {
    let connection = apalis_redis::connect(settings.redis_url.as_str()).await?;
    Ok(RedisStorage::new(connection).with_config(queue_config(settings)))
}

/// Pushes the first attempt of each job.
pub async fn enqueue(settings: &WorkerSettings, jobs: Vec<Job>) -> Result<(), BoxError> {
    let mut queue = queue(settings).await?;
    queue.push_bulk(jobs).await?;
    Ok(())
}

/// The store of the shared limits.
pub async fn store(settings: &WorkerSettings) -> Result<RedisStore, BoxError> {
    let store = RedisStore::builder(settings.redis_url.clone())
        .prefix(format!("{}:", settings.namespace))
        .connect()
        .await?;
    Ok(store)
}

/// The shared rate limit of `settings`' downstream: GCRA, `rate` a second,
/// no burst.
pub fn rate_limit(
    store: RedisStore,
    settings: &WorkerSettings,
) -> Result<RateLimiter<RedisStore>, BoxError> {
    let quota = Quota::gcra(settings.rate, WINDOW)?;
    Ok(RateLimiter::new(store, settings.downstream.clone(), quota))
}

/// What a worker did.
#[derive(Clone, Debug, Default)]
pub struct WorkerReport {
    /// Jobs it put back in the queue.
    pub rescheduled: u32,
}

/// Runs a worker whose stack is `$outer`, then `$inner`, then the job; a
/// refused job pushes `$rate` back. (A macro: the layers' types differ.)
macro_rules! run_worker_with {
    ($settings:expr, $rate:expr, $outer:expr, $inner:expr, $stop:expr) => {{
        let settings: WorkerSettings = $settings;
        let backend = queue(&settings).await?;
        let rescheduled = Arc::new(AtomicU32::new(0));
        let deps = Deps {
            client: reqwest::Client::new(),
            url: format!("http://{}/job", settings.upstream),
            worker: settings.name.clone(),
            rate: $rate,
            queue: backend.clone(),
            rescheduled: Arc::clone(&rescheduled),
        };
        let stop = $stop;
        WorkerBuilder::new(settings.name.as_str())
            // An idle worker looks for due jobs every 50 ms.
            .backend(backend.poll_with_interval(Duration::from_millis(50)))
            .data(deps)
            .layer($outer)
            .layer($inner)
            .build(run_job)
            .run_until(async move {
                stop.await;
                Ok::<_, WorkerError>(())
            })
            .await?;
        Ok(WorkerReport {
            rescheduled: rescheduled.load(Ordering::SeqCst),
        })
    }};
}

/// Runs one worker until `stop` completes (then it finishes the jobs it
/// started and returns). Its stack: the concurrency leases, then the shared
/// rate, then the job.
pub async fn run_worker(
    settings: WorkerSettings,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<WorkerReport, BoxError> {
    let store = store(&settings).await?;
    let rate = rate_limit(store.clone(), &settings)?;
    let slots = LeasedConcurrencyLimiter::new(
        store,
        format!("{}:slots", settings.queue),
        settings.slots,
        settings.lease_ttl,
    )?;
    run_worker_with!(
        settings,
        rate.clone(),
        LimitLayer::new(slots),
        LimitLayer::new(rate),
        stop
    )
}

/// A tenant's worker: at most `settings.slots` of its jobs claimed at once
/// in this process, and the jobs of every tenant's worker built with a
/// clone of `fair` take turns, tenant by tenant, for the shared rate `rate`.
pub async fn run_tenant_worker<F>(
    settings: WorkerSettings,
    rate: RateLimiter<RedisStore>,
    fair: FairLimitLayer<String, RateLimiter<RedisStore>, F>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<WorkerReport, BoxError>
where
    F: Fn(&Task<Job>) -> String + Send + Sync + 'static,
{
    let slots = ConcurrencyLimiter::new(settings.slots)?;
    run_worker_with!(settings, rate, LimitLayer::new(slots), fair, stop)
}

/// The fair layer of tenant workers sharing `rate`: the key is the job's
/// tenant.
pub fn fair_layer(
    rate: RateLimiter<RedisStore>,
) -> FairLimitLayer<String, RateLimiter<RedisStore>, impl Fn(&Task<Job>) -> String + Clone> {
    FairLimitLayer::new(rate, |task: &Task<Job>| task.args.tenant.clone())
}

/// The job: one request upstream; a refusal puts it back in the queue.
async fn run_job(job: Job, deps: Data<Deps>) -> Result<Outcome, BoxDynError> {
    let Err(error) = call_upstream(&deps, &job).await? else {
        return Ok(Outcome::Done);
    };
    let next = reschedule(&deps.rate, &error).await?;
    // At the retry instant, to the millisecond, for the check; apalis-redis
    // runs it at the next whole second.
    let not_before_ms = millis(next.date()) + 1;
    let again = Job {
        attempt: job.attempt + 1,
        not_before_ms,
        ..job
    };
    let task = TaskBuilder::new(again)
        .run_at_timestamp(not_before_ms.div_ceil(1_000))
        // Pushed once even if this run is repeated (a worker that dies
        // before acknowledging it).
        .idempotency_key(format!("{}#{}", job.id, job.attempt + 1))
        .build();
    deps.queue.clone().push_task(task).await?;
    deps.rescheduled.fetch_add(1, Ordering::SeqCst);
    Ok(Outcome::Rescheduled(not_before_ms))
}

/// `Ok(Ok(()))` if the upstream served the job, `Ok(Err(_))` if it asked
/// for a retry later, `Err(_)` on any other failure.
async fn call_upstream(deps: &Deps, job: &Job) -> Result<Result<(), RetryableJobError>, BoxError> {
    let response = deps
        .client
        .get(format!(
            "{}/{}/{}/{}/{}/{}",
            deps.url, job.id, job.attempt, job.tenant, deps.worker, job.not_before_ms
        ))
        .send()
        .await?;
    let status = response.status();
    if status.is_success() {
        return Ok(Ok(()));
    }
    let refused = format!("upstream answered {status}");
    match Advice::from_parts(status, response.headers(), SystemTime::now()) {
        Advice::Wait(wait) => Ok(Err(RetryableJobError::new(refused).retry_after(wait))),
        Advice::BackOff => Ok(Err(RetryableJobError::new(refused))),
        Advice::Proceed => Err(refused.into()),
    }
}

// --- The example ---------------------------------------------------------------

/// One second of the run, as the upstream saw it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Second {
    /// Requests served.
    pub served: u32,
    /// Requests refused (`429` or `503`).
    pub refused: u32,
}

/// What the example saw.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Per second, from the first request.
    pub seconds: Vec<Second>,
    /// Jobs put back in the queue, by all workers.
    pub rescheduled: u32,
    /// Distinct jobs served.
    pub jobs_done: usize,
    /// Every request.
    pub arrivals: Vec<Arrival>,
}

/// Enqueues `jobs` jobs (every 50th refused once with `429`, every 50th
/// from the 25th once with `503`), runs three workers in this process until
/// every job is served, and returns what the upstream saw. Needs `REDIS_URL`.
pub async fn run(redis_url: &str, jobs: u32) -> Result<Summary, BoxError> {
    let refuse: HashMap<u32, Refusal> = (0..jobs)
        .filter_map(|id| match id % 50 {
            10 => Some((id, Refusal::ResetIn(300))),
            35 => Some((id, Refusal::Unavailable)),
            _ => None,
        })
        .collect();
    let upstream = Upstream::serve(RATE, Duration::from_millis(20), refuse).await?;
    let namespace = format!("job-worker-example:{}:{}", std::process::id(), unix_ms());
    let first = WorkerSettings::new(redis_url, &namespace, "worker-0", upstream.addr);
    enqueue(&first, (0..jobs).map(|id| Job::new(id, "acme")).collect()).await?;

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let workers: Vec<_> = (0..3)
        .map(|n| {
            let mut settings = first.clone();
            settings.name = format!("worker-{n}");
            let mut stopped = stopped.clone();
            tokio::spawn(run_worker(settings, async move {
                let _ = stopped.wait_for(|&stop| stop).await;
            }))
        })
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(jobs) / 10 + 30);
    while upstream.jobs_done() < jobs as usize && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop.send(true);
    let mut rescheduled = 0;
    for worker in workers {
        rescheduled += worker.await??.rescheduled;
    }
    let arrivals = upstream.arrivals();
    Ok(Summary {
        seconds: per_second(&arrivals),
        rescheduled,
        jobs_done: upstream.jobs_done(),
        arrivals,
    })
}

/// Served and refused requests per second, from the first request.
pub fn per_second(arrivals: &[Arrival]) -> Vec<Second> {
    let Some(start) = arrivals.iter().map(|arrival| arrival.at_ms).min() else {
        return Vec::new();
    };
    let mut seconds: Vec<Second> = Vec::new();
    for arrival in arrivals {
        let index = ((arrival.at_ms - start) / 1_000) as usize;
        if seconds.len() <= index {
            seconds.resize(index + 1, Second::default());
        }
        match arrival.status {
            200 => seconds[index].served += 1,
            _ => seconds[index].refused += 1,
        }
    }
    seconds
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let redis_url =
        std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let summary = run(&redis_url, 300).await?;
    println!("second  served  refused");
    for (second, counts) in summary.seconds.iter().enumerate() {
        println!("{second:>6}  {:>6}  {:>7}", counts.served, counts.refused);
    }
    println!(
        "{} jobs served, {} rescheduled",
        summary.jobs_done, summary.rescheduled
    );
    Ok(())
}
