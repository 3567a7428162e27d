//! The retry policy: waits the advertised time, gives up with a typed error
//! carrying the retry instant, honours the budget and the limiter.
#![cfg(feature = "http")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tokio::time::Instant;
use tower::retry::RetryLayer;
use tower::retry::budget::TpsBudget;
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
use tower_limits::Limiter;
use tower_limits::error::BoxError;
use tower_limits::http::{RetryLater, RetryPolicy};

/// An upstream answering `statuses` in turn (the last one forever), with
/// `retry-after` when given; counts its calls.
fn upstream(
    statuses: &'static [u16],
    retry_after: Option<&'static str>,
) -> (
    impl Service<Request<()>, Response = Response<()>, Error = BoxError, Future: Send> + Clone,
    Arc<AtomicU32>,
) {
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    let service = service_fn(move |_: Request<()>| {
        let call = counter.fetch_add(1, Ordering::SeqCst) as usize;
        let status = statuses[call.min(statuses.len() - 1)];
        async move {
            let mut response = Response::builder().status(status);
            if let Some(value) = retry_after {
                response = response.header("retry-after", value);
            }
            Ok::<_, BoxError>(response.body(())?)
        }
    });
    (service, calls)
}

/// One request through `client`, whose readiness never fails here.
async fn send<S>(client: &mut S) -> Result<Response<()>, BoxError>
where
    S: Service<Request<()>, Response = Response<()>, Error = BoxError>,
{
    client.ready().await?.call(Request::new(())).await
}

#[tokio::test(start_paused = true)]
async fn retries_a_503_after_its_retry_after() {
    let (upstream, calls) = upstream(&[503, 503, 200], Some("3"));
    let mut client = ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::new()))
        .service(upstream);
    let start = Instant::now();
    let response = send(&mut client).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(start.elapsed(), Duration::from_secs(6));
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_max_attempts_with_the_retry_instant() {
    let (upstream, calls) = upstream(&[429], Some("10"));
    let mut client = ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::new().max_attempts(2)))
        .service(upstream);
    let start = Instant::now();
    let error = send(&mut client).await.unwrap_err();
    let later = error.downcast_ref::<RetryLater>().expect("a typed error");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(later.attempts(), 2);
    assert_eq!(later.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(later.retry_at(), start + Duration::from_secs(20));
}

#[tokio::test(start_paused = true)]
async fn a_wait_past_max_wait_is_not_slept() {
    let (upstream, calls) = upstream(&[429], Some("3600"));
    let policy = RetryPolicy::new().max_wait(Duration::from_secs(60));
    let mut client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(upstream);
    let start = Instant::now();
    let error = send(&mut client).await.unwrap_err();
    let later = error.downcast_ref::<RetryLater>().expect("a typed error");
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(later.retry_at(), start + Duration::from_secs(3600));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn an_empty_budget_stops_retries() {
    let (upstream, calls) = upstream(&[429], Some("1"));
    // No reserve and nothing deposited: no retry at all.
    let policy =
        RetryPolicy::new()
            .max_attempts(10)
            .budget(TpsBudget::new(Duration::from_secs(1), 0, 0.0));
    let mut client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(upstream);
    let error = send(&mut client).await.unwrap_err();
    assert!(error.is::<RetryLater>());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn waits_for_the_limiter_when_it_is_paused_longer() {
    let (upstream, calls) = upstream(&[429, 200], None);
    let paused = tower_limits::ConcurrencyLimiter::new(4).unwrap();
    let start = Instant::now();
    paused
        .set_next_available_time(start + Duration::from_secs(7))
        .await
        .unwrap();
    let policy = RetryPolicy::new().limiter(paused);
    let mut client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(upstream);
    let response = send(&mut client).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // No header: the 1 s backoff, but the limiter said 7 s.
    assert_eq!(start.elapsed(), Duration::from_secs(7));
}
