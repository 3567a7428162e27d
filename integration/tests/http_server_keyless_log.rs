//! A server that records no peer addresses says so once, as an error, not
//! once per request.
//!
//! Its own test binary: `tracing` caches, per call site, whether anyone
//! listens, and tests on other threads of the same process (with no
//! subscriber) would race with this one's.
#![cfg(feature = "http")]

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use tower::{Layer, Service, ServiceExt, service_fn};
use tower_limits::http::TooManyRequestsLayer;
use tower_limits::{ConcurrencyLimiter, KeyedLimiter};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer as _, SubscriberExt};

/// The levels and messages of the events seen.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<(Level, String)>>>);

impl<S: Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        let level = *event.metadata().level();
        self.0.lock().unwrap().push((level, message.0));
    }
}

#[tokio::test]
async fn requests_without_a_peer_are_logged_once_as_an_error() {
    let events = Events::default();
    let subscriber = tracing_subscriber::registry().with(
        events
            .clone()
            .with_filter(tracing_subscriber::filter::LevelFilter::WARN),
    );
    let _guard = tracing::subscriber::set_default(subscriber);

    let per_peer = KeyedLimiter::builder(|_: &IpAddr| ConcurrencyLimiter::new(4).unwrap())
        .build()
        .unwrap();
    let layer = TooManyRequestsLayer::new(per_peer);
    let hello = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(())) });
    for _ in 0..5 {
        // Clones of the layer's service share the flag, as a server's do.
        let mut service = layer.layer(hello);
        let response = service
            .ready()
            .await
            .unwrap()
            .call(Request::new(()))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
    let events = events.0.lock().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, Level::ERROR);
    assert!(
        events[0].1.contains("into_make_service_with_connect_info"),
        "{events:?}"
    );
}
