//! The fixed window counter of
//! [`Quota::fixed_window`](crate::store::Quota::fixed_window), in every
//! store: one count for the current window, reset at each boundary.

use super::windows::Windows;

/// When `cost` more units may start, if not at `now`: at the later of now
/// and the pause `not_before`, if its window has room for them
/// (`count_in(index)` is the count recorded for window `index`), else at the
/// start of the next window.
#[inline]
pub(crate) fn blocked_until(
    windows: &Windows,
    now: u64,
    not_before: u64,
    cost: u32,
    count_in: impl Fn(u64) -> u64,
) -> Option<u64> {
    let from = now.max(not_before);
    let index = windows.index(from);
    let taken = count_in(index).saturating_add(u64::from(cost));
    let at = if taken <= u64::from(windows.max()) {
        from
    } else {
        windows.start(index.saturating_add(1))
    };
    (at > now).then_some(at)
}

/// The count of window `current` (now `count`) once the `from` units a
/// grant counted in window `index` become `to`: a change while the grant's
/// window lasts, an increase charged to the current window after it. `None`
/// if nothing changes: a decrease once the grant's window has ended.
pub(crate) fn recount(index: u64, current: u64, count: u64, from: u32, to: u32) -> Option<u64> {
    let (from, to) = (u64::from(from), u64::from(to));
    if index == current {
        Some(count.saturating_sub(from).saturating_add(to))
    } else if to > from {
        Some(count.saturating_add(to - from))
    } else {
        None
    }
}
