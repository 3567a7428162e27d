//! A client that does not know its upstream's limit, and follows it as it
//! changes: an `AdaptiveRateLimiter` paces 50 callers, and a
//! `FeedbackLayer` reports every response to it.
//!
//! The upstream (started here, on loopback) is a leaky bucket like nginx's
//! `limit_req`: it serves 20 requests a second, delays up to 5 more to
//! that pace, and answers the rest `429` with `Retry-After: 1`. Its limit
//! goes to 40 a second, then to 10. The client starts at 100 a second: too
//! many. Each second, the example prints what the upstream served and
//! refused, and the client's adapted rate.
//!
//! Run it with `cargo run -p integration --example adaptive_client --features axum`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_limits::error::BoxError;
use tower_limits::http::FeedbackLayer;
use tower_limits::limiter::Admission;
use tower_limits::{AdaptiveRateLimiter, LeakyBucketLimiter, LimitLayer, Limiter, Rate};

/// Callers sending requests as fast as the client lets them.
const CALLERS: usize = 50;
/// The upstream's limits, per second, one after the other.
pub const LIMITS: [u32; 3] = [20, 40, 10];
/// Requests the upstream delays to its pace before it refuses.
const QUEUE: u32 = 5;

/// One second of the run.
#[derive(Clone, Copy, Debug)]
pub struct Second {
    /// The upstream's limit, per second.
    pub limit: u32,
    /// Requests it served.
    pub served: u32,
    /// Requests it refused (`429`).
    pub refused: u32,
    /// The client's rate at the end of the second.
    pub adapted: f64,
}

/// The upstream: a leaky bucket whose rate can change.
#[derive(Clone)]
struct Upstream {
    bucket: Arc<Mutex<LeakyBucketLimiter>>,
    served: Arc<AtomicU32>,
    refused: Arc<AtomicU32>,
}

impl Upstream {
    async fn serve(limit: u32) -> Result<(Self, String), BoxError> {
        let upstream = Self {
            bucket: Arc::new(Mutex::new(bucket(limit)?)),
            served: Arc::default(),
            refused: Arc::default(),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/", listener.local_addr()?);
        let app = Router::new()
            .route("/", get(answer))
            .with_state(upstream.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok((upstream, url))
    }

    fn set_limit(&self, limit: u32) -> Result<(), BoxError> {
        *self.bucket.lock().unwrap_or_else(PoisonError::into_inner) = bucket(limit)?;
        Ok(())
    }

    /// Served and refused since the last call.
    fn take_counts(&self) -> (u32, u32) {
        (
            self.served.swap(0, Ordering::SeqCst),
            self.refused.swap(0, Ordering::SeqCst),
        )
    }
}

fn bucket(limit: u32) -> Result<LeakyBucketLimiter, BoxError> {
    Ok(LeakyBucketLimiter::new(
        limit,
        Duration::from_secs(1),
        QUEUE,
    )?)
}

/// Serves at the bucket's pace (waiting for a booked slot), or refuses.
async fn answer(State(upstream): State<Upstream>) -> axum::response::Response {
    loop {
        let bucket = upstream
            .bucket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match bucket.try_acquire().await {
            Ok(Admission::Granted(_)) => {
                upstream.served.fetch_add(1, Ordering::SeqCst);
                return StatusCode::OK.into_response();
            }
            Ok(Admission::Denied(booked)) => booked.wait().await,
            Err(_full) => {
                upstream.refused.fetch_add(1, Ordering::SeqCst);
                let retry_after = [(header::RETRY_AFTER, HeaderValue::from_static("1"))];
                return (StatusCode::TOO_MANY_REQUESTS, retry_after).into_response();
            }
        }
    }
}

/// Runs the client against the upstream, `phase` per limit; calls `report`
/// each second.
pub async fn run(phase: Duration, mut report: impl FnMut(Second)) -> Result<Vec<Second>, BoxError> {
    let (upstream, url) = Upstream::serve(LIMITS[0]).await?;
    // A short hold: the limit changes every few seconds here, and a probe
    // every 2 s finds it sooner (at the price of a refusal each).
    let limiter = AdaptiveRateLimiter::builder(Rate::per_second(100)?)
        .hold(Duration::from_secs(2))
        .build()?;
    let http = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let client = ServiceBuilder::new()
        .layer(FeedbackLayer::adaptive(limiter.clone()))
        .layer(LimitLayer::new(limiter.clone()))
        .service(http);
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (mut client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                loop {
                    let request = Request::get(&url).body(Empty::new())?;
                    let response = client.ready().await?.call(request).await?;
                    response.into_body().collect().await?;
                }
                #[allow(unreachable_code)]
                Ok::<(), BoxError>(())
            })
        })
        .collect();
    let mut seconds = Vec::new();
    for limit in LIMITS {
        upstream.set_limit(limit)?;
        for _ in 0..phase.as_secs() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let (served, refused) = upstream.take_counts();
            let second = Second {
                limit,
                served,
                refused,
                adapted: limiter.current_rate(),
            };
            report(second);
            seconds.push(second);
        }
    }
    for caller in callers {
        if caller.is_finished() {
            caller.await??; // a caller that stopped early failed: say why
        } else {
            caller.abort();
        }
    }
    Ok(seconds)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    println!("second  limit  served  refused  client rate");
    let mut second = 0;
    let seconds = run(Duration::from_secs(12), |s| {
        println!(
            "{second:>6}  {:>5}  {:>6}  {:>7}  {:>9.1}/s",
            s.limit, s.served, s.refused, s.adapted
        );
        second += 1;
    })
    .await?;
    let served: u32 = seconds.iter().map(|s| s.served).sum();
    let refused: u32 = seconds.iter().map(|s| s.refused).sum();
    println!(
        "served {served}, refused {refused} ({:.1}%)",
        100.0 * f64::from(refused) / f64::from(served + refused).max(1.0)
    );
    Ok(())
}
