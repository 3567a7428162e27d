//! [`QuotaStore`] for [`MemoryStore`]: each named quota is a
//! `QuotaState` behind a lock, decided by the rules of
//! `src/algorithms` as SQLite decides on its rows. A quota whose state fits
//! one word (GCRA and the token bucket with no gap in their line, the
//! windows with small counts) is decided without the lock (see
//! `memory_open_line.rs`).

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::memory_open_line::OpenLine;
use super::quota_state::QuotaState;
use super::{MemoryStore, Quota, QuotaStore, WindowDecision};
use crate::algorithms::windows::Windows;
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::quota_status::{QuotaStatus, search};

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
pub struct MemoryQuotaKey(Arc<Entry>);

/// One named quota: its slot behind a lock and, while the slot's state
/// fits one word, the open line that decides without the lock.
///
/// The open line's words share one cache line, apart from the slot's: a
/// decision reads them all and a grant writes the first. (Not two lines,
/// as against the adjacent-line prefetcher: a keyed limiter holds one
/// entry per key, and the smaller entry is worth more there.)
#[derive(Default)]
struct Entry {
    line: OpenLine,
    slot: Mutex<Option<Slot>>,
}

/// A key's state and the quota it was made for.
struct Slot {
    quota: Quota,
    state: QuotaState,
    /// The instant of the last locked operation on `state`.
    latest: u64,
}

impl fmt::Debug for MemoryQuotaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MemoryQuotaKey")
    }
}

impl MemoryStore {
    /// Runs `act` on the state of `key` for `quota`, at the clock's now: a
    /// fresh state (full capacity) the first time, or when the quota
    /// changed its algorithm; otherwise the state kept, renewed for the new
    /// quota (`QuotaState::renewed`) as the other stores keep theirs.
    fn with_state<T>(
        &self,
        key: &MemoryQuotaKey,
        quota: &Quota,
        act: impl FnOnce(&mut QuotaState, u64) -> T,
    ) -> LimiterFuture<'static, Result<T, LimiterError>> {
        let read = || self.clock().now_nanos();
        LimiterFuture::ready(Ok(self.on_state(key, quota, read, act)))
    }

    /// [`with_state`](Self::with_state)'s answer itself, at the instant
    /// `read` gives (called under the lock) or, if a locked operation on
    /// this state used a later one or the open line counted in a later
    /// window ([`OpenLine::close`]), at that: the instants the state is
    /// decided at never go back.
    fn on_state<T>(
        &self,
        key: &MemoryQuotaKey,
        quota: &Quota,
        read: impl FnOnce() -> u64,
        act: impl FnOnce(&mut QuotaState, u64) -> T,
    ) -> T {
        let mut slot = key.0.slot.lock().unwrap_or_else(PoisonError::into_inner);
        let line = key
            .0
            .line
            .close(slot.as_mut().map(|current| &mut current.state));
        let latest = slot.as_ref().map_or(0, |current| current.latest);
        let now = read().max(latest).max(line);
        let windows = |windows: Windows| windows.placed(self.unix_epoch());
        let slot = match &mut *slot {
            Some(current) if current.quota == *quota => current,
            current => {
                let fresh = QuotaState::fresh(quota, windows);
                let state = match current.take() {
                    Some(previous) => previous.state.renewed(fresh, now),
                    None => fresh,
                };
                current.insert(Slot {
                    quota: *quota,
                    state,
                    latest: now,
                })
            }
        };
        slot.latest = now;
        let answer = act(&mut slot.state, now);
        key.0.line.open(&slot.quota, &slot.state);
        answer
    }

    /// The decision on `cost`: on the open line if it is open, else under
    /// the key's lock.
    #[inline]
    fn decide_now(&self, key: &MemoryQuotaKey, quota: &Quota, cost: u32) -> WindowDecision {
        let decision = match key.0.line.decide(quota, self.clock(), cost) {
            Some(decision) => decision,
            None => self.decide_locked(key, quota, cost),
        };
        self.decision(decision)
    }

    /// The decision on `cost` under the key's lock: a line that is closed
    /// (a fresh quota, a gap, a sliding log) or was just closed. Its answer
    /// is two words, which come back in registers.
    ///
    /// The clock is read before the lock, as the open line reads it before
    /// its word: the reading then overlaps the lock's atomic instead of
    /// waiting between it and the unlock (`benches/paired`, concurrency +
    /// sliding log layers beside the same with GCRA, Xeon VM: 1.37-1.38x,
    /// 1.24-1.26x so). A racer that took the lock first may have decided at
    /// a later instant; this decision is then made at that instant (see
    /// [`on_state`](Self::on_state)), one between this call's start and its
    /// lock, as a reading under the lock would be. A decision on the open
    /// line that came between may be at a later instant too: GCRA's test
    /// at an earlier one is stricter, and a window decides in the newest
    /// window counted in.
    #[cold]
    #[inline(never)]
    fn decide_locked(&self, key: &MemoryQuotaKey, quota: &Quota, cost: u32) -> Result<u64, u64> {
        let read = self.clock().now_nanos();
        self.on_state(key, quota, || read, |state, now| state.decide(now, cost))
    }

    /// A key no name reaches: a state of its own, dropped with its last
    /// key (a keyed limiter's key).
    pub(crate) fn private_quota_key() -> MemoryQuotaKey {
        MemoryQuotaKey::default()
    }

    /// A private key whose state under the GCRA `quota` is a line ending at
    /// `tat`, with no gap and no pause, open for decisions without the lock.
    pub(crate) fn quota_key_at(quota: &Quota, tat: u64) -> MemoryQuotaKey {
        let key = Self::private_quota_key();
        let mut state = QuotaState::fresh(quota, |windows| windows);
        if let QuotaState::Cells(cells) = &mut state {
            cells.line.tat = tat;
        }
        key.0.line.open(quota, &state);
        let slot = Slot {
            quota: *quota,
            state,
            latest: 0,
        };
        *key.0.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(slot);
        key
    }

    /// The TAT of `key`'s state, if it is all the state there is: the quota
    /// is the GCRA `quota`, its line has no gap, no pause is in force, and
    /// no slot that is not given back (from before a reset or a new
    /// interval, `retuned`) is still ahead.
    pub(crate) fn inline_tat(&self, key: &MemoryQuotaKey, quota: &Quota) -> Option<u64> {
        let mut slot = key.0.slot.lock().unwrap_or_else(PoisonError::into_inner);
        let current = slot.as_mut()?;
        key.0.line.close(Some(&mut current.state));
        let now = self.clock().now_nanos();
        let tat = match &current.state {
            QuotaState::Cells(cells) if current.quota == *quota && cells.line.gaps.is_empty() => {
                // A floor (a reset's, or a new interval's) is state a TAT
                // cannot carry: such a line stays out of line.
                (cells.not_before <= now && cells.retuned == 0).then_some(cells.line.tat)
            }
            _ => None,
        };
        key.0.line.open(&current.quota, &current.state);
        tat
    }

    fn instant_of(&self, nanos: u64) -> Instant {
        self.clock().instant_at(nanos)
    }

    /// A decision's ticket, or the instant it names, as the store answers.
    #[inline]
    fn decision(&self, decision: Result<u64, u64>) -> WindowDecision {
        match decision {
            Ok(ticket) => WindowDecision::Granted { ticket },
            Err(at) => WindowDecision::Denied {
                retry_at: self.instant_of(at),
            },
        }
    }
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
        LimiterFuture::ready(Ok(self.decide_now(key, quota, cost)))
    }

    /// Always an answer: on the open line without the lock, else under it.
    #[inline]
    fn decide_at_once(
        &self,
        key: &MemoryQuotaKey,
        quota: &Quota,
        cost: u32,
    ) -> Option<WindowDecision> {
        Some(self.decide_now(key, quota, cost))
    }

    fn look<'a>(
        &'a self,
        key: &'a MemoryQuotaKey,
        quota: &'a Quota,
        cost: u32,
    ) -> LimiterFuture<'a, Result<Option<Instant>, LimiterError>> {
        self.with_state(key, quota, |state, now| {
            let at = state.blocked_until(now, cost);
            at.map(|at| self.instant_of(at))
        })
    }

    fn quota_status<'a>(
        &'a self,
        key: &'a MemoryQuotaKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<QuotaStatus, LimiterError>> {
        self.with_state(key, quota, |state, now| {
            let (remaining, at) = search(quota.capacity(), |cost| state.blocked_until(now, cost));
            let wait = at.map(|at| Duration::from_nanos(at.saturating_sub(now)));
            quota.status(u64::from(remaining), wait)
        })
    }

    fn take<'a>(
        &'a self,
        key: &'a MemoryQuotaKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.with_state(key, quota, |state, now| state.take(now))
    }

    fn adjust<'a>(
        &'a self,
        key: &'a MemoryQuotaKey,
        quota: &'a Quota,
        ticket: u64,
        from: u32,
        to: u32,
    ) -> LimiterFuture<'a, Result<Option<u64>, LimiterError>> {
        self.with_state(key, quota, |state, now| state.adjust(now, ticket, from, to))
    }

    fn pause<'a>(
        &'a self,
        key: &'a MemoryQuotaKey,
        quota: &'a Quota,
        at: Instant,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        let until = self.clock().nanos_at(at);
        self.with_state(key, quota, |state, _| state.pause(until))
    }

    /// Keeps the state, emptied, with the floor below which tickets of
    /// grants from before give nothing back (`QuotaState::clear`).
    fn reset<'a>(
        &'a self,
        key: &'a MemoryQuotaKey,
        quota: &'a Quota,
    ) -> LimiterFuture<'a, Result<(), LimiterError>> {
        self.with_state(key, quota, |state, now| state.clear(now))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A decision whose clock reading is older than the key's last locked
    /// operation (its reading came before the lock; a reset's came after
    /// it and took the lock first) is made at the reset's instant: the
    /// instants locked operations use never go back, so each kind's rules,
    /// written for time order, hold. Its grant is then one at the reset's
    /// instant, which gives nothing back (as a grant at that instant read
    /// under the lock): the starts there cannot be told apart.
    #[tokio::test(start_paused = true)]
    async fn a_decision_read_before_a_reset_that_locked_first_is_made_at_the_reset() {
        let quota = Quota::sliding_log(2, Duration::from_secs(3_600)).unwrap();
        let store = MemoryStore::new();
        let key = store.quota_key("log");
        let stale = store.clock().now_nanos();
        tokio::time::advance(Duration::from_secs(1)).await;
        store.reset(&key, &quota).await.unwrap();
        let reset_at = store.clock().now_nanos();
        let decide = |state: &mut QuotaState, now| state.decide(now, 1);
        let ticket = store.on_state(&key, &quota, || stale, decide).unwrap();
        assert_eq!(ticket, reset_at, "made at the reset's instant");
        let read = || store.clock().now_nanos();
        let count = |state: &mut QuotaState, now| state.blocked_until(now, 2);
        let full_at = store.on_state(&key, &quota, read, count);
        assert!(full_at.is_some(), "the grant is in the window: 1 of 2 left");
    }

    /// A locked decision whose reading is from before the window the open
    /// line last counted in decides in that window: it neither grants past
    /// the limit there nor writes its older window over the newer count,
    /// which would let the newer window grant its limit again.
    #[tokio::test(start_paused = true)]
    async fn a_decision_read_before_the_open_lines_window_decides_in_it() {
        let window = Duration::from_secs(10);
        let quotas = [
            Quota::fixed_window(2, window).unwrap(),
            Quota::sliding_window_counter(2, window).unwrap(),
        ];
        let store = MemoryStore::new();
        for quota in quotas {
            let key = store.quota_key(&format!("{quota:?}"));
            let granted = async || {
                let decision = store.decide(&key, &quota, 1).await.unwrap();
                matches!(decision, WindowDecision::Granted { .. })
            };
            assert!(granted().await, "{quota:?}: the line opens");
            let stale = store.clock().now_nanos();
            // Two windows on: a sliding window counter's previous is empty.
            tokio::time::advance(2 * window).await;
            assert!(
                granted().await && granted().await,
                "{quota:?}: a new window"
            );
            assert!(
                key.0.line.decide(&quota, store.clock(), 0).is_some(),
                "open"
            );
            let decide = |state: &mut QuotaState, now| state.decide(now, 1);
            let late = store.on_state(&key, &quota, || stale, decide);
            assert!(
                late.is_err(),
                "{quota:?}: the newer window is full: {late:?}"
            );
            assert!(!granted().await, "{quota:?}: and stays full");
        }
    }

    /// Every quota kind at one instant (tokio's paused clock): 2 + 2 granted
    /// of 4, a reset, 4 granted again, then the first grant refunded and the
    /// second settled down to 1. Neither gives anything back: the reset did.
    #[tokio::test(start_paused = true)]
    async fn grants_from_before_a_reset_give_nothing_back_at_the_same_instant() {
        let hour = Duration::from_secs(3_600);
        let day = Duration::from_secs(86_400);
        let quotas = [
            ("gcra", Quota::gcra(1, hour).unwrap().with_burst(4).unwrap()),
            ("token_bucket", Quota::token_bucket(4, 1, hour).unwrap()),
            ("fixed_window", Quota::fixed_window(4, day).unwrap()),
            (
                "sliding_window_counter",
                Quota::sliding_window_counter(4, day).unwrap(),
            ),
            ("sliding_log", Quota::sliding_log(4, day).unwrap()),
        ];
        let store = MemoryStore::new();
        let grant = async |key: &MemoryQuotaKey, quota: &Quota, cost: u32| match store
            .decide(key, quota, cost)
            .await
            .unwrap()
        {
            WindowDecision::Granted { ticket } => Some(ticket),
            WindowDecision::Denied { .. } => None,
        };
        let mut excess = Vec::new();
        for (what, quota) in quotas {
            let key = store.quota_key(what);
            let refunded = grant(&key, &quota, 2).await.unwrap();
            let settled = grant(&key, &quota, 2).await.unwrap();
            store.reset(&key, &quota).await.unwrap();
            let mut after = Vec::new();
            while let Some(ticket) = grant(&key, &quota, 1).await {
                after.push(ticket);
            }
            assert_eq!(after.len(), 4, "{what}: the reset gave all 4 back");
            store.adjust(&key, &quota, refunded, 2, 0).await.unwrap();
            store.adjust(&key, &quota, settled, 2, 1).await.unwrap();
            let mut more = 0;
            while more < 4 && grant(&key, &quota, 1).await.is_some() {
                more += 1;
            }
            if more > 0 {
                excess.push(format!("{what}: {} at once, capacity 4", 4 + more));
                continue;
            }
            // A settle up of an earlier grant is still charged.
            store.adjust(&key, &quota, after[3], 1, 0).await.unwrap();
            store.adjust(&key, &quota, settled, 1, 2).await.unwrap();
            assert_eq!(grant(&key, &quota, 1).await, None, "{what}: charged");
        }
        assert!(excess.is_empty(), "{}", excess.join("\n"));
    }
}
