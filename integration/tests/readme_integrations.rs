//! The README's integration snippets, verbatim, run against loopback peers:
//! an axum server limited per client IP, a hyper client obeying its
//! upstream's 429s, the same with reqwest-middleware, a tonic server limited
//! per client. Each snippet sits between `README:begin` and `README:end`
//! lines, and the first test checks that the README shows exactly that text.
#![cfg(all(feature = "axum", feature = "tonic"))]
// The client example brings the loopback upstream of `examples/common`.
#![allow(clippy::duplicate_mod)]

#[path = "../examples/common/mod.rs"]
#[allow(dead_code)]
mod common;
#[path = "../examples/tonic_greeter.rs"]
#[allow(dead_code, unreachable_pub)]
mod tonic_greeter;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tonic::Code;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic_greeter::{Greeter, say_hello};
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_limits::error::BoxError;
use tower_limits::http::{FeedbackLayer, TooManyRequestsLayer};
use tower_limits::store::Quota;
use tower_limits::{KeyedLimiter, LimitLayer, RateLimiter};

/// The snippets of this file, by name, dedented.
fn snippets() -> Vec<(String, String)> {
    let source = include_str!("readme_integrations.rs");
    let mut snippets = Vec::new();
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.trim().strip_prefix("// README:begin ") else {
            continue;
        };
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|line| line.trim() != "// README:end")
            .collect();
        let indent = body
            .iter()
            .filter(|line| !line.trim().is_empty())
            .map(|line| line.len() - line.trim_start().len())
            .min()
            .unwrap_or(0);
        let text: Vec<&str> = body
            .iter()
            .map(|line| line.get(indent..).unwrap_or(""))
            .collect();
        snippets.push((name.to_owned(), text.join("\n")));
    }
    snippets
}

#[test]
fn the_readme_shows_each_snippet_as_tested() {
    let readme = include_str!("../../README.md");
    let snippets = snippets();
    assert_eq!(snippets.len(), 4, "four integrations");
    for (name, text) in snippets {
        assert!(
            readme.contains(&text),
            "the README lacks the {name} snippet:\n{text}"
        );
    }
}

async fn serve_axum(listener: TcpListener) -> Result<(), BoxError> {
    // README:begin axum
    // One request per 2 s for each client IP, in bursts of up to 5.
    let quota = Quota::gcra(1, Duration::from_secs(2))?.with_burst(5)?;
    let per_ip = KeyedLimiter::of(RateLimiter::in_memory(quota)).build()?;
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(TooManyRequestsLayer::new(per_ip).advertise("per-ip")?) // 429, Retry-After, RateLimit headers
        .into_make_service_with_connect_info::<SocketAddr>(); // the peer is the key
    axum::serve(listener, app).await?;
    // README:end
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_per_ip_snippet_refuses_past_the_burst() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(serve_axum(listener));
    let http = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();

    let mut statuses = Vec::new();
    for _ in 0..6 {
        let response = http.get(uri.parse().unwrap()).await.unwrap();
        statuses.push(response.status());
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            let headers = response.headers();
            assert_eq!(headers["retry-after"], "2");
            assert_eq!(headers["ratelimit"], "\"per-ip\";r=0;t=2");
            assert_eq!(headers["ratelimit-policy"], "\"per-ip\";q=5;w=10");
        }
    }
    let mut expected = vec![StatusCode::OK; 5];
    expected.push(StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(statuses, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_snippet_pauses_on_its_upstreams_429s() -> Result<(), BoxError> {
    // An upstream allowing 4 a second, which the client does not know.
    let upstream = common::Upstream::serve(4, Duration::from_secs(1)).await?;
    let uri = format!("http://{}/", upstream.addr);

    // README:begin client
    let rate = RateLimiter::builder("upstream", 50, Duration::from_secs(1))
        .without_backoff()
        .build()?;
    let mut client = ServiceBuilder::new()
        .layer(FeedbackLayer::new(rate.clone())) // a 429's Retry-After pauses every clone
        .layer(LimitLayer::new(rate))
        .service(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());
    // README:end

    let mut succeeded = 0;
    while succeeded < 12 {
        let request = Request::get(&uri).body(Full::default())?;
        let response = client.ready().await?.call(request).await?;
        succeeded += u32::from(response.status() == StatusCode::OK);
        response.into_body().collect().await?;
    }
    // 12 at 4 a second: the client is refused about once per second of
    // pause, where at 50 a second without the feedback it would be refused
    // dozens of times.
    let refused = upstream.refused.load(Ordering::SeqCst);
    assert!(refused <= 3, "{refused} refusals for 12 successes");
    Ok(())
}

#[cfg(feature = "reqwest-middleware")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reqwest_snippet_pauses_and_retries_its_upstreams_429s() -> Result<(), BoxError> {
    use tower_limits::http::LimitMiddleware;

    // An upstream allowing 4 a second, which the client does not know.
    let upstream = common::Upstream::serve(4, Duration::from_secs(1)).await?;
    let uri = format!("http://{}/", upstream.addr);
    let rate = RateLimiter::builder("upstream", 50, Duration::from_secs(1))
        .without_backoff()
        .build()?;

    // README:begin reqwest
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(LimitMiddleware::new(rate)) // limit, Retry-After feedback, retries
        .build();
    // README:end

    for _ in 0..12 {
        let response = client.get(&uri).send().await?;
        assert_eq!(response.status(), StatusCode::OK); // refusals were retried
    }
    let refused = upstream.refused.load(Ordering::SeqCst);
    assert!(
        (1..=3).contains(&refused),
        "{refused} refusals for 12 successes"
    );
    Ok(())
}

async fn serve_tonic(listener: TcpListener, greeter: Greeter) -> Result<(), BoxError> {
    // README:begin tonic
    let quota = Quota::gcra(1, Duration::from_secs(2))?.with_burst(5)?;
    let per_client = KeyedLimiter::of(RateLimiter::in_memory(quota)).build()?;
    Server::builder()
        .layer(TooManyRequestsLayer::new(per_client)) // keyed by tonic's TcpConnectInfo
        .add_service(greeter)
        .serve_with_incoming(TcpIncoming::from(listener))
        .await?;
    // README:end
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_snippet_answers_resource_exhausted_past_the_burst() -> Result<(), BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(serve_tonic(listener, Greeter));
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = tonic::client::Grpc::new(channel);

    let mut codes = Vec::new();
    for _ in 0..6 {
        client.ready().await?;
        codes.push(say_hello(&mut client, "ada").await);
    }
    let mut expected = vec![Code::Ok; 5];
    expected.push(Code::ResourceExhausted);
    assert_eq!(codes, expected);
    Ok(())
}
