//! The Generic Cell Rate Algorithm behind the GCRA and token bucket
//! [`Quota`](crate::store::Quota)s (the stores run it on a
//! line of slots: [`slots`](super::slots)).
//!
//! A token bucket of capacity `B` refilled one token every `T` and GCRA with
//! emission interval `T` and burst `B` admit exactly the same calls; they
//! differ only in how they are configured and what they report. Both keep one
//! number, the *theoretical arrival time* (TAT): the instant at which the
//! bucket would be full again (GCRA's view: when the next cell would be due
//! if calls had come evenly spaced). A call costing `n` takes `n` cells, each
//! `T` long:
//!
//! * it conforms iff `TAT + n·T − B·T ≤ now` (at most `B·T` of cells may be
//!   outstanding ahead of now), which is governor's and redis-cell's test;
//! * it then moves the TAT to `max(TAT, now) + n·T`;
//! * otherwise it may retry at `TAT + n·T − B·T`, the instant it conforms.
//!
//! Because the TAT grows by at least `n·T` per grant and never exceeds
//! `now + B·T` after one, the grants of any closed interval of length `t`
//! cost at most `B + ⌊t / T⌋` in total: the conformance bound.

use std::time::Duration;

use crate::clock::{duration_nanos, paced_from};
use crate::error::ConfigError;

/// The longest `burst × interval` accepted: far beyond any sensible limit,
/// and small enough that adding it to a clock reading never saturates within
/// centuries of uptime.
const MAX_SPAN: u64 = 100 * 365 * 86_400 * 1_000_000_000;

/// What the parameters are called in a limiter's constructor, for
/// [`ConfigError`]s.
#[derive(Clone, Copy)]
pub(crate) struct Names {
    /// The number of cells per period: GCRA's `count`, the bucket's `refill`.
    pub(crate) count: &'static str,
    /// How many cells may go at once: GCRA's `burst`, the bucket's `capacity`.
    pub(crate) burst: &'static str,
}

impl Names {
    /// GCRA's: `count` per period, `burst` at once.
    pub(crate) const GCRA: Self = Self {
        count: "count",
        burst: "burst",
    };
    /// The token bucket's: `refill` per period, `capacity` at once.
    pub(crate) const TOKEN_BUCKET: Self = Self {
        count: "refill",
        burst: "capacity",
    };
}

/// A validated configuration: the emission interval, the burst, and
/// whether a late waiter keeps its slot ([`judge`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct CellConfig {
    /// `T`: nanoseconds per cell.
    interval: u64,
    /// `B`, how many cells may go at once, in the low 32 bits; and in bit
    /// [`PACED`], whether a grant after the TAT counts its cells from up to
    /// [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE) before now
    /// ([`paced_from`]) instead of from now. One word, as the stores keep
    /// it, so reading and comparing a configuration moves no bits.
    burst_word: u64,
}

/// The bit of [`CellConfig`]'s burst word that says it is paced.
const PACED: u64 = 1 << 32;

impl std::fmt::Debug for CellConfig {
    /// The fields a reader knows: the interval, the burst, whether paced.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CellConfig")
            .field("interval", &self.interval)
            .field("burst", &self.burst())
            .field("paced", &self.is_paced())
            .finish()
    }
}

impl CellConfig {
    /// `count` cells per `period`, `burst` at once.
    ///
    /// The interval is `period / count` rounded up to a whole nanosecond, so
    /// the rate is never exceeded; a rate above one cell per nanosecond is
    /// refused rather than silently slowed.
    pub(crate) fn new(
        names: Names,
        count: u64,
        period: Duration,
        burst: u32,
    ) -> Result<Self, ConfigError> {
        if count == 0 {
            return Err(ConfigError::new(names.count, count, "must be at least 1"));
        }
        if period.is_zero() {
            return Err(ConfigError::new(
                "period",
                period,
                "must be longer than zero",
            ));
        }
        let period_nanos = duration_nanos(period);
        if count > period_nanos {
            return Err(ConfigError::new(
                names.count,
                count,
                "must be at most one per nanosecond of `period`",
            ));
        }
        let interval = period_nanos.div_ceil(count);
        if interval > MAX_SPAN {
            return Err(ConfigError::new(
                "period",
                period,
                "divided by the count must be at most 100 years",
            ));
        }
        Self {
            interval,
            burst_word: 1,
        }
        .with_burst(names, burst)
    }

    /// The same rate, `burst` at once.
    pub(crate) fn with_burst(self, names: Names, burst: u32) -> Result<Self, ConfigError> {
        if burst == 0 {
            return Err(ConfigError::new(names.burst, burst, "must be at least 1"));
        }
        if self.interval.saturating_mul(u64::from(burst)) > MAX_SPAN {
            return Err(ConfigError::new(
                names.burst,
                burst,
                "times the emission interval must be at most 100 years",
            ));
        }
        let burst_word = (self.burst_word & PACED) | u64::from(burst);
        Ok(Self { burst_word, ..self })
    }

    /// The same configuration, pacing late waiters ([`judge`]) or not.
    pub(crate) fn paced(self, paced: bool) -> Self {
        let paced = if paced { PACED } else { 0 };
        let burst_word = (self.burst_word & !PACED) | paced;
        Self { burst_word, ..self }
    }

    /// Whether a late waiter keeps its slot.
    #[inline]
    pub(crate) fn is_paced(self) -> bool {
        self.burst_word & PACED != 0
    }

    pub(crate) fn interval(self) -> Duration {
        Duration::from_nanos(self.interval)
    }

    /// `T`, in nanoseconds.
    #[inline]
    pub(crate) fn interval_nanos(self) -> u64 {
        self.interval
    }

    /// The time `cost` cells occupy.
    #[inline]
    pub(crate) fn weight(self, cost: u32) -> u64 {
        self.interval.saturating_mul(u64::from(cost))
    }

    /// `B·T`: how far ahead of now the TAT may run after a grant (at most
    /// [`MAX_SPAN`], checked at construction).
    #[inline]
    pub(crate) fn span(self) -> u64 {
        self.interval * u64::from(self.burst())
    }

    /// `T`, then `B` with the pacing flag above its 32 bits.
    #[inline]
    pub(crate) fn words(self) -> [u64; 2] {
        [self.interval, self.burst_word]
    }

    #[inline]
    pub(crate) fn from_words([interval, word]: [u64; 2]) -> Self {
        // Only `words` writes them.
        Self {
            interval,
            burst_word: word,
        }
    }

    #[inline]
    pub(crate) fn burst(self) -> u32 {
        self.burst_word as u32
    }
}

/// The GCRA test under `config`: the TAT a grant of `cost` leaves, or
/// the instant it would be granted. A cost above the burst (possible
/// only if a retune lowered it since the caller's
/// check) is told to retry now, when the check refuses it.
///
/// A paced configuration's grant that comes after the TAT counts its cells
/// from there, or from
/// [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE) (τ) before now if
/// the TAT is further behind (see [`paced_from`]), so that a waiter woken
/// late on tokio's millisecond timer does not cost the rate its slot. The
/// same calls conform either way; only the TAT a grant leaves may be
/// earlier, by at most τ. Each grant still moves the TAT by at least
/// `n·T`, and leaves it no earlier than `now − τ + n·T` and no later than
/// `now + B·T`, so the grants of any closed interval of length `t` cost at
/// most `B + ⌊(t + τ) / T⌋` (`B + ⌊t / T⌋` unpaced).
#[inline]
pub(crate) fn judge(
    config: CellConfig,
    now: u64,
    not_before: u64,
    tat: u64,
    cost: u32,
) -> Result<u64, u64> {
    if cost > config.burst() {
        return Err(now);
    }
    let weight = config.weight(cost);
    let conforms_at = tat.saturating_add(weight).saturating_sub(config.span());
    let ready_at = conforms_at.max(not_before);
    if ready_at > now {
        Err(ready_at)
    } else if config.is_paced() {
        Ok(paced_from(tat, now).saturating_add(weight))
    } else {
        Ok(tat.max(now).saturating_add(weight))
    }
}

/// A TAT of the old interval as one of the new: the lead over `now` (the
/// cells spent and not yet refilled) scaled by `new / old`, so that the
/// cells spent stay spent at the new rate. A full bucket (no lead) stays
/// as it is.
pub(crate) fn rescale(tat: u64, now: u64, old: u64, new: u64) -> u64 {
    let Some(lead) = tat.checked_sub(now).filter(|&lead| lead > 0) else {
        return tat;
    };
    let lead = u128::from(lead) * u128::from(new) / u128::from(old.max(1));
    now.saturating_add(u64::try_from(lead).unwrap_or(u64::MAX))
}
