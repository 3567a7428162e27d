//! Every limiter's constructor with arbitrary numbers (zero, one, the
//! type's maximum, anything between; durations from zero to `Duration::MAX`),
//! then arbitrary costs, settled amounts, peeks, pauses, runtime changes,
//! refunds and the six seed operations on what was built: a configuration
//! is built or refused with a `ConfigError`, every call answers, nothing
//! panics, and no case allocates in proportion to a number it was given.
//!
//! 2,000 cases by default; `PROPTEST_CASES=1000000 cargo test -p integration --release
//! --all-features --test arbitrary_numbers` runs a million. Its own test
//! binary, because it counts every allocation of the process.

mod common;

use std::alloc::System;
use std::sync::Arc;
use std::time::Duration;

use common::cases::OneKey;
use common::paused_runtime;
use proptest::prelude::*;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tokio::time::Instant;
use tower_limits::error::ConfigError;
use tower_limits::limiter::Admission;
use tower_limits::store::{MemoryStore, Quota};
use tower_limits::{
    AdaptiveConcurrencyLimiter, AdaptiveRateLimiter, BatchedLimiter, CompositeLimiter,
    ConcurrencyLimiter, DelayLimiter, EvenlySpacedRateLimiter, KeyedLimiter, LeakyBucketLimiter,
    LeasedConcurrencyLimiter, Limiter, Permit, Rate, RateLimiter,
};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The most one case may allocate in all (its limiter, its permits, a
/// log of a few hundred entries): far below what one allocation per unit of
/// an arbitrary cost would take.
const ALLOCATION_BOUND: usize = 4 << 20;
/// Permits a case holds at once; older ones are dropped.
const HELD: usize = 16;

// ------------------------------------------------------------- numbers

fn count_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(u64::from(u32::MAX)),
        0u64..1_000,
        any::<u64>(),
    ]
}

fn count_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(u32::MAX),
        Just(u32::MAX - 1),
        0u32..1_000,
        any::<u32>()
    ]
}

fn count_usize() -> impl Strategy<Value = usize> {
    count_u64().prop_map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::from_millis(1)),
        Just(Duration::from_secs(1)),
        Just(Duration::from_secs(86_400 * 365 * 100)),
        Just(Duration::MAX),
        (0u64..10_000_000_000).prop_map(Duration::from_nanos),
        any::<u64>().prop_map(Duration::from_nanos),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn multiplier() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(-1.0),
        Just(0.0),
        Just(1.0),
        Just(2.0),
        any::<f64>(),
    ]
}

// ------------------------------------------------------------ subjects

/// A constructor and its numbers.
#[derive(Clone, Debug)]
enum Make {
    Concurrency(u32),
    SlidingLog {
        max: u32,
        window: Duration,
        backoff: Option<(Duration, f64, Duration)>,
    },
    Delay(Duration),
    EvenlySpaced(u32, Duration),
    Gcra(u32, Duration, u32),
    TokenBucket(u32, u32, Duration),
    LeakyBucket(u32, Duration, u32),
    /// A fixed window in a memory store of its own (windows aligned to
    /// Unix time, whatever their length).
    FixedWindow(u32, Duration),
    SlidingWindowCounter(u32, Duration),
    /// A rate (`count` per `per`) given to each `from_rate` constructor,
    /// picked by the `u8`.
    FromRate(u32, Duration, u8),
    /// A quota in the memory store, picked by the `u8`, with a burst.
    Shared(u32, Duration, u32, u8),
    Leased(u32, Duration),
    /// GCRA per key: from a template (keys inline) or a limiter made per
    /// key.
    Keyed {
        count: u32,
        period: Duration,
        max_keys: usize,
        idle_timeout: Duration,
        inline: bool,
    },
    Composite(u32, u32, Duration),
    /// A learned rate: start, floor and ceiling (count per period), burst,
    /// decrease, queueing delay.
    AdaptiveRate {
        start: (u32, Duration),
        floor: (u32, Duration),
        ceiling: (u32, Duration),
        burst: u32,
        decrease: f64,
        queueing_delay: Option<Duration>,
    },
    /// A learned concurrency limit: initial, min, max, tolerance.
    AdaptiveConcurrency(u32, u32, u32, f64),
    /// A fleet rate taken in batches: rate, batch, burst.
    Batched((u32, Duration), u32, u32),
}

fn make() -> impl Strategy<Value = Make> {
    let backoff = proptest::option::of((duration(), multiplier(), duration()));
    prop_oneof![
        count_u32().prop_map(Make::Concurrency),
        (count_u32(), duration(), backoff).prop_map(|(max, window, backoff)| {
            Make::SlidingLog {
                max,
                window,
                backoff,
            }
        }),
        duration().prop_map(Make::Delay),
        (count_u32(), duration()).prop_map(|(n, w)| Make::EvenlySpaced(n, w)),
        (count_u32(), duration(), count_u32()).prop_map(|(n, p, b)| Make::Gcra(n, p, b)),
        (count_u32(), count_u32(), duration()).prop_map(|(c, n, p)| Make::TokenBucket(c, n, p)),
        (count_u32(), duration(), count_u32()).prop_map(|(n, p, q)| Make::LeakyBucket(n, p, q)),
        (count_u32(), duration()).prop_map(|(n, w)| Make::FixedWindow(n, w)),
        (count_u32(), duration()).prop_map(|(n, w)| Make::SlidingWindowCounter(n, w)),
        (count_u32(), duration(), any::<u8>()).prop_map(|(n, p, k)| Make::FromRate(n, p, k)),
        (count_u32(), duration(), count_u32(), any::<u8>())
            .prop_map(|(n, p, b, k)| Make::Shared(n, p, b, k)),
        (count_u32(), duration()).prop_map(|(n, t)| Make::Leased(n, t)),
        (
            count_u32(),
            duration(),
            count_usize(),
            duration(),
            any::<bool>()
        )
            .prop_map(
                |(count, period, max_keys, idle_timeout, inline)| Make::Keyed {
                    count,
                    period,
                    max_keys,
                    idle_timeout,
                    inline,
                }
            ),
        (count_u32(), count_u32(), duration()).prop_map(|(c, n, p)| Make::Composite(c, n, p)),
        (
            (count_u32(), duration()),
            (count_u32(), duration()),
            (count_u32(), duration()),
            count_u32(),
            multiplier(),
            proptest::option::of(duration()),
        )
            .prop_map(|(start, floor, ceiling, burst, decrease, queueing_delay)| {
                Make::AdaptiveRate {
                    start,
                    floor,
                    ceiling,
                    burst,
                    decrease,
                    queueing_delay,
                }
            }),
        (count_u32(), count_u32(), count_u32(), multiplier())
            .prop_map(|(i, lo, hi, t)| Make::AdaptiveConcurrency(i, lo, hi, t)),
        ((count_u32(), duration()), count_u32(), count_u32())
            .prop_map(|(rate, batch, burst)| Make::Batched(rate, batch, burst)),
    ]
}

/// Changes a limiter's numbers at run time, where it can.
type Retune = Box<dyn Fn(u32, Duration, u32) -> Result<(), ConfigError>>;

/// What a constructor built.
struct Subject {
    limiter: Arc<dyn Limiter>,
    retune: Retune,
}

impl Subject {
    fn new<L: Limiter + Clone>(
        limiter: L,
        retune: impl Fn(&L, u32, Duration, u32) -> Result<(), ConfigError> + 'static,
    ) -> Self {
        let handle = limiter.clone();
        Self {
            limiter: Arc::new(limiter),
            retune: Box::new(move |n, d, b| retune(&handle, n, d, b)),
        }
    }

    fn fixed(limiter: impl Limiter) -> Self {
        Self {
            limiter: Arc::new(limiter),
            retune: Box::new(|_, _, _| Ok(())),
        }
    }
}

impl Make {
    fn build(&self) -> Result<Subject, ConfigError> {
        Ok(match *self {
            Make::Concurrency(max) => Subject::new(
                ConcurrencyLimiter::new(max)?,
                |l: &ConcurrencyLimiter, n, _, _| l.set_max_concurrent(n),
            ),
            Make::SlidingLog {
                max,
                window,
                backoff,
            } => {
                let builder = RateLimiter::builder("arbitrary", max, window);
                let builder = match backoff {
                    Some((initial, multiplier, most)) => builder
                        .initial_backoff(initial)
                        .backoff_multiplier(multiplier)
                        .max_backoff(most),
                    None => builder.without_backoff(),
                };
                Subject::new(builder.build()?, |l: &RateLimiter, n, d, _| {
                    let quota = Quota::sliding_log(n, d)?.with_backoff(l.quota().backoff())?;
                    l.set_quota(quota);
                    Ok(())
                })
            }
            Make::Delay(delay) => {
                Subject::new(DelayLimiter::new(delay)?, |l: &DelayLimiter, _, d, _| {
                    l.set_delay(d)
                })
            }
            Make::EvenlySpaced(max, window) => {
                Subject::fixed(EvenlySpacedRateLimiter::new(max, window)?)
            }
            Make::Gcra(count, period, burst) => Subject::new(
                RateLimiter::in_memory(paced_gcra(count, period, burst)?),
                retune_cells,
            ),
            Make::TokenBucket(capacity, refill, period) => Subject::new(
                RateLimiter::in_memory(
                    Quota::token_bucket(capacity, refill, period)?.with_pacing_tolerance()?,
                ),
                retune_cells,
            ),
            Make::LeakyBucket(count, period, queue) => {
                Subject::fixed(LeakyBucketLimiter::new(count, period, queue)?)
            }
            Make::FixedWindow(max, window) => {
                Subject::fixed(RateLimiter::in_memory(Quota::fixed_window(max, window)?))
            }
            Make::SlidingWindowCounter(max, window) => Subject::fixed(RateLimiter::in_memory(
                Quota::sliding_window_counter(max, window)?,
            )),
            Make::FromRate(count, per, which) => from_rate(Rate::new(count, per)?, which)?,
            Make::Shared(count, period, burst, which) => {
                let quota = match which % 4 {
                    0 => Quota::gcra(count, period)?.with_burst(burst)?,
                    1 => Quota::token_bucket(burst, count, period)?,
                    2 => Quota::fixed_window(count, period)?,
                    _ => Quota::sliding_window_counter(count, period)?,
                };
                Subject::fixed(RateLimiter::new(MemoryStore::new(), "arbitrary", quota))
            }
            Make::Leased(max, ttl) => Subject::fixed(LeasedConcurrencyLimiter::new(
                MemoryStore::new(),
                "arbitrary",
                max,
                ttl,
            )?),
            Make::Keyed {
                count,
                period,
                max_keys,
                idle_timeout,
                inline,
            } => {
                let quota = paced_gcra(count, period, 1)?;
                let builder = if inline {
                    KeyedLimiter::of(RateLimiter::in_memory(quota))
                } else {
                    KeyedLimiter::builder(move |_: &u8| RateLimiter::in_memory(quota))
                };
                let keyed = builder
                    .max_keys(max_keys)
                    .idle_timeout(idle_timeout)
                    .build()?;
                Subject::fixed(OneKey::new(keyed, 1))
            }
            Make::AdaptiveRate {
                start,
                floor,
                ceiling,
                burst,
                decrease,
                queueing_delay,
            } => {
                let mut builder = AdaptiveRateLimiter::builder(Rate::new(start.0, start.1)?)
                    .floor(Rate::new(floor.0, floor.1)?)
                    .ceiling(Rate::new(ceiling.0, ceiling.1)?)
                    .burst(burst)
                    .decrease(decrease);
                if let Some(delay) = queueing_delay {
                    builder = builder.queueing_delay(delay);
                }
                let limiter = builder.build()?;
                Subject::new(limiter, |l: &AdaptiveRateLimiter, n, d, _| {
                    // A refusal, a success and a stated quota as the retune.
                    let now = Instant::now();
                    l.record_refusal(now.checked_sub(d).unwrap_or(now));
                    l.record_success(now);
                    l.adopt_quota(Rate::new(n, d)?);
                    Ok(())
                })
            }
            Make::AdaptiveConcurrency(initial, min, max, tolerance) => Subject::fixed(
                AdaptiveConcurrencyLimiter::builder()
                    .initial(initial)
                    .min(min)
                    .max(max)
                    .tolerance(tolerance)
                    .build()?,
            ),
            Make::Batched((count, per), batch, burst) => Subject::fixed(
                BatchedLimiter::builder(MemoryStore::new(), "arbitrary", Rate::new(count, per)?)
                    .batch(batch)
                    .burst(burst)
                    .build()?,
            ),
            Make::Composite(max, count, period) => Subject::fixed(
                CompositeLimiter::new()
                    .with(ConcurrencyLimiter::new(max)?)
                    .with(RateLimiter::in_memory(paced_gcra(count, period, 1)?)),
            ),
        })
    }
}

/// GCRA, `count` per `period`, `burst` at once, with the pacing tolerance.
fn paced_gcra(count: u32, period: Duration, burst: u32) -> Result<Quota, ConfigError> {
    Quota::gcra(count, period)?
        .with_burst(burst)?
        .with_pacing_tolerance()
}

/// A GCRA or token bucket limiter's retune: `count` per `period`, `burst`
/// at once, from the next decision (the TAT kept).
fn retune_cells(
    limiter: &RateLimiter,
    count: u32,
    period: Duration,
    burst: u32,
) -> Result<(), ConfigError> {
    limiter.set_quota(paced_gcra(count, period, burst)?);
    Ok(())
}

fn from_rate(rate: Rate, which: u8) -> Result<Subject, ConfigError> {
    Ok(match which % 7 {
        0 => Subject::fixed(RateLimiter::from_rate("arbitrary", rate).build()?),
        1 => Subject::fixed(EvenlySpacedRateLimiter::from_rate(rate)?),
        2 => Subject::fixed(RateLimiter::in_memory(paced_gcra(
            rate.count(),
            rate.per(),
            1,
        )?)),
        3 => Subject::fixed(RateLimiter::in_memory(paced_gcra(
            rate.count(),
            rate.per(),
            u32::from(which),
        )?)),
        4 => Subject::fixed(LeakyBucketLimiter::from_rate(rate, u32::from(which))?),
        5 => Subject::fixed(RateLimiter::in_memory(Quota::fixed_window(
            rate.count(),
            rate.per(),
        )?)),
        _ => Subject::fixed(RateLimiter::in_memory(Quota::sliding_window_counter(
            rate.count(),
            rate.per(),
        )?)),
    })
}

// ------------------------------------------------------------ operations

#[derive(Clone, Debug)]
enum Op {
    Acquire(u32),
    Peek(u32),
    /// Settles a held permit (picked by the index) to this cost.
    Settle(usize, u32),
    Refund(usize),
    Release(usize),
    /// Moves paused time on (at most ten years: tokio's clock is the limit).
    Advance(Duration),
    /// `set_next_available_after`, any delay.
    PauseFor(Duration),
    Retune(u32, Duration, u32),
    Clear,
    CanProceed,
    RecordStart,
    RecordCompletion,
    NextAvailableTime,
}

fn op() -> impl Strategy<Value = Op> {
    let ten_years = Duration::from_secs(86_400 * 365 * 10).as_nanos() as u64;
    prop_oneof![
        4 => count_u32().prop_map(Op::Acquire),
        2 => count_u32().prop_map(Op::Peek),
        2 => (any::<usize>(), count_u32()).prop_map(|(i, n)| Op::Settle(i, n)),
        1 => any::<usize>().prop_map(Op::Refund),
        1 => any::<usize>().prop_map(Op::Release),
        2 => prop_oneof![0..10_000_000u64, 0..ten_years].prop_map(|n| Op::Advance(Duration::from_nanos(n))),
        1 => duration().prop_map(Op::PauseFor),
        1 => (count_u32(), duration(), count_u32()).prop_map(|(n, d, b)| Op::Retune(n, d, b)),
        1 => Just(Op::Clear),
        1 => Just(Op::CanProceed),
        1 => Just(Op::RecordStart),
        1 => Just(Op::RecordCompletion),
        1 => Just(Op::NextAvailableTime),
    ]
}

/// Runs one operation; a typed error is an answer, as a grant or a denial
/// is.
async fn run(subject: &Subject, held: &mut Vec<Permit>, op: Op) {
    let limiter = subject.limiter.as_ref();
    match op {
        Op::Acquire(cost) => {
            if let Ok(Admission::Granted(permit)) = limiter.try_acquire_many(cost).await {
                if held.len() == HELD {
                    drop(held.remove(0));
                }
                held.push(permit);
            }
        }
        Op::Peek(cost) => drop(limiter.peek(cost).await),
        Op::Settle(index, actual) => {
            if let Some(permit) = pick(held, index) {
                let before = permit.cost();
                limiter.settle(permit, actual);
                // Settled to at most what was asked, or left alone.
                assert!(permit.cost() <= actual.max(before), "charged past the ask");
            }
        }
        Op::Refund(index) => {
            if !held.is_empty() {
                limiter.refund(held.remove(index % held.len()));
            }
        }
        Op::Release(index) => {
            if !held.is_empty() {
                drop(held.remove(index % held.len()));
            }
        }
        Op::Advance(by) => tokio::time::advance(by).await,
        Op::PauseFor(delay) => drop(limiter.set_next_available_after(delay).await),
        Op::Retune(count, period, burst) => drop((subject.retune)(count, period, burst)),
        Op::Clear => drop(limiter.clear().await),
        Op::CanProceed => drop(limiter.can_proceed().await),
        Op::RecordStart => drop(limiter.record_start().await),
        Op::RecordCompletion => drop(limiter.record_completion().await),
        Op::NextAvailableTime => {
            if let Ok(at) = limiter.next_available_time().await {
                // Any instant is an answer; reading it must not panic.
                let _ = at.checked_duration_since(Instant::now());
            }
        }
    }
}

fn pick(held: &mut [Permit], index: usize) -> Option<&mut Permit> {
    let len = held.len();
    (len > 0).then(|| &mut held[index % len])
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(2_000)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_numbers_are_answered_without_panics_or_unbounded_memory(
        make in make(),
        ops in prop::collection::vec(op(), 0..24),
    ) {
        let region = Region::new(ALLOCATOR);
        paused_runtime().block_on(async {
            let Ok(subject) = make.build() else {
                return;
            };
            let mut held = Vec::new();
            for op in ops {
                run(&subject, &mut held, op).await;
            }
        });
        let allocated = region.change().bytes_allocated;
        prop_assert!(
            allocated <= ALLOCATION_BOUND,
            "{make:?} allocated {allocated} bytes"
        );
    }
}
