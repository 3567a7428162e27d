//! [`QuotaStatus`]: a limiter's quota and how much of it is left, read in
//! one step ([`Limiter::quota_status`](crate::Limiter::quota_status)).

use std::convert::Infallible;
use std::time::Duration;

/// The quota a limiter enforces and where it stands now, from one reading
/// of its state (one lock, or one store round trip): what a server
/// advertises in the `RateLimit-Policy` and `RateLimit` headers of
/// draft-ietf-httpapi-ratelimit-headers.
///
/// * [`limit`](QuotaStatus::limit) and [`window`](QuotaStatus::window): the
///   quota, `limit` units per `window` (the policy's `q` and `w`);
/// * [`remaining`](QuotaStatus::remaining): how many units the limiter
///   would grant now, at once (`r`);
/// * [`refill_in`](QuotaStatus::refill_in): how long until it would grant
///   more than `remaining` (`t`, the draft's time until more quota is made
///   available: the span within which a client can use no more than
///   `remaining`); `None` when the whole limit is available and nothing is
///   left to come back.
///
/// A pause in force (an upstream's `Retry-After`, a backoff) counts: nothing
/// remains until it ends.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::{Limiter, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 3 calls per 10 s: one now, one 4 s later.
/// let limiter = RateLimiter::builder("api", 3, Duration::from_secs(10))
///     .without_backoff()
///     .build()?;
/// limiter.record_start().await?;
/// tokio::time::advance(Duration::from_secs(4)).await;
/// limiter.record_start().await?;
///
/// let status = limiter.quota_status().await?.expect("a windowed quota");
/// assert_eq!((status.limit(), status.window()), (3, Duration::from_secs(10)));
/// assert_eq!(status.remaining(), 1);
/// // A second unit comes back when the first start leaves the window.
/// assert_eq!(status.refill_in(), Some(Duration::from_secs(6)));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaStatus {
    limit: u64,
    window: Duration,
    remaining: u64,
    refill_in: Option<Duration>,
}

impl QuotaStatus {
    /// A quota of `limit` units per `window`, with `remaining` units
    /// available now (at most `limit`) and more after `refill_in`; for a
    /// [`Limiter`](crate::Limiter) of your own.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::QuotaStatus;
    ///
    /// let status = QuotaStatus::new(10, Duration::from_secs(1), 12, None);
    /// assert_eq!(status.remaining(), 10); // never more than the limit
    /// ```
    pub fn new(limit: u64, window: Duration, remaining: u64, refill_in: Option<Duration>) -> Self {
        Self {
            limit,
            window,
            remaining: remaining.min(limit),
            refill_in,
        }
    }

    /// The most units the limiter grants per [`window`](QuotaStatus::window):
    /// a window's limit, a bucket's capacity, a GCRA burst.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{Limiter, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = RateLimiter::in_memory(Quota::token_bucket(100, 10, Duration::from_secs(1))?);
    /// assert_eq!(bucket.quota_status().await?.map(|s| s.limit()), Some(100));
    /// # Ok(())
    /// # }
    /// ```
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window the [`limit`](QuotaStatus::limit) applies to; for a bucket
    /// or a GCRA, the time it takes to refill from empty.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{Limiter, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // 100 tokens, 10 a second: empty to full in 10 s.
    /// let bucket = RateLimiter::in_memory(Quota::token_bucket(100, 10, Duration::from_secs(1))?);
    /// let window = bucket.quota_status().await?.map(|s| s.window());
    /// assert_eq!(window, Some(Duration::from_secs(10)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn window(&self) -> Duration {
        self.window
    }

    /// How many units the limiter would grant now, at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::Quota;
    /// use tower_limits::{Limiter, LimiterExt, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::in_memory(Quota::token_bucket(5, 1, Duration::from_secs(60))?);
    /// drop(limiter.acquire_many(2).await?);
    /// assert_eq!(limiter.quota_status().await?.map(|s| s.remaining()), Some(3));
    /// # Ok(())
    /// # }
    /// ```
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// How long until the limiter would grant more than
    /// [`remaining`](QuotaStatus::remaining) at once, if nothing is spent
    /// meanwhile; `None` if it would grant its whole limit now.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{Limiter, LimiterExt, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // One cell a second, five at once.
    /// let limiter = RateLimiter::in_memory(Quota::gcra(1, Duration::from_secs(1))?.with_burst(5)?);
    /// assert_eq!(limiter.quota_status().await?.and_then(|s| s.refill_in()), None);
    /// drop(limiter.acquire_many(3).await?);
    /// let status = limiter.quota_status().await?.expect("a quota");
    /// assert_eq!(status.remaining(), 2);
    /// assert_eq!(status.refill_in(), Some(Duration::from_secs(1))); // one cell drips back
    /// # Ok(())
    /// # }
    /// ```
    pub fn refill_in(&self) -> Option<Duration> {
        self.refill_in
    }
}

/// The most units that pass now, out of `capacity`, and what `blocked`
/// answers for one more (`None` when all `capacity` pass): a binary search
/// over `blocked(cost)`, which says when `cost` units could pass if not
/// now, and must never pass a cost it blocks a smaller one for. Each store
/// runs it on one reading of its state.
pub(crate) fn try_search<T, E>(
    capacity: u32,
    mut blocked: impl FnMut(u32) -> Result<Option<T>, E>,
) -> Result<(u32, Option<T>), E> {
    let Some(mut denied_at) = blocked(capacity)? else {
        return Ok((capacity, None));
    };
    let (mut admitted, mut denied) = (0, capacity);
    while denied - admitted > 1 {
        let middle = admitted + (denied - admitted) / 2;
        match blocked(middle)? {
            None => admitted = middle,
            Some(at) => (denied, denied_at) = (middle, at),
        }
    }
    Ok((admitted, Some(denied_at)))
}

/// [`try_search`] for a `blocked` that cannot fail.
pub(crate) fn search<T>(capacity: u32, blocked: impl Fn(u32) -> Option<T>) -> (u32, Option<T>) {
    let found = try_search(capacity, |cost| Ok::<_, Infallible>(blocked(cost)));
    match found {
        Ok(found) => found,
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_largest_cost_that_passes_and_when_one_more_would() {
        // Costs up to 7 pass; a cost c > 7 passes at 10 × c.
        let blocked = |cost: u32| (cost > 7).then_some(10 * cost);
        assert_eq!(search(20, blocked), (7, Some(80)));
        assert_eq!(search(7, blocked), (7, None));
        assert_eq!(search(8, blocked), (7, Some(80)));
        // Nothing passes (a pause): one more is the first unit.
        assert_eq!(search(5, Some), (0, Some(1)));
    }

    #[test]
    fn stops_at_the_first_failure() {
        let failing = try_search(10, |cost| if cost == 10 { Ok(Some(())) } else { Err(cost) });
        assert_eq!(failing, Err(5));
    }
}
