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
use tower_limits::error::{BoxError, LimiterError};
use tower_limits::http::{RetryLater, RetryPolicy};
use tower_limits::job::{Rescheduler, RetryableJobError, reschedule};
use tower_limits::limiter::{Admission, LimiterFuture};
use tower_limits::{Limiter, Permit, RateLimiter};

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
    let policy = RetryPolicy::new().wait_for(paused);
    let mut client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(upstream);
    let response = send(&mut client).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // No header: the 1 s backoff, but the limiter said 7 s.
    assert_eq!(start.elapsed(), Duration::from_secs(7));
}

/// One year: far shorter than any saturated wait, far longer than any real one.
const A_YEAR: Duration = Duration::from_secs(365 * 86_400);

#[tokio::test(start_paused = true)]
async fn a_limiter_paused_past_max_wait_gives_up_at_once() {
    let (upstream, calls) = upstream(&[429], Some("1"));
    let paused = tower_limits::ConcurrencyLimiter::new(4).unwrap();
    let start = Instant::now();
    let hour = Duration::from_secs(3_600);
    paused.set_next_available_time(start + hour).await.unwrap();
    let policy = RetryPolicy::new()
        .max_wait(Duration::from_secs(10))
        .wait_for(paused);
    let mut client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(upstream);
    let error = send(&mut client).await.unwrap_err();
    let later = error.downcast_ref::<RetryLater>().expect("a typed error");
    // The header says 1 s, the limiter an hour: past max_wait, no sleep.
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(later.retry_at(), start + hour);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A limiter whose every answer comes later, as a store's does; its next
/// available time is an hour away.
#[derive(Clone)]
struct RemotePause(Instant);

impl Limiter for RemotePause {
    fn try_acquire_many(&self, _cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        LimiterFuture::new(async { Ok(Admission::Granted(Permit::unit())) })
    }
    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        LimiterFuture::new(async { Ok(true) })
    }
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(async { Ok(()) })
    }
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(async { Ok(()) })
    }
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        let at = self.0;
        LimiterFuture::new(async move { Ok(at) })
    }
    fn set_next_available_time(&self, _at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(async { Ok(()) })
    }
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::new(async { Ok(()) })
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_backed_limiter_never_stretches_the_sleep_past_max_wait() {
    let (upstream, calls) = upstream(&[429, 200], Some("1"));
    let start = Instant::now();
    let policy = RetryPolicy::new()
        .max_wait(Duration::from_secs(10))
        .wait_for(RemotePause(start + Duration::from_secs(3_600)));
    let mut client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(upstream);
    let response = send(&mut client).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // Its answer is known only once the sleep has begun: the sleep ends at
    // max_wait, and the limit layers (none here) hold the retry after it.
    assert_eq!(start.elapsed(), Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn a_huge_retry_after_saturates_instead_of_meaning_now() {
    let (upstream, _) = upstream(&[429], Some("99999999999999999999"));
    let mut client = ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::new()))
        .service(upstream);
    let start = Instant::now();
    let error = send(&mut client).await.unwrap_err();
    let later = error.downcast_ref::<RetryLater>().expect("a typed error");
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert!(later.retry_at() > start + A_YEAR, "{later:?}");
    assert!(
        later.retry_date() > std::time::SystemTime::now() + A_YEAR,
        "{later:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_later_saturates_every_wait_at_the_same_far_cap() {
    let now = Instant::now();
    let system_now = std::time::SystemTime::now();
    let max = RetryLater::new(StatusCode::TOO_MANY_REQUESTS, Duration::MAX, 1);
    let huge = RetryLater::new(
        StatusCode::TOO_MANY_REQUESTS,
        Duration::from_secs(u64::MAX),
        1,
    );
    assert!(max.retry_at() > now + A_YEAR, "{max:?}");
    assert_eq!(max.retry_at(), huge.retry_at());
    let far = max.retry_at() - now;
    let date_wait = max.retry_date().duration_since(system_now).unwrap();
    // The date says the same wait as the instant (to the clock reads' skew).
    assert!(
        date_wait.abs_diff(far) < Duration::from_secs(1),
        "{far:?} vs {date_wait:?}"
    );
    // A wait below the cap is kept as it is.
    let hour = RetryLater::new(StatusCode::TOO_MANY_REQUESTS, Duration::from_secs(3_600), 1);
    assert_eq!(hour.retry_at(), now + Duration::from_secs(3_600));
}

/// The job path end to end: an upstream answers `Retry-After: 10^11`, the
/// retry policy gives up with [`RetryLater`], the job fails with it, and
/// `job::reschedule` pauses the workers' shared limiter and puts the job off
/// by the documented cap (5 minutes), not 30 years; the job still gets a
/// retry instant.
#[tokio::test(start_paused = true)]
async fn a_hostile_retry_after_pauses_job_workers_for_the_cap_at_most() {
    let (upstream, _) = upstream(&[429], Some("100000000000"));
    let mut client = ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::new()))
        .service(upstream);
    let shared = RateLimiter::builder("upstream", 20, Duration::from_secs(1))
        .build()
        .unwrap();
    let start = Instant::now();
    let error = send(&mut client).await.unwrap_err();
    let later = *error.downcast_ref::<RetryLater>().expect("a typed error");
    let next = reschedule(&shared, &RetryableJobError::from(later))
        .await
        .unwrap();
    let cap = start + Duration::from_secs(300);
    let paused_until = shared.next_available_time().await.unwrap();
    assert_eq!(paused_until, cap, "paused for {:?}", paused_until - start);
    assert_eq!(next.at(), cap, "put off for {:?}", next.at() - start);
}

/// A rescheduler's own cap replaces the default one; a wait within it is
/// kept as the upstream asked.
#[tokio::test(start_paused = true)]
async fn a_rescheduler_caps_the_wait_at_its_max_wait() {
    let shared = RateLimiter::builder("upstream", 20, Duration::from_secs(1))
        .build()
        .unwrap();
    let rescheduler = Rescheduler::new(shared.clone()).max_wait(Duration::from_secs(60));
    let start = Instant::now();
    let hour = RetryableJobError::new("429").retry_after(Duration::from_secs(3_600));
    let next = rescheduler.reschedule(&hour).await.unwrap();
    assert_eq!(next.at(), start + Duration::from_secs(60));
    assert_eq!(shared.next_available_time().await.unwrap(), next.at());
    let ten = RetryableJobError::new("429").retry_after(Duration::from_secs(10));
    let next = rescheduler.reschedule(&ten).await.unwrap();
    assert_eq!(next.at(), start + Duration::from_secs(10));
}
