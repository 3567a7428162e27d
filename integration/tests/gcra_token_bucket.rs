//! `GcraLimiter` and `GcraLimiter`: redis-cell's numbers, bursts and
//! refill, costs, refunds, pauses, precision at high rates, the conformance
//! bound as a property, and 1,000 concurrent callers on real time.

mod common;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::precision::{admissions_while_stepping, assert_within_a_thousandth, drain};
use common::stress::{Span, assert_at_most_per_window, paced_bound, spans_of_callers};
use common::{ms, paused_runtime, secs};
use proptest::prelude::*;
use tokio::time::{Instant, advance};
use tower::{Layer, Service, ServiceBuilder, ServiceExt, service_fn};
use tower_limits::clock::PACING_TOLERANCE;
use tower_limits::error::{BoxError, ConfigError, CostTooHigh, LimiterError, Rejected};
use tower_limits::limiter::{Admission, Denial};
use tower_limits::limiters::GcraState;
use tower_limits::{GcraLimiter, LimitLayer, Limiter, LimiterExt, Permit};

// ---------------------------------------------------------------- helpers

fn gcra(count: u32, period: Duration, burst: u32) -> GcraLimiter {
    GcraLimiter::new(count, period)
        .and_then(|limiter| limiter.with_burst(burst))
        .expect("valid configuration")
}

fn bucket(capacity: u32, refill: u32, period: Duration) -> GcraLimiter {
    GcraLimiter::token_bucket(capacity, refill, period).expect("valid configuration")
}

/// One atomic decision for a call costing `cost`: the permit or the denial.
fn take(limiter: &impl Limiter, cost: u32) -> Result<Permit, Denial> {
    let answer = limiter.try_acquire_many(cost).into_ready();
    match answer.expect("in-memory limiters answer at once") {
        Ok(Admission::Granted(permit)) => Ok(permit),
        Ok(Admission::Denied(denial)) => Err(denial),
        Err(error) => panic!("unexpected error: {error}"),
    }
}

/// The instant a denied call costing `cost` is told to retry at.
fn retry_at(limiter: &impl Limiter, cost: u32) -> Instant {
    let denial = take(limiter, cost).expect_err("the call should be denied");
    denial.retry_at().expect("rate limits name an instant")
}

/// A caller that waits for a grant and reports when it got it; returns
/// once the caller is waiting.
async fn spawn_waiter<L: Limiter + Clone>(limiter: &L) -> tokio::task::JoinHandle<Instant> {
    let limiter = limiter.clone();
    let waiter = tokio::spawn(async move {
        drop(limiter.acquire().await.unwrap());
        Instant::now()
    });
    tokio::task::yield_now().await;
    waiter
}

fn cost_too_high(error: &LimiterError) -> Option<CostTooHigh> {
    error.get_ref().downcast_ref::<CostTooHigh>().copied()
}

fn state(limiter: &GcraLimiter, cost: u32) -> (Admission, GcraState) {
    limiter
        .try_acquire_with_state(cost)
        .expect("cost within the burst")
}

// ------------------------------------------------------------ redis-cell

/// redis-cell's README: `CL.THROTTLE user123 15 30 60 1` (a max_burst of
/// 15, 30 per 60 s, quantity 1) on a fresh key replies
/// `0 16 15 -1 2`: allowed, limit 16, remaining 15, retry_after -1,
/// reset_after 2 s. Here max_burst 15 is a burst of 16 and -1 is `None`.
#[tokio::test(start_paused = true)]
async fn gcra_reproduces_the_redis_cell_readme_example() {
    let limiter = gcra(30, secs(60), 16);
    let (admission, reply) = state(&limiter, 1);
    assert!(matches!(admission, Admission::Granted(_)));
    assert!(!reply.is_limited());
    assert_eq!(reply.limit(), 16);
    assert_eq!(reply.remaining(), 15);
    assert_eq!(reply.retry_after(), None);
    assert_eq!(reply.reset_after(), secs(2));
}

/// The case table of redis-cell's own test (`it_rate_limits` in
/// redis-cell-impl/src/lib.rs): max_burst 4 (limit 5), 1 per second.
/// Columns: offset from start (ms), quantity, remaining, reset_after (ms),
/// retry_after (ms, -1 if allowed), limited.
#[tokio::test(start_paused = true)]
async fn gcra_matches_redis_cell_rate_limit_cases() {
    #[rustfmt::skip]
    let cases: [(u64, u32, u32, u64, i64, bool); 14] = [
        (0, 1, 4, 1000, -1, false),
        (0, 1, 3, 2000, -1, false),
        (0, 1, 2, 3000, -1, false),
        (0, 1, 1, 4000, -1, false),
        (0, 1, 0, 5000, -1, false),
        (0, 1, 0, 5000, 1000, true),
        (3000, 1, 2, 3000, -1, false),
        (3100, 1, 1, 3900, -1, false),
        (4000, 1, 1, 4000, -1, false),
        (8000, 1, 4, 1000, -1, false),
        (9500, 1, 4, 1000, -1, false),
        // A quantity of 0 peeks.
        (9500, 0, 4, 1000, -1, false),
        (9500, 2, 2, 3000, -1, false),
        (9500, 5, 2, 3000, 3000, true),
    ];
    let limiter = gcra(1, secs(1), 5);
    let start = Instant::now();
    // Case 0 of the table: a quantity above the limit. redis-cell answers
    // "limited, retry never"; here it is an error.
    let error = limiter.try_acquire_with_state(6).unwrap_err();
    assert_eq!(cost_too_high(&error), Some(CostTooHigh::new(6, 5)));

    for (case, &(offset, cost, remaining, reset, retry, limited)) in cases.iter().enumerate() {
        tokio::time::advance((start + ms(offset)).saturating_duration_since(Instant::now())).await;
        let peeked = limiter.peek_state(cost).unwrap();
        let (admission, reply) = state(&limiter, cost);
        let case = case + 1;
        assert_eq!(
            peeked, reply,
            "case {case}: peek_state predicts the decision"
        );
        assert_eq!(reply.is_limited(), limited, "case {case}: limited");
        assert_eq!(
            matches!(admission, Admission::Denied(_)),
            limited,
            "case {case}"
        );
        assert_eq!(reply.limit(), 5, "case {case}: limit");
        assert_eq!(reply.remaining(), remaining, "case {case}: remaining");
        assert_eq!(reply.reset_after(), ms(reset), "case {case}: reset_after");
        let retry = u64::try_from(retry).ok().map(ms);
        assert_eq!(reply.retry_after(), retry, "case {case}: retry_after");
    }
}

#[tokio::test(start_paused = true)]
async fn gcra_state_shows_a_pause() {
    let limiter = gcra(1, secs(1), 3);
    limiter.set_next_available_after(secs(10)).await.unwrap();
    let reply = limiter.peek_state(1).unwrap();
    assert!(reply.is_limited());
    assert_eq!(reply.remaining(), 0);
    assert_eq!(reply.retry_after(), Some(secs(10)));
    assert_eq!(reply.reset_after(), secs(10));
}

// --------------------------------------------------------- bursts, rates

#[tokio::test(start_paused = true)]
async fn gcra_admits_a_burst_at_once_then_exactly_one_per_interval() {
    let limiter = gcra(10, secs(1), 4);
    let start = Instant::now();
    assert_eq!(drain(&limiter), 4);
    for k in 1..=20 {
        assert_eq!(retry_at(&limiter, 1), start + ms(100 * k));
        advance(ms(100) - Duration::from_nanos(1)).await;
        assert!(take(&limiter, 1).is_err(), "one nanosecond early");
        advance(Duration::from_nanos(1)).await;
        assert_eq!(drain(&limiter), 1, "exactly one per interval");
    }
}

#[tokio::test(start_paused = true)]
async fn gcra_default_burst_of_one_spaces_calls_evenly() {
    let limiter = GcraLimiter::new(4, secs(1)).unwrap();
    assert_eq!(limiter.burst(), 1);
    let start = Instant::now();
    for k in 0..8 {
        drop(limiter.acquire().await.unwrap());
        assert_eq!(start.elapsed(), ms(250 * k));
    }
}

#[tokio::test(start_paused = true)]
async fn token_bucket_admits_its_capacity_at_once_then_the_refill_rate() {
    let limiter = bucket(5, 2, secs(1));
    let start = Instant::now();
    assert_eq!(drain(&limiter), 5);
    assert_eq!(limiter.tokens(), 0);
    assert_eq!(retry_at(&limiter, 1), start + ms(500));
    let mut starts = Vec::new();
    for _ in 0..6 {
        drop(limiter.acquire().await.unwrap());
        starts.push(start.elapsed());
    }
    let expected: Vec<_> = (1..=6).map(|k| ms(500 * k)).collect();
    assert_eq!(starts, expected);
}

#[tokio::test(start_paused = true)]
async fn token_bucket_idle_period_banks_tokens_up_to_capacity_never_more() {
    let limiter = bucket(10, 1, secs(1));
    assert_eq!(drain(&limiter), 10);
    advance(ms(3500)).await;
    assert_eq!(limiter.tokens(), 3, "three and a half tokens came back");
    advance(ms(500)).await;
    assert_eq!(limiter.tokens(), 4);
    advance(secs(3600)).await;
    assert_eq!(
        limiter.tokens(),
        10,
        "an hour idle fills the bucket, no more"
    );
    assert_eq!(drain(&limiter), 10);
}

#[tokio::test(start_paused = true)]
async fn token_bucket_keeps_the_fraction_of_a_token_between_calls() {
    let limiter = bucket(2, 1, secs(1));
    let start = Instant::now();
    assert_eq!(drain(&limiter), 2);
    advance(ms(700)).await;
    assert_eq!(limiter.tokens(), 0);
    // Not reset by the denial: the token is due 300 ms later, not 1 s.
    assert_eq!(retry_at(&limiter, 1), start + secs(1));
    advance(ms(300)).await;
    assert_eq!(drain(&limiter), 1);
}

// ----------------------------------------------------------------- costs

#[tokio::test(start_paused = true)]
async fn a_call_costing_n_takes_n_tokens_in_one_decision() {
    let limiter = bucket(10, 10, secs(1));
    let start = Instant::now();
    let permit = take(&limiter, 7).unwrap();
    assert_eq!(permit.cost(), 7);
    assert_eq!(limiter.tokens(), 3);
    // Four need one more token: 100 ms. The denial takes nothing.
    assert_eq!(retry_at(&limiter, 4), start + ms(100));
    assert_eq!(limiter.tokens(), 3);
    assert!(take(&limiter, 3).is_ok());
    assert_eq!(limiter.tokens(), 0);
    assert_eq!(retry_at(&limiter, 10), start + secs(1));
    advance(secs(1)).await;
    assert!(take(&limiter, 10).is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_cost_above_the_burst_or_capacity_is_cost_too_high() {
    let limiter = gcra(100, secs(1), 5);
    let error = limiter.try_acquire_many(6).await.unwrap_err();
    assert_eq!(cost_too_high(&error), Some(CostTooHigh::new(6, 5)));
    let error = limiter.peek_state(6).unwrap_err();
    assert_eq!(cost_too_high(&error), Some(CostTooHigh::new(6, 5)));
    assert!(take(&limiter, 5).is_ok(), "the burst itself fits");

    let limiter = bucket(3, 1, secs(1));
    let error = limiter.try_acquire_many(4).await.unwrap_err();
    assert_eq!(cost_too_high(&error), Some(CostTooHigh::new(4, 3)));
    let error = limiter.acquire_many(4).await.unwrap_err();
    assert_eq!(cost_too_high(&error), Some(CostTooHigh::new(4, 3)));
    assert_eq!(limiter.tokens(), 3, "errors take nothing");
}

#[tokio::test(start_paused = true)]
async fn a_cost_of_zero_takes_nothing() {
    let limiter = bucket(2, 1, secs(1));
    assert_eq!(drain(&limiter), 2);
    assert!(
        take(&limiter, 0).is_ok(),
        "a free call is not held by an empty bucket"
    );
    assert_eq!(limiter.tokens(), 0);
}

// ---------------------------------------------------------------- refund

#[tokio::test(start_paused = true)]
async fn refund_gives_the_cells_back() {
    let limiter = gcra(1, secs(1), 3);
    let first = take(&limiter, 1).unwrap();
    let batch = take(&limiter, 2).unwrap();
    assert!(take(&limiter, 1).is_err());
    limiter.refund(batch);
    assert_eq!(limiter.peek_state(0).unwrap().remaining(), 2);
    limiter.refund(first);
    assert_eq!(limiter.peek_state(0).unwrap().remaining(), 3);

    let limiter = bucket(4, 1, secs(1));
    let permit = take(&limiter, 4).unwrap();
    advance(ms(1500)).await;
    limiter.refund(permit);
    assert_eq!(limiter.tokens(), 4, "refilled tokens are not counted twice");
}

#[tokio::test(start_paused = true)]
async fn refund_after_a_later_grant_keeps_the_cells_spent() {
    let limiter = bucket(4, 1, secs(1));
    let early = take(&limiter, 2).unwrap();
    let _late = take(&limiter, 1).unwrap();
    limiter.refund(early);
    assert_eq!(
        limiter.tokens(),
        1,
        "the TAT moved since: nothing comes back"
    );

    let limiter = bucket(4, 1, secs(1));
    let before_clear = take(&limiter, 2).unwrap();
    limiter.clear().await.unwrap();
    drop(take(&limiter, 3).unwrap());
    limiter.refund(before_clear);
    assert_eq!(
        limiter.tokens(),
        1,
        "a permit from before `clear` returns nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn refund_wakes_a_waiting_caller_at_once() {
    let limiter = gcra(1, secs(60), 1);
    let permit = take(&limiter, 1).unwrap();
    let start = Instant::now();
    let waiter = spawn_waiter(&limiter).await;
    advance(ms(5)).await;
    limiter.refund(permit);
    assert_eq!(waiter.await.unwrap(), start + ms(5));
}

#[tokio::test(start_paused = true)]
async fn settle_gives_back_a_lower_cost_and_charges_a_higher_one() {
    let limiter = bucket(10, 1, secs(1));
    let mut estimate = take(&limiter, 6).unwrap();
    limiter.settle(&mut estimate, 2);
    assert_eq!(estimate.cost(), 2);
    assert_eq!(limiter.tokens(), 8);
    limiter.settle(&mut estimate, 9);
    assert_eq!(limiter.tokens(), 1);
    limiter.refund(estimate);
    assert_eq!(limiter.tokens(), 10, "the settled permit refunds all nine");

    // A charge past the capacity: later calls wait for it.
    let start = Instant::now();
    let mut batch = take(&limiter, 6).unwrap();
    drop(take(&limiter, 4).unwrap());
    limiter.settle(&mut batch, 9);
    assert_eq!(limiter.tokens(), 0);
    assert_eq!(retry_at(&limiter, 1), start + secs(4));
}

#[tokio::test(start_paused = true)]
async fn settle_after_a_later_grant_charges_but_gives_nothing_back() {
    let limiter = gcra(1, secs(1), 10);
    let mut first = take(&limiter, 5).unwrap();
    drop(take(&limiter, 1).unwrap());
    limiter.settle(&mut first, 2);
    assert_eq!(first.cost(), 2);
    assert_eq!(limiter.peek_state(0).unwrap().remaining(), 4);
    limiter.settle(&mut first, 4);
    assert_eq!(limiter.peek_state(0).unwrap().remaining(), 2);
}

// ------------------------------------------------- the other seed hooks

#[tokio::test(start_paused = true)]
async fn pause_never_shortens_a_wait_and_keeps_the_tokens() {
    let limiter = bucket(3, 1, secs(1));
    let start = Instant::now();
    limiter
        .set_next_available_time(start + secs(10))
        .await
        .unwrap();
    limiter
        .set_next_available_time(start + secs(2))
        .await
        .unwrap();
    assert!(!limiter.can_proceed().await.unwrap());
    assert_eq!(retry_at(&limiter, 1), start + secs(10));
    assert_eq!(
        limiter.next_available_time().await.unwrap(),
        start + secs(10)
    );
    assert_eq!(limiter.tokens(), 3);
    advance(secs(10)).await;
    assert_eq!(drain(&limiter), 3, "the whole bucket when the pause ends");
}

#[tokio::test(start_paused = true)]
async fn record_start_takes_a_cell_unconditionally() {
    let limiter = gcra(1, secs(1), 2);
    let start = Instant::now();
    for _ in 0..4 {
        limiter.record_start().await.unwrap();
    }
    limiter.record_completion().await.unwrap(); // a no-op
    assert!(!limiter.can_proceed().await.unwrap());
    // Four cells taken, two allowed at once: the next one conforms at 3 s.
    assert_eq!(
        limiter.next_available_time().await.unwrap(),
        start + secs(3)
    );
    assert_eq!(
        limiter.peek(1).await.unwrap().and_then(|d| d.retry_at()),
        Some(start + secs(3))
    );
    advance(secs(3)).await;
    assert!(limiter.can_proceed().await.unwrap());
    assert_eq!(limiter.peek(1).await.unwrap().map(|d| d.retry_at()), None);
}

#[tokio::test(start_paused = true)]
async fn clear_restores_a_full_bucket_and_wakes_waiters() {
    let limiter = bucket(2, 1, secs(3600));
    assert_eq!(drain(&limiter), 2);
    limiter.set_next_available_after(secs(7200)).await.unwrap();
    let start = Instant::now();
    let waiter = spawn_waiter(&limiter).await;
    limiter.clear().await.unwrap();
    assert_eq!(waiter.await.unwrap(), start);
    assert_eq!(limiter.tokens(), 1);
}

#[test]
fn configuration_errors_name_the_field() {
    let field = |result: Result<GcraLimiter, ConfigError>| result.unwrap_err().field();
    assert_eq!(field(GcraLimiter::new(0, secs(1))), "count");
    assert_eq!(field(GcraLimiter::new(1, Duration::ZERO)), "period");
    assert_eq!(
        field(GcraLimiter::new(10, Duration::from_nanos(5))),
        "count"
    );
    assert_eq!(field(GcraLimiter::new(1, Duration::MAX)), "period");
    assert_eq!(
        field(GcraLimiter::new(1, secs(1)).unwrap().with_burst(0)),
        "burst"
    );
    let overflow = GcraLimiter::new(1, secs(86_400 * 365))
        .unwrap()
        .with_burst(101);
    assert_eq!(field(overflow), "burst");

    let field = |result: Result<GcraLimiter, ConfigError>| result.unwrap_err().field();
    assert_eq!(field(GcraLimiter::token_bucket(0, 1, secs(1))), "capacity");
    assert_eq!(field(GcraLimiter::token_bucket(1, 0, secs(1))), "refill");
    assert_eq!(
        field(GcraLimiter::token_bucket(1, 1, Duration::ZERO)),
        "period"
    );
    assert_eq!(
        field(GcraLimiter::token_bucket(u32::MAX, 1, secs(1))),
        "capacity"
    );
}

#[test]
fn clones_share_state_and_debug_shows_the_configuration() {
    let limiter = bucket(3, 1, secs(1)).with_clock(tower_limits::clock::Clock::fast());
    drop(take(&limiter.clone(), 2).unwrap());
    assert_eq!(limiter.tokens(), 1);
    let debug = format!("{limiter:?}");
    assert!(
        debug.contains("burst: 3") && debug.contains("tokens: 1"),
        "{debug}"
    );
    let debug = format!("{:?}", gcra(10, secs(1), 2));
    assert_eq!(
        debug,
        "GcraLimiter { interval: 100ms, burst: 2, tokens: 2 }"
    );
}

// ---------------------------------------------------------------- layers

#[tokio::test(start_paused = true)]
async fn token_bucket_layer_paces_a_service() -> Result<(), BoxError> {
    let starts = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut service = ServiceBuilder::new()
        .layer(LimitLayer::new(bucket(3, 10, secs(1))))
        .service(service_fn({
            let starts = Arc::clone(&starts);
            move |()| {
                starts.lock().unwrap().push(start.elapsed());
                async { Ok::<_, Infallible>(()) }
            }
        }));
    for _ in 0..5 {
        service.ready().await?.call(()).await?;
    }
    assert_eq!(
        *starts.lock().unwrap(),
        [ms(0), ms(0), ms(0), ms(100), ms(200)]
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn gcra_layer_in_reject_mode_names_the_retry_instant() -> Result<(), BoxError> {
    let layer = LimitLayer::new(gcra(1, secs(2), 1)).reject();
    let mut service = layer.layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));
    let start = Instant::now();
    service.ready().await?.call(1).await?;
    let Err(error) = service.ready().await?.call(2).await else {
        panic!("one call per two seconds");
    };
    let retry_at = error
        .downcast_ref::<Rejected>()
        .and_then(Rejected::retry_at);
    assert_eq!(retry_at, Some(start + secs(2)));
    Ok(())
}

// ------------------------------------------------------------- precision

#[tokio::test(start_paused = true)]
async fn gcra_holds_high_rates_within_a_tenth_of_a_percent() {
    // 30,000/s has a fractional interval (33,333.3 ns, rounded up).
    for rate in [10_000, 30_000, 100_000] {
        // A burst of 2 ms absorbs the 1 ms steps.
        let burst = rate / 500;
        let limiter = gcra(rate, secs(1), burst);
        let admitted = admissions_while_stepping(&limiter, ms(1), secs(3)).await;
        assert_within_a_thousandth(admitted, rate, secs(3));
    }
}

#[tokio::test(start_paused = true)]
async fn token_bucket_holds_high_rates_within_a_tenth_of_a_percent() {
    for rate in [10_000, 100_000] {
        let limiter = bucket(rate / 1000 + 1, rate, secs(1));
        let step = Duration::from_micros(250);
        let admitted = admissions_while_stepping(&limiter, step, secs(3)).await;
        assert_within_a_thousandth(admitted, rate, secs(3));
    }
}

#[tokio::test(start_paused = true)]
async fn waiting_callers_keep_a_high_rate_despite_millisecond_timers() {
    // Timers fire on whole milliseconds; a burst of two milliseconds'
    // worth lets the waiter catch up at each tick.
    let limiter = gcra(10_000, secs(1), 20);
    let start = Instant::now();
    for _ in 0..30_020 {
        drop(limiter.acquire().await.unwrap());
    }
    let elapsed = start.elapsed();
    assert_within_a_thousandth(30_000, 10_000, elapsed);
}

// -------------------------------------------------------------- property

/// One arrival: a gap (in sixteenths of the emission interval), a cost, and
/// whether a denied caller waits for the instant it was told and retries.
#[derive(Clone, Debug)]
struct Arrival {
    gap_sixteenths: u64,
    cost: u32,
    retry: bool,
}

fn arrivals(burst: u32) -> impl Strategy<Value = Vec<Arrival>> {
    let arrival = (0..48_u64, 0..=burst, any::<bool>()).prop_map(|(gap, cost, retry)| Arrival {
        gap_sixteenths: gap,
        cost,
        retry,
    });
    prop::collection::vec(arrival, 1..120)
}

fn case() -> impl Strategy<Value = (u32, u64, u32, Vec<Arrival>)> {
    (1..=1_000_u32, 1..=2_000_u64, 1..=8_u32).prop_flat_map(|(count, period_ms, burst)| {
        (Just(count), Just(period_ms), Just(burst), arrivals(burst))
    })
}

/// Replays `arrivals` on paused time; the admitted (nanosecond, cost)
/// timeline. Every denial must name an instant at which the same call is
/// admitted.
fn replay(limiter: impl FnOnce() -> GcraLimiter, arrivals: &[Arrival]) -> Vec<(u64, u32)> {
    paused_runtime().block_on(async {
        // Built inside the paused runtime, so its clock is the paused one.
        let limiter = limiter();
        let interval = limiter.interval();
        let origin = Instant::now();
        let mut timeline = Vec::new();
        for arrival in arrivals {
            advance(interval * u32::try_from(arrival.gap_sixteenths).unwrap() / 16).await;
            let at = match take(&limiter, arrival.cost) {
                Ok(_) => Instant::now(),
                Err(denial) if arrival.retry => {
                    let retry_at = denial.retry_at().unwrap();
                    assert!(retry_at > Instant::now(), "a denial names a later instant");
                    advance(retry_at - Instant::now()).await;
                    drop(take(&limiter, arrival.cost).expect("admitted at the named instant"));
                    retry_at
                }
                Err(_) => continue,
            };
            let nanos = u64::try_from((at - origin).as_nanos()).unwrap();
            timeline.push((nanos, arrival.cost));
        }
        timeline
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The conformance definition with the pacing tolerance τ: the
    /// admissions of any closed interval of length `t` cost at most
    /// `burst + ⌊(t + τ) / T⌋`, checked exactly over every pair of
    /// admissions (without τ, the bound of `judge` and the stores:
    /// `burst + ⌊t / T⌋`).
    #[test]
    fn gcra_never_admits_more_than_burst_plus_rate_times_t((count, period_ms, burst, arrivals) in case()) {
        let limiter = || gcra(count, ms(period_ms), burst);
        let interval = u64::try_from(limiter().interval().as_nanos()).unwrap();
        let tolerance = u64::try_from(PACING_TOLERANCE.as_nanos()).unwrap();
        let timeline = replay(limiter, &arrivals);
        for (i, &(first, _)) in timeline.iter().enumerate() {
            let mut cost = 0_u64;
            for &(last, each) in &timeline[i..] {
                cost += u64::from(each);
                let bound = u64::from(burst) + (last - first + tolerance) / interval;
                prop_assert!(
                    cost <= bound,
                    "{cost} admitted in [{first}, {last}] ns, bound {bound} (T = {interval} ns)"
                );
            }
        }
    }

    /// `check()` is `try_acquire()` without the permit: twin limiters, one
    /// driven by each, give the same answers and name the same instants on
    /// any arrival pattern, and a denied `check()` takes nothing.
    #[test]
    fn check_decides_exactly_as_try_acquire((count, period_ms, burst, arrivals) in case()) {
        paused_runtime().block_on(async {
            let (gcra_checked, gcra_acquired) = (gcra(count, ms(period_ms), burst), gcra(count, ms(period_ms), burst));
            let refill = count.max(1);
            let (bucket_checked, bucket_acquired) = (bucket(burst, refill, ms(period_ms)), bucket(burst, refill, ms(period_ms)));
            let interval = gcra_checked.interval();
            for arrival in arrivals {
                advance(interval * u32::try_from(arrival.gap_sixteenths).unwrap() / 16).await;
                let expected = take(&gcra_acquired, 1).map(drop).map_err(|denial| denial.retry_at().unwrap());
                assert_eq!(gcra_checked.check(), expected, "GCRA");
                let expected = take(&bucket_acquired, 1).map(drop).map_err(|denial| denial.retry_at().unwrap());
                assert_eq!(bucket_checked.check(), expected, "token bucket");
            }
        });
    }
}

// ------------------------------------------------------ real-time stress

/// The conformance bound on real time: no `window` holds more grants than
/// `burst` plus one per `interval` of the window and the pacing tolerance
/// ([`paced_bound`]), and the busiest holds at least half that.
fn assert_conforms(spans: &[Span], burst: usize, interval: Duration, window: Duration) {
    let bound = paced_bound(burst, interval, window);
    assert_at_most_per_window(spans, bound, window, bound / 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gcra_and_token_bucket_hold_for_1000_concurrent_callers() {
    let window = ms(10);
    let limiter = gcra(5_000, secs(1), 50);
    let spans = spans_of_callers(limiter.clone()).await;
    assert_conforms(&spans, 50, limiter.interval(), window);

    let limiter = bucket(50, 5_000, secs(1));
    let spans = spans_of_callers(limiter.clone()).await;
    assert_conforms(&spans, 50, limiter.interval(), window);
}
