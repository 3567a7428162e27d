//! Decisions per second through the shared stores: one GCRA decision per
//! call on one key, from 1 caller and from many concurrent callers of one
//! store handle, beside the store's own ceiling run by hand.
//!
//! * Redis: one `EVALSHA` of `src/store/redis/cells.lua` per call, 1 and 64
//!   callers over one multiplexed connection. Needs `REDIS_URL`. Ceiling:
//!
//!   ```text
//!   SHA=$(redis-cli SCRIPT LOAD "$(cat src/store/redis/cells.lua)")
//!   redis-benchmark -q -n 200000 -c 64 EVALSHA $SHA 1 'rb:{bench}:quota' acquire 0.001 1000000 1
//!   ```
//!
//!   (`-c 1` for one caller).
//! * PostgreSQL: one `SELECT schema.cells(…)` (`src/store/postgres/cells.sql`)
//!   per call, 1 and 16 callers over a pool of 16 connections. Needs
//!   `DATABASE_URL`. Ceiling (after a run of this benchmark made the schema):
//!
//!   ```text
//!   echo "SELECT tower_limits_bench.cells('acquire', 'bench', 0.001, 1000000, '{1}');" > /tmp/cells.sql
//!   pgbench -n -M prepared -f /tmp/cells.sql -c 16 -j 2 -T 10 postgres://postgres@127.0.0.1:5432/test
//!   ```
//!
//!   (`-c 1 -j 1` for one caller).
//! * SQLite: one `BEGIN IMMEDIATE` transaction per call on a file in a
//!   temporary directory, 1 and 4 callers over 4 connections. Needs nothing.
//!
//! Each count of callers runs twice: the store's own decisions, and the
//! same decisions as calls through a `LimitLayer` on a `RateLimiter`
//! (`_through_layer`), each caller with its own clone of the service, as a
//! server's connections hold them.
//!
//! A store whose URL is not set is skipped, with a line saying so. Run with
//! `cargo bench -p integration --all-features --bench stores`.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tokio::runtime::Runtime;
use tower::{Layer, Service, ServiceExt, service_fn};
use tower_limits::store::{PostgresStore, Quota, QuotaStore, RedisStore, SqliteStore};
use tower_limits::{LimitLayer, RateLimiter};

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Far above what one process can drive: every decision is a grant.
fn quota() -> Quota {
    Quota::gcra(1_000_000_000, Duration::from_secs(1))
        .unwrap()
        .with_burst(1_000_000)
        .unwrap()
}

/// `iterations` decisions made by `callers` tasks at once.
async fn decide_concurrently<S: QuotaStore + Clone>(
    store: &S,
    callers: u64,
    iterations: u64,
) -> Duration {
    let (key, quota) = (Arc::new(store.quota_key("bench")), quota());
    let start = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|caller| {
            let (store, key) = (store.clone(), Arc::clone(&key));
            let share = iterations / callers + u64::from(caller < iterations % callers);
            tokio::spawn(async move {
                for _ in 0..share {
                    store.decide(&key, &quota, 1).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    start.elapsed()
}

/// `iterations` calls made by `callers` tasks at once, each through its own
/// clone of one service limited by a [`RateLimiter`] on `store`: what a
/// user's stack costs beside the bare decisions of [`decide_concurrently`].
async fn call_concurrently<S: QuotaStore + Clone>(
    store: &S,
    callers: u64,
    iterations: u64,
) -> Duration {
    let limiter = RateLimiter::new(store.clone(), "bench", quota());
    let service = LimitLayer::new(limiter).layer(service_fn(|()| async {
        Ok::<_, std::convert::Infallible>(())
    }));
    let start = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|caller| {
            let mut service = service.clone();
            let share = iterations / callers + u64::from(caller < iterations % callers);
            tokio::spawn(async move {
                for _ in 0..share {
                    service.ready().await.unwrap().call(()).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    start.elapsed()
}

/// The benchmark group `{name}_gcra_decision`: one run per count of callers,
/// of the store's own decisions (`N_callers`) and of calls through a
/// limited service (`N_callers_through_layer`).
fn bench_store<S: QuotaStore + Clone>(
    c: &mut Criterion,
    runtime: &Runtime,
    name: &str,
    store: &S,
    callers: [u64; 2],
) {
    let mut group = c.benchmark_group(format!("{name}_gcra_decision"));
    group.throughput(Throughput::Elements(1));
    for callers in callers {
        group.bench_function(format!("{callers}_callers"), |b| {
            b.iter_custom(|iterations| {
                runtime.block_on(decide_concurrently(store, callers, iterations))
            });
        });
        group.bench_function(format!("{callers}_callers_through_layer"), |b| {
            b.iter_custom(|iterations| {
                runtime.block_on(call_concurrently(store, callers, iterations))
            });
        });
    }
    group.finish();
}

/// The value of `variable`, or `None` after saying which store is skipped.
fn url(variable: &str, store: &str) -> Option<String> {
    let url = std::env::var(variable).ok();
    if url.is_none() {
        eprintln!("skipped the {store} benchmark: {variable} is not set");
    }
    url
}

fn redis(c: &mut Criterion) {
    let Some(url) = url("REDIS_URL", "Redis") else {
        return;
    };
    let runtime = runtime();
    let connect = RedisStore::builder(url)
        .prefix("tower-limits-bench:")
        .connect();
    let store = runtime.block_on(connect).unwrap();
    bench_store(c, &runtime, "redis", &store, [1, 64]);
}

fn postgres(c: &mut Criterion) {
    let Some(url) = url("DATABASE_URL", "PostgreSQL") else {
        return;
    };
    let runtime = runtime();
    let store = runtime.block_on(async {
        let store = PostgresStore::builder(url)
            .schema("tower_limits_bench")
            .pool_size(16)
            .timeout(Duration::from_secs(2))
            .connect()
            .await
            .unwrap();
        store.setup().await.unwrap();
        store
    });
    bench_store(c, &runtime, "postgres", &store, [1, 16]);
}

fn sqlite(c: &mut Criterion) {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let open = SqliteStore::builder(dir.path().join("bench.db"))
        .timeout(Duration::from_secs(2))
        .connections(4)
        .open();
    let store = runtime.block_on(open).unwrap();
    bench_store(c, &runtime, "sqlite", &store, [1, 4]);
}

criterion_group!(benches, redis, postgres, sqlite);
criterion_main!(benches);
