//! [`NullLimiter`]: no limit at all.

use tokio::time::Instant;

use crate::error::LimiterError;
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit};

/// A limiter that admits everything; the default when no limit is configured.
///
/// All hooks are no-ops and [`next_available_time`](Limiter::next_available_time)
/// is always now.
///
/// ```
/// use tower_limits::{Limiter, NullLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower_limits::error::LimiterError> {
/// let limiter = NullLimiter;
/// assert!(limiter.can_proceed().await?);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct NullLimiter;

impl crate::limiters::FreshLimiter for NullLimiter {
    /// ```
    /// use tower_limits::limiters::FreshLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let template = tower_limits::NullLimiter;
    /// let fresh = template.fresh();
    /// # let _ = fresh;
    /// # Ok(())
    /// # }
    /// ```
    fn fresh(&self) -> Self {
        Self
    }
}

impl Limiter for NullLimiter {
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        LimiterFuture::ready(Ok(Admission::Granted(Permit::unit().with_cost(cost))))
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        LimiterFuture::ready(Ok(true))
    }

    fn peek(&self, _cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        LimiterFuture::ready(Ok(None))
    }

    fn settle(&self, permit: &mut Permit, actual: u32) {
        permit.settled(actual, None);
    }

    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }

    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }

    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        LimiterFuture::ready(Ok(Instant::now()))
    }

    fn set_next_available_time(&self, _at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }

    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }
}
