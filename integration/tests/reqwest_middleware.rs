//! `LimitMiddleware` in a reqwest-middleware client, against a loopback
//! upstream (a hyper server written here) that serves 20 requests a second
//! and counts what it saw: with the limit known, the client gets the whole
//! rate without a refusal; with an adaptive limiter and the limit unknown,
//! it does as well as the same tower stack over hyper.
//!
//! The figures are printed (`--nocapture`); the assertions leave room for a
//! loaded machine.
#![cfg(feature = "reqwest-middleware")]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tower::retry::RetryLayer;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_limits::error::BoxError;
use tower_limits::http::{FeedbackLayer, LimitMiddleware, RetryLater, RetryPolicy};
use tower_limits::store::Quota;
use tower_limits::{AdaptiveRateLimiter, LimitLayer, Rate, RateLimiter};

/// The upstream's rate, per second.
const RATE: f64 = 20.0;
/// Requests it takes at once beyond its pace (transit jitter).
const BURST: f64 = 10.0;
/// Callers sending requests as fast as the client lets them.
const CALLERS: usize = 10;

/// A token bucket of [`RATE`] a second holding [`BURST`]: `200`, or `429`
/// with `Retry-After`; it counts both and notes when it served.
#[derive(Debug)]
struct Upstream {
    bucket: Mutex<(f64, Instant)>,
    served: Mutex<Vec<Instant>>,
    refused: AtomicU32,
}

impl Upstream {
    /// Serves on a loopback port until the test ends.
    async fn serve() -> (Arc<Self>, SocketAddr) {
        let upstream = Arc::new(Self {
            bucket: Mutex::new((BURST, Instant::now())),
            served: Mutex::default(),
            refused: AtomicU32::new(0),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let addr = listener.local_addr().expect("bound");
        let serving = Arc::clone(&upstream);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let upstream = Arc::clone(&serving);
                let service = hyper::service::service_fn(move |_: Request<_>| {
                    let answer = upstream.answer();
                    async move { Ok::<_, Infallible>(answer) }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        (upstream, addr)
    }

    fn answer(&self) -> Response<String> {
        let now = Instant::now();
        let mut bucket = self.bucket.lock().unwrap_or_else(PoisonError::into_inner);
        let (tokens, at) = *bucket;
        let tokens = (tokens + now.duration_since(at).as_secs_f64() * RATE).min(BURST);
        if tokens >= 1.0 {
            *bucket = (tokens - 1.0, now);
            drop(bucket);
            let mut served = self.served.lock().unwrap_or_else(PoisonError::into_inner);
            served.push(now);
            return Response::new(String::from("ok"));
        }
        *bucket = (tokens, now);
        self.refused.fetch_add(1, Ordering::SeqCst);
        let seconds = ((1.0 - tokens) / RATE).ceil();
        let mut response = Response::new(String::from("slow down"));
        *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        response
            .headers_mut()
            .insert("retry-after", http::HeaderValue::from(seconds as u64));
        response
    }

    /// Requests served and refused, and the rate it served them at: from
    /// the first to the last, after `skip` seconds of the run.
    fn figures(&self, start: Instant, skip: Duration) -> Figures {
        let served = self.served.lock().unwrap_or_else(PoisonError::into_inner);
        let counted: Vec<_> = served
            .iter()
            .filter(|at| at.duration_since(start) >= skip)
            .collect();
        let span = match (counted.first(), counted.last()) {
            (Some(first), Some(last)) => last.duration_since(**first).as_secs_f64(),
            _ => 0.0,
        };
        let rate = if span > 0.0 {
            (counted.len() - 1) as f64 / span
        } else {
            0.0
        };
        Figures {
            served: served.len(),
            refused: self.refused.load(Ordering::SeqCst),
            rate,
        }
    }
}

#[derive(Debug)]
struct Figures {
    served: usize,
    refused: u32,
    /// Requests served a second.
    rate: f64,
}

/// `CALLERS` callers sending through `client` for `run`.
async fn load_with_reqwest(
    client: reqwest_middleware::ClientWithMiddleware,
    url: String,
    run: Duration,
) {
    let deadline = tokio::time::Instant::now() + run;
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                while tokio::time::Instant::now() < deadline {
                    match client.get(&url).send().await {
                        Ok(response) => drop(response.bytes().await),
                        // The retries gave up: the feedback paused the limit.
                        Err(error) if is_retry_later(&error) => {}
                        Err(error) => panic!("unexpected error: {error:?}"),
                    }
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.expect("a caller panicked");
    }
}

fn is_retry_later(error: &reqwest_middleware::Error) -> bool {
    matches!(error, reqwest_middleware::Error::Middleware(error) if error.is::<RetryLater>())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reqwest_client_that_knows_the_limit_gets_the_rate_without_refusals() {
    let (upstream, addr) = Upstream::serve().await;
    let quota = Quota::gcra(20, Duration::from_secs(1))
        .and_then(Quota::with_pacing_tolerance)
        .expect("valid rate");
    let limit = RateLimiter::in_memory(quota);
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(LimitMiddleware::new(limit))
        .build();

    let start = Instant::now();
    load_with_reqwest(client, format!("http://{addr}/"), Duration::from_secs(4)).await;
    let figures = upstream.figures(start, Duration::ZERO);
    println!(
        "known limit, reqwest-middleware: {figures:?}, {:.1}% of {RATE}/s",
        100.0 * figures.rate / RATE
    );
    assert_eq!(figures.refused, 0, "{figures:?}");
    // The rate is 20.0-20.3/s on an idle machine; a loaded one wakes late.
    assert!(figures.rate >= 0.85 * RATE, "{figures:?}");
    assert!(figures.rate <= 1.05 * RATE, "{figures:?}");
}

/// The client starts at 100 a second, five times the upstream's rate.
fn adaptive() -> AdaptiveRateLimiter {
    AdaptiveRateLimiter::builder(Rate::per_second(100).expect("valid rate"))
        .queueing_delay(Duration::from_millis(20))
        .burst(2)
        .build()
        .expect("valid configuration")
}

/// How long each adaptive client runs, and the seconds its rate is measured
/// after (once it has found the upstream's).
const ADAPTIVE_RUN: Duration = Duration::from_secs(6);
const SETTLED: Duration = Duration::from_secs(2);

async fn adaptive_with_reqwest() -> Figures {
    let (upstream, addr) = Upstream::serve().await;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(LimitMiddleware::adaptive(adaptive()))
        .build();
    let start = Instant::now();
    load_with_reqwest(client, format!("http://{addr}/"), ADAPTIVE_RUN).await;
    upstream.figures(start, SETTLED)
}

async fn adaptive_with_tower() -> Figures {
    let (upstream, addr) = Upstream::serve().await;
    let limiter = adaptive();
    let http = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(
            RetryPolicy::new().wait_for(limiter.clone()),
        ))
        .layer(FeedbackLayer::adaptive(limiter.clone()))
        .layer(LimitLayer::new(limiter))
        .service(http);
    let url = format!("http://{addr}/");
    let start = Instant::now();
    let deadline = tokio::time::Instant::now() + ADAPTIVE_RUN;
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (mut client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                while tokio::time::Instant::now() < deadline {
                    let request = Request::get(&url).body(Empty::new())?;
                    match client.ready().await?.call(request).await {
                        Ok(response) => drop(response.into_body().collect().await),
                        Err(error) if error.is::<RetryLater>() => {}
                        Err(error) => return Err(error),
                    }
                }
                Ok::<(), BoxError>(())
            })
        })
        .collect();
    for caller in callers {
        caller.await.expect("a caller panicked").expect("no error");
    }
    upstream.figures(start, SETTLED)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_reqwest_client_finds_an_unknown_limit_as_the_tower_stack_does() {
    let reqwest = adaptive_with_reqwest().await;
    let tower = adaptive_with_tower().await;
    println!("unknown limit, adaptive, reqwest-middleware: {reqwest:?}");
    println!("unknown limit, adaptive, tower stack over hyper: {tower:?}");
    for figures in [&reqwest, &tower] {
        assert!(figures.rate >= 0.5 * RATE, "{figures:?}");
        assert!(figures.rate <= 1.5 * RATE, "{figures:?}");
        // Starting at five times the rate costs a few refusals, not a flood.
        assert!(
            figures.refused as usize * 10 < figures.served,
            "{figures:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_the_policy_does_not_retry_is_a_retry_later_error() {
    let (upstream, addr) = Upstream::serve().await;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(
            LimitMiddleware::new(tower_limits::NullLimiter)
                .retry(RetryPolicy::new().max_attempts(1)),
        )
        .build();
    let url = format!("http://{addr}/");
    let mut errors = Vec::new();
    // The bucket holds 10: of 20 requests sent in a row, some are refused.
    for _ in 0..2 * BURST as usize {
        if let Err(error) = client.get(&url).send().await {
            errors.push(error);
        }
    }
    let refused = upstream.refused.load(Ordering::SeqCst);
    assert!(refused >= 1, "nothing refused");
    assert_eq!(errors.len(), refused as usize, "{errors:?}");
    let reqwest_middleware::Error::Middleware(error) = &errors[0] else {
        panic!("not a middleware error: {:?}", errors[0]);
    };
    let retry_later = error.downcast_ref::<RetryLater>().expect("a RetryLater");
    assert_eq!(retry_later.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// A permit rides in the response body, as with `HttpLimitLayer`: a
/// concurrency limit holds until the body is read, and the response keeps
/// its URL and status through the stack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_slot_is_held_until_the_body_is_read() {
    let (_upstream, addr) = Upstream::serve().await;
    let limiter = tower_limits::ConcurrencyLimiter::new(1).expect("valid limit");
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(LimitMiddleware::new(limiter.clone()))
        .build();
    let url = format!("http://{addr}/");

    let response = client.get(&url).send().await.expect("served");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.url().as_str(), url);
    assert_eq!(limiter.running(), 1, "the body is still to be read");
    assert_eq!(response.text().await.expect("a body"), "ok");
    assert_eq!(limiter.running(), 0);
}

/// A streaming body cannot be sent again: such a request goes once, and a
/// refusal comes back as the response it is, not as an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_a_streaming_body_is_sent_once() {
    let (upstream, addr) = Upstream::serve().await;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(LimitMiddleware::new(tower_limits::NullLimiter))
        .build();
    let url = format!("http://{addr}/");
    let mut throttled = 0;
    for _ in 0..2 * BURST as usize {
        let stream = reqwest::Body::wrap(http_body_util::Full::new(Bytes::from("data")));
        let response = client.post(&url).body(stream).send().await.expect("sent");
        throttled += u32::from(response.status() == StatusCode::TOO_MANY_REQUESTS);
    }
    let refused = upstream.refused.load(Ordering::SeqCst);
    assert!(refused >= 1, "nothing refused");
    assert_eq!(throttled, refused, "every refusal came back, none retried");
}
