//! What the window limiters ([`FixedWindowLimiter`](crate::FixedWindowLimiter)
//! and [`SlidingWindowCounterLimiter`](crate::SlidingWindowCounterLimiter))
//! share: their state's interface ([`WindowState`]) and, through
//! [`WindowBacked`], one [`Limiter`] implementation. The windows' arithmetic
//! is [`Windows`].

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::algorithms::windows::Windows;
use crate::clock::Clock;
use crate::error::LimiterError;
use crate::limiter::{Admission, Denial, Limiter, LimiterFuture, Permit, ReleaseEvent};
use crate::quota_status::QuotaStatus;

/// The state of a window limiter, as the shared [`Limiter`](crate::Limiter)
/// implementation sees it. Times are nanoseconds since the clock's epoch;
/// the token of a grant is the index of its window.
pub(crate) trait WindowState: Send + Sync + 'static {
    fn windows(&self) -> &Windows;

    fn clock(&self) -> &Clock;

    /// Fired when a refund or `clear` gives room back early.
    fn reopened(&self) -> &ReleaseEvent;

    /// One attempt: counts `cost` in the current window, or says until when
    /// it may not.
    fn decide(&self, cost: u32) -> Admission;

    /// When a call costing `cost` may start, if not now; counts nothing.
    fn look(&self, cost: u32) -> Option<u64>;

    /// From one reading of the state: how many units could start now, and
    /// how long until more could.
    fn status(&self) -> (u32, Option<Duration>);

    /// Moves the units counted for window `index` from `from` to `to` where
    /// they still count; an increase is charged to the current window once
    /// they no longer do. Returns whether room was given back.
    fn recount(&self, index: u64, from: u32, to: u32) -> bool;

    /// Nothing starts before `nanos`; an earlier pause changes nothing.
    fn pause_until(&self, nanos: u64);

    /// Empty windows and no pause.
    fn reset(&self);
}

/// A window limiter: a handle on an `Arc` of its [`WindowState`], which is
/// all the one [`Limiter`] implementation below needs. Crate-private, so
/// only the two window limiters implement it (and so the implementation
/// below is theirs alone).
pub(crate) trait WindowBacked: Send + Sync + 'static {
    /// The state's type.
    type State: WindowState;

    /// The shared state.
    fn state(&self) -> &Arc<Self::State>;
}

// The bound is crate-private on purpose: no other type can be a window.
#[allow(private_bounds)]
impl<L: WindowBacked> Limiter for L {
    /// A call costing `cost` counts `cost` starts in the current
    /// window; a cost above the limit fails with
    /// [`CostTooHigh`](crate::error::CostTooHigh).
    #[inline]
    fn try_acquire_many(&self, cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
        let state = &**self.state();
        let admission = state
            .windows()
            .check(cost)
            .map(|()| state.reopened().decide(|| state.decide(cost)));
        LimiterFuture::ready(admission)
    }

    fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> {
        LimiterFuture::ready(Ok(self.state().look(1).is_none()))
    }

    fn peek(&self, cost: u32) -> LimiterFuture<'_, Result<Option<Denial>, LimiterError>> {
        let state = &**self.state();
        let answer = state.windows().check(cost).map(|()| {
            let blocked = state.look(cost);
            blocked.map(|at| Denial::until(state.clock().instant_at(at)))
        });
        LimiterFuture::ready(answer)
    }

    /// The window's limit and length, what is left of the
    /// limit now, and when more is: one reading of the counts.
    fn quota_status(&self) -> LimiterFuture<'_, Result<Option<QuotaStatus>, LimiterError>> {
        let windows = self.state().windows();
        let (remaining, refill_in) = self.state().status();
        LimiterFuture::ready(Ok(Some(QuotaStatus::new(
            u64::from(windows.max()),
            windows.window(),
            u64::from(remaining),
            refill_in,
        ))))
    }

    /// Counts one start in the current window, even past the limit.
    fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        let state = &**self.state();
        let index = state.windows().index(state.clock().now_nanos());
        state.recount(index, 0, 1);
        LimiterFuture::ready(Ok(()))
    }

    /// Nothing to do: only starts count.
    fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        LimiterFuture::ready(Ok(()))
    }

    /// Now if a call could start; else the exact instant one
    /// could, or the end of a pause.
    fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> {
        let state = &**self.state();
        let now = state.clock().now_nanos();
        let at = state.look(1).unwrap_or(now);
        LimiterFuture::ready(Ok(state.clock().instant_at(at)))
    }

    /// A pause: nothing starts before `at`. It never shortens a
    /// wait and leaves the counts as they are.
    fn set_next_available_time(&self, at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.state().pause_until(self.state().clock().nanos_at(at));
        LimiterFuture::ready(Ok(()))
    }

    /// Empty windows and no pause; wakes denied callers.
    fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> {
        self.state().reset();
        self.state().reopened().notify();
        LimiterFuture::ready(Ok(()))
    }

    /// Gives the permit's units back while they still count (see
    /// the limiter's docs); after that there is nothing to give.
    fn refund(&self, permit: Permit) {
        if let (Some(index), cost) = permit.disarm()
            && self.state().recount(index, cost, 0)
        {
            self.state().reopened().notify();
        }
    }

    /// Moves the permit's count to `actual` (at most the limit):
    /// a lower cost gives units back while they still count, a
    /// higher one is always charged (to the current window once
    /// the permit's units no longer count).
    fn settle(&self, permit: &mut Permit, actual: u32) {
        if let Some(index) = permit.token() {
            let actual = actual.min(self.state().windows().max());
            if self.state().recount(index, permit.cost(), actual) {
                self.state().reopened().notify();
            }
            permit.settled(actual, None);
        }
    }

    fn is_in_use(&self) -> bool {
        Arc::strong_count(self.state()) > 1
    }
}
