//! A cancellation storm on a shared limit loses nothing: thousands of
//! callers go through a `LimitLayer` on a store-backed limiter and are
//! dropped at random points (before their decision is sent, while it is in
//! flight, while they wait in line, between `poll_ready` and `call`, during
//! the call), with a store timeout short enough that many decisions answer
//! after their caller gave up. Afterwards the units the limit still grants
//! plus the calls that really started must equal its capacity: every grant
//! nobody used came back.
//!
//! Each quota is a pure count: the capacity refills once an hour (GCRA and
//! token bucket) or per day-long window, so nothing refills during a run.
//! `STORM_CALLERS` sets the number of callers (default 3,000).

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::ms;
use tower::{Service, ServiceExt, service_fn};
use tower_layer::Layer;
use tower_limits::store::QuotaStore;
use tower_limits::{LimitLayer, Limiter, RateLimiter};
use tracing_subscriber::layer::{Layer as _, SubscriberExt};

/// The units each limit holds.
const CAPACITY: u32 = 600;
/// How a storm runs on one store: how fast the store is pressed.
#[derive(Clone, Copy, Debug)]
struct Pace {
    /// The storm's store timeout: short enough that many decisions answer
    /// after their caller gave up.
    timeout: Duration,
    /// The callers arrive at random over this long.
    arrivals: Duration,
    /// The most a caller lives before it is dropped.
    max_life: Duration,
}

/// For a store that decides in about a millisecond or less.
const FAST: Pace = Pace {
    timeout: Duration::from_millis(5),
    arrivals: Duration::from_millis(1_000),
    max_life: Duration::from_millis(20),
};
/// One caller in this many calls once admitted; the others are dropped.
const CALLS_ONE_IN: u64 = 10;
/// The most a caller waits between `poll_ready` and `call`.
const MAX_GAP: Duration = Duration::from_millis(15);

fn callers() -> usize {
    std::env::var("STORM_CALLERS")
        .ok()
        .and_then(|callers| callers.parse().ok())
        .unwrap_or(3_000)
}

/// What a storm left: calls that really started, and units still grantable.
#[derive(Debug, PartialEq, Eq)]
struct Aftermath {
    /// Callers `poll_ready` admitted.
    admitted: u64,
    real: u64,
    remaining: u64,
}

/// A small deterministic generator, so a failing run can be told apart.
struct Dice(u64);

impl Dice {
    fn below(&mut self, bound: u64) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % bound.max(1)
    }

    fn duration(&mut self, max: Duration) -> Duration {
        Duration::from_micros(self.below(max.as_micros() as u64 + 1))
    }
}

/// Prints the crate's warnings (a refund given up, a late answer lost) on
/// stderr, where a failing run shows them: they name the path that lost a
/// unit.
fn show_warnings() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let subscriber = tracing_subscriber::registry()
            .with(Warnings.with_filter(tracing_subscriber::filter::LevelFilter::WARN));
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

struct Warnings;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {}={value:?}", field.name()));
            }
        }
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        eprintln!("{}:{}", event.metadata().level(), fields.0);
    }
}

/// Drives `limiter` with the storm through a `LimitLayer`, then waits for
/// the units still grantable (asked of `probe`, a limiter on the same limit)
/// to settle.
async fn storm<L, P>(limiter: L, probe: P, pace: Pace, seed: u64) -> Aftermath
where
    L: Limiter + Clone + Send + Sync + 'static,
    P: Limiter,
{
    let real = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&real);
    let inner = service_fn(move |pause: Duration| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(pause).await;
            Ok::<_, Infallible>(())
        }
    });
    let service = LimitLayer::new(limiter).layer(inner);
    let admitted = Arc::new(AtomicU64::new(0));
    let mut dice = Dice(seed | 1);
    let mut tasks = Vec::new();
    for _ in 0..callers() {
        let mut service = service.clone();
        let admitted = Arc::clone(&admitted);
        let arrival = dice.duration(pace.arrivals);
        let life = dice.duration(pace.max_life);
        let gap = dice.duration(MAX_GAP);
        let pause = dice.duration(ms(2));
        // Most callers admitted never call: the storm must leave units
        // that only refunds can have given back.
        let calls = dice.below(CALLS_ONE_IN) == 0;
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(arrival).await;
            let call = async {
                service.ready().await?;
                admitted.fetch_add(1, Ordering::SeqCst);
                // A caller may be dropped between `poll_ready` and `call`.
                tokio::time::sleep(gap).await;
                if !calls {
                    return Ok(());
                }
                service.call(pause).await
            };
            let _ = tokio::time::timeout(life, call).await;
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let real = real.load(Ordering::SeqCst);
    let remaining = settled_remaining(&probe, u64::from(CAPACITY).saturating_sub(real)).await;
    Aftermath {
        admitted: admitted.load(Ordering::SeqCst),
        real,
        remaining,
    }
}

/// The units `probe` says are left once refunds still in flight have
/// landed: as soon as they reach `expected` or pass it, else after 40 s (a
/// late answer may take 30 s, and refunds are tried again for as long).
async fn settled_remaining<P: Limiter>(probe: &P, expected: u64) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        let status = probe.quota_status().await.unwrap().expect("a quota status");
        if status.remaining() >= expected || tokio::time::Instant::now() > deadline {
            return status.remaining();
        }
        tokio::time::sleep(ms(100)).await;
    }
}

/// A store for the storm (with the short timeout) or for the probe.
type MakeStore<S> = Box<dyn Fn(Duration) -> Pin<Box<dyn Future<Output = S>>>>;

/// A store `open` makes, tried again until it opens: opening has the
/// store's timeout too, and a busy machine may need a few tries for a
/// short one.
async fn opened<S, E: std::fmt::Debug, F>(mut open: impl FnMut() -> F) -> S
where
    F: Future<Output = Result<S, E>>,
{
    let mut failed = None;
    for _ in 0..100 {
        match open().await {
            Ok(store) => return store,
            Err(error) => failed = Some(error),
        }
    }
    panic!("a store with a short timeout did not open in 100 tries: {failed:?}")
}

/// The probe's store timeout: long enough for a busy machine.
const LONG: Duration = Duration::from_secs(5);

/// Runs the storm on every quota (the sliding log among them) in stores
/// made by `make_store`, and asserts that nothing was lost.
async fn storm_every_algorithm<S>(what: &str, pace: Pace, make_store: MakeStore<S>)
where
    S: QuotaStore,
{
    show_warnings();
    let mut losses = Vec::new();
    for (seed, (algorithm, quota)) in common::conformance::count_quotas(CAPACITY)
        .into_iter()
        .enumerate()
    {
        let aftermath = loop {
            let name = common::conformance::unique(algorithm);
            let before = common::conformance::day();
            let limiter = RateLimiter::new(make_store(pace.timeout).await, name.clone(), quota);
            let probe = RateLimiter::new(make_store(LONG).await, name, quota);
            let aftermath = storm(limiter, probe, pace, seed as u64 + 1).await;
            if common::conformance::day() == before {
                break aftermath;
            }
            eprintln!("{what} {algorithm}: the run crossed a day boundary, running it again");
        };
        report(what, algorithm, &aftermath, &mut losses);
    }
    assert!(losses.is_empty(), "{what}: units lost: {losses:?}");
}

fn report(what: &str, algorithm: &str, aftermath: &Aftermath, losses: &mut Vec<String>) {
    let Aftermath {
        admitted,
        real,
        remaining,
    } = *aftermath;
    println!(
        "{what} {algorithm}: {admitted} admitted, {real} real calls, \
         {remaining} units left of {CAPACITY}"
    );
    assert!(
        admitted > real && remaining > 0,
        "{what} {algorithm}: the storm gave nothing back to check ({aftermath:?})"
    );
    if real + remaining != u64::from(CAPACITY) {
        losses.push(format!(
            "{algorithm}: {real} real + {remaining} left = {} of {CAPACITY}",
            real + remaining
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_on_the_memory_store_loses_nothing() {
    let store = tower_limits::store::MemoryStore::new();
    let make: MakeStore<_> = Box::new(move |_| {
        let store = store.clone();
        Box::pin(async move { store })
    });
    storm_every_algorithm("memory", FAST, make).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_on_sqlite_loses_nothing() {
    let db = Arc::new(common::sqlite::TempDb::new());
    // Creates the schema, which a store with a short timeout might not.
    db.open(LONG).await;
    let make: MakeStore<_> = Box::new(move |timeout| {
        let db = Arc::clone(&db);
        Box::pin(async move {
            let builder = || tower_limits::store::SqliteStore::builder(db.path()).timeout(timeout);
            opened(|| builder().open()).await
        })
    });
    let pace = Pace {
        timeout: ms(10),
        ..FAST
    };
    storm_every_algorithm("sqlite", pace, make).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_on_redis_loses_nothing() {
    let Some(url) = common::redis::url("a_storm_on_redis_loses_nothing") else {
        return;
    };
    let prefix = format!("{}:", common::conformance::unique("storm"));
    let make: MakeStore<_> = Box::new(move |timeout| {
        let (url, prefix) = (url.clone(), prefix.clone());
        Box::pin(async move {
            let builder = || {
                tower_limits::store::RedisStore::builder(url.clone())
                    .prefix(prefix.clone())
                    .timeout(timeout)
            };
            opened(|| builder().connect()).await
        })
    });
    storm_every_algorithm("redis", FAST, make).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_on_postgres_loses_nothing() {
    let Some(url) = common::postgres::url("a_storm_on_postgres_loses_nothing") else {
        return;
    };
    let prefix = format!("{}:", common::conformance::unique("storm"));
    let make: MakeStore<_> = Box::new(move |timeout| {
        let builder = tower_limits::store::PostgresStore::builder(url.clone())
            .schema("tower_limits_test")
            .prefix(prefix.clone())
            .timeout(timeout);
        Box::pin(async move {
            let store = builder.connect().await.unwrap();
            store.setup().await.unwrap();
            store
        })
    });
    // One key's decisions take turns on a lock: about a thousand a second.
    let pace = Pace {
        timeout: ms(30),
        arrivals: ms(3_000),
        max_life: ms(60),
    };
    storm_every_algorithm("postgres", pace, make).await;
}
