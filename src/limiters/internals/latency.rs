//! [`LowestLatency`]: the base latency the adaptive limiters compare calls
//! with.

use std::time::Duration;

use tokio::time::Instant;

/// The lowest latency of the current period and the one before: what a
/// call takes when nothing queues it, forgotten slowly enough to survive a
/// spell of queueing and fast enough to follow an upstream that got slower
/// for good.
#[derive(Clone, Debug)]
pub(crate) struct LowestLatency {
    period: Duration,
    current: Option<Duration>,
    previous: Option<Duration>,
    period_start: Instant,
}

impl LowestLatency {
    /// Remembers each lowest for one to two `period`s from `now`.
    pub(crate) fn new(period: Duration, now: Instant) -> Self {
        Self {
            period,
            current: None,
            previous: None,
            period_start: now,
        }
    }

    /// Records `latency`, seen `now`; the lowest latency, with it.
    pub(crate) fn observe(&mut self, latency: Duration, now: Instant) -> Duration {
        if now.saturating_duration_since(self.period_start) >= self.period {
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

    #[test]
    fn the_lowest_is_remembered_for_one_to_two_periods() {
        let start = Instant::now();
        let (ms, secs) = (Duration::from_millis, Duration::from_secs);
        let mut lowest = LowestLatency::new(secs(10), start);
        assert_eq!(lowest.observe(ms(20), start), ms(20));
        assert_eq!(lowest.observe(ms(5), start + secs(1)), ms(5));
        assert_eq!(
            lowest.observe(ms(50), start + secs(12)),
            ms(5),
            "the last period's"
        );
        assert_eq!(
            lowest.observe(ms(40), start + secs(23)),
            ms(40),
            "forgotten"
        );
    }
}
