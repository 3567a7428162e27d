//! `AdaptiveRateLimiter` on paused time: how its rate moves, and a rate
//! shared through a store.

use std::time::Duration;

use tokio::time::{Instant, advance};
use tower_limits::store::MemoryStore;
use tower_limits::{AdaptiveRateLimiter, Limiter, Rate};

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// Two limiters sharing one curve in a store: a refusal one of them sees
/// slows both, once.
#[tokio::test(start_paused = true)]
async fn a_refusal_one_process_sees_slows_every_process_sharing_the_curve() {
    let store = MemoryStore::new();
    let builder = AdaptiveRateLimiter::builder(Rate::per_second(100).unwrap());
    let a = builder.clone().build_shared(store.clone(), "api").unwrap();
    let b = builder.build_shared(store, "api").unwrap();
    // The first decisions read (and publish) the shared curve.
    a.try_acquire().await.unwrap();
    b.try_acquire().await.unwrap();
    let sent = Instant::now();
    advance(ms(5)).await; // the refusal comes back
    a.record_refusal(sent);
    b.record_refusal(sent); // the same overload, seen by both
    assert_eq!(a.current_rate(), 25.0);
    tokio::task::yield_now().await; // the change is written by a task
    advance(ms(60)).await;
    b.try_acquire().await.unwrap(); // b reads the shared curve
    a.try_acquire().await.unwrap();
    // Once (a quarter, held for a second), not twice (12.5).
    assert!(
        (b.current_rate() - 25.0).abs() < 1e-6,
        "{}",
        b.current_rate()
    );
    let (a, b) = (a.current_rate(), b.current_rate());
    assert!((a - b).abs() < a * 1e-4, "one curve: {a} and {b}");
}

/// The rate climbs back only while it is in use: unused for a minute, it
/// stays where the last refusal left it; saturated, it climbs.
#[tokio::test(start_paused = true)]
async fn the_rate_climbs_only_while_in_use() {
    let limiter = AdaptiveRateLimiter::builder(Rate::per_second(20).unwrap())
        .build()
        .unwrap();
    let sent = Instant::now();
    advance(ms(10)).await;
    limiter.record_refusal(sent);
    let cut = limiter.current_rate();
    advance(Duration::from_secs(60)).await;
    limiter.try_acquire().await.unwrap(); // a decision looks at the curve
    assert!(
        (limiter.current_rate() - cut).abs() < 0.01,
        "{}",
        limiter.current_rate()
    );
    // Saturated for 6 s: callers wait on every slot (it holds a second,
    // then probes).
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        let _permit = tower_limits::LimiterExt::acquire(&limiter).await.unwrap();
    }
    assert!(
        limiter.current_rate() > cut + 2.0,
        "{}",
        limiter.current_rate()
    );
}

#[cfg(feature = "http")]
mod feedback {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use http::{Request, Response, StatusCode};
    use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
    use tower_limits::http::FeedbackLayer;
    use tower_limits::limiters::Pacer;
    use tower_limits::{AdaptiveRateLimiter, LimitLayer, Rate};

    use super::*;

    /// Ten calls in flight together are all refused: one overload, one
    /// decrease (to a quarter, the first), not ten.
    #[tokio::test(start_paused = true)]
    async fn refusals_of_calls_in_flight_together_decrease_the_rate_once() {
        let limiter = AdaptiveRateLimiter::builder(Rate::per_second(100).unwrap())
            .burst(10)
            .build()
            .unwrap();
        let upstream = service_fn(|_: Request<()>| async {
            tokio::time::sleep(ms(20)).await;
            let refused = Response::builder()
                .status(StatusCode::TOO_MANY_REQUESTS)
                .header("retry-after", "1");
            Ok::<_, Infallible>(refused.body(()).unwrap())
        });
        let client = ServiceBuilder::new()
            .layer(FeedbackLayer::adaptive(limiter.clone()))
            .layer(LimitLayer::new(limiter.clone()))
            .service(upstream);
        let calls: Vec<_> = (0..10)
            .map(|_| tokio::spawn(client.clone().oneshot(Request::new(()))))
            .collect();
        for call in calls {
            assert_eq!(
                call.await.unwrap().unwrap().status(),
                StatusCode::TOO_MANY_REQUESTS
            );
        }
        assert_eq!(limiter.current_rate(), 25.0);
    }

    /// The rate, 4 s after the pause ends, of a limiter at 50/s whose
    /// first call is refused with `Retry-After: 300` and every later one
    /// succeeds, while eight callers keep it in use.
    async fn rate_after_a_long_pause<P: Pacer + std::fmt::Debug>(
        limiter: AdaptiveRateLimiter<P>,
    ) -> f64 {
        let calls = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&calls);
        let upstream = service_fn(move |_: Request<()>| {
            let first = counter.fetch_add(1, Ordering::Relaxed) == 0;
            async move {
                let status = if first {
                    StatusCode::TOO_MANY_REQUESTS
                } else {
                    StatusCode::OK
                };
                let answer = Response::builder()
                    .status(status)
                    .header("retry-after", "300");
                Ok::<_, Infallible>(answer.body(()).unwrap())
            }
        });
        let client = ServiceBuilder::new()
            .layer(FeedbackLayer::adaptive(limiter.clone()))
            .layer(LimitLayer::new(limiter.clone()))
            .service(upstream);
        let pause_end = Instant::now() + Duration::from_secs(300);
        let looked_at = pause_end + Duration::from_secs(4);
        for _ in 0..8 {
            let client = client.clone();
            tokio::spawn(async move {
                while Instant::now() < looked_at {
                    client.clone().oneshot(Request::new(())).await.unwrap();
                }
            });
        }
        tokio::time::sleep_until(looked_at).await;
        limiter.current_rate()
    }

    /// The pause holds the curve once: after a refusal (50 -> 12.5/s) and a
    /// 300 s pause, the curve holds a second from the pause's end and then
    /// probes (14.6/s 4 s after it), neither at once (500/s, the ceiling)
    /// nor after the pause counted again as unused time (12.5/s until
    /// 600 s).
    #[tokio::test(start_paused = true)]
    async fn after_a_pause_the_rate_climbs_as_soon_as_it_ends() {
        let limiter = AdaptiveRateLimiter::builder(Rate::per_second(50).unwrap())
            .build()
            .unwrap();
        let rate = rate_after_a_long_pause(limiter).await;
        assert!((13.5..20.0).contains(&rate), "{rate}");
    }

    /// The same for a curve shared through a store.
    #[tokio::test(start_paused = true)]
    async fn after_a_pause_a_shared_rate_climbs_as_soon_as_it_ends() {
        let limiter = AdaptiveRateLimiter::builder(Rate::per_second(50).unwrap())
            .build_shared(MemoryStore::new(), "api")
            .unwrap();
        let rate = rate_after_a_long_pause(limiter).await;
        assert!((13.5..20.0).contains(&rate), "{rate}");
    }

    /// A quota the upstream states is adopted at once, and the rate never
    /// climbs past it.
    #[tokio::test(start_paused = true)]
    async fn a_stated_quota_is_adopted() {
        let limiter = AdaptiveRateLimiter::builder(Rate::per_second(100).unwrap())
            .build()
            .unwrap();
        let served = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&served);
        let upstream = service_fn(move |_: Request<()>| {
            counted.fetch_add(1, Ordering::Relaxed);
            async {
                let ok = Response::builder().header("ratelimit-policy", "\"default\";q=600;w=60");
                Ok::<_, Infallible>(ok.body(()).unwrap())
            }
        });
        let mut client = ServiceBuilder::new()
            .layer(FeedbackLayer::adaptive(limiter.clone()))
            .layer(LimitLayer::new(limiter.clone()))
            .service(upstream);
        client
            .ready()
            .await
            .unwrap()
            .call(Request::new(()))
            .await
            .unwrap();
        assert_eq!(limiter.current_rate(), 10.0);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            client
                .ready()
                .await
                .unwrap()
                .call(Request::new(()))
                .await
                .unwrap();
        }
        assert_eq!(limiter.current_rate(), 10.0);
        assert_eq!(served.load(Ordering::Relaxed), 101); // the first, then 10 a second
    }
}

/// An upstream that queues before it refuses: 8 workers, 10 ms a call,
/// others wait their turn. 64 callers through an adaptive concurrency
/// limit that starts at 64: the limit comes down toward what the upstream
/// serves at once, so calls take close to 10 ms again (not the 80 ms of a
/// queue of 64), and the upstream stays busy.
#[tokio::test(start_paused = true)]
async fn an_adaptive_concurrency_limit_finds_a_queueing_upstream() {
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};
    use tokio::sync::Semaphore;
    use tower::{Layer, Service, ServiceExt, service_fn};
    use tower_limits::{AdaptiveConcurrencyLimiter, LimitLayer};

    let workers = Arc::new(Semaphore::new(8));
    let upstream = service_fn(move |()| {
        let workers = Arc::clone(&workers);
        async move {
            let _worker = workers.acquire().await.unwrap();
            tokio::time::sleep(ms(10)).await;
            Ok::<_, Infallible>(())
        }
    });
    let limiter = AdaptiveConcurrencyLimiter::builder()
        .initial(64)
        .max(64)
        .build()
        .unwrap();
    let service = LimitLayer::new(limiter.clone()).layer(upstream);
    let start = Instant::now();
    let measured_from = start + Duration::from_secs(5);
    let end = start + Duration::from_secs(10);
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let callers: Vec<_> = (0..64)
        .map(|_| {
            let (mut service, latencies) = (service.clone(), Arc::clone(&latencies));
            tokio::spawn(async move {
                while Instant::now() < end {
                    let ready = service.ready().await.unwrap();
                    let sent = Instant::now();
                    ready.call(()).await.unwrap();
                    if sent >= measured_from {
                        latencies.lock().unwrap().push(Instant::now() - sent);
                    }
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.unwrap();
    }
    let mut latencies = latencies.lock().unwrap().clone();
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    println!(
        "limit {}, {} calls in the last 5 s, median latency {median:?}",
        limiter.limit(),
        latencies.len()
    );
    assert!(limiter.limit() <= 24, "limit {}", limiter.limit());
    assert!(median <= ms(30), "median latency {median:?}");
    assert!(
        latencies.len() >= 3_600,
        "the upstream idled: {} calls",
        latencies.len()
    );
}
