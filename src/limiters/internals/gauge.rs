//! The gauges a named limiter reports through the `metrics` facade
//! (feature `metrics`), labelled by the limiter's name only.

use std::sync::atomic::{AtomicU64, Ordering};

use metrics::{Gauge, gauge};

/// `tower_limits_adaptive_rate{limiter}`: an adaptive limiter's rate, in
/// calls per second.
pub(crate) fn adaptive_rate(name: &str) -> Gauge {
    gauge!("tower_limits_adaptive_rate", "limiter" => name.to_owned())
}

/// `tower_limits_concurrency_limit{limiter}`: an adaptive concurrency
/// limiter's limit.
pub(crate) fn concurrency_limit(name: &str) -> Gauge {
    gauge!("tower_limits_concurrency_limit", "limiter" => name.to_owned())
}

/// `tower_limits_keys{limiter}`: a keyed limiter's live keys, counted here
/// as its shards gain and lose them (never on a use of a known key).
pub(crate) struct KeyCount {
    live: AtomicU64,
    gauge: Gauge,
}

impl KeyCount {
    /// The count of the keyed limiter `name`, at 0.
    pub(crate) fn new(name: &str) -> Self {
        let gauge = gauge!("tower_limits_keys", "limiter" => name.to_owned());
        gauge.set(0.0);
        Self {
            live: AtomicU64::new(0),
            gauge,
        }
    }

    /// A shard went from `before` keys to `after`.
    pub(crate) fn changed(&self, before: usize, after: usize) {
        let (before, after) = (before as u64, after as u64);
        if after > before {
            self.live.fetch_add(after - before, Ordering::SeqCst);
        } else if after < before {
            self.live.fetch_sub(before - after, Ordering::SeqCst);
        } else {
            return;
        }
        self.publish();
    }

    fn publish(&self) {
        publish(&self.gauge, || self.live.load(Ordering::SeqCst));
    }
}

/// `tower_limits_in_flight{limiter}`: a concurrency limiter's running calls.
pub(crate) fn in_flight(name: &str) -> Gauge {
    gauge!("tower_limits_in_flight", "limiter" => name.to_owned())
}

/// Sets `gauge` to the count `read` returns, which other threads change
/// concurrently: a caller that set a count another has changed since sets
/// it again, so the last value set is the count once changes stop.
pub(crate) fn publish(gauge: &Gauge, read: impl Fn() -> u64) {
    loop {
        let count = read();
        gauge.set(count as f64);
        if read() == count {
            return;
        }
    }
}
