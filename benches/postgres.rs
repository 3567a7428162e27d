//! Decisions per second through PostgreSQL: one GCRA decision (one
//! `SELECT schema.cells(…)`, see `src/store/postgres/cells.sql`) per call on
//! one key, with 1 and with 16 concurrent callers over a pool of 16
//! connections. Needs `DATABASE_URL`; says so and does nothing without it.
//!
//! The ceiling is `pgbench` running the same statement:
//!
//! ```sh
//! echo "SELECT tower_limits_bench.cells('acquire', 'bench', 0.001, 1000000, '{1}');" > /tmp/cells.sql
//! pgbench -n -M prepared -f /tmp/cells.sql -c 16 -j 2 -T 10 postgres://postgres@127.0.0.1:5432/test
//! ```
//!
//! (`-c 1 -j 1` for one caller).

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tokio::runtime::Runtime;
use tower_limits::store::{PostgresStore, Quota, QuotaStore, RateLimiterStore};

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `iterations` decisions made by `callers` tasks at once.
async fn decide_concurrently(
    store: &PostgresStore,
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

fn postgres_decisions(c: &mut Criterion) {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        eprintln!("skipped the PostgreSQL benchmark: DATABASE_URL is not set");
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
    // Far above what one process can drive: every decision is a grant.
    let quota = Quota::gcra(1_000_000_000, Duration::from_secs(1))
        .unwrap()
        .with_burst(1_000_000)
        .unwrap();
    let mut group = c.benchmark_group("postgres_gcra_decision");
    group.throughput(Throughput::Elements(1));
    for callers in [1, 16] {
        group.bench_function(format!("{callers}_callers"), |b| {
            b.iter_custom(|iterations| {
                runtime.block_on(decide_concurrently(&store, quota, callers, iterations))
            });
        });
    }
    group.finish();
}

criterion_group!(benches, postgres_decisions);
criterion_main!(benches);
