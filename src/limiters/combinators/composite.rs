//! [`CompositeLimiter`]: every part must agree.

use std::fmt;
use std::ops::ControlFlow;
use std::sync::{Arc, PoisonError, RwLock};

use tokio::time::Instant;

use crate::error::LimiterError;
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit};

type Parts = Arc<[Arc<dyn Limiter>]>;

/// Combines limiters with AND: a call starts only if every part admits it.
///
/// * [`try_acquire`](Limiter::try_acquire) asks the parts in order and stops
///   at the first denial (put cheap parts first). What earlier parts granted
///   in that attempt is [refunded](Limiter::refund), so a denied attempt never
///   burns quota.
/// * [`can_proceed`](Limiter::can_proceed) short-circuits the same way.
/// * The hooks, [`set_next_available_time`](Limiter::set_next_available_time)
///   and [`clear`](Limiter::clear) are forwarded to every part.
/// * [`next_available_time`](Limiter::next_available_time) is the latest of
///   the parts'.
///
/// Parts can be added at runtime with [`add_limiter`](CompositeLimiter::add_limiter);
/// clones share the list.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::{CompositeLimiter, ConcurrencyLimiter, Limiter, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = CompositeLimiter::new()
///     .with(ConcurrencyLimiter::new(5)?)
///     .with(RateLimiter::builder("openai", 100, Duration::from_secs(60)).build()?);
/// assert_eq!(limiter.len(), 2);
/// assert!(limiter.can_proceed().await?);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct CompositeLimiter {
    parts: Arc<RwLock<Parts>>,
}

impl CompositeLimiter {
    /// A composite with no parts (it admits everything until parts are added).
    ///
    /// ```
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{CompositeLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower_limits::error::LimiterError> {
    /// let composite = CompositeLimiter::new();
    /// assert!(composite.is_empty());
    /// assert!(matches!(composite.try_acquire().await?, Admission::Granted(_)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `limiter` as the last part; for building in one expression.
    ///
    /// The part is shared with `limiter`'s clones, so a handle kept outside
    /// sees what the composite admits.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{CompositeLimiter, ConcurrencyLimiter, DelayLimiter, Limiter, LimiterExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let concurrency = ConcurrencyLimiter::new(1)?;
    /// let composite = CompositeLimiter::new()
    ///     .with(concurrency.clone())
    ///     .with(DelayLimiter::new(Duration::from_millis(100))?);
    /// let _permit = composite.acquire().await?;
    /// assert_eq!(concurrency.running(), 1);
    /// assert!(!composite.can_proceed().await?); // both parts are now closed
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with(self, limiter: impl Limiter) -> Self {
        self.add_limiter(limiter);
        self
    }

    /// Adds `limiter` as the last part, at runtime. Attempts already under
    /// way finish with the parts they started with.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{CompositeLimiter, ConcurrencyLimiter, DelayLimiter};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let composite = CompositeLimiter::new();
    /// composite.add_limiter(ConcurrencyLimiter::new(10)?);
    /// composite.add_limiter(DelayLimiter::new(Duration::from_millis(100))?);
    /// assert_eq!(composite.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn add_limiter(&self, limiter: impl Limiter) {
        let mut parts = self.parts.write().unwrap_or_else(PoisonError::into_inner);
        let mut next: Vec<Arc<dyn Limiter>> = parts.iter().cloned().collect();
        next.push(Arc::new(limiter));
        *parts = next.into();
    }

    /// How many parts there are.
    ///
    /// ```
    /// use tower_limits::{CompositeLimiter, NullLimiter};
    ///
    /// let composite = CompositeLimiter::new().with(NullLimiter).with(NullLimiter);
    /// assert_eq!(composite.len(), 2);
    /// assert_eq!(composite.clone().with(NullLimiter).len(), 3);
    /// assert_eq!(composite.len(), 3); // clones share the list
    /// ```
    pub fn len(&self) -> usize {
        self.snapshot().len()
    }

    /// Whether there are no parts.
    ///
    /// ```
    /// use tower_limits::{CompositeLimiter, NullLimiter};
    ///
    /// let composite = CompositeLimiter::new();
    /// assert!(composite.is_empty());
    /// composite.add_limiter(NullLimiter);
    /// assert!(!composite.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.snapshot().is_empty()
    }

    fn snapshot(&self) -> Parts {
        Arc::clone(&self.parts.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Runs `op` on every part in order, awaiting each.
    fn for_each<'a, F>(&'a self, op: F) -> LimiterFuture<'a, Result<(), LimiterError>>
    where
        F: Fn(&Arc<dyn Limiter>) -> LimiterFuture<'_, Result<(), LimiterError>> + Send + 'a,
    {
        let parts = self.snapshot();
        LimiterFuture::new(async move {
            for part in parts.iter() {
                op(part).await?;
            }
            Ok(())
        })
    }
}

/// One part's answer folded into the attempt: continue with the permit kept,
/// or stop with the final answer (earlier grants refunded to their parts).
fn fold_part(
    parts: &[Arc<dyn Limiter>],
    granted: &mut Vec<Permit>,
    answer: Result<Admission, LimiterError>,
) -> ControlFlow<Result<Admission, LimiterError>> {
    let answer = match answer {
        Ok(Admission::Granted(permit)) => {
            granted.push(permit);
            return ControlFlow::Continue(());
        }
        other => other,
    };
    refund_to(parts, std::mem::take(granted));
    ControlFlow::Break(answer)
}

/// Gives each permit back to the part that granted it (the first parts, in
/// order: parts are only ever appended).
fn refund_to(parts: &[Arc<dyn Limiter>], permits: Vec<Permit>) {
    for (part, permit) in parts.iter().zip(permits) {
        part.refund(permit);
    }
}

/// Finishes an attempt whose part `next` answered asynchronously.
async fn acquire_rest(
    parts: Parts,
    mut granted: Vec<Permit>,
    next: usize,
    cost: u32,
) -> Result<Admission, LimiterError> {
    for part in &parts[next..] {
        let answer = part.try_acquire_many(cost).await;
        if let ControlFlow::Break(answer) = fold_part(&parts, &mut granted, answer) {
            return answer;
        }
    }
    Ok(Admission::Granted(Permit::many(granted).with_cost(cost)))
}

impl Limiter for CompositeLimiter {
    /// Asks every part for `cost`, in order.
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let parts = self.snapshot();
        let mut granted = Vec::with_capacity(parts.len());
        for (index, part) in parts.iter().enumerate() {
            // Answers known at once are folded here without allocating; the
            // first pending part hands the rest to an async attempt.
            let Ok(answer) = part.try_acquire_many(cost).into_ready() else {
                let rest = acquire_rest(Arc::clone(&parts), granted, index, cost);
                return LimiterFuture::new(rest);
            };
            if let ControlFlow::Break(answer) = fold_part(&parts, &mut granted, answer) {
                return LimiterFuture::ready(answer);
            }
        }
        LimiterFuture::ready(Ok(Admission::Granted(
            Permit::many(granted).with_cost(cost),
        )))
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        let parts = self.snapshot();
        LimiterFuture::new(async move {
            for part in parts.iter() {
                if !part.can_proceed().await? {
                    return Ok(false);
                }
            }
            Ok(true)
        })
    }

    /// The first part's denial, in order.
    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        let parts = self.snapshot();
        LimiterFuture::new(async move {
            for part in parts.iter() {
                if let Some(denial) = part.peek(cost).await? {
                    return Ok(Some(denial));
                }
            }
            Ok(None)
        })
    }

    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.for_each(|part| part.record_start())
    }

    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.for_each(|part| part.record_completion())
    }

    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        let parts = self.snapshot();
        LimiterFuture::new(async move {
            let mut latest = Instant::now();
            for part in parts.iter() {
                latest = latest.max(part.next_available_time().await?);
            }
            Ok(latest)
        })
    }

    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.for_each(move |part| part.set_next_available_time(at))
    }

    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.for_each(|part| part.clear())
    }

    fn refund(&self, permit: Permit) {
        refund_to(&self.snapshot(), permit.into_parts());
    }

    /// Settles each part's share of the permit; the permit then costs the
    /// most any part charged (each part clamps `actual` to its capacity).
    fn settle(&self, permit: &mut Permit, actual: u32) {
        let mut charged = 0;
        for (part, share) in self.snapshot().iter().zip(permit.parts_mut()) {
            part.settle(share, actual);
            charged = charged.max(share.cost());
        }
        permit.settled(charged, None);
    }

    fn is_in_use(&self) -> bool {
        Arc::strong_count(&self.parts) > 1 || self.snapshot().iter().any(|part| part.is_in_use())
    }

    /// The largest count of the parts that count running calls; `None` if
    /// none does.
    fn in_flight(&self) -> Option<u64> {
        self.snapshot()
            .iter()
            .filter_map(|part| part.in_flight())
            .max()
    }
}

impl fmt::Debug for CompositeLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompositeLimiter")
            .field("parts", &self.len())
            .finish()
    }
}
