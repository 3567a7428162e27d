//! Every limiter with thousands of callers that give up: 18,000 callers
//! arrive within a quarter of a second on paused time, directly
//! (`LimiterExt::acquire`) or through one `LimitLayer`, and most give up
//! while waiting, after `poll_ready` or in the middle of their call. At
//! least 10,000 of them must have given up; the calls that started must
//! keep the limiter's bounds; once they are gone, nobody is refused (no
//! place in a queue outlived its caller); and once the limiter has been
//! quiet for a while it behaves exactly as a new one (nothing leaked: no
//! slot, booking, reservation or place in the layer's line).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::cases::{self, Case, Denials};
use common::paused_runtime;
use common::stress::{Recorder, limited};
use tokio::time::{Instant, sleep, timeout};
use tower::{Service, ServiceExt};
use tower_limits::error::BoxError;
use tower_limits::limiter::Admission;
use tower_limits::{Limiter, LimiterExt};

const CALLERS: usize = 18_000;
const GIVE_UPS: usize = 10_000;
/// Callers arrive within this.
const ARRIVALS: Duration = Duration::from_millis(250);
/// Longer than any caller waits: a caller that needs it is stuck.
const FOREVER: Duration = Duration::from_secs(3600);
/// Longer than any case needs to forget its past (windows, backoff, drip).
const QUIET: Duration = Duration::from_secs(60);

/// When a caller gives up.
#[derive(Clone, Copy, Debug)]
enum GiveUp {
    Never,
    /// While waiting for admission, after this long.
    Waiting(Duration),
    /// Through the layer: once `poll_ready` admitted it, without calling.
    AfterReady,
    /// After this long into its call (the admission included).
    Calling(Duration),
}

#[derive(Clone, Copy, Debug)]
struct Caller {
    arrives: Duration,
    through_layer: bool,
    give_up: GiveUp,
}

impl Caller {
    fn random(rng: &mut fastrand::Rng) -> Self {
        let patience = Duration::from_micros(rng.u64(0..5_000));
        let give_up = match rng.u8(0..8) {
            0 => GiveUp::Never,
            1 => GiveUp::AfterReady,
            2 => GiveUp::Calling(patience),
            _ => GiveUp::Waiting(patience),
        };
        Self {
            arrives: Duration::from_micros(rng.u64(0..ARRIVALS.as_micros() as u64)),
            through_layer: rng.bool(),
            give_up,
        }
    }

    /// Runs the caller; true if it gave up.
    async fn run<L, S>(self, limiter: Recorder<L>, service: S, case: Case) -> bool
    where
        L: Limiter + Clone,
        S: Service<(), Response = (), Error = BoxError>,
    {
        sleep(self.arrives).await;
        let deadline = match self.give_up {
            GiveUp::Waiting(after) | GiveUp::Calling(after) => after,
            GiveUp::Never | GiveUp::AfterReady => FOREVER,
        };
        let outcome = if self.through_layer {
            timeout(deadline, Self::call(service, self.give_up)).await
        } else {
            timeout(deadline, Self::acquire(&limiter, case.hold)).await
        };
        match outcome {
            Ok(Ok(gave_up)) => gave_up,
            Ok(Err(_)) if case.may_refuse => false,
            Ok(Err(error)) => panic!("an in-memory limiter failed: {error}"),
            Err(_elapsed) => true,
        }
    }

    async fn call<S>(mut service: S, give_up: GiveUp) -> Result<bool, BoxError>
    where
        S: Service<(), Response = (), Error = BoxError>,
    {
        let ready = service.ready().await?;
        if let GiveUp::AfterReady = give_up {
            return Ok(true);
        }
        ready.call(()).await.map(|()| false)
    }

    async fn acquire<L: Limiter>(limiter: &Recorder<L>, hold: Duration) -> Result<bool, BoxError> {
        let _permit = limiter.acquire().await?;
        limiter.running.call(hold).await;
        Ok(false)
    }
}

/// Runs the case's limiter through the callers and every check.
fn cancel_many(case: Case, seed: u64) {
    paused_runtime().block_on(async {
        let limiter = Recorder::new((case.make)());
        let service = limited(limiter.clone(), case.hold);
        let mut rng = fastrand::Rng::with_seed(seed);
        let tasks: Vec<_> = (0..CALLERS)
            .map(|_| {
                let caller = Caller::random(&mut rng);
                tokio::spawn(caller.run(limiter.clone(), service.clone(), case))
            })
            .collect();
        let mut gave_up = 0;
        for task in tasks {
            let finished = timeout(FOREVER, task).await.expect("a caller is stuck");
            gave_up += usize::from(finished.expect("a caller panicked"));
        }
        println!("{gave_up} of {CALLERS} callers gave up");
        assert!(gave_up >= GIVE_UPS, "only {gave_up} callers gave up");
        assert_eq!(limiter.running.now(), 0, "calls still counted as running");
        case.check_starts(&limiter);
        if let Err(error) = limiter.inner().try_acquire().await {
            panic!("refused with nobody waiting: {error}");
        }

        sleep(QUIET).await;
        let asked = Instant::now();
        limited(limiter.clone(), Duration::ZERO)
            .ready()
            .await
            .expect("admitted")
            .call(())
            .await
            .unwrap();
        assert_eq!(asked, Instant::now(), "a quiet limiter made a caller wait");
        drop(service);
        sleep(QUIET).await;
        let fresh = (case.make)();
        assert_eq!(
            behaviour(limiter.inner().as_ref(), case.denials).await,
            behaviour(fresh.as_ref(), case.denials).await,
            "the used limiter differs from a new one"
        );
    });
}

/// What 32 attempts in a row get, each answer held until the end.
async fn behaviour(limiter: &dyn Limiter, denials: Denials) -> Vec<String> {
    let now = Instant::now();
    let mut held = Vec::new();
    let mut seen = Vec::new();
    for _ in 0..32 {
        match limiter.try_acquire().await {
            Ok(Admission::Granted(permit)) => {
                seen.push("granted".to_owned());
                held.push(Admission::Granted(permit));
            }
            Ok(Admission::Denied(denial)) => {
                let after = denial.retry_at().map(|at| at - now);
                seen.push(match denials {
                    Denials::Exact => format!("denied for {after:?}"),
                    Denials::GrantsOnly => "denied".to_owned(),
                });
                held.push(Admission::Denied(denial));
            }
            Err(error) => seen.push(format!("error: {error}")),
        }
    }
    seen
}

#[test]
fn concurrency_limiter() {
    cancel_many(cases::CONCURRENCY, 1);
}

#[test]
fn sliding_log() {
    cancel_many(cases::SLIDING_LOG, 2);
}

#[test]
fn sliding_log_with_backoff() {
    cancel_many(cases::SLIDING_LOG_WITH_BACKOFF, 3);
}

#[test]
fn delay_limiter() {
    cancel_many(cases::DELAY, 4);
}

#[test]
fn evenly_spaced_limiter() {
    cancel_many(cases::EVENLY_SPACED, 5);
}

#[test]
fn gcra_limiter() {
    cancel_many(cases::GCRA, 6);
}

#[test]
fn token_bucket_limiter() {
    cancel_many(cases::TOKEN_BUCKET, 7);
}

#[test]
fn leaky_bucket_limiter() {
    cancel_many(cases::LEAKY_BUCKET, 8);
}

#[test]
fn fixed_window_limiter() {
    cancel_many(cases::FIXED_WINDOW, 9);
}

#[test]
fn sliding_window_counter_limiter() {
    cancel_many(cases::SLIDING_WINDOW_COUNTER, 10);
}

#[test]
fn composite_of_concurrency_and_gcra() {
    cancel_many(cases::COMPOSITE, 11);
}

#[test]
fn keyed_limiter() {
    cancel_many(cases::KEYED, 12);
}

#[test]
fn shared_gcra_in_the_memory_store() {
    cancel_many(cases::SHARED_GCRA, 13);
}

#[test]
fn shared_fixed_window_behind_failover() {
    cancel_many(cases::SHARED_FIXED_WINDOW_BEHIND_FAILOVER, 14);
}

#[test]
fn leased_concurrency_in_the_memory_store() {
    cancel_many(cases::LEASED_CONCURRENCY, 15);
}

/// The used limiter must also still be shared through `Arc` clones: a
/// check that the cases hand out one limit, not copies.
#[test]
fn a_case_hands_out_one_shared_limit() {
    paused_runtime().block_on(async {
        let limiter: Arc<dyn Limiter> = (cases::CONCURRENCY.make)();
        let clone = Arc::clone(&limiter);
        let _held: Vec<_> = futures_of(&limiter, 4).await;
        assert!(matches!(
            clone.try_acquire().await.unwrap(),
            Admission::Denied(_)
        ));
    });
}

async fn futures_of(limiter: &Arc<dyn Limiter>, n: usize) -> Vec<tower_limits::Permit> {
    let mut permits = Vec::new();
    for _ in 0..n {
        permits.push(limiter.acquire().await.unwrap());
    }
    permits
}
