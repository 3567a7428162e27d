//! Fairness: one shared limit served round-robin across tenants.

mod common;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::paused_runtime;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
use tower_limits::DelayLimiter;
use tower_limits::error::{BoxError, Overloaded};
use tower_limits::limit::FairLimitLayer;

type Request = (Tenant, usize);
/// Tenants are named by a letter.
type Tenant = char;
/// Who started, and when (since the test began).
type Starts = Arc<Mutex<Vec<(Tenant, Duration)>>>;

const SPACING: Duration = Duration::from_millis(10);

/// One admission every 10 ms, shared fairly by tenant, over a recorder.
fn fair_stack(
    weigh: fn(&Tenant) -> u32,
) -> (
    impl Service<Request, Response = (), Error = BoxError, Future: Send> + Clone + Send + 'static,
    Starts,
) {
    let origin = Instant::now();
    let starts = Starts::default();
    let recorded = Arc::clone(&starts);
    let shared = DelayLimiter::new(SPACING).expect("valid delay");
    let layer = FairLimitLayer::new(shared, |(tenant, _): &Request| *tenant)
        .weight(weigh)
        .max_waiting(20_000);
    let service =
        ServiceBuilder::new()
            .layer(layer)
            .service(service_fn(move |(tenant, _): Request| {
                recorded.lock().unwrap().push((tenant, origin.elapsed()));
                async { Ok::<_, Infallible>(()) }
            }));
    (service, starts)
}

fn equal(_: &Tenant) -> u32 {
    1
}

/// Queues `count` calls of `tenant`, in order.
async fn queue_calls<S>(
    callers: &mut JoinSet<Result<(), BoxError>>,
    service: &S,
    tenant: Tenant,
    count: usize,
) where
    S: Service<Request, Response = (), Error = BoxError, Future: Send> + Clone + Send + 'static,
{
    for n in 0..count {
        let mut service = service.clone();
        callers.spawn(async move { service.ready().await?.call((tenant, n)).await });
        tokio::task::yield_now().await;
    }
}

fn starts_of(starts: &Starts, tenant: Tenant) -> Vec<Duration> {
    let starts = starts.lock().unwrap();
    starts
        .iter()
        .filter(|(t, _)| *t == tenant)
        .map(|(_, at)| *at)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_small_tenant_is_not_starved_by_a_large_backlog() {
    let (service, starts) = fair_stack(equal);
    let mut big = JoinSet::new();
    queue_calls(&mut big, &service, 'B', 10_000).await;
    let mut small = JoinSet::new();
    queue_calls(&mut small, &service, 'S', 10).await;
    while let Some(result) = small.join_next().await {
        result.unwrap().unwrap();
    }
    // The small tenant gets every other admission: its 10 calls within about
    // 20 admissions (200 ms), not behind 10,000 (100 s).
    let last_small = *starts_of(&starts, 'S').last().unwrap();
    assert!(
        last_small <= SPACING * 21,
        "small finished at {last_small:?}"
    );
    let big_before = starts_of(&starts, 'B')
        .iter()
        .filter(|at| **at <= last_small)
        .count();
    assert!(big_before <= 12, "{big_before} big calls went first");
    big.abort_all();
}

#[tokio::test(start_paused = true)]
async fn a_heavier_key_gets_that_many_turns_per_round() {
    let (service, starts) = fair_stack(|tenant| if *tenant == 'P' { 3 } else { 1 });
    // Two calls first: the second holds the turn (waiting for its slot) while
    // both tenants queue, so the rounds begin with everyone in line.
    let mut callers = JoinSet::new();
    queue_calls(&mut callers, &service, '1', 2).await;
    queue_calls(&mut callers, &service, 'P', 9).await;
    queue_calls(&mut callers, &service, 'F', 3).await;
    while let Some(result) = callers.join_next().await {
        result.unwrap().unwrap();
    }
    let order: String = starts
        .lock()
        .unwrap()
        .iter()
        .skip(2)
        .map(|(tenant, _)| *tenant)
        .collect();
    assert_eq!(order, "PPPFPPPFPPPF");
}

#[tokio::test(start_paused = true)]
async fn callers_of_one_key_keep_their_order() {
    let origin = Instant::now();
    let order = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::clone(&order);
    let service = ServiceBuilder::new()
        .layer(FairLimitLayer::new(
            DelayLimiter::new(SPACING).unwrap(),
            |(tenant, _): &Request| *tenant,
        ))
        .service(service_fn(move |(_, n): Request| {
            recorded.lock().unwrap().push(n);
            async { Ok::<_, Infallible>(()) }
        }));
    let mut callers = JoinSet::new();
    queue_calls(&mut callers, &service, 't', 8).await;
    while let Some(result) = callers.join_next().await {
        result.unwrap().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
    assert_eq!(origin.elapsed(), SPACING * 7);
}

#[tokio::test(start_paused = true)]
async fn callers_that_give_up_leave_the_line_and_the_turn_moves_on() {
    let (service, starts) = fair_stack(equal);
    let mut callers = JoinSet::new();
    queue_calls(&mut callers, &service, 'a', 3).await;
    // Two callers that give up after 5 ms, while queued.
    for n in 0..2 {
        let mut service = service.clone();
        callers.spawn(async move {
            let call = async { service.ready().await?.call(('Q', n)).await };
            let _ = tokio::time::timeout(Duration::from_millis(5), call).await;
            Ok(())
        });
        tokio::task::yield_now().await;
    }
    queue_calls(&mut callers, &service, 'b', 3).await;
    while let Some(result) = callers.join_next().await {
        result.unwrap().unwrap();
    }
    assert!(starts_of(&starts, 'Q').is_empty());
    assert_eq!(
        starts_of(&starts, 'a').len() + starts_of(&starts, 'b').len(),
        6
    );
    // Nobody is left holding the turn: the next call goes at the next slot.
    let before = Instant::now();
    let mut service = service.clone();
    service.ready().await.unwrap().call(('L', 0)).await.unwrap();
    assert!(before.elapsed() <= SPACING);
}

#[tokio::test(start_paused = true)]
async fn past_max_waiting_a_request_is_overloaded() {
    let layer = FairLimitLayer::new(
        DelayLimiter::new(Duration::from_secs(1)).unwrap(),
        |_: &Request| 't',
    )
    .max_waiting(2);
    let service = ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(|_: Request| async { Ok::<_, Infallible>(()) }));
    let mut callers = JoinSet::new();
    queue_calls(&mut callers, &service, 't', 5).await;
    let mut overloaded = 0;
    while let Some(result) = callers.join_next().await {
        if let Err(error) = result.unwrap() {
            assert!(error.is::<Overloaded>());
            overloaded += 1;
        }
    }
    assert_eq!(
        overloaded, 1,
        "one holds the turn, two wait, one is turned away"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Callers of random tenants give up at random moments (while queued, or
    /// just as the turn reaches them); the turn is never lost: afterwards a
    /// new call is admitted at the next slot.
    #[test]
    fn random_give_ups_never_strand_the_turn(
        callers in proptest::collection::vec((0..3u8, proptest::option::of(0..60u64)), 1..25),
    ) {
        paused_runtime().block_on(async {
            let (service, starts) = fair_stack(equal);
            let mut set = JoinSet::new();
            for (n, (tenant, give_up_after)) in callers.iter().copied().enumerate() {
                let mut service = service.clone();
                let tenant = char::from(b'a' + tenant);
                set.spawn(async move {
                    let call = async { service.ready().await?.call((tenant, n)).await };
                    match give_up_after {
                        Some(ms) => {
                            let _ = tokio::time::timeout(Duration::from_millis(ms), call).await;
                            Ok(())
                        }
                        None => call.await,
                    }
                });
                tokio::task::yield_now().await;
            }
            while let Some(result) = set.join_next().await {
                result.unwrap().unwrap();
            }
            let patient = callers.iter().filter(|(_, give_up)| give_up.is_none()).count();
            assert!(starts.lock().unwrap().len() >= patient, "a patient caller was lost");
            tokio::time::advance(SPACING).await;
            let before = Instant::now();
            let mut service = service.clone();
            let late = async { service.ready().await?.call(('z', 0)).await };
            let admitted = tokio::time::timeout(Duration::from_secs(3600), late).await;
            assert!(matches!(admitted, Ok(Ok(()))), "the turn was stranded");
            assert_eq!(before.elapsed(), Duration::ZERO);
        });
    }
}
