//! Watching a layer: its `metrics` counters, its counts and hook, and
//! shadow mode (its `tracing` spans are in `observe_tracing.rs`).

mod common;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::ms;
use tokio::time::{Instant, timeout};
use tower::{Layer, Service, ServiceExt, service_fn};
use tower_limits::limit::{KeyedLimitLayer, LayerStats, Outcome};
use tower_limits::store::Quota;
use tower_limits::{KeyedLimiter, LimitLayer, RateLimiter};

fn echo() -> impl Service<u32, Response = u32, Error = Infallible, Future: Send> + Clone {
    service_fn(|n: u32| async move { Ok::<_, Infallible>(n) })
}

/// One per 100 ms, one at a time.
fn ten_a_second() -> RateLimiter {
    let quota = Quota::gcra(10, Duration::from_secs(1)).unwrap();
    RateLimiter::in_memory(quota.with_pacing_tolerance().unwrap())
}

/// A scripted scenario read back through a `metrics` recorder: 10
/// admitted, 3 refused, 2 timed out, each counted once under its layer's
/// name and outcome; the waits went to the histogram.
#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn metrics_count_every_decision_by_layer_and_outcome() {
    use metrics_util::CompositeKey;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let (mut waiting, mut rejecting) = metrics::with_local_recorder(&recorder, || {
        let quota = Quota::gcra(10, Duration::from_secs(1))
            .unwrap()
            .with_burst(8)
            .unwrap();
        let limiter = RateLimiter::in_memory(quota.with_pacing_tolerance().unwrap());
        let waiting = LimitLayer::new(limiter.clone())
            .name("api")
            .max_wait(ms(50))
            .layer(echo());
        let rejecting = LimitLayer::new(limiter)
            .name("api-reject")
            .reject()
            .layer(echo());
        (waiting, rejecting)
    });
    for n in 0..8 {
        waiting.ready().await.unwrap().call(n).await.unwrap(); // the burst, at once
    }
    for n in 8..10 {
        tokio::time::advance(ms(60)).await;
        waiting.ready().await.unwrap().call(n).await.unwrap(); // waits 40 ms
    }
    for _ in 0..3 {
        assert!(rejecting.ready().await.unwrap().call(0).await.is_err());
    }
    for _ in 0..2 {
        assert!(
            waiting.clone().oneshot(0).await.is_err(),
            "the next slot is past 50 ms"
        );
    }

    let snapshot = snapshotter.snapshot().into_vec();
    let counter = |limiter: &str, outcome: &str| -> u64 {
        snapshot
            .iter()
            .find_map(|(key, _, _, value): &(CompositeKey, _, _, DebugValue)| {
                let labels: Vec<_> = key.key().labels().map(|l| (l.key(), l.value())).collect();
                let matches = key.key().name() == "tower_limits_decisions_total"
                    && labels.contains(&("limiter", limiter))
                    && labels.contains(&("outcome", outcome));
                match value {
                    DebugValue::Counter(count) if matches => Some(*count),
                    _ => None,
                }
            })
            .unwrap_or(0)
    };
    assert_eq!(counter("api", "granted"), 10);
    assert_eq!(counter("api", "elapsed"), 2);
    assert_eq!(counter("api-reject", "refused"), 3);
    assert_eq!(
        counter("api", "refused") + counter("api-reject", "granted"),
        0
    );
    let waits = snapshot.iter().find_map(|(key, _, _, value)| match value {
        DebugValue::Histogram(values) if key.key().name() == "tower_limits_wait_seconds" => {
            Some(values.len())
        }
        _ => None,
    });
    assert_eq!(waits, Some(10), "one wait per admitted call");
}

/// The counts of an observed layer add up, shared by its clones: granted,
/// waited, refused, turned away, abandoned.
#[tokio::test(start_paused = true)]
async fn stats_count_every_outcome() {
    let layer = LimitLayer::new(ten_a_second()).name("api").max_waiting(1);
    let service = layer.layer(echo());
    service.clone().oneshot(1).await.unwrap(); // at once
    let waiting = tokio::spawn(service.clone().oneshot(2)); // waits 100 ms
    tokio::task::yield_now().await;
    assert!(
        service.clone().oneshot(9).await.is_err(),
        "the line holds one"
    );
    waiting.await.unwrap().unwrap();
    let abandoned = timeout(ms(10), service.clone().oneshot(3)).await;
    assert!(abandoned.is_err(), "gave up while waiting");
    let stats = layer.stats().unwrap();
    let mut expected = LayerStats::default();
    expected.granted = 2;
    expected.overloaded = 1;
    expected.abandoned = 1;
    expected.waited = ms(100);
    assert_eq!(stats, expected);
}

/// A concurrency layer's stats count the calls its limiter has running:
/// from the call until its response future ends.
#[tokio::test(start_paused = true)]
async fn stats_count_the_calls_in_flight() {
    let limiter = tower_limits::ConcurrencyLimiter::new(4).unwrap();
    let layer = tower_limits::LimitLayer::new(limiter).name("db");
    let mut service = layer.layer(service_fn(|wait: u64| async move {
        tokio::time::sleep(ms(wait)).await;
        Ok::<_, Infallible>(wait)
    }));
    let in_flight = || layer.stats().unwrap().in_flight;
    assert_eq!(in_flight(), Some(0));
    let short = service.ready().await.unwrap().call(10);
    let long = service.ready().await.unwrap().call(20);
    assert_eq!(
        (in_flight(), service.stats().unwrap().in_flight),
        (Some(2), Some(2))
    );
    short.await.unwrap();
    assert_eq!(in_flight(), Some(1));
    drop(long); // cancelled
    assert_eq!(in_flight(), Some(0));
    assert_eq!(layer.stats().unwrap().granted, 2);
}

/// The same traffic through a layer that enforces (reject mode) and one in
/// shadow mode: the same decisions recorded, call by call; the shadow layer
/// never refused nor delayed a call.
#[tokio::test(start_paused = true)]
async fn a_shadow_layer_records_what_enforcing_would_decide_and_never_refuses() {
    let record = |decisions: &Arc<Mutex<Vec<Outcome>>>| {
        let decisions = Arc::clone(decisions);
        move |decision: &tower_limits::limit::Decision<'_>| {
            decisions.lock().unwrap().push(decision.outcome);
        }
    };
    let (enforced, shadowed) = (Arc::default(), Arc::default());
    let mut enforcing = LimitLayer::new(ten_a_second())
        .reject()
        .on_decision(record(&enforced))
        .layer(echo());
    let mut shadow = LimitLayer::new(ten_a_second())
        .shadow()
        .on_decision(record(&shadowed))
        .layer(echo());
    let arrivals = [0, 0, 0, 50, 100, 100, 130, 250, 250, 251];
    let start = Instant::now();
    let mut let_through = 0;
    for at in arrivals {
        tokio::time::sleep_until(start + ms(at)).await;
        let _ = enforcing.ready().await.map(|ready| ready.call(at as u32));
        let asked = Instant::now();
        if let Ok(ready) = shadow.ready().await {
            ready.call(at as u32).await.unwrap();
            let_through += 1;
        }
        assert_eq!(Instant::now(), asked, "the shadow layer delayed a call");
    }
    assert_eq!(
        let_through,
        arrivals.len(),
        "the shadow layer refused a call"
    );
    let (enforced, shadowed) = (enforced.lock().unwrap(), shadowed.lock().unwrap());
    let granted = |outcomes: &[Outcome]| {
        outcomes
            .iter()
            .map(|outcome| *outcome == Outcome::Granted)
            .collect::<Vec<_>>()
    };
    assert_eq!(granted(&shadowed), granted(&enforced));
    assert_eq!(
        granted(&enforced),
        [
            true, false, false, false, true, false, false, true, false, false
        ]
    );
}

/// Shadow mode counts each decision once, as granted or as refused, on
/// the plain layer and on the keyed layer (which admits through the
/// keyed, fair and cost layers' shared path): 10 calls at one instant
/// under a limit of one per 100 ms are one grant and 9 refusals, all let
/// through.
#[tokio::test(start_paused = true)]
async fn a_shadow_layer_counts_each_decision_once() {
    let expected = || {
        let mut stats = LayerStats::default();
        stats.granted = 1;
        stats.refused = 9;
        stats
    };
    let plain = LimitLayer::new(ten_a_second()).shadow();
    let mut service = plain.layer(echo());
    for n in 0..10 {
        service.ready().await.unwrap().call(n).await.unwrap();
    }
    assert_eq!(plain.stats(), Some(expected()), "plain layer");
    let per_tenant = KeyedLimiter::of(ten_a_second()).build().unwrap();
    let keyed = KeyedLimitLayer::new(per_tenant, |_: &u32| 1_u32).shadow();
    let mut service = keyed.layer(echo());
    for n in 0..10 {
        service.ready().await.unwrap().call(n).await.unwrap();
    }
    assert_eq!(keyed.stats(), Some(expected()), "keyed layer");
}
