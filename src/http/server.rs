//! [`TooManyRequestsLayer`]: a server answers over-limit requests at once
//! with `429 Too Many Requests` (gRPC: `RESOURCE_EXHAUSTED`), `Retry-After`
//! and `RateLimit` headers; [`MakeRefusal`] shapes that answer.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use super::body::LimitBody;
use super::peer::{KeyOf, PeerKey};
use super::ratelimit::{
    RATELIMIT, RATELIMIT_POLICY, RateLimitPolicy, RateLimitStatus, checked_name,
};
use super::retry_after::RetryAfter;
use crate::error::{ConfigError, CostTooHigh, LimiterError, Rejected};
use crate::limiter::{Admission, Limiter, Permit};
use crate::limiters::KeyedLimiter;

/// The `Retry-After` of a denial that names no instant (a concurrency
/// limit: "when a running call completes").
const UNKNOWN_WAIT: Duration = Duration::from_secs(1);
/// gRPC's `RESOURCE_EXHAUSTED`.
const GRPC_RESOURCE_EXHAUSTED: &str = "8";
/// gRPC's `INVALID_ARGUMENT`.
const GRPC_INVALID_ARGUMENT: &str = "3";
/// gRPC's `UNAVAILABLE`.
const GRPC_UNAVAILABLE: &str = "14";
/// gRPC's `INTERNAL`.
const GRPC_INTERNAL: &str = "13";
/// gRPC server pushback (gRFC A6), in milliseconds.
const GRPC_RETRY_PUSHBACK_MS: &str = "grpc-retry-pushback-ms";

/// Limits a server per client (peer address by default) and answers an
/// over-limit request at once, without calling the service:
///
/// * HTTP: `429 Too Many Requests` with `Retry-After` in whole seconds,
///   rounded up (never `0` for a positive wait; `1` when the limit names no
///   instant, as a concurrency limit does), and an empty body, or what a
///   [`refusal`](TooManyRequestsLayer::refusal) hook makes of it;
/// * gRPC (a request whose `content-type` starts with `application/grpc`):
///   `200 OK` with `grpc-status: 8` (`RESOURCE_EXHAUSTED`, or 14,
///   `UNAVAILABLE`, with
///   [`grpc_unavailable`](TooManyRequestsLayer::grpc_unavailable)), a
///   `grpc-message` saying which limit refused, the same `Retry-After` and
///   the wait in `grpc-retry-pushback-ms`, as tonic clients expect;
/// * once it [`advertise`](TooManyRequestsLayer::advertise)s the limit,
///   `RateLimit` and `RateLimit-Policy` headers too, read from the key's
///   limiter, and on admitted responses as well with
///   [`headers_on_success`](TooManyRequestsLayer::headers_on_success).
///
/// A request costs one unit of its key's limit, or what
/// [`cost`](TooManyRequestsLayer::cost) reads from its head.
///
/// It builds on [`KeyedLimiter`]: one limiter per key in bounded memory.
/// The key is the peer address by default ([`PeerKey`], which reads
/// forwarded-for headers only behind proxies you trust), or whatever
/// [`with_key`](TooManyRequestsLayer::with_key) takes from the request
/// head (a tenant header, an API key).
///
/// An admitted call holds its permit until its response body ends
/// ([`LimitBody`]), so a concurrency limit holds for streaming responses.
/// When the limiter itself fails (an unreachable store) the answer is
/// `503 Service Unavailable` (gRPC `UNAVAILABLE`), with a warning logged.
/// A request without a key (the default [`PeerKey`] finds no peer address:
/// an axum app served without
/// `into_make_service_with_connect_info::<SocketAddr>()`, a hyper server
/// that does not insert [`PeerAddr`](super::PeerAddr)) is answered `500
/// Internal Server Error` (gRPC `INTERNAL`), and the layer logs an error
/// saying so the first time: keying such requests together would turn a
/// limit per client into one limit for everyone.
///
/// The service is `Clone` and never fails by itself, so it fits axum's
/// `Router::layer`, tonic's `Server::layer` and hyper.
///
/// ```
/// use std::net::IpAddr;
/// use std::time::Duration;
/// use http::{Request, Response, StatusCode};
/// use tower::{service_fn, Layer, Service, ServiceExt};
/// use tower_limits::http::{PeerAddr, TooManyRequestsLayer};
/// use tower_limits::{KeyedLimiter, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Two requests a minute per client address.
/// let per_peer = KeyedLimiter::builder(|peer: &IpAddr| {
///     RateLimiter::builder(peer.to_string(), 2, Duration::from_secs(60))
///         .without_backoff()
///         .build()
///         .expect("valid configuration")
/// })
/// .build()?;
/// let layer = TooManyRequestsLayer::new(per_peer).advertise("default")?;
/// let mut service = layer.layer(service_fn(|_: Request<String>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(String::from("hello")))
/// }));
///
/// let request = || {
///     let mut request = Request::new(String::new());
///     request.extensions_mut().insert(PeerAddr("192.0.2.1:5000".parse().unwrap()));
///     request
/// };
/// for _ in 0..2 {
///     assert_eq!(service.ready().await?.call(request()).await?.status(), StatusCode::OK);
/// }
/// let refused = service.ready().await?.call(request()).await?;
/// assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
/// assert_eq!(refused.headers()["retry-after"], "60");
/// assert_eq!(refused.headers()["ratelimit"], "\"default\";r=0;t=60");
/// assert_eq!(refused.headers()["ratelimit-policy"], "\"default\";q=2;w=60");
/// # Ok(())
/// # }
/// ```
pub struct TooManyRequestsLayer<K, L, X = PeerKey, R = DefaultRefusal> {
    keyed: KeyedLimiter<K, L>,
    key_of: Arc<X>,
    cost_of: Option<Arc<CostOf>>,
    advertise: Arc<Advertise>,
    refusal: Arc<R>,
    /// gRPC's `UNAVAILABLE` on refusals instead of `RESOURCE_EXHAUSTED`.
    grpc_unavailable: bool,
    /// Whether a request without a key was logged already.
    keyless_logged: Arc<AtomicBool>,
}

/// The cost of a request, from its head.
type CostOf = dyn Fn(&Parts) -> u32 + Send + Sync;

/// What the headers advertise.
#[derive(Debug, Default)]
struct Advertise {
    /// The policy's name; `None` advertises nothing.
    name: Option<String>,
    on_success: bool,
    /// Whether a limiter without a quota was logged already.
    no_quota_logged: AtomicBool,
}

impl<L> TooManyRequestsLayer<IpAddr, L, PeerKey> {
    /// A layer keyed by the connection's peer address ([`PeerKey::new`]).
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tower_limits::http::TooManyRequestsLayer;
    /// use tower_limits::{ConcurrencyLimiter, KeyedLimiter};
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// // Four requests at once per client.
    /// let per_peer = KeyedLimiter::of(ConcurrencyLimiter::new(4)?).build()?;
    /// let layer = TooManyRequestsLayer::new(per_peer);
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(keyed: KeyedLimiter<IpAddr, L>) -> Self {
        Self::with_key(keyed, PeerKey::new())
    }
}

impl<K, L, X> TooManyRequestsLayer<K, L, X> {
    /// A layer keyed by `key_of(&request_head)`: a [`PeerKey`] configured
    /// with trusted proxies, or a closure reading a tenant header.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::TooManyRequestsLayer;
    /// use tower_limits::{KeyedLimiter, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let per_tenant: KeyedLimiter<String, _> =
    ///     KeyedLimiter::of(RateLimiter::in_memory(Quota::gcra(100, Duration::from_secs(1))?)).build()?;
    /// let layer = TooManyRequestsLayer::with_key(per_tenant, |head: &http::request::Parts| {
    ///     let tenant = head.headers.get("x-tenant").and_then(|value| value.to_str().ok());
    ///     tenant.unwrap_or("anonymous").to_owned()
    /// });
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_key(keyed: KeyedLimiter<K, L>, key_of: X) -> Self {
        Self {
            keyed,
            key_of: Arc::new(key_of),
            cost_of: None,
            advertise: Arc::default(),
            refusal: Arc::new(DefaultRefusal),
            grpc_unavailable: false,
            keyless_logged: Arc::default(),
        }
    }
}

impl<K, L, X, R> TooManyRequestsLayer<K, L, X, R> {
    /// Charges each request `cost_of(&request_head)` units of its key's
    /// limit instead of 1: a batch endpoint, a large upload, an LLM
    /// request's declared token budget. The head is what there is before
    /// the body is read: headers, URI, and extensions an earlier layer set.
    ///
    /// A request costing more than its key's limiter can ever grant (above
    /// the burst or capacity) is answered at once with `413 Content Too
    /// Large` (gRPC: `INVALID_ARGUMENT`) and no `Retry-After`: waiting
    /// would not help.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use std::time::Duration;
    /// use http::{Request, Response, StatusCode};
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::http::{PeerAddr, TooManyRequestsLayer};
    /// use tower_limits::{KeyedLimiter, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // 100 items a minute per client, up to 100 at once.
    /// let per_peer = KeyedLimiter::of(RateLimiter::in_memory(Quota::token_bucket(100, 100, Duration::from_secs(60))?))
    ///     .build()?;
    /// // A batch request declares its size in `x-batch-size`.
    /// let layer = TooManyRequestsLayer::new(per_peer).cost(|head: &http::request::Parts| {
    ///     let size = head.headers.get("x-batch-size").and_then(|value| value.to_str().ok());
    ///     size.and_then(|size| size.parse().ok()).unwrap_or(1)
    /// });
    /// let mut service = layer.layer(service_fn(|_: Request<()>| async {
    ///     Ok::<_, std::convert::Infallible>(Response::new(()))
    /// }));
    /// let peer = PeerAddr("192.0.2.1:5000".parse().unwrap());
    /// let batch = |size: &str| {
    ///     Request::builder().header("x-batch-size", size).extension(peer).body(()).unwrap()
    /// };
    ///
    /// let response = service.ready().await?.call(batch("80")).await?;
    /// assert_eq!(response.status(), StatusCode::OK);
    /// let response = service.ready().await?.call(batch("30")).await?; // 20 left
    /// assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    /// let response = service.ready().await?.call(batch("500")).await?; // never fits
    /// assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    /// # Ok(())
    /// # }
    /// ```
    pub fn cost(mut self, cost_of: impl Fn(&Parts) -> u32 + Send + Sync + 'static) -> Self {
        self.cost_of = Some(Arc::new(cost_of));
        self
    }

    /// Advertises each key's limit as the quota policy `name`: on
    /// rejections (and, with
    /// [`headers_on_success`](TooManyRequestsLayer::headers_on_success), on
    /// admitted responses) `RateLimit-Policy` carries the quota and window
    /// of the key's limiter (a window that is not a whole number of seconds
    /// is rounded up and its quota scaled down, so the policy never states a
    /// higher rate than the limiter's) and `RateLimit`
    /// where the key stands: `r`, the units it would admit now, and `t`,
    /// the seconds until it would admit more than `r` (the draft's time
    /// until more quota is made available). Both are read from the
    /// limiter itself ([`Limiter::quota_status`]: one lock, or one store
    /// round trip per response), never written by hand beside it.
    ///
    /// A limiter without a windowed quota (a concurrency limit) has no
    /// `RateLimit` headers: the layer logs a warning once and sends
    /// `Retry-After` alone.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if `name` is not printable ASCII (it is sent as a
    /// structured-field string).
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use std::time::Duration;
    /// use tower_limits::http::TooManyRequestsLayer;
    /// use tower_limits::store::Quota;
    /// use tower_limits::{KeyedLimiter, RateLimiter};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_minute = Quota::fixed_window(100, Duration::from_secs(60))?;
    /// let per_peer = KeyedLimiter::of(RateLimiter::in_memory(per_minute)).build()?;
    /// // Sends `RateLimit-Policy: "default";q=100;w=60`.
    /// let layer = TooManyRequestsLayer::new(per_peer).advertise("default")?;
    /// # let _ = layer;
    /// let other = KeyedLimiter::of(RateLimiter::in_memory(per_minute)).build()?;
    /// assert!(TooManyRequestsLayer::new(other).advertise("défaut").is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn advertise(mut self, name: impl Into<String>) -> Result<Self, ConfigError> {
        self.advertise = Arc::new(Advertise {
            name: Some(checked_name(name.into())?),
            on_success: self.advertise.on_success,
            no_quota_logged: AtomicBool::new(false),
        });
        Ok(self)
    }

    /// Adds `RateLimit` and `RateLimit-Policy` to admitted responses too
    /// (once the layer [`advertise`](TooManyRequestsLayer::advertise)s its
    /// limit), measured after the request took its units: the same reading
    /// as on a rejection, so `t` means the same on a `200` and on the `429`
    /// that may follow it.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use std::time::Duration;
    /// use http::{Request, Response};
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::http::TooManyRequestsLayer;
    /// use tower_limits::{KeyedLimiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_peer = KeyedLimiter::builder(|_: &IpAddr| {
    ///     RateLimiter::builder("peer", 10, Duration::from_secs(60)).without_backoff().build().unwrap()
    /// })
    /// .build()?;
    /// let layer = TooManyRequestsLayer::with_key(per_peer, |_: &http::request::Parts| {
    ///     IpAddr::from([192, 0, 2, 1])
    /// })
    /// .advertise("default")?
    /// .headers_on_success();
    /// let mut service = layer.layer(service_fn(|_: Request<()>| async {
    ///     Ok::<_, std::convert::Infallible>(Response::new(()))
    /// }));
    /// let response = service.ready().await?.call(Request::new(())).await?;
    /// // 9 left; a tenth in 60 s, when this request leaves the window.
    /// assert_eq!(response.headers()["ratelimit"], "\"default\";r=9;t=60");
    /// assert_eq!(response.headers()["ratelimit-policy"], "\"default\";q=10;w=60");
    /// # Ok(())
    /// # }
    /// ```
    pub fn headers_on_success(mut self) -> Self {
        self.advertise = Arc::new(Advertise {
            name: self.advertise.name.clone(),
            on_success: true,
            no_quota_logged: AtomicBool::new(false),
        });
        self
    }

    /// Answers requests over the limit with what `refusal` builds from the
    /// decision and the default answer ([`MakeRefusal`]): its own status,
    /// body and headers. The default answer's `Retry-After` and `RateLimit`
    /// headers stay unless the hook removes them. gRPC calls keep their
    /// trailers-only status (see
    /// [`grpc_unavailable`](TooManyRequestsLayer::grpc_unavailable)); the
    /// other answers (`413`, `503`, `500`) are unchanged.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use std::time::Duration;
    /// use http::header::CONTENT_TYPE;
    /// use http::{Request, Response, StatusCode};
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::error::Rejected;
    /// use tower_limits::http::{PeerAddr, TooManyRequestsLayer};
    /// use tower_limits::{KeyedLimiter, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_peer = KeyedLimiter::of(RateLimiter::in_memory(Quota::gcra(1, Duration::from_secs(10))?)).build()?;
    /// let layer = TooManyRequestsLayer::new(per_peer).refusal(
    ///     |rejected: &Rejected, mut head: Response<()>| {
    ///         head.headers_mut().insert(CONTENT_TYPE, "application/json".parse().unwrap());
    ///         head.map(|()| format!(r#"{{"error":"{rejected}"}}"#))
    ///     },
    /// );
    /// let mut service = layer.layer(service_fn(|_: Request<()>| async {
    ///     Ok::<_, std::convert::Infallible>(Response::new(String::from("hello")))
    /// }));
    /// let request = || {
    ///     let peer = PeerAddr("192.0.2.1:5000".parse().unwrap());
    ///     Request::builder().extension(peer).body(()).unwrap()
    /// };
    /// service.ready().await?.call(request()).await?;
    /// let refused = service.ready().await?.call(request()).await?;
    /// assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    /// assert_eq!(refused.headers()["content-type"], "application/json");
    /// assert_eq!(refused.headers()["retry-after"], "10");
    /// # Ok(())
    /// # }
    /// ```
    pub fn refusal<R2>(self, refusal: R2) -> TooManyRequestsLayer<K, L, X, R2> {
        TooManyRequestsLayer {
            keyed: self.keyed,
            key_of: self.key_of,
            cost_of: self.cost_of,
            advertise: self.advertise,
            refusal: Arc::new(refusal),
            grpc_unavailable: self.grpc_unavailable,
            keyless_logged: self.keyless_logged,
        }
    }

    /// Answers gRPC calls over the limit `UNAVAILABLE` (`grpc-status: 14`),
    /// which gRPC clients retry by themselves and Envoy expects, instead of
    /// `RESOURCE_EXHAUSTED` (8). Either way the answer carries
    /// `grpc-retry-pushback-ms` and `retry-after` (the wait, or 1 s when
    /// the limit names no instant) and a message saying which limit
    /// refused.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use std::time::Duration;
    /// use http::{Request, Response};
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_limits::http::{PeerAddr, TooManyRequestsLayer};
    /// use tower_limits::{KeyedLimiter, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_peer = KeyedLimiter::of(RateLimiter::in_memory(Quota::gcra(1, Duration::from_secs(2))?)).build()?;
    /// let layer = TooManyRequestsLayer::new(per_peer).grpc_unavailable();
    /// let mut service = layer.layer(service_fn(|_: Request<()>| async {
    ///     Ok::<_, std::convert::Infallible>(Response::new(()))
    /// }));
    /// let call = || {
    ///     Request::builder()
    ///         .header("content-type", "application/grpc")
    ///         .extension(PeerAddr("192.0.2.1:5000".parse().unwrap()))
    ///         .body(())
    ///         .unwrap()
    /// };
    /// service.ready().await?.call(call()).await?;
    /// let refused = service.ready().await?.call(call()).await?;
    /// assert_eq!(refused.headers()["grpc-status"], "14");
    /// assert_eq!(refused.headers()["grpc-retry-pushback-ms"], "2000");
    /// assert_eq!(refused.headers()["grpc-message"], "rate limited: retry after 2000 ms");
    /// # Ok(())
    /// # }
    /// ```
    pub fn grpc_unavailable(mut self) -> Self {
        self.grpc_unavailable = true;
        self
    }

    /// The keyed limiter, for handles to keys' limiters.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tower_limits::http::TooManyRequestsLayer;
    /// use tower_limits::{ConcurrencyLimiter, KeyedLimiter};
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let per_peer = KeyedLimiter::of(ConcurrencyLimiter::new(4)?).build()?;
    /// let layer = TooManyRequestsLayer::new(per_peer);
    /// assert!(layer.keyed().is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn keyed(&self) -> &KeyedLimiter<K, L> {
        &self.keyed
    }
}

impl<K, L, X, R> Clone for TooManyRequestsLayer<K, L, X, R> {
    fn clone(&self) -> Self {
        Self {
            keyed: self.keyed.clone(),
            key_of: Arc::clone(&self.key_of),
            cost_of: self.cost_of.clone(),
            advertise: Arc::clone(&self.advertise),
            refusal: Arc::clone(&self.refusal),
            grpc_unavailable: self.grpc_unavailable,
            keyless_logged: Arc::clone(&self.keyless_logged),
        }
    }
}

impl<K, L, X, R> fmt::Debug for TooManyRequestsLayer<K, L, X, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TooManyRequestsLayer")
            .field("keyed", &self.keyed)
            .field("advertise", &self.advertise)
            .field("grpc_unavailable", &self.grpc_unavailable)
            .finish_non_exhaustive()
    }
}

impl<S, K, L, X, R> Layer<S> for TooManyRequestsLayer<K, L, X, R> {
    type Service = TooManyRequests<S, K, L, X, R>;

    fn layer(&self, inner: S) -> Self::Service {
        TooManyRequests {
            inner,
            layer: self.clone(),
        }
    }
}

/// A service that answers over-limit requests with 429; built by
/// [`TooManyRequestsLayer`], which has an example.
pub struct TooManyRequests<S, K, L, X = PeerKey, R = DefaultRefusal> {
    inner: S,
    layer: TooManyRequestsLayer<K, L, X, R>,
}

impl<S: Clone, K, L, X, R> Clone for TooManyRequests<S, K, L, X, R> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S: fmt::Debug, K, L, X, R> fmt::Debug for TooManyRequests<S, K, L, X, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TooManyRequests")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, K, L, X, R, ReqB, ResB> Service<Request<ReqB>> for TooManyRequests<S, K, L, X, R>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    ReqB: Send + 'static,
    ResB: Send + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    L: Limiter + Clone,
    X: KeyOf<K>,
    R: MakeRefusal<ResB>,
{
    type Response = Response<LimitBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        let (head, body) = request.into_parts();
        let grpc = is_grpc(&head.headers);
        let Some(key) = self.layer.key_of.key_of(&head) else {
            self.layer.keyless();
            let response = internal_error(grpc);
            return ResponseFuture {
                future: Box::pin(async move { Ok(response) }),
            };
        };
        let cost = self
            .layer
            .cost_of
            .as_ref()
            .map_or(1, |cost_of| cost_of(&head));
        let request = Request::from_parts(head, body);
        // The ready service goes into the future; this one takes its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let keyed = self.layer.keyed.clone();
        let advertise = Arc::clone(&self.layer.advertise);
        let shape = Arc::clone(&self.layer.refusal);
        let grpc_code = self.layer.grpc_refusal_code();
        let admission = keyed.try_acquire_many(&key, cost);
        let future = async move {
            let permit = match admission.await {
                Ok(Admission::Granted(permit)) => permit,
                Ok(Admission::Denied(denial)) => {
                    let rejected = Rejected::new(denial.retry_at());
                    let head = rejection(&rejected, advertise.headers(&keyed, &key).await);
                    if grpc {
                        return Ok(grpc_rejection(head, &rejected, grpc_code));
                    }
                    return Ok(shape.make_refusal(&rejected, head));
                }
                Err(error) => return Ok(refusal(&error, grpc)),
            };
            let headers = if advertise.on_success {
                advertise.headers(&keyed, &key).await
            } else {
                HeaderMap::new()
            };
            let mut response = inner.call(request).await?;
            response.headers_mut().extend(headers);
            Ok(response.map(|body| LimitBody::new(body, permit)))
        };
        ResponseFuture {
            future: Box::pin(future),
        }
    }
}

impl<K, L, X, R> TooManyRequestsLayer<K, L, X, R> {
    /// The `grpc-status` of a refused gRPC call.
    fn grpc_refusal_code(&self) -> &'static str {
        if self.grpc_unavailable {
            GRPC_UNAVAILABLE
        } else {
            GRPC_RESOURCE_EXHAUSTED
        }
    }

    /// Logs, the first time only, that a request had no key.
    fn keyless(&self) {
        if !self.keyless_logged.swap(true, Ordering::Relaxed) {
            tracing::error!(
                "TooManyRequestsLayer: a request has no key (no peer address: serve axum with \
                 `into_make_service_with_connect_info::<SocketAddr>()`, or insert `PeerAddr` \
                 where connections are accepted); answering 500 Internal Server Error to \
                 every such request (logged once)"
            );
        }
    }
}

/// The HTTP answer to a request `rejected`, before any hook shapes it:
/// `429` with `Retry-After` and the `RateLimit` headers `advertised`.
pub(super) fn rejection(rejected: &Rejected, advertised: HeaderMap) -> Response<()> {
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = response.headers_mut();
    headers.insert(RETRY_AFTER, RetryAfter::header_value(retry_after(rejected)));
    headers.extend(advertised);
    response
}

/// The wait a `Retry-After` announces for `rejected`: never "now", and 1 s
/// when the limit names no instant.
fn retry_after(rejected: &Rejected) -> Duration {
    let wait = rejected.retry_at().map_or(UNKNOWN_WAIT, |at| {
        at.saturating_duration_since(Instant::now())
    });
    wait.max(Duration::from_nanos(1))
}

/// The gRPC answer to a call `rejected`: `head`'s headers, `grpc-status`
/// `code`, a message saying what refused, and the wait in
/// `grpc-retry-pushback-ms` too.
fn grpc_rejection<B>(
    head: Response<()>,
    rejected: &Rejected,
    code: &'static str,
) -> Response<LimitBody<B>> {
    let mut response = head.map(|()| LimitBody::empty());
    *response.status_mut() = StatusCode::OK;
    let wait = retry_after(rejected);
    let pushback = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
    response
        .headers_mut()
        .insert(GRPC_RETRY_PUSHBACK_MS, HeaderValue::from(pushback));
    let message = format!("{}: retry after {} ms", rejected.refused_by(), pushback);
    grpc_status(&mut response, code, &message);
    response
}

/// Builds the HTTP answer of [`TooManyRequestsLayer`] to a request over the
/// limit, from the decision ([`Rejected`]: when to retry, `None` for a
/// concurrency limit) and the default answer: `429 Too Many Requests` with
/// an empty body, `Retry-After` and, once the layer
/// [`advertise`](TooManyRequestsLayer::advertise)s, the `RateLimit`
/// headers. Set with [`TooManyRequestsLayer::refusal`], or
/// [`HttpLimitLayer::refusal`](super::HttpLimitLayer::refusal) for a layer
/// in reject mode (whose default answer has no `RateLimit` headers); any
/// `Fn(&Rejected, Response<()>) -> Response<B>` is one, and so is
/// [`DefaultRefusal`].
///
/// ```
/// use http::{Response, StatusCode};
/// use tower_limits::error::Rejected;
/// use tower_limits::http::server::MakeRefusal;
///
/// let shape = |_: &Rejected, head: Response<()>| head.map(|()| String::from("slow down"));
/// let response = shape.make_refusal(&Rejected::new(None), Response::new(()));
/// assert_eq!(response.status(), StatusCode::OK); // the hook keeps the head it was given
/// ```
pub trait MakeRefusal<B>: Send + Sync + 'static {
    /// The answer to a request `rejected`, from the default answer `head`.
    ///
    /// ```
    /// use http::Response;
    /// use http_body::Body;
    /// use tower_limits::error::Rejected;
    /// use tower_limits::http::server::{DefaultRefusal, MakeRefusal};
    ///
    /// let response: Response<_> =
    ///     MakeRefusal::<String>::make_refusal(&DefaultRefusal, &Rejected::new(None), Response::new(()));
    /// assert!(response.body().is_end_stream());
    /// ```
    fn make_refusal(&self, rejected: &Rejected, head: Response<()>) -> Response<LimitBody<B>>;
}

impl<B, F> MakeRefusal<B> for F
where
    F: Fn(&Rejected, Response<()>) -> Response<B> + Send + Sync + 'static,
{
    fn make_refusal(&self, rejected: &Rejected, head: Response<()>) -> Response<LimitBody<B>> {
        self(rejected, head).map(|body| LimitBody::new(body, Permit::unit()))
    }
}

/// The default [`MakeRefusal`]: the default answer, with an empty body.
///
/// ```
/// use tower_limits::http::server::DefaultRefusal;
///
/// let refusal = DefaultRefusal;
/// # let _ = refusal;
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultRefusal;

impl<B> MakeRefusal<B> for DefaultRefusal {
    fn make_refusal(&self, _: &Rejected, head: Response<()>) -> Response<LimitBody<B>> {
        head.map(|()| LimitBody::empty())
    }
}

impl Advertise {
    /// `RateLimit` and `RateLimit-Policy` for `key`, from one reading of its
    /// limiter; empty when nothing is advertised or there is nothing to
    /// read.
    async fn headers<K, L>(&self, keyed: &KeyedLimiter<K, L>, key: &K) -> HeaderMap
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
        L: Limiter + Clone,
    {
        let mut headers = HeaderMap::new();
        let Some(name) = &self.name else {
            return headers;
        };
        // A key forgotten since, with no room to take it back, is an error:
        // nothing to read.
        let quota = match keyed.quota_status(key).await {
            Ok(Some(quota)) => quota,
            Ok(None) => {
                self.no_quota();
                return headers;
            }
            Err(error) => {
                tracing::debug!(%error, "no RateLimit headers: the limiter's state is unreadable");
                return headers;
            }
        };
        let status = RateLimitStatus::new(name.as_str(), quota.remaining(), quota.refill_in());
        let policy = RateLimitPolicy::for_quota(name.as_str(), &quota).ok();
        let fields = [
            (RATELIMIT, RateLimitStatus::header_value(&[status])),
            (
                RATELIMIT_POLICY,
                policy.and_then(|policy| RateLimitPolicy::header_value(&[policy])),
            ),
        ];
        for (field, value) in fields {
            if let Some(value) = value {
                headers.insert(HeaderName::from_static(field), value);
            }
        }
        headers
    }

    /// Logs, the first time only, that a limiter has no quota to advertise.
    fn no_quota(&self) {
        if !self.no_quota_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "TooManyRequestsLayer::advertise: the keys' limiter has no quota of units per \
                 window to advertise (Limiter::quota_status is None); sending Retry-After \
                 without RateLimit headers (logged once)"
            );
        }
    }
}

/// Whether the request is a gRPC call.
fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

/// The answer to a request the limiter failed on: 413 for a cost it can
/// never grant, else 503.
fn refusal<B>(error: &LimiterError, grpc: bool) -> Response<LimitBody<B>> {
    let Some(too_high) = error.get_ref().downcast_ref::<CostTooHigh>() else {
        tracing::warn!(%error, "limiter failed: answering 503");
        return unavailable(grpc);
    };
    let message = too_high.to_string();
    failure(
        grpc,
        StatusCode::PAYLOAD_TOO_LARGE,
        GRPC_INVALID_ARGUMENT,
        &message,
    )
}

fn unavailable<B>(grpc: bool) -> Response<LimitBody<B>> {
    failure(
        grpc,
        StatusCode::SERVICE_UNAVAILABLE,
        GRPC_UNAVAILABLE,
        "rate limiter unavailable",
    )
}

/// The answer to a request without a key.
fn internal_error<B>(grpc: bool) -> Response<LimitBody<B>> {
    failure(
        grpc,
        StatusCode::INTERNAL_SERVER_ERROR,
        GRPC_INTERNAL,
        "rate limit key missing",
    )
}

/// An empty answer with `status`, or for gRPC with `grpc` and `message`.
fn failure<B>(
    grpc: bool,
    status: StatusCode,
    grpc_code: &'static str,
    message: &str,
) -> Response<LimitBody<B>> {
    let mut response = Response::new(LimitBody::empty());
    if grpc {
        grpc_status(&mut response, grpc_code, message);
    } else {
        *response.status_mut() = status;
    }
    response
}

/// Makes `response` a trailers-only gRPC answer with `status`.
fn grpc_status<B>(response: &mut Response<B>, status: &'static str, message: &str) {
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from_static(status));
    if let Ok(message) = HeaderValue::try_from(message) {
        headers.insert("grpc-message", message);
    }
}

/// The response future of [`TooManyRequests`]: admission, then the call.
///
/// ```
/// use std::net::IpAddr;
/// use http::{Request, Response};
/// use tower::{service_fn, Layer, Service, ServiceExt};
/// use tower_limits::http::{server::ResponseFuture, PeerAddr, TooManyRequestsLayer};
/// use tower_limits::{KeyedLimiter, NullLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), std::convert::Infallible> {
/// let per_peer = KeyedLimiter::builder(|_: &IpAddr| NullLimiter).build().unwrap();
/// let mut service = TooManyRequestsLayer::new(per_peer)
///     .layer(service_fn(|_: Request<()>| async {
///         Ok::<_, std::convert::Infallible>(Response::new(()))
///     }));
/// let request = Request::builder().extension(PeerAddr("192.0.2.1:5000".parse().unwrap()));
/// let future: ResponseFuture<(), _> = service.ready().await?.call(request.body(()).unwrap());
/// assert!(future.await?.status().is_success());
/// # Ok(())
/// # }
/// ```
pub struct ResponseFuture<B, E> {
    future: BoxedResponse<B, E>,
}

/// The boxed admission-then-call of [`ResponseFuture`].
type BoxedResponse<B, E> = Pin<Box<dyn Future<Output = Result<Response<LimitBody<B>>, E>> + Send>>;

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<LimitBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.future.as_mut().poll(cx)
    }
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
