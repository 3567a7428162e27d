//! reqwest as a tower service: a small wrapper turns `http::Request`s into
//! reqwest calls, so the limit, feedback and retry layers apply to it.
//!
//! The upstream (started here, on loopback) allows 3 requests a second; the
//! client, configured for 10, sends 6 one after another: the fourth is
//! refused once, the client pauses for the `Retry-After` the upstream sent,
//! and the retry and the rest go through.
//!
//! Run it with `cargo run -p integration --example reqwest_client --features http`.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tower::retry::RetryLayer;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_limits::error::BoxError;
use tower_limits::http::{FeedbackLayer, RetryPolicy};
use tower_limits::{LimitLayer, RateLimiter};

use common::Upstream;

/// `reqwest::Client` as a `tower::Service` of `http` requests and responses.
#[derive(Clone, Debug, Default)]
pub struct Reqwest(reqwest::Client);

type ReqwestFuture =
    Pin<Box<dyn Future<Output = Result<Response<reqwest::Body>, reqwest::Error>> + Send>>;

impl Service<Request<String>> for Reqwest {
    type Response = Response<reqwest::Body>;
    type Error = reqwest::Error;
    type Future = ReqwestFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), reqwest::Error>> {
        Poll::Ready(Ok(())) // reqwest pools connections itself
    }

    fn call(&mut self, request: Request<String>) -> Self::Future {
        let client = self.0.clone();
        let request = reqwest::Request::try_from(request);
        Box::pin(async move { Ok(Response::from(client.execute(request?).await?)) })
    }
}

/// What the client and the upstream saw.
#[derive(Debug)]
pub struct Summary {
    /// Requests that ended with 200.
    pub succeeded: u32,
    /// 429s the upstream sent (each was retried).
    pub refused: u32,
}

/// Starts the upstream, then sends `requests` requests in a row.
pub async fn run(requests: u32) -> Result<Summary, BoxError> {
    let upstream = Upstream::serve(3, Duration::from_secs(1)).await?;
    let rate = RateLimiter::builder("upstream", 10, Duration::from_secs(1))
        .without_backoff()
        .build()?;
    let mut client = ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::new().wait_for(rate.clone())))
        .layer(FeedbackLayer::new(rate.clone()))
        .layer(LimitLayer::new(rate))
        .service(Reqwest::default());

    let mut succeeded = 0;
    for _ in 0..requests {
        let request = Request::get(format!("http://{}/", upstream.addr)).body(String::new())?;
        let response = client.ready().await?.call(request).await?;
        succeeded += u32::from(response.status() == StatusCode::OK);
    }
    let refused = upstream.refused.load(Ordering::SeqCst);
    Ok(Summary { succeeded, refused })
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let summary = run(6).await?;
    println!("{summary:?}");
    Ok(())
}
