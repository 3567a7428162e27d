//! A `MemoryStore` decides GCRA without its lock while the line has no gap
//! (`src/store/memory_open_line.rs`), and under the lock for everything else: a
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

/// The windows' open line (a fixed window's or a sliding window counter's
/// counts in one word) against the lock, as above: two takers on the open
/// line, a meddler whose refunds, looks and status reads close and reopen
/// it. Neither kind lets a window count more than its limit, so the grants
/// ticketed with a window, less those given back, are at most the limit in
/// every window. Ten-microsecond windows roll the word's window index many
/// times a second, racing the meddler's reopenings.
#[test]
fn windows_keep_their_limit_on_both_paths() {
    for (what, quota) in [
        ("fixed window, 1 ms", Quota::fixed_window(50, INTERVAL)),
        (
            "fixed window, 10 µs",
            Quota::fixed_window(2, Duration::from_micros(10)),
        ),
        (
            "sliding window counter, 1 ms",
            Quota::sliding_window_counter(50, INTERVAL),
        ),
        (
            "sliding window counter, 10 µs",
            Quota::sliding_window_counter(2, Duration::from_micros(10)),
        ),
    ] {
        windows_hold(what, quota.expect("a valid quota"));
    }
}

/// Grants counted by window, less those given back.
type PerWindow = std::collections::HashMap<u64, i64>;

/// Runs of [`windows_hold`] before a run that filled no window fails: on a
/// loaded machine a run's threads may get too little time to fill one (a
/// sliding window counter fills a window only when the last one was quiet).
const ATTEMPTS: u32 = 5;

/// No window of `quota` above its limit in any run; and some run fills a
/// window and gives grants back, or the test proved nothing.
fn windows_hold(what: &str, quota: Quota) {
    let max = i64::from(quota.capacity());
    for attempt in 1..=ATTEMPTS {
        let (net, given_back) = contend(&quota);
        let over: Vec<_> = net.iter().filter(|&(_, &count)| count > max).collect();
        let fullest = net.values().copied().max().unwrap_or(0);
        println!(
            "{what}, run {attempt}: {} windows, fullest {fullest}, {given_back} given back",
            net.len()
        );
        assert!(over.is_empty(), "{what}: windows above {max}: {over:?}");
        if fullest == max && given_back > 0 {
            return;
        }
    }
    panic!("{what}: no run of {ATTEMPTS} filled a window and gave back: the test proved nothing");
}

/// Two takers and a meddler on one key of `quota` for half of [`RUN`]:
/// the grants per window, less those given back, and how many were.
fn contend(quota: &Quota) -> (PerWindow, u64) {
    let store = MemoryStore::new();
    let stop = Arc::new(AtomicBool::new(false));
    let worker = |meddles: bool| {
        let (store, stop, quota) = (store.clone(), Arc::clone(&stop), *quota);
        thread::spawn(move || {
            let key = store.quota_key("open-line");
            let mut counted = PerWindow::new();
            let mut given_back = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                let Ok(WindowDecision::Granted { ticket }) = now(store.decide(&key, &quota, 1))
                else {
                    continue;
                };
                *counted.entry(ticket).or_default() += 1;
                if meddles {
                    thread::yield_now();
                    now(store.adjust(&key, &quota, ticket, 1, 0)).unwrap();
                    *counted.entry(ticket).or_default() -= 1;
                    given_back += 1;
                    now(store.look(&key, &quota, 1)).unwrap();
                    now(store.quota_status(&key, &quota)).unwrap();
                }
            }
            (counted, given_back)
        })
    };
    let workers: Vec<_> = [false, false, true].map(worker).into();
    thread::sleep(RUN / 2);
    stop.store(true, Ordering::Relaxed);
    let mut net = PerWindow::new();
    let mut given_back = 0;
    for worker in workers {
        let (counted, gave) = worker.join().expect("a worker panicked");
        given_back += gave;
        for (window, count) in counted {
            *net.entry(window).or_default() += count;
        }
    }
    (net, given_back)
}
