//! [`KeyedLimiter`]: one limit per key (tenant, API key, route, peer), in
//! bounded memory.

use std::collections::VecDeque;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::atomic::{Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use hashbrown::HashTable;

use super::InlineState;
use crate::clock::{Clock, duration_nanos};
use crate::error::{ConfigError, KeysFull, LimiterError};
use crate::limiter::{Admission, Limiter, LimiterFuture};
use crate::line::Queue;
use crate::quota_status::QuotaStatus;

/// The default bound on the number of keys held at once.
const DEFAULT_MAX_KEYS: usize = 10_000;
/// The default time after which an unused key may be forgotten.
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// Keys are spread over at most this many independently locked shards...
const MAX_SHARDS: usize = 32;
/// ...each holding at least this many keys (small maps use one shard).
const MIN_KEYS_PER_SHARD: usize = 64;

/// Keeps one limiter per key, made on first use by a function you give, so
/// every tenant (API key, route, peer address) gets its own limit.
///
/// Per-group limits (one limit per queue, job type or tenant) are keyed limits: one sliding window per
/// group.
///
/// # Memory is bounded
///
/// At most [`max_keys`](KeyedLimiterBuilder::max_keys) keys (default 10,000)
/// are held at once. The map is split into up to 32 shards of at least 64
/// keys, each with its own lock and its own share of the bound. When a new key
/// arrives and its shard is full,
/// keys unused for [`idle_timeout`](KeyedLimiterBuilder::idle_timeout)
/// (default 10 minutes; see [`evict_idle`](KeyedLimiter::evict_idle) for how
/// precisely) are forgotten, and if none is idle, the least recently
/// used eighth of that shard is. A forgotten key's next call starts from a fresh
/// limiter: a key flood cannot grow memory past the bound, at the price of
/// forgetting the history of the least active keys. Size the bound above the
/// number of keys active within one window.
///
/// Made [`of`](KeyedLimiter::of) a template whose state is one number (a
/// [`RateLimiter`](crate::RateLimiter) of a GCRA or token bucket quota in
/// memory), the keyed limiter
/// keeps that number beside each key (16 bytes a `u64` key) rather than a
/// limiter per key; see [`InlineState`]. Such a key's idleness is read from
/// its state, on its limiter's clock: it is idle once the instant at which
/// its bucket was full again is `idle_timeout` past, and the keys forgotten
/// first when its shard is full are those whose bucket has been full the
/// longest.
///
/// A key **in use** is never forgotten (see [`Limiter::is_in_use`]): one
/// with a call running that its limiter counts (a concurrency slot), a
/// caller waiting in its lane, or a handle from [`limiter`](Self::limiter)
/// still held. Forgetting it would let a fresh limiter admit past the calls
/// still running. If every key of a full shard is in use, a new key is
/// refused with [`KeysFull`] until one of them is free.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::limiter::Admission;
/// use tower_limits::{KeyedLimiter, Limiter, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Two requests per second per tenant.
/// let per_tenant = KeyedLimiter::builder(|tenant: &String| {
///     RateLimiter::builder(tenant.clone(), 2, Duration::from_secs(1))
///         .without_backoff()
///         .build()
///         .expect("valid configuration")
/// })
/// .max_keys(1_000)
/// .build()?;
///
/// let acme = "acme".to_owned();
/// for _ in 0..2 {
///     assert!(matches!(per_tenant.try_acquire(&acme).await?, Admission::Granted(_)));
/// }
/// assert!(matches!(per_tenant.try_acquire(&acme).await?, Admission::Denied(_)));
/// // Another tenant is not affected by acme's backlog.
/// let globex = "globex".to_owned();
/// assert!(matches!(per_tenant.try_acquire(&globex).await?, Admission::Granted(_)));
/// assert_eq!(per_tenant.len(), 2);
/// # Ok(())
/// # }
/// ```
///
/// # Hot keys
///
/// One key's limiter is one point every caller of that key goes through: a
/// shared counter in memory, one slot in Redis. Where a key is too hot for
/// that, split it into shards: key the limiter by `(key, shard)`,
/// give each shard its [`Rate::share`](crate::Rate::share) of the rate, and
/// let each worker use its own shard. The shards together never exceed the
/// key's rate; the looser part is that a worker gets its shard's share, not
/// what another shard leaves unused.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::limiter::Admission;
/// use tower_limits::{KeyedLimiter, Rate, RateLimiter};
/// use tower_limits::store::Quota;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// const SHARDS: u32 = 4;
/// let rate: Rate = "100/s".parse()?;
/// let per_tenant = KeyedLimiter::builder(move |&(_tenant, shard): &(&str, u32)| {
///     let share = rate.share(shard, SHARDS).expect("4 shards of 100/s");
///     RateLimiter::in_memory(Quota::gcra(share.count(), share.per()).expect("valid share"))
/// })
/// .build()?;
///
/// // Worker 3 of 8 takes its shard of the hot tenant: 25 a second, of the 100.
/// let shard = 3 % SHARDS;
/// let key = ("acme", shard);
/// assert_eq!(per_tenant.limiter(&key)?.quota().window(), Duration::from_millis(40)); // 25 a second
/// assert!(matches!(per_tenant.try_acquire(&key).await?, Admission::Granted(_)));
/// # Ok(())
/// # }
/// ```
pub struct KeyedLimiter<K, L> {
    inner: Arc<KeyedInner<K, L>>,
}

type Make<K, L> = dyn Fn(&K) -> L + Send + Sync;

struct KeyedInner<K, L> {
    make: Box<Make<K, L>>,
    /// How keys are kept inline, for a template that has an inline form.
    inline: Option<InlineState<L>>,
    shards: Box<[ShardLock<K, L>]>,
    keys_per_shard: usize,
    idle_timeout: u64,
    hasher: RandomState,
    clock: Clock,
    /// The live keys, for the gauge of a named keyed limiter.
    #[cfg(feature = "metrics")]
    keys: Option<crate::limiters::internals::gauge::KeyCount>,
}

/// A shard behind its lock, on cache lines of its own, so that threads
/// on different shards do not slow each other down.
#[repr(align(128))]
struct ShardLock<K, L>(Mutex<Shard<K, L>>);

/// One lock's share of the keys. The key's hash, computed once per call,
/// picks the shard and finds the key within it.
///
/// A key is in one of two tables: `inline` (a keyed limiter made `of` a
/// template with an [`InlineState`], while no handle to the key is held),
/// or `entries` (a limiter of its own).
///
/// A use of an entry is stamped with a count, not a clock reading, so a
/// call on a known key reads no clock (the limiter reads its own). What a
/// count means in time comes from the checkpoints taken when the clock is
/// read anyway: for a new key, and by [`KeyedLimiter::evict_idle`]. An
/// inline key needs no stamp: its TAT is later than its latest use (a grant
/// moves it past now; a denial finds it past now).
struct Shard<K, L> {
    inline: HashTable<InlineEntry<K>>,
    entries: HashTable<Entry<K, L>>,
    /// How many uses so far: the stamp of the latest.
    uses: u64,
    /// Oldest first, at most [`CHECKPOINTS`]; see [`Shard::checkpoint`].
    checkpoints: VecDeque<Checkpoint>,
}

/// Every use stamped up to `uses` happened at or before `nanos`.
#[derive(Clone, Copy)]
struct Checkpoint {
    uses: u64,
    nanos: u64,
}

/// Every other checkpoint is at least an eighth of the idle timeout past
/// the one before it: 32 span about two timeouts.
const CHECKPOINTS: usize = 32;

/// A key kept inline and its TAT: 16 bytes with a `u64` key, aligned so
/// that a lookup touches one cache line. The hash is computed again when
/// the table grows, rather than kept.
#[repr(align(16))]
struct InlineEntry<K> {
    key: K,
    tat: u64,
}

/// A key with a limiter of its own.
struct Entry<K, L> {
    key: K,
    /// The shard's use count at the key's latest use.
    last_used: u64,
    limiter: L,
    /// The key's line of waiting callers, made for the first caller of
    /// [`KeyedLimitLayer`](crate::limit::KeyedLimitLayer) that has to wait.
    queue: Option<Arc<Queue>>,
}

/// Where a key's state is found.
enum Place<'a, K, L> {
    /// An inline key's TAT.
    Inline(&'a mut u64),
    Limiter(&'a mut Entry<K, L>),
}

/// The form a caller needs a key's state in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// To decide: inline where it can be.
    Decision,
    /// A limiter, for a handle.
    Limiter,
}

impl<K, L> Clone for KeyedLimiter<K, L> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K, L> KeyedLimiter<K, L>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    L: Limiter + Clone,
{
    /// Starts building a keyed limiter that gives every key a limiter like
    /// `template`: the same configuration (validated once, when `template`
    /// was built), with a state of its own.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{KeyedLimiter, Limiter, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_tenant = KeyedLimiter::of(RateLimiter::in_memory(Quota::gcra(1, Duration::from_secs(1))?)).build()?;
    /// assert!(matches!(per_tenant.try_acquire(&"acme").await?, Admission::Granted(_)));
    /// assert!(matches!(per_tenant.try_acquire(&"acme").await?, Admission::Denied(_)));
    /// assert!(matches!(per_tenant.try_acquire(&"globex").await?, Admission::Granted(_)));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Where the template has an [inline form](FreshLimiter::inline_state)
    /// (a [`RateLimiter`](crate::RateLimiter) of a GCRA or token bucket
    /// quota in memory), a key's state is
    /// kept beside the key in the map, and a decision on it takes no
    /// allocation and no pointer chase: the same decisions, faster (see
    /// [`InlineState`]).
    pub fn of(template: L) -> KeyedLimiterBuilder<K, L>
    where
        L: FreshLimiter,
    {
        let inline = template.inline_state();
        KeyedLimiterBuilder {
            inline,
            ..Self::builder(move |_| template.fresh())
        }
    }

    /// Starts building a keyed limiter whose per-key limiters `make` creates.
    ///
    /// ```
    /// use tower_limits::{ConcurrencyLimiter, KeyedLimiter};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_route = KeyedLimiter::builder(|_route: &&'static str| {
    ///     ConcurrencyLimiter::new(4).expect("valid configuration")
    /// })
    /// .build()?;
    /// assert_eq!(per_route.limiter(&"/search")?.max_concurrent(), 4);
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(make: impl Fn(&K) -> L + Send + Sync + 'static) -> KeyedLimiterBuilder<K, L> {
        KeyedLimiterBuilder {
            make: Box::new(make),
            inline: None,
            max_keys: DEFAULT_MAX_KEYS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            clock: Clock::default(),
            #[cfg(feature = "metrics")]
            name: None,
        }
    }

    /// The limiter of `key`, made now if the key is new (or was forgotten).
    /// Clones share its state, so a handle kept for `set_next_available_time`
    /// acts on the key's limit; while it is held, the key is in use and is
    /// not forgotten.
    ///
    /// # Errors
    ///
    /// [`KeysFull`] if the key is new and every key of its full shard is in
    /// use.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{DelayLimiter, KeyedLimiter, Limiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_tenant = KeyedLimiter::of(DelayLimiter::new(Duration::from_millis(100))?).build()?;
    ///
    /// // acme's upstream answered 429: pause acme alone for 30 s.
    /// let acme = per_tenant.limiter(&"acme")?;
    /// acme.set_next_available_time(Instant::now() + Duration::from_secs(30)).await?;
    /// assert!(matches!(per_tenant.try_acquire(&"acme").await?, Admission::Denied(_)));
    /// assert!(matches!(per_tenant.try_acquire(&"globex").await?, Admission::Granted(_)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn limiter(&self, key: &K) -> Result<L, KeysFull> {
        self.with_limiter(key, |entry| entry.limiter.clone())
    }

    /// `key`'s limiter and its queue of waiting callers.
    pub(crate) fn lane(&self, key: &K) -> Result<(L, Arc<Queue>), KeysFull> {
        self.with_limiter(key, |entry| {
            let queue = entry.queue.get_or_insert_default();
            (entry.limiter.clone(), Arc::clone(queue))
        })
    }

    /// What `key`'s limiter says of its quota
    /// ([`Limiter::quota_status`]): the limit, what is left and when it
    /// refills, for `RateLimit` headers or a tenant's dashboard; `None`
    /// from limiters that keep no quota (a concurrency limit). A key kept
    /// inline is read in place, without making its limiter; a key not seen
    /// before reads as a fresh one. A [`KeysFull`] inside the
    /// [`LimiterError`] if the key is new and finds no room.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{KeyedLimiter, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // 10 a minute per tenant, all 10 at once if they like.
    /// let per_tenant = KeyedLimiter::of(RateLimiter::in_memory(Quota::gcra(10, Duration::from_secs(60))?.with_burst(10)?))
    ///     .build()?;
    /// for _ in 0..3 {
    ///     drop(per_tenant.try_acquire(&"acme").await?);
    /// }
    /// let acme = per_tenant.quota_status(&"acme").await?.expect("a GCRA keeps a quota");
    /// assert_eq!((acme.limit(), acme.remaining()), (10, 7));
    /// let globex = per_tenant.quota_status(&"globex").await?.expect("a GCRA keeps a quota");
    /// assert_eq!(globex.remaining(), 10);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn quota_status(&self, key: &K) -> Result<Option<QuotaStatus>, LimiterError> {
        match self.quota(key) {
            Ok(Ok(inline)) => Ok(Some(inline)),
            Ok(Err(limiter)) => limiter.quota_status().await,
            Err(full) => Err(LimiterError::new(full)),
        }
    }

    /// `key`'s quota, read in place if the key is kept inline (no limiter
    /// is made for it); otherwise its limiter, to ask.
    fn quota(&self, key: &K) -> Result<Result<QuotaStatus, L>, KeysFull> {
        let hash = self.inner.hash(key);
        self.with_place(hash, key, Form::Decision, |place| match place {
            Place::Inline(tat) => {
                let inline = self.inner.inline.as_ref();
                Ok(inline.expect("kept inline").quota_status(*tat))
            }
            Place::Limiter(entry) => Err(entry.limiter.clone()),
        })
    }

    /// Runs `use_entry` on `key`'s entry, with a limiter made now if the key
    /// is new or kept inline, under its shard's lock.
    fn with_limiter<T>(
        &self,
        key: &K,
        use_entry: impl FnOnce(&mut Entry<K, L>) -> T,
    ) -> Result<T, KeysFull> {
        let hash = self.inner.hash(key);
        self.with_place(hash, key, Form::Limiter, |place| match place {
            Place::Limiter(entry) => use_entry(entry),
            Place::Inline(_) => unreachable!("a limiter was asked for"),
        })
    }

    /// Runs `use_place` on `key`'s state in `form` (or inline, if it can
    /// be and a decision is all the caller makes), made now if the key is
    /// new, under its shard's lock; [`KeysFull`] if a new key finds no room.
    fn with_place<T>(
        &self,
        hash: u64,
        key: &K,
        form: Form,
        use_place: impl FnOnce(Place<'_, K, L>) -> T,
    ) -> Result<T, KeysFull> {
        let inner = &*self.inner;
        let rehash_inline = |entry: &InlineEntry<K>| inner.hash(&entry.key);
        let rehash = |entry: &Entry<K, L>| inner.hash(&entry.key);
        let mut guard = inner.shard(hash);
        let shard = &mut *guard;
        if let Ok(found) = shard.entries.find_entry(hash, |entry| entry.key == *key) {
            shard.uses += 1;
            if form == Form::Decision
                && let Some(inline) = &inner.inline
                && !found.get().is_in_use()
            {
                // The last handle let go (a release); its writes are seen here.
                fence(Ordering::Acquire);
                if let Some(tat) = inline.tat_of(&found.get().limiter) {
                    let (entry, _) = found.remove();
                    let entry = InlineEntry {
                        key: entry.key,
                        tat,
                    };
                    let entry = shard.inline.insert_unique(hash, entry, rehash_inline);
                    return Ok(use_place(Place::Inline(&mut entry.into_mut().tat)));
                }
            }
            let entry = found.into_mut();
            entry.last_used = shard.uses;
            return Ok(use_place(Place::Limiter(entry)));
        }
        let inline = inner.inline.as_ref();
        if let Some(inline) = inline
            && let Ok(found) = shard.inline.find_entry(hash, |entry| entry.key == *key)
        {
            if form == Form::Decision {
                return Ok(use_place(Place::Inline(&mut found.into_mut().tat)));
            }
            let (InlineEntry { key, tat }, _) = found.remove();
            shard.uses += 1;
            let entry = Entry {
                key,
                last_used: shard.uses,
                limiter: inline.limiter(tat),
                queue: None,
            };
            let entry = shard.entries.insert_unique(hash, entry, rehash);
            return Ok(use_place(Place::Limiter(entry.into_mut())));
        }
        let before = shard.len();
        let inserted = self.insert_new(shard, hash, key, form, use_place);
        inner.keys_changed(before, shard.len());
        inserted
    }

    /// [`with_place`](Self::with_place) for a key `shard` does not hold:
    /// makes room for it if the shard is full, then holds it in `form`.
    fn insert_new<T>(
        &self,
        shard: &mut Shard<K, L>,
        hash: u64,
        key: &K,
        form: Form,
        use_place: impl FnOnce(Place<'_, K, L>) -> T,
    ) -> Result<T, KeysFull> {
        let inner = &*self.inner;
        let rehash_inline = |entry: &InlineEntry<K>| inner.hash(&entry.key);
        let rehash = |entry: &Entry<K, L>| inner.hash(&entry.key);
        let inline = inner.inline.as_ref();
        // The new key's use is stamped before the checkpoint, which counts it.
        shard.uses += 1;
        let stamp = shard.uses;
        let now = inner.clock.now_nanos();
        shard.checkpoint(now, inner.idle_timeout);
        if shard.len() >= inner.keys_per_shard && !shard.make_room(now, inner.idle_timeout, inline)
        {
            return Err(KeysFull::new(inner.keys_per_shard));
        }
        let key = key.clone();
        if inline.is_some() && form == Form::Decision {
            let entry = InlineEntry {
                key,
                tat: InlineState::<L>::FRESH,
            };
            let entry = shard.inline.insert_unique(hash, entry, rehash_inline);
            return Ok(use_place(Place::Inline(&mut entry.into_mut().tat)));
        }
        let limiter = match inline {
            Some(inline) => inline.limiter(InlineState::<L>::FRESH),
            None => (inner.make)(&key),
        };
        let entry = Entry {
            key,
            last_used: stamp,
            limiter,
            queue: None,
        };
        let entry = shard.entries.insert_unique(hash, entry, rehash);
        Ok(use_place(Place::Limiter(entry.into_mut())))
    }

    /// [`Limiter::try_acquire`] on `key`'s limiter.
    ///
    /// ```
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{ConcurrencyLimiter, KeyedLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // One call at a time per peer.
    /// let per_peer = KeyedLimiter::of(ConcurrencyLimiter::new(1)?).build()?;
    /// let Admission::Granted(permit) = per_peer.try_acquire(&1).await? else {
    ///     unreachable!("peer 1 is idle");
    /// };
    /// assert!(matches!(per_peer.try_acquire(&1).await?, Admission::Denied(_)));
    /// assert!(matches!(per_peer.try_acquire(&2).await?, Admission::Granted(_)));
    /// drop(permit); // peer 1's call ends
    /// assert!(matches!(per_peer.try_acquire(&1).await?, Admission::Granted(_)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire(&self, key: &K) -> LimiterFuture<'static, Result<Admission, LimiterError>> {
        self.try_acquire_many(key, 1)
    }

    /// [`Limiter::try_acquire_many`] on `key`'s limiter; a [`KeysFull`]
    /// inside the [`LimiterError`] if the key is new and finds no room.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::limiter::Admission;
    /// use tower_limits::{DelayLimiter, KeyedLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let keyed = KeyedLimiter::of(DelayLimiter::new(Duration::from_secs(1))?)
    ///     .build()?;
    /// assert!(matches!(keyed.try_acquire_many(&7, 3).await?, Admission::Granted(_)));
    /// assert!(matches!(keyed.try_acquire_many(&7, 1).await?, Admission::Denied(_)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire_many(
        &self,
        key: &K,
        cost: u32,
    ) -> LimiterFuture<'static, Result<Admission, LimiterError>> {
        let hash = self.inner.hash(key);
        if let Some(inline) = &self.inner.inline
            && let Some(admission) = self.try_inline(inline, hash, key, cost)
        {
            return LimiterFuture::ready(Ok(admission));
        }
        // In-memory limiters decide under the shard's lock, without a clone;
        // a limiter that answers later gets a clone to own its future (the
        // pending one is dropped unpolled and made again).
        let answer = self.with_place(hash, key, Form::Decision, |place| match place {
            Place::Inline(tat) => {
                let inline = self.inner.inline.as_ref();
                Ok(inline.expect("kept inline").admit(tat, cost))
            }
            Place::Limiter(entry) => {
                let answer = entry.limiter.try_acquire_many(cost).into_ready();
                answer.map_err(|_| entry.limiter.clone())
            }
        });
        match answer {
            Ok(Ok(answer)) => LimiterFuture::ready(answer),
            Ok(Err(limiter)) => {
                LimiterFuture::new(async move { limiter.try_acquire_many(cost).await })
            }
            Err(full) => LimiterFuture::ready(Err(LimiterError::new(full))),
        }
    }

    /// The hot path: a known key kept inline, a cost within the burst.
    /// The decision under the lock is a few plain operations on the
    /// entry (the clock read overlapping the entry's cache miss); the
    /// admission is made after the lock. `None` for anything else (a new
    /// key, a key with a limiter), which takes the general path.
    #[inline(always)]
    fn try_inline(
        &self,
        inline: &InlineState<L>,
        hash: u64,
        key: &K,
        cost: u32,
    ) -> Option<Admission> {
        if !inline.fits(cost) {
            return None;
        }
        let decision = {
            let mut shard = self.inner.shard(hash);
            let entry = shard.inline.find_mut(hash, |entry| entry.key == *key)?;
            // Read while the entry's cache line is on its way.
            let now = inline.now();
            inline.decide(now, &mut entry.tat, cost)
        };
        Some(inline.admission(decision, cost))
    }

    /// How many keys are held now (at most the configured maximum).
    ///
    /// ```
    /// use tower_limits::{KeyedLimiter, NullLimiter};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let keyed = KeyedLimiter::builder(|_: &u32| NullLimiter).build()?;
    /// for key in [1, 2, 3, 1, 2] {
    ///     keyed.limiter(&key)?;
    /// }
    /// assert_eq!(keyed.len(), 3); // each key once
    /// # Ok(())
    /// # }
    /// ```
    pub fn len(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|shard| lock(&shard.0).len())
            .sum()
    }

    /// Whether no key is held.
    ///
    /// ```
    /// use tower_limits::{KeyedLimiter, NullLimiter};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let keyed = KeyedLimiter::builder(|_: &u32| NullLimiter).build()?;
    /// assert!(keyed.is_empty()); // limiters are made on first use
    /// keyed.limiter(&1)?;
    /// assert!(!keyed.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets the keys unused for longer than the idle timeout now,
    /// instead of waiting for the map to fill. Returns how many were
    /// forgotten.
    ///
    /// A key is never forgotten within the idle timeout of its last use, nor
    /// while it is in use.
    /// Uses of known keys read no clock, so a key's idleness is known from
    /// the clock readings around it: a key unused since an earlier call of
    /// `evict_idle` (or since a new key arrived) is surely forgotten once
    /// the timeout and an eighth of it have passed since then. A key kept
    /// inline is forgotten once the timeout has passed since its bucket was
    /// full again (for GCRA with a burst of 1, since its last grant plus one
    /// interval). Call it periodically to free the memory of idle keys
    /// early.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{ConcurrencyLimiter, KeyedLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let keyed = KeyedLimiter::of(ConcurrencyLimiter::new(1)?)
    ///     .idle_timeout(Duration::from_secs(60))
    ///     .build()?;
    /// keyed.limiter(&1)?;
    /// tokio::time::advance(Duration::from_secs(61)).await;
    /// keyed.limiter(&2)?;
    /// assert_eq!(keyed.evict_idle(), 1);
    /// assert_eq!(keyed.len(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn evict_idle(&self) -> usize {
        let inner = &*self.inner;
        let now = inner.clock.now_nanos();
        inner
            .shards
            .iter()
            .map(|shard| {
                let mut shard = lock(&shard.0);
                shard.checkpoint(now, inner.idle_timeout);
                let before = shard.len();
                let forgotten = shard.evict_idle(now, inner.idle_timeout, inner.inline.as_ref());
                inner.keys_changed(before, shard.len());
                forgotten
            })
            .sum()
    }
}

fn lock<K, L>(shard: &Mutex<Shard<K, L>>) -> MutexGuard<'_, Shard<K, L>> {
    // Every update is one map operation: a poisoned shard is still consistent.
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K, L> KeyedInner<K, L> {
    /// The key's hash, which picks its shard and its place there.
    ///
    /// Written out rather than [`BuildHasher::hash_one`], which the hot path
    /// called out of line (about 2 ns of a decision).
    #[inline(always)]
    #[allow(clippy::manual_hash_one)]
    fn hash(&self, key: &K) -> u64
    where
        K: Hash,
    {
        let mut hasher = self.hasher.build_hasher();
        key.hash(&mut hasher);
        hasher.finish()
    }

    /// The shard of a key with this hash. It takes bits the table uses
    /// for neither the bucket (the low bits) nor the tag (the top seven),
    /// and maps them onto the shards by a multiplication, not a division.
    #[inline]
    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard<K, L>> {
        let bits = (hash >> 25) & u64::from(u32::MAX);
        let index = (bits * self.shards.len() as u64) >> 32;
        lock(&self.shards[index as usize].0)
    }

    /// A shard went from `before` keys to `after`: the keys gauge follows,
    /// if the keyed limiter is named (feature `metrics`).
    #[inline]
    fn keys_changed(&self, before: usize, after: usize) {
        #[cfg(feature = "metrics")]
        if let Some(keys) = &self.keys {
            keys.changed(before, after);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (before, after);
    }
}

impl<K, L: Limiter> Entry<K, L> {
    /// Whether forgetting the key would lose something a fresh limiter
    /// cannot know: a running call, a waiting caller, a held handle.
    fn is_in_use(&self) -> bool {
        let waited_on = self
            .queue
            .as_ref()
            .is_some_and(|queue| Arc::strong_count(queue) > 1);
        waited_on || self.limiter.is_in_use()
    }
}

impl<K: Eq, L: Limiter> Shard<K, L> {
    /// How many keys the shard holds, inline or not.
    fn len(&self) -> usize {
        self.inline.len() + self.entries.len()
    }

    /// Records that every use so far happened at or before `now`. The
    /// latest checkpoint moves forward until it is an eighth of
    /// `idle_timeout` past the one before; then a new one starts, so the
    /// checkpoints reach about two idle timeouts back.
    fn checkpoint(&mut self, now: u64, idle_timeout: u64) {
        let checkpoint = Checkpoint {
            uses: self.uses,
            nanos: now,
        };
        let len = self.checkpoints.len();
        if self
            .checkpoints
            .back()
            .is_some_and(|latest| latest.uses == checkpoint.uses)
        {
            return; // nothing used since
        }
        let spacing = idle_timeout / 8;
        let moves = len >= 2 && now.saturating_sub(self.checkpoints[len - 2].nanos) < spacing;
        if moves {
            self.checkpoints[len - 1] = checkpoint;
            return;
        }
        if len == CHECKPOINTS {
            self.checkpoints.pop_front();
        }
        self.checkpoints.push_back(checkpoint);
    }

    /// Forgets keys known to be unused since `now - idle_timeout` and not
    /// in use. How many.
    ///
    /// An entry is, if it was last used no later than the newest checkpoint
    /// that old; an inline key, if its TAT is that old, by its limiter's
    /// clock (every use leaves the TAT past the instant of the use).
    fn evict_idle(
        &mut self,
        now: u64,
        idle_timeout: u64,
        inline: Option<&InlineState<L>>,
    ) -> usize {
        let before = self.len();
        if let Some(inline) = inline {
            let now = inline.now();
            self.inline
                .retain(|entry| now.saturating_sub(entry.tat) < idle_timeout);
        }
        let idle_since = self
            .checkpoints
            .iter()
            .rev()
            .find(|checkpoint| now.saturating_sub(checkpoint.nanos) >= idle_timeout);
        if let Some(&Checkpoint {
            uses: idle_up_to, ..
        }) = idle_since
        {
            self.entries
                .retain(|entry| entry.last_used > idle_up_to || entry.is_in_use());
        }
        before - self.len()
    }

    /// Frees at least one place if it can: idle keys first, else the least
    /// recently used eighth of the keys not in use (in one pass, so a key
    /// flood costs a scan per eighth of a shard, not per key). Inline keys
    /// go before entries, the earliest TATs first: the fullest buckets,
    /// whose uses are the oldest, and which lose the least when forgotten.
    /// Whether it freed any.
    fn make_room(&mut self, now: u64, idle_timeout: u64, inline: Option<&InlineState<L>>) -> bool {
        let idle = self.evict_idle(now, idle_timeout, inline);
        if idle > 0 {
            tracing::debug!(forgotten = idle, "keyed limiter full: forgot idle keys");
            return true;
        }
        let forgotten = if self.inline.is_empty() {
            let mut stamps = Vec::with_capacity(self.entries.len());
            let free = self.entries.iter().filter(|entry| !entry.is_in_use());
            stamps.extend(free.map(|entry| entry.last_used));
            let Some(cutoff) = eighth_cutoff(stamps) else {
                // Debug, not warn: under a key flood this fires per request; the
                // caller sees the refusal as a `KeysFull` error.
                tracing::debug!(
                    keys = self.entries.len(),
                    "keyed limiter full and every key in use: refusing a new key"
                );
                return false;
            };
            // Stamps are unique: the eighth is every free entry up to the cutoff.
            let before = self.entries.len();
            self.entries
                .retain(|entry| entry.last_used > cutoff || entry.is_in_use());
            before - self.entries.len()
        } else {
            let tats: Vec<u64> = self.inline.iter().map(|entry| entry.tat).collect();
            let count = (tats.len() / 8).max(1);
            let cutoff = eighth_cutoff(tats).unwrap_or(0);
            // TATs may tie at the cutoff: forget the ones below it, then as
            // many at it as make up the eighth.
            let below = self
                .inline
                .iter()
                .filter(|entry| entry.tat < cutoff)
                .count();
            let mut ties = count - below;
            self.inline.retain(|entry| {
                let forget = entry.tat < cutoff || (entry.tat == cutoff && ties > 0);
                ties -= usize::from(forget && entry.tat == cutoff);
                !forget
            });
            count
        };
        tracing::debug!(
            forgotten,
            "keyed limiter full: forgot the least recently used keys"
        );
        true
    }
}

/// The largest of the smallest eighth (at least one) of `values`; `None`
/// if there are none.
fn eighth_cutoff(mut values: Vec<u64>) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    let count = (values.len() / 8).max(1);
    let (_, &mut cutoff, _) = values.select_nth_unstable(count - 1);
    Some(cutoff)
}

impl<K, L> fmt::Debug for KeyedLimiter<K, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field(
                "max_keys",
                &(self.inner.keys_per_shard * self.inner.shards.len()),
            )
            .field(
                "idle_timeout",
                &Duration::from_nanos(self.inner.idle_timeout),
            )
            .finish_non_exhaustive()
    }
}

/// A limiter that can make another with its configuration and none of its
/// state: the template of [`KeyedLimiter::of`], which gives each key its
/// own. The in-memory limiters of this crate are; implement it for yours
/// to use them as templates.
///
/// ```
/// use tower_limits::limiters::FreshLimiter;
/// use tower_limits::{ConcurrencyLimiter, LimiterExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let template = ConcurrencyLimiter::new(1)?;
/// let _held = template.acquire().await?;
/// let fresh = template.fresh();
/// assert_eq!((fresh.max_concurrent(), fresh.running()), (1, 0));
/// # Ok(())
/// # }
/// ```
pub trait FreshLimiter: Limiter + Sized {
    /// A limiter with this one's configuration (and clock) and a state of
    /// its own, as new.
    fn fresh(&self) -> Self;

    /// How a [`KeyedLimiter`] made [`of`](KeyedLimiter::of) this template
    /// may keep a key's state in its own map: `None` (the default) keeps a
    /// limiter per key; the crate's limiters whose state is one number
    /// have an [`InlineState`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::limiters::FreshLimiter;
    /// use tower_limits::{NullLimiter, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// assert!(RateLimiter::in_memory(Quota::gcra(5, Duration::from_secs(1))?).inline_state().is_some());
    /// assert!(NullLimiter.inline_state().is_none());
    /// # Ok(())
    /// # }
    /// ```
    fn inline_state(&self) -> Option<InlineState<Self>> {
        None
    }
}

/// Configures a [`KeyedLimiter`]; made by [`KeyedLimiter::builder`]
/// or [`KeyedLimiter::of`].
///
/// ```
/// use std::time::Duration;
/// use tower_limits::clock::Clock;
/// use tower_limits::limiters::KeyedLimiterBuilder;
/// use tower_limits::{KeyedLimiter, NullLimiter};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let builder: KeyedLimiterBuilder<u32, NullLimiter> = KeyedLimiter::builder(|_: &u32| NullLimiter)
///     .max_keys(50_000)
///     .idle_timeout(Duration::from_secs(300))
///     .clock(Clock::fast());
/// let keyed = builder.build()?;
/// assert!(format!("{keyed:?}").contains("idle_timeout: 300s"));
/// # Ok(())
/// # }
/// ```
#[must_use = "call `build` to get a keyed limiter"]
pub struct KeyedLimiterBuilder<K, L> {
    make: Box<Make<K, L>>,
    inline: Option<InlineState<L>>,
    max_keys: usize,
    idle_timeout: Duration,
    clock: Clock,
    #[cfg(feature = "metrics")]
    name: Option<String>,
}

impl<K, L> KeyedLimiterBuilder<K, L> {
    /// The most keys held at once (default 10,000). The bound is exact: the
    /// map never holds more.
    ///
    /// ```
    /// use tower_limits::{KeyedLimiter, NullLimiter};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let keyed = KeyedLimiter::builder(|_: &u32| NullLimiter).max_keys(100).build()?;
    /// for key in 0..1_000 {
    ///     keyed.limiter(&key)?; // a flood of new keys
    /// }
    /// assert!(keyed.len() <= 100);
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// How long a key must go unused before it may be forgotten (default 10
    /// minutes).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{KeyedLimiter, NullLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let keyed = KeyedLimiter::builder(|_: &u32| NullLimiter)
    ///     .idle_timeout(Duration::from_secs(60))
    ///     .build()?;
    /// keyed.limiter(&1)?;
    /// keyed.limiter(&2)?;
    /// tokio::time::advance(Duration::from_secs(30)).await;
    /// keyed.limiter(&2)?; // key 2 is used again
    /// tokio::time::advance(Duration::from_secs(31)).await;
    /// assert_eq!(keyed.evict_idle(), 1); // only key 1 went unused for a minute
    /// assert_eq!(keyed.len(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }

    /// The clock that measures idleness (see [`Clock`]), except for keys
    /// kept inline, whose idleness is read from their state on their
    /// limiter's clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::clock::Clock;
    /// use tower_limits::{KeyedLimiter, NullLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let keyed = KeyedLimiter::builder(|_: &u32| NullLimiter)
    ///     .idle_timeout(Duration::from_secs(60))
    ///     .clock(Clock::fast())
    ///     .build()?;
    /// keyed.limiter(&1)?;
    /// tokio::time::advance(Duration::from_secs(61)).await;
    /// // The fast clock ignores paused tokio time: key 1 is not idle yet.
    /// assert_eq!(keyed.evict_idle(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Names the keyed limiter, which then reports how many keys it holds
    /// through the `metrics` facade: the gauge
    /// `tower_limits_keys{limiter="<name>"}`, set to 0 when it is built and
    /// to the number of live keys (as [`len`](KeyedLimiter::len) counts
    /// them) whenever a key is added or forgotten. A decision on a key it
    /// already holds does no gauge work. Keys never become labels.
    ///
    /// Unnamed (the default), it reports nothing. A recorder must be
    /// installed when the keyed limiter is built.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::{KeyedLimiter, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // With a recorder installed (metrics-exporter-prometheus's, say), the
    /// // gauge `tower_limits_keys{limiter="per-tenant"}` reads 2 after this.
    /// let template = RateLimiter::in_memory(Quota::gcra(10, Duration::from_secs(1))?);
    /// let per_tenant = KeyedLimiter::of(template).name("per-tenant").build()?;
    /// for tenant in ["acme", "globex", "acme"] {
    ///     drop(per_tenant.try_acquire(&tenant).await?);
    /// }
    /// assert_eq!(per_tenant.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// Validates the configuration and builds the keyed limiter.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if `max_keys` is 0 or `idle_timeout` is zero.
    ///
    /// ```
    /// use tower_limits::{KeyedLimiter, NullLimiter};
    ///
    /// let error = KeyedLimiter::builder(|_: &u8| NullLimiter).max_keys(0).build().unwrap_err();
    /// assert_eq!(error.field(), "max_keys");
    /// ```
    pub fn build(self) -> Result<KeyedLimiter<K, L>, ConfigError> {
        if self.max_keys == 0 {
            return Err(ConfigError::new(
                "max_keys",
                self.max_keys,
                "must be at least 1",
            ));
        }
        if self.idle_timeout.is_zero() {
            return Err(ConfigError::new(
                "idle_timeout",
                self.idle_timeout,
                "must be longer than zero",
            ));
        }
        let shards = (self.max_keys / MIN_KEYS_PER_SHARD).clamp(1, MAX_SHARDS);
        let keys_per_shard = self.max_keys / shards;
        Ok(KeyedLimiter {
            inner: Arc::new(KeyedInner {
                make: self.make,
                inline: self.inline,
                shards: (0..shards)
                    .map(|_| {
                        ShardLock(Mutex::new(Shard {
                            inline: HashTable::new(),
                            entries: HashTable::new(),
                            uses: 0,
                            checkpoints: VecDeque::with_capacity(CHECKPOINTS),
                        }))
                    })
                    .collect(),
                keys_per_shard,
                idle_timeout: duration_nanos(self.idle_timeout),
                hasher: RandomState::new(),
                clock: self.clock,
                #[cfg(feature = "metrics")]
                keys: self
                    .name
                    .as_deref()
                    .map(crate::limiters::internals::gauge::KeyCount::new),
            }),
        })
    }
}

impl<K, L> fmt::Debug for KeyedLimiterBuilder<K, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiterBuilder")
            .field("max_keys", &self.max_keys)
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;
    use crate::limiters::{NullLimiter, RateLimiter};
    use crate::store::Quota;

    const IDLE: Duration = Duration::from_secs(60);

    #[derive(Clone, Debug)]
    enum Op {
        Use(u8),
        Advance(u64),
        EvictIdle,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..6_u8).prop_map(Op::Use),
            3 => (0..90_u64).prop_map(Op::Advance),
            1 => Just(Op::EvictIdle),
        ]
    }

    /// Runs `test` on a current-thread runtime on paused time.
    fn on_paused_time(test: impl Future<Output = ()>) {
        let mut builder = tokio::runtime::Builder::new_current_thread();
        let runtime = builder.enable_time().start_paused(true).build();
        runtime.unwrap().block_on(test);
    }

    /// Whether `keyed` holds `key`, inline or not, without using it.
    fn holds<L>(keyed: &KeyedLimiter<u8, L>, key: u8) -> bool {
        let shards = keyed.inner.shards.iter();
        shards.map(|shard| lock(&shard.0)).any(|shard| {
            let inline = shard.inline.iter().any(|entry| entry.key == key);
            inline || shard.entries.iter().any(|entry| entry.key == key)
        })
    }

    proptest! {
        /// `evict_idle` never forgets a key used within the idle timeout,
        /// however its uses came (known keys take no clock reading), and
        /// forgets a key unused since an earlier `evict_idle` once 9/8 of
        /// the timeout (the checkpoints' spacing) has passed since that call.
        #[test]
        fn evict_idle_forgets_idle_keys_and_never_a_recent_one(ops in prop::collection::vec(op(), 1..80)) {
            on_paused_time(async {
                let keyed = KeyedLimiter::builder(|_: &u8| NullLimiter).idle_timeout(IDLE).build().unwrap();
                let start = tokio::time::Instant::now();
                // Per key: the op index and time of its latest use.
                let mut last_use: HashMap<u8, (usize, Duration)> = HashMap::new();
                let mut evictions: Vec<(usize, Duration)> = Vec::new();
                for (index, op) in ops.into_iter().enumerate() {
                    let now = start.elapsed();
                    match op {
                        Op::Use(key) => {
                            keyed.limiter(&key).unwrap();
                            last_use.insert(key, (index, now));
                        }
                        Op::Advance(secs) => tokio::time::advance(Duration::from_secs(secs)).await,
                        Op::EvictIdle => {
                            keyed.evict_idle();
                            for (&key, &(used_at, used)) in &last_use {
                                if now - used < IDLE {
                                    assert!(holds(&keyed, key), "key {key} used {:?} ago was forgotten", now - used);
                                }
                                let provably_idle = evictions
                                    .iter()
                                    .any(|&(call, at)| used_at < call && now - at >= IDLE * 9 / 8);
                                if provably_idle {
                                    assert!(!holds(&keyed, key), "key {key} unused for {:?} was kept", now - used);
                                }
                            }
                            evictions.push((index, now));
                        }
                    }
                }
            });
        }
    }

    proptest! {
        /// Inline keys (GCRA, burst 3, one a second): `evict_idle` never
        /// forgets a key used within the idle timeout, and forgets a key
        /// once the timeout and its burst's span (3 s, the most its TAT
        /// can lead its latest use by) have passed since its latest use.
        #[test]
        fn evict_idle_forgets_idle_inline_keys_and_never_a_recent_one(ops in prop::collection::vec(op(), 1..80)) {
            on_paused_time(async {
                let quota = Quota::gcra(1, Duration::from_secs(1)).unwrap().with_burst(3).unwrap();
                let template = RateLimiter::in_memory(quota.with_pacing_tolerance().unwrap());
                let span = Duration::from_secs(3);
                let keyed = KeyedLimiter::of(template).idle_timeout(IDLE).build().unwrap();
                let start = tokio::time::Instant::now();
                let mut last_use: HashMap<u8, Duration> = HashMap::new();
                for op in ops {
                    let now = start.elapsed();
                    match op {
                        Op::Use(key) => {
                            drop(keyed.try_acquire(&key).await.unwrap());
                            last_use.insert(key, now);
                        }
                        Op::Advance(secs) => tokio::time::advance(Duration::from_secs(secs)).await,
                        Op::EvictIdle => {
                            keyed.evict_idle();
                            for (&key, &used) in &last_use {
                                if now - used < IDLE {
                                    assert!(holds(&keyed, key), "key {key} used {:?} ago was forgotten", now - used);
                                }
                                if now - used >= IDLE + span {
                                    assert!(!holds(&keyed, key), "key {key} unused for {:?} was kept", now - used);
                                }
                            }
                        }
                    }
                }
            });
        }
    }

    /// A key kept inline reports the quota its own limiter would.
    #[tokio::test(start_paused = true)]
    async fn an_inline_key_reports_the_quota_of_a_limiter_of_its_own() {
        let quota = Quota::gcra(2, Duration::from_secs(1)).unwrap();
        let template = RateLimiter::in_memory(quota.with_burst(4).unwrap());
        let own = template.fresh();
        let keyed = KeyedLimiter::of(template).build().unwrap();
        for (cost, wait) in [(1, 0), (2, 100), (1, 700), (3, 50), (0, 0)] {
            tokio::time::advance(Duration::from_millis(wait)).await;
            if cost > 0 {
                drop(own.try_acquire_many(cost).await.unwrap());
                drop(keyed.try_acquire_many(&"a", cost).await.unwrap());
            }
            let Ok(Ok(inline)) = keyed.quota(&"a") else {
                panic!("the key is kept inline");
            };
            assert_eq!(Some(inline), own.quota_status().await.unwrap());
        }
    }
}
