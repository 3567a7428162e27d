//! [`RateLimiter`]: a sliding window of starts with exponential backoff.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::Clock;
use crate::error::{ConfigError, CostTooHigh, LimiterError};
use crate::limiter::{
    Admission, Denial, Limiter, LimiterFuture, Permit, ReleaseEvent, ReleaseListener,
};
use crate::limiters::internals::policy_cell::PolicyCell;
use crate::quota_status::QuotaStatus;
use crate::rate::Rate;
use crate::store::late::until_applied;
use crate::store::{Backoff, MemoryStore, RateLimiterStore, WindowDecision, WindowPolicy};

/// At most `max_executions` starts in any sliding `window`, with the classic
/// exponential backoff and full jitter once the window fills.
///
/// The window is kept in a [store](crate::store): [`MemoryStore`] by default,
/// a shared one to hold the limit across processes. Each decision is one
/// atomic store operation. Limiters with the same name on the same store share
/// one window.
///
/// When a start fills the window, the next start waits for the later of "the
/// oldest start leaves the window" and a jittered backoff (see [`Backoff`];
/// defaults: 1 s initial, ×2, 10 min cap). With a short window the backoff
/// dominates and the achieved rate stays well under the limit; call
/// [`without_backoff`](RateLimiterBuilder::without_backoff) for a plain
/// sliding window that admits exactly `max_executions` per window.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::{Limiter, LimiterExt, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RateLimiter::builder("openai-embeddings", 2, Duration::from_secs(1))
///     .without_backoff()
///     .build()?;
/// let start = tokio::time::Instant::now();
/// for _ in 0..4 {
///     drop(limiter.acquire().await?);
/// }
/// // Two at once, two more when the first two leave the window.
/// assert_eq!(start.elapsed(), Duration::from_secs(1));
/// # Ok(())
/// # }
/// ```
pub struct RateLimiter<S: RateLimiterStore = MemoryStore> {
    shared: Arc<RateShared<S>>,
}

struct RateShared<S: RateLimiterStore> {
    name: String,
    /// Fired when a refund or `clear` frees a start early.
    released: ReleaseEvent,
    store: S,
    key: S::Key,
    policy: PolicyCell,
}

impl<S: RateLimiterStore> RateShared<S> {
    #[inline]
    fn acquire(
        &self,
        policy: WindowPolicy,
        cost: u32,
    ) -> LimiterFuture<'_, Result<WindowDecision, LimiterError>> {
        self.store.acquire(&self.key, policy, cost, jitter(&policy))
    }

    /// Decides, with `listener` on a denial so a refund wakes the caller.
    fn acquire_listening(
        &self,
        policy: WindowPolicy,
        cost: u32,
        listener: ReleaseListener,
    ) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let admission = move |decision| admission(decision, cost, Some(listener));
        match self.acquire(policy, cost).into_ready() {
            Ok(result) => LimiterFuture::ready(result.map(admission)),
            Err(pending) => LimiterFuture::new(async move { Ok(admission(pending.await?)) }),
        }
    }

    /// The store operation for `adjustment`.
    fn adjustment(&self, adjustment: Adjustment) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let (key, policy) = (&self.key, self.policy.load());
        match adjustment {
            Adjustment::Refund { ticket, cost } => self.store.refund(key, policy, ticket, cost),
            Adjustment::Settle { ticket, from, to } => {
                self.store.settle(key, policy, ticket, from, to)
            }
        }
    }

    /// Applies `adjustment` now if the store answers at once, else on the
    /// runtime (a pending future is dropped unpolled and made again there).
    fn adjust(self: &Arc<Self>, adjustment: Adjustment) {
        match self.adjustment(adjustment).into_ready().ok() {
            Some(result) => self.adjusted(result),
            None => adjust_later(Arc::clone(self), adjustment),
        }
    }

    /// Wakes waiting callers, as starts may have been given back.
    fn adjusted(&self, result: Result<(), LimiterError>) {
        match result {
            Ok(()) => self.released.notify(),
            Err(error) => {
                tracing::warn!(limiter = %self.name, %error, "could not adjust recorded starts");
            }
        }
    }
}

/// A change to starts already recorded.
#[derive(Clone, Copy, Debug)]
enum Adjustment {
    /// The call never started: erase its starts.
    Refund { ticket: u64, cost: u32 },
    /// The call's real cost is known.
    Settle { ticket: u64, from: u32, to: u32 },
}

/// A jitter draw for the backoff; none is needed without one.
#[inline]
fn jitter(policy: &WindowPolicy) -> f64 {
    if policy.backoff.is_some() {
        fastrand::f64()
    } else {
        0.0
    }
}

impl<S: RateLimiterStore> Clone for RateLimiter<S> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl RateLimiter {
    /// Starts building a limiter named `name` allowing `max_executions`
    /// starts per `window`, on a fresh [`MemoryStore`].
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
            backoff: Some(DEFAULT_BACKOFF),
        }
    }
}

impl RateLimiter {
    /// [`builder`](RateLimiter::builder) with the limit given as a [`Rate`]:
    /// `rate.count()` starts per `rate.per()` window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{RateLimiter, Rate};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::from_rate("mail", "100/m".parse::<Rate>()?).build()?;
    /// assert_eq!(limiter.policy().max_executions(), 100);
    /// assert_eq!(limiter.policy().window(), Duration::from_secs(60));
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_rate(name: impl Into<String>, rate: Rate) -> RateLimiterBuilder<MemoryStore> {
        Self::builder(name, rate.count(), rate.per())
    }
}

const DEFAULT_BACKOFF: Backoff = Backoff {
    initial: Duration::from_secs(1),
    multiplier: 2.0,
    max: Duration::from_secs(600),
};

impl<S: RateLimiterStore> RateLimiter<S> {
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

    /// The validated policy.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::RateLimiter;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let limiter = RateLimiter::builder("api", 100, Duration::from_secs(60))
    ///     .without_backoff()
    ///     .build()?;
    /// let policy = limiter.policy();
    /// assert_eq!(policy.max_executions(), 100);
    /// assert_eq!(policy.window(), Duration::from_secs(60));
    /// assert!(policy.backoff().is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub fn policy(&self) -> WindowPolicy {
        self.shared.policy.load()
    }

    /// Changes the limit at runtime, keeping the backoff settings and every
    /// start already recorded: the new limit applies from the next decision.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] on the rules of [`RateLimiterBuilder::build`]; the
    /// limit is then unchanged.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{Limiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 1, Duration::from_secs(60))
    ///     .without_backoff()
    ///     .build()?;
    /// let Admission::Granted(_first) = limiter.try_acquire().await? else { unreachable!() };
    /// assert!(!limiter.can_proceed().await?);
    /// limiter.set_limit(2, Duration::from_secs(60))?; // the first start still counts
    /// assert!(limiter.can_proceed().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_limit(&self, max_executions: u32, window: Duration) -> Result<(), ConfigError> {
        let policy = WindowPolicy {
            max_executions,
            window,
            ..self.policy()
        };
        validate(&policy)?;
        self.shared.policy.store(policy);
        self.shared.released.notify();
        Ok(())
    }

    /// The store behind this limiter.
    ///
    /// Through it the limiter's window can be inspected with the
    /// [`RateLimiterStore`] operations.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::RateLimiterStore;
    /// use tower_limits::{LimiterExt, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::builder("api", 10, Duration::from_secs(60)).build()?;
    /// drop(limiter.acquire().await?);
    /// drop(limiter.acquire().await?);
    ///
    /// let store = limiter.store();
    /// let key = store.key(limiter.name());
    /// let window = limiter.policy().window();
    /// assert_eq!(store.execution_count(&key, window).await?, 2);
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

/// Runs a store's asynchronous adjustment on the current runtime. Outside a
/// runtime the starts stay as they are (a refund is lost: the window
/// over-counts, never under).
fn adjust_later<S: RateLimiterStore>(shared: Arc<RateShared<S>>, adjustment: Adjustment) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move {
                let adjust = || shared.adjustment(adjustment);
                if until_applied(&shared.name, "adjust recorded starts", adjust)
                    .await
                    .is_some()
                {
                    shared.released.notify();
                }
            });
        }
        Err(_) => {
            tracing::warn!(limiter = %shared.name, ?adjustment, "no runtime to adjust recorded starts");
        }
    }
}

impl<S: RateLimiterStore> Limiter for RateLimiter<S> {
    /// A call costing `cost` records `cost` starts.
    #[inline]
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let shared = &*self.shared;
        let policy = shared.policy.load();
        if let Err(error) = CostTooHigh::check(cost, policy.max_executions) {
            return LimiterFuture::ready(Err(error));
        }
        match shared.acquire(policy, cost).into_ready() {
            // Listen, then look once more: a refund in between is not missed.
            Ok(Ok(WindowDecision::Denied { .. })) => {
                shared.acquire_listening(policy, cost, shared.released.listen())
            }
            Ok(result) => LimiterFuture::ready(result.map(|d| admission(d, cost, None))),
            // A store that answers asynchronously: listen before deciding
            // (the unpolled future is dropped and made again).
            Err(_unpolled) => shared.acquire_listening(policy, cost, shared.released.listen()),
        }
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        let shared = &*self.shared;
        let peek = shared.store.peek(&shared.key, shared.policy.load(), 1);
        match peek.into_ready() {
            Ok(result) => LimiterFuture::ready(result.map(|blocked| blocked.is_none())),
            Err(pending) => LimiterFuture::new(async move { Ok(pending.await?.is_none()) }),
        }
    }

    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        let shared = &*self.shared;
        let peek = shared.store.peek(&shared.key, shared.policy.load(), cost);
        let denial = |blocked: Option<Instant>| blocked.map(Denial::until);
        match peek.into_ready() {
            Ok(result) => LimiterFuture::ready(result.map(denial)),
            Err(pending) => LimiterFuture::new(async move { Ok(denial(pending.await?)) }),
        }
    }

    /// The policy's limit and window, and where the window stands: one
    /// [`RateLimiterStore::window_status`].
    fn quota_status(&self) -> LimiterFuture<'_, Result<Option<QuotaStatus>, LimiterError>> {
        let shared = &*self.shared;
        let status = shared
            .store
            .window_status(&shared.key, shared.policy.load());
        match status.into_ready() {
            Ok(result) => LimiterFuture::ready(result.map(Some)),
            Err(pending) => LimiterFuture::new(async move { pending.await.map(Some) }),
        }
    }

    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let shared = &*self.shared;
        let policy = shared.policy.load();
        shared
            .store
            .record_execution(&shared.key, policy, jitter(&policy))
    }

    /// Starts are what a sliding window counts: a finished call changes nothing.
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }

    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        let shared = &*self.shared;
        LimiterFuture::new(async move {
            let now = Instant::now();
            let blocked = shared
                .store
                .peek(&shared.key, shared.policy.load(), 1)
                .await?;
            Ok(blocked.map_or(now, |at| at.max(now)))
        })
    }

    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.shared.store.set_next_available(&self.shared.key, at)
    }

    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let shared = &*self.shared;
        LimiterFuture::new(async move {
            shared.store.clear(&shared.key).await?;
            shared.released.notify();
            Ok(())
        })
    }

    /// Erases the permit's start from the window (and the backoff it set).
    fn refund(&self, permit: Permit) {
        if let (Some(ticket), cost) = permit.disarm() {
            self.shared.adjust(Adjustment::Refund { ticket, cost });
        }
    }

    /// Erases or adds starts at the permit's start time, up to the window's
    /// limit.
    fn settle(&self, permit: &mut Permit, actual: u32) {
        let (Some(ticket), from) = (permit.token(), permit.cost()) else {
            return;
        };
        let max = self.policy().max_executions();
        let actual = actual.min(max);
        if from != actual {
            let to = actual;
            self.shared.adjust(Adjustment::Settle { ticket, from, to });
            permit.settled(actual, None);
        }
    }

    fn is_in_use(&self) -> bool {
        Arc::strong_count(&self.shared) > 1
    }
}

impl<S: RateLimiterStore + fmt::Debug> fmt::Debug for RateLimiter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("name", &self.shared.name)
            .field("policy", &self.policy())
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
/// let backoff = limiter.policy().backoff().copied();
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

impl<S: RateLimiterStore> RateLimiterBuilder<S> {
    /// Keeps the window in `store` instead of a fresh [`MemoryStore`].
    ///
    /// Limiters with the same name on the same store share one window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::store::{MemoryStore, RateLimiterStore};
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
    /// let key = store.key("emails");
    /// assert_eq!(store.execution_count(&key, Duration::from_secs(60)).await?, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn store<T: RateLimiterStore>(self, store: T) -> RateLimiterBuilder<T> {
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
    /// let initial = limiter.policy().backoff().map(|backoff| backoff.initial());
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
    /// let multiplier = limiter.policy().backoff().map(|backoff| backoff.multiplier());
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
    /// let max = limiter.policy().backoff().map(|backoff| backoff.max());
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
    /// assert!(limiter.policy().backoff().is_none());
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
        self.backoff.get_or_insert(DEFAULT_BACKOFF)
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
    /// assert_eq!(limiter.policy().max_executions(), 5);
    ///
    /// let error = RateLimiter::builder("api", 0, Duration::from_secs(1)).build().unwrap_err();
    /// assert_eq!(error.field(), "max_executions");
    /// let error = RateLimiter::builder("api", 5, Duration::ZERO).build().unwrap_err();
    /// assert_eq!(error.field(), "window");
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<RateLimiter<S>, ConfigError> {
        let policy = WindowPolicy {
            max_executions: self.max_executions,
            window: self.window,
            backoff: self.backoff,
        };
        validate(&policy)?;
        let key = self.store.key(&self.name);
        Ok(RateLimiter {
            shared: Arc::new(RateShared {
                name: self.name,
                released: ReleaseEvent::new(),
                store: self.store,
                key,
                policy: PolicyCell::new(policy),
            }),
        })
    }
}

fn validate(policy: &WindowPolicy) -> Result<(), ConfigError> {
    crate::algorithms::windows::validate(policy.max_executions, policy.window)?;
    let Some(backoff) = &policy.backoff else {
        return Ok(());
    };
    if backoff.initial.is_zero() {
        return Err(ConfigError::new(
            "initial_backoff",
            backoff.initial,
            "must be longer than zero (use `without_backoff` for none)",
        ));
    }
    if !(backoff.multiplier.is_finite() && backoff.multiplier >= 1.0) {
        return Err(ConfigError::new(
            "backoff_multiplier",
            backoff.multiplier,
            "must be a finite number of at least 1",
        ));
    }
    if backoff.max < backoff.initial {
        return Err(ConfigError::new(
            "max_backoff",
            backoff.max,
            "must be at least `initial_backoff`",
        ));
    }
    Ok(())
}
