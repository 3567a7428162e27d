//! An axum router with a limit per tenant (from the `x-tenant` header) and,
//! outside it, a looser limit per client address (axum's `ConnectInfo`):
//! over a limit, a request is answered `429` at once, with `Retry-After`
//! and `RateLimit` headers; admitted responses carry `RateLimit` too.
//!
//! Run it with `cargo run -p integration --example axum_tenants --features axum`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tower_limits::error::BoxError;
use tower_limits::http::TooManyRequestsLayer;
use tower_limits::limiters::FreshLimiter;
use tower_limits::store::Quota;
use tower_limits::{KeyedLimiter, RateLimiter};

/// Each tenant: 2 requests per 10 s.
const TENANT_QUOTA: u32 = 2;
const TENANT_WINDOW: Duration = Duration::from_secs(10);

/// The tenant a request is for; requests without one share "anonymous".
fn tenant_of(head: &http::request::Parts) -> String {
    let tenant = head
        .headers
        .get("x-tenant")
        .and_then(|value| value.to_str().ok());
    tenant.unwrap_or("anonymous").to_owned()
}

/// The application, limited per client address and per tenant.
pub fn app(per_peer: KeyedLimiter<IpAddr, RateLimiter>) -> Result<Router, BoxError> {
    let per_tenant = KeyedLimiter::builder(|tenant: &String| {
        RateLimiter::builder(tenant.clone(), TENANT_QUOTA, TENANT_WINDOW)
            .without_backoff()
            .build()
            .expect("valid configuration")
    })
    .max_keys(10_000)
    .build()?;
    let limits = ServiceBuilder::new()
        // Outermost: a flood from one address is turned away first.
        .layer(TooManyRequestsLayer::new(per_peer))
        .layer(
            TooManyRequestsLayer::with_key(per_tenant, tenant_of)
                .advertise("tenant")? // RateLimit-Policy: "tenant";q=2;w=10
                .headers_on_success(),
        );
    Ok(Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(limits))
}

/// One answer, as the client saw it.
#[derive(Debug)]
pub struct Answer {
    /// The tenant asked for.
    pub tenant: &'static str,
    /// The status.
    pub status: StatusCode,
    /// The response headers.
    pub headers: HeaderMap,
}

/// Serves the app on loopback, then sends a few requests for two tenants.
/// Also says whether the per-address limit keyed the client by its address.
pub async fn run() -> Result<(Vec<Answer>, bool), BoxError> {
    // Each address: 100 a second, 20 at once; every key's state is its own.
    let quota = Quota::gcra(100, Duration::from_secs(1))?
        .with_burst(20)?
        .with_pacing_tolerance()?;
    let template = RateLimiter::in_memory(quota);
    let per_peer = KeyedLimiter::builder(move |_: &IpAddr| template.fresh()).build()?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = app(per_peer.clone())?.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut answers = Vec::new();
    for tenant in ["acme", "acme", "acme", "globex"] {
        let request = Request::get(format!("http://{addr}/"))
            .header("x-tenant", tenant)
            .body(Empty::new())?;
        let response = client.request(request).await?;
        let (status, headers) = (response.status(), response.headers().clone());
        answers.push(Answer {
            tenant,
            status,
            headers,
        });
    }
    // The client's key exists already if `ConnectInfo` was read.
    let keys = per_peer.len();
    per_peer.limiter(&IpAddr::V4(Ipv4Addr::LOCALHOST))?;
    Ok((answers, per_peer.len() == keys))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let (answers, _) = run().await?;
    for answer in answers {
        println!(
            "{} -> {} {:?}",
            answer.tenant, answer.status, answer.headers
        );
    }
    Ok(())
}
