//! Integration tests of [`LimitLayer`] and the [`Limit`] service: exact waits,
//! arrival order, shared limits across clones, reservations and refunds, the
//! queue bounds, reject mode, inner errors and backpressure, `Buffer`, and a
//! composite limiter behind one layer.
//!
//! Time-based tests run on paused tokio time, so an expected start instant is
//! asserted exactly: not before, and not a timer tick (1 ms) after.
//!
//! [`Limit`]: tower_limits::Limit

mod common;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::ms;
use common::recorder::{Recorder, finish, join_all, ready_and_call, spawn_callers};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until};
use tower::buffer::Buffer;
use tower::{Layer, Service, ServiceExt};
use tower_limits::error::{BoxError, Elapsed, Overloaded, Rejected};
use tower_limits::{
    CompositeLimiter, ConcurrencyLimiter, DelayLimiter, EvenlySpacedRateLimiter, LimitLayer,
    Limiter, RateLimiter,
};
use tower_test::assert_request_eq;
use tower_test::mock::{self, Spawn};

// ===== helpers =====

fn concurrency(max: u32) -> ConcurrencyLimiter {
    ConcurrencyLimiter::new(max).expect("valid concurrency limit")
}

fn delay(delay: Duration) -> DelayLimiter {
    DelayLimiter::new(delay).expect("valid delay")
}

/// A plain sliding window: `max` starts per `window`, no backoff.
fn rate(max: u32, window: Duration) -> RateLimiter {
    RateLimiter::builder("test", max, window)
        .without_backoff()
        .build()
        .expect("valid rate limit")
}

/// Spawns a caller that arrives at `at`.
fn spawn_caller_at<S>(service: &S, id: usize, at: Instant) -> JoinHandle<Result<usize, BoxError>>
where
    S: Service<usize, Response = usize, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send,
{
    let service = service.clone();
    tokio::spawn(async move {
        sleep_until(at).await;
        ready_and_call(service, id).await
    })
}

/// Spawns a caller that waits for admission and calls `service` (a refused
/// call fails at once) and reports the outcome and the instant it came.
fn spawn_admission<S>(service: &S) -> JoinHandle<(Result<usize, BoxError>, Instant)>
where
    S: Service<usize, Response = usize, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send,
{
    let service = service.clone();
    tokio::spawn(async move {
        let outcome = ready_and_call(service, 1).await;
        (outcome, Instant::now())
    })
}

/// The most starts that fall in any window `(t - window, t]`.
fn max_starts_in_any_window(offsets: &[Duration], window: Duration) -> usize {
    offsets
        .iter()
        .map(|&end| {
            offsets
                .iter()
                .filter(|&&start| start <= end && start + window > end)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[track_caller]
fn assert_ready_ok<E: fmt::Debug>(poll: Poll<Result<(), E>>) {
    match poll {
        Poll::Ready(Ok(())) => {}
        other => panic!("expected Ready(Ok(())), got {other:?}"),
    }
}

#[track_caller]
fn assert_pending<T: fmt::Debug>(poll: Poll<T>) {
    assert!(poll.is_pending(), "expected Pending, got {poll:?}");
}

/// The error of a call refused at once, as `E`: its `poll_ready` is ready at
/// once and its `call` fails without reaching the inner service (the mock
/// panics on a call it was not made ready for).
#[track_caller]
fn expect_refusal<E, L>(service: &mut MockLimit<L>) -> E
where
    E: std::error::Error + Clone + 'static,
    L: Limiter + Clone,
{
    assert_ready_ok(service.poll_ready());
    let mut call = std::pin::pin!(service.call("refused"));
    match poll_once(call.as_mut()) {
        Poll::Ready(Err(error)) => match error.downcast_ref::<E>() {
            Some(error) => error.clone(),
            None => panic!("expected {}, got {error:?}", std::any::type_name::<E>()),
        },
        other => panic!(
            "expected Ready(Err({})), got {other:?}",
            std::any::type_name::<E>()
        ),
    }
}

/// Polls `future` once with a no-op waker, keeping it alive afterwards.
fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

/// An error of the inner service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Boom;

impl fmt::Display for Boom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("boom")
    }
}

impl std::error::Error for Boom {}

type MockLimit<L> = Spawn<tower_limits::Limit<mock::Mock<&'static str, &'static str>, L>>;
type MockHandle = mock::Handle<&'static str, &'static str>;

/// A limited mock service on a mock task, for polling by hand.
fn mock_limit<L: Limiter + Clone>(layer: LimitLayer<L>) -> (MockLimit<L>, MockHandle) {
    mock::spawn_layer(layer)
}

// ===== exact waits =====

#[tokio::test(start_paused = true)]
async fn delay_limiter_admits_each_caller_exactly_one_delay_after_the_last() {
    let origin = Instant::now();
    let recorder = Recorder::new(Duration::ZERO);
    let service = LimitLayer::new(delay(ms(100))).layer(recorder.clone());

    join_all(spawn_callers(&service, 0..5).await).await;

    assert_eq!(
        recorder.offsets(origin),
        [ms(0), ms(100), ms(200), ms(300), ms(400)]
    );
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_admits_the_next_caller_exactly_when_the_oldest_start_leaves_the_window() {
    let origin = Instant::now();
    let recorder = Recorder::new(Duration::ZERO);
    let service = LimitLayer::new(rate(3, ms(1000))).layer(recorder.clone());

    let callers = vec![
        spawn_caller_at(&service, 0, origin),
        spawn_caller_at(&service, 1, origin + ms(100)),
        spawn_caller_at(&service, 2, origin + ms(200)),
        // The window is full from here: these wait for starts 0 and 1 to leave it.
        spawn_caller_at(&service, 3, origin + ms(300)),
        spawn_caller_at(&service, 4, origin + ms(300)),
    ];
    join_all(callers).await;

    assert_eq!(
        recorder.offsets(origin),
        [ms(0), ms(100), ms(200), ms(1000), ms(1100)]
    );
}

#[tokio::test(start_paused = true)]
async fn evenly_spaced_limiter_admits_callers_exactly_one_interval_apart() -> Result<(), BoxError> {
    let origin = Instant::now();
    let recorder = Recorder::new(Duration::ZERO);
    let limiter = EvenlySpacedRateLimiter::new(4, ms(1000))?;
    let service = LimitLayer::new(limiter).layer(recorder.clone());

    join_all(spawn_callers(&service, 0..5).await).await;

    assert_eq!(
        recorder.offsets(origin),
        [ms(0), ms(250), ms(500), ms(750), ms(1000)]
    );
    Ok(())
}

/// Sets a pause on `limiter` (room for three at once otherwise), then sends
/// three callers: all of them start exactly when the pause ends.
async fn assert_pause_holds_every_caller_until_its_end<L>(limiter: L) -> Result<(), BoxError>
where
    L: Limiter + Clone,
{
    let origin = Instant::now();
    let recorder = Recorder::new(ms(10));
    let service = LimitLayer::new(limiter.clone()).layer(recorder.clone());

    limiter.set_next_available_after(ms(5000)).await?;
    join_all(spawn_callers(&service, 0..3).await).await;

    assert_eq!(recorder.offsets(origin), [ms(5000), ms(5000), ms(5000)]);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn pause_holds_every_caller_of_a_rate_limit_until_its_end() -> Result<(), BoxError> {
    assert_pause_holds_every_caller_until_its_end(rate(3, ms(1000))).await
}

#[tokio::test(start_paused = true)]
async fn pause_holds_every_caller_of_a_concurrency_limit_until_its_end() -> Result<(), BoxError> {
    assert_pause_holds_every_caller_until_its_end(concurrency(3)).await
}

#[tokio::test(start_paused = true)]
async fn pause_set_while_callers_wait_pushes_them_to_its_end() -> Result<(), BoxError> {
    let origin = Instant::now();
    let recorder = Recorder::new(Duration::ZERO);
    let limiter = delay(ms(100));
    let service = LimitLayer::new(limiter.clone()).layer(recorder.clone());

    // Caller 1 is already asleep until 100 ms when the pause is set.
    let mut callers = spawn_callers(&service, 0..2).await;
    sleep(ms(50)).await;
    limiter.set_next_available_time(origin + ms(2000)).await?;
    callers.push(spawn_caller_at(&service, 2, origin + ms(1000)));
    join_all(callers).await;

    assert_eq!(recorder.offsets(origin), [ms(0), ms(2000), ms(2100)]);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn caller_waiting_on_a_full_concurrency_limit_starts_when_a_call_completes() {
    let origin = Instant::now();
    let recorder = Recorder::new(ms(300));
    let service = LimitLayer::new(concurrency(1)).layer(recorder.clone());

    join_all(spawn_callers(&service, 0..3).await).await;

    assert_eq!(recorder.offsets(origin), [ms(0), ms(300), ms(600)]);
    assert_eq!(recorder.max_running(), 1);
}

// ===== arrival order =====

/// Callers arrive in this order (ids deliberately not sorted).
const ARRIVALS: [usize; 10] = [3, 7, 0, 9, 1, 8, 2, 6, 4, 5];

#[tokio::test(start_paused = true)]
async fn waiters_on_a_delay_are_served_in_arrival_order() {
    let recorder = Recorder::new(Duration::ZERO);
    let service = LimitLayer::new(delay(ms(100))).layer(recorder.clone());

    join_all(spawn_callers(&service, ARRIVALS).await).await;

    assert_eq!(recorder.order(), ARRIVALS);
}

#[tokio::test(start_paused = true)]
async fn waiters_on_a_concurrency_limit_are_served_in_arrival_order() {
    let recorder = Recorder::new(ms(10));
    let service = LimitLayer::new(concurrency(1)).layer(recorder.clone());

    join_all(spawn_callers(&service, ARRIVALS).await).await;

    assert_eq!(recorder.order(), ARRIVALS);
}

/// Newcomers that arrive at the very instant the head of the queue may go
/// (some woken before the waiters, some after, through another service of
/// the same layer) do not overtake anyone.
async fn assert_newcomers_at_the_admission_instant_queue_behind<L>(limiter: L, duration: Duration)
where
    L: Limiter + Clone,
{
    let origin = Instant::now();
    let recorder = Recorder::new(duration);
    let layer = LimitLayer::new(limiter);
    let first = layer.layer(recorder.clone());
    let second = layer.layer(recorder.clone());

    // Caller 0 goes at once and frees the way at 100 ms.
    let mut callers = spawn_callers(&first, [0]).await;
    callers.push(spawn_caller_at(&second, 4, origin + ms(100)));
    for (id, at) in [(1, 10), (2, 20), (3, 30)] {
        callers.push(spawn_caller_at(&first, id, origin + ms(at)));
    }
    sleep(ms(50)).await;
    callers.push(spawn_caller_at(&second, 5, origin + ms(100)));
    join_all(callers).await;

    assert_eq!(recorder.order(), [0, 1, 2, 3, 4, 5]);
}

#[tokio::test(start_paused = true)]
async fn newcomers_at_the_instant_a_delay_ends_queue_behind_the_waiters() {
    assert_newcomers_at_the_admission_instant_queue_behind(delay(ms(100)), Duration::ZERO).await;
}

#[tokio::test(start_paused = true)]
async fn newcomers_at_the_instant_a_slot_frees_queue_behind_the_waiters() {
    assert_newcomers_at_the_admission_instant_queue_behind(concurrency(1), ms(100)).await;
}

// ===== clones share one limit =====

/// Sends eight callers, each with its own clone of `first` (callers 0 to 3)
/// or of `second` (4 to 7), where both services stand in front of
/// `recorder` (100 ms calls) behind one shared limit of two at once: the
/// calls must run two at a time, back to back.
async fn assert_both_services_run_two_at_a_time<S>(recorder: &Recorder, first: &S, second: &S)
where
    S: Service<usize, Response = usize, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send,
{
    let origin = Instant::now();
    let mut callers = spawn_callers(first, 0..4).await;
    callers.extend(spawn_callers(second, 4..8).await);
    join_all(callers).await;

    assert_eq!(recorder.max_running(), 2);
    assert_eq!(
        recorder.offsets(origin),
        [0, 0, 100, 100, 200, 200, 300, 300].map(ms)
    );
}

#[tokio::test(start_paused = true)]
async fn clones_and_services_of_one_layer_share_one_concurrency_limit() {
    let recorder = Recorder::new(ms(100));
    let layer = LimitLayer::new(concurrency(2));
    let first = layer.layer(recorder.clone());
    let second = layer.layer(recorder.clone());

    assert_both_services_run_two_at_a_time(&recorder, &first, &second).await;
}

#[tokio::test(start_paused = true)]
async fn clones_and_services_of_one_layer_share_one_rate_limit() {
    let origin = Instant::now();
    let recorder = Recorder::new(Duration::ZERO);
    let layer = LimitLayer::new(rate(2, ms(1000)));
    let first = layer.layer(recorder.clone());
    let second = layer.layer(recorder.clone());

    let mut callers = spawn_callers(&first, 0..3).await;
    callers.extend(spawn_callers(&second, 3..6).await);
    join_all(callers).await;

    let offsets = recorder.offsets(origin);
    assert_eq!(max_starts_in_any_window(&offsets, ms(1000)), 2);
    assert_eq!(offsets, [0, 0, 1000, 1000, 2000, 2000].map(ms));
}

// ===== reservations: poll_ready reserves, call consumes, completion releases =====

#[tokio::test]
async fn poll_ready_reserves_and_completion_releases() {
    let limiter = concurrency(1);
    let (mut service, mut handle) = mock_limit(LimitLayer::new(limiter.clone()));
    let mut other = service.clone();

    assert_ready_ok(service.poll_ready());
    assert_eq!(limiter.running(), 1, "poll_ready reserves the slot");
    assert_pending(other.poll_ready());

    let mut response = std::pin::pin!(service.call("hello"));
    assert_eq!(limiter.running(), 1, "call uses the reservation");
    assert_pending(other.poll_ready());
    assert_pending(poll_once(response.as_mut()));

    assert_request_eq!(handle, "hello").send_response("world");
    assert!(!other.is_woken(), "nothing completed yet");
    match poll_once(response.as_mut()) {
        Poll::Ready(Ok(answer)) => assert_eq!(answer, "world"),
        other => panic!("expected the response, got {other:?}"),
    }
    // Recorded when the inner future completed, not when ours is dropped.
    assert_eq!(limiter.running(), 0);

    assert!(other.is_woken(), "the waiter is woken by the completion");
    assert_ready_ok(other.poll_ready());
}

#[tokio::test]
async fn response_future_records_completion_when_the_inner_call_fails() {
    let limiter = concurrency(1);
    let (mut service, mut handle) = mock_limit(LimitLayer::new(limiter.clone()));
    let mut other = service.clone();

    assert_ready_ok(service.poll_ready());
    let mut response = std::pin::pin!(service.call("hello"));
    assert_pending(other.poll_ready());

    assert_request_eq!(handle, "hello").send_error(Boom);
    match poll_once(response.as_mut()) {
        Poll::Ready(Err(error)) => assert_eq!(error.downcast_ref::<Boom>(), Some(&Boom)),
        other => panic!("expected the inner error, got {other:?}"),
    }
    // Recorded when the inner future failed, not when ours is dropped.
    assert_eq!(limiter.running(), 0);

    assert!(other.is_woken());
    assert_ready_ok(other.poll_ready());
}

#[tokio::test]
async fn response_future_drop_releases_capacity() {
    let limiter = concurrency(1);
    let (mut service, _handle) = mock_limit(LimitLayer::new(limiter.clone()));
    let mut other = service.clone();

    assert_ready_ok(service.poll_ready());
    let response = service.call("hello");
    assert_pending(other.poll_ready());

    drop(response);
    assert_eq!(limiter.running(), 0);
    assert!(other.is_woken());
    assert_ready_ok(other.poll_ready());
}

#[tokio::test]
#[should_panic(expected = "poll_ready must return Ready")]
async fn call_without_poll_ready_panics() {
    let (mut service, _handle) = mock_limit(LimitLayer::new(concurrency(1)));
    let _response = service.call("too early");
}

#[tokio::test]
async fn clone_of_a_ready_service_holds_no_reservation() {
    let limiter = concurrency(2);
    let (mut service, _handle) = mock_limit(LimitLayer::new(limiter.clone()));

    assert_ready_ok(service.poll_ready());
    let mut clone = service.clone();
    assert_eq!(limiter.running(), 1, "cloning reserved nothing");

    // The clone needs its own reservation; the original keeps its own.
    assert_ready_ok(clone.poll_ready());
    assert_eq!(limiter.running(), 2);
    let _first = service.call("first");
    let _second = clone.call("second");
    assert_eq!(limiter.running(), 2);
}

#[tokio::test]
async fn service_drop_frees_capacity() {
    let limiter = concurrency(1);
    let (mut service, _handle) = mock_limit(LimitLayer::new(limiter.clone()));
    let mut other = service.clone();

    assert_ready_ok(service.poll_ready());
    assert_pending(other.poll_ready());

    drop(service);
    assert_eq!(limiter.running(), 0);
    assert!(other.is_woken());
    assert_ready_ok(other.poll_ready());
}

/// A service reserves a start on `limiter` (1 per second) and is dropped
/// without calling: another service is admitted at once, at the same instant.
async fn assert_unused_reservation_is_refunded<L>(limiter: L) -> Result<(), BoxError>
where
    L: Limiter + Clone,
{
    let origin = Instant::now();
    let (mut service, _handle) = mock_limit(LimitLayer::new(limiter.clone()));
    let mut other = service.clone();

    assert_ready_ok(service.poll_ready());
    assert!(!limiter.can_proceed().await?, "the start is reserved");
    drop(service);

    assert!(limiter.can_proceed().await?, "the start was given back");
    assert_eq!(limiter.next_available_time().await?, origin);
    assert_ready_ok(other.poll_ready());
    assert_eq!(Instant::now(), origin);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn service_drop_refunds_a_rate_limit_start() -> Result<(), BoxError> {
    assert_unused_reservation_is_refunded(rate(1, ms(1000))).await
}

#[tokio::test(start_paused = true)]
async fn service_drop_refunds_a_rate_limit_start_and_its_backoff() -> Result<(), BoxError> {
    // The default backoff escalates when a start fills the window; the refund
    // undoes that too.
    assert_unused_reservation_is_refunded(RateLimiter::builder("test", 1, ms(1000)).build()?).await
}

#[tokio::test(start_paused = true)]
async fn service_drop_refunds_a_delay_start() -> Result<(), BoxError> {
    assert_unused_reservation_is_refunded(delay(ms(1000))).await
}

#[tokio::test(start_paused = true)]
async fn service_drop_refunds_every_part_of_a_composite() -> Result<(), BoxError> {
    let slots = concurrency(1);
    let window = rate(1, ms(1000));
    let limiter = CompositeLimiter::new()
        .with(slots.clone())
        .with(window.clone());
    assert_unused_reservation_is_refunded(limiter).await?;
    assert_eq!(slots.running(), 0, "the slot was given back");
    assert!(window.can_proceed().await?, "the start was given back");
    Ok(())
}

/// A service reserves the only start of `limiter` while another waits for
/// the instant the limiter named; the first is dropped without calling. The
/// refunded start is there to take now, so the waiter must be admitted now,
/// not when the reservation would have left the window.
async fn assert_refund_admits_the_waiter_at_once<L>(limiter: L) -> Result<(), BoxError>
where
    L: Limiter + Clone,
{
    let origin = Instant::now();
    let (mut service, _handle) = mock_limit(LimitLayer::new(limiter.clone()));
    let mut waiter = service.clone();

    assert_ready_ok(service.poll_ready());
    assert_pending(waiter.poll_ready());
    drop(service);
    assert_eq!(limiter.next_available_time().await?, origin, "refunded");

    // Give the waiter every chance short of time passing.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(
        waiter.is_woken(),
        "the waiter still sleeps on the old instant"
    );
    assert_ready_ok(waiter.poll_ready());
    assert_eq!(Instant::now(), origin);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn refunded_rate_limit_start_admits_the_waiter_at_once() -> Result<(), BoxError> {
    assert_refund_admits_the_waiter_at_once(rate(1, ms(1000))).await
}

#[tokio::test(start_paused = true)]
async fn refunded_delay_start_admits_the_waiter_at_once() -> Result<(), BoxError> {
    assert_refund_admits_the_waiter_at_once(delay(ms(1000))).await
}

#[tokio::test]
async fn dropping_a_waiting_caller_leaves_the_queue() {
    let limiter = concurrency(1);
    let layer = LimitLayer::new(limiter.clone()).max_waiting(2);
    let (mut running, mut handle) = mock_limit(layer);
    let mut head = running.clone();
    let mut behind = running.clone();
    let mut late = running.clone();

    assert_ready_ok(running.poll_ready());
    let response = running.call("running");
    assert_pending(head.poll_ready());
    assert_pending(behind.poll_ready());
    expect_refusal::<Overloaded, _>(&mut late);

    // The head of the queue gives up: its place goes to the next caller.
    drop(head);
    assert_pending(late.poll_ready());

    assert_request_eq!(handle, "running").send_response("done");
    response.await.expect("response");
    assert!(behind.is_woken());
    assert_ready_ok(behind.poll_ready());
    assert_eq!(limiter.running(), 1);
}

// ===== queue bounds =====

#[tokio::test]
async fn max_waiting_turns_callers_away_with_overloaded_until_the_queue_drains() {
    let limiter = concurrency(1);
    let layer = LimitLayer::new(limiter.clone()).max_waiting(2);
    let (mut first, mut handle) = mock_limit(layer);
    let mut second = first.clone();
    let mut third = first.clone();
    let mut fourth = first.clone();

    assert_ready_ok(first.poll_ready());
    let response = first.call("first");
    assert_pending(second.poll_ready());
    assert_pending(third.poll_ready());

    let overloaded = expect_refusal::<Overloaded, _>(&mut fourth);
    assert_eq!(overloaded.waiting(), 2);

    // The queue moves on by one: there is room for one more waiter again.
    assert_request_eq!(handle, "first").send_response("done");
    response.await.expect("response");
    assert_ready_ok(second.poll_ready());
    let response = second.call("second");
    assert_pending(fourth.poll_ready());

    // Everyone is served in turn.
    assert_request_eq!(handle, "second").send_response("done");
    response.await.expect("response");
    assert_ready_ok(third.poll_ready());
    let response = third.call("third");
    assert_request_eq!(handle, "third").send_response("done");
    response.await.expect("response");
    assert_ready_ok(fourth.poll_ready());
}

#[tokio::test]
async fn max_waiting_zero_never_waits_for_a_concurrency_slot() {
    let limiter = concurrency(1);
    let layer = LimitLayer::new(limiter.clone()).max_waiting(0);
    let (mut first, mut handle) = mock_limit(layer);
    let mut second = first.clone();

    assert_ready_ok(first.poll_ready());
    let response = first.call("first");
    let overloaded = expect_refusal::<Overloaded, _>(&mut second);
    assert_eq!(overloaded.waiting(), 0);

    assert_request_eq!(handle, "first").send_response("done");
    response.await.expect("response");
    assert_ready_ok(second.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn max_waiting_zero_never_waits_for_a_rate_limit() {
    let origin = Instant::now();
    let layer = LimitLayer::new(delay(ms(100))).max_waiting(0);
    let (mut first, _handle) = mock_limit(layer);
    let mut second = first.clone();

    assert_ready_ok(first.poll_ready());
    let _response = first.call("first");
    expect_refusal::<Overloaded, _>(&mut second);
    assert_eq!(Instant::now(), origin);

    sleep(ms(100)).await;
    assert_ready_ok(second.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn max_wait_fails_at_once_when_the_limiter_names_a_later_instant() {
    let origin = Instant::now();
    let layer = LimitLayer::new(delay(ms(1000))).max_wait(ms(100));
    let (mut first, _handle) = mock_limit(layer);
    let mut second = first.clone();

    assert_ready_ok(first.poll_ready());
    let _response = first.call("first");

    let elapsed = expect_refusal::<Elapsed, _>(&mut second);
    assert_eq!(elapsed.retry_at(), Some(origin + ms(1000)));
    assert_eq!(Instant::now(), origin, "no time passed");

    // The service stays usable.
    sleep(ms(1000)).await;
    assert_ready_ok(second.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn max_wait_admits_a_caller_whose_turn_comes_exactly_at_the_deadline() {
    let origin = Instant::now();
    let layer = LimitLayer::new(delay(ms(100))).max_wait(ms(100));
    let service = layer.layer(Recorder::new(Duration::ZERO));

    ready_and_call(service.clone(), 0)
        .await
        .expect("first call");
    let (ready, at) = finish(spawn_admission(&service)).await;
    ready.expect("admitted at the deadline");
    assert_eq!(at, origin + ms(100));
}

#[tokio::test(start_paused = true)]
async fn max_wait_fails_with_elapsed_when_the_deadline_passes_in_the_queue() {
    let origin = Instant::now();
    let layer = LimitLayer::new(concurrency(1)).max_wait(ms(100));
    let service = layer.layer(Recorder::new(ms(10_000)));

    let running = spawn_callers(&service, [0]).await;
    let head = spawn_admission(&service);
    sleep(ms(50)).await;
    let behind = spawn_admission(&service);

    // Each waiter's deadline counts from its own arrival.
    let (head, head_at) = finish(head).await;
    let elapsed = head.expect_err("the head timed out");
    let elapsed = elapsed.downcast_ref::<Elapsed>().expect("Elapsed");
    assert_eq!(elapsed.retry_at(), None);
    assert_eq!(head_at, origin + ms(100));

    let (behind, behind_at) = finish(behind).await;
    let elapsed = behind.expect_err("the waiter behind timed out");
    assert!(elapsed.is::<Elapsed>(), "expected Elapsed, got {elapsed:?}");
    assert_eq!(behind_at, origin + ms(150));

    running[0].abort();
}

// ===== reject mode =====

#[tokio::test(start_paused = true)]
async fn reject_names_the_rate_limiters_next_available_instant() -> Result<(), BoxError> {
    let origin = Instant::now();
    let limiter = rate(2, ms(1000));
    let (mut service, _handle) = mock_limit(LimitLayer::new(limiter.clone()).reject());

    assert_ready_ok(service.poll_ready());
    let _first = service.call("first");
    sleep(ms(300)).await;
    assert_ready_ok(service.poll_ready());
    let _second = service.call("second");

    let rejected = expect_refusal::<Rejected, _>(&mut service);
    assert_eq!(rejected.retry_at(), Some(origin + ms(1000)));
    assert_eq!(
        rejected.retry_at(),
        Some(limiter.next_available_time().await?)
    );
    assert_eq!(Instant::now(), origin + ms(300), "no time passed");

    // Usable again once the oldest start leaves the window, and not before.
    sleep_until(origin + ms(999)).await;
    expect_refusal::<Rejected, _>(&mut service);
    sleep_until(origin + ms(1000)).await;
    assert_ready_ok(service.poll_ready());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn reject_names_the_next_available_instant_with_starts_recorded_outside_the_layer()
-> Result<(), BoxError> {
    // A job runner records starts through the seed interface; a server
    // rejects through the layer. Both must agree on when a call may start.
    let origin = Instant::now();
    let limiter = rate(2, ms(1000));
    let (mut service, _handle) = mock_limit(LimitLayer::new(limiter.clone()).reject());
    for at in [0, 500, 900] {
        sleep_until(origin + ms(at)).await;
        limiter.record_start().await?;
    }

    // At 1200 ms the window (200 ms, 1200 ms] holds the starts at 500 and
    // 900: full until 1500 ms.
    sleep_until(origin + ms(1200)).await;
    let next = limiter.next_available_time().await?;
    let rejected = expect_refusal::<Rejected, _>(&mut service);
    assert_eq!(rejected.retry_at(), Some(origin + ms(1500)));
    assert_eq!(next, origin + ms(1500));
    Ok(())
}

#[tokio::test]
async fn reject_for_a_concurrency_limit_names_no_instant() {
    let limiter = concurrency(1);
    let (mut first, _handle) = mock_limit(LimitLayer::new(limiter.clone()).reject());
    let mut second = first.clone();

    assert_ready_ok(first.poll_ready());
    let response = first.call("first");

    let rejected = expect_refusal::<Rejected, _>(&mut second);
    assert_eq!(rejected.retry_at(), None);

    drop(response);
    assert_ready_ok(second.poll_ready());
    assert_eq!(limiter.running(), 1);
}

// ===== the inner service =====

#[tokio::test]
async fn inner_poll_ready_error_comes_through_as_box_error() {
    let limiter = concurrency(1);
    let (mut service, mut handle) = mock_limit(LimitLayer::new(limiter.clone()));

    handle.send_error(Boom);
    match service.poll_ready() {
        Poll::Ready(Err(error)) => assert_eq!(error.downcast_ref::<Boom>(), Some(&Boom)),
        other => panic!("expected the inner error, got {other:?}"),
    }

    // A failed service holds nothing once dropped.
    drop(service);
    assert_eq!(limiter.running(), 0);
}

#[tokio::test]
async fn inner_backpressure_keeps_the_permit_reserved_until_the_inner_is_ready() {
    let limiter = concurrency(1);
    let (mut service, mut handle) = mock_limit(LimitLayer::new(limiter.clone()));
    let mut other = service.clone();

    handle.allow(0);
    assert_pending(service.poll_ready());
    assert_eq!(limiter.running(), 1, "admitted by the limiter");
    assert_pending(other.poll_ready());

    handle.allow(1);
    assert!(service.is_woken());
    assert_ready_ok(service.poll_ready());
    assert_eq!(limiter.running(), 1, "the same permit, not a second one");
    let response = service.call("hello");
    assert_pending(other.poll_ready());

    assert_request_eq!(handle, "hello").send_response("world");
    assert_eq!(response.await.expect("response"), "world");
    assert_eq!(limiter.running(), 0);
}

// ===== behind a Buffer =====

#[tokio::test(start_paused = true)]
async fn buffers_over_clones_of_one_service_share_the_limit() {
    let recorder = Recorder::new(ms(100));
    let service = LimitLayer::new(concurrency(2)).layer(recorder.clone());
    let first = Buffer::new(service.clone(), 8);
    let second = Buffer::new(service, 8);

    assert_both_services_run_two_at_a_time(&recorder, &first, &second).await;
}

#[tokio::test(start_paused = true)]
async fn a_buffer_outlives_the_refusals_of_the_layer_behind_it() -> Result<(), BoxError> {
    // tower's Buffer stops for good once its service's `poll_ready` fails;
    // the layer answers refusals from `call`, so the Buffer carries on.
    let layer = LimitLayer::new(rate(1, ms(1000))).reject();
    let mut service = Buffer::new(layer.layer(Recorder::new(Duration::ZERO)), 8);

    service.ready().await?.call(0).await?;
    for refused in 1..=3 {
        let error = service.ready().await?.call(refused).await.unwrap_err();
        assert!(error.is::<Rejected>(), "expected Rejected, got {error:?}");
    }
    sleep(ms(1000)).await;
    assert_eq!(service.ready().await?.call(4).await?, 4);
    Ok(())
}

// ===== composite =====

#[tokio::test(start_paused = true)]
async fn composite_layer_holds_concurrency_and_rate_together() {
    let origin = Instant::now();
    let recorder = Recorder::new(ms(400));
    let limiter = CompositeLimiter::new()
        .with(concurrency(2))
        .with(rate(3, ms(1000)));
    let service = LimitLayer::new(limiter).layer(recorder.clone());

    join_all(spawn_callers(&service, 0..6).await).await;

    let offsets = recorder.offsets(origin);
    assert_eq!(recorder.max_running(), 2);
    assert_eq!(max_starts_in_any_window(&offsets, ms(1000)), 3);
    // 0 and 1 at once; 2 when they finish; 3 and 4 when the first two starts
    // leave the window; 5 when 3 and 4 finish.
    assert_eq!(offsets, [0, 0, 400, 1000, 1000, 1400].map(ms));
}
