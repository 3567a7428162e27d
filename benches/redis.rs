//! Decisions per second through Redis: one GCRA decision (one `EVALSHA` of
//! `cells.lua`) per call, with 1 and with 64 concurrent callers over one
//! multiplexed connection. Needs `REDIS_URL`; says so and does nothing
//! without it.
//!
//! The ceiling is `redis-benchmark` running the same script:
//!
//! ```sh
//! SHA=$(redis-cli SCRIPT LOAD "$(cat src/store/redis/cells.lua)")
//! redis-benchmark -q -n 200000 -c 64 EVALSHA $SHA 1 'rb:{bench}:quota' acquire 0.001 1000000 1
//! ```
//!
//! (`-c 1` for one caller).

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tokio::runtime::Runtime;
use tower_limits::store::{Quota, QuotaStore, RedisStore};

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `iterations` decisions made by `callers` tasks at once.
async fn decide_concurrently(
    store: &RedisStore,
    quota: Quota,
    callers: u64,
    iterations: u64,
) -> Duration {
    let key = Arc::new(store.quota_key("bench"));
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

fn redis_decisions(c: &mut Criterion) {
    let Ok(url) = std::env::var("REDIS_URL") else {
        eprintln!("skipped the Redis benchmark: REDIS_URL is not set");
        return;
    };
    let runtime = runtime();
    let store = runtime
        .block_on(
            RedisStore::builder(url)
                .prefix("tower-limits-bench:")
                .connect(),
        )
        .unwrap();
    // Far above what one process can drive: every decision is a grant.
    let quota = Quota::gcra(1_000_000_000, Duration::from_secs(1))
        .unwrap()
        .with_burst(1_000_000)
        .unwrap();
    let mut group = c.benchmark_group("redis_gcra_decision");
    group.throughput(Throughput::Elements(1));
    for callers in [1, 64] {
        group.bench_function(format!("{callers}_callers"), |b| {
            b.iter_custom(|iterations| {
                runtime.block_on(decide_concurrently(&store, quota, callers, iterations))
            });
        });
    }
    group.finish();
}

criterion_group!(benches, redis_decisions);
criterion_main!(benches);
