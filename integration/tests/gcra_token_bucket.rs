//! GCRA and the token bucket as a `RateLimiter` over a `MemoryStore`,
//! paced as `Quota::with_pacing_tolerance` makes them: redis-cell's
//! numbers, bursts and refill, costs, refunds, pauses, precision at high
//! rates, the conformance bound as a property, and 1,000 concurrent
//! callers on real time.

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
use tower_limits::clock::{Clock, PACING_TOLERANCE};
use tower_limits::error::{BoxError, ConfigError, CostTooHigh, LimiterError, Rejected};
use tower_limits::limiter::{Admission, Denial};
use tower_limits::store::{MemoryStore, Quota};
use tower_limits::{LimitLayer, Limiter, LimiterExt, Permit, QuotaStatus, RateLimiter};

// ---------------------------------------------------------------- helpers

/// GCRA: `count` per `period`, `burst` at once, paced.
fn gcra_quota(count: u32, period: Duration, burst: u32) -> Result<Quota, ConfigError> {
    Quota::gcra(count, period)?
        .with_burst(burst)?
        .with_pacing_tolerance()
}

/// A token bucket of `capacity`, `refill` per `period`, paced.
fn bucket_quota(capacity: u32, refill: u32, period: Duration) -> Result<Quota, ConfigError> {
    Quota::token_bucket(capacity, refill, period)?.with_pacing_tolerance()
}

fn gcra(count: u32, period: Duration, burst: u32) -> RateLimiter {
    RateLimiter::in_memory(gcra_quota(count, period, burst).expect("valid configuration"))
}

fn bucket(capacity: u32, refill: u32, period: Duration) -> RateLimiter {
    RateLimiter::in_memory(bucket_quota(capacity, refill, period).expect("valid configuration"))
}

/// The emission interval of `count` cells per `period`, as the crate
/// computes it: the period's nanoseconds over the count, rounded up.
fn interval(count: u32, period: Duration) -> Duration {
    let nanos = u64::try_from(period.as_nanos()).unwrap();
    Duration::from_nanos(nanos.div_ceil(u64::from(count)))
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

/// What `peek(cost)` says, answered at once: when `cost` could pass, if
/// not now.
fn peek_at(limiter: &impl Limiter, cost: u32) -> Result<Option<Instant>, LimiterError> {
    let peeked = limiter.peek(cost).into_ready();
    let denial = peeked.expect("in-memory limiters answer at once")?;
    Ok(denial.map(|denial| denial.retry_at().expect("rate limits name an instant")))
}

/// The quota and where it stands, read at once.
fn status(limiter: &impl Limiter) -> QuotaStatus {
    let status = limiter.quota_status().into_ready();
    let status = status.expect("in-memory limiters answer at once");
    status.expect("no error").expect("a rate limit has a quota")
}

/// How many units the limiter would grant now, at once.
fn tokens(limiter: &impl Limiter) -> u64 {
    status(limiter).remaining()
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

/// redis-cell's reply to `CL.THROTTLE`, read from the limiter: `limit` and
/// `remaining` from its [`QuotaStatus`], `retry_after` from a denial's
/// instant, and `reset_after`, the time until the whole burst is back,
/// from when a call costing the whole burst could pass.
#[derive(Debug, PartialEq, Eq)]
struct Reply {
    limited: bool,
    limit: u64,
    remaining: u64,
    retry_after: Option<Duration>,
    reset_after: Duration,
}

/// The reply of a limiter whose last decision was denied until `denied`
/// (`None` if granted).
fn reply(limiter: &impl Limiter, denied: Option<Instant>) -> Reply {
    let now = Instant::now();
    let status = status(limiter);
    let limit = u32::try_from(status.limit()).unwrap();
    let full_at = peek_at(limiter, limit).expect("the whole burst is a valid cost");
    Reply {
        limited: denied.is_some(),
        limit: status.limit(),
        remaining: status.remaining(),
        retry_after: denied.map(|at| at - now),
        reset_after: full_at.map_or(Duration::ZERO, |at| at - now),
    }
}

/// `CL.THROTTLE` for `cost`: `peek(cost)` first, which must name the
/// decision's outcome (and its instant) without taking anything, then
/// `try_acquire_many(cost)` and the reply.
fn throttle(limiter: &impl Limiter, cost: u32) -> Result<(Admission, Reply), LimiterError> {
    let peeked = peek_at(limiter, cost)?;
    let answer = limiter.try_acquire_many(cost).into_ready();
    let admission = answer.expect("in-memory limiters answer at once")?;
    let denied = match &admission {
        Admission::Granted(_) => None,
        Admission::Denied(denial) => Some(denial.retry_at().expect("an instant")),
    };
    assert_eq!(peeked, denied, "peek predicts the decision");
    Ok((admission, reply(limiter, denied)))
}

// ------------------------------------------------------------ redis-cell

/// redis-cell's README: `CL.THROTTLE user123 15 30 60 1` (a max_burst of
/// 15, 30 per 60 s, quantity 1) on a fresh key replies
/// `0 16 15 -1 2`: allowed, limit 16, remaining 15, retry_after -1,
/// reset_after 2 s. Here max_burst 15 is a burst of 16 and -1 is `None`.
#[tokio::test(start_paused = true)]
async fn gcra_reproduces_the_redis_cell_readme_example() {
    let limiter = gcra(30, secs(60), 16);
    let (admission, reply) = throttle(&limiter, 1).unwrap();
    assert!(matches!(admission, Admission::Granted(_)));
    assert_eq!(
        reply,
        Reply {
            limited: false,
            limit: 16,
            remaining: 15,
            retry_after: None,
            reset_after: secs(2),
        }
    );
}

/// The case table of redis-cell's own test (`it_rate_limits` in
/// redis-cell-impl/src/lib.rs): max_burst 4 (limit 5), 1 per second.
/// Columns: offset from start (ms), quantity, remaining, reset_after (ms),
/// retry_after (ms, -1 if allowed), limited.
#[tokio::test(start_paused = true)]
async fn gcra_matches_redis_cell_rate_limit_cases() {
    #[rustfmt::skip]
    let cases: [(u64, u32, u64, u64, i64, bool); 14] = [
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
    // "limited, retry never"; here it is an error, from the peek as from
    // the decision.
    let error = limiter.peek(6).await.unwrap_err();
    assert_eq!(cost_too_high(&error), Some(CostTooHigh::new(6, 5)));
    let error = limiter.try_acquire_many(6).await.unwrap_err();
    assert_eq!(cost_too_high(&error), Some(CostTooHigh::new(6, 5)));

    for (case, &(offset, cost, remaining, reset, retry, limited)) in cases.iter().enumerate() {
        tokio::time::advance((start + ms(offset)).saturating_duration_since(Instant::now())).await;
        let (admission, reply) = throttle(&limiter, cost).unwrap();
        let case = case + 1;
        assert_eq!(reply.limited, limited, "case {case}: limited");
        assert_eq!(
            matches!(admission, Admission::Denied(_)),
            limited,
            "case {case}"
        );
        assert_eq!(reply.limit, 5, "case {case}: limit");
        assert_eq!(reply.remaining, remaining, "case {case}: remaining");
        assert_eq!(reply.reset_after, ms(reset), "case {case}: reset_after");
        let retry = u64::try_from(retry).ok().map(ms);
        assert_eq!(reply.retry_after, retry, "case {case}: retry_after");
    }
}

/// A pause shows in the quota's status: nothing remains, and the whole
/// burst comes back when it ends.
#[tokio::test(start_paused = true)]
async fn quota_status_shows_a_pause() {
    let limiter = gcra(1, secs(1), 3);
    let start = Instant::now();
    limiter.set_next_available_after(secs(10)).await.unwrap();
    let denied = peek_at(&limiter, 1).unwrap();
    assert_eq!(denied, Some(start + secs(10)));
    let reply = reply(&limiter, denied);
    assert!(reply.limited);
    assert_eq!(reply.remaining, 0);
    assert_eq!(reply.retry_after, Some(secs(10)));
    assert_eq!(reply.reset_after, secs(10));
    assert_eq!(status(&limiter).refill_in(), Some(secs(10)));
    advance(secs(10)).await;
    assert_eq!(status(&limiter).remaining(), 3);
    assert_eq!(status(&limiter).refill_in(), None);
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
    let quota = Quota::gcra(4, secs(1)).unwrap();
    assert_eq!(quota.capacity(), 1);
    let limiter = RateLimiter::in_memory(quota.with_pacing_tolerance().unwrap());
    assert_eq!(limiter.quota().capacity(), 1);
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
    assert_eq!(tokens(&limiter), 0);
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
    assert_eq!(tokens(&limiter), 3, "three and a half tokens came back");
    assert_eq!(status(&limiter).refill_in(), Some(ms(500)));
    advance(ms(500)).await;
    assert_eq!(tokens(&limiter), 4);
    advance(secs(3600)).await;
    assert_eq!(
        tokens(&limiter),
        10,
        "an hour idle fills the bucket, no more"
    );
    assert_eq!(status(&limiter).refill_in(), None);
    assert_eq!(drain(&limiter), 10);
}

#[tokio::test(start_paused = true)]
async fn token_bucket_keeps_the_fraction_of_a_token_between_calls() {
    let limiter = bucket(2, 1, secs(1));
    let start = Instant::now();
    assert_eq!(drain(&limiter), 2);
    advance(ms(700)).await;
    assert_eq!(tokens(&limiter), 0);
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
    assert_eq!(tokens(&limiter), 3);
    // Four need one more token: 100 ms. The denial takes nothing.
    assert_eq!(retry_at(&limiter, 4), start + ms(100));
    assert_eq!(tokens(&limiter), 3);
    assert!(take(&limiter, 3).is_ok());
    assert_eq!(tokens(&limiter), 0);
    assert_eq!(retry_at(&limiter, 10), start + secs(1));
    advance(secs(1)).await;
    assert!(take(&limiter, 10).is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_cost_above_the_burst_or_capacity_is_cost_too_high() {
    let limiter = gcra(100, secs(1), 5);
    let error = limiter.try_acquire_many(6).await.unwrap_err();
    assert_eq!(cost_too_high(&error), Some(CostTooHigh::new(6, 5)));
    let error = limiter.peek(6).await.unwrap_err();
    assert_eq!(cost_too_high(&error), Some(CostTooHigh::new(6, 5)));
    assert!(take(&limiter, 5).is_ok(), "the burst itself fits");

    let limiter = bucket(3, 1, secs(1));
    let error = limiter.try_acquire_many(4).await.unwrap_err();
    assert_eq!(cost_too_high(&error), Some(CostTooHigh::new(4, 3)));
    let error = limiter.acquire_many(4).await.unwrap_err();
    assert_eq!(cost_too_high(&error), Some(CostTooHigh::new(4, 3)));
    assert_eq!(tokens(&limiter), 3, "errors take nothing");
}

#[tokio::test(start_paused = true)]
async fn a_cost_of_zero_takes_nothing() {
    let limiter = bucket(2, 1, secs(1));
    assert_eq!(drain(&limiter), 2);
    assert!(
        take(&limiter, 0).is_ok(),
        "a free call is not held by an empty bucket"
    );
    assert_eq!(tokens(&limiter), 0);
}

// ---------------------------------------------------------------- refund

#[tokio::test(start_paused = true)]
async fn refund_gives_the_cells_back() {
    let limiter = gcra(1, secs(1), 3);
    let first = take(&limiter, 1).unwrap();
    let batch = take(&limiter, 2).unwrap();
    assert!(take(&limiter, 1).is_err());
    limiter.refund(batch);
    assert_eq!(tokens(&limiter), 2);
    limiter.refund(first);
    assert_eq!(tokens(&limiter), 3);

    let limiter = bucket(4, 1, secs(1));
    let permit = take(&limiter, 4).unwrap();
    advance(ms(1500)).await;
    limiter.refund(permit);
    assert_eq!(tokens(&limiter), 4, "refilled tokens are not counted twice");
}

/// A grant refunded after a later one gives its cells back as a gap in the
/// line, which the next grants take (the stores' rule, `slots.rs`; the
/// cells stay spent only once their time has passed): where a refund once
/// gave nothing back after a later grant had moved the TAT, it now gives
/// back what is still ahead of now in the grant's slot, and no more.
#[tokio::test(start_paused = true)]
async fn refund_after_a_later_grant_leaves_a_gap_the_next_grants_take() {
    let limiter = bucket(4, 1, secs(1));
    let early = take(&limiter, 2).unwrap();
    let _late = take(&limiter, 1).unwrap();
    assert_eq!(tokens(&limiter), 1);
    limiter.refund(early);
    assert_eq!(tokens(&limiter), 3, "the early grant's two cells, as a gap");
    assert_eq!(drain(&limiter), 3, "the gap, then the line's end");
    assert_eq!(tokens(&limiter), 0);

    // Half of the early grant's time passed: only what is ahead comes back.
    let limiter = bucket(4, 1, secs(1));
    let early = take(&limiter, 2).unwrap();
    let _late = take(&limiter, 1).unwrap();
    advance(secs(1)).await;
    limiter.refund(early);
    assert_eq!(tokens(&limiter), 3, "one cell came back, one refilled");
}

/// A permit from before `clear` names a slot of the state `clear` dropped:
/// refunding it must give back nothing of the grants made since, or a
/// bucket of 4 would grant 6 at one instant.
#[tokio::test(start_paused = true)]
async fn a_permit_from_before_clear_gives_nothing_back() {
    let limiter = bucket(4, 1, secs(1));
    let before_clear = take(&limiter, 2).unwrap();
    limiter.clear().await.unwrap();
    drop(take(&limiter, 3).unwrap());
    limiter.refund(before_clear);
    assert_eq!(
        tokens(&limiter),
        1,
        "a permit from before `clear` returns nothing"
    );
    assert_eq!(drain(&limiter), 1, "4 at once, never more");
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
    assert_eq!(tokens(&limiter), 8);
    limiter.settle(&mut estimate, 9);
    assert_eq!(tokens(&limiter), 1);
    limiter.refund(estimate);
    assert_eq!(tokens(&limiter), 10, "the settled permit refunds all nine");

    // A charge past the capacity: later calls wait for it.
    let start = Instant::now();
    let mut batch = take(&limiter, 6).unwrap();
    drop(take(&limiter, 4).unwrap());
    limiter.settle(&mut batch, 9);
    assert_eq!(tokens(&limiter), 0);
    assert_eq!(retry_at(&limiter, 1), start + secs(4));
}

/// A settle down after a later grant frees the end of the grant's slot as
/// a gap (the stores' rule, `slots.rs`: the cells come back); a settle up
/// charges on top of the line.
#[tokio::test(start_paused = true)]
async fn settle_after_a_later_grant_gives_back_a_gap_and_charges_on_top() {
    let limiter = gcra(1, secs(1), 10);
    let start = Instant::now();
    let mut first = take(&limiter, 5).unwrap();
    drop(take(&limiter, 1).unwrap());
    assert_eq!(tokens(&limiter), 4);
    limiter.settle(&mut first, 2);
    assert_eq!(first.cost(), 2);
    assert_eq!(tokens(&limiter), 7, "three cells back, as a gap");
    limiter.settle(&mut first, 4);
    assert_eq!(first.cost(), 4);
    assert_eq!(tokens(&limiter), 5);
    // Never more than the burst held ahead of now.
    assert_eq!(retry_at(&limiter, 6), start + secs(1));
}

// ------------------------------------------------- the other seed hooks

/// A pause delays every call and is never shortened; the tokens wait
/// under it (the status counts none while it holds) and all come back
/// when it ends.
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
    let paused = status(&limiter);
    assert_eq!(paused.remaining(), 0, "nothing passes during the pause");
    assert_eq!(paused.refill_in(), Some(secs(10)));
    assert_eq!(
        peek_at(&limiter, 3).unwrap(),
        Some(start + secs(10)),
        "the whole bucket at the pause's end"
    );
    advance(secs(10)).await;
    assert_eq!(tokens(&limiter), 3);
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
    assert_eq!(tokens(&limiter), 1);
}

#[test]
fn configuration_errors_name_the_field() {
    let field = |result: Result<Quota, ConfigError>| result.unwrap_err().field();
    assert_eq!(field(gcra_quota(0, secs(1), 1)), "count");
    assert_eq!(field(gcra_quota(1, Duration::ZERO, 1)), "period");
    assert_eq!(field(gcra_quota(10, Duration::from_nanos(5), 1)), "count");
    assert_eq!(field(gcra_quota(1, Duration::MAX, 1)), "period");
    assert_eq!(field(gcra_quota(1, secs(1), 0)), "burst");
    assert_eq!(field(gcra_quota(1, secs(86_400 * 365), 101)), "burst");

    assert_eq!(field(bucket_quota(0, 1, secs(1))), "capacity");
    assert_eq!(field(bucket_quota(1, 0, secs(1))), "refill");
    assert_eq!(field(bucket_quota(1, 1, Duration::ZERO)), "period");
    assert_eq!(field(bucket_quota(u32::MAX, 1, secs(1))), "capacity");
}

#[test]
fn clones_share_state_and_debug_shows_the_configuration() {
    let store = MemoryStore::new().with_clock(Clock::fast());
    let limiter = RateLimiter::new(store, "bucket", bucket_quota(3, 1, secs(1)).unwrap());
    drop(take(&limiter.clone(), 2).unwrap());
    assert_eq!(tokens(&limiter), 1);
    let debug = format!("{limiter:?}");
    assert!(
        debug.contains("\"bucket\"") && debug.contains(&format!("{:?}", limiter.quota())),
        "{debug}"
    );
    let quota = gcra(10, secs(1), 2).quota();
    assert_eq!((quota.capacity(), quota.window()), (2, ms(200)));
    let debug = format!("{quota:?}");
    assert!(
        debug.contains("interval: 100000000") && debug.contains("burst: 2"),
        "{debug}"
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

/// Replays `arrivals`, spaced in sixteenths of `interval`, on paused time;
/// the admitted (nanosecond, cost) timeline. Every denial must name an
/// instant at which the same call is admitted.
fn replay(
    limiter: impl FnOnce() -> RateLimiter,
    interval: Duration,
    arrivals: &[Arrival],
) -> Vec<(u64, u32)> {
    paused_runtime().block_on(async {
        // Built inside the paused runtime, so its clock is the paused one.
        let limiter = limiter();
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

/// When each call's denial says it could pass (`None`: granted).
fn denied_until(admission: Result<Permit, Denial>) -> Option<Instant> {
    admission.err().map(|denial| denial.retry_at().unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The conformance definition with the pacing tolerance τ: the
    /// admissions of any closed interval of length `t` cost at most
    /// `burst + ⌊(t + τ) / T⌋`, checked exactly over every pair of
    /// admissions (without τ, the bound of a strict quota:
    /// `burst + ⌊t / T⌋`).
    #[test]
    fn gcra_never_admits_more_than_burst_plus_rate_times_t((count, period_ms, burst, arrivals) in case()) {
        let interval = interval(count, ms(period_ms));
        let limiter = || gcra(count, ms(period_ms), burst);
        let nanos = u64::try_from(interval.as_nanos()).unwrap();
        let tolerance = u64::try_from(PACING_TOLERANCE.as_nanos()).unwrap();
        let timeline = replay(limiter, interval, &arrivals);
        for (i, &(first, _)) in timeline.iter().enumerate() {
            let mut cost = 0_u64;
            for &(last, each) in &timeline[i..] {
                cost += u64::from(each);
                let bound = u64::from(burst) + (last - first + tolerance) / nanos;
                prop_assert!(
                    cost <= bound,
                    "{cost} admitted in [{first}, {last}] ns, bound {bound} (T = {nanos} ns)"
                );
            }
        }
    }

    /// `peek(cost)` predicts `try_acquire_many(cost)` exactly, instant
    /// included, and a denied call takes nothing: twin limiters, one asked
    /// every call and one only the calls its twin granted, give the same
    /// grants and stand alike after each arrival, on any arrival pattern.
    #[test]
    fn peek_predicts_each_decision_and_a_denial_takes_nothing((count, period_ms, burst, arrivals) in case()) {
        paused_runtime().block_on(async {
            let refill = count.max(1);
            let twins = [
                ("GCRA", gcra(count, ms(period_ms), burst), gcra(count, ms(period_ms), burst)),
                ("token bucket", bucket(burst, refill, ms(period_ms)), bucket(burst, refill, ms(period_ms))),
            ];
            let interval = interval(count, ms(period_ms));
            for arrival in arrivals {
                advance(interval * u32::try_from(arrival.gap_sixteenths).unwrap() / 16).await;
                for (name, asked, granted_only) in &twins {
                    let predicted = peek_at(asked, arrival.cost).unwrap();
                    let decided = denied_until(take(asked, arrival.cost));
                    assert_eq!(decided, predicted, "{name}: peek predicts the decision");
                    if decided.is_none() {
                        let twin = denied_until(take(granted_only, arrival.cost));
                        assert_eq!(twin, None, "{name}: the twin is granted alike");
                    } else {
                        let twin = peek_at(granted_only, arrival.cost).unwrap();
                        assert_eq!(twin, decided, "{name}: the same instant, nothing taken");
                    }
                    assert_eq!(status(asked), status(granted_only), "{name}: the same state");
                }
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
    assert_conforms(&spans, 50, interval(5_000, secs(1)), window);

    let limiter = bucket(50, 5_000, secs(1));
    let spans = spans_of_callers(limiter.clone()).await;
    assert_conforms(&spans, 50, interval(5_000, secs(1)), window);
}
