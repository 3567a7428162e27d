//! What an [`AdaptiveRateLimiter`](super::AdaptiveRateLimiter) paces calls
//! with, and how a shared one shares its curve.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::plateau::{CurveState, Point};
use crate::error::{ConfigError, LimiterError};
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit};
use crate::limiters::RateLimiter;
use crate::store::{CurveRecord, CurveStore, Quota};

/// What an [`AdaptiveRateLimiter`](super::AdaptiveRateLimiter) paces calls
/// with: a [`RateLimiter`] of a paced GCRA quota in this process
/// ([`build`](super::AdaptiveRateLimiterBuilder::build)), or a
/// [`SharedPacer`]: a GCRA quota and the learned curve in a store, shared
/// by processes ([`build_shared`](super::AdaptiveRateLimiterBuilder::build_shared)).
/// Sealed.
pub trait Pacer: Limiter + Clone + sealed::Sealed {
    /// Paces one call per `interval`, `burst` at once.
    #[doc(hidden)]
    fn set_pace(&self, interval: Duration, burst: u32) -> Result<(), ConfigError>;

    /// The shared curve, if the pacer shares one.
    #[doc(hidden)]
    fn load_curve(&self) -> Option<LimiterFuture<'_, Result<Option<CurveRecord>, LimiterError>>> {
        None
    }

    /// Writes the shared curve over its version; `None` if not shared.
    #[doc(hidden)]
    fn swap_curve(
        &self,
        record: CurveRecord,
    ) -> Option<LimiterFuture<'_, Result<bool, LimiterError>>> {
        let _ = record;
        None
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::RateLimiter {}
    impl<S: super::CurveStore> Sealed for super::SharedPacer<S> {}
}

impl Pacer for RateLimiter {
    fn set_pace(&self, interval: Duration, burst: u32) -> Result<(), ConfigError> {
        self.set_quota(pace(interval, burst)?.with_pacing_tolerance()?);
        Ok(())
    }
}

/// One call per `interval`, `burst` at once.
pub(super) fn pace(interval: Duration, burst: u32) -> Result<Quota, ConfigError> {
    Quota::gcra(1, interval)?.with_burst(burst)
}

/// The pacer of an adaptive limiter shared through a store: a GCRA quota
/// (a [`RateLimiter`]) at the learned rate, and the learned curve itself.
pub struct SharedPacer<S: CurveStore> {
    limiter: RateLimiter<S>,
    curve: std::sync::Arc<S::CurveKey>,
}

impl<S: CurveStore> SharedPacer<S> {
    pub(super) fn new(store: S, name: String) -> Result<Self, ConfigError> {
        let curve = store.curve_key(&name);
        let quota = Quota::gcra(1, Duration::from_secs(1))?;
        Ok(Self {
            limiter: RateLimiter::new(store, name, quota),
            curve: std::sync::Arc::new(curve),
        })
    }
}

impl<S: CurveStore> Clone for SharedPacer<S> {
    fn clone(&self) -> Self {
        Self {
            limiter: self.limiter.clone(),
            curve: std::sync::Arc::clone(&self.curve),
        }
    }
}

impl<S: CurveStore + fmt::Debug> fmt::Debug for SharedPacer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedPacer")
            .field("limiter", &self.limiter)
            .finish_non_exhaustive()
    }
}

impl<S: CurveStore> Pacer for SharedPacer<S> {
    fn set_pace(&self, interval: Duration, burst: u32) -> Result<(), ConfigError> {
        self.limiter.set_quota(pace(interval, burst)?);
        Ok(())
    }

    fn load_curve(&self) -> Option<LimiterFuture<'_, Result<Option<CurveRecord>, LimiterError>>> {
        Some(self.limiter.store().load_curve(&self.curve))
    }

    fn swap_curve(
        &self,
        record: CurveRecord,
    ) -> Option<LimiterFuture<'_, Result<bool, LimiterError>>> {
        Some(self.limiter.store().swap_curve(&self.curve, record))
    }
}

impl<S: CurveStore> Limiter for SharedPacer<S> {
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        self.limiter.try_acquire_many(cost)
    }
    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        self.limiter.can_proceed()
    }
    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        self.limiter.peek(cost)
    }
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.limiter.record_start()
    }
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.limiter.record_completion()
    }
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        self.limiter.next_available_time()
    }
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.limiter.set_next_available_time(at)
    }
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.limiter.clear()
    }
    fn refund(&self, permit: Permit) {
        self.limiter.refund(permit);
    }
    fn settle(&self, permit: &mut Permit, actual: u32) {
        self.limiter.settle(permit, actual);
    }
    fn is_in_use(&self) -> bool {
        self.limiter.is_in_use()
    }
    fn in_flight(&self) -> Option<u64> {
        self.limiter.in_flight()
    }
}

/// Maps this process's instants to Unix time and back, so that processes
/// read each other's curves (their clocks agree to the skew between their
/// machines, which only moves when an overload is judged over).
#[derive(Clone, Copy, Debug)]
pub(super) struct WallClock {
    instant: Instant,
    unix_micros: i64,
}

impl WallClock {
    pub(super) fn now() -> Self {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Self {
            instant: Instant::now(),
            unix_micros: micros(since_epoch),
        }
    }

    fn to_unix(self, at: Instant) -> i64 {
        match at.checked_duration_since(self.instant) {
            Some(after) => self.unix_micros.saturating_add(micros(after)),
            None => self
                .unix_micros
                .saturating_sub(micros(self.instant.duration_since(at))),
        }
    }

    fn to_instant(self, unix_micros: i64) -> Instant {
        let offset = unix_micros.saturating_sub(self.unix_micros);
        let by = Duration::from_micros(offset.unsigned_abs());
        if offset >= 0 {
            self.instant.checked_add(by).unwrap_or(self.instant)
        } else {
            self.instant.checked_sub(by).unwrap_or(self.instant)
        }
    }

    /// `state` as the store keeps it, over `version`.
    pub(super) fn record(self, state: &CurveState, version: u64) -> CurveRecord {
        let optional = |at: Option<Instant>| at.map_or(0, |at| self.to_unix(at));
        CurveRecord::from_words(
            version,
            [
                micro_units(state.plateau),
                micros(state.hold),
                self.to_unix(state.origin),
                optional(state.refused_until),
                state.point.map_or(0, pack),
                state.stated.map_or(0, micro_units),
            ],
        )
    }

    /// The curve a store kept; `None` if its words are not one.
    pub(super) fn state(self, record: &CurveRecord) -> Option<CurveState> {
        let [plateau, hold, origin, refused_until, point, stated] = record.words();
        let state = CurveState {
            plateau: from_micro_units(plateau),
            hold: Duration::from_micros(u64::try_from(hold).ok()?),
            origin: self.to_instant(origin),
            refused_until: (refused_until != 0).then(|| self.to_instant(refused_until)),
            point: unpack(point),
            stated: (stated != 0).then(|| from_micro_units(stated)),
        };
        (state.plateau > 0.0 && state.stated.is_none_or(|rate| rate > 0.0)).then_some(state)
    }
}

/// Bits of a packed [`Point`] that hold its time, in milliseconds (up to
/// 17 minutes); the calls sent, in thousandths, take the 33 bits above
/// (up to 8.5 million): a word of 53 bits, which a script that stores
/// numbers as doubles keeps exact.
const POINT_TIME_BITS: u32 = 20;

/// `point` in one word; 0 (none) if it does not fit.
fn pack(point: Point) -> i64 {
    let after = (point.after * 1e3).round();
    let sent = (point.sent * 1e3).round();
    let fits = (0.0..f64::from(1_u32 << POINT_TIME_BITS)).contains(&after)
        && (0.0..(1_u64 << 33) as f64).contains(&sent);
    if !fits {
        return 0;
    }
    ((sent as i64) << POINT_TIME_BITS) | after as i64
}

fn unpack(word: i64) -> Option<Point> {
    (word > 0).then(|| Point {
        after: (word & ((1 << POINT_TIME_BITS) - 1)) as f64 / 1e3,
        sent: (word >> POINT_TIME_BITS) as f64 / 1e3,
    })
}

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// Millionths, rounded: exact to a millionth of a call per second.
fn micro_units(value: f64) -> i64 {
    (value * 1e6).round() as i64
}

fn from_micro_units(value: i64) -> f64 {
    value as f64 / 1e6
}
