//! The feedback layer against a real loopback upstream that enforces its own
//! limit, and its backoff, cap and header handling on paused time.
#![cfg(feature = "http")]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
use tower_limits::error::BoxError;
use tower_limits::http::FeedbackLayer;
use tower_limits::{LimitLayer, Limiter, RateLimiter};

/// The upstream's own limit: 5 requests in any sliding second.
const UPSTREAM_MAX: u32 = 5;
const UPSTREAM_WINDOW: Duration = Duration::from_secs(1);
/// Requests already on their way when the first 429 was sent.
const IN_FLIGHT_GRACE: Duration = Duration::from_millis(250);

/// One request as the upstream saw it.
#[derive(Clone, Copy, Debug)]
struct Arrival {
    at: Instant,
    caller: u32,
    status: StatusCode,
    retry_after: Option<Duration>,
}

#[derive(Default)]
struct Upstream {
    starts: VecDeque<Instant>,
    arrivals: Vec<Arrival>,
}

impl Upstream {
    /// Admits or refuses a request arriving now, like a real API would.
    fn decide(&mut self, caller: u32) -> Arrival {
        let at = Instant::now();
        while self
            .starts
            .front()
            .is_some_and(|start| at.duration_since(*start) >= UPSTREAM_WINDOW)
        {
            self.starts.pop_front();
        }
        let arrival = if self.starts.len() < UPSTREAM_MAX as usize {
            self.starts.push_back(at);
            Arrival {
                at,
                caller,
                status: StatusCode::OK,
                retry_after: None,
            }
        } else {
            let wait = (self.starts[0] + UPSTREAM_WINDOW).duration_since(at);
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let retry_after = Some(Duration::from_secs(seconds));
            Arrival {
                at,
                caller,
                status: StatusCode::TOO_MANY_REQUESTS,
                retry_after,
            }
        };
        self.arrivals.push(arrival);
        arrival
    }
}

/// Serves the upstream on a loopback port until the test ends.
async fn serve_upstream() -> (SocketAddr, Arc<Mutex<Upstream>>) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("an address");
    let upstream = Arc::new(Mutex::new(Upstream::default()));
    let state = upstream.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let state = state.clone();
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let caller = request.headers()["x-caller"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                let arrival = state.lock().unwrap().decide(caller);
                let mut response = Response::builder().status(arrival.status);
                if let Some(wait) = arrival.retry_after {
                    response = response.header("retry-after", wait.as_secs());
                }
                async move { response.body(Empty::<Bytes>::new()) }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, upstream)
}

/// `callers` concurrent callers sending `each` requests through a client
/// limited by `limiter` and fed back by the upstream's answers.
async fn run_callers(addr: SocketAddr, limiter: RateLimiter, callers: u32, each: u32) {
    let http = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let client = ServiceBuilder::new()
        .layer(FeedbackLayer::new(limiter.clone()))
        .layer(LimitLayer::new(limiter))
        .service(http);
    let tasks: Vec<_> = (0..callers)
        .map(|caller| {
            let mut client = client.clone();
            tokio::spawn(async move {
                for _ in 0..each {
                    let request = Request::get(format!("http://{addr}/"))
                        .header("x-caller", caller)
                        .body(Empty::new())?;
                    let response = client.ready().await?.call(request).await?;
                    response.into_body().collect().await?;
                }
                Ok::<_, BoxError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("no panic").expect("no transport error");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_high_a_limit_gets_one_429_then_every_caller_waits_the_advertised_time() {
    let (addr, upstream) = serve_upstream().await;
    let too_high = RateLimiter::builder("upstream", 100, Duration::from_secs(1))
        .without_backoff()
        .build()
        .unwrap();
    run_callers(addr, too_high, 4, 3).await;

    let arrivals = upstream.lock().unwrap().arrivals.clone();
    let first = arrivals
        .iter()
        .find(|arrival| arrival.status == StatusCode::TOO_MANY_REQUESTS)
        .copied()
        .expect("a limit 20x too high trips the upstream");
    let resume = first.at + first.retry_after.expect("429 carries Retry-After");
    let paused = first.at + IN_FLIGHT_GRACE..resume;
    let early: Vec<_> = arrivals
        .iter()
        .filter(|arrival| paused.contains(&arrival.at))
        .collect();
    assert!(
        early.is_empty(),
        "requests sent during the advertised pause: {early:?}"
    );
    // Every caller with work left waited for the pause: its next request
    // arrived after it (none arrived inside it, above), and some did.
    for caller in 0..4 {
        let sent = arrivals
            .iter()
            .filter(|arrival| arrival.caller == caller)
            .count();
        assert_eq!(
            sent, 3,
            "caller {caller} sent all its requests: {arrivals:?}"
        );
    }
    let waited = (0..4)
        .filter(|caller| {
            arrivals
                .iter()
                .any(|arrival| arrival.caller == *caller && arrival.at >= resume)
        })
        .count();
    assert!(
        waited >= 1,
        "callers held back by the pause: {waited}; {arrivals:?}"
    );
    // Only requests already in flight when the first 429 left got one too.
    let burst = arrivals
        .iter()
        .filter(|arrival| arrival.status == StatusCode::TOO_MANY_REQUESTS && arrival.at < resume)
        .count();
    assert!(
        burst <= 4,
        "{burst} 429s before the advertised time: {arrivals:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_limit_never_gets_a_429() {
    let (addr, upstream) = serve_upstream().await;
    // The upstream's 5 per second, with a margin for network jitter.
    let right = RateLimiter::builder("upstream", UPSTREAM_MAX, Duration::from_millis(1_400))
        .without_backoff()
        .build()
        .unwrap();
    run_callers(addr, right, 4, 3).await;

    let arrivals = upstream.lock().unwrap().arrivals.clone();
    assert_eq!(arrivals.len(), 12);
    let refused: Vec<_> = arrivals
        .iter()
        .filter(|arrival| arrival.status != StatusCode::OK)
        .collect();
    assert!(refused.is_empty(), "{refused:?}");
}

/// An upstream answering `status` with `headers` to every request.
fn answering(
    status: StatusCode,
    headers: &'static [(&'static str, &'static str)],
) -> impl Service<Request<()>, Response = Response<()>, Error = Infallible, Future: Send> + Clone {
    service_fn(move |_: Request<()>| async move {
        let mut response = Response::builder().status(status);
        for (name, value) in headers {
            response = response.header(*name, *value);
        }
        Ok(response.body(()).expect("a valid response"))
    })
}

fn unlimited() -> RateLimiter {
    RateLimiter::builder("upstream", 1_000, Duration::from_secs(1))
        .without_backoff()
        .build()
        .unwrap()
}

async fn pause_after(
    layer: FeedbackLayer,
    limiter: &RateLimiter,
    upstream: impl Service<Request<()>, Response = Response<()>, Error = Infallible>,
) -> Duration {
    let mut client = ServiceBuilder::new().layer(layer).service(upstream);
    client
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap();
    limiter
        .next_available_time()
        .await
        .unwrap()
        .duration_since(Instant::now())
}

#[tokio::test(start_paused = true)]
async fn a_hostile_retry_after_is_capped() {
    let limiter = unlimited();
    let layer = FeedbackLayer::new(limiter.clone()).max_wait(Duration::from_secs(60));
    let hostile = answering(
        StatusCode::TOO_MANY_REQUESTS,
        &[("retry-after", "99999999999")],
    );
    assert_eq!(
        pause_after(layer, &limiter, hostile).await,
        Duration::from_secs(60)
    );
}

#[tokio::test(start_paused = true)]
async fn a_429_without_a_hint_backs_off_exponentially_until_a_success() {
    let limiter = unlimited();
    let layer = FeedbackLayer::new(limiter.clone()).backoff(Duration::from_secs(1));
    let bare = answering(StatusCode::TOO_MANY_REQUESTS, &[]);
    for expected in [1, 2, 4] {
        let pause = pause_after(layer.clone(), &limiter, bare.clone()).await;
        assert_eq!(pause, Duration::from_secs(expected));
        tokio::time::advance(pause).await;
    }
    pause_after(layer.clone(), &limiter, answering(StatusCode::OK, &[])).await;
    let pause = pause_after(layer, &limiter, bare).await;
    assert_eq!(
        pause,
        Duration::from_secs(1),
        "a success resets the backoff"
    );
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_quota_pauses_before_any_429() {
    let limiter = unlimited();
    let layer = FeedbackLayer::new(limiter.clone());
    let last_one = answering(StatusCode::OK, &[("ratelimit", "\"default\";r=0;t=7")]);
    assert_eq!(
        pause_after(layer, &limiter, last_one).await,
        Duration::from_secs(7)
    );
}

#[tokio::test(start_paused = true)]
async fn every_limiter_given_is_paused_and_garbage_is_ignored() {
    let (first, second) = (unlimited(), unlimited());
    let layer = FeedbackLayer::new(first.clone()).also_pause(second.clone());
    let slow_down = answering(StatusCode::SERVICE_UNAVAILABLE, &[("retry-after", "3")]);
    assert_eq!(
        pause_after(layer.clone(), &first, slow_down).await,
        Duration::from_secs(3)
    );
    assert_eq!(
        second.next_available_time().await.unwrap(),
        Instant::now() + Duration::from_secs(3)
    );

    let fresh = unlimited();
    let garbage = answering(
        StatusCode::OK,
        &[("ratelimit", "r=-1;;\"x"), ("x-ratelimit-reset", "nope")],
    );
    let pause = pause_after(FeedbackLayer::new(fresh.clone()), &fresh, garbage).await;
    assert_eq!(pause, Duration::ZERO);
}

/// A response's status and headers, and the pause they ask for.
type Signal = (
    StatusCode,
    &'static [(&'static str, &'static str)],
    Duration,
);

/// Every way an upstream says "slow down" pauses the client, for the time
/// it names: tower_governor's `X-RateLimit-After`, gRPC's pushback, a zero
/// wait (a short pause all the same), and signals without a time (a 503, a
/// gRPC `UNAVAILABLE`, a quota used up without its reset) back off.
#[tokio::test(start_paused = true)]
async fn every_throttling_signal_pauses_the_client() {
    const OK: StatusCode = StatusCode::OK;
    const TOO_MANY: StatusCode = StatusCode::TOO_MANY_REQUESTS;
    let ms = Duration::from_millis;
    let cases: [Signal; 7] = [
        (TOO_MANY, &[("retry-after", "0")], ms(100)),
        (
            TOO_MANY,
            &[("retry-after", "0"), ("x-ratelimit-after", "0")],
            ms(100),
        ),
        (TOO_MANY, &[("x-ratelimit-after", "2")], ms(2_000)),
        (
            OK,
            &[("grpc-status", "8"), ("grpc-retry-pushback-ms", "1500")],
            ms(1_500),
        ),
        (OK, &[("grpc-status", "14")], ms(1_000)),
        (StatusCode::SERVICE_UNAVAILABLE, &[], ms(1_000)),
        (OK, &[("x-ratelimit-remaining", "0")], ms(1_000)),
    ];
    for (status, headers, expected) in cases {
        let limiter = unlimited();
        let pause = pause_after(
            FeedbackLayer::new(limiter.clone()),
            &limiter,
            answering(status, headers),
        )
        .await;
        assert_eq!(pause, expected, "{status} {headers:?}");
    }
    let limiter = unlimited();
    let layer = FeedbackLayer::new(limiter.clone()).min_pause(ms(250));
    let zero = answering(TOO_MANY, &[("retry-after", "0")]);
    assert_eq!(pause_after(layer, &limiter, zero).await, ms(250));
}

/// A success that was already in flight when the upstream began refusing
/// says nothing about now: the backoff keeps doubling (it used to start
/// over at the first success in a burst of refusals).
#[tokio::test(start_paused = true)]
async fn a_success_sent_before_the_refusals_does_not_end_the_backoff() {
    let limiter = unlimited();
    let upstream = service_fn(|request: Request<()>| async move {
        let slow = request.headers().contains_key("slow");
        if slow {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let status = if slow {
            StatusCode::OK
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        Ok::<_, Infallible>(Response::builder().status(status).body(()).unwrap())
    });
    let client = ServiceBuilder::new()
        .layer(FeedbackLayer::new(limiter.clone()))
        .service(upstream);
    let slow = Request::builder().header("slow", "1").body(()).unwrap();
    let in_flight = tokio::spawn(client.clone().oneshot(slow));
    tokio::task::yield_now().await;
    let refused = client.clone().oneshot(Request::new(())).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS); // a 1 s pause
    assert_eq!(in_flight.await.unwrap().unwrap().status(), StatusCode::OK);
    client.clone().oneshot(Request::new(())).await.unwrap();
    let pause = limiter.next_available_time().await.unwrap() - Instant::now();
    assert_eq!(pause, Duration::from_secs(2), "the second refusal in a row");
}
