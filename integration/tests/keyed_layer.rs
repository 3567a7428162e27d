//! The keyed layer: a limit per key taken from each request.

mod common;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::ms;
use tokio::time::Instant;
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
use tower_limits::error::{BoxError, CostTooHigh, Elapsed, LimiterError, Overloaded, Rejected};
use tower_limits::limit::KeyedLimitLayer;
use tower_limits::{KeyedLimiter, Limiter, RateLimiter};

/// A request: its tenant and how many units it costs.
#[derive(Clone, Copy, Debug)]
struct Call {
    tenant: &'static str,
    cost: u32,
    id: usize,
}

fn call(tenant: &'static str, id: usize) -> Call {
    Call {
        tenant,
        cost: 1,
        id,
    }
}

/// `max` per second per tenant.
fn per_tenant(max: u32) -> KeyedLimiter<&'static str, RateLimiter> {
    KeyedLimiter::builder(move |tenant: &&'static str| {
        RateLimiter::builder(*tenant, max, Duration::from_secs(1))
            .without_backoff()
            .build()
            .expect("valid configuration")
    })
    .build()
    .expect("valid configuration")
}

type Starts = Arc<Mutex<Vec<(usize, Duration)>>>;

/// The layer under test: tenant and cost read from the request.
type TenantLayer =
    KeyedLimitLayer<&'static str, RateLimiter, fn(&Call) -> &'static str, fn(&Call) -> u32>;

/// A stack over a service that records when each call starts.
fn stack(
    layer: TenantLayer,
) -> (
    impl Service<Call, Response = usize, Error = BoxError, Future: Send> + Clone + Send + 'static,
    Starts,
) {
    let origin = Instant::now();
    let starts = Starts::default();
    let recorded = Arc::clone(&starts);
    let service = ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(move |request: Call| {
            recorded
                .lock()
                .unwrap()
                .push((request.id, origin.elapsed()));
            async move { Ok::<_, Infallible>(request.id) }
        }));
    (service, starts)
}

fn layer(keyed: KeyedLimiter<&'static str, RateLimiter>) -> TenantLayer {
    KeyedLimitLayer::new(
        keyed,
        (|request: &Call| request.tenant) as fn(&Call) -> &'static str,
    )
    .cost((|request: &Call| request.cost) as fn(&Call) -> u32)
}

async fn run_all<S>(service: &S, calls: Vec<Call>) -> Vec<Result<usize, BoxError>>
where
    S: Service<Call, Response = usize, Error = BoxError, Future: Send> + Clone + Send + 'static,
{
    let tasks: Vec<_> = calls
        .into_iter()
        .map(|request| {
            let mut service = service.clone();
            tokio::spawn(async move { service.ready().await?.call(request).await })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.expect("caller task"));
    }
    results
}

#[tokio::test(start_paused = true)]
async fn one_tenants_backlog_never_delays_another() {
    let (service, starts) = stack(layer(per_tenant(1)));
    let mut calls: Vec<Call> = (0..5).map(|id| call("busy", id)).collect();
    calls.push(call("quiet", 99));
    for result in run_all(&service, calls).await {
        result.unwrap();
    }
    let starts = starts.lock().unwrap().clone();
    let quiet = starts.iter().find(|(id, _)| *id == 99).unwrap().1;
    assert_eq!(quiet, Duration::ZERO, "the quiet tenant started at once");
    let mut busy: Vec<Duration> = starts
        .iter()
        .filter(|(id, _)| *id != 99)
        .map(|s| s.1)
        .collect();
    busy.sort();
    assert_eq!(busy, (0..5).map(|n| ms(1000 * n)).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn callers_of_one_key_go_in_arrival_order() {
    let (service, starts) = stack(layer(per_tenant(1)));
    let calls = (0..6).map(|id| call("t", id)).collect();
    for result in run_all(&service, calls).await {
        result.unwrap();
    }
    let order: Vec<usize> = starts.lock().unwrap().iter().map(|(id, _)| *id).collect();
    assert_eq!(order, (0..6).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn a_request_costing_several_units_takes_them_in_one_decision() {
    let (service, starts) = stack(layer(per_tenant(4)));
    let calls = vec![
        Call {
            tenant: "t",
            cost: 3,
            id: 0,
        },
        Call {
            tenant: "t",
            cost: 2,
            id: 1,
        },
    ];
    for result in run_all(&service, calls).await {
        result.unwrap();
    }
    let starts = starts.lock().unwrap().clone();
    assert_eq!(starts, vec![(0, Duration::ZERO), (1, ms(1000))]);
}

#[tokio::test(start_paused = true)]
async fn a_cost_above_the_limit_fails_the_request_at_once() {
    let (mut service, starts) = stack(layer(per_tenant(4)));
    let error = service
        .ready()
        .await
        .unwrap()
        .call(Call {
            tenant: "t",
            cost: 5,
            id: 0,
        })
        .await
        .unwrap_err();
    let limiter_error = error
        .downcast_ref::<LimiterError>()
        .expect("a LimiterError");
    assert_eq!(
        limiter_error.get_ref().downcast_ref(),
        Some(&CostTooHigh::new(5, 4))
    );
    assert!(starts.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn reject_mode_fails_with_the_instant_to_retry() {
    let start = Instant::now();
    let (service, _) = stack(layer(per_tenant(1)).reject());
    let results = run_all(&service, vec![call("t", 0), call("t", 1)]).await;
    assert!(results[0].is_ok());
    let rejected = results[1]
        .as_ref()
        .unwrap_err()
        .downcast_ref::<Rejected>()
        .cloned();
    assert_eq!(rejected, Some(Rejected::new(Some(start + ms(1000)))));
}

#[tokio::test(start_paused = true)]
async fn max_wait_and_max_waiting_bound_each_key() {
    let (service, _) = stack(layer(per_tenant(1)).max_wait(ms(500)));
    let results = run_all(&service, vec![call("t", 0), call("t", 1)]).await;
    assert!(results[0].is_ok());
    assert!(results[1].as_ref().unwrap_err().is::<Elapsed>());

    let (service, _) = stack(layer(per_tenant(1)).max_waiting(1));
    let results = run_all(&service, (0..3).map(|id| call("t", id)).collect()).await;
    let overloaded = results
        .iter()
        .filter(|r| matches!(r, Err(e) if e.is::<Overloaded>()))
        .count();
    assert_eq!(overloaded, 1, "one runs, one waits, one is turned away");
}

#[tokio::test(start_paused = true)]
async fn a_request_dropped_while_the_inner_service_is_busy_gives_its_admission_back() {
    let keyed = per_tenant(1);
    let (mock, mut handle) = tower_test::mock::pair::<Call, usize>();
    handle.allow(0);
    let mut service = ServiceBuilder::new()
        .layer(layer(keyed.clone()))
        .service(mock);
    let pending = service.ready().await.unwrap().call(call("t", 0));
    let dropped = tokio::time::timeout(ms(10), pending).await;
    assert!(dropped.is_err(), "the inner service never became ready");
    let limiter = keyed.limiter(&"t").unwrap();
    assert!(
        limiter.can_proceed().await.unwrap(),
        "the start was refunded"
    );
}
