//! A keyed limiter made `of` a GCRA or token bucket template keeps each
//! key's TAT inline in its map: its decisions are exactly those of a
//! limiter per key, through handles, refunds, pauses and clears, and no key
//! is ever admitted past its limit by threads racing on it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::{Instant, advance};
use tower_limits::clock::Clock;
use tower_limits::limiter::Admission;
use tower_limits::limiters::FreshLimiter;
use tower_limits::store::{MemoryStore, Quota};
use tower_limits::{KeyedLimiter, Limiter, Permit, RateLimiter};

#[derive(Clone, Debug)]
enum Op {
    /// `try_acquire_many` on the keyed limiter and on the key's own limiter.
    Acquire { key: u8, cost: u32 },
    /// Time passes.
    Advance(u64),
    /// Refunds the key's latest grant through a handle.
    Refund(u8),
    /// Settles the key's latest grant at another cost through a handle.
    Settle { key: u8, actual: u32 },
    /// Pauses the key until `millis` from now through a handle.
    Pause { key: u8, millis: u64 },
    /// Clears the key through a handle.
    Clear(u8),
    /// Takes a handle to the key and keeps it (or lets go of a kept one).
    Hold(u8),
    /// `record_start` through a handle: a start the limiter did not admit.
    RecordStart(u8),
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..3_u8;
    prop_oneof![
        8 => (key.clone(), 1..4_u32).prop_map(|(key, cost)| Op::Acquire { key, cost }),
        5 => (0..700_u64).prop_map(Op::Advance),
        1 => key.clone().prop_map(Op::Refund),
        1 => (key.clone(), 0..4_u32).prop_map(|(key, actual)| Op::Settle { key, actual }),
        1 => (key.clone(), 0..2_000_u64).prop_map(|(key, millis)| Op::Pause { key, millis }),
        1 => key.clone().prop_map(Op::Clear),
        1 => key.clone().prop_map(Op::Hold),
        1 => key.prop_map(Op::RecordStart),
    ]
}

/// What a decision says, comparable across limiters.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Granted { token: Option<u64>, cost: u32 },
    Denied(Option<Instant>),
    Failed(String),
}

fn answer(
    result: Result<Admission, tower_limits::error::LimiterError>,
) -> (Answer, Option<Permit>) {
    match result {
        Ok(Admission::Granted(permit)) => {
            let answer = Answer::Granted {
                token: permit.token(),
                cost: permit.cost(),
            };
            (answer, Some(permit))
        }
        Ok(Admission::Denied(denial)) => (Answer::Denied(denial.retry_at()), None),
        Err(error) => (Answer::Failed(error.to_string()), None),
    }
}

/// Runs `ops` on a keyed limiter made `of(template)` and on a limiter per
/// key made by `template.fresh()`, asserting that every decision agrees.
fn replay<L>(template: L, ops: Vec<Op>)
where
    L: FreshLimiter + Clone + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        assert!(template.inline_state().is_some());
        let keyed = KeyedLimiter::of(template.clone()).build().unwrap();
        let mut own: HashMap<u8, L> = HashMap::new();
        // Per key, the latest grant of each side.
        let mut permits: HashMap<u8, (Permit, Permit)> = HashMap::new();
        let mut held: HashMap<u8, L> = HashMap::new();
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Acquire { key, cost } => {
                    let reference = own.entry(key).or_insert_with(|| template.fresh());
                    let (expected, theirs) = answer(reference.try_acquire_many(cost).await);
                    let (actual, ours) = answer(keyed.try_acquire_many(&key, cost).await);
                    assert_eq!(actual, expected, "step {step}: key {key}, cost {cost}");
                    if let (Some(ours), Some(theirs)) = (ours, theirs) {
                        permits.insert(key, (ours, theirs));
                    }
                }
                Op::Advance(millis) => advance(Duration::from_millis(millis)).await,
                Op::Refund(key) => {
                    if let (Some((ours, theirs)), Some(reference)) =
                        (permits.remove(&key), own.get(&key))
                    {
                        reference.refund(theirs);
                        keyed.limiter(&key).unwrap().refund(ours);
                    }
                }
                Op::Settle { key, actual } => {
                    if let (Some((ours, theirs)), Some(reference)) =
                        (permits.get_mut(&key), own.get(&key))
                    {
                        reference.settle(theirs, actual);
                        keyed.limiter(&key).unwrap().settle(ours, actual);
                        assert_eq!(ours.token(), theirs.token(), "step {step}: settled token");
                    }
                }
                Op::Pause { key, millis } => {
                    let at = Instant::now() + Duration::from_millis(millis);
                    let reference = own.entry(key).or_insert_with(|| template.fresh());
                    reference.set_next_available_time(at).await.unwrap();
                    let handle = keyed.limiter(&key).unwrap();
                    handle.set_next_available_time(at).await.unwrap();
                }
                Op::Clear(key) => {
                    let reference = own.entry(key).or_insert_with(|| template.fresh());
                    reference.clear().await.unwrap();
                    keyed.limiter(&key).unwrap().clear().await.unwrap();
                }
                Op::Hold(key) => {
                    if held.remove(&key).is_none() {
                        held.insert(key, keyed.limiter(&key).unwrap());
                    }
                }
                Op::RecordStart(key) => {
                    let reference = own.entry(key).or_insert_with(|| template.fresh());
                    reference.record_start().await.unwrap();
                    keyed.limiter(&key).unwrap().record_start().await.unwrap();
                }
            }
            // Now and then, since a handle takes the key out of line
            // until the next decision.
            if step % 8 != 7 {
                continue;
            }
            for (key, reference) in &own {
                let handle = keyed.limiter(key).unwrap();
                assert_eq!(
                    handle.next_available_time().await.unwrap(),
                    reference.next_available_time().await.unwrap(),
                    "step {step}: key {key}'s next available time"
                );
            }
        }
    });
}

/// A [`RateLimiter`] on tokio's clock (named: a proptest case builds it
/// before `replay` pauses time) in a memory store of its own.
fn in_memory(quota: Quota) -> RateLimiter {
    let store = MemoryStore::new().with_clock(Clock::tokio());
    RateLimiter::new(store, "tenants", quota)
}

/// `quota`, with the pacing tolerance if `paced`.
fn paced_if(quota: Quota, paced: bool) -> Quota {
    if paced {
        quota.with_pacing_tolerance().unwrap()
    } else {
        quota
    }
}

/// GCRA, 3 a second, 3 at once.
fn gcra(paced: bool) -> Quota {
    let quota = Quota::gcra(3, Duration::from_secs(1)).unwrap();
    paced_if(quota.with_burst(3).unwrap(), paced)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A `RateLimiter` of a GCRA quota with a burst in memory, strict or
    /// paced: the inline path and a limiter per key (on the store's own
    /// rules for refunds, gaps and all) agree on every grant (with its
    /// token), denial (with its instant) and error.
    #[test]
    fn inline_gcra_decides_as_a_limiter_per_key(
        ops in prop::collection::vec(op(), 1..120),
        paced in any::<bool>(),
    ) {
        replay(in_memory(gcra(paced)), ops);
    }

    /// The token bucket keeps its state inline the same way, strict or
    /// paced.
    #[test]
    fn inline_token_bucket_decides_as_a_limiter_per_key(
        ops in prop::collection::vec(op(), 1..120),
        paced in any::<bool>(),
    ) {
        let quota = Quota::token_bucket(2, 1, Duration::from_millis(400)).unwrap();
        replay(in_memory(paced_if(quota, paced)), ops);
    }
}

/// Threads racing on one key, half of them through the keyed limiter (the
/// inline path) and half through handles (which take the key out of line
/// and back): together they are granted exactly the burst, as one limiter
/// would grant, and never more.
#[test]
fn racing_threads_never_over_admit_a_key() {
    const BURST: u32 = 500;
    // The burst, then one an hour: the test ends long before the next.
    let quota = Quota::gcra(1, Duration::from_secs(3_600))
        .and_then(|quota| quota.with_burst(BURST))
        .and_then(Quota::with_pacing_tolerance)
        .unwrap();
    let template = RateLimiter::new(MemoryStore::new().with_clock(Clock::fast()), "key", quota);
    let keyed = KeyedLimiter::of(template).max_keys(64).build().unwrap();
    let granted = Arc::new(AtomicU32::new(0));
    let threads: Vec<_> = (0..4)
        .map(|thread| {
            let keyed = keyed.clone();
            let granted = Arc::clone(&granted);
            std::thread::spawn(move || {
                for attempt in 0..2_000_u32 {
                    // Other keys too, so the shard's table changes under the racers.
                    let _ = keyed.try_acquire(&(1_000 + attempt % 50)).into_ready();
                    let granted_now = if thread % 2 == 0 {
                        matches!(
                            keyed.try_acquire(&7).into_ready(),
                            Ok(Ok(Admission::Granted(_)))
                        )
                    } else {
                        let handle = keyed.limiter(&7).unwrap();
                        matches!(
                            handle.try_acquire().into_ready(),
                            Ok(Ok(Admission::Granted(_)))
                        )
                    };
                    if granted_now {
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(granted.load(Ordering::Relaxed), BURST);
}

/// A key given back to the map once its handle is dropped keeps its state:
/// the handle's grants count against the inline path and the other way.
#[tokio::test(start_paused = true)]
async fn a_key_keeps_its_state_in_and_out_of_line() {
    let quota = Quota::gcra(1, Duration::from_secs(1)).unwrap();
    let template = RateLimiter::in_memory(quota.with_burst(2).unwrap());
    let keyed = KeyedLimiter::of(template).build().unwrap();
    assert!(matches!(
        keyed.try_acquire(&"a").await.unwrap(),
        Admission::Granted(_)
    ));
    let handle = keyed.limiter(&"a").unwrap();
    assert!(matches!(
        handle.try_acquire().await.unwrap(),
        Admission::Granted(_)
    ));
    assert!(handle.is_in_use(), "the map holds the limiter too");
    drop(handle);
    assert!(matches!(
        keyed.try_acquire(&"a").await.unwrap(),
        Admission::Denied(_)
    ));
    advance(Duration::from_secs(1)).await;
    assert!(matches!(
        keyed.try_acquire(&"a").await.unwrap(),
        Admission::Granted(_)
    ));
    assert_eq!(keyed.len(), 1);
}

/// A full shard forgets the inline key whose bucket has been full the
/// longest (the least recently used, when calls cost alike) and keeps the
/// others' state.
#[tokio::test(start_paused = true)]
async fn a_full_map_forgets_the_fullest_bucket_first() {
    let template = RateLimiter::in_memory(Quota::gcra(1, Duration::from_secs(1)).unwrap());
    let keyed = KeyedLimiter::of(template).max_keys(4).build().unwrap();
    for key in ["a", "b", "c", "d"] {
        assert!(matches!(
            keyed.try_acquire(&key).await.unwrap(),
            Admission::Granted(_)
        ));
        advance(Duration::from_millis(1)).await;
    }
    assert!(matches!(
        keyed.try_acquire(&"e").await.unwrap(),
        Admission::Granted(_)
    ));
    assert_eq!(keyed.len(), 4);
    assert!(
        matches!(keyed.try_acquire(&"d").await.unwrap(), Admission::Denied(_)),
        "d kept its state"
    );
    assert!(
        matches!(
            keyed.try_acquire(&"a").await.unwrap(),
            Admission::Granted(_)
        ),
        "a forgotten: fresh"
    );
}

/// A key with a handle held is never forgotten, even when the shard is full
/// of inline keys; a new key is refused only when every key is in use.
#[tokio::test(start_paused = true)]
async fn a_key_whose_handle_is_held_is_kept_among_inline_keys() {
    let template = RateLimiter::in_memory(Quota::gcra(1, Duration::from_secs(1)).unwrap());
    let keyed = KeyedLimiter::of(template).max_keys(2).build().unwrap();
    let held = keyed.limiter(&0).unwrap();
    drop(held.try_acquire().await.unwrap());
    for key in 1..10 {
        drop(keyed.try_acquire(&key).await.unwrap()); // a flood of inline keys
    }
    assert!(keyed.len() <= 2);
    assert!(
        matches!(keyed.try_acquire(&0).await.unwrap(), Admission::Denied(_)),
        "key 0 kept its state"
    );
    let other = keyed.limiter(&9).unwrap();
    let full = keyed.try_acquire(&10).await.unwrap_err();
    assert!(
        full.get_ref()
            .downcast_ref::<tower_limits::error::KeysFull>()
            .is_some()
    );
    drop((held, other));
}
