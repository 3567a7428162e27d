//! The rate curve of [`AdaptiveRateLimiter`](super::AdaptiveRateLimiter):
//! a plateau at the upstream's estimated capacity, probed rarely.
//!
//! An upstream that limits a rate (a token bucket, GCRA, nginx's
//! `limit_req`) serves, from a moment its bucket is full, its burst and then
//! its rate: `n = a + C·T` calls in the `T` seconds before it refuses one.
//! A pause it asks for refills the bucket (by `C` a second, from empty at
//! the refusal: a short pause, such as tower_governor's, refills it in
//! part), so two refusals, each after a pause, sent at different rates,
//! are two points of that line: its slope `C` is the capacity. Each
//! estimate replays the bucket along the rate the curve sent at. The
//! curve holds just under the capacity for a long while,
//! then probes above it, slowly at first; a probe refused gives a third
//! point, and the plateau moves to the new estimate.

use std::time::Duration;

use tokio::time::Instant;

use crate::limiters::internals::latency::LowestLatency;

/// How the rate moves; validated by the builder.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Tuning {
    /// Calls per second the rate never goes below.
    pub(super) floor: f64,
    /// Calls per second the rate never goes above.
    pub(super) ceiling: f64,
    /// The factor a refusal multiplies the rate by when the capacity
    /// cannot be estimated yet.
    pub(super) decrease: f64,
    /// Latency above the lowest seen by more than this means the upstream
    /// is queueing: slow down a little, before it refuses.
    pub(super) queueing_delay: Option<Duration>,
    /// How long the rate holds at an estimated capacity before it probes.
    pub(super) hold: Duration,
}

/// How long the lowest latency is remembered: the base latency is the
/// lowest of this period and the one before.
const LATENCY_MEMORY: Duration = Duration::from_secs(10);
/// The time a queue is given to drain: a call that waited a tenth of it in
/// the upstream's queue cuts the rate by a tenth.
const DRAIN: Duration = Duration::from_secs(1);
/// The least cut for a queueing delay.
const GENTLE_DECREASE: f64 = 0.97;
/// The share of the estimated capacity the rate holds at.
const MARGIN: f64 = 0.98;
/// How long the rate holds after a cut that estimated nothing (a refusal
/// from far above, a queueing delay) before it probes.
const SHORT_HOLD: Duration = Duration::from_secs(1);
/// The probe beyond a plateau: the rate grows by this share of the plateau
/// per second cubed after the hold (5 % after 2 s, 40 % after 4 s, twice
/// the plateau after 5.4 s).
const GROWTH: f64 = 0.006_25;
/// Two refusals whose sending times (from their segments' starts) are
/// closer than this do not tell the capacity apart from the burst.
const MIN_SPAN: f64 = 0.2;
/// An estimate that rests on fewer calls than this (at the capacity, in
/// the span between its two refusals) is measured again before the rate
/// holds under it: a call more or less would move it by more than 8 %.
const PRECISE_CALLS: f64 = 12.0;
/// How long after a pause a rate that measures the capacity sends its
/// burst beyond it, and is refused.
const MEASURE: Duration = Duration::from_secs(3);
/// Steps of the integral of the excess over a capacity.
const INTEGRATION_STEPS: u32 = 200;
/// Halvings of the interval the capacity is sought in: to a millionth.
const BISECTIONS: u32 = 20;
/// An estimate below this share of the rate refused is not believed (a
/// bucket that did not refill, a skewed clock): the rate is cut by
/// `decrease` instead.
const LEAST_ESTIMATE: f64 = 0.2;

/// A capacity estimated from refusals.
#[derive(Clone, Copy, Debug)]
struct Estimate {
    /// Calls per second.
    capacity: f64,
    /// The calls served beyond the capacity from a full bucket.
    burst: f64,
    /// The seconds of calls the estimate rests on: a call more or less
    /// moves it by a call in this time.
    span: f64,
}

impl Estimate {
    /// The rate that measures the capacity: its burst beyond it in
    /// [`MEASURE`].
    fn measure(&self) -> f64 {
        self.capacity + self.burst / MEASURE.as_secs_f64()
    }
}

/// What the upstream said about a call: the signals that move the rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Signal {
    /// It refused (or throttled) a call sent at `sent_at`, of `sent` calls
    /// sent since the segment began, if the limiter counted them (else the
    /// curve's rate tells how many were sent).
    Refused { sent_at: Instant, sent: Option<f64> },
    /// It queued a call sent at `sent_at`, of which it waited `queued` in
    /// its queue (the latency above the lowest recent one).
    Queued { sent_at: Instant, queued: Duration },
    /// It stated its quota: calls per second.
    Stated { rate: f64 },
    /// Nothing may start before `until` (it asked for a pause).
    Paused { until: Instant },
}

/// A refusal as a point of the upstream's line: `sent` calls were sent in
/// the `after` seconds from the start of a segment (a pause's end) to the
/// refused call, all served.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Point {
    pub(super) after: f64,
    pub(super) sent: f64,
}

/// The plateau curve: from `origin`, the rate holds at `plateau` for
/// `hold`, then grows by `GROWTH·plateau·t³`, `t` seconds after the hold.
///
/// This is the part processes share through a store; the base latency a
/// process compares its calls with stays its own ([`Curve`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct CurveState {
    /// The rate it holds.
    pub(super) plateau: f64,
    /// How long it holds it from `origin`.
    pub(super) hold: Duration,
    /// The segment's start (a decrease, a pause's end), moved on by the
    /// time the rate went unused.
    pub(super) origin: Instant,
    /// Refusals (and queueing delays) of calls sent before this (or at it)
    /// belong to an overload already reacted to: a burst of refusals is
    /// one decrease, not one each.
    pub(super) refused_until: Option<Instant>,
    /// The last refusal, as a point of the upstream's line.
    pub(super) point: Option<Point>,
    /// The quota the upstream stated, which the rate never exceeds.
    pub(super) stated: Option<f64>,
}

impl CurveState {
    /// A curve at `start` calls per second from `now`, probing from there.
    pub(super) fn new(start: f64, now: Instant) -> Self {
        Self {
            plateau: start,
            hold: Duration::ZERO,
            origin: now,
            refused_until: None,
            point: None,
            stated: None,
        }
    }

    /// The rate at `now`, in calls per second, within the floor and the
    /// ceiling (and the stated quota).
    pub(super) fn rate(&self, tuning: &Tuning, now: Instant) -> f64 {
        let after = now.saturating_duration_since(self.origin).as_secs_f64();
        self.rate_after(tuning, after)
    }

    /// The rate `after` seconds from the segment's start.
    fn rate_after(&self, tuning: &Tuning, after: f64) -> f64 {
        let t = (after - self.hold.as_secs_f64()).max(0.0);
        let curve = self.plateau * (1.0 + GROWTH * t * t * t);
        curve.min(self.ceiling(tuning)).max(tuning.floor)
    }

    fn ceiling(&self, tuning: &Tuning) -> f64 {
        self.stated
            .map_or(tuning.ceiling, |stated| stated.min(tuning.ceiling))
    }

    /// Seconds since the hold ended (0 while it holds).
    fn probing(&self, at: Instant) -> f64 {
        let since = at.saturating_duration_since(self.origin);
        since.saturating_sub(self.hold).as_secs_f64()
    }

    /// Calls sent from the segment's start until `at`, at the curve's rate
    /// (its integral; the callers kept the rate in use).
    fn sent_until(&self, tuning: &Tuning, at: Instant) -> f64 {
        let after = at.saturating_duration_since(self.origin).as_secs_f64();
        let t = self.probing(at);
        let sent = self.plateau * (after + GROWTH * t.powi(4) / 4.0);
        sent.min(self.ceiling(tuning) * after)
    }

    /// Moves the curve for `signal`; true if the rate changed. A refusal
    /// moves the plateau under the estimated capacity (or cuts it by
    /// `decrease`), once per overload; a queueing delay cuts it gently; a
    /// pause holds the curve until it ends; a stated quota is adopted at
    /// once.
    pub(super) fn apply(&mut self, signal: Signal, tuning: &Tuning, now: Instant) -> bool {
        match signal {
            Signal::Refused { sent_at, sent } => {
                if covers(self.refused_until, sent_at) {
                    return false;
                }
                self.refuse(sent_at, sent, tuning, now);
                self.refused_until = Some(now);
            }
            Signal::Queued { sent_at, queued } => {
                if covers(self.refused_until, sent_at) {
                    return false;
                }
                self.settle_below(tuning, now, queued);
            }
            Signal::Paused { until } => {
                // The segment starts when the pause ends: a rate nobody
                // may use neither holds nor grows, and the upstream's
                // bucket refills meanwhile.
                if until <= self.origin {
                    return false;
                }
                self.origin = until;
            }
            Signal::Stated { rate } => {
                if self.stated == Some(rate) {
                    return false;
                }
                self.stated = Some(rate);
                self.restart(rate, tuning.hold, now);
            }
        }
        true
    }

    /// A call sent at `sent_at` was refused: the plateau moves just under
    /// the capacity the upstream's line estimates, and holds there (or, if
    /// the estimate rests on too few calls to tell it to a few percent,
    /// just above it, once, to measure it: the next refusal comes a few
    /// seconds after the pause, from calls that tell it); without an
    /// estimate, to the plateau held before if the refusal ended a probe
    /// beyond it, or else to the rate refused times `decrease` (its square
    /// for the first refusal: the starting rate was a guess), briefly.
    fn refuse(&mut self, sent_at: Instant, sent: Option<f64>, tuning: &Tuning, now: Instant) {
        let rate = self.rate(tuning, sent_at);
        // The upstream's bucket ran dry between the call before and this
        // one: halfway, on average (from far above, the calls are few and
        // a whole spacing would skew the line).
        let after =
            (sent_at.saturating_duration_since(self.origin).as_secs_f64() - 0.5 / rate).max(0.0);
        let point = Point {
            after,
            sent: sent.map_or_else(
                || self.sent_until(tuning, self.origin + Duration::from_secs_f64(after)),
                |sent| (sent - 0.5).max(0.0),
            ),
        };
        let estimate = self
            .estimate(point, tuning)
            .filter(|e| e.capacity >= rate * LEAST_ESTIMATE && e.burst >= 0.5);
        let probed = self.probing(sent_at) > 0.0 && self.hold >= SHORT_HOLD;
        // A brief segment after an estimate (one that measured it, or a
        // cut) is not measured again: a change of limit costs at most three
        // refusals.
        let brief = self.hold == SHORT_HOLD && self.point.is_some_and(|p| p.after == 0.0);
        let (plateau, hold) = match estimate {
            Some(e) if e.capacity * e.span < PRECISE_CALLS && e.measure() < rate && !brief => {
                (e.measure(), SHORT_HOLD)
            }
            Some(e) => (e.capacity * MARGIN, tuning.hold),
            None if probed => (self.plateau, tuning.hold),
            None if self.point.is_none() => (rate * tuning.decrease.powi(2), SHORT_HOLD),
            None => (rate * tuning.decrease, SHORT_HOLD),
        };
        // The line's intercept once it is known (the burst: a point at 0 s),
        // else the first refusal (unless it was sent before the segment
        // began: another process's pause).
        self.point = match estimate {
            Some(e) => Some(Point {
                after: 0.0,
                sent: e.burst,
            }),
            None if self.point.is_none() && after > 0.0 => Some(point),
            None => self.point,
        };
        self.restart(plateau.min(rate), hold, now);
    }

    /// The capacity and burst the refusal at `point` tells, with the last
    /// one (or the burst) known.
    fn estimate(&self, point: Point, tuning: &Tuning) -> Option<Estimate> {
        let paced = self.sent_until(tuning, self.origin + Duration::from_secs_f64(point.after));
        // The calls went out at this share of the curve's rate (a busy
        // machine sends fewer than the pace allows).
        let share = if paced > 0.0 {
            (point.sent / paced).clamp(0.5, 2.0)
        } else {
            1.0
        };
        // The burst is known (a point at 0 s), or the first refusal (from a
        // full bucket, above the capacity from its start) is `a + C·T`: the
        // burst, for each capacity.
        let first = self.point?;
        let burst = |capacity: f64| first.sent - capacity * first.after;
        // A pause shorter than the bucket takes to refill (tower_governor's
        // `Retry-After: 0`) leaves it part full: what the capacity refilled
        // since the last refusal emptied it.
        let refill = self.refilled();
        let level = |capacity: f64| burst(capacity).min(capacity * refill);
        let capacity = self.capacity_beyond((level, burst), point.after, share, tuning)?;
        let burst = burst(capacity);
        // The calls the estimate rests on: since the bucket was full, or
        // since it was empty.
        let mut span = (point.after - first.after).abs();
        if capacity * refill < burst {
            span = point.after + refill;
        }
        (first.after == 0.0 || span >= MIN_SPAN).then_some(Estimate {
            capacity,
            burst,
            span,
        })
    }

    /// Seconds from the last refusal (the upstream's bucket empty) to the
    /// segment's start (the bucket refilling meanwhile); unbounded if none.
    fn refilled(&self) -> f64 {
        self.refused_until.map_or(f64::INFINITY, |at| {
            self.origin.saturating_duration_since(at).as_secs_f64()
        })
    }

    /// The capacity at which the upstream's bucket, holding
    /// `level(capacity)` calls at the segment's start and at most
    /// `burst(capacity)`, runs dry `after` seconds into the segment, with
    /// calls sent at `share` of the curve's rate. `None` if even at the
    /// floor it does not.
    fn capacity_beyond(
        &self,
        (level, burst): (impl Fn(f64) -> f64, impl Fn(f64) -> f64),
        after: f64,
        share: f64,
        tuning: &Tuning,
    ) -> Option<f64> {
        let step = after / f64::from(INTEGRATION_STEPS);
        // The bucket never ran dry at this capacity: it is lower.
        let short = |capacity: f64| {
            let full = burst(capacity);
            let mut held = level(capacity);
            (0..INTEGRATION_STEPS).all(|n| {
                let at = (f64::from(n) + 0.5) * step;
                let rate = self.rate_after(tuning, at) * share;
                held = (held + (capacity - rate) * step).min(full);
                held > 0.0
            })
        };
        let (mut low, mut high) = (tuning.floor, self.rate_after(tuning, after) * share);
        if short(low) {
            return None;
        }
        for _ in 0..BISECTIONS {
            let middle = (low + high) / 2.0;
            if short(middle) {
                high = middle;
            } else {
                low = middle;
            }
        }
        Some(low)
    }

    /// Cuts the rate by the share of [`DRAIN`] a call waited in the
    /// upstream's queue (the queue drains in about that time), by
    /// [`GENTLE_DECREASE`] at least and `decrease` at most, and holds the
    /// cut rate briefly: the upstream queued calls sent at the rate it had.
    fn settle_below(&mut self, tuning: &Tuning, now: Instant, queued: Duration) {
        let share = queued.as_secs_f64() / DRAIN.as_secs_f64();
        let factor = (1.0 - share).clamp(tuning.decrease, GENTLE_DECREASE);
        let rate = self.rate(tuning, now) * factor;
        self.restart(rate, SHORT_HOLD, now);
    }

    /// A new segment from `now`: `plateau` for `hold`, then probing. A
    /// pause in force still holds it (in whichever order a refusal and its
    /// pause reached a shared curve).
    fn restart(&mut self, plateau: f64, hold: Duration, now: Instant) {
        self.plateau = plateau;
        self.hold = hold;
        self.origin = self.origin.max(now);
    }
}

/// Whether a call sent at `sent_at` belongs to an overload that lasted
/// until `until`.
fn covers(until: Option<Instant>, sent_at: Instant) -> bool {
    until.is_some_and(|until| sent_at <= until)
}

/// A process's curve: the shareable [`CurveState`], its tuning, and the
/// base latency of its own calls.
#[derive(Clone, Debug)]
pub(super) struct Curve {
    pub(super) tuning: Tuning,
    pub(super) state: CurveState,
    latency: LowestLatency,
    /// Calls sent before this (or at it) queued in an overload already
    /// reacted to.
    queued_until: Option<Instant>,
    /// The lowest latency of the calls found queued since the last signal
    /// of queueing; `None` once a call was not queued (the queue drained).
    queue_low: Option<Duration>,
    /// How many calls the limiter had granted when the segment began.
    pub(super) granted_before: u64,
}

impl Curve {
    /// A curve at `start` calls per second from `now`, probing from there.
    pub(super) fn new(start: f64, tuning: Tuning, now: Instant) -> Self {
        Self {
            tuning,
            state: CurveState::new(start, now),
            latency: LowestLatency::new(LATENCY_MEMORY, now),
            queued_until: None,
            queue_low: None,
            granted_before: 0,
        }
    }

    /// The signal of a refusal, answered `now`, of a call sent at
    /// `sent_at`, with the calls sent since the segment began until then
    /// (before it) if the limiter counted its grants (`granted` so far,
    /// the refused call's among them, and those since `sent_at` at the
    /// curve's rate).
    pub(super) fn refusal(&self, sent_at: Instant, granted: Option<u64>, now: Instant) -> Signal {
        let since = now.saturating_duration_since(sent_at).as_secs_f64();
        let in_flight = self.rate(sent_at) * since;
        Signal::Refused {
            sent_at,
            sent: granted.map(|granted| {
                let sent = granted.saturating_sub(self.granted_before) as f64;
                (sent - in_flight - 1.0).max(0.0)
            }),
        }
    }

    /// The rate at `now`, in calls per second.
    pub(super) fn rate(&self, now: Instant) -> f64 {
        self.state.rate(&self.tuning, now)
    }

    /// The rate went unused from `unused_from` until `now`: the curve
    /// waits, so that a client that sends little is not allowed a rate it
    /// never tried. Time before the curve's start is not counted: a pause
    /// already moved the start to its end, and a rate nobody may use is
    /// not also unused.
    pub(super) fn hold(&mut self, unused_from: Instant, now: Instant) {
        let from = unused_from.max(self.state.origin);
        self.state.origin += now.saturating_duration_since(from);
    }

    /// Moves the curve for `signal`; true if the rate changed. `granted`:
    /// the calls the limiter granted so far, if it counts them (a segment
    /// that begins counts from there).
    pub(super) fn apply(&mut self, signal: Signal, now: Instant, granted: u64) -> bool {
        if let Signal::Refused { .. } = signal {
            self.queued_until = self.queued_until.max(Some(now));
        }
        let origin = self.state.origin;
        let changed = self.state.apply(signal, &self.tuning, now);
        if self.state.origin != origin {
            self.granted_before = granted;
        }
        changed
    }

    /// The signal of a call sent at `sent_at` that succeeded after
    /// `latency`: queued, if that is the queueing delay above the lowest
    /// recent latency or more, and, while the upstream's queue has not
    /// drained since the last such signal, the queueing delay above the
    /// lowest latency of its calls since (a queue that drains or holds
    /// after a cut is not a new overload; one that grows again is). Calls
    /// sent while a queued call waited belong to its overload.
    pub(super) fn success(
        &mut self,
        sent_at: Instant,
        latency: Duration,
        now: Instant,
    ) -> Option<Signal> {
        let delay = self.tuning.queueing_delay?;
        let base = self.latency.observe(latency, now);
        if latency <= base.saturating_add(delay) {
            self.queue_low = None;
            return None;
        }
        if let Some(low) = self.queue_low
            && latency <= low.saturating_add(delay)
        {
            self.queue_low = Some(low.min(latency));
            return None;
        }
        self.queue_low = Some(latency);
        if covers(self.queued_until, sent_at) {
            return None;
        }
        self.queued_until = Some(now + latency);
        Some(Signal::Queued {
            sent_at,
            queued: latency.saturating_sub(base),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuning() -> Tuning {
        Tuning {
            floor: 1.0,
            ceiling: 1_000.0,
            decrease: 0.5,
            queueing_delay: Some(Duration::from_millis(20)),
            hold: Duration::from_secs(20),
        }
    }

    fn secs(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    fn refused(sent_at: Instant) -> Signal {
        Signal::Refused {
            sent_at,
            sent: None,
        }
    }

    /// A token bucket of 20 a second and a burst of 5, full at `from`,
    /// receiving calls at the curve's rate: the instant it refuses one.
    fn bucket_refuses(curve: &Curve, from: Instant) -> Instant {
        let (mut at, mut tokens) = (from, 6.0);
        loop {
            tokens -= 1.0;
            if tokens < 0.0 {
                return at;
            }
            let step = 1.0 / curve.rate(at);
            at += secs(step);
            tokens = f64::min(tokens + 20.0 * step, 6.0);
        }
    }

    /// Refused at `sent`, then paused for a second.
    fn refuse_and_pause(curve: &mut Curve, sent: Instant) -> Instant {
        assert!(curve.apply(refused(sent), sent, 0));
        let until = sent + secs(1.0);
        curve.apply(Signal::Paused { until }, sent, 0);
        until
    }

    #[test]
    fn two_refusals_after_pauses_find_the_capacity_of_a_token_bucket() {
        let start = Instant::now();
        let mut curve = Curve::new(100.0, tuning(), start);
        let first = bucket_refuses(&curve, start);
        let resumed = refuse_and_pause(&mut curve, first);
        // Nothing to compare it with: a quarter, from far above.
        assert!((curve.rate(resumed) - 25.0).abs() < 1e-3);
        let second = bucket_refuses(&curve, resumed);
        let resumed = refuse_and_pause(&mut curve, second);
        // Two points of `a + 20·T`: just under 20 (a call more or less in
        // each point moves it by a call a second), held for 20 s.
        let rate = curve.rate(resumed);
        assert!((18.5..20.0).contains(&rate), "{rate}");
        assert_eq!(curve.rate(resumed + secs(19.9)), rate);
        assert!(
            curve.rate(resumed + secs(22.0)) > rate * 1.04,
            "then it probes"
        );
    }

    #[test]
    fn a_probe_refused_after_a_hold_returns_under_the_capacity() {
        let start = Instant::now();
        let mut curve = Curve::new(100.0, tuning(), start);
        let mut resumed = start;
        for _ in 0..2 {
            let refusal = bucket_refuses(&curve, resumed);
            resumed = refuse_and_pause(&mut curve, refusal);
        }
        let held = curve.rate(resumed);
        let probe = bucket_refuses(&curve, resumed);
        assert!(probe > resumed + secs(20.0), "not refused while it held");
        let resumed = refuse_and_pause(&mut curve, probe);
        let rate = curve.rate(resumed);
        assert!((held * 0.97..20.0).contains(&rate), "{rate} after {held}");
        assert_eq!(curve.rate(resumed + secs(19.0)), rate, "held again");
    }

    #[test]
    fn refusals_of_one_overload_decrease_once() {
        let start = Instant::now();
        let mut curve = Curve::new(100.0, tuning(), start);
        let later = start + secs(0.1);
        assert!(curve.apply(refused(start), later, 0));
        // Sent before the decrease (or as it happened): the same overload.
        assert!(!curve.apply(refused(start + secs(0.05)), later + secs(0.01), 0));
        assert!(!curve.apply(refused(later), later + secs(0.01), 0));
        assert!(curve.apply(refused(later + secs(0.02)), later + secs(0.03), 0));
        assert!(curve.rate(later + secs(0.03)) <= 25.0);
    }

    #[test]
    fn the_rate_stays_within_floor_ceiling_and_stated_quota() {
        let start = Instant::now();
        let mut curve = Curve::new(2.0, tuning(), start);
        let ms = Duration::from_millis;
        for n in 0..20 {
            let at = start + ms(n);
            curve.apply(refused(at), at, 0);
        }
        assert_eq!(curve.rate(start + ms(20)), 1.0);
        assert_eq!(curve.rate(start + secs(1e6)), 1_000.0);
        let stated = Signal::Stated { rate: 50.0 };
        assert!(curve.apply(stated, start, 0));
        assert_eq!(curve.rate(start), 50.0);
        assert_eq!(curve.rate(start + secs(1e6)), 50.0);
        assert!(
            !curve.apply(stated, start, 0),
            "the same quota again changes nothing"
        );
    }

    #[test]
    fn a_pause_holds_the_curve_until_it_ends() {
        let start = Instant::now();
        let mut curve = Curve::new(100.0, tuning(), start);
        curve.apply(refused(start), start, 0);
        let until = start + secs(1.0);
        assert!(curve.apply(Signal::Paused { until }, start, 0));
        assert_eq!(curve.rate(until + secs(1.0)), 25.0, "held a second");
        assert!(curve.rate(until + secs(3.0)) > 25.5, "then probing");
        assert!(
            !curve.apply(Signal::Paused { until: start }, start, 0),
            "an earlier pause"
        );
    }

    #[test]
    fn a_held_curve_does_not_grow() {
        let start = Instant::now();
        let mut curve = Curve::new(10.0, tuning(), start);
        curve.hold(start, start + secs(100.0));
        assert_eq!(curve.rate(start + secs(100.0)), 10.0);
    }

    #[test]
    fn latency_above_the_base_by_the_queueing_delay_slows_gently() {
        let start = Instant::now();
        let mut curve = Curve::new(20.0, tuning(), start);
        let ms = Duration::from_millis;
        let success = |curve: &mut Curve, sent: Duration, latency: Duration| {
            let signal = curve.success(start + sent, latency, start + sent + latency);
            signal.is_some_and(|signal| curve.apply(signal, start + sent + latency, 0))
        };
        assert!(!success(&mut curve, ms(0), ms(5)));
        assert!(!success(&mut curve, ms(0), ms(24)), "within the delay");
        assert!(success(&mut curve, ms(0), ms(60)));
        // It waited 55 ms above the base: 5.5 % slower.
        assert!((curve.rate(start + ms(60)) - 18.9).abs() < 1e-3);
        // Calls sent while the delayed call waited are the same overload,
        // and so are later ones while the queue drains.
        assert!(!success(&mut curve, ms(30), ms(70)));
        assert!(!success(&mut curve, ms(121), ms(50)));
        assert!(success(&mut curve, ms(121), ms(80)), "the queue grew again");
        // A queue that drains or holds, however long, is not a new overload.
        assert!(!success(&mut curve, ms(300), ms(65)));
        assert!(!success(&mut curve, ms(2_000), ms(84)));
        assert!(success(&mut curve, ms(2_100), ms(86)), "it grew from 65");
        // Once it drained, queueing again is a new overload.
        assert!(!success(&mut curve, ms(2_300), ms(5)));
        assert!(success(&mut curve, ms(2_400), ms(40)));
    }

    #[test]
    fn the_longer_a_call_queued_the_more_the_rate_is_cut() {
        let cut = |queued_ms: u64| {
            let start = Instant::now();
            let mut curve = Curve::new(100.0, tuning(), start);
            let queued = Duration::from_millis(queued_ms);
            let signal = Signal::Queued {
                sent_at: start,
                queued,
            };
            assert!(curve.apply(signal, start, 0));
            curve.rate(start)
        };
        assert!((cut(5) - 97.0).abs() < 1e-9, "gently at least");
        assert!((cut(200) - 80.0).abs() < 1e-9);
        assert!((cut(900) - 50.0).abs() < 1e-9, "as a refusal at most");
    }
}
