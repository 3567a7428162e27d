//! The rate curve of [`AdaptiveRateLimiter`](super::AdaptiveRateLimiter):
//! CUBIC, as in TCP CUBIC (RFC 9438) and the AWS SDKs' adaptive retry mode.

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
    /// The factor a refusal multiplies the rate by.
    pub(super) decrease: f64,
    /// The factor the shortest queueing delay multiplies the rate by (a
    /// longer one cuts more, up to `decrease`).
    pub(super) gentle_decrease: f64,
    /// CUBIC's `C`, in calls per second per second cubed.
    pub(super) growth: f64,
    /// Latency above the lowest seen by more than this means the upstream
    /// is queueing: slow down a little, before it refuses.
    pub(super) queueing_delay: Option<Duration>,
}

/// How long the lowest latency is remembered: the base latency is the
/// lowest of this period and the one before.
const LATENCY_MEMORY: Duration = Duration::from_secs(10);
/// The time a queue is given to drain: a call that waited a tenth of it in
/// the upstream's queue cuts the rate by a tenth.
const DRAIN: Duration = Duration::from_secs(1);

/// What the upstream said about a call: the signals that move the rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Signal {
    /// It refused (or throttled) a call sent at `sent_at`.
    Refused { sent_at: Instant },
    /// It queued a call sent at `sent_at`, answered after `latency`, of
    /// which it waited `queued` in the upstream's queue (the latency above
    /// the lowest recent one).
    Queued {
        sent_at: Instant,
        latency: Duration,
        queued: Duration,
    },
    /// It stated its quota: calls per second.
    Stated { rate: f64 },
    /// Nothing may start before `until` (it asked for a pause).
    Paused { until: Instant },
}

/// The CUBIC curve: after a decrease at `origin` from the rate `w_max`, the
/// rate is `C·(t − K)³ + w_max` at `t` seconds, where `K` is the time it
/// takes to climb back to `w_max`. It climbs fast at first, flattens near
/// the rate that was refused, and probes beyond it slowly, then faster.
///
/// This is the part processes share through a store; the base latency a
/// process compares its calls with stays its own ([`Curve`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct CurveState {
    /// The rate at the last decrease: the curve's plateau.
    pub(super) w_max: f64,
    /// Seconds from the decrease to the plateau.
    pub(super) k: f64,
    /// The curve's start, moved on by the time the rate went unused.
    pub(super) origin: Instant,
    /// Refusals of calls sent before this (or at it) belong to an overload
    /// already reacted to: a burst of refusals is one decrease, not one
    /// each.
    pub(super) refused_until: Option<Instant>,
    /// Likewise for queueing delays, which a refusal also covers; a
    /// refusal after a queueing delay still counts (the stronger signal).
    pub(super) queued_until: Option<Instant>,
    /// The quota the upstream stated, which the rate never exceeds.
    pub(super) stated: Option<f64>,
}

impl CurveState {
    /// A curve at `start` calls per second from `now`, growing from there.
    pub(super) fn new(start: f64, now: Instant) -> Self {
        Self {
            w_max: start,
            k: 0.0,
            origin: now,
            refused_until: None,
            queued_until: None,
            stated: None,
        }
    }

    /// The rate at `now`, in calls per second, within the floor and the
    /// ceiling (and the stated quota).
    pub(super) fn rate(&self, tuning: &Tuning, now: Instant) -> f64 {
        let t = now.saturating_duration_since(self.origin).as_secs_f64() - self.k;
        let curve = tuning.growth * t * t * t + self.w_max;
        let ceiling = self
            .stated
            .map_or(tuning.ceiling, |stated| stated.min(tuning.ceiling));
        curve.min(ceiling).max(tuning.floor)
    }

    /// Moves the curve for `signal`; true if the rate changed. A refusal is
    /// a multiplicative decrease, once per overload; a queueing delay a
    /// gentle one that the curve does not climb back from, with calls sent
    /// while the delayed call waited in the same overload; a pause holds the
    /// climb until it ends; a stated quota is adopted at once.
    pub(super) fn apply(&mut self, signal: Signal, tuning: &Tuning, now: Instant) -> bool {
        match signal {
            Signal::Refused { sent_at } => {
                if covers(self.refused_until, sent_at) {
                    return false;
                }
                self.decrease(tuning, now);
                self.refused_until = Some(now);
                self.queued_until = self.queued_until.max(Some(now));
            }
            Signal::Queued {
                sent_at,
                latency,
                queued,
            } => {
                if covers(self.queued_until, sent_at) {
                    return false;
                }
                self.settle_below(tuning, now, queued);
                self.queued_until = Some(now + latency);
            }
            Signal::Paused { until } => {
                // The climb since the last decrease starts when the pause
                // ends: a rate nobody may use does not grow.
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
                self.w_max = rate;
                self.k = 0.0;
                self.origin = now;
            }
        }
        true
    }

    /// Multiplies the rate by the refusal factor now; the curve climbs back
    /// from there to the rate it had, or, when that was still below the last
    /// plateau (the limit went down), to a lower plateau between the two
    /// (CUBIC's fast convergence, RFC 9438 §4.7).
    fn decrease(&mut self, tuning: &Tuning, now: Instant) {
        let factor = tuning.decrease;
        let rate = self.rate(tuning, now);
        let plateau = if rate < self.w_max {
            rate * (1.0 + factor) / 2.0
        } else {
            rate
        };
        self.k = ((plateau - rate * factor) / tuning.growth).cbrt();
        self.w_max = plateau;
        // A pause in force still holds the climb (in whichever order the
        // refusal and its pause reached a shared curve).
        self.origin = self.origin.max(now);
    }

    /// Cuts the rate by the share of [`DRAIN`] a call waited in the
    /// upstream's queue (the queue drains in about that time), by
    /// `gentle_decrease` at least and `decrease` at most, and makes the cut
    /// rate the plateau: the upstream queued calls sent at the rate it had,
    /// so the curve does not climb back to it; it only probes beyond, slowly
    /// at first. (A fixed gentle cut that climbed back, as after a refusal,
    /// held the rate above a leaky bucket's for seconds at a time, until its
    /// queue overflowed.)
    fn settle_below(&mut self, tuning: &Tuning, now: Instant, queued: Duration) {
        let share = queued.as_secs_f64() / DRAIN.as_secs_f64();
        let factor = (1.0 - share).clamp(tuning.decrease, tuning.gentle_decrease);
        self.w_max = self.rate(tuning, now) * factor;
        self.k = 0.0;
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
    /// The lowest latency of the calls found queued since the last signal
    /// of queueing; `None` once a call was not queued (the queue drained).
    queue_low: Option<Duration>,
}

impl Curve {
    /// A curve at `start` calls per second from `now`, growing from there.
    pub(super) fn new(start: f64, tuning: Tuning, now: Instant) -> Self {
        Self {
            tuning,
            state: CurveState::new(start, now),
            latency: LowestLatency::new(LATENCY_MEMORY, now),
            queue_low: None,
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

    /// Moves the curve for `signal`; true if the rate changed.
    pub(super) fn apply(&mut self, signal: Signal, now: Instant) -> bool {
        self.state.apply(signal, &self.tuning, now)
    }

    /// The signal of a call sent at `sent_at` that succeeded after
    /// `latency`: queued, if that is the queueing delay above the lowest
    /// recent latency or more, and, while the upstream's queue has not
    /// drained since the last such signal, the queueing delay above the
    /// lowest latency of its calls since (a queue that drains or holds
    /// after a cut is not a new overload; one that grows again is).
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
        Some(Signal::Queued {
            sent_at,
            latency,
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
            decrease: 0.7,
            gentle_decrease: 0.97,
            growth: 0.4,
            queueing_delay: Some(Duration::from_millis(20)),
        }
    }

    fn secs(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    fn refused(sent_at: Instant) -> Signal {
        Signal::Refused { sent_at }
    }

    #[test]
    fn a_refusal_cuts_the_rate_then_it_climbs_back_to_the_plateau() {
        let start = Instant::now();
        let mut curve = Curve::new(100.0, tuning(), start);
        assert!(curve.apply(refused(start), start));
        assert!((curve.rate(start) - 70.0).abs() < 1e-9);
        // K = cbrt(100 × 0.3 / 0.4) ≈ 4.22 s back to 100, flat around it.
        let k = (100.0_f64 * 0.3 / 0.4).cbrt();
        assert!((curve.rate(start + secs(k)) - 100.0).abs() < 1e-9);
        assert!(curve.rate(start + secs(k / 2.0)) > 95.0);
        assert!(curve.rate(start + secs(k + 1.0)) < 100.5);
    }

    #[test]
    fn refusals_of_one_overload_decrease_once() {
        let start = Instant::now();
        let mut curve = Curve::new(100.0, tuning(), start);
        let later = start + secs(0.1);
        assert!(curve.apply(refused(start), later));
        // Sent before the decrease (or as it happened): the same overload.
        assert!(!curve.apply(refused(start + secs(0.05)), later + secs(0.01)));
        assert!(!curve.apply(refused(later), later + secs(0.01)));
        assert!(curve.apply(refused(later + secs(0.02)), later + secs(0.03)));
        assert!(curve.rate(later + secs(0.03)) < 50.0);
    }

    #[test]
    fn the_rate_stays_within_floor_ceiling_and_stated_quota() {
        let start = Instant::now();
        let mut curve = Curve::new(2.0, tuning(), start);
        let ms = Duration::from_millis;
        for n in 0..20 {
            let at = start + ms(n);
            curve.apply(refused(at), at);
        }
        assert_eq!(curve.rate(start + ms(20)), 1.0);
        assert_eq!(curve.rate(start + secs(1e6)), 1_000.0);
        let stated = Signal::Stated { rate: 50.0 };
        assert!(curve.apply(stated, start));
        assert_eq!(curve.rate(start + secs(1e6)), 50.0);
        assert!(
            !curve.apply(stated, start),
            "the same quota again changes nothing"
        );
    }

    #[test]
    fn a_pause_holds_the_climb_until_it_ends() {
        let start = Instant::now();
        let mut curve = Curve::new(100.0, tuning(), start);
        curve.apply(refused(start), start);
        assert!(curve.apply(
            Signal::Paused {
                until: start + secs(1.0)
            },
            start
        ));
        assert!((curve.rate(start + secs(1.0)) - 70.0).abs() < 1e-9);
        assert!(curve.rate(start + secs(2.0)) > 80.0);
        assert!(
            !curve.apply(Signal::Paused { until: start }, start),
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
    fn a_pause_is_not_held_again_as_unused_time() {
        let start = Instant::now();
        let mut curve = Curve::new(100.0, tuning(), start);
        curve.apply(refused(start), start);
        let until = start + secs(300.0);
        curve.apply(Signal::Paused { until }, start);
        // Unused until the pause's end (callers wait for it): the pause
        // already holds the climb, which starts as it ends, not 300 s later.
        curve.hold(start, until);
        let end = until + secs(1.0);
        assert!((curve.rate(until) - 70.0).abs() < 1e-9);
        assert!(curve.rate(end) > 80.0, "{}", curve.rate(end));
        // Unused after the pause's end: that holds the climb.
        curve.hold(until, end);
        assert!((curve.rate(end) - 70.0).abs() < 1e-9);
    }

    #[test]
    fn latency_above_the_base_by_the_queueing_delay_slows_gently() {
        let start = Instant::now();
        let mut curve = Curve::new(20.0, tuning(), start);
        let ms = Duration::from_millis;
        let success = |curve: &mut Curve, sent: Duration, latency: Duration| {
            let signal = curve.success(start + sent, latency, start + sent + latency);
            signal.is_some_and(|signal| curve.apply(signal, start + sent + latency))
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
        // A refusal of a call sent during the queueing is a new signal.
        assert!(curve.apply(refused(start + ms(150)), start + ms(182)));
    }

    #[test]
    fn a_queueing_delay_does_not_climb_back_to_the_rate_that_queued() {
        let start = Instant::now();
        let mut curve = Curve::new(20.0, tuning(), start);
        let queued = Signal::Queued {
            sent_at: start,
            latency: Duration::from_millis(65),
            queued: Duration::from_millis(60),
        };
        assert!(curve.apply(queued, start));
        assert!((curve.rate(start) - 18.8).abs() < 1e-9, "6 % for 60 ms");
        // Flat at the cut rate at first (a refusal's curve would be back
        // near 20 by now), then probing beyond it.
        assert!(curve.rate(start + secs(0.5)) < 18.9);
        assert!((curve.rate(start + secs(1.0)) - 19.2).abs() < 1e-9);
        assert!(curve.rate(start + secs(2.0)) > 21.5);
        // A refusal then climbs back to the rate refused, not below it.
        let refused_at = start + secs(1.0);
        assert!(curve.apply(refused(refused_at), refused_at));
        let k = (19.2_f64 * 0.3 / 0.4).cbrt();
        assert!((curve.rate(refused_at + secs(k)) - 19.2).abs() < 1e-9);
    }

    #[test]
    fn the_longer_a_call_queued_the_more_the_rate_is_cut() {
        let cut = |queued_ms: u64| {
            let start = Instant::now();
            let mut curve = Curve::new(100.0, tuning(), start);
            let queued = Duration::from_millis(queued_ms);
            let signal = Signal::Queued {
                sent_at: start,
                latency: queued,
                queued,
            };
            assert!(curve.apply(signal, start));
            curve.rate(start)
        };
        assert!((cut(5) - 97.0).abs() < 1e-9, "gently at least");
        assert!((cut(200) - 80.0).abs() < 1e-9);
        assert!((cut(900) - 70.0).abs() < 1e-9, "as a refusal at most");
    }

    #[test]
    fn a_refusal_below_the_last_plateau_lowers_it() {
        let start = Instant::now();
        let mut curve = Curve::new(100.0, tuning(), start);
        curve.apply(refused(start), start);
        // Refused again at about 70, below the 100 of the last refusal: the
        // limit went down, and the new plateau is between the two (85 % of
        // the rate refused), not the rate refused.
        let again = start + secs(0.001);
        let plateau = curve.rate(again) * 0.85;
        assert!(curve.apply(refused(again), again));
        let rate = curve.rate(again);
        let k = ((plateau - rate) / 0.4).cbrt();
        assert!((curve.rate(again + secs(k)) - plateau).abs() < 0.01);
    }
}
