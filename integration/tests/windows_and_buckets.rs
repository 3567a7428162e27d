//! The leaky bucket, the fixed window and the sliding window counter:
//! spacing, queue bound, boundary burst, error bound against an exact log,
//! costs, refunds, pauses, precision at high rates, and 1,000 concurrent
//! callers on a multi-thread runtime.
//!
//! The windows are `RateLimiter`s on a `MemoryStore`, whose windows fall on
//! multiples of the window in Unix time: a test that asserts instants of a
//! window first moves paused time to a window start
//! ([`to_window_start`](common::to_window_start)) and counts from there.
//!
//! Everything but the stress tests runs on paused tokio time.

mod common;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::precision::{admissions_within, assert_within_a_thousandth};
use common::stress::{CALLERS, assert_at_most_per_window, paced_bound, spans_of_callers};
use common::{ms, next_window_start, paused_runtime, to_window_start};
use proptest::prelude::*;
use tokio::time::{Instant, advance};
use tower::{ServiceBuilder, ServiceExt, service_fn};
use tower_limits::error::{BucketFull, CostTooHigh, LimiterError};
use tower_limits::limiter::{Admission, Denial};
use tower_limits::store::Quota;
use tower_limits::{LeakyBucketLimiter, LimitLayer, Limiter, LimiterExt, Permit, RateLimiter};

// ---------------------------------------------------------------- helpers

fn is_granted(answer: &Admission) -> bool {
    matches!(answer, Admission::Granted(_))
}

async fn granted(limiter: &impl Limiter, cost: u32) -> Permit {
    match limiter.try_acquire_many(cost).await.expect("no error") {
        Admission::Granted(permit) => permit,
        Admission::Denied(denial) => panic!("expected a grant, denied until {denial:?}"),
    }
}

async fn denied(limiter: &impl Limiter, cost: u32) -> Denial {
    match limiter.try_acquire_many(cost).await.expect("no error") {
        Admission::Denied(denial) => denial,
        Admission::Granted(_) => panic!("expected a denial"),
    }
}

/// The instant a denial names.
async fn denied_until(limiter: &impl Limiter, cost: u32) -> Instant {
    denied(limiter, cost).await.retry_at().expect("an instant")
}

/// The error inside a failed acquisition, as `E`.
fn cause<E: std::error::Error + Copy + 'static>(error: &LimiterError) -> E {
    *error
        .get_ref()
        .downcast_ref::<E>()
        .expect("the expected error")
}

/// A fixed window of `max` per `window`, in a memory store of its own.
fn fixed_window(max: u32, window: Duration) -> RateLimiter {
    RateLimiter::in_memory(Quota::fixed_window(max, window).unwrap())
}

/// A sliding window counter of `max` per `window`, in a memory store of
/// its own.
fn sliding_window_counter(max: u32, window: Duration) -> RateLimiter {
    RateLimiter::in_memory(Quota::sliding_window_counter(max, window).unwrap())
}

/// How many units `limiter` would grant now.
async fn remaining(limiter: &impl Limiter) -> u64 {
    let status = limiter.quota_status().await.unwrap();
    status.expect("a window quota").remaining()
}

async fn overflow(bucket: &LeakyBucketLimiter, cost: u32) -> BucketFull {
    let error = bucket
        .try_acquire_many(cost)
        .await
        .expect_err("the bucket is full");
    cause(&error)
}

// ------------------------------------------------------------ leaky bucket

#[tokio::test(start_paused = true)]
async fn leaky_bucket_never_admits_two_calls_closer_than_its_interval() {
    let bucket = LeakyBucketLimiter::new(50, Duration::from_secs(1), 100).unwrap();
    let interval = bucket.interval();
    let start = Instant::now();
    let grants = Arc::new(Mutex::new(Vec::new()));
    // Bursts of 20 callers, some while earlier ones still drain.
    let mut tasks = Vec::new();
    for at in [0, 37, 180, 181, 500] {
        tokio::time::sleep_until(start + ms(at)).await;
        for _ in 0..20 {
            let (bucket, grants) = (bucket.clone(), Arc::clone(&grants));
            tasks.push(tokio::spawn(async move {
                let _permit = bucket.acquire().await.expect("the queue has room");
                grants.lock().unwrap().push(Instant::now() - start);
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut grants = grants.lock().unwrap().clone();
    grants.sort();
    for pair in grants.windows(2) {
        assert!(
            pair[1] - pair[0] >= interval,
            "{pair:?} closer than {interval:?}"
        );
    }
    // And the drip never idled while callers waited: one every 20 ms.
    let expected: Vec<_> = (0..100).map(|k| interval * k).collect();
    assert_eq!(grants, expected);
    assert_eq!(bucket.queued(), 0);
}

#[tokio::test(start_paused = true)]
async fn leaky_bucket_turns_callers_away_once_its_queue_is_full() {
    let bucket = LeakyBucketLimiter::new(10, Duration::from_secs(1), 3).unwrap();
    let start = Instant::now();
    let _first = granted(&bucket, 1).await;
    // Each denial holds its caller's booking.
    let mut booked = Vec::new();
    for slot in 1..=3 {
        let denial = denied(&bucket, 1).await;
        assert_eq!(denial.retry_at(), Some(start + ms(100 * slot)));
        booked.push(denial);
    }
    assert_eq!(bucket.queued(), 3);

    let full = overflow(&bucket, 1).await;
    assert_eq!(full.capacity(), 3);
    // Once the first booked caller starts, one unit fits again.
    assert_eq!(full.retry_at(), start + ms(100));
    assert_eq!(overflow(&bucket, 2).await.capacity(), 3);
    // Peeking says the same and books nothing.
    let error = bucket.peek(1).await.expect_err("full");
    assert_eq!(cause::<BucketFull>(&error).capacity(), 3);
    assert_eq!(bucket.queued(), 3);

    // A caller that gives up leaves the queue at once.
    drop(booked.pop());
    assert_eq!(bucket.queued(), 2);
    assert_eq!(denied_until(&bucket, 1).await, start + ms(300));
}

#[tokio::test(start_paused = true)]
async fn leaky_bucket_accepts_again_once_its_queue_drains() {
    let bucket = LeakyBucketLimiter::new(10, Duration::from_secs(1), 2).unwrap();
    let start = Instant::now();
    let _first = granted(&bucket, 1).await;
    let first_booked = denied(&bucket, 1).await;
    let second_booked = denied(&bucket, 1).await;
    overflow(&bucket, 1).await;

    // The first booked caller comes back at its slot and starts: one unit
    // of room again.
    first_booked.wait().await;
    assert_eq!(Instant::now(), start + ms(100));
    let _second = granted(&bucket, 1).await;
    assert_eq!(bucket.queued(), 1);
    let third_booked = denied(&bucket, 1).await;
    assert_eq!(third_booked.retry_at(), Some(start + ms(300)));
    overflow(&bucket, 1).await;

    // Callers that give up leave the queue, and later ones are booked in
    // their place.
    drop(second_booked);
    drop(third_booked);
    assert_eq!(bucket.queued(), 0);
    let mut booked = Vec::new();
    for slot in [2, 3] {
        let denial = denied(&bucket, 1).await;
        assert_eq!(denial.retry_at(), Some(start + ms(100 * slot)));
        booked.push(denial);
    }
}

#[tokio::test(start_paused = true)]
async fn leaky_bucket_call_costing_n_occupies_n_slots() {
    let bucket = LeakyBucketLimiter::new(10, Duration::from_secs(1), 5).unwrap();
    let start = Instant::now();
    let batch = granted(&bucket, 3).await;
    assert_eq!(batch.cost(), 3);
    let pair = denied(&bucket, 2).await;
    assert_eq!(pair.retry_at(), Some(start + ms(300)));
    // The booked pair occupies two slots: the next one is at 500 ms.
    let one = denied(&bucket, 1).await;
    assert_eq!(one.retry_at(), Some(start + ms(500)));
    assert_eq!(bucket.queued(), 3);

    let error = bucket.try_acquire_many(6).await.unwrap_err();
    assert_eq!(cause::<CostTooHigh>(&error), CostTooHigh::new(6, 5));
    let error = bucket.peek(6).await.unwrap_err();
    assert_eq!(cause::<CostTooHigh>(&error), CostTooHigh::new(6, 5));
}

#[tokio::test(start_paused = true)]
async fn leaky_bucket_refund_frees_the_drip_it_took() {
    let bucket = LeakyBucketLimiter::new(1, Duration::from_secs(1), 1).unwrap();
    let unused = granted(&bucket, 1).await;
    assert!(!bucket.can_proceed().await.unwrap());
    bucket.refund(unused);
    assert!(bucket.can_proceed().await.unwrap());

    // Once another call has started, an older permit gives nothing back.
    let old = granted(&bucket, 1).await;
    advance(Duration::from_secs(1)).await;
    let _newer = granted(&bucket, 1).await;
    bucket.refund(old);
    assert!(!bucket.can_proceed().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn leaky_bucket_settle_moves_the_next_slot() {
    let bucket = LeakyBucketLimiter::new(10, Duration::from_secs(1), 5).unwrap();
    let start = Instant::now();
    let mut estimate = granted(&bucket, 4).await;
    bucket.settle(&mut estimate, 1);
    assert_eq!(estimate.cost(), 1);
    assert_eq!(bucket.next_available_time().await.unwrap(), start + ms(100));
    bucket.settle(&mut estimate, 3);
    assert_eq!(bucket.next_available_time().await.unwrap(), start + ms(300));
}

#[tokio::test(start_paused = true)]
async fn leaky_bucket_pause_holds_and_never_shortens() {
    let bucket = LeakyBucketLimiter::new(10, Duration::from_secs(1), 2).unwrap();
    let resume = Instant::now() + Duration::from_secs(5);
    bucket.set_next_available_time(resume).await.unwrap();
    bucket
        .set_next_available_time(Instant::now())
        .await
        .unwrap();
    assert!(!bucket.can_proceed().await.unwrap());
    assert_eq!(bucket.next_available_time().await.unwrap(), resume);
    // The queue counts from the end of the pause.
    let first = denied(&bucket, 1).await;
    assert_eq!(first.retry_at(), Some(resume));
    let second = denied(&bucket, 1).await;
    assert_eq!(second.retry_at(), Some(resume + ms(100)));
    overflow(&bucket, 1).await;
    drop((first, second));

    advance(Duration::from_secs(5)).await;
    let _permit = granted(&bucket, 1).await;
}

#[tokio::test(start_paused = true)]
async fn leaky_bucket_clear_wakes_booked_callers() {
    let bucket = LeakyBucketLimiter::new(1, Duration::from_secs(60), 1).unwrap();
    let _first = granted(&bucket, 1).await;
    let booked = denied(&bucket, 1).await;
    bucket.clear().await.unwrap();
    tokio::time::timeout(ms(1), booked.wait())
        .await
        .expect("clear wakes the booked caller");
    assert_eq!(bucket.queued(), 0);
    let _permit = granted(&bucket, 1).await;
}

#[tokio::test(start_paused = true)]
async fn leaky_bucket_layer_starts_callers_in_arrival_order_one_interval_apart() {
    let bucket = LeakyBucketLimiter::new(10, Duration::from_secs(1), 1).unwrap();
    let starts = Arc::new(Mutex::new(Vec::new()));
    let origin = Instant::now();
    let recorded = Arc::clone(&starts);
    let service = ServiceBuilder::new()
        .layer(LimitLayer::new(bucket))
        .service(service_fn(move |id: usize| {
            recorded.lock().unwrap().push((id, Instant::now() - origin));
            async move { Ok::<_, Infallible>(id) }
        }));
    // Eight callers, more than the bucket's queue: the layer queues them.
    let tasks: Vec<_> = (0..8)
        .map(|id| tokio::spawn(service.clone().oneshot(id)))
        .collect();
    for task in tasks {
        task.await.unwrap().expect("the layer admits every caller");
    }
    let expected: Vec<_> = (0..8).map(|id| (id, ms(100) * id as u32)).collect();
    assert_eq!(*starts.lock().unwrap(), expected);
}

#[tokio::test(start_paused = true)]
async fn leaky_bucket_matches_its_rate_at_10_000_and_100_000_per_second() {
    for per_second in [10_000, 100_000] {
        let bucket = LeakyBucketLimiter::new(per_second, Duration::from_secs(1), 1).unwrap();
        let span = Duration::from_millis(500);
        assert_within_a_thousandth(admissions_within(&bucket, span).await, per_second, span);
    }
}

// ------------------------------------------------------------ fixed window

#[tokio::test(start_paused = true)]
async fn fixed_window_admits_twice_its_limit_across_a_boundary() {
    let limiter = fixed_window(100, Duration::from_secs(1));
    let start = to_window_start(&limiter).await;
    advance(ms(999)).await;
    let mut admitted = 0;
    while is_granted(&limiter.try_acquire().await.unwrap()) {
        admitted += 1;
    }
    assert_eq!(admitted, 100);
    advance(ms(1)).await;
    while is_granted(&limiter.try_acquire().await.unwrap()) {
        admitted += 1;
    }
    // 200 starts within one millisecond: twice the limit.
    assert_eq!(admitted, 200);
    assert_eq!(Instant::now() - start, ms(1000));
}

#[tokio::test(start_paused = true)]
async fn fixed_window_denial_names_the_start_of_the_next_window() {
    let limiter = fixed_window(3, Duration::from_secs(1));
    let start = to_window_start(&limiter).await;
    advance(ms(250)).await;
    let _batch = granted(&limiter, 3).await;
    assert_eq!(denied_until(&limiter, 1).await, start + ms(1000));
    assert_eq!(
        limiter.next_available_time().await.unwrap(),
        start + ms(1000)
    );
    assert_eq!(remaining(&limiter).await, 0);
    advance(ms(750)).await;
    assert_eq!(remaining(&limiter).await, 3);
    let _permit = granted(&limiter, 3).await;
}

#[tokio::test(start_paused = true)]
async fn fixed_window_costs_count_and_a_cost_above_the_limit_fails() {
    let limiter = fixed_window(10, Duration::from_secs(1));
    let _eight = granted(&limiter, 8).await;
    assert!(limiter.peek(2).await.unwrap().is_none());
    assert!(limiter.peek(3).await.unwrap().is_some());
    denied(&limiter, 3).await;
    let _two = granted(&limiter, 2).await;

    let error = limiter.try_acquire_many(11).await.unwrap_err();
    assert_eq!(cause::<CostTooHigh>(&error), CostTooHigh::new(11, 10));
}

#[tokio::test(start_paused = true)]
async fn fixed_window_refund_gives_back_only_while_its_window_lasts() {
    let limiter = fixed_window(2, Duration::from_secs(1));
    let unused = granted(&limiter, 2).await;
    limiter.refund(unused);
    assert_eq!(remaining(&limiter).await, 2);

    let late = granted(&limiter, 2).await;
    advance(Duration::from_secs(1)).await;
    let _next = granted(&limiter, 1).await;
    limiter.refund(late); // its window is over: nothing to give back
    assert_eq!(remaining(&limiter).await, 1);
}

#[tokio::test(start_paused = true)]
async fn fixed_window_pause_holds_and_never_shortens() {
    let limiter = fixed_window(5, Duration::from_secs(1));
    let resume = to_window_start(&limiter).await + ms(2500);
    limiter.set_next_available_time(resume).await.unwrap();
    limiter
        .set_next_available_time(Instant::now())
        .await
        .unwrap();
    assert_eq!(denied_until(&limiter, 1).await, resume);
    advance(ms(2500)).await;
    let _permit = granted(&limiter, 5).await;
    // Full in the window the pause ended in: wait for the next one.
    assert_eq!(denied_until(&limiter, 1).await, resume + ms(500));
}

#[tokio::test(start_paused = true)]
async fn fixed_window_matches_its_rate_at_10_000_and_100_000_per_second() {
    for per_second in [10_000, 100_000] {
        let per_window = per_second / 10;
        let limiter = fixed_window(per_window, ms(100));
        to_window_start(&limiter).await;
        let span = Duration::from_secs(1);
        assert_within_a_thousandth(admissions_within(&limiter, span).await, per_second, span);
    }
}

#[tokio::test]
async fn fixed_window_aligned_to_unix_time_resets_on_whole_intervals() {
    let window = ms(250);
    // A store's windows are always aligned to Unix time.
    let limiter = fixed_window(1, window);
    let _permit = limiter.acquire().await.unwrap();
    let reset = limiter.next_available_time().await.unwrap();
    let unix = std::time::SystemTime::now() + reset.saturating_duration_since(Instant::now());
    let nanos = unix
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let offset = nanos % window.as_nanos();
    let off_by = offset.min(window.as_nanos() - offset);
    assert!(
        off_by < 5_000_000,
        "the reset is {off_by} ns off a whole 250 ms"
    );
}

// -------------------------------------------------- sliding window counter

#[tokio::test(start_paused = true)]
async fn sliding_window_counter_holds_back_the_boundary_burst() {
    let limiter = sliding_window_counter(100, Duration::from_secs(1));
    let start = to_window_start(&limiter).await;
    advance(ms(999)).await;
    let _full = granted(&limiter, 100).await;
    advance(ms(1)).await;
    // Where a fixed window admits 100 more, the previous window still
    // weighs 100: room for one more once it weighs 99, 10 ms in.
    assert_eq!(denied_until(&limiter, 1).await, start + ms(1010));
    assert_eq!(denied_until(&limiter, 10).await, start + ms(1100));
}

#[tokio::test(start_paused = true)]
async fn sliding_window_counter_denial_instants_are_exact() {
    let limiter = sliding_window_counter(7, ms(300));
    to_window_start(&limiter).await;
    for (gap, cost) in [(0, 5), (120, 2), (200, 3), (90, 7), (10, 1), (400, 6)] {
        advance(ms(gap)).await;
        match limiter.try_acquire_many(cost).await.unwrap() {
            Admission::Granted(_) => {}
            Admission::Denied(denial) => {
                let at = denial.retry_at().unwrap();
                let before = at - Duration::from_nanos(1);
                advance(before - Instant::now()).await;
                assert!(limiter.peek(cost).await.unwrap().is_some(), "1 ns early");
                advance(Duration::from_nanos(1)).await;
                assert!(
                    limiter.peek(cost).await.unwrap().is_none(),
                    "at the instant"
                );
                let _permit = granted(&limiter, cost).await;
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn sliding_window_counter_admits_evenly_spread_traffic_below_the_limit() {
    // Nine calls per window, evenly spaced: the estimate stays within one
    // call of the log's nine, so none is refused.
    let window = Duration::from_secs(1);
    let limiter = sliding_window_counter(10, window);
    to_window_start(&limiter).await;
    advance(ms(50)).await;
    for _ in 0..9 * 10 {
        let _permit = granted(&limiter, 1).await;
        advance(window / 9).await;
    }
}

#[tokio::test(start_paused = true)]
async fn sliding_window_counter_costs_refunds_and_pauses() {
    let limiter = sliding_window_counter(10, Duration::from_secs(1));
    to_window_start(&limiter).await;
    let error = limiter.try_acquire_many(11).await.unwrap_err();
    assert_eq!(cause::<CostTooHigh>(&error), CostTooHigh::new(11, 10));

    let unused = granted(&limiter, 8).await;
    denied(&limiter, 3).await;
    limiter.refund(unused); // same window: given back
    let _eight = granted(&limiter, 8).await;

    // In the next window the previous one still weighs; a refund of a
    // permit from it gives its weight back.
    let previous = granted(&limiter, 2).await;
    advance(Duration::from_secs(1)).await;
    denied(&limiter, 1).await;
    limiter.refund(previous);
    let _after_refund = granted(&limiter, 2).await;

    let resume = Instant::now() + Duration::from_secs(3);
    limiter.set_next_available_time(resume).await.unwrap();
    limiter
        .set_next_available_time(Instant::now())
        .await
        .unwrap();
    assert_eq!(denied_until(&limiter, 1).await, resume);
    assert_eq!(limiter.next_available_time().await.unwrap(), resume);
}

#[tokio::test(start_paused = true)]
async fn sliding_window_counter_matches_its_rate_at_10_000_and_100_000_per_second() {
    for per_second in [10_000, 100_000] {
        let per_window = per_second / 10;
        let limiter = sliding_window_counter(per_window, ms(100));
        to_window_start(&limiter).await;
        let span = Duration::from_secs(1);
        assert_within_a_thousandth(admissions_within(&limiter, span).await, per_second, span);
    }
}

/// What happened to one arrival in the property test.
struct Arrival {
    /// Nanoseconds since the start of the limiter's first window.
    at: u64,
    cost: u32,
    granted: bool,
}

/// Replays `arrivals` (gap in ms, cost) against a sliding window counter on
/// paused time.
fn replay(max: u32, window: Duration, arrivals: &[(u64, u32)]) -> Vec<Arrival> {
    paused_runtime().block_on(async {
        let limiter = sliding_window_counter(max, window);
        let epoch = to_window_start(&limiter).await;
        let mut log = Vec::new();
        for &(gap, cost) in arrivals {
            advance(ms(gap)).await;
            let answer = limiter.try_acquire_many(cost).await.unwrap();
            log.push(Arrival {
                at: u64::try_from((Instant::now() - epoch).as_nanos()).unwrap(),
                cost,
                granted: is_granted(&answer),
            });
        }
        log
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Checks every decision against an exact sliding log of the admitted
    /// calls: at an admission at `t`, `f` into its window with `P` admitted
    /// in the previous window, the log's count over `(t − W, t]` is at most
    /// `max + P·f` (so below `2·max`); at a denial, the log's count plus the
    /// cost exceeds `max − P·(1 − f)`.
    #[test]
    fn sliding_window_counter_stays_within_its_error_bound_of_the_exact_log(
        max in 1u32..=12,
        window_ms in 50u64..=1_000,
        arrivals in prop::collection::vec((0u64..=400, 1u32..=4), 1..150),
    ) {
        let arrivals: Vec<_> = arrivals.into_iter().map(|(gap, cost)| (gap, cost.min(max))).collect();
        let window = u64::try_from(ms(window_ms).as_nanos()).unwrap();
        let log = replay(max, ms(window_ms), &arrivals);
        let admitted: Vec<_> = log.iter().filter(|a| a.granted).collect();
        let (max, w) = (u128::from(max), u128::from(window));
        for arrival in &log {
            let t = arrival.at;
            let index = t / window;
            let start = index * window;
            let elapsed = u128::from(t - start);
            // What an exact log counts over (t − W, t], and P: what was
            // admitted in the previous fixed window, [start − W, start).
            let count: u128 = admitted
                .iter()
                .filter(|a| a.at <= t && a.at + window > t)
                .map(|a| u128::from(a.cost))
                .sum();
            let previous: u128 = admitted
                .iter()
                .filter(|a| a.at < start && a.at + window >= start)
                .map(|a| u128::from(a.cost))
                .sum();
            if arrival.granted {
                prop_assert!(count * w <= max * w + previous * elapsed,
                    "admitted at {t}: log holds {count}, bound {max} + {previous}·{elapsed}/{w}");
                prop_assert!(count < 2 * max, "admitted at {t}: log holds {count} of {max}");
            } else {
                let cost = u128::from(arrival.cost);
                prop_assert!((count + cost) * w + previous * (w - elapsed) > max * w,
                    "denied at {t}: log holds {count} + {cost}, over-count bound {previous}·(1 − {elapsed}/{w})");
            }
        }
    }
}

// ------------------------------------------------------- 1,000 callers

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leaky_bucket_holds_its_spacing_for_1000_concurrent_callers() {
    let bucket =
        LeakyBucketLimiter::new(2_000, Duration::from_secs(1), 2 * CALLERS as u32).unwrap();
    let interval = bucket.interval();
    let spans = spans_of_callers(bucket).await;
    // Starts an interval apart, but for late ones taking slots up to the
    // pacing tolerance back (without it: one per interval, 50 per 50)...
    assert_at_most_per_window(&spans, paced_bound(1, interval, interval), interval, 1);
    // ...and the drip did run: over any 50 intervals, several started.
    let bound = paced_bound(1, interval, interval * 50);
    assert_at_most_per_window(&spans, bound, interval * 50, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fixed_window_holds_its_limit_per_window_for_1000_concurrent_callers() {
    const MAX: u32 = 100;
    let window = ms(100);
    let limiter = fixed_window(MAX, window);
    // The store's windows fall on multiples of the window in Unix time. A
    // probe names the next boundary as an instant of the system's clock,
    // converted from the limiter's clock: later than the true one by at
    // most the time the probe took. The window before it is the first.
    let probe_start = Instant::now();
    let boundary = next_window_start(&limiter).await;
    let latest_start = boundary - window;
    let earliest_start = latest_start - probe_start.elapsed();
    let spans = spans_of_callers(limiter).await;

    // Grants whose span lies inside one window (wherever the first window
    // starts between the two bounds) count against it.
    let mut per_window = std::collections::BTreeMap::new();
    for span in &spans {
        let index = (span.before - latest_start).as_nanos() / window.as_nanos();
        let end = earliest_start + window * (u32::try_from(index).unwrap() + 1);
        if span.after < end {
            *per_window.entry(index).or_insert(0) += 1;
        }
    }
    for (index, count) in &per_window {
        assert!(*count <= MAX, "window {index} admitted {count} of {MAX}");
    }
    assert!(
        per_window.values().any(|&count| count >= MAX / 2),
        "no pressure"
    );
    // Across boundaries, up to twice the limit.
    assert_at_most_per_window(&spans, 2 * MAX as usize, window, MAX as usize / 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sliding_window_counter_holds_its_bound_for_1000_concurrent_callers() {
    const MAX: u32 = 100;
    let window = ms(100);
    let limiter = sliding_window_counter(MAX, window);
    let spans = spans_of_callers(limiter).await;
    // The documented bound: fewer than twice the limit in any window.
    assert_at_most_per_window(&spans, 2 * MAX as usize - 1, window, MAX as usize / 2);
}

/// A window limiter of 4 an hour at one instant: 2 + 2 granted, a
/// `clear`, 4 granted again; then the first grant refunded and the second
/// settled down to 1. Neither gives anything back (the clear did): no call
/// more passes. Without the floor a clear leaves, each granted 7 at once.
#[tokio::test(start_paused = true)]
async fn a_permit_from_before_clear_gives_nothing_back() {
    let hour = Duration::from_secs(3_600);
    clear_then_refund("fixed", fixed_window(4, hour)).await;
    clear_then_refund("counter", sliding_window_counter(4, hour)).await;
}

async fn clear_then_refund(what: &str, limiter: impl Limiter) {
    let refunded = granted(&limiter, 2).await;
    let mut settled = granted(&limiter, 2).await;
    limiter.clear().await.unwrap();
    for _ in 0..4 {
        drop(granted(&limiter, 1).await);
    }
    limiter.refund(refunded);
    limiter.settle(&mut settled, 1);
    let mut more = 0;
    while more < 4 && is_granted(&limiter.try_acquire().await.unwrap()) {
        more += 1;
    }
    assert_eq!(more, 0, "{what}: {} at once, capacity 4", 4 + more);
}
