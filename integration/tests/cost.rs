//! Calls that cost more than one unit: `try_acquire_many` on every limiter.

mod common;

use std::time::Duration;

use common::secs;
use tokio::time::Instant;
use tower_limits::error::CostTooHigh;
use tower_limits::limiter::Admission;
use tower_limits::{
    CompositeLimiter, ConcurrencyLimiter, DelayLimiter, EvenlySpacedRateLimiter, Limiter,
    LimiterExt, NullLimiter, Permit, RateLimiter,
};

async fn grant(limiter: &impl Limiter, cost: u32) -> Permit {
    match limiter.try_acquire_many(cost).await {
        Ok(Admission::Granted(permit)) => permit,
        other => panic!("expected a grant of {cost}, got {other:?}"),
    }
}

async fn denied_until(limiter: &impl Limiter, cost: u32) -> Option<Instant> {
    match limiter.try_acquire_many(cost).await {
        Ok(Admission::Denied(denial)) => denial.retry_at(),
        other => panic!("expected a denial of {cost}, got {other:?}"),
    }
}

/// The cost a limiter refuses outright, with the capacity it names.
async fn too_high(limiter: &impl Limiter, cost: u32) -> CostTooHigh {
    let error = limiter
        .try_acquire_many(cost)
        .await
        .expect_err("a cost above the limit must fail");
    *error
        .get_ref()
        .downcast_ref::<CostTooHigh>()
        .expect("the failure is CostTooHigh")
}

fn window(max: u32, length: Duration) -> RateLimiter {
    RateLimiter::builder("cost", max, length)
        .without_backoff()
        .build()
        .expect("valid configuration")
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_counts_a_batch_as_that_many_starts() {
    let start = Instant::now();
    let limiter = window(10, secs(1));
    let batch = grant(&limiter, 7).await;
    assert_eq!(batch.cost(), 7);
    let _three = grant(&limiter, 3).await;
    // Full: even one more waits for the batch to leave the window.
    assert_eq!(denied_until(&limiter, 1).await, Some(start + secs(1)));
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_waits_until_enough_starts_leave_for_the_whole_cost() {
    let start = Instant::now();
    let limiter = window(10, secs(10));
    drop(grant(&limiter, 4).await);
    tokio::time::advance(secs(2)).await;
    drop(grant(&limiter, 4).await);
    // Eight in the window; five more fit only once the first four have left.
    assert_eq!(denied_until(&limiter, 5).await, Some(start + secs(10)));
    let _two = grant(&limiter, 2).await;
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_refund_gives_back_every_unit_of_a_batch() {
    let limiter = window(10, secs(1));
    let batch = grant(&limiter, 10).await;
    assert!(!limiter.can_proceed().await.unwrap());
    limiter.refund(batch);
    drop(grant(&limiter, 10).await);
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_refuses_a_cost_above_its_window() {
    let limiter = window(10, secs(1));
    assert_eq!(too_high(&limiter, 11).await, CostTooHigh::new(11, 10));
    // Nothing was recorded.
    drop(grant(&limiter, 10).await);
}

#[tokio::test(start_paused = true)]
async fn concurrency_limiter_holds_cost_slots_until_the_call_ends() {
    let limiter = ConcurrencyLimiter::new(5).unwrap();
    let big = grant(&limiter, 4).await;
    assert_eq!(limiter.running(), 4);
    let small = grant(&limiter, 1).await;
    assert!(matches!(
        limiter.try_acquire_many(2).await.unwrap(),
        Admission::Denied(_)
    ));
    drop(big);
    assert_eq!(limiter.running(), 1);
    let _two = grant(&limiter, 2).await;
    drop(small);
    assert_eq!(limiter.running(), 2);
    assert_eq!(too_high(&limiter, 6).await, CostTooHigh::new(6, 5));
}

#[tokio::test(start_paused = true)]
async fn concurrency_waiter_for_several_slots_starts_once_enough_are_free() {
    let limiter = ConcurrencyLimiter::new(3).unwrap();
    let first = grant(&limiter, 2).await;
    let second = grant(&limiter, 1).await;
    let waiter = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.acquire_many(3).await })
    };
    tokio::task::yield_now().await;
    drop(first);
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished(), "only two of three slots are free");
    drop(second);
    let permit = waiter.await.unwrap().unwrap();
    assert_eq!((permit.cost(), limiter.running()), (3, 3));
}

#[tokio::test(start_paused = true)]
async fn delay_limiter_keeps_cost_delays_after_a_batch() {
    let start = Instant::now();
    let limiter = DelayLimiter::new(Duration::from_millis(100)).unwrap();
    let batch = grant(&limiter, 3).await;
    let reopens = start + Duration::from_millis(300);
    assert_eq!(denied_until(&limiter, 1).await, Some(reopens));
    limiter.refund(batch);
    drop(grant(&limiter, 1).await);
}

#[tokio::test(start_paused = true)]
async fn evenly_spaced_limiter_spaces_a_batch_by_cost_intervals() {
    let start = Instant::now();
    let limiter = EvenlySpacedRateLimiter::new(10, secs(10)).unwrap();
    drop(grant(&limiter, 3).await);
    assert_eq!(denied_until(&limiter, 1).await, Some(start + secs(3)));
    assert_eq!(too_high(&limiter, 11).await, CostTooHigh::new(11, 10));
}

#[tokio::test(start_paused = true)]
async fn composite_asks_every_part_for_the_cost_and_refunds_on_denial() {
    let rate = window(10, secs(1));
    let concurrency = ConcurrencyLimiter::new(2).unwrap();
    let composite = CompositeLimiter::new()
        .with(rate.clone())
        .with(concurrency.clone());
    let permit = grant(&composite, 2).await;
    assert_eq!(concurrency.running(), 2);
    // The rate part grants 2 more, the concurrency part denies: the rate
    // part's 2 are given back.
    assert!(matches!(
        composite.try_acquire_many(2).await.unwrap(),
        Admission::Denied(_)
    ));
    drop(permit);
    drop(grant(&rate, 8).await);
}

#[tokio::test(start_paused = true)]
async fn a_cost_of_zero_is_free() {
    let limiter = window(1, secs(1));
    let _free = grant(&limiter, 0).await;
    let _one = grant(&limiter, 1).await;
    let _null = grant(&NullLimiter, 1_000_000).await;
}

/// What `peek(cost)` says, and that it took nothing: the same peek again
/// says the same, and the call it promised is admitted.
async fn assert_peek_is_free(limiter: &impl Limiter, cost: u32) -> Option<Option<Instant>> {
    let first = limiter.peek(cost).await.unwrap().map(|d| d.retry_at());
    let second = limiter.peek(cost).await.unwrap().map(|d| d.retry_at());
    assert_eq!(first, second, "peeking changed the limiter");
    let admitted = matches!(
        limiter.try_acquire_many(cost).await,
        Ok(Admission::Granted(_))
    );
    assert_eq!(admitted, first.is_none(), "peek and acquire disagree");
    first
}

#[tokio::test(start_paused = true)]
async fn peek_tells_what_a_call_would_get_without_taking_it() {
    let start = Instant::now();
    let rate = window(10, secs(1));
    let _eight = grant(&rate, 8).await;
    assert_eq!(
        assert_peek_is_free(&rate, 3).await,
        Some(Some(start + secs(1)))
    );
    assert_eq!(assert_peek_is_free(&rate, 2).await, None);

    let concurrency = ConcurrencyLimiter::new(3).unwrap();
    let _two = grant(&concurrency, 2).await;
    assert_eq!(assert_peek_is_free(&concurrency, 2).await, Some(None));
    assert_eq!(assert_peek_is_free(&concurrency, 1).await, None);

    let delay = DelayLimiter::new(Duration::from_millis(100)).unwrap();
    assert_eq!(assert_peek_is_free(&delay, 2).await, None);
    let reopens = start + Duration::from_millis(200);
    assert_eq!(assert_peek_is_free(&delay, 1).await, Some(Some(reopens)));

    let spaced = EvenlySpacedRateLimiter::new(4, secs(4)).unwrap();
    assert_eq!(assert_peek_is_free(&spaced, 4).await, None);
    assert!(assert_peek_is_free(&spaced, 1).await.is_some());

    let composite = CompositeLimiter::new()
        .with(window(1, secs(5)))
        .with(NullLimiter);
    assert_eq!(assert_peek_is_free(&composite, 1).await, None);
    assert_eq!(
        assert_peek_is_free(&composite, 1).await,
        Some(Some(start + secs(5)))
    );
}

async fn settle_to(limiter: &impl Limiter, estimate: u32, actual: u32) -> Permit {
    let mut permit = grant(limiter, estimate).await;
    limiter.settle(&mut permit, actual);
    assert_eq!(permit.cost(), actual);
    permit
}

#[tokio::test(start_paused = true)]
async fn settling_below_the_estimate_gives_the_difference_back() {
    let start = Instant::now();
    let rate = window(10, secs(1));
    let _call = settle_to(&rate, 8, 3).await;
    assert!(rate.peek(7).await.unwrap().is_none(), "5 of 8 came back");
    assert!(rate.peek(8).await.unwrap().is_some());

    let concurrency = ConcurrencyLimiter::new(4).unwrap();
    let call = settle_to(&concurrency, 4, 1).await;
    assert_eq!(concurrency.running(), 1);
    drop(call);
    assert_eq!(
        concurrency.running(),
        0,
        "the settled cost is what is released"
    );

    let delay = DelayLimiter::new(Duration::from_millis(100)).unwrap();
    let _call = settle_to(&delay, 5, 1).await;
    let reopens = start + Duration::from_millis(100);
    assert_eq!(denied_until(&delay, 1).await, Some(reopens));

    let spaced = EvenlySpacedRateLimiter::new(10, secs(10)).unwrap();
    let _call = settle_to(&spaced, 4, 2).await;
    assert_eq!(denied_until(&spaced, 1).await, Some(start + secs(2)));
}

#[tokio::test(start_paused = true)]
async fn settling_above_the_estimate_charges_the_difference() {
    let start = Instant::now();
    let rate = window(10, secs(1));
    let _other = grant(&rate, 5).await;
    let _call = settle_to(&rate, 2, 10).await;
    // Over the limit for a while: nothing fits until the window slides.
    assert_eq!(denied_until(&rate, 1).await, Some(start + secs(1)));

    let concurrency = ConcurrencyLimiter::new(2).unwrap();
    let other = grant(&concurrency, 1).await;
    let call = settle_to(&concurrency, 1, 2).await;
    assert_eq!(concurrency.running(), 3, "past the maximum while it runs");
    drop(call);
    assert_eq!(concurrency.running(), 1);
    drop(other);
    assert_eq!(concurrency.running(), 0);

    let delay = DelayLimiter::new(Duration::from_millis(100)).unwrap();
    let _call = settle_to(&delay, 1, 4).await;
    let reopens = start + Duration::from_millis(400);
    assert_eq!(denied_until(&delay, 1).await, Some(reopens));
}

#[tokio::test(start_paused = true)]
async fn a_composite_settles_every_part() {
    let rate = window(10, secs(1));
    let concurrency = ConcurrencyLimiter::new(10).unwrap();
    let composite = CompositeLimiter::new()
        .with(rate.clone())
        .with(concurrency.clone());
    let _call = settle_to(&composite, 6, 2).await;
    assert_eq!(concurrency.running(), 2);
    assert!(rate.peek(8).await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn the_keyed_layer_settles_with_the_cost_the_response_reports() {
    use std::convert::Infallible;
    use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
    use tower_limits::KeyedLimiter;
    use tower_limits::limit::KeyedLimitLayer;

    // 100 tokens a second per key; requests reserve 60, replies use 10.
    let tokens = KeyedLimiter::builder(|_: &u8| window(100, secs(1)))
        .build()
        .unwrap();
    let mut service = ServiceBuilder::new()
        .layer(
            KeyedLimitLayer::new(tokens.clone(), |_: &u32| 1u8)
                .cost(|estimate: &u32| *estimate)
                .settle(|used: &u32| Some(*used)),
        )
        .service(service_fn(|_: u32| async { Ok::<_, Infallible>(10u32) }));
    let start = Instant::now();
    for _ in 0..5 {
        service.ready().await.unwrap().call(60).await.unwrap();
    }
    // Without settling, the second call would have waited a second.
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert!(
        tokens
            .limiter(&1)
            .unwrap()
            .peek(50)
            .await
            .unwrap()
            .is_none()
    );
}

mod plain_layer {
    //! `LimitLayer::cost`: one shared limiter, a cost per request.

    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use proptest::prelude::*;
    use tower::{Layer, Service, ServiceBuilder, ServiceExt, service_fn};
    use tower_limits::LimitLayer;
    use tower_limits::store::Quota;

    use super::*;
    use crate::common::{ms, paused_runtime};

    #[tokio::test(start_paused = true)]
    async fn each_request_takes_its_cost_from_the_bucket_in_arrival_order() {
        // 10 tokens, refilled at 10 a second; a request is a batch of calls.
        let quota = Quota::token_bucket(10, 10, secs(1)).unwrap();
        let bucket = RateLimiter::in_memory(quota.with_pacing_tolerance().unwrap());
        let layer = LimitLayer::new(bucket).cost(|batch: &u32| *batch);
        let started = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = Arc::clone(&started);
        let service = layer.layer(service_fn(move |batch: u32| {
            record.lock().unwrap().push((batch, Instant::now()));
            async move { Ok::<_, Infallible>(batch) }
        }));
        let start = Instant::now();
        let calls = [8, 5, 1, 10].map(|batch| {
            let mut service = service.clone();
            tokio::spawn(async move { service.ready().await?.call(batch).await })
        });
        for call in calls {
            call.await.unwrap().unwrap();
        }
        let at = |millis| start + ms(millis);
        // 8 at once; 5 once 3 more refilled; 1 more then; 10 once the bucket is full again.
        let expected = vec![(8, at(0)), (5, at(300)), (1, at(400)), (10, at(1400))];
        assert_eq!(*started.lock().unwrap(), expected);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cost_above_the_capacity_fails_the_request_at_once() {
        let layer = LimitLayer::new(window(5, secs(1))).cost(|cost: &u32| *cost);
        let mut service = layer.layer(service_fn(
            |cost: u32| async move { Ok::<_, Infallible>(cost) },
        ));
        let start = Instant::now();
        let error = service.ready().await.unwrap().call(6).await.unwrap_err();
        let error = error
            .downcast_ref::<tower_limits::error::LimiterError>()
            .and_then(|error| error.get_ref().downcast_ref::<CostTooHigh>())
            .expect("the failure is CostTooHigh");
        assert_eq!((error.cost(), error.capacity()), (6, 5));
        assert_eq!(start.elapsed(), Duration::ZERO);
        // The service is still usable, and nothing was charged.
        assert_eq!(service.ready().await.unwrap().call(5).await.unwrap(), 5);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn settling_gives_back_what_the_reply_did_not_use() {
        let tokens = window(100, secs(60));
        let mut service = ServiceBuilder::new()
            .layer(
                LimitLayer::new(tokens.clone())
                    .cost(|estimate: &u32| *estimate)
                    .settle(|used: &u32| Some(*used)),
            )
            .service(service_fn(|_: u32| async { Ok::<_, Infallible>(10u32) }));
        let start = Instant::now();
        for _ in 0..5 {
            service.ready().await.unwrap().call(60).await.unwrap();
        }
        // Five calls reserving 60 each fit in 100 because each used 10.
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert!(tokens.peek(50).await.unwrap().is_none());
        assert!(tokens.peek(51).await.unwrap().is_some());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Jobs taking several of eight slots for a while: the slots in use
        /// never exceed eight, and every job runs.
        #[test]
        fn concurrent_costs_never_exceed_the_slots(
            jobs in prop::collection::vec((1u32..=8, 1u64..50), 1..40),
        ) {
            let in_use = Arc::new(AtomicU32::new(0));
            let peak = Arc::new(AtomicU32::new(0));
            let (used, high) = (Arc::clone(&in_use), Arc::clone(&peak));
            let slots = tower_limits::ConcurrencyLimiter::new(8).unwrap();
            let layer = LimitLayer::new(slots).cost(|(cost, _): &(u32, u64)| *cost);
            let service = layer.layer(service_fn(move |(cost, millis): (u32, u64)| {
                let (used, high) = (Arc::clone(&used), Arc::clone(&high));
                async move {
                    high.fetch_max(used.fetch_add(cost, Ordering::SeqCst) + cost, Ordering::SeqCst);
                    tokio::time::sleep(ms(millis)).await;
                    used.fetch_sub(cost, Ordering::SeqCst);
                    Ok::<_, Infallible>(())
                }
            }));
            let count = jobs.len();
            let done = paused_runtime().block_on(async move {
                let calls: Vec<_> = jobs
                    .into_iter()
                    .map(|job| {
                        let mut service = service.clone();
                        tokio::spawn(async move { service.ready().await?.call(job).await })
                    })
                    .collect();
                let mut done = 0;
                for call in calls {
                    call.await.unwrap().unwrap();
                    done += 1;
                }
                done
            });
            prop_assert!(peak.load(Ordering::SeqCst) <= 8);
            prop_assert_eq!(done, count);
        }
    }
}
