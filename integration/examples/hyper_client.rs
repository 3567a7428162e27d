//! A hyper-util client that stays under its upstream's quota and obeys its
//! `429`s: a rate and a concurrency limit, a `FeedbackLayer` that pauses
//! every caller on `Retry-After`, and a `RetryPolicy` that sends a refused
//! request again after the advertised time.
//!
//! The upstream (started here, on loopback) allows 4 requests a second; the
//! client is configured for 10, too many: every request still succeeds,
//! some after one retry, and only requests already in flight when the
//! upstream refused get a 429: the others wait for the pause it asked for.
//!
//! Run it with `cargo run -p integration --example hyper_client --features http`.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::retry::RetryLayer;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_limits::error::BoxError;
use tower_limits::http::{FeedbackLayer, HttpLimitLayer, RetryPolicy};
use tower_limits::{ConcurrencyLimiter, LimitLayer, RateLimiter};

use common::Upstream;

/// What the client and the upstream saw.
#[derive(Debug)]
pub struct Summary {
    /// Requests that ended with 200.
    pub succeeded: u32,
    /// 429s the upstream sent (each was retried).
    pub refused: u32,
}

/// Starts the upstream, then sends `requests` requests from 4 tasks.
pub async fn run(requests: u32) -> Result<Summary, BoxError> {
    let upstream = Upstream::serve(4, Duration::from_secs(1)).await?;
    let rate = RateLimiter::builder("upstream", 10, Duration::from_secs(1))
        .without_backoff()
        .build()?;
    let http = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::new().wait_for(rate.clone())))
        .layer(FeedbackLayer::new(rate.clone()))
        .layer(HttpLimitLayer::new(LimitLayer::new(
            ConcurrencyLimiter::new(4)?,
        )))
        .layer(LimitLayer::new(rate))
        .service(http);

    let tasks: Vec<_> = (0..4)
        .map(|task| {
            let mut client = client.clone();
            let uri = format!("http://{}/", upstream.addr);
            tokio::spawn(async move {
                let mut succeeded = 0;
                for _ in (task..requests).step_by(4) {
                    let request = Request::get(&uri).body(Full::default())?;
                    let response = client.ready().await?.call(request).await?;
                    let ok = response.status() == StatusCode::OK;
                    response.into_body().collect().await?; // frees the concurrency slot
                    succeeded += u32::from(ok);
                }
                Ok::<u32, BoxError>(succeeded)
            })
        })
        .collect();
    let mut succeeded = 0;
    for task in tasks {
        succeeded += task.await??;
    }
    let refused = upstream.refused.load(Ordering::SeqCst);
    Ok(Summary { succeeded, refused })
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let summary = run(12).await?;
    println!("{summary:?}");
    Ok(())
}
