//! The time source every time-based limiter reads.
//!
//! Limiters keep their state as nanoseconds since the clock's epoch (so it
//! fits in an atomic) and hand out [`tokio::time::Instant`]s to callers, which
//! tokio timers sleep until.
//!
//! Two sources are offered:
//!
//! * [`Clock::fast`] reads the CPU's time-stamp counter through `quanta`
//!   with the `fast-clock` cargo feature (on by default), about twice as
//!   cheap as the system clock on a typical virtual machine; without the
//!   feature, the system's monotonic clock. It does not follow paused tokio
//!   time. The time-stamp counter's calibration is off by up to several
//!   hundred parts per million, so it counts 1/1024 (about 0.1%) slow: a
//!   window is never shorter than configured when measured on the system's
//!   clock, and a limit of 1,000 per second admits about 999 per real
//!   second. Instants it hands out are converted from the present, so
//!   that drift never adds up into a wrong sleep; a caller woken at one
//!   may find the limiter that 0.1% of its wait short of ready.
//! * [`Clock::tokio`] reads [`tokio::time::Instant::now`], so
//!   [`tokio::time::pause`] and [`tokio::time::advance`] drive the limiter in
//!   tests exactly as they drive timers.
//!
//! # The default: fast, except under paused time
//!
//! [`Clock::default`], which every limiter's constructor uses, picks the
//! source where the limiter is built: [`Clock::tokio`] if it is built inside
//! a tokio runtime whose clock is paused (a test under
//! `#[tokio::test(start_paused = true)]` or after `tokio::time::pause()`),
//! [`Clock::fast`] otherwise. Production code gets governor's kind of clock
//! (governor reads quanta by default too), and paused-time tests keep
//! driving limiters without naming a clock.
//!
//! The trade-off: the choice is made once, when the limiter is built. A
//! limiter built **before** time is paused (outside the runtime, or before
//! the test calls `pause()`) reads the real clock and ignores
//! `tokio::time::advance`. Build it after pausing, or pass
//! [`Clock::tokio`] (`with_clock`, or `.clock(...)` on a builder).
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use tower_limits::clock::Clock;
//! use tower_limits::{DelayLimiter, Limiter};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Built before the runtime pauses time: name tokio's clock so the test
//! // can drive it.
//! let limiter = DelayLimiter::new(Duration::from_secs(60))?.with_clock(Clock::tokio());
//! let runtime = tokio::runtime::Builder::new_current_thread()
//!     .enable_time()
//!     .start_paused(true)
//!     .build()?;
//! runtime.block_on(async {
//!     limiter.record_start().await?;
//!     assert!(!limiter.can_proceed().await?);
//!     tokio::time::advance(Duration::from_secs(60)).await; // no real minute passes
//!     assert!(limiter.can_proceed().await?);
//!     Ok(())
//! })
//! # }
//! ```
//!
//! [`tokio::time::pause`]: https://docs.rs/tokio/1/tokio/time/fn.pause.html
//! [`tokio::time::advance`]: https://docs.rs/tokio/1/tokio/time/fn.advance.html

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// What [`Clock::fast`] reads: the CPU's time-stamp counter through quanta
/// with the `fast-clock` feature, calibrated once per process (it takes
/// milliseconds), so a clock handle stays two words wide.
#[cfg(feature = "fast-clock")]
mod counter {
    use std::sync::OnceLock;

    /// quanta's calibration is off by tens to hundreds of parts per million
    /// (measured on virtual machines: 21 ppm slow in a release build, 150
    /// ppm fast in a debug build on one; about 530 ppm fast in some debug
    /// test processes on another, where 1/2¹¹ was not slow enough). A clock
    /// that runs fast makes a window shorter than configured, so readings
    /// are counted 1/2¹⁰ (977 ppm) slow: a window of this clock is never
    /// shorter than the real one.
    const SLOW_SHIFT: u32 = 10;

    /// The counter and its scale: nanoseconds per 2³² ticks as quanta
    /// calibrated them, made [`SLOW_SHIFT`] slow. One multiplication turns
    /// ticks into nanoseconds (quanta's own conversion, with the slowing
    /// after it, was about a third of a GCRA decision).
    struct Counter {
        clock: quanta::Clock,
        nanos_per_2_32_ticks: u64,
    }

    static COUNTER: OnceLock<Counter> = OnceLock::new();

    #[inline]
    fn counter() -> &'static Counter {
        COUNTER.get_or_init(|| {
            let clock = quanta::Clock::new();
            let real = clock.delta_as_nanos(0, 1 << 32);
            Counter {
                clock,
                nanos_per_2_32_ticks: real - (real >> SLOW_SHIFT),
            }
        })
    }

    /// The counter's reading, in its own units.
    #[inline]
    pub(super) fn raw() -> u64 {
        counter().clock.raw()
    }

    /// A reading before the epoch's: none of this clock's time has passed.
    /// Out of line, as is [`beyond`], so that both saturations are
    /// branches the CPU predicts, off the path from the counter to the
    /// nanoseconds, which a GCRA decision's compare-and-swap waits for. As
    /// conditional moves on that path they cost it half a nanosecond
    /// (`benches/paired`, AMD EPYC VM: 12.1-12.2 ns, 11.6-11.7 without,
    /// beside governor's `check` at 9.4-9.5).
    #[cold]
    #[inline(never)]
    fn behind() -> u64 {
        0
    }

    /// More than 2⁶⁴ nanoseconds (584 years) since the epoch: the most
    /// this clock counts.
    #[cold]
    #[inline(never)]
    fn beyond() -> u64 {
        u64::MAX
    }

    /// This clock's nanoseconds from the reading `from` to now (0 if the
    /// counter reads `from` or less).
    #[inline]
    pub(super) fn nanos_since(from: u64) -> u64 {
        let counter = counter();
        let Some(ticks) = counter.clock.raw().checked_sub(from) else {
            return behind();
        };
        let nanos = (u128::from(ticks) * u128::from(counter.nanos_per_2_32_ticks)) >> 32;
        match u64::try_from(nanos) {
            Ok(nanos) => nanos,
            Err(_) => beyond(),
        }
    }
}

/// What [`Clock::fast`] reads without the `fast-clock` feature: the system's
/// monotonic clock, as nanoseconds since the first reading.
#[cfg(not(feature = "fast-clock"))]
mod counter {
    use std::sync::OnceLock;
    use std::time::Instant;

    static ORIGIN: OnceLock<Instant> = OnceLock::new();

    /// Nanoseconds since the process first read this clock.
    #[inline]
    pub(super) fn raw() -> u64 {
        super::duration_nanos(ORIGIN.get_or_init(Instant::now).elapsed())
    }

    /// Nanoseconds from the reading `from` to now.
    #[inline]
    pub(super) fn nanos_since(from: u64) -> u64 {
        raw().saturating_sub(from)
    }
}

/// A monotonic time source, cheap to clone; see the [module docs](self).
///
/// The default is [`Clock::fast`], or [`Clock::tokio`] where it is made under
/// paused tokio time, so limiters built in a paused test follow it:
///
/// ```
/// use std::time::Duration;
/// use tower_limits::clock::Clock;
/// use tower_limits::{DelayLimiter, Limiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = DelayLimiter::new(Duration::from_secs(60))?.with_clock(Clock::default());
/// limiter.record_start().await?;
/// assert!(!limiter.can_proceed().await?);
/// tokio::time::advance(Duration::from_secs(60)).await; // no real minute passes
/// assert!(limiter.can_proceed().await?);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[repr(C)] // The source first: the fast clock reads nothing else.
pub struct Clock {
    source: Source,
    epoch: Instant,
}

#[derive(Clone, Debug)]
enum Source {
    Tokio,
    /// Reads [`counter`]; `epoch_raw` is its reading at the epoch.
    Counter {
        epoch_raw: u64,
    },
}

impl Default for Clock {
    /// [`Clock::tokio`] inside a tokio runtime whose clock is paused,
    /// [`Clock::fast`] everywhere else; see the [module docs](self).
    ///
    /// ```
    /// use tower_limits::clock::Clock;
    ///
    /// // Outside a paused runtime: the fast clock, which real time moves.
    /// let clock = Clock::default();
    /// let before = clock.now();
    /// std::thread::sleep(std::time::Duration::from_millis(1));
    /// assert!(clock.now() > before);
    /// ```
    fn default() -> Self {
        if tokio_time_is_paused() {
            Self::tokio()
        } else {
            Self::fast()
        }
    }
}

/// Whether tokio's clock is paused here: it stands still while the system's
/// clock moves. Outside a runtime, and without tokio's `test-util`, tokio's
/// clock is the system's, so this is false.
fn tokio_time_is_paused() -> bool {
    /// More reads than any system clock needs to tick (its resolution is a
    /// nanosecond on Linux, 100 ns on Windows).
    const READS: u32 = 1_000_000;
    if tokio::runtime::Handle::try_current().is_err() {
        return false;
    }
    let tokio_before = Instant::now();
    let system_before = std::time::Instant::now();
    let ticked = (0..READS).any(|_| std::time::Instant::now() > system_before);
    // A system clock that never ticked proves nothing: follow tokio's,
    // which is right in a test and merely slower elsewhere.
    !ticked || Instant::now() == tokio_before
}

impl Clock {
    /// A clock that reads tokio's time, so paused-time tests control it.
    ///
    /// ```
    /// use tower_limits::clock::Clock;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let clock = Clock::tokio();
    /// let before = clock.now();
    /// tokio::time::advance(std::time::Duration::from_secs(5)).await;
    /// assert_eq!(clock.now() - before, std::time::Duration::from_secs(5));
    /// # }
    /// ```
    pub fn tokio() -> Self {
        Self {
            source: Source::Tokio,
            epoch: Instant::now(),
        }
    }

    /// A clock that reads the CPU's time-stamp counter with the
    /// `fast-clock` feature (falling back to the system's monotonic clock
    /// where there is none), and the system's monotonic clock without it.
    /// Either way it ignores paused tokio time, and skips the check tokio's
    /// clock makes for it.
    ///
    /// ```
    /// use tower_limits::clock::Clock;
    ///
    /// let clock = Clock::fast();
    /// let a = clock.now();
    /// assert!(clock.now() >= a);
    /// ```
    pub fn fast() -> Self {
        let epoch_raw = counter::raw();
        Self {
            source: Source::Counter { epoch_raw },
            epoch: system_now(),
        }
    }

    /// The current time. The fast clock reads it from the system's clock,
    /// as tokio's timers do (its decisions read the counter instead), so an
    /// instant from here is exact however far the counter has drifted.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::clock::Clock;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let clock = Clock::tokio();
    /// tokio::time::advance(Duration::from_millis(1500)).await;
    /// assert_eq!(clock.now(), tokio::time::Instant::now());
    /// # }
    /// ```
    #[inline]
    pub fn now(&self) -> Instant {
        match self.source {
            Source::Tokio => Instant::now(),
            Source::Counter { .. } => system_now(),
        }
    }

    /// Nanoseconds since this clock's epoch.
    #[inline]
    pub(crate) fn now_nanos(&self) -> u64 {
        match &self.source {
            Source::Tokio => duration_nanos(Instant::now().saturating_duration_since(self.epoch)),
            Source::Counter { epoch_raw } => counter::nanos_since(*epoch_raw),
        }
    }

    /// Unix time at this clock's epoch, in nanoseconds: both clocks read
    /// once, now.
    pub(crate) fn unix_epoch(&self) -> u64 {
        let since_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(duration_nanos)
            .unwrap_or(0);
        since_unix.saturating_sub(self.now_nanos())
    }

    /// The instant `nanos` after the epoch.
    ///
    /// The fast clock converts from the present (this clock's reading and
    /// the system's, now), not from the epoch: its rate differs from the
    /// system's by up to a few hundred parts per million, which over a day
    /// would add up to seconds, and a caller told to wait until such an
    /// instant would wake long before (or after) the limiter is ready. What
    /// is left is that fraction of the wait itself: a caller woken at the
    /// instant may find the limiter not quite ready (0.1% of a 10 s wait is
    /// 10 ms) and wait that little again, as the layers do.
    #[inline]
    pub(crate) fn instant_at(&self, nanos: u64) -> Instant {
        match self.source {
            Source::Tokio => self.epoch + Duration::from_nanos(nanos),
            Source::Counter { .. } => {
                // This clock first: a pause between the reads makes the
                // instant later, never earlier, than `nanos`.
                let now = self.now_nanos();
                let system = system_now();
                if nanos >= now {
                    system + Duration::from_nanos(nanos - now)
                } else {
                    let ago = Duration::from_nanos(now - nanos);
                    system.checked_sub(ago).unwrap_or(self.epoch)
                }
            }
        }
    }

    /// `at` as nanoseconds since the epoch; instants before the epoch map to
    /// 0. The fast clock converts from the present, as in
    /// [`instant_at`](Self::instant_at).
    pub(crate) fn nanos_at(&self, at: Instant) -> u64 {
        match self.source {
            Source::Tokio => duration_nanos(at.saturating_duration_since(self.epoch)),
            Source::Counter { .. } => {
                // The system's clock first: a pause between the reads makes
                // the count later, never earlier, than `at`.
                let system = system_now();
                let now = self.now_nanos();
                if at >= system {
                    now.saturating_add(duration_nanos(at - system))
                } else {
                    now.saturating_sub(duration_nanos(system - at))
                }
            }
        }
    }
}

/// How far behind a paced caller's start its slot may be taken: about the
/// resolution of tokio's timer, which fires on whole milliseconds (a
/// caller told to wait until an instant wakes up to about 2 ms after it:
/// the deadline is rounded up to the timer's next tick, and the wait for
/// that tick to a whole millisecond).
///
/// A [`RateLimiter`](crate::RateLimiter) of a GCRA or token bucket quota
/// built [`with_pacing_tolerance`](crate::store::Quota::with_pacing_tolerance),
/// [`EvenlySpacedRateLimiter`](crate::EvenlySpacedRateLimiter) and
/// [`LeakyBucketLimiter`](crate::LeakyBucketLimiter) pace calls one slot
/// after another. A call that starts after the slot it was due (a waiter
/// its timer woke late) takes that slot if it is at most this tolerance
/// (τ) late, else the slot τ before its start, and the next slot follows
/// that one: the pace never counts from more than τ after a late start.
/// Without it, each late wake-up cost the rate its lateness: at 1,000
/// calls a second, half the rate. A start more than 10 ms after its slot
/// (the limiter was idle, or is fresh) counts from when it came, as before.
///
/// The price is in the bounds: in any span `t`, the limiters admit at most
/// what a strict pacer would in `t + τ`, that is `⌈rate × τ⌉` calls more
/// than a strict pacer in any window of its period (one more at up to 500
/// calls a second, 2 at 1,000, 20 at 10,000).
///
/// ```
/// use std::time::Duration;
/// use tower_limits::clock::PACING_TOLERANCE;
///
/// assert_eq!(PACING_TOLERANCE, Duration::from_millis(2));
/// // The calls a limit of 10,000 a second may admit beyond it in a window.
/// assert_eq!(PACING_TOLERANCE.as_secs_f64() * 10_000.0, 20.0);
/// ```
pub const PACING_TOLERANCE: Duration = Duration::from_millis(2);

/// [`PACING_TOLERANCE`] in nanoseconds.
const TOLERANCE_NANOS: u64 = PACING_TOLERANCE.as_nanos() as u64;

/// How late after its slot a start is still a late start (a waiter woken
/// late, or held up), not the first after an idle spell: ten timer ticks.
const LATE_NANOS: u64 = 10_000_000;

/// The instant a start at `now` counts from, on a pace whose next slot is
/// `due` (0: a fresh state, with no slot): the slot if the start is early
/// (a cell limiter with room) or at most [`PACING_TOLERANCE`] late; the
/// instant that tolerance before `now` if it is up to 10 ms late; else
/// `now`. Never earlier than `now − PACING_TOLERANCE`.
#[inline]
pub(crate) fn paced_from(due: u64, now: u64) -> u64 {
    match now.checked_sub(due) {
        None => due,
        Some(late) if late <= LATE_NANOS && due > 0 => now - late.min(TOLERANCE_NANOS),
        Some(_) => now,
    }
}

/// The system's monotonic clock, even where tokio's is paused: the fast
/// clock ignores paused time.
fn system_now() -> Instant {
    Instant::from_std(std::time::Instant::now())
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (584 years).
#[inline]
pub(crate) fn duration_nanos(duration: Duration) -> u64 {
    // Cheaper than `as_nanos`, which works in `u128`.
    duration
        .as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(duration.subsec_nanos()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_default_follows_paused_time() {
        let clock = Clock::default();
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(clock.now(), Instant::now());
    }

    #[tokio::test]
    async fn the_default_is_fast_where_time_runs() {
        assert!(matches!(Clock::default().source, Source::Counter { .. }));
        tokio::time::pause();
        assert!(matches!(Clock::default().source, Source::Tokio));
    }

    #[test]
    fn the_default_is_fast_outside_a_runtime() {
        assert!(matches!(Clock::default().source, Source::Counter { .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_round_trips_instants() {
        let clock = Clock::tokio();
        tokio::time::advance(Duration::from_millis(1500)).await;
        let now = clock.now();
        assert_eq!(clock.nanos_at(now), 1_500_000_000);
        assert_eq!(clock.instant_at(clock.nanos_at(now)), now);
    }

    #[test]
    fn instants_before_the_epoch_saturate_to_zero() {
        let before = Instant::now();
        let clock = Clock::tokio();
        assert_eq!(clock.nanos_at(before), 0);
    }

    #[test]
    fn duration_nanos_saturates() {
        assert_eq!(duration_nanos(Duration::new(2, 5)), 2_000_000_005);
        assert_eq!(duration_nanos(Duration::MAX), u64::MAX);
    }

    /// The fast clock counts an interval no longer than the system's clock
    /// does, so its windows are never shorter than the real ones. quanta's
    /// own scale ran up to about 530 ppm fast in debug builds on one
    /// machine: 26 µs over this test's 50 ms, far above the reads' few
    /// hundred nanoseconds.
    #[test]
    fn fast_clock_never_runs_ahead_of_the_system_clock() {
        let clock = Clock::fast();
        for _ in 0..3 {
            let system_before = std::time::Instant::now();
            let before = clock.now_nanos();
            std::thread::sleep(Duration::from_millis(50));
            let after = clock.now_nanos();
            let system = duration_nanos(system_before.elapsed());
            assert!(
                after - before <= system,
                "the fast clock counted {} ns while {system} ns passed",
                after - before
            );
        }
    }

    /// Instants convert from the present, so they stay right however far the
    /// fast clock's count has drifted from the system's since its epoch
    /// (mapped from the epoch, this instant is about 100 µs early after the
    /// 100 ms the clock counts 0.1% slow). Both conversions read the two
    /// clocks in the order that makes a preemption between the reads err
    /// late, never early: the checks are one-sided, so a loaded machine
    /// cannot fail them.
    #[test]
    fn fast_clock_instants_are_relative_to_now() {
        let clock = Clock::fast();
        std::thread::sleep(Duration::from_millis(100));
        let wait = duration_nanos(Duration::from_millis(10));
        let before = system_now();
        let target = clock.now_nanos() + wait;
        let at = clock.instant_at(target);
        let early = (before + Duration::from_nanos(wait)).saturating_duration_since(at);
        assert_eq!(early, Duration::ZERO, "the instant is early");
        let back = clock.nanos_at(at);
        assert!(back + 1_000 >= target, "{} ns early", target - back);
    }

    #[test]
    fn a_late_start_keeps_its_slot_within_the_tolerance() {
        let slot = 50_000_000;
        assert_eq!(paced_from(slot, slot), slot);
        assert_eq!(paced_from(slot, slot + TOLERANCE_NANOS), slot);
        let late = slot + TOLERANCE_NANOS + 1;
        assert_eq!(paced_from(slot, late), late - TOLERANCE_NANOS);
        let latest = slot + LATE_NANOS;
        assert_eq!(paced_from(slot, latest), latest - TOLERANCE_NANOS);
        assert_eq!(paced_from(slot, latest + 1), latest + 1, "idle: from now");
        assert_eq!(paced_from(0, 1_000), 1_000, "fresh: from now");
        assert_eq!(paced_from(slot, slot - 1), slot, "early: the slot");
        assert_eq!(paced_from(u64::MAX, 0), u64::MAX);
        assert_eq!(paced_from(1, u64::MAX), u64::MAX);
    }

    #[test]
    fn a_reading_before_the_epoch_counts_no_time() {
        assert_eq!(counter::nanos_since(u64::MAX), 0);
    }

    #[test]
    fn fast_clock_is_monotonic() {
        let clock = Clock::fast();
        let a = clock.now_nanos();
        let b = clock.now_nanos();
        assert!(b >= a);
    }
}
