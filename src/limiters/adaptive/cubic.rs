//! The rate curve of [`AdaptiveRateLimiter`](super::AdaptiveRateLimiter):
//! CUBIC, as in TCP CUBIC (RFC 9438) and the AWS SDKs' adaptive retry mode.

use std::time::Duration;

use tokio::time::Instant;

/// How the rate moves; validated by the builder.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Tuning {
    /// Calls per second the rate never goes below.
    pub(super) floor: f64,
    /// Calls per second the rate never goes above.
    pub(super) ceiling: f64,
    /// The factor a refusal multiplies the rate by.
    pub(super) decrease: f64,
    /// The factor a queueing delay multiplies the rate by.
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

/// The CUBIC curve: after a decrease at `origin` from the rate `w_max`, the
/// rate is `C·(t − K)³ + w_max` at `t` seconds, where `K` is the time it
/// takes to climb back to `w_max`. It climbs fast at first, flattens near
/// the rate that was refused, and probes beyond it slowly, then faster.
#[derive(Clone, Debug)]
pub(super) struct Curve {
    tuning: Tuning,
    /// The rate at the last decrease: the curve's plateau.
    w_max: f64,
    /// Seconds from the decrease to the plateau.
    k: f64,
    /// The curve's start, moved on by the time the rate went unused.
    origin: Instant,
    /// Refusals of calls sent before this (or at it) belong to an overload
    /// already reacted to: a burst of refusals is one decrease, not one
    /// each.
    refused_until: Option<Instant>,
    /// Likewise for queueing delays, which a refusal also covers; a
    /// refusal after a queueing delay still counts (the stronger signal).
    queued_until: Option<Instant>,
    /// The quota the upstream stated, which the rate never exceeds.
    stated: Option<f64>,
    latency: BaseLatency,
}

impl Curve {
    /// A curve at `start` calls per second from `now`, growing from there.
    pub(super) fn new(start: f64, tuning: Tuning, now: Instant) -> Self {
        Self {
            tuning,
            w_max: start,
            k: 0.0,
            origin: now,
            refused_until: None,
            queued_until: None,
            stated: None,
            latency: BaseLatency::new(now),
        }
    }

    /// The rate at `now`, in calls per second, within the floor and the
    /// ceiling (and the stated quota).
    pub(super) fn rate(&self, now: Instant) -> f64 {
        let t = now.saturating_duration_since(self.origin).as_secs_f64() - self.k;
        let curve = self.tuning.growth * t * t * t + self.w_max;
        let ceiling = self.stated.map_or(self.tuning.ceiling, |stated| {
            stated.min(self.tuning.ceiling)
        });
        curve.min(ceiling).max(self.tuning.floor)
    }

    /// The rate went unused for `idle`: the curve waits, so that a client
    /// that sends little is not allowed a rate it never tried.
    pub(super) fn hold(&mut self, idle: Duration) {
        self.origin += idle;
    }

    /// The upstream refused a call sent at `sent_at`: a multiplicative
    /// decrease, once per overload. True if the rate changed.
    pub(super) fn refused(&mut self, sent_at: Instant, now: Instant) -> bool {
        if covers(self.refused_until, sent_at) {
            return false;
        }
        self.decrease(now, self.tuning.decrease);
        self.refused_until = Some(now);
        self.queued_until = self.queued_until.max(Some(now));
        true
    }

    /// A call sent at `sent_at` succeeded after `latency`: a gentle decrease
    /// if the upstream was queueing it. Calls sent while the queue drains
    /// (for as long as this one waited) are the same overload. True if the
    /// rate changed.
    pub(super) fn succeeded(&mut self, sent_at: Instant, latency: Duration, now: Instant) -> bool {
        let Some(delay) = self.tuning.queueing_delay else {
            return false;
        };
        let base = self.latency.observe(latency, now);
        if latency <= base.saturating_add(delay) || covers(self.queued_until, sent_at) {
            return false;
        }
        self.decrease(now, self.tuning.gentle_decrease);
        self.queued_until = Some(now + latency);
        true
    }

    /// The upstream stated its quota: `rate` calls per second, from now.
    /// True if the rate changed.
    pub(super) fn adopt(&mut self, rate: f64, now: Instant) -> bool {
        if self.stated == Some(rate) {
            return false;
        }
        self.stated = Some(rate);
        self.w_max = rate;
        self.k = 0.0;
        self.origin = now;
        true
    }

    /// Multiplies the rate by `factor` now; the curve climbs back from
    /// there to the rate it had, or, when that was still below the last
    /// plateau (the limit went down), to a lower plateau between the two
    /// (CUBIC's fast convergence, RFC 9438 §4.7).
    fn decrease(&mut self, now: Instant, factor: f64) {
        let rate = self.rate(now);
        let plateau = if rate < self.w_max {
            rate * (1.0 + factor) / 2.0
        } else {
            rate
        };
        self.k = ((plateau - rate * factor) / self.tuning.growth).cbrt();
        self.w_max = plateau;
        self.origin = now;
    }
}

/// Whether a call sent at `sent_at` belongs to an overload that lasted
/// until `until`.
fn covers(until: Option<Instant>, sent_at: Instant) -> bool {
    until.is_some_and(|until| sent_at <= until)
}

/// The lowest latency of the current period and the one before.
#[derive(Clone, Debug)]
struct BaseLatency {
    current: Option<Duration>,
    previous: Option<Duration>,
    period_start: Instant,
}

impl BaseLatency {
    fn new(now: Instant) -> Self {
        Self {
            current: None,
            previous: None,
            period_start: now,
        }
    }

    /// Records `latency`; the base latency, with it.
    fn observe(&mut self, latency: Duration, now: Instant) -> Duration {
        if now.saturating_duration_since(self.period_start) >= LATENCY_MEMORY {
            self.previous = self.current.take();
            self.period_start = now;
        }
        let current = self.current.map_or(latency, |lowest| lowest.min(latency));
        self.current = Some(current);
        self.previous
            .map_or(current, |previous| previous.min(current))
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
            gentle_decrease: 0.95,
            growth: 0.4,
            queueing_delay: Some(Duration::from_millis(20)),
        }
    }

    fn secs(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    #[test]
    fn a_refusal_cuts_the_rate_then_it_climbs_back_to_the_plateau() {
        let start = Instant::now();
        let mut curve = Curve::new(100.0, tuning(), start);
        assert!(curve.refused(start, start));
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
        assert!(curve.refused(start, later));
        // Sent before the decrease (or as it happened): the same overload.
        assert!(!curve.refused(start + secs(0.05), later + secs(0.01)));
        assert!(!curve.refused(later, later + secs(0.01)));
        assert!(curve.refused(later + secs(0.02), later + secs(0.03)));
        assert!(curve.rate(later + secs(0.03)) < 50.0);
    }

    #[test]
    fn the_rate_stays_within_floor_ceiling_and_stated_quota() {
        let start = Instant::now();
        let mut curve = Curve::new(2.0, tuning(), start);
        let ms = Duration::from_millis;
        for n in 0..20 {
            let at = start + ms(n);
            curve.refused(at, at);
        }
        assert_eq!(curve.rate(start + ms(20)), 1.0);
        assert_eq!(curve.rate(start + secs(1e6)), 1_000.0);
        assert!(curve.adopt(50.0, start));
        assert_eq!(curve.rate(start + secs(1e6)), 50.0);
        assert!(
            !curve.adopt(50.0, start),
            "the same quota again changes nothing"
        );
    }

    #[test]
    fn a_held_curve_does_not_grow() {
        let start = Instant::now();
        let mut curve = Curve::new(10.0, tuning(), start);
        curve.hold(secs(100.0));
        assert_eq!(curve.rate(start + secs(100.0)), 10.0);
    }

    #[test]
    fn latency_above_the_base_by_the_queueing_delay_slows_gently() {
        let start = Instant::now();
        let mut curve = Curve::new(20.0, tuning(), start);
        let ms = Duration::from_millis;
        assert!(!curve.succeeded(start, ms(5), start));
        assert!(!curve.succeeded(start, ms(24), start), "within the delay");
        assert!(curve.succeeded(start, ms(60), start + ms(1)));
        assert!((curve.rate(start + ms(1)) - 19.0).abs() < 1e-9);
        // Calls sent while the queue drains are the same overload.
        assert!(!curve.succeeded(start + ms(30), ms(60), start + ms(90)));
        assert!(curve.succeeded(start + ms(62), ms(60), start + ms(122)));
        // A refusal of a call sent during the queueing is a new signal.
        assert!(curve.refused(start + ms(70), start + ms(123)));
    }
}
