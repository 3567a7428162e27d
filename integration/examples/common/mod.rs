//! A loopback upstream for the client examples: an axum server that allows
//! `max` requests in any sliding `window` and answers the rest with `429`
//! and a `Retry-After` in whole seconds, like a real quota-limited API.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower_limits::error::BoxError;

/// A running upstream.
#[derive(Clone, Debug)]
pub(crate) struct Upstream {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    /// Requests answered 200.
    pub(crate) served: Arc<AtomicU32>,
    /// Requests answered 429.
    pub(crate) refused: Arc<AtomicU32>,
    starts: Arc<Mutex<VecDeque<Instant>>>,
    max: usize,
    window: Duration,
}

impl Upstream {
    /// Serves on a loopback port until the process ends.
    pub(crate) async fn serve(max: usize, window: Duration) -> Result<Self, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let upstream = Self {
            addr: listener.local_addr()?,
            served: Arc::default(),
            refused: Arc::default(),
            starts: Arc::default(),
            max,
            window,
        };
        let app = Router::new()
            .route("/", get(answer))
            .with_state(upstream.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(upstream)
    }

    /// The wait before the next request would be allowed, if any.
    fn admit(&self) -> Option<Duration> {
        let now = Instant::now();
        let mut starts = self
            .starts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        while starts
            .front()
            .is_some_and(|start| now.duration_since(*start) >= self.window)
        {
            starts.pop_front();
        }
        if starts.len() < self.max {
            starts.push_back(now);
            return None;
        }
        Some((starts[0] + self.window).duration_since(now))
    }
}

async fn answer(State(upstream): State<Upstream>) -> (StatusCode, HeaderMap, &'static str) {
    let mut headers = HeaderMap::new();
    let Some(wait) = upstream.admit() else {
        upstream.served.fetch_add(1, Ordering::SeqCst);
        return (StatusCode::OK, headers, "ok");
    };
    upstream.refused.fetch_add(1, Ordering::SeqCst);
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    headers.insert("retry-after", HeaderValue::from(seconds));
    (StatusCode::TOO_MANY_REQUESTS, headers, "slow down")
}
