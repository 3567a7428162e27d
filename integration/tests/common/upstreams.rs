//! The kinds of rate-limited upstream an adaptive client meets, each on a
//! free loopback port, each counting what it saw itself (time and status
//! of every request): nginx's `limit_req` with and without `nodelay`
//! ([`super::nginx`]), a tower_governor server, a token bucket that states
//! its quota in `RateLimit` / `RateLimit-Policy`, and a token bucket whose
//! rate can be changed while it runs.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::time::Instant;

use super::nginx::{Limit, Logged, Nginx, unix_now};

/// The kinds of upstream, at `rate` a second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// nginx `limit_req burst=5 nodelay`, `Retry-After: 1`: refuses at once.
    NginxNodelay,
    /// nginx `limit_req burst=5`, `Retry-After: 1`: delays 5 to the rate.
    NginxQueueing,
    /// tower_governor, burst 10: `Retry-After` in whole seconds (0 under
    /// a second) and `X-RateLimit-After`.
    Governor,
    /// A token bucket with a burst of twice its rate, stating its quota in
    /// `RateLimit-Policy` and what remains in `RateLimit`.
    Stated,
    /// A token bucket, burst 5, `Retry-After: 1`, whose rate changes.
    Changing,
}

impl Kind {
    /// Every kind, in the order the table lists them.
    pub(crate) const ALL: [Kind; 5] = [
        Kind::NginxNodelay,
        Kind::NginxQueueing,
        Kind::Governor,
        Kind::Stated,
        Kind::Changing,
    ];

    /// How the table names it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::NginxNodelay => "nginx limit_req burst=5 nodelay",
            Kind::NginxQueueing => "nginx limit_req burst=5 (queues)",
            Kind::Governor => "tower_governor burst=10",
            Kind::Stated => "token bucket burst=2R, RateLimit-Policy",
            Kind::Changing => "token bucket burst=5, R -> 2R -> R/2",
        }
    }
}

/// A running upstream; stopped when dropped.
pub(crate) enum Upstream {
    Nginx(Nginx),
    Served(Served),
}

impl Upstream {
    /// Starts an upstream of `kind` at `rate` a second; `None` (the test
    /// said it was skipped) if it needs nginx and nginx is not installed.
    pub(crate) async fn start(kind: Kind, rate: u32) -> Option<Self> {
        let nginx = |nodelay| Limit {
            rate,
            burst: 5,
            nodelay,
            retry_after: 1,
        };
        Some(match kind {
            Kind::NginxNodelay => Self::Nginx(Nginx::start(nginx(true))?),
            Kind::NginxQueueing => Self::Nginx(Nginx::start(nginx(false))?),
            Kind::Governor => Self::Served(Served::governor(rate).await),
            Kind::Stated => Self::Served(Served::bucket(rate, rate * 2, true).await),
            Kind::Changing => Self::Served(Served::bucket(rate, 5, false).await),
        })
    }

    pub(crate) fn url(&self) -> String {
        match self {
            Self::Nginx(nginx) => nginx.url(),
            Self::Served(served) => served.url.clone(),
        }
    }

    /// Every request it answered so far.
    pub(crate) fn log(&self) -> Vec<Logged> {
        match self {
            Self::Nginx(nginx) => nginx.log(),
            Self::Served(served) => served.log.lock().unwrap().clone(),
        }
    }

    /// Changes its rate (only a [`Kind::Changing`] bucket can).
    pub(crate) fn set_rate(&self, rate: u32) {
        match self {
            Self::Served(Served {
                bucket: Some(bucket),
                ..
            }) => bucket.lock().unwrap().rate = f64::from(rate),
            _ => panic!("this upstream's rate is fixed"),
        }
    }
}

/// An upstream served here, on the test's runtime.
pub(crate) struct Served {
    url: String,
    log: Arc<Mutex<Vec<Logged>>>,
    bucket: Option<Arc<Mutex<Bucket>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Served {
    /// tower_governor at `rate` a second, burst 10, one quota for all.
    async fn governor(rate: u32) -> Self {
        use tower_governor::GovernorLayer;
        use tower_governor::governor::GovernorConfigBuilder;
        use tower_governor::key_extractor::GlobalKeyExtractor;

        let config = GovernorConfigBuilder::default()
            .period(Duration::from_secs(1) / rate)
            .burst_size(10)
            .key_extractor(GlobalKeyExtractor)
            .finish()
            .expect("a valid tower_governor configuration");
        let router = Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(GovernorLayer::new(Arc::new(config)));
        Self::serve(router, None).await
    }

    /// A token bucket of `rate` a second and `burst`, that states its
    /// quota if `states`.
    async fn bucket(rate: u32, burst: u32, states: bool) -> Self {
        let bucket = Arc::new(Mutex::new(Bucket {
            rate: f64::from(rate),
            burst: f64::from(burst),
            tokens: f64::from(burst),
            at: Instant::now(),
            states,
        }));
        let router = Router::new()
            .route("/", get(take))
            .with_state(Arc::clone(&bucket));
        Self::serve(router, Some(bucket)).await
    }

    /// Serves `router` on a free loopback port, logging every answer.
    async fn serve(router: Router, bucket: Option<Arc<Mutex<Bucket>>>) -> Self {
        let log = Arc::new(Mutex::new(Vec::new()));
        let router = router.layer(middleware::from_fn_with_state(Arc::clone(&log), logged));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        Self {
            url,
            log,
            bucket,
            server,
        }
    }
}

/// Logs the status of every answer, as it leaves.
async fn logged(
    State(log): State<Arc<Mutex<Vec<Logged>>>>,
    request: Request<Body>,
    next: Next,
) -> Response {
    let response = next.run(request).await;
    let entry = Logged {
        at: unix_now(),
        status: response.status().as_u16(),
    };
    log.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(entry);
    response
}

/// A token bucket: `rate` tokens a second, up to `burst`.
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
    states: bool,
}

/// Serves a request if the bucket has a token; else `429` with
/// `Retry-After: 1`.
async fn take(State(bucket): State<Arc<Mutex<Bucket>>>) -> Response {
    let mut bucket = bucket.lock().unwrap_or_else(PoisonError::into_inner);
    let now = Instant::now();
    let elapsed = now.duration_since(bucket.at).as_secs_f64();
    bucket.tokens = (bucket.tokens + elapsed * bucket.rate).min(bucket.burst);
    bucket.at = now;
    let served = bucket.tokens >= 1.0;
    let mut response = if served {
        bucket.tokens -= 1.0;
        "ok".into_response()
    } else {
        let mut refused = StatusCode::TOO_MANY_REQUESTS.into_response();
        refused
            .headers_mut()
            .insert("retry-after", HeaderValue::from_static("1"));
        refused
    };
    if bucket.states {
        let policy = format!("\"default\";q={};w=1", bucket.rate);
        let remaining = bucket.tokens.floor();
        let reset = ((bucket.burst - bucket.tokens) / bucket.rate).ceil();
        let status = format!("\"default\";r={remaining};t={reset}");
        let headers = response.headers_mut();
        headers.insert("ratelimit-policy", HeaderValue::try_from(policy).unwrap());
        headers.insert("ratelimit", HeaderValue::try_from(status).unwrap());
    }
    response
}
