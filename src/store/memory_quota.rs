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
        LimiterFuture::ready(Ok(self.on_state(key, quota, act)))
    }

    /// [`with_state`](Self::with_state)'s answer itself.
    fn on_state<T>(
        &self,
        key: &MemoryQuotaKey,
        quota: &Quota,
        act: impl FnOnce(&mut QuotaState, u64) -> T,
    ) -> T {
        let mut slot = key.0.slot.lock().unwrap_or_else(PoisonError::into_inner);
        key.0
            .line
            .close(slot.as_mut().map(|current| &mut current.state));
        // Read under the lock, so decisions are made in time order.
        let now = self.clock().now_nanos();
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
                })
            }
        };
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
    #[cold]
    #[inline(never)]
    fn decide_locked(&self, key: &MemoryQuotaKey, quota: &Quota, cost: u32) -> Result<u64, u64> {
        self.on_state(key, quota, |state, now| state.decide(now, cost))
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
