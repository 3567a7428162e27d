//! [`InlineState`]: a keyed limiter's key kept as one number (a GCRA TAT)
//! in the keyed limiter's own map while nothing else needs its limiter.

use std::fmt;
use std::time::Duration;

use crate::algorithms::gcra::{CellConfig, judge};
use crate::clock::Clock;
use crate::error::{CostTooHigh, LimiterError};
use crate::limiter::{Admission, Denial, Permit};
use crate::quota_status::{QuotaStatus, search};

/// How a [`KeyedLimiter`](crate::KeyedLimiter) keeps a key's state in its
/// own map, as a plain number beside the key, while nothing else needs the
/// key's limiter: the form of a GCRA or token bucket template
/// (a [`RateLimiter`](crate::RateLimiter) of such a quota on a
/// [`MemoryStore`](crate::store::MemoryStore)), whose state is one number
/// (the TAT) and whose configuration every key shares. Got from
/// [`FreshLimiter::inline_state`](crate::limiters::FreshLimiter::inline_state); only
/// this crate's limiters make one.
///
/// A key kept inline is decided with no allocation of its own and no
/// second pointer to follow, by the same test as its limiter would apply.
/// When a handle to the key's limiter is asked for
/// ([`KeyedLimiter::limiter`](crate::KeyedLimiter::limiter), or a
/// [`KeyedLimitLayer`](crate::limit::KeyedLimitLayer) call, which admits through
/// the key's limiter and its line of waiting callers), the limiter is made
/// from that number. At the key's next decision through the keyed limiter,
/// if no handle is held, the pause set through one is over and the
/// configuration is the template's again, the key goes back inline. One
/// difference in waiting, none in deciding: a call denied on an inline key
/// waits for the instant it was given, where a limiter's denial also wakes
/// early if a refund or `clear` through a handle frees cells before then.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::limiters::FreshLimiter;
/// use tower_limits::store::Quota;
/// use tower_limits::{ConcurrencyLimiter, RateLimiter};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let gcra = RateLimiter::in_memory(Quota::gcra(10, Duration::from_secs(1))?);
/// assert!(gcra.inline_state().is_some());
/// assert!(ConcurrencyLimiter::new(4)?.inline_state().is_none()); // it counts running calls
/// # Ok(())
/// # }
/// ```
pub struct InlineState<L> {
    /// The template's configuration, which every key's state is read under.
    config: CellConfig,
    /// The clock the template's state reads.
    clock: Clock,
    template: L,
    /// A limiter like the template whose state is a TAT.
    make: fn(&L, u64) -> L,
    /// A limiter's state as a TAT, if that is all it holds under the
    /// template's configuration.
    tat_of: fn(&L, &L) -> Option<u64>,
}

impl<L> InlineState<L> {
    /// The inline form of the limiters made like `template`, whose GCRA
    /// state reads `clock` under `config`.
    pub(crate) fn new(
        config: CellConfig,
        clock: Clock,
        template: L,
        make: fn(&L, u64) -> L,
        tat_of: fn(&L, &L) -> Option<u64>,
    ) -> Self {
        Self {
            config,
            clock,
            template,
            make,
            tat_of,
        }
    }

    /// A fresh key's state: a full bucket.
    pub(crate) const FRESH: u64 = 0;

    /// A limiter's admission on a TAT held inline, by the caller's lock:
    /// the same test ([`judge`]), the same permit, the same instant on a
    /// denial. Nobody else can move an inline TAT, so there is no one to
    /// listen for.
    pub(crate) fn admit(&self, tat: &mut u64, cost: u32) -> Result<Admission, LimiterError> {
        if !self.fits(cost) {
            return Err(too_high(cost, self.config.burst()));
        }
        let decision = self.decide(self.now(), tat, cost);
        Ok(self.admission(decision, cost))
    }

    /// Whether a call costing `cost` can ever be granted: at most the burst.
    #[inline(always)]
    pub(crate) fn fits(&self, cost: u32) -> bool {
        cost <= self.config.burst()
    }

    /// The clock reading to decide at, taken before the lock (as a
    /// limiter's CAS loop reads it before its CAS).
    #[inline(always)]
    pub(crate) fn now(&self) -> u64 {
        self.clock.now_nanos()
    }

    /// The GCRA test at `now` for a cost that [fits](Self::fits): on a
    /// grant, moves `tat` and returns it; else when the call would conform.
    #[inline(always)]
    pub(crate) fn decide(&self, now: u64, tat: &mut u64, cost: u32) -> Result<u64, u64> {
        let next = judge(self.config, now, 0, *tat, cost)?;
        *tat = next;
        Ok(next)
    }

    /// The admission a decision stands for: a grant's permit carries the
    /// TAT it left, as a limiter's does.
    #[inline(always)]
    pub(crate) fn admission(&self, decision: Result<u64, u64>, cost: u32) -> Admission {
        match decision {
            Ok(tat) => Admission::Granted(grant(tat, cost)),
            Err(at) => Admission::Denied(Denial::until(self.clock.instant_at(at))),
        }
    }

    /// [`Limiter::quota_status`](crate::Limiter::quota_status) of a key
    /// whose state is `tat`, read in place.
    pub(crate) fn quota_status(&self, tat: u64) -> QuotaStatus {
        quota_status(self.config, self.now(), 0, tat)
    }

    /// The limiter of a key whose state is `tat`.
    pub(crate) fn limiter(&self, tat: u64) -> L {
        (self.make)(&self.template, tat)
    }

    /// `limiter`'s state as a TAT, if it holds nothing more: its
    /// configuration is the template's and no pause is in force. The caller
    /// makes sure that no handle to it is held.
    pub(crate) fn tat_of(&self, limiter: &L) -> Option<u64> {
        (self.tat_of)(&self.template, limiter)
    }
}

impl<L> fmt::Debug for InlineState<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InlineState")
            .field("interval", &self.config.interval())
            .field("burst", &self.config.burst())
            .finish_non_exhaustive()
    }
}

/// The quota of cells in this state: the burst, refilled from empty in
/// `B·T`; how many cells could go at `now`, and how long until more could.
fn quota_status(config: CellConfig, now: u64, not_before: u64, tat: u64) -> QuotaStatus {
    let blocked = |cost| judge(config, now, not_before, tat, cost).err();
    let (remaining, at) = search(config.burst(), blocked);
    QuotaStatus::new(
        u64::from(config.burst()),
        Duration::from_nanos(config.span()),
        u64::from(remaining),
        at.map(|at| Duration::from_nanos(at.saturating_sub(now))),
    )
}

/// [`CostTooHigh`] for a cost above the burst.
#[cold]
fn too_high(cost: u32, burst: u32) -> LimiterError {
    LimiterError::new(CostTooHigh::new(cost, u64::from(burst)))
}

/// The permit for a grant that left the TAT at `tat`.
#[inline]
fn grant(tat: u64, cost: u32) -> Permit {
    let permit = Permit::with_token(tat);
    // Its cost is 1 already; `with_cost` is not inlined across crates.
    if cost == 1 {
        permit
    } else {
        permit.with_cost(cost)
    }
}
