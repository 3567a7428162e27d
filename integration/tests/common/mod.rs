//! Helpers shared by the integration tests.
//!
//! * here: short durations, a paused current-thread runtime, and the start
//!   of a store's window found on paused time ([`to_window_start`]);
//! * [`cases`]: every limiter as the whole-crate tests build it, with the
//!   bounds its grants keep;
//! * [`recorder`]: a recording inner service and the callers that drive a
//!   limited stack in front of it;
//! * [`precision`]: counting admissions at high rates on paused time, within
//!   a tenth of a percent;
//! * [`processes`]: several OS processes sharing one limit through a store;
//! * [`sqlite`]: a SQLite store in a temporary file;
//! * [`stress`]: 1,000 concurrent callers on a multi-thread runtime, and the
//!   check that no window holds more grants than the limit.
//! * [`tickets`]: checks on admissions stamped by a store's clock (sliding
//!   log start times, fixed window indexes).
//! * [`upstreams`]: rate-limited upstreams of every kind on loopback, and
//!   [`drive`]: an adaptive client against them, measured by what they saw.

// Each test binary compiles this module on its own and uses only part of it
// (`rate` only the durations, `layer_order` never asks for the call order or
// the overlap count, nor `layer` for a longer first call), so what one binary
// leaves unused is not dead code.
#![allow(dead_code)]

pub(crate) mod cases;
pub(crate) mod conformance;
#[cfg(feature = "http")]
pub(crate) mod drive;
pub(crate) mod nginx;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod precision;
pub(crate) mod processes;
pub(crate) mod recorder;
#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
pub(crate) mod stress;
pub(crate) mod tickets;
#[cfg(feature = "http")]
pub(crate) mod upstreams;

use std::io::Write;
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower_limits::limiter::Admission;
use tower_limits::limiters::FreshLimiter;
use tower_limits::store::Quota;
use tower_limits::{Limiter, RateLimiter};

/// Says on stdout that the test `what` did not run, and why. The line goes
/// past the harness's capture (which hides what a passing test prints), so
/// whoever reads `cargo test`'s output sees every test that was skipped;
/// the test then returns and counts as passed. The README's test command
/// (`scripts/test`) starts what the tests need, counts these lines, and
/// fails if there are any.
pub(crate) fn skip(what: &str, why: &str) {
    // The harness names each test's thread after the test.
    let thread = std::thread::current();
    let test = thread.name().filter(|name| *name != "main").unwrap_or(what);
    let _ = writeln!(std::io::stdout().lock(), "SKIPPED {test} ({what}): {why}");
}

pub(crate) fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

pub(crate) fn secs(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

/// A current-thread runtime on paused time, for tests that cannot be
/// `#[tokio::test(start_paused = true)]` (a proptest case, say).
pub(crate) fn paused_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// The next start of a window of `limiter` (a fixed window or a sliding
/// window counter quota), strictly after now.
///
/// A store puts its window boundaries on multiples of the window in Unix
/// time, placed once when the store is made (every key of the store, a
/// [`fresh`](FreshLimiter::fresh) one included, shares them), so a test
/// cannot tell from `Instant::now()` where a window starts. A probe finds
/// out: a fresh key on the same store, under a fixed window of the same
/// length (a full sliding window counter opens again only once the last
/// window weighs less, after the boundary), takes the whole capacity; it
/// can proceed again at the next boundary.
pub(crate) async fn next_window_start(limiter: &RateLimiter) -> Instant {
    let quota = limiter.quota();
    let (capacity, window) = (quota.capacity(), quota.window());
    let fixed = Quota::fixed_window(capacity, window).unwrap();
    let counter = Quota::sliding_window_counter(capacity, window).unwrap();
    assert!(
        quota == fixed || quota == counter,
        "not a window quota: {quota:?}"
    );
    let probe = limiter.fresh();
    probe.set_quota(fixed);
    let answer = probe.try_acquire_many(capacity).await.unwrap();
    assert!(
        matches!(answer, Admission::Granted(_)),
        "a fresh probe takes the whole window"
    );
    probe.next_available_time().await.unwrap()
}

/// Advances tokio's paused clock to the next start of a window of
/// `limiter` ([`next_window_start`]), and returns it: a test that asserts
/// exact instants of a window quota counts them from there.
pub(crate) async fn to_window_start(limiter: &RateLimiter) -> Instant {
    let start = next_window_start(limiter).await;
    tokio::time::advance(start.saturating_duration_since(Instant::now())).await;
    assert_eq!(Instant::now(), start, "paused time is at the window start");
    start
}
