//! [`RateLimiter`]: any [`Quota`] (GCRA, token bucket, fixed window, sliding
//! window counter, the seed's sliding log with backoff) decided in a
//! [`QuotaStore`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::Clock;
use crate::error::{ConfigError, CostTooHigh, LimiterError};
use crate::limiter::{
    Admission, Denial, Limiter, LimiterFuture, Permit, ReleaseEvent, ReleaseListener,
};
use crate::limiters::internals::quota_cell::QuotaCell;
use crate::limiters::{FreshLimiter, InlineState};
use crate::quota_status::QuotaStatus;
use crate::rate::Rate;
use crate::store::late::{spawn_or_warn, until_applied};
use crate::store::{Backoff, MemoryStore, Quota, QuotaKind, QuotaStore, WindowDecision};

/// A [`Quota`] kept in a [store](crate::store): the classic rate limiter,
/// and the limit shared by every process that uses the same store and name.
///
/// The quota is any counting algorithm: the seed's sliding log of starts
/// with exponential backoff and jitter
/// ([`builder`](RateLimiter::builder)), or GCRA, a token bucket, a fixed
/// window, a sliding window counter ([`new`](RateLimiter::new) with a
/// [`Quota`]). The store is [`MemoryStore`] by default; with
#[cfg_attr(
    feature = "redis",
    doc = "[`RedisStore`](crate::store::RedisStore) (feature `redis`),"
)]
#[cfg_attr(not(feature = "redis"), doc = "`RedisStore` (feature `redis`),")]
/// PostgreSQL or SQLite the limit holds across processes. Each decision
/// is one atomic [`QuotaStore::decide`] (one Lua script in Redis); a denied
/// caller waits for the instant the store named, or until a refund in this
/// process gives units back. Clones share the limiter; limiters with the
/// same name on one store share one limit. Wrap it in a
/// [`Failover`](crate::Failover) to choose what happens while a store is
/// down.
///
/// With the seed's backoff (on by default in the builder), when a start
/// fills the window the next start waits for the later of "the oldest start
/// leaves the window" and a jittered backoff (see [`Backoff`]: 1 s, ×2, up
/// to 10 min). With a short window the backoff dominates and the achieved
/// rate stays well under the limit; call
/// [`without_backoff`](RateLimiterBuilder::without_backoff) for a plain
/// sliding window that admits exactly `max_executions` per window.
///
/// For one process, [`in_memory`](RateLimiter::in_memory) keeps the quota
/// in a store of its own (decided without a lock while a quota's state fits
/// one word: GCRA and the token bucket with no refund inside their line,
/// the windows with counts and an index that fit 63 bits).
///
/// ```
/// use std::time::Duration;
/// use tower_limits::store::{MemoryStore, Quota};
/// use tower_limits::{Limiter, LimiterExt, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // The seed's limiter: a sliding window of 2 starts a second.
/// let limiter = RateLimiter::builder("openai-embeddings", 2, Duration::from_secs(1))
///     .without_backoff()
///     .build()?;
/// let start = tokio::time::Instant::now();
/// for _ in 0..4 {
///     drop(limiter.acquire().await?);
/// }
/// // Two at once, two more when the first two leave the window.
/// assert_eq!(start.elapsed(), Duration::from_secs(1));
///
/// // A token bucket shared by two workers through one store.
/// let store = MemoryStore::new();
/// let quota = Quota::token_bucket(2, 1, Duration::from_secs(1))?;
/// let worker_a = RateLimiter::new(store.clone(), "search-api", quota);
/// let worker_b = RateLimiter::new(store, "search-api", quota);
/// drop(worker_a.acquire_many(2).await?); // empties the shared bucket
/// assert!(!worker_b.can_proceed().await?);
/// # Ok(())
/// # }
/// ```
#[doc(alias = "SharedLimiter")]
pub struct RateLimiter<S: QuotaStore = MemoryStore> {
    shared: Arc<RateShared<S>>,
    /// A copy of the shared key beside the pointer to the rest, so that a
    /// decision fetches the key's state and the limiter's in parallel (a
    /// limiter per key, a keyed limiter's entry: one cache miss fewer in a
    /// row).
    key: S::QuotaKey,
}

struct RateShared<S: QuotaStore> {
    name: String,
    /// Fired when a refund, a settle, `clear` or a new quota in this
    /// process may admit a waiting caller sooner.
    released: ReleaseEvent,
    store: S,
    key: S::QuotaKey,
    quota: QuotaCell,
}

impl<S: QuotaStore> RateShared<S> {
    /// Decides `cost` under `quota`; a denial also wakes on `listener`.
    fn decide_listening(
        &self,
        quota: Quota,
        cost: u32,
        listener: ReleaseListener,
    ) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let admission = move |decision| admission(decision, cost, Some(listener));
        match self.store.decide(&self.key, &quota, cost).into_ready() {
            Ok(result) => LimiterFuture::ready(result.map(admission)),
            // The unpolled future borrows `quota`: drop it, make it again.
            Err(_unpolled) => LimiterFuture::new(async move {
                let decision = self.store.decide(&self.key, &quota, cost).await?;
                Ok(admission(decision))
            }),
        }
    }

    /// Runs `ask` with the quota in force: at once if the store answers at
    /// once, else in a future that owns the quota.
    fn ask<'a, T, F>(&'a self, ask: F) -> LimiterFuture<'a, Result<T, LimiterError>>
    where
        T: Send + 'a,
        F: for<'q> Fn(
                &'q S,
                &'q S::QuotaKey,
                &'q Quota,
            ) -> LimiterFuture<'q, Result<T, LimiterError>>
            + Send
            + 'a,
    {
        let quota = self.quota.load();
        match ask(&self.store, &self.key, &quota).into_ready() {
            Ok(result) => LimiterFuture::ready(result),
            Err(_unpolled) => {
                LimiterFuture::new(async move { ask(&self.store, &self.key, &quota).await })
            }
        }
    }

    /// Moves a grant of `from` units to `to`; the grant's new ticket, if the
    /// store answered at once and can still adjust it.
    fn adjust(self: &Arc<Self>, ticket: u64, from: u32, to: u32) -> Option<u64> {
        let quota = self.quota.load();
        let adjusting = self.store.adjust(&self.key, &quota, ticket, from, to);
        match adjusting.into_ready() {
            Ok(result) => self.adjusted(result).flatten(),
            Err(_unpolled) => {
                let shared = Arc::clone(self);
                spawn_or_warn(&self.name, "adjust a grant", async move {
                    let adjust = || shared.store.adjust(&shared.key, &quota, ticket, from, to);
                    if until_applied(&shared.name, "adjust a grant", adjust)
                        .await
                        .is_some()
                    {
                        shared.released.notify();
                    }
                });
                None
            }
        }
    }

    fn adjusted(&self, result: Result<Option<u64>, LimiterError>) -> Option<Option<u64>> {
        match result {
            Ok(ticket) => {
                self.released.notify();
                Some(ticket)
            }
            Err(error) => {
                tracing::warn!(limiter = %self.name, %error, "could not adjust a grant");
                None
            }
        }
    }
}

impl<S: QuotaStore> Clone for RateLimiter<S> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            key: self.key.clone(),
        }
    }
}

impl<S: QuotaStore> RateLimiter<S> {
    /// A limiter enforcing `quota` under `name` in `store`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, Quota};
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let quota = Quota::gcra(100, Duration::from_secs(1))?;
    /// let limiter = RateLimiter::new(MemoryStore::new(), "geocoder", quota);
    /// assert_eq!(limiter.name(), "geocoder");
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(store: S, name: impl Into<String>, quota: Quota) -> Self {
        let name = name.into();
        let key = store.quota_key(&name);
        Self::with_key(store, name, key, quota)
    }

    fn with_key(store: S, name: String, key: S::QuotaKey, quota: Quota) -> Self {
        Self {
            shared: Arc::new(RateShared {
                name,
                released: ReleaseEvent::new(),
                store,
                key: key.clone(),
                quota: QuotaCell::new(quota),
            }),
            key,
        }
    }
}

impl RateLimiter {
    /// A limiter enforcing `quota` in this process alone: on a
    /// [`MemoryStore`] of its own, which decides GCRA and the token bucket
    /// with one compare-and-swap while no refund left a gap.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::store::Quota;
    /// use tower_limits::{Limiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::in_memory(Quota::gcra(10, Duration::from_secs(1))?.with_burst(2)?);
    /// let admission = limiter.try_acquire_many(2).await?;
    /// assert!(matches!(admission, Admission::Granted(_)));
    /// assert!(!limiter.can_proceed().await?); // 100 ms until the next cell
    /// # Ok(())
    /// # }
    /// ```
    pub fn in_memory(quota: Quota) -> Self {
        Self::new(MemoryStore::new(), String::new(), quota)
    }

    /// Starts building the seed's limiter: at most `max_executions` starts
    /// in any sliding `window` ([`Quota::sliding_log`]), named `name`, on a
    /// fresh [`MemoryStore`].
    ///
    /// **Backoff is on by default**: each denial while the window is full
    /// pushes the next start back by a growing delay (1 s, doubling up to
    /// 600 s, with jitter), on top of the window itself, so a saturated
    /// "10 per second" admits fewer than 10 a second (31-41 in 10 s were
    /// seen). That suits a client backing off a struggling upstream; for a
    /// plain sliding window, call
    /// [`without_backoff`](RateLimiterBuilder::without_backoff).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    ///
    /// let limiter = RateLimiter::builder("anthropic", 50, Duration::from_secs(60))
    ///     .initial_backoff(Duration::from_secs(2))
    ///     .backoff_multiplier(2.0)
    ///     .max_backoff(Duration::from_secs(120))
    ///     .build();
    /// assert!(limiter.is_ok());
    /// ```
    pub fn builder(
        name: impl Into<String>,
        max_executions: u32,
        window: Duration,
    ) -> RateLimiterBuilder<MemoryStore> {
        RateLimiterBuilder {
            name: name.into(),
            store: MemoryStore::new(),
            max_executions,
            window,
            backoff: Some(Backoff::SEED),
        }
    }

    /// [`builder`](RateLimiter::builder) with the limit given as a [`Rate`]:
    /// `rate.count()` starts per `rate.per()` window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{RateLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::from_rate("mail", "100/m".parse::<Rate>()?).build()?;
    /// assert_eq!(limiter.quota().capacity(), 100);
    /// assert_eq!(limiter.quota().window(), Duration::from_secs(60));
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_rate(name: impl Into<String>, rate: Rate) -> RateLimiterBuilder<MemoryStore> {
        Self::builder(name, rate.count(), rate.per())
    }
}

impl<S: QuotaStore> RateLimiter<S> {
    /// The limit's name (its key in the store).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::builder("payments-api", 10, Duration::from_secs(1)).build()?;
    /// assert_eq!(limiter.name(), "payments-api");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The quota it enforces.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::builder("api", 100, Duration::from_secs(60))
    ///     .without_backoff()
    ///     .build()?;
    /// let quota = limiter.quota();
    /// assert_eq!(quota.capacity(), 100);
    /// assert_eq!(quota.window(), Duration::from_secs(60));
    /// assert!(quota.backoff().is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub fn quota(&self) -> Quota {
        self.shared.quota.load()
    }

    /// Enforces `quota` from the next decision on, in this process, and
    /// wakes waiting callers to ask again. What was spent still counts: a
    /// sliding log keeps its starts and its pause, a new rate or burst for
    /// GCRA or a token bucket keeps the cells spent (the TAT's lead over
    /// now, rescaled to the new interval, in every store), a new limit for
    /// a window keeps its counts; a quota of another algorithm or window
    /// length starts afresh. A sliding log's backoff comes with its
    /// quota (keep it with [`Quota::with_backoff`]). Every process sharing
    /// the name should change together
    /// ([`AdaptiveRateLimiter::build_shared`](crate::limiters::AdaptiveRateLimiterBuilder::build_shared)
    /// does this as it learns the rate).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::Quota;
    /// use tower_limits::{Limiter, LimiterExt, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 1, Duration::from_secs(60)).build()?;
    /// drop(limiter.acquire().await?);
    /// assert!(!limiter.can_proceed().await?);
    ///
    /// let backoff = limiter.quota().backoff();
    /// let twice = Quota::sliding_log(2, Duration::from_secs(60))?.with_backoff(backoff)?;
    /// limiter.set_quota(twice); // the first start still counts
    /// assert_eq!(limiter.quota(), twice);
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        self.shared.quota.store(quota);
        self.shared.released.notify();
    }

    /// The store it decides in.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, QuotaStore};
    /// use tower_limits::{LimiterExt, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(60)).build()?;
    /// drop(limiter.acquire().await?);
    /// drop(limiter.acquire().await?);
    ///
    /// let store: &MemoryStore = limiter.store();
    /// let key = store.quota_key(limiter.name());
    /// assert_eq!(store.quota_status(&key, &limiter.quota()).await?.remaining(), 8);
    /// # Ok(())
    /// # }
    /// ```
    pub fn store(&self) -> &S {
        &self.shared.store
    }
}

/// A store decision as an admission; a denial also wakes on `listener`.
#[inline]
fn admission(decision: WindowDecision, cost: u32, listener: Option<ReleaseListener>) -> Admission {
    match decision {
        WindowDecision::Granted { ticket } => {
            Admission::Granted(Permit::with_token(ticket).with_cost(cost))
        }
        WindowDecision::Denied { retry_at } => {
            let denial = Denial::until(retry_at);
            Admission::Denied(match listener {
                Some(listener) => denial.or_released(listener),
                None => denial,
            })
        }
    }
}

impl<S: QuotaStore> RateLimiter<S> {
    /// After a denial the store made at once: listen, then decide once
    /// more, so a refund in between is not missed.
    #[inline(never)]
    fn denied_at_once(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let shared = &*self.shared;
        shared.decide_listening(shared.quota.load(), cost, shared.released.listen())
    }

    /// Everything but a decision the store made at once: a cost above the
    /// quota, or a store that answers later (across a network).
    #[inline]
    fn try_acquire_slowly(
        &self,
        quota: Quota,
        cost: u32,
    ) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let shared = &*self.shared;
        if let Err(error) = CostTooHigh::check(cost, quota.capacity()) {
            return LimiterFuture::ready(Err(error));
        }
        match shared.store.decide(&self.key, &quota, cost).into_ready() {
            Ok(Ok(WindowDecision::Denied { .. })) => {
                shared.decide_listening(quota, cost, shared.released.listen())
            }
            Ok(result) => LimiterFuture::ready(result.map(|d| admission(d, cost, None))),
            // A store that answers asynchronously: listen before deciding
            // (the unpolled future is dropped and made again).
            Err(_unpolled) => shared.decide_listening(quota, cost, shared.released.listen()),
        }
    }
}

impl<S: QuotaStore> Limiter for RateLimiter<S> {
    /// A grant the store makes at once (the memory store's, on its open
    /// line or under the key's lock) is the whole call; the quota read for
    /// it lives in registers.
    #[inline]
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let shared = &*self.shared;
        let quota = shared.quota.load();
        if cost <= quota.capacity() {
            match shared.store.decide_at_once(&self.key, &quota, cost) {
                Some(decision @ WindowDecision::Granted { .. }) => {
                    return LimiterFuture::ready(Ok(admission(decision, cost, None)));
                }
                Some(WindowDecision::Denied { .. }) => return self.denied_at_once(cost),
                None => {}
            }
        }
        self.try_acquire_slowly(quota, cost)
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        let look = self.peek(1);
        match look.into_ready() {
            Ok(result) => LimiterFuture::ready(result.map(|blocked| blocked.is_none())),
            Err(pending) => LimiterFuture::new(async move { Ok(pending.await?.is_none()) }),
        }
    }

    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        // One reading of the quota: the cost is checked against the quota looked at.
        let look = self.shared.ask(move |store, key, quota| {
            match CostTooHigh::check(cost, quota.capacity()) {
                Ok(()) => store.look(key, quota, cost),
                Err(error) => LimiterFuture::ready(Err(error)),
            }
        });
        let denial = |blocked: Option<Instant>| blocked.map(Denial::until);
        match look.into_ready() {
            Ok(result) => LimiterFuture::ready(result.map(denial)),
            Err(pending) => LimiterFuture::new(async move { Ok(denial(pending.await?)) }),
        }
    }

    fn quota_status(&self) -> LimiterFuture<'_, Result<Option<QuotaStatus>, LimiterError>> {
        let status = self
            .shared
            .ask(|store, key, quota| store.quota_status(key, quota));
        match status.into_ready() {
            Ok(result) => LimiterFuture::ready(result.map(Some)),
            Err(pending) => LimiterFuture::new(async move { pending.await.map(Some) }),
        }
    }

    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.shared.ask(|store, key, quota| store.take(key, quota))
    }

    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }

    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        let shared = &*self.shared;
        LimiterFuture::new(async move {
            let now = Instant::now();
            let look = shared.ask(|store, key, quota| store.look(key, quota, 1));
            Ok(look.await?.map_or(now, |at| at.max(now)))
        })
    }

    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.shared
            .ask(move |store, key, quota| store.pause(key, quota, at))
    }

    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let shared = &*self.shared;
        LimiterFuture::new(async move {
            shared
                .ask(|store, key, quota| store.reset(key, quota))
                .await?;
            shared.released.notify();
            Ok(())
        })
    }

    fn refund(&self, permit: Permit) {
        if let (Some(ticket), cost) = permit.disarm() {
            self.shared.adjust(ticket, cost, 0);
        }
    }

    fn settle(&self, permit: &mut Permit, actual: u32) {
        let (Some(ticket), from) = (permit.token(), permit.cost()) else {
            return;
        };
        let quota = self.quota();
        let actual = actual.min(quota.capacity());
        if from != actual {
            match self.shared.adjust(ticket, from, actual) {
                // A window's or a log's ticket (its window, its start)
                // stands; a GCRA grant's (its slot's end) moved where the
                // permit cannot learn it.
                None if quota.kind().is_cells() => permit.settled_for_good(actual),
                ticket => permit.settled(actual, ticket),
            }
        }
    }

    fn is_in_use(&self) -> bool {
        Arc::strong_count(&self.shared) > 1
    }
}

impl FreshLimiter for RateLimiter {
    /// A limiter of the same quota and name on the same store, with a state
    /// of its own that no name reaches.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::limiters::FreshLimiter;
    /// use tower_limits::store::Quota;
    /// use tower_limits::{Limiter, LimiterExt, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let template = RateLimiter::in_memory(Quota::fixed_window(1, Duration::from_secs(60))?);
    /// drop(template.acquire().await?);
    /// let fresh = template.fresh();
    /// assert!(fresh.can_proceed().await? && !template.can_proceed().await?);
    /// # Ok(())
    /// # }
    /// ```
    fn fresh(&self) -> Self {
        let store = self.shared.store.clone();
        let name = self.shared.name.clone();
        Self::with_key(store, name, MemoryStore::private_quota_key(), self.quota())
    }

    /// A GCRA or token bucket quota's state is one TAT, kept inline by a
    /// keyed limiter; the other quotas keep a limiter per key.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::limiters::FreshLimiter;
    /// use tower_limits::store::Quota;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let second = Duration::from_secs(1);
    /// assert!(RateLimiter::in_memory(Quota::gcra(5, second)?).inline_state().is_some());
    /// assert!(RateLimiter::in_memory(Quota::sliding_log(5, second)?).inline_state().is_none());
    /// # Ok(())
    /// # }
    /// ```
    fn inline_state(&self) -> Option<InlineState<Self>> {
        let QuotaKind::Cells(config) = self.quota().kind() else {
            return None;
        };
        let clock = self.shared.store.clock().clone();
        let make = |template: &Self, tat| {
            let quota = template.quota();
            let key = MemoryStore::quota_key_at(&quota, tat);
            let (store, name) = (template.shared.store.clone(), template.shared.name.clone());
            Self::with_key(store, name, key, quota)
        };
        let tat_of = |template: &Self, limiter: &Self| {
            let quota = template.quota();
            if limiter.quota() != quota {
                return None;
            }
            let shared = &limiter.shared;
            shared.store.inline_tat(&shared.key, &quota)
        };
        Some(InlineState::new(config, clock, self.fresh(), make, tat_of))
    }
}

impl<S: QuotaStore + fmt::Debug> fmt::Debug for RateLimiter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("name", &self.shared.name)
            .field("quota", &self.quota())
            .field("store", &self.shared.store)
            .finish()
    }
}

/// Configures a [`RateLimiter`]; made by [`RateLimiter::builder`].
///
/// Every setting has a default but the name, the limit and the window;
/// [`build`](RateLimiterBuilder::build) validates them all.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::store::MemoryStore;
/// use tower_limits::RateLimiter;
///
/// # fn main() -> Result<(), tower_limits::error::ConfigError> {
/// let limiter = RateLimiter::builder("search", 30, Duration::from_secs(60))
///     .store(MemoryStore::new())
///     .initial_backoff(Duration::from_millis(500))
///     .max_backoff(Duration::from_secs(30))
///     .build()?;
/// let backoff = limiter.quota().backoff();
/// assert_eq!(backoff.map(|b| b.initial()), Some(Duration::from_millis(500)));
/// assert_eq!(backoff.map(|b| b.multiplier()), Some(2.0)); // the default
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "call `build` to get a limiter"]
pub struct RateLimiterBuilder<S> {
    name: String,
    store: S,
    max_executions: u32,
    window: Duration,
    backoff: Option<Backoff>,
}

impl RateLimiterBuilder<MemoryStore> {
    /// Keeps the window in a fresh [`MemoryStore`] reading `clock`, like the
    /// other limiters' `with_clock`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::clock::Clock;
    /// use tower_limits::RateLimiter;
    ///
    /// let limiter = RateLimiter::builder("api", 100, Duration::from_secs(1))
    ///     .clock(Clock::fast())
    ///     .build();
    /// assert!(limiter.is_ok());
    /// ```
    pub fn clock(self, clock: Clock) -> Self {
        self.store(MemoryStore::new().with_clock(clock))
    }
}

impl<S: QuotaStore> RateLimiterBuilder<S> {
    /// Keeps the window in `store` instead of a fresh [`MemoryStore`].
    ///
    /// Limiters with the same name on the same store share one window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, QuotaStore};
    /// use tower_limits::{Limiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let limiter = RateLimiter::builder("emails", 10, Duration::from_secs(60))
    ///     .store(store.clone())
    ///     .build()?;
    /// limiter.record_start().await?;
    ///
    /// // The start is in the store handed to the builder.
    /// let key = store.quota_key("emails");
    /// assert_eq!(store.quota_status(&key, &limiter.quota()).await?.remaining(), 9);
    /// # Ok(())
    /// # }
    /// ```
    pub fn store<T: QuotaStore>(self, store: T) -> RateLimiterBuilder<T> {
        RateLimiterBuilder {
            name: self.name,
            store,
            max_executions: self.max_executions,
            window: self.window,
            backoff: self.backoff,
        }
    }

    /// The first backoff delay before escalation (default 1 s).
    ///
    /// The first backoff applied is this delay escalated once (see
    /// [`Backoff`]). Calling it after
    /// [`without_backoff`](RateLimiterBuilder::without_backoff) turns the
    /// backoff back on, with the other settings at their defaults.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(1))
    ///     .initial_backoff(Duration::from_secs(5))
    ///     .build()?;
    /// let initial = limiter.quota().backoff().map(|backoff| backoff.initial());
    /// assert_eq!(initial, Some(Duration::from_secs(5)));
    ///
    /// let error = RateLimiter::builder("api", 10, Duration::from_secs(1))
    ///     .initial_backoff(Duration::ZERO)
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(error.field(), "initial_backoff");
    /// # Ok(())
    /// # }
    /// ```
    pub fn initial_backoff(mut self, delay: Duration) -> Self {
        self.backoff_mut().initial = delay;
        self
    }

    /// The factor applied on each escalation (default 2).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(1))
    ///     .backoff_multiplier(1.5)
    ///     .build()?;
    /// let multiplier = limiter.quota().backoff().map(|backoff| backoff.multiplier());
    /// assert_eq!(multiplier, Some(1.5));
    ///
    /// // A multiplier below 1 would shrink the backoff.
    /// let error = RateLimiter::builder("api", 10, Duration::from_secs(1))
    ///     .backoff_multiplier(0.5)
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(error.field(), "backoff_multiplier");
    /// # Ok(())
    /// # }
    /// ```
    pub fn backoff_multiplier(mut self, multiplier: f64) -> Self {
        self.backoff_mut().multiplier = multiplier;
        self
    }

    /// The cap on the backoff delay (default 10 minutes).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(1))
    ///     .max_backoff(Duration::from_secs(30))
    ///     .build()?;
    /// let max = limiter.quota().backoff().map(|backoff| backoff.max());
    /// assert_eq!(max, Some(Duration::from_secs(30)));
    ///
    /// // The cap may not be below the initial delay (1 s by default).
    /// let error = RateLimiter::builder("api", 10, Duration::from_secs(1))
    ///     .max_backoff(Duration::from_millis(10))
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(error.field(), "max_backoff");
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_backoff(mut self, delay: Duration) -> Self {
        self.backoff_mut().max = delay;
        self
    }

    /// No backoff: a full window waits only until its oldest start leaves it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::{LimiterExt, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 1, Duration::from_secs(1))
    ///     .without_backoff()
    ///     .build()?;
    /// assert!(limiter.quota().backoff().is_none());
    ///
    /// let start = Instant::now();
    /// for _ in 0..3 {
    ///     drop(limiter.acquire().await?);
    /// }
    /// // Exactly one a second.
    /// assert_eq!(start.elapsed(), Duration::from_secs(2));
    /// # Ok(())
    /// # }
    /// ```
    pub fn without_backoff(mut self) -> Self {
        self.backoff = None;
        self
    }

    fn backoff_mut(&mut self) -> &mut Backoff {
        self.backoff.get_or_insert(Backoff::SEED)
    }

    /// Validates the configuration and builds the limiter.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the field if `max_executions` is 0, `window` is
    /// zero, or the backoff has a zero initial delay, a multiplier that is
    /// not a finite number of at least 1, or a cap below the initial delay.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::builder("api", 5, Duration::from_secs(1)).build()?;
    /// assert_eq!(limiter.quota().capacity(), 5);
    ///
    /// let error = RateLimiter::builder("api", 0, Duration::from_secs(1)).build().unwrap_err();
    /// assert_eq!(error.field(), "max_executions");
    /// let error = RateLimiter::builder("api", 5, Duration::ZERO).build().unwrap_err();
    /// assert_eq!(error.field(), "window");
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<RateLimiter<S>, ConfigError> {
        let quota = Quota::sliding_log(self.max_executions, self.window)?;
        let quota = quota.with_backoff(self.backoff)?;
        Ok(RateLimiter::new(self.store, self.name, quota))
    }
}
