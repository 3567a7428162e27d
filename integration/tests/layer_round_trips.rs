//! Layers in front of a limiter whose every decision takes a round trip (a
//! store): decisions run concurrently, so a layer serves many callers per
//! round trip, and admissions still keep to the limit.
//!
//! The limiter is an in-memory one behind a 10 ms sleep, on paused time.

mod common;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{ms, secs};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::util::BoxCloneService;
use tower::{Layer, Service, ServiceExt, service_fn};
use tower_limits::error::{BoxError, Elapsed, LimiterError, Overloaded};
use tower_limits::limit::{FairLimitLayer, KeyedLimitLayer};
use tower_limits::limiter::{Admission, LimiterFuture};
use tower_limits::store::Quota;
use tower_limits::{ConcurrencyLimiter, KeyedLimiter, LimitLayer, Limiter, Permit, RateLimiter};

/// How long every decision takes.
const ROUND_TRIP: Duration = Duration::from_millis(10);

/// What the limiter decided, and when.
#[derive(Default)]
struct Log {
    decisions: usize,
    grants: Vec<Instant>,
    refunds: usize,
    in_flight: usize,
    /// The most decisions in flight at once.
    most_in_flight: usize,
}

/// Counts a decision in flight until dropped.
struct InFlight<'a>(&'a Mutex<Log>);

impl<'a> InFlight<'a> {
    fn new(log: &'a Mutex<Log>) -> Self {
        let mut counts = log.lock().unwrap();
        counts.in_flight += 1;
        counts.most_in_flight = counts.most_in_flight.max(counts.in_flight);
        Self(log)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.lock().unwrap().in_flight -= 1;
    }
}

/// How a [`RoundTrip`] limiter makes a decision take a while.
#[derive(Clone, Copy)]
enum Trip {
    /// Sleeps [`ROUND_TRIP`] (on paused time).
    Sleep,
    /// Yields a few times (on a multi-thread runtime, on real time).
    Yield,
    /// The inner limiter's own round trip (a real store).
    Store,
}

/// `inner` behind a round trip: each decision takes its `trip`, then asks
/// `inner` (so a grant's instant is its decision's). Logs the decisions.
#[derive(Clone)]
struct RoundTrip<L> {
    inner: L,
    log: Arc<Mutex<Log>>,
    trip: Trip,
}

impl<L> RoundTrip<L> {
    fn new(inner: L, log: &Arc<Mutex<Log>>) -> Self {
        Self::with_trip(inner, log, Trip::Sleep)
    }

    fn with_trip(inner: L, log: &Arc<Mutex<Log>>, trip: Trip) -> Self {
        Self {
            inner,
            log: Arc::clone(log),
            trip,
        }
    }

    async fn trip(&self) {
        match self.trip {
            Trip::Sleep => tokio::time::sleep(ROUND_TRIP).await,
            Trip::Yield => {
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
            }
            Trip::Store => {}
        }
    }
}

impl<L: Limiter> Limiter for RoundTrip<L> {
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        LimiterFuture::new(async move {
            let in_flight = InFlight::new(&self.log);
            self.trip().await;
            let answer = self.inner.try_acquire_many(cost).await;
            drop(in_flight);
            let mut log = self.log.lock().unwrap();
            log.decisions += 1;
            if let Ok(Admission::Granted(_)) = answer {
                log.grants.push(Instant::now());
            }
            answer
        })
    }
    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        self.inner.can_proceed()
    }
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.inner.record_start()
    }
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.inner.record_completion()
    }
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        self.inner.next_available_time()
    }
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.inner.set_next_available_time(at)
    }
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.inner.clear()
    }
    fn refund(&self, permit: Permit) {
        self.log.lock().unwrap().refunds += 1;
        self.inner.refund(permit);
    }
}

/// `count` a second, `burst` at once.
fn gcra(count: u32, burst: u32) -> RateLimiter {
    let quota = Quota::gcra(count, secs(1))
        .and_then(|quota| quota.with_burst(burst))
        .and_then(Quota::with_pacing_tolerance)
        .expect("valid configuration");
    RateLimiter::in_memory(quota)
}

type Stack = BoxCloneService<u32, u32, BoxError>;
type Inner = BoxCloneService<u32, u32, Infallible>;

fn echo() -> Inner {
    BoxCloneService::new(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }))
}

/// Each layer that admits callers, in front of `limiter` and `inner` (the
/// keyed layer gives every key its own limiter and sends all requests to one
/// key).
fn stacks<L: Limiter + Clone>(limiter: &L, inner: &Inner) -> [(&'static str, Stack); LAYERS] {
    let limit = LimitLayer::new(limiter.clone());
    let cost = LimitLayer::new(limiter.clone()).cost(|_: &u32| 1);
    let shared = limiter.clone();
    let keyed = KeyedLimiter::builder(move |_: &u8| shared.clone())
        .build()
        .expect("valid configuration");
    let keyed = KeyedLimitLayer::new(keyed, |_: &u32| 0_u8);
    let fair = FairLimitLayer::new(limiter.clone(), |n: &u32| n % 4);
    [
        ("limit", BoxCloneService::new(limit.layer(inner.clone()))),
        ("cost", BoxCloneService::new(cost.layer(inner.clone()))),
        ("keyed", BoxCloneService::new(keyed.layer(inner.clone()))),
        ("fair", BoxCloneService::new(fair.layer(inner.clone()))),
    ]
}

const LAYERS: usize = 4;

fn nth_stack<L: Limiter + Clone>(limiter: &L, layer: usize) -> (&'static str, Stack) {
    nth_stack_over(limiter, &echo(), layer)
}

fn nth_stack_over<L: Limiter + Clone>(
    limiter: &L,
    inner: &Inner,
    layer: usize,
) -> (&'static str, Stack) {
    stacks(limiter, inner)
        .into_iter()
        .nth(layer)
        .expect("a layer")
}

/// Spawns `count` callers of `service` at once (`ready`, then `call`).
fn spawn_callers<S>(service: &S, count: u32) -> JoinSet<Result<u32, BoxError>>
where
    S: Service<u32, Response = u32, Error = BoxError, Future: Send> + Clone + Send + 'static,
{
    let mut callers = JoinSet::new();
    for n in 0..count {
        let mut service = service.clone();
        callers.spawn(async move { service.ready().await?.call(n).await });
    }
    callers
}

/// Waits for every caller; all must be admitted.
async fn admit_all(mut callers: JoinSet<Result<u32, BoxError>>) {
    while let Some(result) = callers.join_next().await {
        result.expect("caller task").expect("admitted");
    }
}

/// GCRA conformance of the grant instants: any `n` grants span at least
/// `(n - burst)` emission intervals, so no window ever holds more than the
/// burst plus what the rate refilled in it.
fn assert_conforms(grants: &[Instant], burst: usize, interval: Duration) {
    for (first, start) in grants.iter().enumerate() {
        for (last, end) in grants.iter().enumerate().skip(first + burst) {
            let refilled = u32::try_from(last + 1 - first - burst).unwrap();
            assert!(
                *end - *start >= interval * refilled,
                "grants {first}..={last} within {:?}: more than the limit",
                *end - *start
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_limit_with_room_for_everyone_admits_100_callers_in_one_round_trip() {
    for (name, stack) in stacks(
        &RoundTrip::new(gcra(1_000, 1_000), &Arc::default()),
        &echo(),
    ) {
        let start = Instant::now();
        admit_all(spawn_callers(&stack, 100)).await;
        let took = start.elapsed();
        assert!(took <= ms(50), "{name}: 100 callers took {took:?}");
        eprintln!("{name}: 100 callers admitted in {took:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn admissions_keep_to_a_10_per_second_limit_and_finish_with_it() {
    for layer in 0..LAYERS {
        // A fresh limiter for each layer.
        let log = Arc::default();
        let (name, stack) = nth_stack(&RoundTrip::new(gcra(10, 10), &log), layer);
        let start = Instant::now();
        admit_all(spawn_callers(&stack, 100)).await;
        let took = start.elapsed();

        let log = log.lock().unwrap();
        assert_eq!(log.grants.len(), 100, "{name}");
        let mut grants = log.grants.clone();
        grants.sort();
        assert_conforms(&grants, 10, ms(100));
        // 10 at once, then one every 100 ms: the last one is due at 9 s
        // (plus the first round trip); a few round trips' slack.
        assert!(took <= secs(9) + ROUND_TRIP * 5, "{name}: took {took:?}");
        // Each of the 100 asks once at first; then each refill costs two
        // decisions (the grant, and one denial), not one per waiter.
        assert!(
            log.decisions <= 100 + 2 * 90,
            "{name}: {} decisions",
            log.decisions
        );
        eprintln!("{name}: {took:?}, {} decisions", log.decisions);
    }
}

#[tokio::test(start_paused = true)]
async fn callers_denied_until_a_pause_ends_are_admitted_a_few_round_trips_after_it() {
    for layer in 0..LAYERS {
        let log = Arc::default();
        let limiter = RoundTrip::new(gcra(1_000, 1_000), &log);
        let (name, stack) = nth_stack(&limiter, layer);
        let resume = Instant::now() + secs(1);
        limiter.set_next_available_time(resume).await.unwrap();

        admit_all(spawn_callers(&stack, 100)).await;
        let after_resume = Instant::now() - resume;

        // Retries go out 1, 1, 2, 4, ... at a time while all are granted: 8
        // round trips for 100 callers, where one at a time would take 100.
        assert!(after_resume <= ROUND_TRIP * 9, "{name}: {after_resume:?}");
        let log = log.lock().unwrap();
        assert!(log.grants.iter().all(|grant| *grant > resume), "{name}");
        assert!(log.decisions <= 300, "{name}: {} decisions", log.decisions);
        eprintln!(
            "{name}: {after_resume:?} after the pause, {} decisions",
            log.decisions
        );
    }
}

/// An inner service that records each request as it starts.
fn recording() -> (Inner, Arc<Mutex<Vec<u32>>>) {
    let started = Arc::<Mutex<Vec<u32>>>::default();
    let recorded = Arc::clone(&started);
    let inner = BoxCloneService::new(service_fn(move |n: u32| {
        recorded.lock().unwrap().push(n);
        async move { Ok::<_, Infallible>(n) }
    }));
    (inner, started)
}

#[tokio::test(start_paused = true)]
async fn callers_waiting_after_a_denial_are_admitted_in_the_order_they_joined_the_line() {
    // One call every 100 ms; callers arrive every 20 ms, each after the one
    // before it was denied (or found others waiting).
    let limiter = RoundTrip::new(gcra(10, 1), &Arc::default());
    let (inner, started) = recording();
    let stack = BoxCloneService::new(LimitLayer::new(limiter).layer(inner));
    let mut callers = JoinSet::new();
    for n in 0..10 {
        let mut stack = stack.clone();
        callers.spawn(async move { stack.ready().await?.call(n).await });
        tokio::time::sleep(ms(20)).await;
    }
    admit_all(callers).await;
    assert_eq!(*started.lock().unwrap(), (0..10).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn a_fair_line_takes_turns_across_keys_while_retries_take_round_trips() {
    // One call every 100 ms, shared by tenants 0 (10 callers) and 1 (5).
    let limiter = RoundTrip::new(gcra(10, 1), &Arc::default());
    let (inner, started) = recording();
    let fair = FairLimitLayer::new(limiter, |n: &u32| u32::from(*n >= 10));
    let stack = BoxCloneService::new(fair.layer(inner));
    let mut callers = JoinSet::new();
    for n in 0..15 {
        let mut stack = stack.clone();
        callers.spawn(async move { stack.ready().await?.call(n).await });
    }
    admit_all(callers).await;
    let tenants: Vec<u32> = started
        .lock()
        .unwrap()
        .iter()
        .map(|n| u32::from(*n >= 10))
        .collect();
    eprintln!("tenants in admission order: {tenants:?}");
    // Tenant 1 gets every other admission once its callers wait.
    let last_of_tenant_1 = tenants.iter().rposition(|tenant| *tenant == 1).unwrap();
    assert!(
        last_of_tenant_1 <= 11,
        "tenant 1 was held back: {tenants:?}"
    );
}

// ===== bounds =====

/// Runs 100 callers of `stack` at once; counts each error type, and notes
/// when the last one failed.
async fn count_failures(stack: &Stack) -> (usize, usize, usize, Duration) {
    let start = Instant::now();
    let mut callers = spawn_callers(stack, 100);
    let (mut admitted, mut overloaded, mut elapsed, mut last_failure) = (0, 0, 0, Duration::ZERO);
    while let Some(result) = callers.join_next().await {
        match result.expect("caller task") {
            Ok(_) => admitted += 1,
            Err(error) => {
                last_failure = start.elapsed();
                if error.is::<Overloaded>() {
                    overloaded += 1;
                } else if error.is::<Elapsed>() {
                    elapsed += 1;
                } else {
                    panic!("unexpected error {error}");
                }
            }
        }
    }
    (admitted, overloaded, elapsed, last_failure)
}

#[tokio::test(start_paused = true)]
async fn max_waiting_counts_callers_denied_not_first_attempts_in_flight() {
    let limiter = RoundTrip::new(gcra(10, 10), &Arc::default());
    let stack = BoxCloneService::new(LimitLayer::new(limiter).max_waiting(5).layer(echo()));
    // All 100 ask at once; 10 are admitted, 5 of the 90 denied wait.
    let (admitted, overloaded, _, last_failure) = count_failures(&stack).await;
    assert_eq!((admitted, overloaded), (15, 85));
    assert_eq!(last_failure, ROUND_TRIP, "turned away as soon as denied");
}

#[tokio::test(start_paused = true)]
async fn max_wait_fails_a_caller_as_soon_as_its_denial_names_a_later_instant() {
    let limiter = RoundTrip::new(gcra(10, 10), &Arc::default());
    let stack = BoxCloneService::new(LimitLayer::new(limiter).max_wait(ms(50)).layer(echo()));
    // The next unit comes 110 ms in, past every deadline.
    let (admitted, _, elapsed, last_failure) = count_failures(&stack).await;
    assert_eq!((admitted, elapsed), (10, 90));
    assert_eq!(last_failure, ROUND_TRIP);
}

// ===== cancellation =====

/// Drops `gives_up` (a caller whose decision is in flight, and will be
/// granted the only unit): the grant is refunded once the decision is in,
/// and the next caller gets the unit one round trip after it asks, with
/// nobody left in line.
async fn give_up_and_check_the_refund(
    name: &str,
    gives_up: JoinSet<Result<u32, BoxError>>,
    log: &Mutex<Log>,
    stack: &Stack,
) {
    drop(gives_up);
    tokio::time::sleep(ROUND_TRIP).await;
    assert_eq!(log.lock().unwrap().refunds, 1, "{name}");

    let late = Instant::now();
    admit_all(spawn_callers(stack, 1)).await;
    assert_eq!(
        late.elapsed(),
        ROUND_TRIP,
        "{name}: the unit was given back"
    );
}

#[tokio::test(start_paused = true)]
async fn a_caller_dropped_while_its_first_attempt_is_in_flight_gets_its_grant_refunded() {
    for layer in 0..LAYERS {
        let log = Arc::default();
        let (name, stack) = nth_stack(&RoundTrip::new(gcra(1, 1), &log), layer);
        // The only unit of the next second goes to a caller who gives up.
        let gives_up = spawn_callers(&stack, 1);
        tokio::time::sleep(ROUND_TRIP / 2).await;
        give_up_and_check_the_refund(name, gives_up, &log, &stack).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_caller_dropped_while_its_retry_is_in_flight_gets_its_grant_refunded() {
    for layer in 0..LAYERS {
        let log = Arc::default();
        let (name, stack) = nth_stack(&RoundTrip::new(gcra(1, 1), &log), layer);
        let start = Instant::now();
        let first = spawn_callers(&stack, 1);
        tokio::time::sleep(ms(1)).await;
        // The first is admitted at 10 ms, so the next unit comes at 1.01 s;
        // the second, denied until then, retries then and gives up mid-retry.
        let gives_up = spawn_callers(&stack, 1);
        admit_all(first).await;
        tokio::time::sleep_until(start + secs(1) + ROUND_TRIP + ROUND_TRIP / 2).await;
        give_up_and_check_the_refund(name, gives_up, &log, &stack).await;
    }
}

// ===== many threads =====

/// Counts the calls running at once.
#[derive(Default)]
struct Running {
    now: AtomicUsize,
    max: AtomicUsize,
}

/// An inner service that counts its running calls in `running`.
fn counting(running: &Arc<Running>) -> Inner {
    let running = Arc::clone(running);
    BoxCloneService::new(service_fn(move |n: u32| {
        let running = Arc::clone(&running);
        async move {
            let now = running.now.fetch_add(1, Ordering::SeqCst) + 1;
            running.max.fetch_max(now, Ordering::SeqCst);
            tokio::task::yield_now().await;
            running.now.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, Infallible>(n)
        }
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_concurrency_limit_answering_later_holds_for_1000_callers_on_4_threads() {
    for layer in 0..LAYERS {
        let concurrency = ConcurrencyLimiter::new(8).unwrap();
        let limiter = RoundTrip::with_trip(concurrency.clone(), &Arc::default(), Trip::Yield);
        let running = Arc::default();
        let (name, stack) = nth_stack_over(&limiter, &counting(&running), layer);
        let callers = spawn_callers(&stack, 1_000);
        tokio::time::timeout(secs(30), admit_all(callers))
            .await
            .unwrap_or_else(|_| panic!("{name}: a caller was stranded"));
        let max = running.max.load(Ordering::SeqCst);
        assert!(max <= 8, "{name}: {max} ran at once");
        assert_eq!(concurrency.running(), 0, "{name}: a slot leaked");
    }
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_redis_every_layer_has_many_decisions_in_flight_and_grants_exactly_the_limit() {
    use tower_limits::RateLimiter;
    use tower_limits::store::Quota;

    for layer in 0..LAYERS {
        let Some(store) = common::redis::store("the layers over Redis").await else {
            return;
        };
        let log = Arc::default();
        let quota = Quota::fixed_window(200, secs(3_600)).unwrap();
        let shared = RateLimiter::new(store, "layers", quota);
        let limiter = RoundTrip::with_trip(shared.clone(), &log, Trip::Store);
        let (name, stack) = nth_stack(&limiter, layer);
        tokio::time::timeout(secs(30), admit_all(spawn_callers(&stack, 200)))
            .await
            .unwrap_or_else(|_| panic!("{name}: a caller was stranded"));
        // One at a time would be 1 (the line's turn held across each call).
        let most_in_flight = log.lock().unwrap().most_in_flight;
        assert!(most_in_flight > 1, "{name}: one decision at a time");
        let past_the_limit = shared.try_acquire().await.unwrap();
        assert!(matches!(past_the_limit, Admission::Denied(_)), "{name}");
        eprintln!("{name}: up to {most_in_flight} decisions in flight over Redis");
    }
}
