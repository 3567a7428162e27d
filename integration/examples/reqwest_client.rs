//! A reqwest client through reqwest-middleware: `LimitMiddleware` applies
//! the limit, obeys the upstream's `429`s and retries them.
//!
//! The upstream (started here, on loopback) allows 3 requests a second; the
//! client, configured for 10, sends 6 one after another: the fourth is
//! refused once, the client pauses for the `Retry-After` the upstream sent,
//! and the retry and the rest go through.
//!
//! Run it with
//! `cargo run -p integration --example reqwest_client --features reqwest-middleware`.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use reqwest::StatusCode;
use tower_limits::RateLimiter;
use tower_limits::error::BoxError;
use tower_limits::http::LimitMiddleware;

use common::Upstream;

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
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(LimitMiddleware::new(rate))
        .build();

    let mut succeeded = 0;
    for _ in 0..requests {
        let response = client
            .get(format!("http://{}/", upstream.addr))
            .send()
            .await?;
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
