//! Golden vectors: the Lua (Redis) and PL/pgSQL (PostgreSQL) versions of each
//! rate-limiting algorithm must reproduce, step by step and to the
//! microsecond, the decisions of the in-memory Rust limiter they claim to
//! mirror.
//!
//! For each algorithm a few configurations (whole-millisecond intervals and
//! windows) each get [`SCRIPTS`] scripts of [`STEPS`] steps drawn from a
//! fixed-seed xorshift: at a non-decreasing time (whole milliseconds),
//! acquire a cost from 0 to the capacity + 1 (the last never fits), peek,
//! read the quota's status, take one unit whatever the room
//! (`record_start`), pause (push the next available time), or settle or
//! refund one of the last two grants still held. Only operations the
//! scripts expose, with the arguments the crate's callers pass them.
//!
//! * **Expected**: the Rust decisions on tokio's paused clock, advanced to
//!   each step: the stores' own, a `RateLimiter` on a `MemoryStore` (whose
//!   quota state, `src/store/quota_state.rs`, SQLite also runs), for every
//!   algorithm.
//! * **Redis**: the crate's script text (`status.lua` before it, as
//!   `with_status` does) behind a shim that shadows `redis` with a table
//!   whose `call('TIME')` answers a fake clock passed as one more trailing
//!   ARGV, every other command going to the real `redis.call`; EVALed on
//!   `REDIS_URL` under keys of this test's own, deleted at the end.
//! * **PostgreSQL**: the crate's SQL files, placeholders substituted as
//!   `src/store/postgres/mod.rs` does, in a schema of this test's own (dropped
//!   at the end) whose `micros_now()` is replaced by a read of a one-row
//!   table updated before each step; the functions called directly with the
//!   crate's argument layout.
//! * **SQLite**: the same scripts through the public limiters on a
//!   `SqliteStore` whose clock is tokio's paused one
//!   (`SqliteStoreBuilder::clock`), for the windows and the sliding log.
//!   GCRA is not replayed there: a `RateLimiter` on a store that answers
//!   in a task cannot learn a settled grant's new ticket, so it refuses a
//!   later refund the reference makes; SQLite's GCRA decisions are the
//!   reference's own code (`src/store/quota_state.rs`).
//!
//! The fake clock of the servers starts at [`EPOCH_US`], a multiple of every
//! window: the memory store and the scripts both align windows to Unix time,
//! and the reference starts its windows' scripts at a boundary (paused time
//! moved there first, `common::to_window_start`), so window boundaries
//! match.
//!
//! Outcomes compare exactly, in µs. The servers compute in whole µs; the
//! Rust limiters in ns. A Rust instant is turned into µs by rounding up, as
//! the crate's own `micros` does for durations it sends: with whole
//! millisecond steps and intervals every GCRA and fixed window time is a
//! whole µs anyway, and the sliding window counter's offset
//! `W − ⌊room·W / previous⌋` taken in ns and rounded up is exactly the same
//! expression taken in µs (`⌈W_ns − ⌊room·W_ns/p⌋⌉/1000 = W_µs − ⌊room·W_µs/p⌋`),
//! so the rounding hides no difference.
//!
//! A few directed vectors add the GCRA sequences the random scripts reach
//! only now and then (a grant settled or refunded after later calls moved
//! the state). They hold the stores' rule for giving cells back: each grant
//! holds a slot of GCRA's line, and giving it back frees what is still
//! ahead of now in that slot, at the line's end or as a gap
//! (`src/algorithms/slots.rs`). Others clear (the stores' `reset`) and then
//! refund or settle grants from before and after the clear, on GCRA, the
//! token bucket and the sliding log: a ticket at or below the floor a
//! clear leaves gives nothing back (`QuotaStore::reset`).
//!
//! Expiry is the one thing the fake clock does not reach in Redis: the
//! scripts' `PEXPIRE`s run on the server's real clock, which barely moves
//! during a run, so no key expires mid-script; PostgreSQL rows expire on
//! the fake clock (`expires > micros_now()`). Expiry is meant to drop only
//! state that no longer matters, so both must still agree with Rust.
//!
//! Redis runs when `REDIS_URL` is set, PostgreSQL when `DATABASE_URL` is
//! (`.ci/run` sets both); unset, each prints that it was skipped.
#![cfg(all(feature = "redis", feature = "postgres", feature = "sqlite"))]

mod common;

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tower_limits::clock::Clock;
use tower_limits::error::CostTooHigh;
use tower_limits::limiter::Admission;
use tower_limits::store::{MemoryStore, Quota, SqliteStore};
use tower_limits::{Limiter, Permit, RateLimiter};

type BoxError = Box<dyn Error + Send + Sync>;

/// Steps per script.
const STEPS: usize = 200;

/// Scripts per configuration (each from its own seed): the interactions
/// that matter (a grant settled after others moved the state) need a few
/// hundred steps to show up reliably.
const SCRIPTS: u64 = 8;

/// How many of the latest grants a script keeps to settle or refund.
const HELD: usize = 2;

/// The servers' fake Unix time at step 0, in µs: 2023-11-14T22:13:20Z, a
/// multiple of every window below (checked in [`Config::check`]).
const EPOCH_US: i64 = 1_700_000_000_000_000;

/// A tiny deterministic generator (xorshift64*), so the vectors are the same
/// on every run and machine.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability `percent` / 100.
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Algorithm {
    /// `Quota::gcra(count, period).with_burst(burst)`; `cells.lua`/`.sql`.
    Gcra,
    /// `Quota::token_bucket(burst, count, period)`: capacity `burst`,
    /// `count` tokens per `period`; the same cells script.
    TokenBucket,
    /// `Quota::fixed_window(count, period)`.
    FixedWindow,
    /// `Quota::sliding_window_counter(count, period)`.
    SlidingWindowCounter,
    /// `RateLimiter::builder(name, count, period).without_backoff()`.
    SlidingLog,
}

/// One configuration of one algorithm.
#[derive(Clone, Copy, Debug)]
struct Config {
    name: &'static str,
    algorithm: Algorithm,
    /// Calls per period (GCRA), tokens per period (token bucket), the
    /// window's limit (the others).
    count: u32,
    /// The period or window, whole milliseconds.
    period_ms: u64,
    /// GCRA's burst, the bucket's capacity; unused by the windows.
    burst: u32,
    /// GCRA or the bucket with `Quota::with_pacing_tolerance`.
    paced: bool,
    seed: u64,
}

impl Config {
    /// The most one call may cost: what the crate's callers check a cost
    /// against before asking a store (`Quota::capacity`,
    /// `Quota::capacity`).
    fn capacity(&self) -> u32 {
        match self.algorithm {
            Algorithm::Gcra | Algorithm::TokenBucket => self.burst,
            _ => self.count,
        }
    }

    fn period(&self) -> Duration {
        Duration::from_millis(self.period_ms)
    }

    fn is_cells(&self) -> bool {
        matches!(self.algorithm, Algorithm::Gcra | Algorithm::TokenBucket)
    }

    /// The emission interval as the crate computes it, for the cells
    /// scripts' `interval` argument: the period's nanoseconds over the
    /// count (cells or tokens per period), rounded up.
    fn interval(&self) -> Duration {
        assert!(
            self.is_cells(),
            "only GCRA and the token bucket have an interval"
        );
        let period = u64::try_from(self.period().as_nanos()).unwrap();
        Duration::from_nanos(period.div_ceil(u64::from(self.count)))
    }

    /// How the cells scripts name an acquire (src/store/quota.rs
    /// `cells_op`): `pace` for a paced quota.
    fn acquire(&self) -> &'static str {
        if self.paced { "pace" } else { "acquire" }
    }

    /// The quota the crate's stores are given.
    fn quota(&self) -> Quota {
        let period = self.period();
        let quota = match self.algorithm {
            Algorithm::Gcra => {
                Quota::gcra(self.count, period).and_then(|quota| quota.with_burst(self.burst))
            }
            Algorithm::TokenBucket => Quota::token_bucket(self.burst, self.count, period),
            Algorithm::FixedWindow => Quota::fixed_window(self.count, period),
            Algorithm::SlidingWindowCounter => Quota::sliding_window_counter(self.count, period),
            Algorithm::SlidingLog => Quota::sliding_log(self.count, period),
        };
        let quota = quota.unwrap();
        if self.paced {
            quota.with_pacing_tolerance().unwrap()
        } else {
            quota
        }
    }

    /// The window in whole µs (the crate's `micros`: exact here).
    fn window_us(&self) -> i64 {
        i64::try_from(self.period_ms * 1_000).unwrap()
    }

    /// Whole-millisecond interval and window, and a fake epoch on a window
    /// boundary: what makes the comparison exact.
    fn check(&self) {
        if self.is_cells() {
            let interval = self.interval();
            assert_eq!(
                interval.as_nanos() % 1_000_000,
                0,
                "{}: the interval must be whole milliseconds",
                self.name
            );
        } else {
            assert_eq!(
                EPOCH_US % self.window_us(),
                0,
                "{}: the fake epoch must start a window",
                self.name
            );
        }
    }
}

const CONFIGS: &[Config] = &[
    Config {
        name: "gcra 5 per 1 s, burst 3",
        algorithm: Algorithm::Gcra,
        count: 5,
        period_ms: 1_000,
        burst: 3,
        paced: false,
        seed: 0x9E37_79B9_7F4A_7C15,
    },
    Config {
        name: "gcra 1 per 100 ms, burst 1",
        algorithm: Algorithm::Gcra,
        count: 1,
        period_ms: 100,
        burst: 1,
        paced: false,
        seed: 0xD1B5_4A32_D192_ED03,
    },
    Config {
        name: "gcra 4 per 1 s, burst 6",
        algorithm: Algorithm::Gcra,
        count: 4,
        period_ms: 1_000,
        burst: 6,
        paced: false,
        seed: 0xA076_1D64_78BD_642F,
    },
    Config {
        name: "token bucket of 4, 2 per 1 s",
        algorithm: Algorithm::TokenBucket,
        count: 2,
        period_ms: 1_000,
        burst: 4,
        paced: false,
        seed: 0xE703_7ED1_A0B4_28DB,
    },
    Config {
        name: "gcra 1 per 100 ms, burst 1, paced",
        algorithm: Algorithm::Gcra,
        count: 1,
        period_ms: 100,
        burst: 1,
        paced: true,
        seed: 0x4F1B_BCDC_BFA5_3E0A,
    },
    Config {
        name: "token bucket of 2, 5 per 500 ms, paced",
        algorithm: Algorithm::TokenBucket,
        count: 5,
        period_ms: 500,
        burst: 2,
        paced: true,
        seed: 0x6A09_E667_F3BC_C909,
    },
    Config {
        name: "fixed window 3 per 1 s",
        algorithm: Algorithm::FixedWindow,
        count: 3,
        period_ms: 1_000,
        burst: 0,
        paced: false,
        seed: 0x8EBC_6AF0_9C88_C6E3,
    },
    Config {
        name: "fixed window 5 per 250 ms",
        algorithm: Algorithm::FixedWindow,
        count: 5,
        period_ms: 250,
        burst: 0,
        paced: false,
        seed: 0x5899_65CC_7537_4CC3,
    },
    Config {
        name: "sliding window counter 4 per 1 s",
        algorithm: Algorithm::SlidingWindowCounter,
        count: 4,
        period_ms: 1_000,
        burst: 0,
        paced: false,
        seed: 0x1D8E_4E27_C47D_124F,
    },
    Config {
        name: "sliding window counter 3 per 500 ms",
        algorithm: Algorithm::SlidingWindowCounter,
        count: 3,
        period_ms: 500,
        burst: 0,
        paced: false,
        seed: 0x2545_F491_4F6C_DD1D,
    },
    Config {
        name: "sliding log 3 per 1 s",
        algorithm: Algorithm::SlidingLog,
        count: 3,
        period_ms: 1_000,
        burst: 0,
        paced: false,
        seed: 0x94D0_49BB_1331_11EB,
    },
    Config {
        name: "sliding log 5 per 200 ms",
        algorithm: Algorithm::SlidingLog,
        count: 5,
        period_ms: 200,
        burst: 0,
        paced: false,
        seed: 0xBF58_476D_1CE4_E5B9,
    },
];

/// One operation of a script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// `try_acquire_many(cost)`.
    Acquire(u32),
    /// `peek(cost)`.
    Peek(u32),
    /// `quota_status()`.
    Status,
    /// `record_start()`: one unit whether or not there is room.
    Take,
    /// `set_next_available_time(now + ms)`.
    Pause(u64),
    /// `settle(grant, cost)` of the latest grant still held (0) or the one
    /// before it (1): an older grant's ticket may have gone stale.
    Settle(usize, u32),
    /// `refund(grant)`, of the latest grant still held (0) or the one before.
    Refund(usize),
    /// `clear()`: the store's `reset`. Only directed vectors use it, on
    /// GCRA, the token bucket and the sliding log.
    Clear,
}

#[derive(Clone, Copy, Debug)]
struct Step {
    /// Milliseconds since the start.
    at_ms: u64,
    op: Op,
}

/// What a step answered. Times are µs from the step's instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Granted,
    Denied {
        wait_us: u64,
    },
    /// A cost above the capacity: refused before any store is asked.
    CostTooHigh,
    /// A peek that would be granted.
    Free,
    /// A peek that would be denied.
    Blocked {
        wait_us: u64,
    },
    Status {
        remaining: u64,
        refill_in_us: Option<u64>,
    },
    /// A pause, take, settle or refund: nothing to compare but what later
    /// steps see.
    Done,
    /// A settle or refund with no grant outstanding: nothing was done.
    NoPermit,
}

/// Script number `index` of `config`.
fn script(config: &Config, index: u64) -> Vec<Step> {
    let mut rng = XorShift::new(config.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let capacity = u64::from(config.capacity());
    let mut at_ms = 0;
    (0..STEPS)
        .map(|index| {
            if index > 0 {
                // Mostly gaps within a window (a third of them none), now
                // and then up to three windows, so state also goes stale.
                at_ms += if rng.chance(35) {
                    0
                } else if rng.chance(5) {
                    rng.below(3 * config.period_ms)
                } else {
                    rng.below(config.period_ms)
                };
            }
            // Free calls (cost 0) a little more often than the others.
            let cost = |rng: &mut XorShift| {
                let cost = if rng.chance(10) {
                    0
                } else {
                    rng.below(capacity + 2)
                };
                u32::try_from(cost).unwrap()
            };
            let which = |rng: &mut XorShift| usize::from(rng.chance(30));
            let op = match rng.below(100) {
                0..40 => Op::Acquire(cost(&mut rng)),
                40..52 => Op::Peek(cost(&mut rng)),
                52..60 => Op::Status,
                60..64 => Op::Take,
                64..68 => Op::Pause(rng.below(2 * config.period_ms)),
                68..84 => Op::Settle(which(&mut rng), cost(&mut rng)),
                _ => Op::Refund(which(&mut rng)),
            };
            Step { at_ms, op }
        })
        .collect()
}

/// Nanoseconds to µs, rounded up (see the module's docs).
fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000)).unwrap()
}

fn is_cost_too_high(error: &tower_limits::error::LimiterError) -> bool {
    error.get_ref().downcast_ref::<CostTooHigh>().is_some()
}

/// The Rust reference: the stores' own decisions (the memory store's quota
/// state, which SQLite also runs). GCRA's refunds follow the stores' rule
/// (a grant's slot of the line, given back at the line's end or as a gap).
fn build(config: &Config) -> RateLimiter {
    match config.algorithm {
        Algorithm::Gcra
        | Algorithm::TokenBucket
        | Algorithm::FixedWindow
        | Algorithm::SlidingWindowCounter => {
            RateLimiter::new(MemoryStore::new(), config.name, config.quota())
        }
        Algorithm::SlidingLog => RateLimiter::builder(config.name, config.count, config.period())
            .without_backoff()
            .build()
            .unwrap(),
    }
}

/// The outcomes of the Rust reference on paused time; a window's script
/// starts at a window boundary, as the servers' fake clock does.
async fn expected(config: &Config, steps: &[Step]) -> Vec<Outcome> {
    let limiter = build(config);
    if matches!(
        config.algorithm,
        Algorithm::FixedWindow | Algorithm::SlidingWindowCounter
    ) {
        common::to_window_start(&limiter).await;
    }
    outcomes(config, Arc::new(limiter), steps).await
}

/// The outcomes of `limiter` (configured as `config`) on paused time.
async fn outcomes(config: &Config, limiter: Arc<dyn Limiter>, steps: &[Step]) -> Vec<Outcome> {
    let start = Instant::now();
    // The grants still held, latest first (at most [`HELD`]).
    let mut held: Vec<Permit> = Vec::new();
    let mut outcomes = Vec::with_capacity(steps.len());
    for step in steps {
        let target = start + Duration::from_millis(step.at_ms);
        tokio::time::advance(target.saturating_duration_since(Instant::now())).await;
        let now = Instant::now();
        assert_eq!(now, target, "paused time lands on the step");
        let wait = |at: Option<Instant>| micros(at.expect("a retry instant") - now);
        let outcome = match step.op {
            Op::Acquire(cost) => match limiter.try_acquire_many(cost).await {
                Ok(Admission::Granted(permit)) => {
                    held.insert(0, permit);
                    held.truncate(HELD);
                    Outcome::Granted
                }
                Ok(Admission::Denied(denial)) => Outcome::Denied {
                    wait_us: wait(denial.retry_at()),
                },
                Err(error) if is_cost_too_high(&error) => Outcome::CostTooHigh,
                Err(error) => panic!("{}: acquire failed: {error}", config.name),
            },
            Op::Peek(cost) => match limiter.peek(cost).await {
                Ok(None) => Outcome::Free,
                Ok(Some(denial)) => Outcome::Blocked {
                    wait_us: wait(denial.retry_at()),
                },
                Err(error) if is_cost_too_high(&error) => Outcome::CostTooHigh,
                Err(error) => panic!("{}: peek failed: {error}", config.name),
            },
            Op::Status => {
                let status = limiter.quota_status().await.unwrap().expect("a quota");
                Outcome::Status {
                    remaining: status.remaining(),
                    refill_in_us: status.refill_in().map(micros),
                }
            }
            Op::Take => {
                limiter.record_start().await.unwrap();
                Outcome::Done
            }
            Op::Pause(ms) => {
                let at = now + Duration::from_millis(ms);
                limiter.set_next_available_time(at).await.unwrap();
                Outcome::Done
            }
            Op::Settle(which, cost) => match held.get_mut(which) {
                Some(permit) => {
                    limiter.settle(permit, cost);
                    Outcome::Done
                }
                None => Outcome::NoPermit,
            },
            Op::Refund(which) if which < held.len() => {
                limiter.refund(held.remove(which));
                Outcome::Done
            }
            Op::Refund(_) => Outcome::NoPermit,
            Op::Clear => {
                limiter.clear().await.unwrap();
                Outcome::Done
            }
        };
        // A store limiter may adjust in a task (SQLite's settles and
        // refunds): let it finish before the next step.
        background_done().await;
        outcomes.push(outcome);
    }
    outcomes
}

/// Waits until the tasks a store-backed limiter spawned (a settle or
/// refund it sends on its own) have finished, so the next step sees them.
/// Each turn hands the runtime to those tasks behind a no-op blocking task,
/// which also holds tokio's paused clock still meanwhile.
async fn background_done() {
    let metrics = tokio::runtime::Handle::current().metrics();
    while metrics.num_alive_tasks() > 0 {
        tokio::task::spawn_blocking(|| ()).await.unwrap();
    }
}

/// One call to a store's script or function, in the crate's terms.
#[derive(Clone, Copy, Debug)]
enum Call {
    Acquire(u32),
    Peek(u32),
    Status,
    Take,
    /// µs from now.
    Pause(i64),
    /// The quota scripts' `adjust`, the sliding log's `settle`.
    Adjust {
        ticket: i64,
        from: u32,
        to: u32,
    },
    /// The sliding log's `refund` (the quotas refund with `adjust` to 0).
    Refund {
        ticket: i64,
        cost: u32,
    },
    /// The quota scripts' `reset`, the sliding log's `clear`.
    Clear,
}

/// A store's version of the algorithm, on a fake clock.
trait Backend {
    const NAME: &'static str;

    /// Runs `call` with the clock at `now_us` (µs of Unix time); the reply.
    async fn run(&mut self, now_us: i64, call: Call) -> Result<Vec<i64>, BoxError>;
}

fn reply_at(reply: &[i64], index: usize) -> Result<i64, BoxError> {
    reply
        .get(index)
        .copied()
        .ok_or_else(|| format!("reply {reply:?} has no element {index}").into())
}

fn wait_in(reply: &[i64]) -> Result<u64, BoxError> {
    let wait = reply_at(reply, 1)?;
    Ok(u64::try_from(wait).map_err(|_| format!("a negative wait in {reply:?}"))?)
}

/// Replays `steps` on a store as the crate's callers drive it:
/// `RateLimiter` for the quotas, `RateLimiter` for the sliding log (which
/// checks the cost on acquire only, not on peek).
async fn replay(
    backend: &mut impl Backend,
    config: &Config,
    steps: &[Step],
) -> Result<Vec<Outcome>, BoxError> {
    let capacity = config.capacity();
    let sliding_log = config.algorithm == Algorithm::SlidingLog;
    // The grants still held, latest first: ticket (none once a store
    // could no longer adjust the grant down) and cost, as their permits
    // would hold them.
    let mut held: Vec<(Option<i64>, u32)> = Vec::new();
    let mut outcomes = Vec::with_capacity(steps.len());
    for step in steps {
        let now = EPOCH_US + i64::try_from(step.at_ms * 1_000)?;
        let outcome = match step.op {
            Op::Acquire(cost) if cost > capacity => Outcome::CostTooHigh,
            Op::Acquire(cost) => {
                let reply = backend.run(now, Call::Acquire(cost)).await?;
                match reply_at(&reply, 0)? {
                    1 => {
                        held.insert(0, (Some(reply_at(&reply, 1)?), cost));
                        held.truncate(HELD);
                        Outcome::Granted
                    }
                    0 => Outcome::Denied {
                        wait_us: wait_in(&reply)?,
                    },
                    _ => return Err(format!("acquire answered {reply:?}").into()),
                }
            }
            // What a call of that cost would get: refused, on every quota.
            Op::Peek(cost) if cost > capacity => Outcome::CostTooHigh,
            Op::Peek(cost) => {
                let reply = backend.run(now, Call::Peek(cost)).await?;
                match reply_at(&reply, 0)? {
                    1 => Outcome::Free,
                    0 => Outcome::Blocked {
                        wait_us: wait_in(&reply)?,
                    },
                    _ => return Err(format!("peek answered {reply:?}").into()),
                }
            }
            Op::Status => {
                let reply = backend.run(now, Call::Status).await?;
                let wait = reply_at(&reply, 1)?;
                Outcome::Status {
                    remaining: u64::try_from(reply_at(&reply, 0)?)?,
                    refill_in_us: (wait != -1).then(|| u64::try_from(wait)).transpose()?,
                }
            }
            Op::Take => {
                backend.run(now, Call::Take).await?;
                Outcome::Done
            }
            Op::Pause(ms) => {
                backend
                    .run(now, Call::Pause(i64::try_from(ms * 1_000)?))
                    .await?;
                Outcome::Done
            }
            Op::Settle(which, cost) => match held.get(which).copied() {
                Some((ticket, from)) => {
                    // Both callers clamp to the capacity and skip a settle
                    // that changes nothing (or a permit with no ticket).
                    let to = cost.min(capacity);
                    let mut new_ticket = ticket;
                    if let Some(ticket) = ticket.filter(|_| from != to) {
                        let reply = backend.run(now, Call::Adjust { ticket, from, to }).await?;
                        // A quota's adjust answers the ticket that now
                        // stands for the grant, or [0] when it no longer
                        // can be adjusted down: the permit forgets its own.
                        if !sliding_log {
                            new_ticket = (reply.first() == Some(&1))
                                .then(|| reply_at(&reply, 1))
                                .transpose()?;
                        }
                    }
                    held[which] = (new_ticket, to);
                    Outcome::Done
                }
                None => Outcome::NoPermit,
            },
            Op::Refund(which) => match (which < held.len()).then(|| held.remove(which)) {
                Some((None, _)) => Outcome::Done,
                Some((Some(ticket), cost)) => {
                    let call = if sliding_log {
                        Call::Refund { ticket, cost }
                    } else {
                        Call::Adjust {
                            ticket,
                            from: cost,
                            to: 0,
                        }
                    };
                    backend.run(now, call).await?;
                    Outcome::Done
                }
                None => Outcome::NoPermit,
            },
            Op::Clear => {
                backend.run(now, Call::Clear).await?;
                Outcome::Done
            }
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// The first step where `actual` differs from the vector's expectation,
/// described with the steps before it.
fn first_mismatch(store: &str, vector: &Vector, actual: &[Outcome]) -> Option<String> {
    let Vector {
        config,
        label,
        steps,
        expected,
        ..
    } = vector;
    let index = (0..steps.len()).find(|&i| expected[i] != actual[i])?;
    let context: String = (index.saturating_sub(6)..index)
        .map(|i| {
            format!(
                "\n      step {i:3} t={:6} ms {:?} -> {:?}",
                steps[i].at_ms, steps[i].op, expected[i]
            )
        })
        .collect();
    Some(format!(
        "{store} differs from Rust on {:?} `{}`, {label}, at step {index} \
         (t = {} ms, {:?}):\n    \
         Rust (in memory) expected {:?}\n    {store} answered {:?}\n    \
         the steps before (all agreeing):{context}",
        config.algorithm,
        config.name,
        steps[index].at_ms,
        steps[index].op,
        expected[index],
        actual[index],
    ))
}

// --- Redis -----------------------------------------------------------------

/// Shadows `redis` for the script after it: `TIME` answers the fake clock
/// given as the last ARGV; every other command goes to the real server.
const LUA_FAKE_CLOCK: &str = "\
local real_redis = redis
local fake_now = tonumber(ARGV[#ARGV])
local redis = setmetatable({
  call = function(command, ...)
    if command == 'TIME' then
      return {string.format('%.0f', math.floor(fake_now / 1000000)),
              string.format('%.0f', fake_now % 1000000)}
    end
    return real_redis.call(command, ...)
  end,
}, {__index = real_redis})
";

const STATUS_LUA: &str = include_str!("../../src/store/redis/status.lua");

struct RedisBackend {
    connection: redis::aio::MultiplexedConnection,
    script: redis::Script,
    keys: Vec<String>,
    config: Config,
}

impl RedisBackend {
    fn new(
        connection: redis::aio::MultiplexedConnection,
        config: &Config,
        index: u64,
        prefix: &str,
    ) -> Self {
        let source = match config.algorithm {
            Algorithm::Gcra | Algorithm::TokenBucket => {
                include_str!("../../src/store/redis/cells.lua")
            }
            Algorithm::FixedWindow => include_str!("../../src/store/redis/fixed_window.lua"),
            Algorithm::SlidingWindowCounter => {
                include_str!("../../src/store/redis/sliding_window_counter.lua")
            }
            Algorithm::SlidingLog => include_str!("../../src/store/redis/sliding_log.lua"),
        };
        // As `with_status` in src/store/redis/mod.rs, behind the shim.
        let script = redis::Script::new(&[LUA_FAKE_CLOCK, STATUS_LUA, source].concat());
        let base = format!("{prefix}:{}:{index}", config.name.replace(' ', "_"));
        let keys = if config.algorithm == Algorithm::SlidingLog {
            vec![format!("{base}:log"), format!("{base}:state")]
        } else {
            vec![format!("{base}:quota"), format!("{base}:gaps")]
        };
        Self {
            connection,
            script,
            keys,
            config: *config,
        }
    }

    /// The ARGV the crate passes for `call` (src/store/redis/quota.rs and
    /// sliding_log.rs), without the fake clock.
    fn arguments(&self, call: Call) -> Vec<String> {
        let config = &self.config;
        let (op, extra): (&str, Vec<String>) = match call {
            Call::Acquire(cost) if config.algorithm == Algorithm::SlidingLog => {
                // `RateLimiter` passes its jitter, 0 without a backoff.
                ("acquire", vec![cost.to_string(), 0.0_f64.to_string()])
            }
            Call::Acquire(cost) => (config.acquire(), vec![cost.to_string()]),
            Call::Peek(cost) => ("peek", vec![cost.to_string()]),
            Call::Status => ("status", vec![]),
            Call::Take if config.algorithm == Algorithm::SlidingLog => {
                ("record", vec![0.0_f64.to_string()])
            }
            Call::Take => ("take", vec![]),
            Call::Pause(us) => ("pause", vec![us.to_string()]),
            Call::Adjust { ticket, from, to } => {
                let op = if config.algorithm == Algorithm::SlidingLog {
                    "settle"
                } else {
                    "adjust"
                };
                let extra = vec![ticket.to_string(), from.to_string(), to.to_string()];
                (op, extra)
            }
            Call::Refund { ticket, cost } => ("refund", vec![ticket.to_string(), cost.to_string()]),
            Call::Clear if config.algorithm == Algorithm::SlidingLog => ("clear", vec![]),
            Call::Clear => ("reset", vec![]),
        };
        let mut arguments = vec![op.to_owned()];
        match config.algorithm {
            Algorithm::Gcra | Algorithm::TokenBucket => {
                let micros = config.interval().as_secs_f64() * 1e6;
                arguments.extend([micros.to_string(), config.burst.to_string()]);
            }
            Algorithm::FixedWindow | Algorithm::SlidingWindowCounter => {
                arguments.extend([config.count.to_string(), config.window_us().to_string()]);
            }
            Algorithm::SlidingLog => {
                // `policy_args`: the pause goes without a policy (zeros);
                // no backoff is `0, 1, 0`.
                let (max, window) = match call {
                    Call::Pause(_) => (0, 0),
                    _ => (config.count, config.window_us()),
                };
                let policy: [&dyn fmt::Display; 5] = [&max, &window, &0, &1.0_f64, &0];
                arguments.extend(policy.iter().map(ToString::to_string));
            }
        }
        arguments.extend(extra);
        arguments
    }

    async fn delete_keys(&mut self) -> Result<(), BoxError> {
        redis::cmd("DEL")
            .arg(&self.keys)
            .query_async::<i64>(&mut self.connection)
            .await?;
        Ok(())
    }
}

impl Backend for RedisBackend {
    const NAME: &'static str = "Redis (Lua)";

    async fn run(&mut self, now_us: i64, call: Call) -> Result<Vec<i64>, BoxError> {
        let mut invocation = self.script.prepare_invoke();
        for key in &self.keys {
            invocation.key(key);
        }
        for argument in self.arguments(call) {
            invocation.arg(argument);
        }
        invocation.arg(now_us);
        Ok(invocation.invoke_async(&mut self.connection).await?)
    }
}

// --- PostgreSQL ------------------------------------------------------------

/// The schema's SQL in the order src/store/postgres/mod.rs runs it, but for
/// `cleanup.sql`, which no vector calls (the store fills in its table list).
const SCHEMA_SQL: &[&str] = &[
    include_str!("../../src/store/postgres/common.sql"),
    include_str!("../../src/store/postgres/sliding_log.sql"),
    include_str!("../../src/store/postgres/cells.sql"),
    include_str!("../../src/store/postgres/fixed_window.sql"),
    include_str!("../../src/store/postgres/sliding_window_counter.sql"),
    include_str!("../../src/store/postgres/leases.sql"),
    include_str!("../../src/store/postgres/curve.sql"),
];

/// A private schema with the crate's functions on a fake clock.
struct PgSchema {
    client: tokio_postgres::Client,
    /// Quoted, as the crate quotes it.
    schema: String,
}

impl PgSchema {
    async fn create(url: &str, name: &str) -> Result<Self, BoxError> {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                eprintln!("golden vectors: the PostgreSQL connection ended: {error}");
            }
        });
        let schema = format!("\"{}\"", name.replace('"', "\"\""));
        let literal = format!("'{}'", schema.replace('\'', "''"));
        let sql = SCHEMA_SQL
            .iter()
            .map(|part| {
                part.replace("__SCHEMA_LITERAL__", &literal)
                    .replace("__SCHEMA__", &schema)
            })
            .collect::<Vec<_>>()
            .join("\n");
        let this = Self { client, schema };
        let created = async {
            this.client.batch_execute(&sql).await?;
            // The fake clock: one row, read by the functions' only clock.
            this.client
                .batch_execute(&format!(
                    "CREATE TABLE {s}.fake_clock (t bigint NOT NULL);
                     INSERT INTO {s}.fake_clock VALUES ({EPOCH_US});
                     CREATE OR REPLACE FUNCTION {s}.micros_now() RETURNS bigint
                     LANGUAGE sql VOLATILE AS $$ SELECT t FROM {s}.fake_clock $$;",
                    s = this.schema
                ))
                .await?;
            Ok::<_, BoxError>(())
        };
        match created.await {
            Ok(()) => Ok(this),
            Err(error) => {
                this.drop_schema().await;
                Err(error)
            }
        }
    }

    async fn drop_schema(&self) {
        let dropping = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema);
        if let Err(error) = self.client.batch_execute(&dropping).await {
            eprintln!("golden vectors: could not drop {}: {error}", self.schema);
        }
    }
}

struct PgBackend<'a> {
    schema: &'a PgSchema,
    statement: tokio_postgres::Statement,
    set_clock: tokio_postgres::Statement,
    key: String,
    config: Config,
}

impl<'a> PgBackend<'a> {
    async fn new(schema: &'a PgSchema, config: &Config, index: u64) -> Result<Self, BoxError> {
        let s = &schema.schema;
        // As `Statements::new` in src/store/postgres/mod.rs.
        let call = match config.algorithm {
            Algorithm::Gcra | Algorithm::TokenBucket => {
                format!("SELECT {s}.cells($1, $2, $3, $4, $5)")
            }
            Algorithm::FixedWindow => format!("SELECT {s}.fixed_window($1, $2, $3, $4, $5)"),
            Algorithm::SlidingWindowCounter => {
                format!("SELECT {s}.sliding_window_counter($1, $2, $3, $4, $5)")
            }
            Algorithm::SlidingLog => {
                format!("SELECT {s}.sliding_log($1, $2, $3, $4, $5, $6, $7, $8, $9)")
            }
        };
        let statement = schema.client.prepare(&call).await?;
        let set_clock = schema
            .client
            .prepare(&format!("UPDATE {s}.fake_clock SET t = $1"))
            .await?;
        Ok(Self {
            schema,
            statement,
            set_clock,
            key: format!("golden:{}:{index}", config.name),
            config: *config,
        })
    }
}

impl Backend for PgBackend<'_> {
    const NAME: &'static str = "PostgreSQL (PL/pgSQL)";

    async fn run(&mut self, now_us: i64, call: Call) -> Result<Vec<i64>, BoxError> {
        let client = &self.schema.client;
        client.execute(&self.set_clock, &[&now_us]).await?;
        let config = &self.config;
        let sliding_log = config.algorithm == Algorithm::SlidingLog;
        // The crate's arguments (src/store/postgres/quota.rs, sliding_log.rs).
        let (op, args): (&str, Vec<i64>) = match call {
            Call::Acquire(cost) => (config.acquire(), vec![i64::from(cost)]),
            Call::Peek(cost) => ("peek", vec![i64::from(cost)]),
            Call::Status => ("status", vec![]),
            Call::Take if sliding_log => ("record", vec![]),
            Call::Take => ("take", vec![]),
            Call::Pause(us) => ("pause", vec![us]),
            Call::Adjust { ticket, from, to } => (
                if sliding_log { "settle" } else { "adjust" },
                vec![ticket, i64::from(from), i64::from(to)],
            ),
            Call::Refund { ticket, cost } => ("refund", vec![ticket, i64::from(cost)]),
            Call::Clear if sliding_log => ("clear", vec![]),
            Call::Clear => ("reset", vec![]),
        };
        let row = match config.algorithm {
            Algorithm::Gcra | Algorithm::TokenBucket => {
                let tick = config.interval().as_secs_f64() * 1e6;
                let burst = i64::from(config.burst);
                client
                    .query_one(&self.statement, &[&op, &self.key, &tick, &burst, &args])
                    .await?
            }
            Algorithm::FixedWindow | Algorithm::SlidingWindowCounter => {
                let (max, window) = (i64::from(config.count), config.window_us());
                client
                    .query_one(&self.statement, &[&op, &self.key, &max, &window, &args])
                    .await?
            }
            Algorithm::SlidingLog => {
                // `policy_args`: zeros without a policy (the pause), no
                // backoff is `0, 1, 0`; the jitter is 0 without a backoff.
                let (max, window) = match call {
                    Call::Pause(_) => (0, 0),
                    _ => (i64::from(config.count), config.window_us()),
                };
                let (initial, multiplier, cap, jitter) = (0_i64, 1.0_f64, 0_i64, 0.0_f64);
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 9] = [
                    &op,
                    &self.key,
                    &max,
                    &window,
                    &initial,
                    &multiplier,
                    &cap,
                    &jitter,
                    &args,
                ];
                client.query_one(&self.statement, &params).await?
            }
        };
        Ok(row.try_get::<_, Vec<i64>>(0)?)
    }
}

// --- The tests -------------------------------------------------------------

/// One script of one configuration, and what the Rust reference (in
/// memory) answered to each of its steps.
struct Vector {
    config: Config,
    /// Which script of the configuration (its keys' suffix).
    index: u64,
    /// "script N", or what a directed vector tests.
    label: String,
    steps: Vec<Step>,
    expected: Vec<Outcome>,
}

/// The vectors of `algorithms`.
fn vectors(algorithms: &[Algorithm]) -> Vec<Vector> {
    let runtime = common::paused_runtime();
    let configs = CONFIGS
        .iter()
        .filter(|config| algorithms.contains(&config.algorithm));
    configs
        .flat_map(|config| {
            config.check();
            (0..SCRIPTS).map(|index| (*config, index))
        })
        .map(|(config, index)| {
            let steps = script(&config, index);
            let expected = runtime.block_on(expected(&config, &steps));
            Vector {
                config,
                index,
                label: format!("script {index}"),
                steps,
                expected,
            }
        })
        .collect()
}

/// Replays the random vectors of `algorithms` on the stores.
fn check_stores(what: &str, algorithms: &[Algorithm]) {
    let started = std::time::Instant::now();
    check_vectors(what, &vectors(algorithms), started);
}

/// The limiter of `config` on `store`: what SQLite decides with.
fn on_sqlite(config: &Config, store: SqliteStore) -> Arc<dyn Limiter> {
    Arc::new(RateLimiter::new(store, config.name, config.quota()))
}

/// Replays `vectors` on SQLite, on a file of its own per vector whose
/// store reads tokio's paused clock (from the clock's epoch, opened at step
/// 0, so its windows start there, as the reference's): the differences,
/// and how many steps were compared.
fn replay_on_sqlite(vectors: &[Vector]) -> (Vec<String>, usize) {
    let runtime = common::paused_runtime();
    let files = tempfile::tempdir().unwrap();
    let mut mismatches = Vec::new();
    let mut compared = 0;
    // GCRA through SQLite is left out: its settles run in a task, so a
    // permit settled once keeps its old ticket and a later refund of it is
    // refused (the stricter side, documented on `RateLimiter::settle`),
    // where the reference answers at once. Its decisions are the
    // reference's own code (`QuotaState`).
    let replayed = vectors.iter().filter(|vector| !vector.config.is_cells());
    for (number, vector) in replayed.enumerate() {
        let config = &vector.config;
        let actual = runtime.block_on(async {
            let store = SqliteStore::builder(files.path().join(format!("{number}.db")))
                .clock(Clock::tokio())
                .open()
                .await
                .unwrap();
            outcomes(config, on_sqlite(config, store), &vector.steps).await
        });
        compared += actual.len();
        mismatches.extend(first_mismatch("SQLite", vector, &actual));
    }
    (mismatches, compared)
}

/// Replays `vectors` on SQLite, and on Redis and PostgreSQL (those whose
/// URL is set), and fails naming the first differing step of each.
fn check_vectors(what: &str, vectors: &[Vector], started: std::time::Instant) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (mut mismatches, mut compared) = replay_on_sqlite(vectors);
    runtime.block_on(async {
        if let Some(url) = common::redis::url(&format!("golden vectors of {what} on Redis")) {
            let client = redis::Client::open(url.as_str()).unwrap();
            // No response timeout (redis-rs waits 500 ms by default): the
            // vectors check answers, not how fast a busy machine gives them.
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
            let connection = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .unwrap_or_else(|error| panic!("REDIS_URL={url} is set but unreachable: {error}"));
            let prefix = common::conformance::unique("golden-vectors");
            for vector in vectors {
                let (config, index) = (&vector.config, vector.index);
                let mut backend = RedisBackend::new(connection.clone(), config, index, &prefix);
                let actual = replay(&mut backend, config, &vector.steps).await;
                let deleted = backend.delete_keys().await;
                let actual = actual.unwrap_or_else(|error| {
                    panic!(
                        "Redis failed on `{}`, {}: {error}",
                        config.name, vector.label
                    )
                });
                deleted.unwrap();
                compared += actual.len();
                mismatches.extend(first_mismatch(RedisBackend::NAME, vector, &actual));
            }
        }
        if let Some(url) = common::postgres::url(&format!("golden vectors of {what} on PostgreSQL"))
        {
            let name = format!(
                "golden_{}_{}",
                std::process::id(),
                what.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
            );
            let schema = PgSchema::create(&url, &name).await.unwrap_or_else(|error| {
                panic!("DATABASE_URL={url}: could not create the schema {name}: {error}")
            });
            let mut failure = None;
            for vector in vectors {
                let (config, index) = (&vector.config, vector.index);
                let actual = match PgBackend::new(&schema, config, index).await {
                    Ok(mut backend) => replay(&mut backend, config, &vector.steps).await,
                    Err(error) => Err(error),
                };
                match actual {
                    Ok(actual) => {
                        compared += actual.len();
                        mismatches.extend(first_mismatch(PgBackend::NAME, vector, &actual));
                    }
                    Err(error) => {
                        let name = config.name;
                        failure = Some(format!(
                            "PostgreSQL failed on `{name}`, {}: {error}",
                            vector.label
                        ));
                        break;
                    }
                }
            }
            schema.drop_schema().await;
            if let Some(failure) = failure {
                panic!("{failure}");
            }
        }
    });
    eprintln!(
        "golden vectors of {what}: {} scripts, {} steps, {compared} store steps compared with \
         Rust in {:?}",
        vectors.len(),
        vectors
            .iter()
            .map(|vector| vector.steps.len())
            .sum::<usize>(),
        started.elapsed()
    );
    assert!(
        mismatches.is_empty(),
        "{} script(s) of {what} differ:\n\n{}",
        mismatches.len(),
        mismatches.join("\n\n")
    );
}

#[test]
fn gcra_and_token_bucket_match_cells_lua_and_sql() {
    check_stores("gcra", &[Algorithm::Gcra, Algorithm::TokenBucket]);
}

#[test]
fn fixed_window_matches_lua_and_sql() {
    check_stores("fixed window", &[Algorithm::FixedWindow]);
}

#[test]
fn sliding_window_counter_matches_lua_and_sql() {
    check_stores("sliding window counter", &[Algorithm::SlidingWindowCounter]);
}

#[test]
fn sliding_log_matches_lua_and_sql() {
    check_stores("sliding log", &[Algorithm::SlidingLog]);
}

/// The vectors themselves: deterministic, and exercising every outcome
/// (a test that compared nothing interesting would pass for nothing).
#[test]
fn the_vectors_cover_every_outcome() {
    let vectors = vectors(&[
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindowCounter,
        Algorithm::SlidingLog,
    ]);
    for vector in &vectors {
        let (config, steps, outcomes) = (&vector.config, &vector.steps, &vector.expected);
        assert_eq!(steps.len(), STEPS);
        let again = script(config, vector.index);
        assert!(
            steps
                .iter()
                .zip(&again)
                .all(|(a, b)| a.at_ms == b.at_ms && a.op == b.op),
            "{}: the script is not deterministic",
            config.name
        );
        let has = |f: fn(&Outcome) -> bool| outcomes.iter().any(f);
        assert!(has(|o| *o == Outcome::Granted), "{}: no grant", config.name);
        assert!(
            has(|o| matches!(o, Outcome::Denied { wait_us } if *wait_us > 0)),
            "{}: no denial",
            config.name
        );
        assert!(
            has(|o| *o == Outcome::CostTooHigh),
            "{}: no cost too high",
            config.name
        );
        assert!(
            has(|o| matches!(o, Outcome::Blocked { .. })),
            "{}: no blocked peek",
            config.name
        );
        assert!(
            has(|o| *o == Outcome::Free),
            "{}: no free peek",
            config.name
        );
        assert!(
            has(|o| matches!(
                o,
                Outcome::Status {
                    refill_in_us: Some(_),
                    ..
                }
            )),
            "{}: no status with a refill",
            config.name
        );
    }
}

/// A directed vector: `steps` on `config`, named `label`.
fn directed(config: &Config, index: u64, label: &str, steps: &[(u64, Op)]) -> Vector {
    let steps: Vec<Step> = steps
        .iter()
        .map(|&(at_ms, op)| Step { at_ms, op })
        .collect();
    let expected = common::paused_runtime().block_on(expected(config, &steps));
    Vector {
        config: *config,
        index,
        label: format!("directed: {label}"),
        steps,
        expected,
    }
}

/// Sequences the random scripts reach only now and then: on GCRA, a grant
/// settled or refunded after later calls changed the state, and, on a
/// paced quota, grants made a few milliseconds after the line ended (the
/// pacing tolerance). Each grant
/// holds a slot of GCRA's line; giving it back frees the slot's time still
/// ahead, at the line's end or as a gap the next grant takes
/// (`src/algorithms/slots.rs`).
#[test]
fn gcra_settles_after_later_grants_match_cells_lua_and_sql() {
    use Op::{Acquire, Peek, Refund, Settle, Status};
    let started = std::time::Instant::now();
    let fast = &CONFIGS[0]; // 5 per 1 s, burst 3: a cell is 200 ms, a burst 600 ms.
    let long = &CONFIGS[2]; // 4 per 1 s, burst 6: a cell is 250 ms, a burst 1.5 s.
    let pacing = &CONFIGS[4]; // 1 per 100 ms, burst 1, paced.
    assert_eq!(
        (pacing.count, pacing.period_ms, pacing.burst, pacing.paced),
        (1, 100, 1, true)
    );
    assert_eq!(
        (fast.count, fast.burst, long.count, long.burst),
        (5, 3, 4, 6)
    );
    let vectors = [
        // A later grant of cost 0 takes no slot: the first grant can still
        // be refunded.
        directed(
            fast,
            1_000,
            "refund after a grant of cost 0",
            &[
                (0, Acquire(2)),
                (10, Acquire(0)),
                (20, Refund(1)),
                (30, Status),
                (30, Acquire(3)),
            ],
        ),
        // The same for a settle down.
        directed(
            fast,
            1_001,
            "settle down after a grant of cost 0",
            &[
                (0, Acquire(3)),
                (50, Acquire(0)),
                (60, Settle(1, 1)),
                (70, Status),
                (70, Acquire(2)),
            ],
        ),
        // Refunds in the reverse order of their grants: each frees the
        // line's end.
        directed(
            fast,
            1_002,
            "refund after a later grant was refunded",
            &[
                (0, Acquire(1)),
                (10, Acquire(1)),
                (20, Refund(0)),
                (20, Refund(0)),
                (30, Status),
            ],
        ),
        // A refund of a grant made before the state expired: its slot has
        // passed, and it must not take back the time of a grant made after.
        // Only PostgreSQL, whose rows expire on the fake clock, shows expiry.
        directed(
            fast,
            1_003,
            "refund of a grant from before an expiry",
            &[
                (0, Acquire(1)),
                (5_000, Acquire(3)),
                (5_000, Refund(1)),
                (5_000, Status),
            ],
        ),
        // A late settle up charges on top of the line's end, which can
        // bring it back ahead of now even a second after it passed: the
        // state must not have expired (the scripts kept it one second past
        // the TAT, less than this burst). PostgreSQL only, as above.
        directed(
            long,
            1_004,
            "late settle up after the TAT passed",
            &[
                (0, Acquire(1)),
                (1_300, Settle(0, 6)),
                (1_300, Status),
                (1_300, Acquire(6)),
            ],
        ),
        // A grant refunded while a later one holds the line's end: a gap,
        // counted free, which the next grant takes (and the one after it
        // then extends the line).
        directed(
            long,
            1_005,
            "a refund inside the line leaves a gap the next grant takes",
            &[
                (0, Acquire(2)),
                (0, Acquire(2)),
                (10, Refund(1)),
                (10, Status),
                (20, Peek(5)),
                (20, Acquire(2)),
                (20, Status),
                (30, Acquire(1)),
                (30, Status),
                (40, Acquire(2)),
            ],
        ),
        // A gap partly passed by the time the next grant comes: only what
        // is ahead counts, and a grant too big for it extends the line.
        directed(
            long,
            1_006,
            "a gap passes while no grant takes it",
            &[
                (0, Acquire(3)),
                (0, Acquire(3)),
                (100, Refund(1)),
                (400, Status),
                (400, Acquire(3)),
                (400, Status),
                (900, Acquire(2)),
                (900, Status),
            ],
        ),
        // Gaps that touch join, and a refund at the line's end takes back
        // the gaps before it.
        directed(
            long,
            1_007,
            "gaps join and fold into the line's end",
            &[
                (0, Acquire(1)),
                (0, Acquire(1)),
                (0, Acquire(1)),
                (0, Acquire(1)),
                (10, Refund(1)),
                (10, Acquire(1)),
                (20, Refund(1)),
                (20, Status),
                (30, Refund(0)),
                (30, Status),
                (40, Acquire(6)),
            ],
        ),
        // A settle down frees the end of the grant's slot; refunding the
        // rest later frees the remainder, even after later grants.
        directed(
            long,
            1_008,
            "settle down, a later grant, then a refund of the rest",
            &[
                (0, Acquire(4)),
                (10, Settle(0, 2)),
                (10, Acquire(1)),
                (20, Refund(1)),
                (20, Status),
                (30, Acquire(5)),
            ],
        ),
        // Grants a waiter woke late for keep their place on a paced line,
        // up to the pacing tolerance (2 ms), if the line ended at most
        // 10 ms ago (`src/clock.rs` `paced_from`): 1, 3 and 2 ms late, then
        // 11 ms late (counts from now), then on time.
        directed(
            pacing,
            1_009,
            "late grants within the pacing tolerance",
            &[
                (0, Acquire(1)),
                (101, Acquire(1)),
                (203, Status),
                (203, Acquire(1)),
                (303, Peek(1)),
                (303, Acquire(1)),
                (412, Acquire(1)),
                (512, Acquire(1)),
                (611, Acquire(1)),
                (711, Status),
            ],
        ),
    ];
    check_vectors("gcra settles", &vectors, started);
}

/// A clear (the stores' `reset`) against the tickets of grants made before
/// it: a refund or a settle down of such a grant gives nothing back, a
/// settle up still charges; a grant made after it is given back once its
/// ticket is past what the clear refuses (a GCRA slot ending after the old
/// line's end, a start after the clear's instant), and not before.
#[test]
fn clear_refuses_earlier_tickets_in_cells_and_log_lua_and_sql() {
    use Op::{Acquire, Clear, Peek, Refund, Settle, Status};
    let started = std::time::Instant::now();
    let fast = &CONFIGS[0]; // 5 per 1 s, burst 3: a cell is 200 ms, a burst 600 ms.
    let bucket = &CONFIGS[3]; // 4 tokens, 2 per 1 s: a token is 500 ms.
    let pacing = &CONFIGS[4]; // 1 per 100 ms, burst 1, paced.
    let log = &CONFIGS[10]; // 3 per 1 s.
    assert_eq!((fast.count, fast.burst), (5, 3));
    assert_eq!(
        (bucket.algorithm, bucket.burst, bucket.count),
        (Algorithm::TokenBucket, 4, 2)
    );
    assert_eq!(
        (pacing.count, pacing.period_ms, pacing.paced),
        (1, 100, true)
    );
    assert_eq!(
        (log.algorithm, log.count, log.period_ms),
        (Algorithm::SlidingLog, 3, 1_000)
    );
    let vectors = [
        // `a_permit_from_before_clear_gives_nothing_back`: 4 at once, never
        // more.
        directed(
            bucket,
            2_000,
            "a refund from before a clear at the same instant",
            &[
                (0, Acquire(2)),
                (0, Clear),
                (0, Acquire(3)),
                (0, Refund(1)),
                (0, Status),
                (0, Acquire(1)),
                (0, Acquire(1)),
            ],
        ),
        directed(
            fast,
            2_001,
            "a settle down from before a clear",
            &[
                (0, Acquire(2)),
                (100, Clear),
                (100, Acquire(1)),
                (150, Settle(1, 1)),
                (150, Status),
                (150, Acquire(3)),
                (200, Peek(2)),
            ],
        ),
        directed(
            fast,
            2_002,
            "a settle up from before a clear is charged",
            &[
                (0, Acquire(2)),
                (100, Clear),
                (100, Acquire(1)),
                (150, Settle(1, 3)),
                (150, Status),
                (150, Acquire(2)),
                (200, Settle(1, 1)),
                (200, Status),
            ],
        ),
        // The grant after the clear ends its slot past the old line's end
        // (600 ms): it comes back. One ending before it does not.
        directed(
            fast,
            2_003,
            "grants after a clear, past the old line's end and not",
            &[
                (0, Acquire(3)),
                (100, Clear),
                (100, Acquire(3)),
                (150, Refund(0)),
                (150, Status),
                (200, Clear),
                (200, Acquire(1)),
                (250, Refund(0)),
                (250, Status),
            ],
        ),
        // A paced line emptied by a clear does not pace from its old end.
        directed(
            pacing,
            2_004,
            "a paced grant after a clear",
            &[
                (0, Acquire(1)),
                (101, Clear),
                (102, Acquire(1)),
                (102, Refund(1)),
                (102, Status),
                (203, Acquire(1)),
            ],
        ),
        // Starts at the clear's instant, from before it and after, cannot be
        // told apart: neither gives anything back; later ones do.
        directed(
            log,
            2_005,
            "sliding log: starts at the clear's instant",
            &[
                (0, Acquire(2)),
                (0, Clear),
                (0, Acquire(3)),
                (0, Refund(1)),
                (0, Status),
                (0, Acquire(1)),
                (500, Settle(0, 1)),
                (500, Status),
                (1_000, Acquire(3)),
                (1_000, Refund(0)),
                (1_000, Status),
            ],
        ),
        directed(
            log,
            2_006,
            "sliding log: a start before the clear, one after",
            &[
                (0, Acquire(3)),
                (100, Clear),
                (200, Acquire(3)),
                (300, Refund(1)),
                (300, Status),
                (300, Settle(0, 1)),
                (300, Status),
                (400, Settle(0, 3)),
                (400, Status),
            ],
        ),
        directed(
            log,
            2_007,
            "sliding log: a settle down from before the clear, then up",
            &[
                (0, Acquire(2)),
                (100, Clear),
                (200, Acquire(3)),
                (300, Settle(1, 1)),
                (300, Status),
                (300, Settle(1, 3)),
                (300, Refund(0)),
                (300, Status),
                (1_100, Status),
            ],
        ),
    ];
    // What the reference answers (vector, step, units remaining): nothing
    // from before a clear comes back, and a settle up of it is charged.
    let statuses = [
        (0, 4, 1), // 4 at once in a bucket of 4
        (1, 4, 2), // the settle down gave nothing back
        (2, 4, 1), // the settle up charged a cell
        (3, 4, 3), // a grant ending past the old line's end came back
        (3, 8, 2), // one ending inside it did not
        (5, 4, 0), // nothing back at the clear's instant
        (6, 4, 0),
        (6, 6, 2), // a start after the clear came back
        (7, 4, 0),
        (7, 7, 1), // 2 starts charged at 0 ms
        (7, 8, 3),
    ];
    for (vector, step, expected) in statuses {
        let Vector {
            label,
            expected: outcomes,
            ..
        } = &vectors[vector];
        match outcomes[step] {
            Outcome::Status { remaining, .. } => assert_eq!(remaining, expected, "{label}"),
            other => panic!("{label}: step {step} is {other:?}"),
        }
    }
    check_vectors("clears", &vectors, started);
}
