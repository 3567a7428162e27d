//! The layers' refusals reach gRPC callers as `RESOURCE_EXHAUSTED`, through
//! real tonic servers and clients on loopback: a server whose own limit
//! refuses a call answers with that status (not a reset stream), and a
//! client whose own limit refuses a call reports it (not `UNKNOWN`). The
//! status says which limit refused and, when the limit named a retry
//! instant, carries the wait in `grpc-retry-pushback-ms` and `retry-after`;
//! `TooManyRequestsLayer` answers `UNAVAILABLE` when configured so.
#![cfg(feature = "tonic")]

#[path = "../examples/tonic_greeter.rs"]
#[allow(dead_code, unreachable_pub)]
mod tonic_greeter;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::Code;
use tonic::client::Grpc;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic_greeter::{Greeter, greet, say_hello};
use tower::Layer;
use tower_limits::http::TooManyRequestsLayer;
use tower_limits::store::Quota;
use tower_limits::{ConcurrencyLimiter, KeyedLimiter, LimitLayer, RateLimiter};

/// One call a minute.
fn one_a_minute() -> RateLimiter {
    RateLimiter::in_memory(Quota::gcra(1, Duration::from_secs(60)).expect("valid rate"))
}

async fn connect(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("valid URI")
        .connect()
        .await
        .expect("the server listens")
}

async fn listen() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let addr = listener.local_addr().expect("bound");
    (listener, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tonic_server_answers_its_layers_refusals_resource_exhausted() {
    let (listener, addr) = listen().await;
    tokio::spawn(
        Server::builder()
            .layer(LimitLayer::new(one_a_minute()).reject())
            .add_service(Greeter)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let mut client = Grpc::new(connect(addr).await);

    let mut codes = Vec::new();
    for name in ["ada", "grace", "alan"] {
        client.ready().await.expect("the channel is ready");
        codes.push(say_hello(&mut client, name).await);
    }
    assert_eq!(
        codes,
        [Code::Ok, Code::ResourceExhausted, Code::ResourceExhausted]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tonic_client_reports_its_own_layers_refusals_as_resource_exhausted() {
    let (listener, addr) = listen().await;
    tokio::spawn(
        Server::builder()
            .add_service(Greeter)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let channel = connect(addr).await;

    let mut rate_limited = Grpc::new(
        LimitLayer::new(one_a_minute())
            .reject()
            .layer(channel.clone()),
    );
    let mut codes = Vec::new();
    for name in ["ada", "grace"] {
        rate_limited
            .ready()
            .await
            .expect("refusals come from the call");
        codes.push(say_hello(&mut rate_limited, name).await);
    }
    assert_eq!(codes, [Code::Ok, Code::ResourceExhausted]);

    // A full line (`Overloaded`) too: the only slot is held by a ready clone.
    let layer = LimitLayer::new(ConcurrencyLimiter::new(1).expect("valid limit"));
    let mut holder = Grpc::new(layer.clone().max_waiting(0).layer(channel.clone()));
    let mut turned_away = Grpc::new(layer.max_waiting(0).layer(channel));
    holder.ready().await.expect("the slot is free");
    turned_away
        .ready()
        .await
        .expect("refusals come from the call");
    assert_eq!(
        say_hello(&mut turned_away, "alan").await,
        Code::ResourceExhausted
    );
    assert_eq!(say_hello(&mut holder, "alan").await, Code::Ok);
}

/// Two calls to a server at `addr` that allows one a minute: the first is
/// admitted; the status of the second, once its metadata is checked to
/// announce the minute's wait (`grpc-retry-pushback-ms`, `retry-after`).
async fn second_call_of_a_minute(addr: SocketAddr) -> tonic::Status {
    let mut client = Grpc::new(connect(addr).await);
    client.ready().await.expect("the channel is ready");
    let greeting = greet(&mut client, "ada").await.expect("admitted");
    assert_eq!(greeting, "hello, ada");
    client.ready().await.expect("the channel is ready");
    let status = greet(&mut client, "grace").await.expect_err("one a minute");
    let read = |name| {
        let value = status.metadata().get(name);
        let value = value.unwrap_or_else(|| panic!("no {name} in {status:?}"));
        let value = value.to_str().expect("ASCII");
        value.parse::<u64>().expect("a number")
    };
    let millis = read("grpc-retry-pushback-ms");
    assert!((59_000..=60_000).contains(&millis), "{status:?}");
    assert_eq!(read("retry-after"), 60, "{status:?}");
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tonic_server_configured_so_answers_unavailable_with_pushback() {
    let (listener, addr) = listen().await;
    let per_client = KeyedLimiter::of(one_a_minute()).build().expect("valid");
    tokio::spawn(
        Server::builder()
            .layer(TooManyRequestsLayer::new(per_client).grpc_unavailable())
            .add_service(Greeter)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let status = second_call_of_a_minute(addr).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let message = status.message();
    assert!(
        message.starts_with("rate limited: retry after"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tonic_servers_reject_layer_sends_the_wait_it_knows() {
    let (listener, addr) = listen().await;
    tokio::spawn(
        Server::builder()
            .layer(LimitLayer::new(one_a_minute()).reject())
            .add_service(Greeter)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let status = second_call_of_a_minute(addr).await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let message = status.message();
    assert!(message.starts_with("rate limited: retry in"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_shed_over_grpc_says_it_is_one() {
    let (listener, addr) = listen().await;
    tokio::spawn(
        Server::builder()
            .add_service(Greeter)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let channel = connect(addr).await;
    let layer = LimitLayer::new(ConcurrencyLimiter::new(1).expect("valid limit")).reject();
    let mut holder = Grpc::new(layer.clone().layer(channel.clone()));
    let mut shed = Grpc::new(layer.layer(channel));

    holder.ready().await.expect("the slot is free"); // and now held
    shed.ready().await.expect("refusals come from the call");
    let status = greet(&mut shed, "alan")
        .await
        .expect_err("the slot is held");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().starts_with("concurrency limit reached"),
        "{status:?}"
    );
    // No instant to name: a running call frees the slot.
    assert!(status.metadata().get("grpc-retry-pushback-ms").is_none());
    assert_eq!(say_hello(&mut holder, "ada").await, Code::Ok);
}
