//! [`QuotaStore`] for [`MemoryStore`]: each named quota is decided by the
//! in-memory limiter of its algorithm, so the memory store behaves exactly
//! as [`GcraLimiter`](crate::GcraLimiter),
//! [`FixedWindowLimiter`](crate::FixedWindowLimiter) (aligned to Unix time)
//! and [`SlidingWindowCounterLimiter`](crate::SlidingWindowCounterLimiter)
//! do, and the conformance suite holds the other stores to that behaviour.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;

use super::quota::QuotaKind;
use super::{MemoryStore, Quota, QuotaStore, WindowDecision};
use crate::error::LimiterError;
use crate::limiter::{Admission, Limiter, LimiterFuture, Permit};
use crate::limiters::GcraLimiter;
use crate::quota_status::QuotaStatus;

/// A named quota in a [`MemoryStore`], made by [`QuotaStore::quota_key`].
/// Keys for the same name refer to the same state.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::store::{MemoryQuotaKey, MemoryStore, Quota, QuotaStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let quota = Quota::gcra(1, Duration::from_secs(60))?;
/// let first: MemoryQuotaKey = store.quota_key("api");
/// store.take(&first, &quota).await?;
/// assert!(store.look(&store.quota_key("api"), &quota, 1).await?.is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct MemoryQuotaKey(Arc<Mutex<Option<QuotaState>>>);

/// The limiter deciding a key, and the quota it was built for.
struct QuotaState {
    quota: Quota,
    limiter: Arc<dyn Limiter>,
    /// The same limiter when the quota is GCRA (or a token bucket): a new
    /// rate or burst retunes it, keeping what was spent, as the other
    /// stores keep their TAT.
    cells: Option<GcraLimiter>,
}

impl fmt::Debug for MemoryQuotaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MemoryQuotaKey")
    }
}

impl MemoryStore {
    /// Runs `act` on the limiter of `key` for `quota`.
    fn with_limiter<T>(
        &self,
        key: &MemoryQuotaKey,
        quota: &Quota,
        act: impl FnOnce(&dyn Limiter) -> Result<T, LimiterError>,
    ) -> LimiterFuture<'static, Result<T, LimiterError>> {
        LimiterFuture::ready(self.limiter(key, quota).and_then(|limiter| act(&*limiter)))
    }

    /// The limiter of `key` for `quota`: a new one (full capacity) the
    /// first time, or when the quota changed to another algorithm or
    /// window; the same one, retuned, when a GCRA quota changed its rate
    /// or burst.
    fn limiter(
        &self,
        key: &MemoryQuotaKey,
        quota: &Quota,
    ) -> Result<Arc<dyn Limiter>, LimiterError> {
        let mut state = key.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(current) = &mut *state {
            if current.quota == *quota {
                return Ok(Arc::clone(&current.limiter));
            }
            if let (Some(cells), QuotaKind::Cells { interval, burst }) =
                (&current.cells, quota.kind())
            {
                cells
                    .set_limit(1, interval, burst)
                    .map_err(LimiterError::new)?;
                current.quota = *quota;
                return Ok(Arc::clone(&current.limiter));
            }
        }
        let (limiter, cells) = quota
            .memory_limiter(self.clock().clone())
            .map_err(LimiterError::new)?;
        *state = Some(QuotaState {
            quota: *quota,
            limiter: Arc::clone(&limiter),
            cells,
        });
        Ok(limiter)
    }
}

/// The answer of an in-memory limiter, which is always ready.
fn now_or_error<T>(future: LimiterFuture<'_, Result<T, LimiterError>>) -> Result<T, LimiterError> {
    future.into_ready().unwrap_or_else(|_| {
        Err(LimiterError::new(
            "an in-memory limiter answered asynchronously",
        ))
    })
}

impl QuotaStore for MemoryStore {
    type QuotaKey = MemoryQuotaKey;

    fn quota_key(&self, name: &str) -> MemoryQuotaKey {
        self.quota_state(name)
    }

    fn decide<'a>(
        &'a self,
        key: &'a MemoryQuotaKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<WindowDecision, LimiterError>> {
        self.with_limiter(key, quota, |limiter| {
            Ok(match now_or_error(limiter.try_acquire_many(cost))? {
                Admission::Granted(permit) => WindowDecision::Granted {
                    ticket: permit
                        .token()
                        .ok_or_else(|| LimiterError::new("a grant without a ticket"))?,
                },
                Admission::Denied(denial) => WindowDecision::Denied {
                    retry_at: denial.retry_at().unwrap_or_else(Instant::now),
                },
            })
        })
    }

    fn look<'a>(
        &'a self,
        key: &'a MemoryQuotaKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        self.with_limiter(key, quota, |limiter| {
            let denial = now_or_error(limiter.peek(cost))?;
            Ok(denial.map(|denial| denial.retry_at().unwrap_or_else(Instant::now)))
        })
    }

    fn quota_status<'a>(
        &'a self,
        key: &'a MemoryQuotaKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<QuotaStatus, LimiterError>> {
        self.with_limiter(key, quota, |limiter| {
            now_or_error(limiter.quota_status())?
                .ok_or_else(|| LimiterError::new("a quota's limiter reported no quota"))
        })
    }

    fn take<'a>(
        &'a self,
        key: &'a MemoryQuotaKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.with_limiter(key, quota, |limiter| now_or_error(limiter.record_start()))
    }

    fn adjust<'a>(
        &'a self,
        key: &'a MemoryQuotaKey,
        quota: &'a Quota,
        ticket: u64,
        from: u32,
        to: u32,
    ) -> LimiterFuture<'a, Result<Option<u64>, LimiterError>> {
        self.with_limiter(key, quota, |limiter| {
            let mut permit = Permit::with_token(ticket).with_cost(from);
            limiter.settle(&mut permit, to);
            Ok(permit.token())
        })
    }

    fn pause<'a>(
        &'a self,
        key: &'a MemoryQuotaKey,
        quota: &'a Quota,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.with_limiter(key, quota, |limiter| {
            now_or_error(limiter.set_next_available_time(at))
        })
    }

    fn reset<'a>(
        &'a self,
        key: &'a MemoryQuotaKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.with_limiter(key, quota, |limiter| now_or_error(limiter.clear()))
    }
}
