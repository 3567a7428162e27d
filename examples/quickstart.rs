//! Quickstart: stay under an upstream's quota without ever hitting a 429.
//!
//! This example starts a small HTTP server on loopback that plays a
//! quota-limited API (think of an LLM, payment or mail API): it allows
//! [`LIMIT`] requests per second and answers `429 Too Many Requests` with
//! `Retry-After: 1` past that. It then pushes [`REQUESTS`] requests at it, all
//! at once, through a client stack of two tower-limits layers:
//!
//! ```text
//! LimitLayer (8 in flight)      outside: bounds who waits on the rate
//!   LimitLayer (50 per 1 s sliding)    inside: each admitted call starts at once
//!     hyper-util client                    the real HTTP call
//! ```
//!
//! Because the client's limit matches the server's, the server never says 429,
//! and the report at the end shows how long requests waited for admission.
//!
//! Run it with:
//!
//! ```text
//! cargo run --example quickstart
//! ```

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode, header};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_limits::error::BoxError;
use tower_limits::{ConcurrencyLimiter, LimitLayer, RateLimiter};

/// The upstream's quota, and the client's limit: requests per [`WINDOW`].
const LIMIT: u32 = 50;
/// The quota's window.
const WINDOW: Duration = Duration::from_secs(1);
/// How many client calls may be in flight (or waiting on the rate) at once.
const MAX_CONCURRENT: u32 = 8;
/// How many requests the example sends.
const REQUESTS: usize = 300;

/// Loopback jitter allowance. The client's rate limiter records a start the
/// moment it admits a call, a little before the request reaches the server
/// (pool checkout or a new TCP connection, task scheduling). When the first
/// request of a window takes longer to arrive than the one admitted exactly a
/// window later, a server counting over the full second sees `LIMIT + 1`
/// arrivals and answers a spurious 429. So the upstream counts arrivals over
/// `WINDOW - JITTER_ALLOWANCE`. On an idle machine a few milliseconds are
/// enough; 50 ms keeps the example at zero 429s on a busy CI runner too.
/// Against a real API, leave a similar margin (a slightly lower limit).
const JITTER_ALLOWANCE: Duration = Duration::from_millis(50);

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let upstream = start_upstream().await?;
    println!(
        "upstream: http://{upstream} allows {LIMIT} requests per {WINDOW:?}, then answers 429"
    );

    // The HTTP client, as a tower service. A plain hyper-util client would do
    // (it implements `Service`), but wrapping it in `service_fn` lets the call
    // include reading the body, so a concurrency slot is held for the whole
    // exchange, not just until the headers arrive.
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let http = tower::service_fn(move |request: Request<Empty<Bytes>>| {
        let client = client.clone();
        async move {
            let response = client.request(request).await?;
            let (parts, body) = response.into_parts();
            let body = body.collect().await?.to_bytes();
            Ok::<_, BoxError>(Response::from_parts(parts, body))
        }
    });

    // The limits. `without_backoff` gives a plain sliding window that admits
    // exactly LIMIT starts per WINDOW (the default backoff, meant for APIs
    // whose quota you do not know exactly, would stay well below it).
    let rate = RateLimiter::builder("upstream", LIMIT, WINDOW)
        .without_backoff()
        .build()?;
    let concurrency = ConcurrencyLimiter::new(MAX_CONCURRENT)?;
    let service = ServiceBuilder::new()
        // Concurrency OUTSIDE rate: at most MAX_CONCURRENT callers wait on the
        // rate limit, and each one starts the moment the rate limit admits
        // it. The other order would admit callers by rate and then make them
        // wait for a slot, so delayed starts could bunch up and break the rate.
        .layer(LimitLayer::new(concurrency))
        .layer(LimitLayer::new(rate))
        .service(http);

    let stats = Arc::new(Stats::default());
    let progress = tokio::spawn(report_progress(Arc::clone(&stats)));
    println!("sending {REQUESTS} requests at once through the limiter...");

    let start = Instant::now();
    let mut calls = Vec::with_capacity(REQUESTS);
    for id in 0..REQUESTS {
        // Every clone shares the same two limiters: the limit holds across
        // all tasks.
        let service = service.clone();
        let stats = Arc::clone(&stats);
        let uri = format!("http://{upstream}/items/{id}");
        calls.push(tokio::spawn(send(service, uri, stats)));
    }

    let mut waits = Vec::with_capacity(REQUESTS);
    let mut admitted_at = Vec::with_capacity(REQUESTS);
    for call in calls {
        // The first `?` is the task (a panic), the second the call itself.
        let call = call.await??;
        waits.push(call.wait);
        admitted_at.push(call.admitted_at);
    }
    let elapsed = start.elapsed();
    progress.abort();

    print_report(&stats, elapsed, &mut waits, &mut admitted_at);
    Ok(())
}

/// Counters shared by the calls and the progress line.
#[derive(Debug, Default)]
struct Stats {
    sent: AtomicUsize,
    too_many_requests: AtomicUsize,
}

/// What one call measured.
#[derive(Debug)]
struct Call {
    /// Time spent in `ready()`, waiting for both limits to admit the call.
    wait: Duration,
    /// When the call was admitted.
    admitted_at: Instant,
}

/// Sends one request through the limited service.
async fn send<S>(mut service: S, uri: String, stats: Arc<Stats>) -> Result<Call, BoxError>
where
    S: Service<Request<Empty<Bytes>>, Response = Response<Bytes>, Error = BoxError>,
{
    let request = Request::get(uri).body(Empty::new())?;

    // `ready()` is where the limiters make the caller wait: it returns once
    // a concurrency slot is free AND the rate limit admits the call. No
    // polling: the task sleeps until exactly the instant it may start.
    let before = Instant::now();
    let ready = service.ready().await?;
    let admitted_at = Instant::now();

    let response = ready.call(request).await?;
    stats.sent.fetch_add(1, Ordering::Relaxed);
    if response.status() == StatusCode::TOO_MANY_REQUESTS {
        stats.too_many_requests.fetch_add(1, Ordering::Relaxed);
    }
    Ok(Call {
        wait: admitted_at - before,
        admitted_at,
    })
}

/// Prints a progress line every second until aborted.
async fn report_progress(stats: Arc<Stats>) {
    let start = Instant::now();
    let mut ticks =
        tokio::time::interval_at(start + Duration::from_secs(1), Duration::from_secs(1));
    loop {
        ticks.tick().await;
        println!(
            "  {:>4.1} s: {:>4} sent, {} answered 429",
            start.elapsed().as_secs_f64(),
            stats.sent.load(Ordering::Relaxed),
            stats.too_many_requests.load(Ordering::Relaxed),
        );
    }
}

/// Prints the final report. The integration test `tests/quickstart.rs` reads
/// its `429 responses:` line.
fn print_report(
    stats: &Stats,
    elapsed: Duration,
    waits: &mut [Duration],
    admitted_at: &mut [Instant],
) {
    let sent = stats.sent.load(Ordering::Relaxed);
    let too_many = stats.too_many_requests.load(Ordering::Relaxed);
    waits.sort_unstable();
    admitted_at.sort_unstable();
    let limit = f64::from(LIMIT) / WINDOW.as_secs_f64();

    println!();
    println!("report");
    println!("  requests sent:  {sent}");
    println!("  elapsed:        {}", human(elapsed));
    // A sliding window lets the first LIMIT calls start at once; after that
    // burst, starts follow at the limit. So the rate that compares with the
    // limit is the one after the first window: the starts after the LIMIT-th,
    // over the time they took.
    let limit_count = LIMIT as usize;
    if admitted_at.len() > limit_count {
        let after_burst = admitted_at.len() - limit_count;
        let span = admitted_at[admitted_at.len() - 1] - admitted_at[limit_count - 1];
        println!(
            "  achieved rate:  {:.1} requests/s (limit {limit:.1} requests/s)",
            after_burst as f64 / span.as_secs_f64()
        );
    }
    println!(
        "                  {:.1} requests/s overall, as the first {LIMIT} start at once",
        sent as f64 / elapsed.as_secs_f64()
    );
    println!("  429 responses:  {too_many}");
    println!(
        "  admission wait: p50 {}, p90 {}, p99 {}, max {}",
        human(percentile(waits, 50)),
        human(percentile(waits, 90)),
        human(percentile(waits, 99)),
        human(waits.last().copied().unwrap_or_default()),
    );
}

/// The nearest-rank `p`th percentile of `sorted` (zero if it is empty).
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted.get(rank - 1).copied().unwrap_or_default()
}

/// `1.23 s` or `45 ms`.
fn human(duration: Duration) -> String {
    if duration >= Duration::from_secs(1) {
        format!("{:.2} s", duration.as_secs_f64())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

// ---------------------------------------------------------------------------
// The upstream: a quota-limited API on 127.0.0.1.
// ---------------------------------------------------------------------------

/// Starts the upstream on a free loopback port and returns its address.
async fn start_upstream() -> Result<SocketAddr, BoxError> {
    let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
    let address = listener.local_addr()?;
    let quota = Quota::new(LIMIT as usize, WINDOW - JITTER_ALLOWANCE);

    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _peer)) => stream,
                Err(error) => {
                    eprintln!("upstream: accept failed: {error}");
                    continue;
                }
            };
            let quota = quota.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let quota = quota.clone();
                    async move { Ok::<_, Infallible>(quota.answer(&request)) }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                if let Err(error) = connection.await {
                    eprintln!("upstream: connection failed: {error}");
                }
            });
        }
    });
    Ok(address)
}

/// The upstream's own limit: at most `limit` accepted requests in any sliding
/// `window` of arrivals.
#[derive(Clone, Debug)]
struct Quota {
    limit: usize,
    window: Duration,
    /// Arrival times of the accepted requests still in the window, oldest
    /// first.
    arrivals: Arc<Mutex<VecDeque<Instant>>>,
}

impl Quota {
    fn new(limit: usize, window: Duration) -> Self {
        Self {
            limit,
            window,
            arrivals: Arc::default(),
        }
    }

    fn answer(&self, _request: &Request<Incoming>) -> Response<Full<Bytes>> {
        let now = Instant::now();
        // A poisoned lock only means another request panicked; the queue of
        // instants is still usable.
        let mut arrivals = self.arrivals.lock().unwrap_or_else(PoisonError::into_inner);
        while arrivals
            .front()
            .is_some_and(|&arrival| now - arrival >= self.window)
        {
            arrivals.pop_front();
        }
        if arrivals.len() >= self.limit {
            let mut response = Response::new(Full::from("too many requests\n"));
            *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            return response;
        }
        arrivals.push_back(now);
        Response::new(Full::from("ok\n"))
    }
}
