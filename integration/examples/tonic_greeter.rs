//! A tonic server limited per client with `TooManyRequestsLayer`, and a
//! tonic client that obeys its `RESOURCE_EXHAUSTED` answers with
//! `FeedbackLayer`: the server allows one call per client every 2 s; the
//! client, limited far too loosely, gets refused once, then pauses for the
//! `Retry-After` the server sent instead of being refused again.
//!
//! No `protoc`: the messages derive `prost::Message` by hand and the service
//! uses tonic's codegen-free `tonic::server::Grpc` / `tonic::client::Grpc`.
//!
//! Run it with `cargo run -p integration --example tonic_greeter --features tonic`.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::PathAndQuery;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tonic::body::Body;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Status};
use tonic_prost::ProstCodec;
use tower::{Service, ServiceBuilder};
use tower_limits::error::BoxError;
use tower_limits::http::{FeedbackLayer, TooManyRequestsLayer};
use tower_limits::{KeyedLimiter, LimitLayer, RateLimiter};

const SAY_HELLO: &str = "/greeter.Greeter/SayHello";

/// `message HelloRequest { string name = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloRequest {
    /// Who to greet.
    #[prost(string, tag = "1")]
    pub name: String,
}

/// `message HelloReply { string message = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloReply {
    /// The greeting.
    #[prost(string, tag = "1")]
    pub message: String,
}

/// What the client saw.
#[derive(Debug)]
pub struct Summary {
    /// The status of each call, in order.
    pub codes: Vec<Code>,
    /// How long the call after the refusal waited before it was sent.
    pub paused: Duration,
}

/// `service Greeter { rpc SayHello(HelloRequest) returns (HelloReply); }`
#[derive(Clone, Copy, Debug)]
pub struct Greeter;

impl tonic::server::NamedService for Greeter {
    const NAME: &'static str = "greeter.Greeter";
}

impl tonic::server::UnaryService<HelloRequest> for Greeter {
    type Response = HelloReply;
    type Future = Ready<Result<tonic::Response<HelloReply>, Status>>;

    fn call(&mut self, request: tonic::Request<HelloRequest>) -> Self::Future {
        let message = format!("hello, {}", request.into_inner().name);
        ready(Ok(tonic::Response::new(HelloReply { message })))
    }
}

type BoxedResponse = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

impl Service<http::Request<Body>> for Greeter {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxedResponse;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        Box::pin(async move {
            if request.uri().path() != SAY_HELLO {
                return Ok(Status::unimplemented("no such method").into_http());
            }
            let codec = ProstCodec::<HelloReply, HelloRequest>::default();
            Ok(tonic::server::Grpc::new(codec)
                .unary(Greeter, request)
                .await)
        })
    }
}

/// Serves the greeter on a loopback port: one call per client every 2 s.
async fn serve() -> Result<SocketAddr, BoxError> {
    let per_client = KeyedLimiter::builder(|peer: &IpAddr| {
        RateLimiter::builder(peer.to_string(), 1, Duration::from_secs(2))
            .without_backoff()
            .build()
            .expect("valid configuration")
    })
    .build()?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = Server::builder()
        .layer(TooManyRequestsLayer::new(per_client)) // keyed by tonic's TcpConnectInfo
        .add_service(Greeter)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);
    Ok(addr)
}

/// Starts the server, then makes three calls through a client whose own
/// limit (100 a second) is far too loose.
pub async fn run() -> Result<Summary, BoxError> {
    let addr = serve().await?;
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let loose = RateLimiter::builder("greeter", 100, Duration::from_secs(1))
        .without_backoff()
        .build()?;
    let limited = ServiceBuilder::new()
        .layer(FeedbackLayer::new(loose.clone()))
        .layer(LimitLayer::new(loose))
        .service(channel);
    let mut client = tonic::client::Grpc::new(limited);

    let mut codes = Vec::new();
    let mut paused = Duration::ZERO;
    for name in ["ada", "grace", "alan"] {
        let start = Instant::now();
        client.ready().await?; // waits while the server's pause holds
        paused = start.elapsed();
        codes.push(say_hello(&mut client, name).await);
    }
    Ok(Summary { codes, paused })
}

/// Calls `SayHello` through `client`, which is ready; the status code.
pub async fn say_hello<T>(client: &mut tonic::client::Grpc<T>, name: &str) -> Code
where
    T: tonic::client::GrpcService<Body>,
    T::Error: Into<BoxError>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<BoxError>,
{
    match greet(client, name).await {
        Ok(message) => {
            println!("{message}");
            Code::Ok
        }
        Err(status) => {
            println!("refused: {}", status.message());
            status.code()
        }
    }
}

/// Calls `SayHello` through `client`, which is ready; the greeting, or the
/// status of the refusal.
pub async fn greet<T>(client: &mut tonic::client::Grpc<T>, name: &str) -> Result<String, Status>
where
    T: tonic::client::GrpcService<Body>,
    T::Error: Into<BoxError>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<BoxError>,
{
    let request = tonic::Request::new(HelloRequest {
        name: name.to_owned(),
    });
    let path = PathAndQuery::from_static(SAY_HELLO);
    let codec = ProstCodec::<HelloRequest, HelloReply>::default();
    let reply = client.unary(request, path, codec).await?;
    Ok(reply.into_inner().message)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let summary = run().await?;
    println!("{summary:?}");
    Ok(())
}
