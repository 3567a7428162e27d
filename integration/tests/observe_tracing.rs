//! Watching a layer through `tracing`: each admission is a span.
//!
//! Its own test binary: `tracing` caches, per call site, whether anyone
//! listens, and tests on other threads of the same process (with no
//! subscriber) would race with this one's.

use std::convert::Infallible;
use std::time::Duration;

use tower::{Layer, Service, ServiceExt, service_fn};
use tower_limits::store::Quota;
use tower_limits::{LimitLayer, RateLimiter};

fn echo() -> impl Service<u32, Response = u32, Error = Infallible, Future: Send> + Clone {
    service_fn(|n: u32| async move { Ok::<_, Infallible>(n) })
}

/// One per 100 ms, one at a time.
fn ten_a_second() -> RateLimiter {
    let quota = Quota::gcra(10, Duration::from_secs(1)).unwrap();
    RateLimiter::in_memory(quota.with_pacing_tolerance().unwrap())
}

mod tracing_spans {
    //! A `tracing` collector that keeps every `admission` span's fields.

    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Subscriber};
    use tracing_subscriber::layer::{Context, Layer};
    use tracing_subscriber::registry::LookupSpan;

    /// A span: its id, its level and its fields.
    pub(super) type Span = (Id, String, BTreeMap<String, String>);

    /// The fields of each span, by span, in creation order; and events'.
    #[derive(Clone, Default)]
    pub(super) struct Captured {
        pub(super) spans: Arc<Mutex<Vec<Span>>>,
        pub(super) events: Arc<Mutex<Vec<BTreeMap<String, String>>>>,
    }

    struct Fields<'a>(&'a mut BTreeMap<String, String>);

    impl Visit for Fields<'_> {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.insert(field.name().to_owned(), format!("{value:?}"));
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().to_owned(), value.to_owned());
        }
    }

    impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Captured {
        fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
            let mut fields = BTreeMap::new();
            attributes.record(&mut Fields(&mut fields));
            let level = attributes.metadata().level().to_string();
            self.spans.lock().unwrap().push((id.clone(), level, fields));
        }
        fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
            let mut spans = self.spans.lock().unwrap();
            if let Some((_, _, fields)) = spans.iter_mut().rev().find(|(span, ..)| span == id) {
                values.record(&mut Fields(fields));
            }
        }
        fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
            let mut fields = BTreeMap::new();
            event.record(&mut Fields(&mut fields));
            self.events.lock().unwrap().push(fields);
        }
    }
}

/// A call granted at once, one that waited and one refused: each is an
/// `admission` span with the layer's name, the cost, the outcome and the
/// time waited, at TRACE when granted at once and DEBUG otherwise.
#[tokio::test(start_paused = true)]
async fn each_admission_is_a_span_with_its_outcome_and_wait() {
    use tracing_subscriber::layer::SubscriberExt;

    let captured = tracing_spans::Captured::default();
    let subscriber = tracing_subscriber::registry().with(captured.clone());
    let _guard = tracing::subscriber::set_default(subscriber);

    let limiter = ten_a_second();
    let mut waits = LimitLayer::new(limiter.clone()).name("api").layer(echo());
    waits.ready().await.unwrap().call(1).await.unwrap(); // at once
    waits.ready().await.unwrap().call(2).await.unwrap(); // waits 100 ms
    let mut refuses = LimitLayer::new(limiter).name("api").reject().layer(echo());
    assert!(refuses.ready().await.unwrap().call(3).await.is_err());

    let spans = captured.spans.lock().unwrap().clone();
    let summary: Vec<(String, String, String, String)> = spans
        .iter()
        .map(|(_, level, fields)| {
            let field = |name: &str| fields.get(name).cloned().unwrap_or_default();
            (
                level.clone(),
                field("limiter"),
                field("outcome"),
                field("waited_us"),
            )
        })
        .collect();
    let api = || "api".to_owned();
    assert_eq!(
        summary,
        [
            (
                "TRACE".to_owned(),
                api(),
                "granted".to_owned(),
                "0".to_owned()
            ),
            (
                "DEBUG".to_owned(),
                api(),
                "granted".to_owned(),
                "100000".to_owned()
            ),
            (
                "TRACE".to_owned(),
                api(),
                "refused".to_owned(),
                "0".to_owned()
            ),
        ]
    );
    assert!(spans.iter().all(|(_, _, fields)| fields["cost"] == "1"));
    let events = captured.events.lock().unwrap().clone();
    assert_eq!(events.len(), 1, "the refusal is also an event: {events:?}");
    assert_eq!(events[0]["outcome"], "refused");
}
