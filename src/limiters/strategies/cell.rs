//! The in-memory state of [`GcraLimiter`](crate::GcraLimiter) and
//! [`GcraLimiter::token_bucket`](crate::GcraLimiter::token_bucket): one atomic TAT and one
//! atomic pause, decided on by [`judge`] with a paced configuration:
//! GCRA's test, a late caller taking its cells from at most
//! [`PACING_TOLERANCE`](crate::clock::PACING_TOLERANCE) back (see
//! [`crate::algorithms::gcra`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use tokio::time::Instant;

use crate::algorithms::gcra::{CellConfig, judge, rescale};
use crate::clock::Clock;
use crate::error::{CostTooHigh, LimiterError};
use crate::limiter::{Admission, Denial, Permit, ReleaseEvent};
use crate::limiters::internals::seq_cell::SeqCell;
use crate::quota_status::{QuotaStatus, search};

/// The shared state: one TAT and one pause, each a single atomic word.
///
/// Laid out in the order a decision reads it, so that the fields it touches
/// share as few cache lines as they can: a keyed limiter holds one of these
/// per key, mostly out of cache.
#[repr(C)]
pub(super) struct Cells {
    /// The theoretical arrival time, in nanoseconds since the clock's epoch;
    /// 0 (or anything up to now) is a full bucket. Every grant writes it:
    /// on a cache line of its own, threads deciding at once do not also
    /// take from each other the line of what decisions only read.
    tat: CachePadded<AtomicU64>,
    /// Nanoseconds since the clock's epoch before which nothing starts.
    not_before: AtomicU64,
    /// The [`CellConfig`]: `T` and `B`, which [`retune`](Cells::retune)
    /// changes at runtime.
    config: SeqCell<2>,
    clock: Clock,
    /// Fired when a refund or `clear` gives cells back early.
    reopened: ReleaseEvent,
}

/// One decision (or the look at one), in nanoseconds since the clock's epoch.
#[derive(Clone, Copy, Debug)]
pub(super) struct Outcome {
    /// The configuration the decision was made under.
    pub(super) config: CellConfig,
    pub(super) now: u64,
    /// The TAT after the decision (for a look: as the decision would leave it).
    pub(super) tat: u64,
    /// The pause in force: nothing starts before it.
    pub(super) not_before: u64,
    /// `None` if granted; otherwise when the call would be.
    pub(super) retry_at: Option<u64>,
}

impl Outcome {
    /// How many cells could go at once after this, ignoring any pause:
    /// `⌊(now + B·T − max(TAT, now)) / T⌋`.
    pub(super) fn available(&self) -> u32 {
        let (config, now) = (self.config, self.now);
        let room = now
            .saturating_add(config.span())
            .saturating_sub(self.tat.max(now));
        // room <= span = burst × interval, so the quotient fits.
        u32::try_from(room / config.interval_nanos()).unwrap_or(config.burst())
    }
}

impl Cells {
    /// A full bucket, shared by the handles of one limiter.
    pub(super) fn shared(config: CellConfig, clock: Clock) -> Arc<Self> {
        Self::with_tat(config, clock, 0)
    }

    /// A bucket whose TAT is `tat`, with no pause; it paces late waiters.
    pub(super) fn with_tat(config: CellConfig, clock: Clock, tat: u64) -> Arc<Self> {
        Arc::new(Self {
            config: SeqCell::new(config.paced(true).words()),
            tat: CachePadded::new(AtomicU64::new(tat)),
            not_before: AtomicU64::new(0),
            reopened: ReleaseEvent::new(),
            clock,
        })
    }

    /// The configuration in force.
    #[inline]
    pub(super) fn config(&self) -> CellConfig {
        CellConfig::from_words(self.config.load())
    }

    /// `Ok` if `cost` can ever be granted under `config`; else
    /// [`CostTooHigh`].
    #[inline]
    fn check(config: CellConfig, cost: u32) -> Result<(), LimiterError> {
        if cost <= config.burst() {
            return Ok(());
        }
        Err(too_high(cost, config.burst()))
    }

    /// Reads the clock and both words (`SeqCst`, as [`ReleaseEvent`]
    /// requires of the second look).
    #[inline]
    fn read(&self) -> (u64, u64, u64) {
        let now = self.clock.now_nanos();
        let not_before = self.not_before.load(Ordering::SeqCst);
        (now, not_before, self.tat.load(Ordering::SeqCst))
    }

    /// Decides under `config` and, if the call conforms, takes its cells:
    /// one CAS loop. A failed CAS may be a [`retune`](Cells::retune), so
    /// each further attempt reads the configuration afresh.
    #[inline(always)]
    fn decide(&self, mut config: CellConfig, cost: u32) -> Outcome {
        let (now, not_before, mut tat) = self.read();
        loop {
            let next = match judge(config, now, not_before, tat, cost) {
                Ok(next) => next,
                Err(at) => {
                    let retry_at = Some(at);
                    return Outcome {
                        config,
                        now,
                        tat,
                        not_before,
                        retry_at,
                    };
                }
            };
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    let tat = next;
                    return Outcome {
                        config,
                        now,
                        tat,
                        not_before,
                        retry_at: None,
                    };
                }
                Err(current) => (tat, config) = (current, self.config()),
            }
        }
    }

    /// What [`decide`](Cells::decide) would answer now, taking nothing.
    pub(super) fn look(&self, cost: u32) -> Result<Outcome, LimiterError> {
        let config = self.config();
        Self::check(config, cost)?;
        let (now, not_before, tat) = self.read();
        let outcome = match judge(config, now, not_before, tat, cost) {
            Ok(next) => Outcome {
                config,
                now,
                tat: next,
                not_before,
                retry_at: None,
            },
            Err(at) => Outcome {
                config,
                now,
                tat,
                not_before,
                retry_at: Some(at),
            },
        };
        Ok(outcome)
    }

    /// The admission an outcome stands for. A grant's token is the TAT it
    /// left, which is what its refund checks.
    #[inline]
    fn admission(&self, outcome: Outcome, cost: u32) -> Admission {
        match outcome.retry_at {
            None => Admission::Granted(grant(outcome.tat, cost)),
            Some(at) => Admission::Denied(Denial::until(self.clock.instant_at(at))),
        }
    }

    /// The atomic acquire: decide; on a denial listen, then decide once more,
    /// so that a refund, `clear` or looser limit in between wakes the caller.
    /// [`CostTooHigh`] if `cost` is above the burst.
    #[inline(always)]
    pub(super) fn admit(&self, cost: u32) -> Result<Admission, LimiterError> {
        let config = self.config();
        Self::check(config, cost)?;
        // The grant path stays small enough to inline into the caller.
        Ok(match self.decide(config, cost) {
            Outcome {
                retry_at: None,
                tat,
                ..
            } => Admission::Granted(grant(tat, cost)),
            _ => self.admit_or_listen(cost),
        })
    }

    /// Takes one cell if one conforms now, else names when one will: the
    /// decision of [`admit`](Cells::admit) without a permit, for callers
    /// that only want to know whether to go.
    #[inline(always)]
    pub(super) fn check_one(&self) -> Result<(), Instant> {
        match self.decide(self.config(), 1).retry_at {
            None => Ok(()),
            Some(at) => Err(self.clock.instant_at(at)),
        }
    }

    #[cold]
    fn admit_or_listen(&self, cost: u32) -> Admission {
        self.reopened
            .decide(|| self.admission(self.decide(self.config(), cost), cost))
    }

    /// [`admit`](Cells::admit), also returning the outcome of the final
    /// decision.
    pub(super) fn admit_reporting(&self, cost: u32) -> Result<(Admission, Outcome), LimiterError> {
        Self::check(self.config(), cost)?;
        let last = std::cell::Cell::new(None);
        let admission = self.reopened.decide(|| {
            let outcome = self.decide(self.config(), cost);
            last.set(Some(outcome));
            self.admission(outcome, cost)
        });
        let outcome = last.get().expect("`decide` decides at least once");
        Ok((admission, outcome))
    }

    /// Whether one cell could go now.
    pub(super) fn can_proceed(&self) -> bool {
        let (now, not_before, tat) = self.read();
        judge(self.config(), now, not_before, tat, 1).is_ok()
    }

    /// The quota (the burst, refilled from empty in `B·T`), how many cells
    /// could go now and how long until more could: one reading of the state.
    pub(super) fn quota_status(&self) -> QuotaStatus {
        let config = self.config();
        let (now, not_before, tat) = self.read();
        quota_status(config, now, not_before, tat)
    }

    /// The denial a call costing `cost` would get now, if any.
    pub(super) fn peek(&self, cost: u32) -> Result<Option<Denial>, LimiterError> {
        let outcome = self.look(cost)?;
        Ok(outcome
            .retry_at
            .map(|at| Denial::until(self.clock.instant_at(at))))
    }

    /// Takes one cell whether or not it conforms (the interface's `record_start`):
    /// a start the limiter did not admit still counts against later ones.
    pub(super) fn take_one(&self) {
        let now = self.clock.now_nanos();
        let interval = self.config().interval_nanos();
        self.move_tat(|tat| tat.max(now).saturating_add(interval));
    }

    /// When one cell could go: the later of now, the pause and the instant
    /// one cell conforms.
    pub(super) fn next_available(&self) -> Instant {
        let (now, not_before, tat) = self.read();
        let config = self.config();
        let conforms_at = tat
            .saturating_add(config.interval_nanos())
            .saturating_sub(config.span());
        self.clock.instant_at(now.max(not_before).max(conforms_at))
    }

    /// Nothing starts before `at`; an earlier instant than a pause already
    /// in force changes nothing (a pause never shortens a wait).
    pub(super) fn pause_until(&self, at: Instant) {
        let at = self.clock.nanos_at(at);
        self.not_before.fetch_max(at, Ordering::SeqCst);
    }

    /// Changes the rate and burst from the next decision on, keeping what
    /// was spent: the cells taken recently (the TAT's lead over now) still
    /// count, rescaled to the new interval, against the new burst. Wakes
    /// denied callers, in case the new limit admits them sooner.
    ///
    /// A decision racing with the change is made under one configuration
    /// or the other, never a mix.
    pub(super) fn retune(&self, config: CellConfig) {
        let config = config.paced(true);
        let old = self.config();
        self.config.store_then(config.words(), || {
            let now = self.clock.now_nanos();
            self.move_tat(|tat| rescale(tat, now, old.interval_nanos(), config.interval_nanos()));
        });
        self.reopened.notify();
    }

    /// Back to a full bucket with no pause; wakes denied callers.
    pub(super) fn clear(&self) {
        self.not_before.store(0, Ordering::SeqCst);
        self.tat.store(0, Ordering::SeqCst);
        self.reopened.notify();
    }

    /// Gives the permit's cells back if the TAT is still where its grant
    /// left it: nothing was granted, recorded or cleared since. Otherwise
    /// the cells stay spent, since returning them could let a later grant
    /// exceed the rate.
    pub(super) fn refund(&self, permit: Permit) {
        if let (Some(tat), cost) = permit.disarm() {
            self.give_back(tat, cost);
        }
    }

    /// Makes a granted permit cost `actual` cells, at most the burst: gives
    /// the difference back on the rules of [`refund`](Cells::refund), or
    /// charges the extra cells as if the grant had taken them (a charge can
    /// push the TAT past the burst, by one burst at most; later calls then
    /// wait for it).
    pub(super) fn settle(&self, permit: &mut Permit, actual: u32) {
        let (Some(tat), cost) = (permit.token(), permit.cost()) else {
            return;
        };
        let actual = actual.min(self.config().burst());
        let token = match actual.checked_sub(cost) {
            None => self.give_back(tat, cost - actual),
            Some(extra) => self.charge(tat, extra),
        };
        permit.settled(actual, token);
    }

    /// Returns `cells` of a grant that left the TAT at `tat`, if nothing
    /// moved it since; the TAT the grant now stands for, if so.
    fn give_back(&self, tat: u64, cells: u32) -> Option<u64> {
        let earlier = tat.saturating_sub(self.config().weight(cells));
        if earlier == tat {
            return Some(tat);
        }
        self.tat
            .compare_exchange(tat, earlier, Ordering::SeqCst, Ordering::Relaxed)
            .ok()?;
        self.reopened.notify();
        Some(earlier)
    }

    /// Adds `cells` to a grant that left the TAT at `tat`; the TAT the grant
    /// now stands for, if nothing moved it since.
    fn charge(&self, tat: u64, cells: u32) -> Option<u64> {
        let extra = self.config().weight(cells);
        let before = self.move_tat(|current| current.saturating_add(extra));
        (before == tat).then(|| tat.saturating_add(extra))
    }

    /// Moves the TAT by `change`, whatever it is; the TAT before.
    fn move_tat(&self, change: impl Fn(u64) -> u64) -> u64 {
        let change = |tat| Some(change(tat));
        match self
            .tat
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, change)
        {
            Ok(before) | Err(before) => before,
        }
    }

    pub(super) fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The TAT, if it is all the state there is: the configuration is
    /// `config` and no pause is in force (a pause that has ended changes no
    /// later decision, since the clock only moves forward).
    pub(super) fn inline_tat(&self, config: CellConfig) -> Option<u64> {
        if self.config() != config {
            return None;
        }
        let (now, not_before, tat) = self.read();
        (not_before <= now).then_some(tat)
    }
}

/// The quota of cells in this state: the burst, refilled from empty in
/// `B·T`; how many cells could go at `now`, and how long until more could.
pub(crate) fn quota_status(config: CellConfig, now: u64, not_before: u64, tat: u64) -> QuotaStatus {
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
pub(crate) fn too_high(cost: u32, burst: u32) -> LimiterError {
    LimiterError::new(CostTooHigh::new(cost, u64::from(burst)))
}

/// The permit for a grant that left the TAT at `tat`.
#[inline]
pub(crate) fn grant(tat: u64, cost: u32) -> Permit {
    let permit = Permit::with_token(tat);
    // Its cost is 1 already; `with_cost` is not inlined across crates.
    if cost == 1 {
        permit
    } else {
        permit.with_cost(cost)
    }
}
