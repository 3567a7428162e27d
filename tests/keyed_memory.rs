//! A key flood: memory stays within the keyed limiter's bound.
//!
//! Its own test binary, because it counts every allocation of the process.

use std::alloc::System;
use std::time::Duration;

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tower_limits::{DelayLimiter, KeyedLimiter};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const BOUND: usize = 10_000;

fn live_bytes(region: &Region<'_, System>) -> isize {
    let change = region.change();
    change.bytes_allocated as isize - change.bytes_deallocated as isize + change.bytes_reallocated
}

#[tokio::test(start_paused = true)]
async fn a_million_distinct_keys_stay_within_the_bound() {
    let keyed = KeyedLimiter::builder(|_: &u64| {
        DelayLimiter::new(Duration::from_millis(10)).expect("valid delay")
    })
    .max_keys(BOUND)
    .build()
    .expect("valid configuration");

    let region = Region::new(ALLOCATOR);
    for key in 0..BOUND as u64 {
        keyed.limiter(&key).unwrap();
    }
    let at_bound = live_bytes(&region);
    for key in BOUND as u64..1_000_000 {
        keyed.limiter(&key).unwrap();
        if key % 1024 == 0 {
            assert!(keyed.len() <= BOUND, "{} keys held", keyed.len());
        }
    }
    let after_flood = live_bytes(&region);

    assert!(keyed.len() <= BOUND, "{} keys held", keyed.len());
    assert!(
        keyed.len() >= BOUND * 7 / 8,
        "the bound is used: {}",
        keyed.len()
    );
    // Memory after a million keys is what the bound's keys took, give or
    // take the maps' spare capacity.
    eprintln!(
        "live bytes: {at_bound} at {BOUND} keys, {after_flood} after 1,000,000 keys ({} bytes a key)",
        after_flood / keyed.len() as isize
    );
    assert!(
        after_flood <= at_bound * 2,
        "memory grew past the bound: {at_bound} bytes at the bound, {after_flood} after the flood"
    );
}
