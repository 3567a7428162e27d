//! [`QuotaCell`]: a [`Quota`] that every decision reads and a runtime change
//! replaces, without a lock.

use crate::limiters::internals::seq_cell::SeqCell;
use crate::store::Quota;

/// A [`Quota`] in six words of a [`SeqCell`]: a read never blocks, and sees
/// one quota whole, never half of a change.
#[derive(Debug)]
pub(crate) struct QuotaCell(SeqCell<6>);

impl QuotaCell {
    pub(crate) fn new(quota: Quota) -> Self {
        Self(SeqCell::new(quota.to_words()))
    }

    #[inline]
    pub(crate) fn load(&self) -> Quota {
        Quota::from_words(self.0.load())
    }

    pub(crate) fn store(&self, quota: Quota) {
        self.0.store(quota.to_words());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::Backoff;

    #[test]
    fn load_returns_what_was_stored() -> Result<(), crate::error::ConfigError> {
        let second = Duration::from_secs(1);
        let quotas = [
            Quota::gcra(3, second)?.with_burst(2)?,
            Quota::token_bucket(5, 1, Duration::from_millis(7))?,
            Quota::fixed_window(8, second)?,
            Quota::sliding_window_counter(9, Duration::from_nanos(3))?,
            Quota::sliding_log(4, second)?,
            Quota::sliding_log(4, second)?.with_backoff(Some(Backoff::SEED))?,
            Quota::sliding_log(4, second)?.with_backoff(Some(Backoff {
                initial: Duration::from_millis(3),
                multiplier: 1.5,
                max: Duration::from_secs(9),
            }))?,
        ];
        let cell = QuotaCell::new(quotas[0]);
        for quota in quotas {
            cell.store(quota);
            assert_eq!(cell.load(), quota);
        }
        Ok(())
    }
}
