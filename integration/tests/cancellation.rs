//! Callers dropped at any point leak nothing: no concurrency slot, no rate
//! quota, no place at the head of a layer's queue.

mod common;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{ms, paused_runtime};
use proptest::prelude::*;
use tokio::time::{Instant, sleep, timeout};
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
use tower_limits::error::BoxError;
use tower_limits::{ConcurrencyLimiter, LimitLayer, Limiter, RateLimiter};

const NAME: &str = "cancellation";
/// Longer than any test waits: a caller that needs it is stuck.
const FOREVER: Duration = Duration::from_secs(3600);

/// One call that reached the inner service.
#[derive(Clone, Copy, Debug)]
struct Call {
    at: Instant,
    /// Calls running at once, this one included.
    running: usize,
}

/// Limits applied to a service that sleeps for the duration it is asked.
struct Limits {
    concurrency: ConcurrencyLimiter,
    rate: RateLimiter,
    max_concurrent: usize,
    max_rate: usize,
    window: Duration,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Limits {
    fn new(max_concurrent: usize, max_rate: usize, window: Duration, backoff: bool) -> Self {
        let builder = RateLimiter::builder(NAME, max_rate as u32, window);
        let builder = if backoff {
            builder
                .initial_backoff(ms(1))
                .backoff_multiplier(2.0)
                .max_backoff(ms(20))
        } else {
            builder.without_backoff()
        };
        Self {
            concurrency: ConcurrencyLimiter::new(max_concurrent as u32).unwrap(),
            rate: builder.build().unwrap(),
            max_concurrent,
            max_rate,
            window,
            calls: Arc::default(),
        }
    }

    /// Long enough for any backoff and the window to pass.
    fn settle_time(&self) -> Duration {
        self.window + ms(50)
    }

    /// Concurrency outside rate (seed 004, rule 1) around the sleeping
    /// service, which records every call.
    fn service(
        &self,
    ) -> impl Service<Duration, Response = (), Error = BoxError, Future: Send> + Clone + Send + 'static
    {
        let concurrency = self.concurrency.clone();
        let calls = Arc::clone(&self.calls);
        ServiceBuilder::new()
            .layer(LimitLayer::new(self.concurrency.clone()))
            .layer(LimitLayer::new(self.rate.clone()))
            .service(service_fn(move |work: Duration| {
                calls.lock().unwrap().push(Call {
                    at: Instant::now(),
                    running: concurrency.running() as usize,
                });
                async move {
                    sleep(work).await;
                    Ok::<_, Infallible>(())
                }
            }))
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// Every call that reached the service kept both limits.
    fn check_calls(&self) -> Result<(), TestCaseError> {
        let calls = self.calls();
        for call in &calls {
            prop_assert!(
                call.running <= self.max_concurrent,
                "{call:?} over concurrency"
            );
        }
        for group in calls.windows(self.max_rate + 1) {
            let span = group[self.max_rate].at - group[0].at;
            prop_assert!(
                span >= self.window,
                "{} calls within {span:?}, limit {} per {:?}",
                self.max_rate + 1,
                self.max_rate,
                self.window
            );
        }
        Ok(())
    }

    /// Nothing is held once every caller is gone: no running call, and a
    /// fresh caller (after the window and any backoff) is admitted at once.
    async fn check_nothing_leaked(&self) -> Result<(), TestCaseError> {
        prop_assert_eq!(self.concurrency.running(), 0, "a slot leaked");
        sleep(self.settle_time()).await;
        let mut fresh = self.service();
        let asked = Instant::now();
        let ready = timeout(FOREVER, fresh.ready()).await;
        prop_assert!(ready.is_ok(), "a fresh caller was never admitted");
        prop_assert_eq!(Instant::now(), asked, "a fresh caller had to wait");
        fresh.call(Duration::ZERO).await.unwrap();
        prop_assert_eq!(self.concurrency.running(), 0);
        Ok(())
    }
}

/// How a caller gives up.
#[derive(Clone, Copy, Debug)]
enum GiveUp {
    /// Never: it must get through.
    Never,
    /// Its whole attempt is dropped after this long: while queued in
    /// `poll_ready`, or while the response future runs.
    After(Duration),
    /// It drops its service after `ready()`, before `call`.
    AfterReady,
}

#[derive(Clone, Copy, Debug)]
struct Caller {
    arrives: Duration,
    work: Duration,
    give_up: GiveUp,
}

impl Caller {
    async fn run(self, mut service: impl Service<Duration, Error = BoxError>) {
        sleep(self.arrives).await;
        match self.give_up {
            GiveUp::Never => {
                service.ready().await.unwrap();
                service.call(self.work).await.unwrap();
            }
            GiveUp::After(deadline) => {
                let attempt = async {
                    service.ready().await?;
                    service.call(self.work).await
                };
                let _ = timeout(deadline, attempt).await;
            }
            GiveUp::AfterReady => {
                service.ready().await.unwrap();
                drop(service);
            }
        }
    }
}

fn caller() -> impl Strategy<Value = Caller> {
    let give_up = prop_oneof![
        Just(GiveUp::Never),
        (0u64..150).prop_map(|n| GiveUp::After(ms(n))),
        Just(GiveUp::AfterReady),
    ];
    (0u64..100, 0u64..60, give_up).prop_map(|(arrives, work, give_up)| Caller {
        arrives: ms(arrives),
        work: ms(work),
        give_up,
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn callers_dropped_anywhere_leak_nothing_and_keep_both_limits(
        max_concurrent in 1usize..4,
        max_rate in 1usize..5,
        window in (10u64..80).prop_map(ms),
        backoff in any::<bool>(),
        callers in prop::collection::vec(caller(), 1..24),
    ) {
        paused_runtime().block_on(async {
            let limits = Limits::new(max_concurrent, max_rate, window, backoff);
            let service = limits.service();
            let tasks: Vec<_> = callers
                .iter()
                .map(|caller| tokio::spawn(caller.run(service.clone())))
                .collect();
            for task in tasks {
                let finished = timeout(FOREVER, task).await;
                prop_assert!(finished.is_ok(), "a caller never finished");
                finished.unwrap().unwrap();
            }
            let patient = callers.iter().filter(|c| matches!(c.give_up, GiveUp::Never));
            prop_assert!(limits.calls().len() >= patient.count());
            limits.check_calls()?;
            limits.check_nothing_leaked().await
        })?;
    }
}

// ------------------------------------------------------- plain scenarios

/// Runs `body` on a paused current-thread runtime.
fn paused(body: impl Future<Output = Result<(), TestCaseError>>) {
    paused_runtime().block_on(body).unwrap();
}

#[test]
fn dropping_a_running_response_future_releases_the_concurrency_slot() {
    paused(async {
        let limits = Limits::new(1, 100, ms(10), false);
        let mut service = limits.service();
        service.ready().await.unwrap();
        let response = service.call(FOREVER);
        assert_eq!(limits.concurrency.running(), 1);
        // Poll it for a while, then give up on it.
        assert!(timeout(ms(10), response).await.is_err());
        assert_eq!(limits.concurrency.running(), 0);
        limits.check_nothing_leaked().await
    });
}

#[test]
fn dropping_an_unpolled_response_future_releases_the_concurrency_slot() {
    paused(async {
        let limits = Limits::new(1, 100, ms(10), false);
        let mut service = limits.service();
        service.ready().await.unwrap();
        drop(service.call(FOREVER));
        assert_eq!(limits.concurrency.running(), 0);
        limits.check_nothing_leaked().await
    });
}

/// One caller reserves in `poll_ready` and drops its service; another must
/// get the reservation at once. With one start per 10 s in `limits`, only a
/// refund lets the second caller in now.
async fn reserve_and_abandon(limits: Limits) -> Result<(), TestCaseError> {
    let mut abandoned = limits.service();
    abandoned.ready().await.unwrap();
    assert_eq!(limits.concurrency.running(), 1);
    drop(abandoned);
    assert_eq!(
        limits.concurrency.running(),
        0,
        "the slot was not given back"
    );
    assert!(
        limits.rate.can_proceed().await.unwrap(),
        "the start was not erased"
    );
    let mut next = limits.service();
    let asked = Instant::now();
    next.ready().await.unwrap();
    assert_eq!(Instant::now(), asked, "the next caller had to wait");
    next.call(Duration::ZERO).await.unwrap();
    assert_eq!(limits.calls().len(), 1);
    Ok(())
}

#[test]
fn dropping_a_ready_service_refunds_its_reservation() {
    paused(async {
        let limits = Limits::new(1, 1, Duration::from_secs(10), false);
        reserve_and_abandon(limits).await
    });
}

#[test]
fn dropping_a_ready_service_refunds_its_reservation_and_backoff() {
    paused(async {
        let limits = Limits::new(1, 1, Duration::from_secs(10), true);
        reserve_and_abandon(limits).await
    });
}

#[test]
fn dropping_a_ready_service_refunds_its_start_after_a_later_caller_filled_the_window() {
    for backoff in [false, true] {
        paused(async {
            // Two starts per 10 s. A reserves, B starts and fills the window,
            // A walks away: the window holds B alone, so C starts at once.
            let limits = Limits::new(3, 2, Duration::from_secs(10), backoff);
            let mut a = limits.service();
            a.ready().await.unwrap();
            sleep(ms(1)).await;
            let mut b = limits.service();
            b.ready().await.unwrap();
            b.call(Duration::ZERO).await.unwrap();
            drop(a);
            let mut c = limits.service();
            let asked = Instant::now();
            timeout(FOREVER, c.ready()).await.unwrap().unwrap();
            assert_eq!(
                Instant::now() - asked,
                Duration::ZERO,
                "with backoff {backoff}, C waited for the refunded start to leave the window"
            );
            c.call(Duration::ZERO).await.unwrap();
            limits.check_calls()
        });
    }
}

/// A holds the only capacity for 100 ms; B queues behind it and gives up
/// at 10 ms; C queues behind B and must start exactly when A's capacity
/// returns, at 100 ms. Every call kept the limits, and nothing leaked.
async fn queued_caller_gives_up(limits: Limits) -> Result<(), TestCaseError> {
    let start = Instant::now();
    let service = limits.service();
    let a = tokio::spawn(
        Caller {
            arrives: Duration::ZERO,
            work: ms(100),
            give_up: GiveUp::Never,
        }
        .run(service.clone()),
    );
    let b = tokio::spawn(
        Caller {
            arrives: ms(1),
            work: Duration::ZERO,
            give_up: GiveUp::After(ms(9)),
        }
        .run(service.clone()),
    );
    let mut c = service.clone();
    sleep(ms(2)).await;
    timeout(FOREVER, c.ready())
        .await
        .expect("C was never admitted")
        .unwrap();
    assert_eq!(Instant::now() - start, ms(100));
    c.call(Duration::ZERO).await.unwrap();
    a.await.unwrap();
    b.await.unwrap();
    let calls = limits.calls();
    assert_eq!(calls.len(), 2, "B gave up and never called: {calls:?}");
    limits.check_calls()?;
    limits.check_nothing_leaked().await
}

#[test]
fn a_caller_dropped_while_waiting_for_concurrency_leaves_the_queue() {
    paused(async {
        let limits = Limits::new(1, 100, ms(10), false);
        queued_caller_gives_up(limits).await
    });
}

#[test]
fn a_caller_dropped_while_waiting_for_rate_leaves_the_queue() {
    paused(async {
        let limits = Limits::new(10, 1, ms(100), false);
        queued_caller_gives_up(limits).await
    });
}
