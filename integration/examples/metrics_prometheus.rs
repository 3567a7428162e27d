//! A limited client's decisions as Prometheus metrics: named layers report
//! through the `metrics` facade, `metrics-exporter-prometheus` renders
//! them, and an axum route serves them on a loopback port for Prometheus
//! to scrape.
//!
//! The client sends 40 calls through a layer named `upstream` (10 a
//! second, burst 10: the rest wait) and 10 through a layer named `search`
//! that refuses at once past 5. Then the example prints the exposition text
//! of `/metrics` (the decisions by outcome, the wait histogram) and where
//! it is served.
//!
//! Run it with `cargo run -p integration --example metrics_prometheus --features metrics,axum`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tower::{Layer, Service, ServiceExt, service_fn};
use tower_limits::error::{BoxError, Rejected};
use tower_limits::store::Quota;
use tower_limits::{LimitLayer, RateLimiter};

/// Installs the Prometheus recorder (once per process: layers register
/// their metrics when named, so it comes first), runs the calls, and serves
/// `/metrics` on a loopback port; where.
pub async fn run() -> Result<SocketAddr, BoxError> {
    let prometheus = PrometheusBuilder::new().install_recorder()?;

    let upstream = Quota::gcra(10, Duration::from_secs(1))?
        .with_burst(10)?
        .with_pacing_tolerance()?;
    let upstream = LimitLayer::new(RateLimiter::in_memory(upstream)).name("upstream");
    let search = Quota::gcra(5, Duration::from_secs(60))?
        .with_burst(5)?
        .with_pacing_tolerance()?;
    let search = LimitLayer::new(RateLimiter::in_memory(search))
        .name("search")
        .reject();
    let echo = service_fn(|n: u32| async move { Ok::<_, Infallible>(n) });

    let calls: Vec<_> = (0..40)
        .map(|n| tokio::spawn(upstream.layer(echo).oneshot(n)))
        .collect();
    for call in calls {
        call.await??;
    }
    let mut search = search.layer(echo);
    for n in 0..10 {
        match search.ready().await?.call(n).await {
            Err(error) if error.is::<Rejected>() => {} // refused: over its quota
            outcome => drop(outcome?),
        }
    }
    serve(prometheus).await
}

/// Serves `prometheus`'s exposition at `/metrics` on a loopback port.
async fn serve(prometheus: PrometheusHandle) -> Result<SocketAddr, BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = Router::new().route("/metrics", get(move || async move { prometheus.render() }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let addr = run().await?;
    let body = scrape(addr).await?;
    println!("{body}");
    println!("(served at http://{addr}/metrics)");
    Ok(())
}

/// GET `/metrics` with hyper.
pub async fn scrape(addr: SocketAddr) -> Result<String, BoxError> {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<bytes::Bytes>>();
    let response = client
        .get(format!("http://{addr}/metrics").parse()?)
        .await?;
    let body = response.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8(body.to_vec())?)
}
