//! A `MemoryStore` decides GCRA without its lock while the line has no gap
//! (`src/store/memory_cells.rs`), and under the lock for everything else: a
//! refund inside the line, a look, a pause, another burst. Here both paths
//! run at once on one key, from OS threads, for a second: two threads take
//! cells as fast as they can, a third gives back grants of its own (inside
//! the line, so the line closes and reopens), looks, reads the status and
//! moves the burst back and forth, all on the same name.
//!
//! GCRA's bound must hold whatever the interleaving: from a full bucket,
//! the cells granted in a run of `d`, less those given back, are at most
//! `B + d / T` (with the larger burst; a refund of a slot that already
//! passed frees nothing but is subtracted too, which only loosens the
//! check). Each refund frees a cell the takers then take, so the bound is
//! nearly reached: a lost update of even a few cells would show. A path that lost the other's
//! update (a TAT written back stale by the lock's holder, a compare-and-swap
//! that succeeded on a closed line) would grant more. The bound must also be
//! nearly reached, or the run proved nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tower_limits::limiter::LimiterFuture;
use tower_limits::store::{MemoryStore, Quota, QuotaStore, WindowDecision};

/// The burst (the meddler's quota has one more) and the interval.
const BURST: u32 = 50;
const INTERVAL: Duration = Duration::from_millis(1);
const RUN: Duration = Duration::from_secs(1);

/// The answer of a memory store's future, which is always ready.
fn now<T>(future: LimiterFuture<'_, T>) -> T {
    match future.into_ready() {
        Ok(value) => value,
        Err(_) => panic!("a memory store answers at once"),
    }
}

fn quota(burst: u32) -> Quota {
    Quota::gcra(1, INTERVAL)
        .and_then(|quota| quota.with_burst(burst))
        .expect("a valid quota")
}

#[test]
fn the_lock_free_and_the_locked_path_keep_one_bound() {
    let store = MemoryStore::new();
    let rate = quota(BURST);
    let wider = quota(BURST + 1);
    let (granted, given_back) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let takers: Vec<_> = (0..2)
        .map(|_| {
            let (store, granted, stop) = (store.clone(), Arc::clone(&granted), Arc::clone(&stop));
            thread::spawn(move || {
                let key = store.quota_key("open-line");
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(WindowDecision::Granted { .. }) = now(store.decide(&key, &rate, 1)) {
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let meddler = {
        let (store, granted, given_back, stop) = (
            store.clone(),
            Arc::clone(&granted),
            Arc::clone(&given_back),
            Arc::clone(&stop),
        );
        thread::spawn(move || {
            let key = store.quota_key("open-line");
            let mut round = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                // A grant of its own, given back after the takers moved
                // the line on: a gap inside it, decided under the lock.
                let quota = if round.is_multiple_of(7) { wider } else { rate };
                if let Ok(WindowDecision::Granted { ticket }) = now(store.decide(&key, &quota, 1)) {
                    granted.fetch_add(1, Ordering::Relaxed);
                    thread::yield_now();
                    if now(store.adjust(&key, &quota, ticket, 1, 0))
                        .unwrap()
                        .is_some()
                    {
                        given_back.fetch_add(1, Ordering::Relaxed);
                    }
                }
                now(store.look(&key, &rate, 1)).unwrap();
                now(store.quota_status(&key, &rate)).unwrap();
            }
        })
    };
    thread::sleep(RUN);
    stop.store(true, Ordering::Relaxed);
    for taker in takers {
        taker.join().expect("a taker panicked");
    }
    meddler.join().expect("the meddler panicked");
    let elapsed = started.elapsed();

    let (granted, given_back) = (
        granted.load(Ordering::Relaxed),
        given_back.load(Ordering::Relaxed),
    );
    let net = granted - given_back;
    // Every decision's clock reading lies inside `elapsed`.
    let bound = u64::from(BURST + 1) + (elapsed.as_nanos() / INTERVAL.as_nanos()) as u64;
    println!("{granted} granted, {given_back} given back, {net} net in {elapsed:?}: bound {bound}");
    assert!(
        net <= bound,
        "{net} cells net in {elapsed:?}, above GCRA's {bound}"
    );
    assert!(
        net >= bound * 9 / 10,
        "{net} cells net in {elapsed:?}: the takers should keep the line full (bound {bound})"
    );
    assert!(
        given_back > 0,
        "the meddler gave nothing back: no gap was made"
    );
}
