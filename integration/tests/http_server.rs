//! The server side: over-limit requests get 429 (gRPC: RESOURCE_EXHAUSTED)
//! with correct headers at once, or what a hook shapes from them, requests take their cost (413 for one that
//! can never fit), forged forwarded-for headers mint no new keys, and a
//! streaming body keeps its slot until it ends.
#![cfg(feature = "http")]

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Channel, Full};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt, service_fn};
use tower_limits::error::{LimiterError, Rejected};
use tower_limits::http::{
    ForwardedHeader, HttpLimitLayer, PeerAddr, PeerKey, TooManyRequestsLayer, TrustedProxies,
};
use tower_limits::limiter::{Admission, Denial, LimiterFuture};
use tower_limits::limiters::FreshLimiter;
use tower_limits::store::Quota;
use tower_limits::{
    ConcurrencyLimiter, KeyedLimiter, LimitLayer, Limiter, QuotaStatus, RateLimiter,
};

fn per_peer_rate(max: u32, window: Duration) -> KeyedLimiter<IpAddr, RateLimiter> {
    KeyedLimiter::builder(move |peer: &IpAddr| {
        RateLimiter::builder(peer.to_string(), max, window)
            .without_backoff()
            .build()
            .expect("valid configuration")
    })
    .build()
    .expect("valid configuration")
}

fn hello()
-> impl Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    service_fn(|_: Request<()>| async {
        Ok(Response::new(Full::new(Bytes::from_static(b"hello"))))
    })
}

fn from(peer: &str) -> Request<()> {
    let mut request = Request::new(());
    let peer: SocketAddr = peer.parse().expect("a socket address");
    request.extensions_mut().insert(PeerAddr(peer));
    request
}

/// One request through `service`, which never fails in these tests.
async fn send<S, B>(service: &mut S, request: Request<()>) -> Response<B>
where
    S: Service<Request<()>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    service.ready().await.unwrap().call(request).await.unwrap()
}

/// The whole body of `response`.
async fn body_of<B>(response: Response<B>) -> Bytes
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    response.into_body().collect().await.unwrap().to_bytes()
}

fn with_header(mut request: Request<()>, name: &'static str, value: &str) -> Request<()> {
    request
        .headers_mut()
        .insert(name, value.parse().expect("a header value"));
    request
}

/// `RateLimit`'s `t` is the draft's time until more quota is available,
/// on a 200 as on the 429 that follows it: with none left after the second
/// request, the time until the first leaves the window (not until the whole
/// quota is back), one second more than on the refusal a second later.
/// `RateLimit-Policy` is the limiter's own quota.
#[tokio::test(start_paused = true)]
async fn over_limit_requests_get_429_with_retry_after_and_ratelimit_headers() {
    let layer = TooManyRequestsLayer::new(per_peer_rate(2, Duration::from_secs(10)))
        .advertise("default")
        .unwrap()
        .headers_on_success();
    let mut service = layer.layer(hello());

    let first = send(&mut service, from("192.0.2.1:1000")).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["ratelimit"], "\"default\";r=1;t=10");
    assert_eq!(first.headers()["ratelimit-policy"], "\"default\";q=2;w=10");
    assert!(first.headers().get("retry-after").is_none());

    tokio::time::advance(Duration::from_millis(3_500)).await;
    let second = send(&mut service, from("192.0.2.1:1001")).await;
    // None left; one comes back when the first start leaves, in 6.5 s.
    assert_eq!(second.headers()["ratelimit"], "\"default\";r=0;t=7");

    tokio::time::advance(Duration::from_millis(1_000)).await;
    let refused = send(&mut service, from("192.0.2.1:1002")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // The first start leaves the window in 5.5 s: rounded up, never down.
    assert_eq!(refused.headers()["retry-after"], "6");
    assert_eq!(refused.headers()["ratelimit"], "\"default\";r=0;t=6");
    assert_eq!(
        refused.headers()["ratelimit-policy"],
        "\"default\";q=2;w=10"
    );
    assert!(body_of(refused).await.is_empty());

    // Another peer has its own limit.
    let other = send(&mut service, from("198.51.100.7:1000")).await;
    assert_eq!(other.status(), StatusCode::OK);
}

/// A JSON API shapes its refusals: its own body and content type, a header
/// of its own, the `Retry-After` and `RateLimit` headers kept; a hook that
/// removes a header removes it.
#[tokio::test(start_paused = true)]
async fn a_refusal_hook_answers_json_and_keeps_the_rate_limit_headers() {
    let layer = TooManyRequestsLayer::new(per_peer_rate(1, Duration::from_secs(10)))
        .advertise("default")
        .unwrap()
        .refusal(|rejected: &Rejected, mut head: Response<()>| {
            let headers = head.headers_mut();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            headers.insert("x-error-code", HeaderValue::from_static("quota"));
            headers.remove("ratelimit-policy");
            let wait = rejected.retry_at().map(|at| at - Instant::now());
            let body = serde_json::json!({
                "error": "too_many_requests",
                "retry_after_ms": wait.map(|wait| wait.as_millis() as u64),
            });
            head.map(|()| Full::new(Bytes::from(body.to_string())))
        });
    let mut service = layer.layer(hello());

    let admitted = send(&mut service, from("192.0.2.1:1000")).await;
    assert_eq!(admitted.status(), StatusCode::OK);
    let body = body_of(admitted).await;
    assert_eq!(&body[..], b"hello"); // admitted responses are untouched

    tokio::time::advance(Duration::from_secs(4)).await;
    let refused = send(&mut service, from("192.0.2.1:1001")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let headers = refused.headers();
    assert_eq!(headers[CONTENT_TYPE], "application/json");
    assert_eq!(headers["x-error-code"], "quota");
    assert_eq!(headers["retry-after"], "6");
    assert_eq!(headers["ratelimit"], "\"default\";r=0;t=6");
    assert!(headers.get("ratelimit-policy").is_none());
    let body = body_of(refused).await;
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"error": "too_many_requests", "retry_after_ms": 6000})
    );
}

/// A gRPC call keeps its trailers-only status whatever the HTTP hook does,
/// and carries the wait twice: `Retry-After` and `grpc-retry-pushback-ms`.
#[tokio::test(start_paused = true)]
async fn a_grpc_refusal_is_a_status_with_pushback_despite_the_hook() {
    let layer = TooManyRequestsLayer::new(per_peer_rate(1, Duration::from_secs(10)))
        .refusal(|_: &Rejected, head: Response<()>| head.map(|()| Full::new(Bytes::from("{}"))));
    let mut service = layer.layer(hello());
    let grpc = |peer| with_header(from(peer), "content-type", "application/grpc");

    send(&mut service, grpc("192.0.2.1:1000")).await;
    let refused = send(&mut service, grpc("192.0.2.1:1001")).await;
    assert_eq!(refused.status(), StatusCode::OK);
    let headers = refused.headers();
    assert_eq!(headers["grpc-status"], "8");
    assert_eq!(
        headers["grpc-message"],
        "rate limited: retry after 10000 ms"
    );
    assert_eq!(headers["grpc-retry-pushback-ms"], "10000");
    assert_eq!(headers["retry-after"], "10");
    assert!(body_of(refused).await.is_empty());
}

/// A reject-mode layer's refusal, in its HTTP form: the hook's answer with
/// `Retry-After` (1 s for a concurrency limit, which names no instant),
/// while a wait past the maximum stays an error.
#[tokio::test(start_paused = true)]
async fn a_reject_layers_refusal_is_answered_by_the_hook() {
    let limiter = ConcurrencyLimiter::new(1).unwrap();
    let layer = HttpLimitLayer::new(LimitLayer::new(limiter.clone()).reject()).refusal(
        |rejected: &Rejected, head: Response<()>| {
            let body = format!("{{\"error\":\"{rejected}\"}}");
            head.map(|()| Full::new(Bytes::from(body)))
        },
    );
    let mut service = layer.layer(hello());

    let running = send(&mut service, Request::new(())).await; // holds the slot
    let refused = send(&mut service, Request::new(())).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body = body_of(refused).await;
    assert_eq!(
        &body[..],
        br#"{"error":"concurrency limit reached: retry when a running call completes"}"#
    );
    drop(running);
    let admitted = send(&mut service, Request::new(())).await;
    assert_eq!(admitted.status(), StatusCode::OK);

    let waiting = HttpLimitLayer::new(LimitLayer::new(limiter).max_wait(Duration::from_secs(1)))
        .refusal(|_: &Rejected, head: Response<()>| head.map(|()| Full::new(Bytes::new())));
    let mut service = waiting.layer(hello());
    let error = service.ready().await.unwrap().call(Request::new(())).await;
    assert!(error.unwrap_err().is::<tower_limits::error::Elapsed>());
}

/// A limiter that counts how often its state is read.
#[derive(Clone)]
struct Reads {
    inner: RateLimiter,
    peeks: Arc<AtomicUsize>,
    statuses: Arc<AtomicUsize>,
}

impl Limiter for Reads {
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        self.inner.try_acquire_many(cost)
    }
    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        self.peeks.fetch_add(1, Ordering::SeqCst);
        self.inner.can_proceed()
    }
    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        self.peeks.fetch_add(1, Ordering::SeqCst);
        self.inner.peek(cost)
    }
    fn quota_status(&self) -> LimiterFuture<'_, Result<Option<QuotaStatus>, LimiterError>> {
        self.statuses.fetch_add(1, Ordering::SeqCst);
        self.inner.quota_status()
    }
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.inner.record_start()
    }
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.inner.record_completion()
    }
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        self.peeks.fetch_add(1, Ordering::SeqCst);
        self.inner.next_available_time()
    }
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.inner.set_next_available_time(at)
    }
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.inner.clear()
    }
}

/// The headers of every response cost one reading of the key's state (one
/// store round trip for a store-backed limiter), not a peek per step of a
/// search; a response without headers costs none.
#[tokio::test(start_paused = true)]
async fn ratelimit_headers_cost_one_state_read_per_response() {
    let (peeks, statuses) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let counters = (Arc::clone(&peeks), Arc::clone(&statuses));
    let per_peer = KeyedLimiter::builder(move |_: &IpAddr| Reads {
        inner: RateLimiter::builder("peer", 100, Duration::from_secs(60))
            .without_backoff()
            .build()
            .unwrap(),
        peeks: Arc::clone(&counters.0),
        statuses: Arc::clone(&counters.1),
    })
    .build()
    .unwrap();
    let advertised = TooManyRequestsLayer::new(per_peer.clone()).advertise("default");
    let mut service = advertised.unwrap().headers_on_success().layer(hello());
    for remaining in (95..100).rev() {
        let response = send(&mut service, from("192.0.2.1:1")).await;
        let expected = format!("\"default\";r={remaining};t=60");
        assert_eq!(response.headers()["ratelimit"], expected.as_str());
    }
    assert_eq!(statuses.load(Ordering::SeqCst), 5, "one read per response");
    assert_eq!(peeks.load(Ordering::SeqCst), 0, "no peeks");

    // Without headers on success, an admitted request reads nothing.
    let mut quiet = TooManyRequestsLayer::new(per_peer).layer(hello());
    send(&mut quiet, from("192.0.2.1:1")).await;
    assert_eq!(statuses.load(Ordering::SeqCst), 5);
}

#[tokio::test(start_paused = true)]
async fn a_sub_second_wait_is_advertised_as_one_second_not_zero() {
    let mut service =
        TooManyRequestsLayer::new(per_peer_rate(1, Duration::from_millis(300))).layer(hello());
    send(&mut service, from("192.0.2.1:1")).await;
    let refused = send(&mut service, from("192.0.2.1:2")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "1");
}

/// A request without a peer address (axum served without connect info)
/// has no key: it is answered 500, never counted under a key shared by
/// every such request, so it cannot use up another client's quota.
#[tokio::test(start_paused = true)]
async fn a_request_without_a_peer_address_is_answered_500_and_keyed_nowhere() {
    let per_peer = per_peer_rate(1, Duration::from_secs(60));
    let mut service = TooManyRequestsLayer::new(per_peer.clone()).layer(hello());
    for _ in 0..3 {
        let response = send(&mut service, Request::new(())).await;
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(response.headers().get("retry-after").is_none());
    }
    assert!(
        per_peer.is_empty(),
        "no key was made for peer-less requests"
    );
    let grpc = with_header(Request::new(()), "content-type", "application/grpc");
    let response = send(&mut service, grpc).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["grpc-status"], "13");
    // A client with an address still has its own quota.
    let response = send(&mut service, from("192.0.2.1:1")).await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn grpc_requests_get_resource_exhausted() {
    let mut service =
        TooManyRequestsLayer::new(per_peer_rate(1, Duration::from_secs(30))).layer(hello());
    let grpc = || {
        with_header(
            from("192.0.2.1:1"),
            "content-type",
            "application/grpc+proto",
        )
    };
    send(&mut service, grpc()).await;
    let refused = send(&mut service, grpc()).await;
    assert_eq!(
        refused.status(),
        StatusCode::OK,
        "gRPC errors travel in grpc-status"
    );
    assert_eq!(refused.headers()["grpc-status"], "8");
    assert_eq!(refused.headers()["content-type"], "application/grpc");
    assert_eq!(refused.headers()["retry-after"], "30");
    assert!(
        refused.headers()["grpc-message"]
            .to_str()
            .unwrap()
            .contains("30")
    );
}

/// A layer whose requests cost their `x-cost` header (1 without it), over
/// a token bucket of 10 per peer refilled at 10 a second, advertised as
/// the policy "tokens".
fn costed() -> TooManyRequestsLayer<IpAddr, RateLimiter> {
    let quota = Quota::token_bucket(10, 10, Duration::from_secs(1))
        .and_then(Quota::with_pacing_tolerance)
        .expect("valid configuration");
    let template = RateLimiter::in_memory(quota);
    let per_peer = KeyedLimiter::builder(move |_: &IpAddr| template.fresh())
        .build()
        .expect("valid configuration");
    let layer = TooManyRequestsLayer::new(per_peer).cost(|head: &http::request::Parts| {
        let cost = head
            .headers
            .get("x-cost")
            .and_then(|value| value.to_str().ok());
        cost.and_then(|cost| cost.parse().ok()).unwrap_or(1)
    });
    layer.advertise("tokens").expect("a valid name")
}

#[tokio::test(start_paused = true)]
async fn a_request_takes_its_cost_and_waits_for_all_of_it() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = {
        let calls = Arc::clone(&calls);
        service_fn(move |_: Request<()>| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(Response::new(())) }
        })
    };
    let mut service = costed().layer(counted);
    let costing = |cost: &str| with_header(from("192.0.2.1:1"), "x-cost", cost);

    assert_eq!(
        send(&mut service, costing("7")).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        send(&mut service, costing("3")).await.status(),
        StatusCode::OK
    );
    // Empty: 4 tokens take 400 ms to come back, advertised as 1 s.
    let refused = send(&mut service, costing("4")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "1");
    tokio::time::advance(Duration::from_millis(399)).await;
    let refused = send(&mut service, costing("4")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // Three tokens are there, the fourth 1 ms away: `r` says so, and `t`
    // is the wait for more than those three (rounded up), as on a 200.
    assert_eq!(refused.headers()["ratelimit"], "\"tokens\";r=3;t=1");
    assert_eq!(refused.headers()["ratelimit-policy"], "\"tokens\";q=10;w=1");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(
        send(&mut service, costing("4")).await.status(),
        StatusCode::OK
    );
    // Another peer has its own bucket.
    let other = with_header(from("192.0.2.2:1"), "x-cost", "10");
    assert_eq!(send(&mut service, other).await.status(), StatusCode::OK);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        4,
        "refused requests never reach the service"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cost_that_can_never_fit_is_refused_without_retry_after() {
    let mut service = costed().layer(hello());
    let too_large = send(
        &mut service,
        with_header(from("192.0.2.1:1"), "x-cost", "11"),
    )
    .await;
    assert_eq!(too_large.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(too_large.headers().get("retry-after").is_none());

    let grpc = with_header(from("192.0.2.1:1"), "content-type", "application/grpc");
    let too_large = send(&mut service, with_header(grpc, "x-cost", "11")).await;
    assert_eq!(too_large.headers()["grpc-status"], "3", "INVALID_ARGUMENT");
    let message = too_large.headers()["grpc-message"].to_str().unwrap();
    assert!(
        message.contains("11") && message.contains("10"),
        "{message}"
    );
    // Nothing was taken: the whole bucket is still there.
    let full = send(
        &mut service,
        with_header(from("192.0.2.1:1"), "x-cost", "10"),
    )
    .await;
    assert_eq!(full.status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn forwarded_for_from_an_untrusted_peer_mints_no_new_keys() {
    let layer = TooManyRequestsLayer::new(per_peer_rate(1, Duration::from_secs(60)));
    let mut service = layer.layer(hello());
    for spoof in ["1.1.1.1", "2.2.2.2", "3.3.3.3, 4.4.4.4"] {
        let request = with_header(from("192.0.2.9:1"), "x-forwarded-for", spoof);
        send(&mut service, request).await;
        let request = with_header(from("192.0.2.9:1"), "forwarded", &format!("for={spoof}"));
        send(&mut service, request).await;
    }
    assert_eq!(layer.keyed().len(), 1, "only the peer address is a key");
}

#[tokio::test(start_paused = true)]
async fn behind_trusted_proxies_the_rightmost_untrusted_address_is_the_key() {
    let proxies = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
    let key = PeerKey::behind_proxies(proxies, ForwardedHeader::XForwardedFor);
    let layer = TooManyRequestsLayer::with_key(per_peer_rate(1, Duration::from_secs(60)), key);
    let mut service = layer.layer(hello());

    // The proxy appends the real client; whatever the client wrote is left of it.
    let through_proxy = |forged: &str| {
        let chain = format!("{forged}198.51.100.4, 10.0.0.3");
        with_header(from("10.0.0.2:443"), "x-forwarded-for", &chain)
    };
    let first = send(&mut service, through_proxy("")).await;
    assert_eq!(first.status(), StatusCode::OK);
    for forged in [
        "203.0.113.1, ",
        "203.0.113.2, ",
        "garbage, ",
        "unknown, 203.0.113.3, ",
    ] {
        let response = send(&mut service, through_proxy(forged)).await;
        assert_eq!(
            response.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{forged:?} got a fresh key"
        );
    }
    assert_eq!(layer.keyed().len(), 1);
    assert!(
        layer
            .keyed()
            .limiter(&"198.51.100.4".parse().unwrap())
            .unwrap()
            .name()
            .contains("198.51.100.4")
    );

    // A direct client (not a proxy) is keyed by its own address.
    let direct = with_header(from("198.51.100.99:1"), "x-forwarded-for", "198.51.100.4");
    let response = send(&mut service, direct).await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn ipv6_clients_cannot_rotate_through_their_64() {
    let layer = TooManyRequestsLayer::new(per_peer_rate(1, Duration::from_secs(60)));
    let mut service = layer.layer(hello());
    send(&mut service, from("[2001:db8:0:1::1]:1")).await;
    let rotated = send(&mut service, from("[2001:db8:0:1::ffff]:1")).await;
    assert_eq!(rotated.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(layer.keyed().len(), 1);
}

/// A service whose response bodies stay open until the test sends them.
fn streaming(
    bodies: mpsc::UnboundedSender<http_body_util::channel::Sender<Bytes>>,
) -> impl Service<Request<()>, Response = Response<Channel<Bytes>>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    service_fn(move |_: Request<()>| {
        let (sender, body) = Channel::new(1);
        bodies.send(sender).expect("the test holds the receiver");
        async move { Ok(Response::new(body)) }
    })
}

#[tokio::test(start_paused = true)]
async fn a_streaming_body_keeps_its_server_slot_until_it_ends() {
    let one_at_a_time = KeyedLimiter::builder(|_: &IpAddr| ConcurrencyLimiter::new(1).unwrap())
        .build()
        .unwrap();
    let (bodies, mut senders) = mpsc::unbounded_channel();
    let mut service = TooManyRequestsLayer::new(one_at_a_time).layer(streaming(bodies));

    let open = send(&mut service, from("192.0.2.1:1")).await;
    let mut sender = senders.recv().await.unwrap();
    let refused = send(&mut service, from("192.0.2.1:2")).await;
    assert_eq!(
        refused.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "headers sent, body still open"
    );
    assert_eq!(refused.headers()["retry-after"], "1");

    sender
        .send_data(Bytes::from_static(b"chunk"))
        .await
        .unwrap();
    drop(sender); // the stream ends
    let body = open.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"chunk");
    let after = send(&mut service, from("192.0.2.1:3")).await;
    assert_eq!(after.status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_streaming_body_keeps_its_client_slot_until_it_ends_or_is_dropped() {
    let limiter = ConcurrencyLimiter::new(1).unwrap();
    let (bodies, mut senders) = mpsc::unbounded_channel();
    let layer = HttpLimitLayer::new(LimitLayer::new(limiter.clone()).reject());
    let mut client = layer.layer(streaming(bodies));

    let open = send(&mut client, Request::new(())).await;
    let sender = senders.recv().await.unwrap();
    assert_eq!(limiter.running(), 1);
    assert!(
        client
            .ready()
            .await
            .unwrap()
            .call(Request::new(()))
            .await
            .is_err(),
        "the open body holds the only slot"
    );

    drop(open); // the caller gave up on the body
    assert_eq!(limiter.running(), 0);
    drop(sender);
    let finished = send(&mut client, Request::new(())).await;
    drop(senders.recv().await.unwrap());
    finished.into_body().collect().await.unwrap();
    assert_eq!(limiter.running(), 0);
}
