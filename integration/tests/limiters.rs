//! The seed's limiters, one behaviour per test, on paused tokio time.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::ms;
use tokio::time::{Instant, advance};
use tower_limits::error::{ConfigError, LimiterError};
use tower_limits::limiter::{Admission, Denial, LimiterFuture};
use tower_limits::store::MemoryStore;
use tower_limits::{
    CompositeLimiter, ConcurrencyLimiter, DelayLimiter, EvenlySpacedRateLimiter, Limiter,
    LimiterExt, NullLimiter, Permit, RateLimiter,
};

// ---------------------------------------------------------------- helpers

async fn grant(limiter: &impl Limiter) -> Permit {
    match limiter
        .try_acquire()
        .await
        .expect("in-memory limiters do not fail")
    {
        Admission::Granted(permit) => permit,
        Admission::Denied(denial) => panic!("expected a grant, got {denial:?}"),
    }
}

async fn deny(limiter: &impl Limiter) -> Denial {
    match limiter
        .try_acquire()
        .await
        .expect("in-memory limiters do not fail")
    {
        Admission::Granted(permit) => panic!("expected a denial, got {permit:?}"),
        Admission::Denied(denial) => denial,
    }
}

async fn can_proceed(limiter: &impl Limiter) -> bool {
    limiter
        .can_proceed()
        .await
        .expect("in-memory limiters do not fail")
}

async fn next_available(limiter: &impl Limiter) -> Instant {
    limiter
        .next_available_time()
        .await
        .expect("in-memory limiters do not fail")
}

/// A rate limiter without backoff: a plain sliding window.
fn plain_window(max: u32, window: Duration) -> RateLimiter {
    RateLimiter::builder("plain", max, window)
        .without_backoff()
        .build()
        .expect("valid configuration")
}

fn backoff_window(
    max: u32,
    window: Duration,
    initial: Duration,
    multiplier: f64,
    cap: Duration,
) -> RateLimiter {
    RateLimiter::builder("backoff", max, window)
        .initial_backoff(initial)
        .backoff_multiplier(multiplier)
        .max_backoff(cap)
        .build()
        .expect("valid configuration")
}

/// `max` starts per 10 s (nothing leaves the window during a test), once
/// as a plain window and once with backoff.
fn plain_and_backoff_windows(max: u32) -> [RateLimiter; 2] {
    let window = Duration::from_secs(10);
    [
        plain_window(max, window),
        backoff_window(max, window, ms(100), 2.0, ms(1000)),
    ]
}

/// Acquires `n` times in a row, holding each permit for `hold`; returns
/// the start instants.
async fn sequential_starts(limiter: &impl Limiter, n: usize, hold: Duration) -> Vec<Instant> {
    let mut starts = Vec::with_capacity(n);
    for _ in 0..n {
        let permit = limiter.acquire().await.expect("in-memory");
        starts.push(Instant::now());
        tokio::time::sleep(hold).await;
        drop(permit);
    }
    starts
}

/// Offsets of `instants` from `origin`, for readable assertions.
fn offsets(origin: Instant, instants: &[Instant]) -> Vec<Duration> {
    instants.iter().map(|at| *at - origin).collect()
}

/// Asserts that no `window` (half-open at its start, as the limiters count)
/// holds more than `max` of the sorted `starts`.
fn assert_at_most_per_window(starts: &[Instant], max: u32, window: Duration) {
    let max = max as usize;
    for pair in starts.windows(max + 1) {
        let span = pair[max] - pair[0];
        assert!(
            span >= window,
            "{} starts within {span:?}, limit {max} per {window:?}",
            max + 1
        );
    }
}

/// A custom limiter that counts every call made to it and admits or denies
/// as told: checks that a composite forwards (or skips) its parts.
#[derive(Clone, Default)]
struct Counting {
    deny: bool,
    next_available: Option<Instant>,
    calls: Arc<Calls>,
}

#[derive(Default)]
struct Calls {
    try_acquire: AtomicUsize,
    can_proceed: AtomicUsize,
    record_start: AtomicUsize,
    record_completion: AtomicUsize,
    next_available_time: AtomicUsize,
    set_next_available_time: AtomicUsize,
    clear: AtomicUsize,
    last_set: Mutex<Option<Instant>>,
}

fn count(counter: &AtomicUsize) -> LimiterFuture<'static, Result<(), LimiterError>> {
    counter.fetch_add(1, Ordering::SeqCst);
    LimiterFuture::ready(Ok(()))
}

impl Counting {
    fn denying() -> Self {
        Self {
            deny: true,
            ..Self::default()
        }
    }

    fn calls(&self, pick: fn(&Calls) -> &AtomicUsize) -> usize {
        pick(&self.calls).load(Ordering::SeqCst)
    }
}

impl Limiter for Counting {
    fn try_acquire_many(&self, _cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        self.calls.try_acquire.fetch_add(1, Ordering::SeqCst);
        let admission = if self.deny {
            Admission::Denied(Denial::until(Instant::now() + Duration::from_secs(1)))
        } else {
            Admission::Granted(Permit::unit())
        };
        LimiterFuture::ready(Ok(admission))
    }
    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        self.calls.can_proceed.fetch_add(1, Ordering::SeqCst);
        LimiterFuture::ready(Ok(!self.deny))
    }
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        count(&self.calls.record_start)
    }
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        count(&self.calls.record_completion)
    }
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        self.calls
            .next_available_time
            .fetch_add(1, Ordering::SeqCst);
        LimiterFuture::ready(Ok(self.next_available.unwrap_or_else(Instant::now)))
    }
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        *self.calls.last_set.lock().unwrap() = Some(at);
        count(&self.calls.set_next_available_time)
    }
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        count(&self.calls.clear)
    }
}

// ------------------------------------------------------ ConcurrencyLimiter

#[tokio::test(start_paused = true)]
async fn concurrency_limiter_follows_the_seed_sequence() {
    let limiter = ConcurrencyLimiter::new(3).unwrap();
    assert!(can_proceed(&limiter).await, "0 running");
    for running in 1..=3 {
        limiter.record_start().await.unwrap();
        assert_eq!(limiter.running(), running);
    }
    assert!(!can_proceed(&limiter).await, "at capacity");
    limiter.record_completion().await.unwrap();
    assert_eq!(limiter.running(), 2);
    assert!(can_proceed(&limiter).await);
}

#[tokio::test(start_paused = true)]
async fn concurrency_limiter_completion_never_drops_below_zero() {
    let limiter = ConcurrencyLimiter::new(3).unwrap();
    limiter.record_completion().await.unwrap();
    limiter.record_completion().await.unwrap();
    assert_eq!(limiter.running(), 0);
    // Had the count gone to -2, three starts would leave one slot free.
    for _ in 0..3 {
        limiter.record_start().await.unwrap();
    }
    assert_eq!(limiter.running(), 3);
    assert!(!can_proceed(&limiter).await);
    deny(&limiter).await;
}

#[tokio::test(start_paused = true)]
async fn concurrency_limiter_grants_exactly_max_permits_and_drop_frees_one() {
    let limiter = ConcurrencyLimiter::new(3).unwrap();
    let mut permits = Vec::new();
    for _ in 0..3 {
        permits.push(grant(&limiter).await);
    }
    let denial = deny(&limiter).await;
    assert_eq!(
        denial.retry_at(),
        None,
        "a slot frees on completion, not at a time"
    );
    permits.pop();
    assert_eq!(limiter.running(), 2);
    let _again = grant(&limiter).await;
    deny(&limiter).await;
}

#[tokio::test(start_paused = true)]
async fn concurrency_limiter_pause_blocks_until_the_instant_despite_free_slots() {
    let limiter = ConcurrencyLimiter::new(3).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    limiter.set_next_available_time(until).await.unwrap();

    assert_eq!(limiter.running(), 0);
    assert!(!can_proceed(&limiter).await);
    assert_eq!(deny(&limiter).await.retry_at(), Some(until));
    assert_eq!(next_available(&limiter).await, until);

    advance(Duration::from_secs(5) - ms(1)).await;
    deny(&limiter).await;
    advance(ms(1)).await;
    assert!(can_proceed(&limiter).await);
    let _permit = grant(&limiter).await;
}

#[tokio::test(start_paused = true)]
async fn concurrency_limiter_pause_never_shortens_an_earlier_one() {
    let limiter = ConcurrencyLimiter::new(1).unwrap();
    let later = Instant::now() + Duration::from_secs(5);
    limiter.set_next_available_time(later).await.unwrap();
    limiter
        .set_next_available_time(Instant::now() + Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(next_available(&limiter).await, later);
}

#[tokio::test(start_paused = true)]
async fn concurrency_denial_is_released_when_a_permit_is_dropped() {
    let limiter = ConcurrencyLimiter::new(1).unwrap();
    let permit = grant(&limiter).await;
    let denial = deny(&limiter).await;

    let waiter = tokio::spawn(denial.wait());
    // Give the waiter every chance to finish early (paused time would
    // also fire any timer it had armed).
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!waiter.is_finished(), "woke without a release");

    let released_at = Instant::now();
    drop(permit);
    tokio::time::timeout(ms(1), waiter)
        .await
        .expect("the release wakes the waiter")
        .unwrap();
    assert_eq!(Instant::now(), released_at);
    let _permit = grant(&limiter).await;
}

#[tokio::test(start_paused = true)]
async fn concurrency_limiter_clear_resets_count_and_pause() {
    let limiter = ConcurrencyLimiter::new(1).unwrap();
    limiter.record_start().await.unwrap();
    limiter
        .set_next_available_after(Duration::from_secs(60))
        .await
        .unwrap();
    limiter.clear().await.unwrap();
    assert_eq!(limiter.running(), 0);
    assert!(can_proceed(&limiter).await);
}

#[tokio::test(start_paused = true)]
async fn concurrency_permits_from_before_clear_do_not_free_slots_taken_after() {
    let limiter = ConcurrencyLimiter::new(1).unwrap();
    let before_clear = grant(&limiter).await;
    limiter.clear().await.unwrap();
    let _after_clear = grant(&limiter).await;
    drop(before_clear);
    assert_eq!(limiter.running(), 1);
    assert!(!can_proceed(&limiter).await);
    deny(&limiter).await;
}

#[test]
fn concurrency_limiter_takes_any_maximum_a_u32_holds() {
    assert!(ConcurrencyLimiter::new(u32::MAX).is_ok());
}

// ------------------------------------------------------------ RateLimiter

#[tokio::test(start_paused = true)]
async fn rate_limiter_without_backoff_admits_exactly_max_per_window() {
    let window = Duration::from_secs(1);
    let limiter = plain_window(3, window);
    let origin = Instant::now();
    let starts = sequential_starts(&limiter, 9, Duration::ZERO).await;
    let s = Duration::from_secs;
    assert_eq!(
        offsets(origin, &starts),
        [s(0), s(0), s(0), s(1), s(1), s(1), s(2), s(2), s(2)]
    );
    assert_at_most_per_window(&starts, 3, window);
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_denial_names_when_the_oldest_start_leaves_the_window() {
    let window = Duration::from_secs(1);
    let limiter = plain_window(3, window);
    let origin = Instant::now();
    for _ in 0..3 {
        drop(grant(&limiter).await);
        advance(ms(100)).await;
    }
    // Starts at 0, 100, 200 ms; now 300 ms.
    assert!(!can_proceed(&limiter).await);
    assert_eq!(deny(&limiter).await.retry_at(), Some(origin + window));
    assert_eq!(next_available(&limiter).await, origin + window);

    advance(ms(699)).await;
    deny(&limiter).await;
    advance(ms(1)).await;
    drop(grant(&limiter).await);
    // Full again: the next place frees when the 100 ms start leaves.
    assert_eq!(deny(&limiter).await.retry_at(), Some(origin + ms(1100)));
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_next_available_time_agrees_with_its_denial_after_forced_starts() {
    // Seed hooks may record starts past the limit. Once the oldest of them
    // leaves the window, the window is still full, and the time the limiter
    // reports must be the one its own denial names.
    let limiter = plain_window(2, Duration::from_secs(10));
    let origin = Instant::now();
    for at in [0, 5, 6] {
        tokio::time::sleep_until(origin + Duration::from_secs(at)).await;
        limiter.record_start().await.unwrap();
    }
    tokio::time::sleep_until(origin + Duration::from_secs(11)).await;
    // Starts at 5 s and 6 s fill the window (1 s, 11 s]; it frees at 15 s.
    // Asked before anything prunes the start at 0 s from the log.
    let reported = next_available(&limiter).await;
    assert!(!can_proceed(&limiter).await);
    let retry_at = deny(&limiter).await.retry_at();
    assert_eq!(retry_at, Some(origin + Duration::from_secs(15)));
    assert_eq!(
        reported - origin,
        Duration::from_secs(15),
        "next_available_time must name when the window frees"
    );
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_backoff_after_a_filling_start_stays_within_the_jitter_bounds() {
    let (initial, multiplier, cap) = (ms(100), 2.0, Duration::from_secs(1));
    let delay = ms(200); // min(initial * multiplier, cap)
    for window in [ms(10), ms(300), Duration::from_secs(1)] {
        let mut seen = Vec::new();
        for _ in 0..64 {
            let limiter = backoff_window(2, window, initial, multiplier, cap);
            let oldest = Instant::now();
            drop(grant(&limiter).await);
            advance(ms(5)).await;
            let now = Instant::now();
            drop(grant(&limiter).await); // fills the window
            let frees = oldest + window;
            let low = (now + delay).max(frees);
            let high = (now + 2 * delay).max(frees);
            let at = next_available(&limiter).await;
            assert!(
                low <= at && at <= high,
                "window {window:?}: {:?} outside [{:?}, {:?}]",
                at - now,
                low - now,
                high - now
            );
            assert_eq!(deny(&limiter).await.retry_at(), Some(at));
            seen.push(at - now);
        }
        if window < delay {
            // The backoff dominates: the jitter must actually spread retries.
            let (min, max) = (seen.iter().min().unwrap(), seen.iter().max().unwrap());
            assert!(
                *min < delay * 3 / 2 && *max > delay * 3 / 2,
                "no jitter: {min:?}..{max:?}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_forced_starts_escalate_the_backoff_up_to_the_cap() {
    let (initial, multiplier, cap) = (ms(10), 3.0, Duration::from_secs(1));
    let limiter = backoff_window(1, ms(5), initial, multiplier, cap);
    let now = Instant::now();
    drop(grant(&limiter).await); // fills the window: first backoff
    let expected = [30, 90, 270, 810, 1000, 1000, 1000].map(ms);
    for (step, delay) in expected.iter().enumerate() {
        if step > 0 {
            limiter.record_start().await.unwrap(); // forced while full
        }
        let wait = next_available(&limiter).await - now;
        assert!(
            *delay <= wait && wait <= 2 * *delay,
            "step {step}: wait {wait:?}, backoff should be {delay:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_grant_resets_the_backoff() {
    let (initial, multiplier, cap) = (ms(10), 3.0, Duration::from_secs(10));
    let limiter = backoff_window(1, ms(5), initial, multiplier, cap);
    drop(grant(&limiter).await);
    for _ in 0..4 {
        limiter.record_start().await.unwrap(); // escalates to 810 ms
    }
    let until = next_available(&limiter).await;
    tokio::time::sleep_until(until).await;
    let now = Instant::now();
    drop(grant(&limiter).await); // resets, then fills: back to 30 ms
    let wait = next_available(&limiter).await - now;
    assert!(
        ms(30) <= wait && wait <= ms(60),
        "wait {wait:?} after a grant"
    );
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_refund_gives_the_start_back() {
    for limiter in plain_and_backoff_windows(1) {
        let permit = grant(&limiter).await;
        assert!(!can_proceed(&limiter).await);
        limiter.refund(permit);
        assert!(can_proceed(&limiter).await, "{limiter:?}");
        assert_eq!(next_available(&limiter).await, Instant::now());
        let _permit = grant(&limiter).await;
    }
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_refund_of_an_earlier_start_reopens_a_window_a_later_start_filled() {
    // A reservation (the earlier start) is refunded after another caller
    // filled the window: the window holds one start of two, so there is room.
    for limiter in plain_and_backoff_windows(2) {
        let earlier = grant(&limiter).await;
        advance(ms(1)).await;
        drop(grant(&limiter).await); // fills the window
        assert!(!can_proceed(&limiter).await);
        limiter.refund(earlier);
        assert!(
            can_proceed(&limiter).await,
            "the refunded start still blocks the window: {limiter:?}"
        );
        let _permit = grant(&limiter).await;
    }
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_completion_does_not_give_the_start_back() {
    let limiter = plain_window(1, Duration::from_secs(10));
    drop(grant(&limiter).await);
    limiter.record_completion().await.unwrap();
    assert!(!can_proceed(&limiter).await, "a window counts starts");
}

#[tokio::test(start_paused = true)]
async fn rate_limiters_with_the_same_name_on_one_store_share_a_window() {
    let store = MemoryStore::new();
    let build = |name: &str| {
        RateLimiter::builder(name, 2, Duration::from_secs(1))
            .without_backoff()
            .store(store.clone())
            .build()
            .unwrap()
    };
    let (first, twin, other) = (build("api"), build("api"), build("other"));
    drop(grant(&first).await);
    drop(grant(&twin).await);
    deny(&first).await;
    deny(&twin).await;
    assert!(!can_proceed(&twin).await);
    drop(grant(&other).await);
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_pause_and_clear() {
    let limiter = plain_window(5, Duration::from_secs(1));
    let until = Instant::now() + Duration::from_secs(30);
    limiter.set_next_available_time(until).await.unwrap();
    assert_eq!(deny(&limiter).await.retry_at(), Some(until));
    assert_eq!(next_available(&limiter).await, until);
    limiter.clear().await.unwrap();
    let _permit = grant(&limiter).await;
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_names_the_later_of_a_pause_and_a_full_window() {
    let origin = Instant::now();
    let limiter = plain_window(1, Duration::from_secs(10));
    let _permit = grant(&limiter).await;
    limiter
        .set_next_available_time(origin + Duration::from_secs(5))
        .await
        .unwrap();
    let window_frees = origin + Duration::from_secs(10);
    assert_eq!(next_available(&limiter).await, window_frees);
    assert_eq!(deny(&limiter).await.retry_at(), Some(window_frees));
}

// ----------------------------------------------------------- DelayLimiter

#[tokio::test(start_paused = true)]
async fn delay_limiter_default_is_fifty_milliseconds() {
    let limiter = DelayLimiter::default();
    assert_eq!(limiter.delay(), ms(50));
    let origin = Instant::now();
    let starts = sequential_starts(&limiter, 3, Duration::ZERO).await;
    assert_eq!(offsets(origin, &starts), [ms(0), ms(50), ms(100)]);
}

#[tokio::test(start_paused = true)]
async fn delay_limiter_spaces_starts_exactly_by_the_delay() {
    let limiter = DelayLimiter::new(ms(200)).unwrap();
    let origin = Instant::now();
    let starts = sequential_starts(&limiter, 4, ms(30)).await;
    assert_eq!(offsets(origin, &starts), [0, 200, 400, 600].map(ms));
    let denial = deny(&limiter).await;
    assert_eq!(denial.retry_at(), Some(starts[3] + ms(200)));
}

#[tokio::test(start_paused = true)]
async fn delay_limiter_refund_reopens_the_gap() {
    let limiter = DelayLimiter::new(ms(200)).unwrap();
    let permit = grant(&limiter).await;
    assert!(!can_proceed(&limiter).await);
    limiter.refund(permit);
    assert!(can_proceed(&limiter).await);
    let _permit = grant(&limiter).await;
}

// ------------------------------------------------ EvenlySpacedRateLimiter

#[tokio::test(start_paused = true)]
async fn evenly_spaced_limiter_spaces_instant_calls_by_window_over_max() {
    let limiter = EvenlySpacedRateLimiter::new(10, Duration::from_secs(1)).unwrap();
    assert_eq!(limiter.interval(), ms(100));
    let origin = Instant::now();
    let starts = sequential_starts(&limiter, 5, Duration::ZERO).await;
    assert_eq!(offsets(origin, &starts), [0, 100, 200, 300, 400].map(ms));
}

/// `callers` tasks each making `calls` calls of `hold` through `limiter`;
/// every start, in order.
async fn concurrent_starts(
    limiter: &EvenlySpacedRateLimiter,
    callers: usize,
    calls: usize,
    hold: Duration,
) -> Vec<Instant> {
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut starts = Vec::with_capacity(calls);
                for _ in 0..calls {
                    let permit = limiter.acquire().await.unwrap();
                    starts.push(Instant::now());
                    tokio::time::sleep(hold).await;
                    drop(permit);
                }
                starts
            })
        })
        .collect();
    let mut starts = Vec::new();
    for task in tasks {
        starts.extend(task.await.unwrap());
    }
    starts.sort();
    starts
}

/// 20 a second, 10 callers, 40 ms calls: every start at least 50 ms after
/// the one before (the seed's duration credit used to start them 10 ms
/// apart).
#[tokio::test(start_paused = true)]
async fn evenly_spaced_limiter_spaces_concurrent_callers_whatever_the_call_duration() {
    let limiter = EvenlySpacedRateLimiter::new(20, Duration::from_secs(1)).unwrap();
    let starts = concurrent_starts(&limiter, 10, 6, ms(40)).await;
    assert_eq!(starts.len(), 60);
    let gaps: Vec<Duration> = starts.windows(2).map(|pair| pair[1] - pair[0]).collect();
    assert!(gaps.iter().all(|&gap| gap >= ms(50)), "gaps {gaps:?}");
    assert_eq!(
        starts[59] - starts[0],
        ms(50 * 59),
        "on the beat, no slower"
    );
}

/// One sequential caller whose calls outlast or undercut the interval
/// still starts exactly once per interval.
#[tokio::test(start_paused = true)]
async fn evenly_spaced_limiter_keeps_a_sequential_caller_on_the_beat() {
    for hold in [ms(0), ms(40), ms(99)] {
        let limiter = EvenlySpacedRateLimiter::new(10, Duration::from_secs(1)).unwrap();
        let origin = Instant::now();
        let starts = sequential_starts(&limiter, 5, hold).await;
        assert_eq!(
            offsets(origin, &starts),
            [0, 100, 200, 300, 400].map(ms),
            "{hold:?}"
        );
    }
}

/// Calls costing several units are followed by as many intervals, and no
/// window of `window` ever holds more than the limit in units.
#[tokio::test(start_paused = true)]
async fn evenly_spaced_limiter_never_exceeds_max_per_window_with_costs() {
    let (max, window) = (5, Duration::from_secs(1));
    let limiter = EvenlySpacedRateLimiter::new(max, window).unwrap();
    let origin = Instant::now();
    let mut units = Vec::new();
    for cost in [1, 4, 1, 5, 2, 3, 1, 1] {
        let permit = limiter.acquire_many(cost).await.unwrap();
        units.extend(std::iter::repeat_n(Instant::now(), cost as usize));
        drop(permit);
    }
    assert_at_most_per_window(&units, max, window);
    // 1 at 0; 4 at 200 ms (one interval after the 1), held back by nothing
    // else; the next 1 waits four intervals; the 5 must wait for the window.
    assert_eq!(units[1] - origin, ms(200));
    assert_eq!(units[5] - origin, ms(1_000));
}

#[tokio::test(start_paused = true)]
async fn evenly_spaced_limiter_seed_hooks_space_from_the_recorded_start() {
    let limiter = EvenlySpacedRateLimiter::new(10, Duration::from_secs(1)).unwrap();
    let origin = Instant::now();
    limiter.record_start().await.unwrap();
    assert_eq!(next_available(&limiter).await, origin + ms(100));
    advance(ms(40)).await;
    limiter.record_completion().await.unwrap(); // a 40 ms call credits nothing
    assert!(!can_proceed(&limiter).await);
    advance(ms(60)).await;
    assert!(can_proceed(&limiter).await);
    limiter.record_start().await.unwrap();
    assert_eq!(next_available(&limiter).await, origin + ms(200));
}

#[tokio::test(start_paused = true)]
async fn evenly_spaced_limiter_refund_reopens_the_interval() {
    let limiter = EvenlySpacedRateLimiter::new(10, Duration::from_secs(1)).unwrap();
    let permit = grant(&limiter).await;
    assert!(!can_proceed(&limiter).await);
    limiter.refund(permit);
    assert!(can_proceed(&limiter).await);
}

// ------------------------------------------------------ CompositeLimiter

#[tokio::test(start_paused = true)]
async fn composite_admits_only_when_every_part_admits() {
    let concurrency = ConcurrencyLimiter::new(2).unwrap();
    let delay = DelayLimiter::new(ms(100)).unwrap();
    let composite = CompositeLimiter::new()
        .with(concurrency.clone())
        .with(delay.clone());

    let first = grant(&composite).await;
    assert_eq!(concurrency.running(), 1);
    // Concurrency has room, delay does not.
    assert_eq!(
        deny(&composite).await.retry_at(),
        Some(Instant::now() + ms(100))
    );
    advance(ms(100)).await;
    let _second = grant(&composite).await;
    advance(ms(100)).await;
    // Delay has room, concurrency does not.
    assert_eq!(deny(&composite).await.retry_at(), None);
    drop(first);
    let _third = grant(&composite).await;
}

#[tokio::test(start_paused = true)]
async fn composite_short_circuits_at_the_first_denial() {
    let (first, second) = (Counting::denying(), Counting::default());
    let composite = CompositeLimiter::new()
        .with(first.clone())
        .with(second.clone());

    deny(&composite).await;
    assert!(!can_proceed(&composite).await);
    assert_eq!(first.calls(|c| &c.try_acquire), 1);
    assert_eq!(first.calls(|c| &c.can_proceed), 1);
    assert_eq!(
        second.calls(|c| &c.try_acquire),
        0,
        "consulted after a denial"
    );
    assert_eq!(
        second.calls(|c| &c.can_proceed),
        0,
        "consulted after a denial"
    );
}

#[tokio::test(start_paused = true)]
async fn composite_forwards_hooks_to_every_part() {
    let parts = [
        Counting::default(),
        Counting::denying(),
        Counting::default(),
    ];
    let composite = parts
        .iter()
        .fold(CompositeLimiter::new(), |c, part| c.with(part.clone()));
    let at = Instant::now() + Duration::from_secs(3);
    composite.record_start().await.unwrap();
    composite.record_completion().await.unwrap();
    composite.set_next_available_time(at).await.unwrap();
    composite.clear().await.unwrap();
    for part in &parts {
        assert_eq!(part.calls(|c| &c.record_start), 1);
        assert_eq!(part.calls(|c| &c.record_completion), 1);
        assert_eq!(part.calls(|c| &c.set_next_available_time), 1);
        assert_eq!(part.calls(|c| &c.clear), 1);
        assert_eq!(*part.calls.last_set.lock().unwrap(), Some(at));
    }
}

#[tokio::test(start_paused = true)]
async fn composite_hooks_reach_real_parts() {
    let concurrency = ConcurrencyLimiter::new(1).unwrap();
    let delay = DelayLimiter::new(ms(100)).unwrap();
    let rate = plain_window(1, Duration::from_secs(1));
    let composite = CompositeLimiter::new()
        .with(concurrency.clone())
        .with(delay.clone())
        .with(rate.clone());

    composite.record_start().await.unwrap();
    assert_eq!(concurrency.running(), 1);
    assert!(!can_proceed(&delay).await);
    assert!(!can_proceed(&rate).await);
    composite.record_completion().await.unwrap();
    assert_eq!(concurrency.running(), 0);

    composite.clear().await.unwrap();
    for part in [&concurrency as &dyn Limiter, &delay, &rate] {
        assert!(part.can_proceed().await.unwrap());
    }
    let until = Instant::now() + Duration::from_secs(9);
    composite.set_next_available_time(until).await.unwrap();
    for part in [&concurrency as &dyn Limiter, &delay, &rate] {
        assert_eq!(part.next_available_time().await.unwrap(), until);
    }
}

#[tokio::test(start_paused = true)]
async fn composite_next_available_time_is_the_latest_of_its_parts() {
    let concurrency = ConcurrencyLimiter::new(1).unwrap();
    let delay = DelayLimiter::new(ms(100)).unwrap();
    let rate = plain_window(1, Duration::from_secs(1));
    let now = Instant::now();
    concurrency
        .set_next_available_time(now + ms(500))
        .await
        .unwrap();
    delay.record_start().await.unwrap();
    drop(grant(&rate).await);
    let composite = CompositeLimiter::new()
        .with(delay)
        .with(rate)
        .with(concurrency);
    assert_eq!(
        next_available(&composite).await,
        now + Duration::from_secs(1)
    );

    let later = Counting {
        next_available: Some(now + Duration::from_secs(7)),
        ..Counting::default()
    };
    composite.add_limiter(later);
    assert_eq!(
        next_available(&composite).await,
        now + Duration::from_secs(7)
    );
}

#[tokio::test(start_paused = true)]
async fn composite_add_limiter_takes_effect_at_runtime_for_every_clone() {
    let composite = CompositeLimiter::new();
    let clone = composite.clone();
    assert!(composite.is_empty());
    drop(grant(&clone).await);

    let concurrency = ConcurrencyLimiter::new(1).unwrap();
    let _busy = grant(&concurrency).await;
    composite.add_limiter(concurrency);
    assert_eq!(clone.len(), 1);
    deny(&clone).await;
    assert!(!can_proceed(&clone).await);
}

/// A composite of `part` and a busy concurrency limit: the denied attempt
/// must leave `part` exactly as it was.
async fn assert_denied_attempt_burns_no_quota(part: impl Limiter + Clone) {
    let busy = ConcurrencyLimiter::new(1).unwrap();
    let held = grant(&busy).await;
    let composite = CompositeLimiter::new().with(part.clone()).with(busy);

    assert_eq!(deny(&composite).await.retry_at(), None);
    assert!(can_proceed(&part).await, "the denied attempt used quota");
    assert_eq!(next_available(&part).await, Instant::now());
    drop(held);
    let _permit = grant(&composite).await;
}

#[tokio::test(start_paused = true)]
async fn composite_denied_attempt_burns_no_rate_quota() {
    assert_denied_attempt_burns_no_quota(plain_window(1, Duration::from_secs(10))).await;
}

#[tokio::test(start_paused = true)]
async fn composite_denied_attempt_burns_no_rate_quota_or_backoff() {
    let rate = backoff_window(1, Duration::from_secs(10), ms(100), 2.0, ms(1000));
    assert_denied_attempt_burns_no_quota(rate).await;
}

#[tokio::test(start_paused = true)]
async fn composite_denied_attempt_burns_no_delay_or_spacing() {
    assert_denied_attempt_burns_no_quota(DelayLimiter::new(ms(100)).unwrap()).await;
    let spaced = EvenlySpacedRateLimiter::new(1, Duration::from_secs(1)).unwrap();
    assert_denied_attempt_burns_no_quota(spaced).await;
}

// ------------------------------------------------------------ NullLimiter

#[tokio::test(start_paused = true)]
async fn null_limiter_admits_everything() {
    let limiter = NullLimiter;
    limiter
        .set_next_available_after(Duration::from_secs(60))
        .await
        .unwrap();
    let mut permits = Vec::new();
    for _ in 0..10_000 {
        limiter.record_start().await.unwrap();
        permits.push(grant(&limiter).await);
    }
    assert!(can_proceed(&limiter).await);
    assert_eq!(next_available(&limiter).await, Instant::now());
}

// ------------------------------------------------------------ ConfigError

fn assert_config_error(result: Result<impl std::fmt::Debug, ConfigError>, field: &str, rule: &str) {
    let error = result.expect_err("configuration should be rejected");
    assert_eq!(error.field(), field);
    assert!(error.rule().contains(rule), "rule {:?}", error.rule());
    let message = error.to_string();
    assert!(message.contains(&format!("`{field}`")), "{message}");
    assert!(message.contains(error.rule()), "{message}");
}

fn rate_builder(
    max: u32,
    window: Duration,
) -> tower_limits::limiters::RateLimiterBuilder<MemoryStore> {
    RateLimiter::builder("config", max, window)
}

#[test]
fn rate_limiter_rejects_invalid_configuration_naming_the_field() {
    let second = Duration::from_secs(1);
    assert_config_error(
        rate_builder(0, second).build(),
        "max_executions",
        "at least 1",
    );
    assert_config_error(
        rate_builder(0, second).without_backoff().build(),
        "max_executions",
        "at least 1",
    );
    assert_config_error(
        rate_builder(1, Duration::ZERO).build(),
        "window",
        "longer than zero",
    );
    assert_config_error(
        rate_builder(1, second)
            .initial_backoff(Duration::ZERO)
            .build(),
        "initial_backoff",
        "longer than zero",
    );
    for multiplier in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.5, 0.0, -2.0] {
        assert_config_error(
            rate_builder(1, second)
                .backoff_multiplier(multiplier)
                .build(),
            "backoff_multiplier",
            "finite number of at least 1",
        );
    }
    assert_config_error(
        rate_builder(1, second)
            .initial_backoff(ms(500))
            .max_backoff(ms(499))
            .build(),
        "max_backoff",
        "at least `initial_backoff`",
    );
}

#[test]
fn rate_limiter_accepts_boundary_configuration() {
    let second = Duration::from_secs(1);
    rate_builder(1, ms(1)).build().unwrap();
    rate_builder(1, second)
        .backoff_multiplier(1.0)
        .build()
        .unwrap();
    rate_builder(1, second)
        .initial_backoff(ms(500))
        .max_backoff(ms(500))
        .build()
        .unwrap();
}

#[test]
fn other_limiters_reject_invalid_configuration_naming_the_field() {
    assert_config_error(ConcurrencyLimiter::new(0), "max_concurrent", "at least 1");
    assert_config_error(
        DelayLimiter::new(Duration::ZERO),
        "delay",
        "longer than zero",
    );
    assert_config_error(
        EvenlySpacedRateLimiter::new(0, Duration::from_secs(1)),
        "max_executions",
        "at least 1",
    );
    assert_config_error(
        EvenlySpacedRateLimiter::new(1, Duration::ZERO),
        "window",
        "longer than zero",
    );
}
