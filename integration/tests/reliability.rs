//! Breaks found by an adversarial probe (a careless or hostile caller), one
//! test each: parallel callers, costs and settled amounts from outside,
//! extreme capacities, cancelled waiters, outages and key floods.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use tokio::time::{Instant, timeout};
use tower_limits::error::{KeysFull, LimiterError};
use tower_limits::limiter::{Admission, Denial, LimiterFuture};
use tower_limits::store::{MAX_LEASES, MemoryStore, Quota, StoreError, StoreErrorKind};
use tower_limits::{
    ConcurrencyLimiter, EvenlySpacedRateLimiter, Failover, KeyedLimiter, LeakyBucketLimiter,
    LeasedConcurrencyLimiter, Limiter, LimiterExt, OutagePolicy, Permit, Rate, RateLimiter,
};

use common::{ms, secs};

fn granted(admission: Admission) -> Permit {
    match admission {
        Admission::Granted(permit) => permit,
        Admission::Denied(denial) => panic!("denied until {:?}", denial.retry_at()),
    }
}

fn denied(admission: Admission) -> Denial {
    match admission {
        Admission::Granted(permit) => panic!("granted {permit:?}"),
        Admission::Denied(denial) => denial,
    }
}

/// Four OS threads hammer a 20-per-millisecond fixed window for two seconds; the
/// permits' tokens are their windows' indexes. A caller that read the clock
/// before another moved the window on must not write its old window back
/// over the newer count (it used to: 40 grants in one window).
#[test]
fn fixed_window_holds_its_limit_under_parallel_callers() {
    let limiter = RateLimiter::in_memory(Quota::fixed_window(20, ms(1)).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (limiter, stop) = (limiter.clone(), Arc::clone(&stop));
            thread::spawn(move || {
                let mut windows = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let answer = limiter.try_acquire().into_ready().ok().unwrap();
                    if let Admission::Granted(permit) = answer.unwrap() {
                        windows.push(permit.token().unwrap());
                    }
                }
                windows
            })
        })
        .collect();
    thread::sleep(secs(2));
    stop.store(true, Ordering::Relaxed);
    let mut per_window = std::collections::HashMap::<u64, u32>::new();
    for window in threads
        .into_iter()
        .flat_map(|thread| thread.join().unwrap())
    {
        *per_window.entry(window).or_default() += 1;
    }
    assert!(per_window.len() > 100, "only {} windows", per_window.len());
    let (window, most) = per_window.iter().max_by_key(|(_, count)| **count).unwrap();
    assert!(*most <= 20, "window {window} granted {most} of 20");
}

/// A settled cost is a number from outside (an upstream's usage report): it
/// must not allocate in proportion to it. Past what the window can hold it is
/// the same as a full window, and the permit says so.
#[tokio::test(start_paused = true)]
async fn a_huge_settle_fills_a_sliding_log_without_allocating_per_unit() {
    let limiter = RateLimiter::builder("llm", 1_000, secs(60))
        .without_backoff()
        .build()
        .unwrap();
    let start = Instant::now();
    let mut permit = granted(limiter.try_acquire().await.unwrap());
    limiter.settle(&mut permit, u32::MAX);
    assert_eq!(permit.cost(), 1_000, "clamped to what the window holds");
    let denial = limiter.peek(1).await.unwrap().expect("the window is full");
    assert_eq!(denial.retry_at(), Some(start + secs(60)));
    limiter.settle(&mut permit, 1);
    assert!(
        limiter.peek(999).await.unwrap().is_none(),
        "settled back down"
    );
}

/// The same for the evenly spaced limiter's window of starts.
#[tokio::test(start_paused = true)]
async fn a_huge_settle_fills_an_evenly_spaced_window_without_allocating_per_unit() {
    let limiter = EvenlySpacedRateLimiter::new(1_000, secs(60)).unwrap();
    let mut permit = granted(limiter.try_acquire().await.unwrap());
    limiter.settle(&mut permit, u32::MAX);
    assert_eq!(permit.cost(), 1_000);
    assert!(limiter.peek(1).await.unwrap().is_some());
}

/// The largest capacity (reachable from the string "4294967295/1ns") with a
/// cost of 0 or `u32::MAX`: answers, no overflow.
#[tokio::test(start_paused = true)]
async fn extreme_capacities_and_costs_answer_without_panicking() {
    let rate: Rate = "4294967295/1ns".parse().unwrap();
    let sliding = || RateLimiter::from_rate("x", rate).build().unwrap();
    let built = || {
        RateLimiter::builder("x", u32::MAX, secs(1))
            .build()
            .unwrap()
    };
    for make in [&sliding as &dyn Fn() -> RateLimiter, &built] {
        for cost in [0, 1, u32::MAX] {
            let limiter = make();
            assert!(limiter.peek(cost).await.unwrap().is_none());
            drop(granted(limiter.try_acquire_many(cost).await.unwrap()));
            let backoff = limiter.quota().backoff();
            let quota = Quota::sliding_log(u32::MAX, secs(1)).unwrap();
            limiter.set_quota(quota.with_backoff(backoff).unwrap());
            // Only a cost that fills the window starts the default backoff.
            let backing_off = limiter.peek(0).await.unwrap().is_some();
            assert_eq!(backing_off, cost == u32::MAX, "cost {cost}");
        }
    }
    // The evenly spaced limiter refuses a rate it cannot space (below a
    // nanosecond apart) instead of overflowing.
    let error = EvenlySpacedRateLimiter::from_rate(rate).unwrap_err();
    assert_eq!(error.field(), "max_executions");
    let spaced = EvenlySpacedRateLimiter::new(1_000_000_000, secs(1)).unwrap();
    for cost in [0, 1] {
        assert!(spaced.peek(cost).await.unwrap().is_none());
    }
    assert!(spaced.try_acquire_many(u32::MAX).await.is_err());
}

/// A permit settled far past the maximum holds every slot while it runs;
/// dropping it frees what it held, never a slot another call holds.
#[tokio::test]
async fn a_huge_concurrency_settle_frees_only_its_own_slots() {
    let limiter = ConcurrencyLimiter::new(4).unwrap();
    let others: Vec<Permit> = (0..3)
        .map(|_| limiter.try_acquire().into_ready().ok().unwrap().unwrap())
        .map(granted)
        .collect();
    let mut big = granted(limiter.try_acquire().await.unwrap());
    limiter.settle(&mut big, u32::MAX);
    assert_eq!(big.cost(), 4, "clamped to the maximum");
    assert_eq!(
        limiter.running(),
        7,
        "its slots, past the maximum while it runs"
    );
    drop(big);
    assert_eq!(limiter.running(), 3, "the other three still hold theirs");
    drop(granted(limiter.try_acquire().await.unwrap()));
    denied(limiter.try_acquire_many(2).await.unwrap());
    drop(others);
    assert_eq!(limiter.running(), 0);
}

/// Callers that give up while booked on a leaky bucket give their bookings
/// back: the queue empties and the next caller is booked, not refused.
#[tokio::test(start_paused = true)]
async fn cancelled_leaky_bucket_waiters_give_their_bookings_back() {
    let bucket = LeakyBucketLimiter::new(1, secs(1), 5).unwrap();
    let _first = granted(bucket.try_acquire().await.unwrap());
    for _ in 0..5 {
        assert!(timeout(ms(1), bucket.acquire()).await.is_err());
    }
    assert_eq!(bucket.queued(), 0, "nobody waits");
    let start = Instant::now();
    let denial = denied(bucket.try_acquire().await.unwrap());
    assert_eq!(denial.retry_at(), Some(start + secs(1) - ms(5)));
    assert_eq!(
        bucket.queued(),
        1,
        "the booking lasts while its denial is held"
    );
    drop(denial);
    assert_eq!(bucket.queued(), 0);
}

/// A store that is always down.
#[derive(Clone, Debug)]
struct DownStore;

fn down<T>() -> LimiterFuture<'static, Result<T, LimiterError>> {
    let error = StoreError::new("test", StoreErrorKind::Unavailable, "always down");
    LimiterFuture::ready(Err(error.into()))
}

impl Limiter for DownStore {
    fn try_acquire_many(&self, _: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        down()
    }
    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        down()
    }
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        down()
    }
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        down()
    }
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        down()
    }
    fn set_next_available_time(&self, _: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        down()
    }
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        down()
    }
}

/// During an outage the fallback grants; settling such a grant charges (and
/// refunding it gives back) the fallback's units.
#[tokio::test(start_paused = true)]
async fn failover_settles_and_refunds_fallback_grants_on_the_fallback() {
    let quota = Quota::token_bucket(10, 10, secs(1)).unwrap();
    let local = RateLimiter::in_memory(quota.with_pacing_tolerance().unwrap());
    let tokens = async || local.quota_status().await.unwrap().map(|s| s.remaining());
    let limiter = Failover::new(DownStore, OutagePolicy::Fallback(local.clone()));
    let mut permit = granted(limiter.try_acquire().await.unwrap());
    assert_eq!(tokens().await, Some(9));
    limiter.settle(&mut permit, 10);
    assert_eq!(permit.cost(), 10);
    assert_eq!(tokens().await, Some(0), "the fallback was charged 9 more");
    limiter.settle(&mut permit, 4);
    assert_eq!(tokens().await, Some(6));
    limiter.refund(permit);
    assert_eq!(tokens().await, Some(10), "the refund reached the fallback");
}

/// A key whose call is still running is never forgotten to make room: the
/// flood of other keys evicts idle ones, and the running call still counts.
#[tokio::test(start_paused = true)]
async fn keyed_eviction_never_forgets_a_key_with_a_running_call() {
    let keyed = KeyedLimiter::builder(|_: &u32| ConcurrencyLimiter::new(1).unwrap())
        .max_keys(64)
        .build()
        .unwrap();
    let running = granted(keyed.try_acquire(&0).await.unwrap());
    for key in 1..=200 {
        drop(granted(keyed.try_acquire(&key).await.unwrap()));
    }
    assert!(keyed.len() <= 64);
    denied(keyed.try_acquire(&0).await.unwrap());
    drop(running);
    drop(granted(keyed.try_acquire(&0).await.unwrap()));
}

/// When every key held has a call running, a new key is refused with a typed
/// error instead of growing the map or forgetting a running call.
#[tokio::test(start_paused = true)]
async fn a_new_key_is_refused_when_every_key_has_a_call_running() {
    let keyed = KeyedLimiter::builder(|_: &u32| ConcurrencyLimiter::new(1).unwrap())
        .max_keys(8)
        .build()
        .unwrap();
    let running: Vec<Permit> = (0..8)
        .map(|key| keyed.try_acquire(&key).into_ready().ok().unwrap().unwrap())
        .map(granted)
        .collect();
    let error = keyed.try_acquire(&8).await.unwrap_err();
    let full = error
        .get_ref()
        .downcast_ref::<KeysFull>()
        .expect("KeysFull");
    assert_eq!(full.max_keys(), 8);
    assert!(keyed.limiter(&9).is_err());
    drop(running);
    drop(granted(keyed.try_acquire(&8).await.unwrap()));
}

/// A GCRA settled past its burst is charged the burst: one full refill at
/// most, not years.
#[tokio::test(start_paused = true)]
async fn a_huge_gcra_settle_pauses_for_at_most_a_full_refill() {
    let quota = Quota::gcra(100, secs(1)).unwrap().with_burst(100).unwrap();
    let limiter = RateLimiter::in_memory(quota.with_pacing_tolerance().unwrap());
    let start = Instant::now();
    let mut permit = granted(limiter.try_acquire().await.unwrap());
    limiter.settle(&mut permit, u32::MAX);
    assert_eq!(permit.cost(), 100);
    let retry_at = limiter.peek(1).await.unwrap().unwrap().retry_at().unwrap();
    assert!(retry_at <= start + secs(1), "{:?}", retry_at - start);
}

/// A leased limit past `MAX_LEASES`, or a TTL past a day, is a
/// configuration error: each unit held is one entry in the store (a max of
/// `u32::MAX` let one call allocate 50 GB and abort), and `now + ttl`
/// overflowed the clock.
#[tokio::test(start_paused = true)]
async fn leased_limits_are_bounded_when_built() {
    let store = MemoryStore::new();
    let (max, ttl) = (MAX_LEASES + 1, secs(10));
    let error = LeasedConcurrencyLimiter::new(store.clone(), "x", max, ttl).unwrap_err();
    assert_eq!(error.field(), "max");
    let error = LeasedConcurrencyLimiter::new(store.clone(), "x", 1, Duration::MAX).unwrap_err();
    assert_eq!(error.field(), "ttl");
    let limiter = LeasedConcurrencyLimiter::new(store, "x", MAX_LEASES, secs(86_400)).unwrap();
    drop(granted(limiter.try_acquire_many(MAX_LEASES).await.unwrap()));
}
