//! [`ReleaseEvent`] and [`ReleaseListener`]: waking callers denied for
//! want of capacity that comes back before any known instant.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use event_listener::{Event, EventListener};

use super::Admission;

/// Signals that capacity was released, waking callers denied with
/// [`Denial::until_released`](super::Denial::until_released). For custom limiters.
///
/// [`notify`](ReleaseEvent::notify) costs one atomic load while nobody
/// listens. For that to be race free, follow this protocol:
///
/// * the waiter calls [`listen`](ReleaseEvent::listen) *before* its final
///   capacity check, and that check is a `SeqCst` atomic operation;
/// * the releaser frees capacity with a `SeqCst` atomic operation, then calls
///   `notify`.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
/// use tower_limits::limiter::{Denial, ReleaseEvent};
///
/// let free = AtomicUsize::new(0);
/// let released = ReleaseEvent::new();
///
/// // Waiter: listen, then look once more.
/// let listener = released.listen();
/// if free.load(SeqCst) == 0 {
///     let _denial = Denial::until_released(listener);
/// }
/// // Releaser: free capacity, then notify.
/// free.fetch_add(1, SeqCst);
/// released.notify();
/// ```
#[derive(Debug, Default)]
pub struct ReleaseEvent {
    inner: Arc<EventInner>,
}

#[derive(Debug, Default)]
struct EventInner {
    event: Event,
    listeners: AtomicUsize,
}

impl ReleaseEvent {
    /// A new event with no listeners.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::timeout;
    /// use tower_limits::limiter::{Denial, ReleaseEvent};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let released = ReleaseEvent::new();
    /// let denial = Denial::until_released(released.listen());
    /// released.notify();
    /// assert!(timeout(Duration::from_secs(1), denial.wait()).await.is_ok());
    /// # }
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers interest in the next [`notify`](ReleaseEvent::notify).
    ///
    /// Only listeners registered before the `notify` are woken by it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::timeout;
    /// use tower_limits::limiter::{Denial, ReleaseEvent};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let released = ReleaseEvent::new();
    /// let early = Denial::until_released(released.listen());
    /// released.notify();
    /// let late = Denial::until_released(released.listen());
    ///
    /// assert!(timeout(Duration::from_secs(1), early.wait()).await.is_ok());
    /// assert!(timeout(Duration::from_secs(1), late.wait()).await.is_err());
    /// # }
    /// ```
    pub fn listen(&self) -> ReleaseListener {
        // Registered with the event before it is counted: a releaser that
        // sees the count is sure to find the registration.
        let listener = self.inner.event.listen();
        self.inner.listeners.fetch_add(1, Ordering::SeqCst);
        ReleaseListener {
            listener,
            counted: Arc::clone(&self.inner),
        }
    }

    /// Runs `decide`; if it denies, listens and runs it once more, so capacity
    /// released in between is not missed. The final denial wakes on this
    /// event as well as at its own instant.
    #[inline]
    pub(crate) fn decide(&self, decide: impl Fn() -> Admission) -> Admission {
        if let granted @ Admission::Granted(_) = decide() {
            return granted;
        }
        let listener = self.listen();
        match decide() {
            Admission::Denied(denial) => Admission::Denied(denial.or_released(listener)),
            granted => granted,
        }
    }

    /// Wakes every registered listener.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::timeout;
    /// use tower_limits::limiter::{Denial, ReleaseEvent};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let released = ReleaseEvent::new();
    /// let first = Denial::until_released(released.listen());
    /// let second = Denial::until_released(released.listen());
    /// released.notify();
    /// assert!(timeout(Duration::from_secs(1), first.wait()).await.is_ok());
    /// assert!(timeout(Duration::from_secs(1), second.wait()).await.is_ok());
    /// # }
    /// ```
    #[inline]
    pub fn notify(&self) {
        if self.inner.listeners.load(Ordering::SeqCst) > 0 {
            self.inner.event.notify(usize::MAX);
        }
    }
}

/// A registration made by [`ReleaseEvent::listen`].
///
/// Hand it to [`Denial::until_released`](super::Denial::until_released) or [`Denial::or_released`](super::Denial::or_released). It
/// keeps a notification that arrives before anyone waits on it; dropping it
/// withdraws the registration.
///
/// ```
/// use std::time::Duration;
/// use tokio::time::timeout;
/// use tower_limits::limiter::{Denial, ReleaseEvent, ReleaseListener};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let released = ReleaseEvent::new();
/// let listener: ReleaseListener = released.listen();
/// released.notify(); // before anyone waits: the listener keeps it
/// let denial = Denial::until_released(listener);
/// assert!(timeout(Duration::from_secs(1), denial.wait()).await.is_ok());
/// # }
/// ```
#[derive(Debug)]
pub struct ReleaseListener {
    pub(super) listener: EventListener,
    counted: Arc<EventInner>,
}

impl Drop for ReleaseListener {
    fn drop(&mut self) {
        self.counted.listeners.fetch_sub(1, Ordering::SeqCst);
    }
}
