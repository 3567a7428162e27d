//! [`Permit`] and [`Release`]: proof of admission, and what dropping it
//! does.

use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// What a limiter does when a [`Permit`] it granted goes away.
///
/// Implement it in a custom limiter that must learn about completions
/// (a concurrency count, call durations). `token` is whatever the limiter
/// put in the permit with [`Permit::new`], such as the start time.
///
/// Both methods take the `Arc` by value, so a limiter whose release is
/// asynchronous (a store round trip) can move it into a spawned task.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
/// use tower_limits::limiter::Release;
/// use tower_limits::Permit;
///
/// /// Counts calls in flight.
/// #[derive(Default)]
/// struct InFlight(AtomicUsize);
///
/// impl Release for InFlight {
///     fn complete(self: Arc<Self>, _token: u64) {
///         self.0.fetch_sub(1, SeqCst);
///     }
/// }
///
/// let in_flight = Arc::new(InFlight::default());
/// in_flight.0.fetch_add(1, SeqCst); // admit a call...
/// let permit = Permit::new(in_flight.clone(), 0); // ...and hand out its permit
/// assert_eq!(in_flight.0.load(SeqCst), 1);
/// drop(permit); // the call finished
/// assert_eq!(in_flight.0.load(SeqCst), 0);
/// ```
pub trait Release: Send + Sync + 'static {
    /// The permitted call has finished (successfully, with an error, or
    /// because its future was dropped).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use tower_limits::limiter::Release;
    /// use tower_limits::Permit;
    ///
    /// /// Remembers the tokens of finished calls, in order.
    /// #[derive(Default)]
    /// struct Finished(Mutex<Vec<u64>>);
    ///
    /// impl Release for Finished {
    ///     fn complete(self: Arc<Self>, token: u64) {
    ///         self.0.lock().unwrap().push(token);
    ///     }
    /// }
    ///
    /// let finished = Arc::new(Finished::default());
    /// let first = Permit::new(finished.clone(), 1);
    /// let second = Permit::new(finished.clone(), 2);
    /// drop(second);
    /// drop(first);
    /// assert_eq!(*finished.0.lock().unwrap(), [2, 1]);
    /// ```
    fn complete(self: Arc<Self>, token: u64);

    /// The permit was never used: give the capacity back where the strategy
    /// allows. By default the same as [`complete`](Release::complete).
    ///
    /// [`Limiter::refund`](super::Limiter::refund) calls it for a permit made with [`Permit::new`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tower_limits::error::LimiterError;
    /// use tower_limits::limiter::{Admission, Denial, LimiterFuture, Release};
    /// use tower_limits::{Limiter, Permit};
    ///
    /// /// A daily quota: finished calls use it up, unused permits give it back.
    /// struct Quota(AtomicUsize);
    ///
    /// impl Release for Quota {
    ///     fn complete(self: Arc<Self>, _token: u64) {} // the unit is spent
    ///     fn refund(self: Arc<Self>, _token: u64) {
    ///         self.0.fetch_add(1, SeqCst);
    ///     }
    /// }
    ///
    /// struct QuotaLimiter(Arc<Quota>);
    ///
    /// impl Limiter for QuotaLimiter {
    ///     fn try_acquire_many(&self, _cost: u32) -> LimiterFuture<'_, Result<Admission, LimiterError>> {
    ///         let taken = self.0.0.fetch_update(SeqCst, SeqCst, |left| left.checked_sub(1));
    ///         LimiterFuture::ready(Ok(match taken {
    ///             Ok(_) => Admission::Granted(Permit::new(self.0.clone(), 0)),
    ///             Err(_) => Admission::Denied(Denial::until(
    ///                 Instant::now() + Duration::from_secs(86_400),
    ///             )),
    ///         }))
    ///     }
    ///     // The six other operations are trivial here (hidden).
    /// #   fn can_proceed(&self) -> LimiterFuture<'_, Result<bool, LimiterError>> { LimiterFuture::ready(Ok(self.0.0.load(SeqCst) > 0)) }
    /// #   fn record_start(&self) -> LimiterFuture<'_, Result<(), LimiterError>> { LimiterFuture::ready(Ok(())) }
    /// #   fn record_completion(&self) -> LimiterFuture<'_, Result<(), LimiterError>> { LimiterFuture::ready(Ok(())) }
    /// #   fn next_available_time(&self) -> LimiterFuture<'_, Result<Instant, LimiterError>> { LimiterFuture::ready(Ok(Instant::now())) }
    /// #   fn set_next_available_time(&self, _at: Instant) -> LimiterFuture<'_, Result<(), LimiterError>> { LimiterFuture::ready(Ok(())) }
    /// #   fn clear(&self) -> LimiterFuture<'_, Result<(), LimiterError>> { LimiterFuture::ready(Ok(())) }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LimiterError> {
    /// let limiter = QuotaLimiter(Arc::new(Quota(AtomicUsize::new(2))));
    /// let Admission::Granted(used) = limiter.try_acquire().await? else { unreachable!() };
    /// drop(used); // the call ran: 1 left
    /// let Admission::Granted(unused) = limiter.try_acquire().await? else { unreachable!() };
    /// limiter.refund(unused); // never used: still 1 left
    /// assert_eq!(limiter.0.0.load(SeqCst), 1);
    /// # Ok(())
    /// # }
    /// ```
    fn refund(self: Arc<Self>, token: u64) {
        self.complete(token);
    }
}

/// Proof of admission. Dropping it records the call's completion.
///
/// A permit that was acquired but never used goes back with
/// [`Limiter::refund`](super::Limiter::refund), which also returns rate quota (the start is erased)
/// where the strategy allows it.
///
/// ```
/// use tower_limits::limiter::Admission;
/// use tower_limits::{ConcurrencyLimiter, Limiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = ConcurrencyLimiter::new(1)?;
/// if let Admission::Granted(permit) = limiter.try_acquire().await? {
///     assert_eq!(limiter.running(), 1);
///     drop(permit); // the call finished
/// }
/// assert_eq!(limiter.running(), 0);
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping a permit at once records the call as finished"]
pub struct Permit {
    kind: PermitKind,
    /// A `u32` held in a word: a permit moves through the layers as whole
    /// words, where a `u32` and its padding were copied as two halves and
    /// read back as one word, which the CPU cannot forward from its stores
    /// (a stall of a dozen cycles on every grant).
    cost: Cost,
}

/// A permit's cost: a `u32` in a `u64`.
#[derive(Clone, Copy)]
struct Cost(u64);

impl Cost {
    const ONE: Cost = Cost(1);

    #[inline]
    fn new(cost: u32) -> Self {
        Self(u64::from(cost))
    }

    #[inline]
    fn get(self) -> u32 {
        // Made from a `u32` only.
        u32::try_from(self.0).unwrap_or(u32::MAX)
    }
}

/// What a permit holds: nothing, a token, a release and its token, or
/// permits inside it; the release (`R`) and the nested permits (`N`) held
/// as [`PermitKind`] or [`Taken`] says.
enum Kind<R, N> {
    Unit,
    Token(u64),
    Held {
        release: R,
        token: u64,
    },
    /// Permits inside this one.
    Nested(N),
}

/// What a permit keeps. Its resources are `ManuallyDrop`, so that a
/// `PermitKind` has no drop glue: dropping a permit is its `Drop` alone (a
/// test), and the drop glue of what holds a permit (a layer's state, a
/// response future) is small enough to inline. A kind leaves its permit
/// only through [`Permit::take`], which hands it back as a [`Taken`].
type PermitKind = Kind<ManuallyDrop<Arc<dyn Release>>, ManuallyDrop<Box<Nested>>>;

/// A [`PermitKind`] taken out of its permit, owning what it holds as
/// usual: dropping it drops that (nested permits release themselves; a
/// release is not told).
type Taken = Kind<Arc<dyn Release>, Box<Nested>>;

impl<R, N> Kind<R, N> {
    /// The same kind, with what it holds converted.
    #[inline]
    fn map<R2, N2>(
        self,
        release: impl FnOnce(R) -> R2,
        nested: impl FnOnce(N) -> N2,
    ) -> Kind<R2, N2> {
        match self {
            Kind::Unit => Kind::Unit,
            Kind::Token(token) => Kind::Token(token),
            Kind::Held {
                release: held,
                token,
            } => Kind::Held {
                release: release(held),
                token,
            },
            Kind::Nested(inner) => Kind::Nested(nested(inner)),
        }
    }
}

impl Taken {
    /// The kind to keep in a permit.
    #[inline]
    fn into_kind(self) -> PermitKind {
        self.map(ManuallyDrop::new, ManuallyDrop::new)
    }

    fn nested(nested: Nested) -> Self {
        Taken::Nested(Box::new(nested))
    }
}

/// The permits a permit can hold.
enum Nested {
    /// A composite's grant: released together.
    Many(Vec<Permit>),
    /// A second limiter's grant, kept apart from the wrapping limiter's own
    /// (a [`Failover`](crate::Failover)'s fallback).
    Wrapped(Permit),
}

impl Permit {
    /// A permit with nothing to release (what [`NullLimiter`](crate::NullLimiter) grants).
    ///
    /// ```
    /// assert_eq!(tower_limits::Permit::unit().token(), None);
    /// ```
    #[inline]
    pub fn unit() -> Self {
        Self {
            kind: PermitKind::Unit,
            cost: Cost::ONE,
        }
    }

    /// A permit that tells `release` about the call's end, passing `token`:
    /// for limiters that must learn of completions (a concurrency count,
    /// call durations).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use tower_limits::limiter::Release;
    /// use tower_limits::Permit;
    ///
    /// struct LastFinished(AtomicU64);
    /// impl Release for LastFinished {
    ///     fn complete(self: Arc<Self>, token: u64) {
    ///         self.0.store(token, Ordering::Relaxed);
    ///     }
    /// }
    ///
    /// let finished = Arc::new(LastFinished(AtomicU64::new(0)));
    /// drop(Permit::new(finished.clone(), 7));
    /// assert_eq!(finished.0.load(Ordering::Relaxed), 7);
    /// ```
    #[inline]
    pub fn new(release: Arc<dyn Release>, token: u64) -> Self {
        Self {
            kind: Taken::Held { release, token }.into_kind(),
            cost: Cost::ONE,
        }
    }

    /// A permit that only carries `token` (what the limiter recorded, such
    /// as the start time) for its [`Limiter::refund`](super::Limiter::refund); dropping it does
    /// nothing. For limiters that count starts, not completions.
    ///
    /// ```
    /// assert_eq!(tower_limits::Permit::with_token(42).token(), Some(42));
    /// ```
    #[inline]
    pub fn with_token(token: u64) -> Self {
        Self {
            kind: PermitKind::Token(token),
            cost: Cost::ONE,
        }
    }

    /// A permit made of several, released together (a composite's grant).
    ///
    /// ```
    /// use tower_limits::Permit;
    ///
    /// let permit = Permit::many(vec![Permit::unit(), Permit::with_token(1)]);
    /// assert_eq!(permit.token(), None);
    /// ```
    pub fn many(permits: Vec<Permit>) -> Self {
        let cost = permits.iter().map(Permit::cost).max().unwrap_or(1);
        Self {
            kind: Taken::nested(Nested::Many(permits)).into_kind(),
            cost: Cost::new(cost),
        }
    }

    /// `permit`, wrapped so that its limiter's wrapper can tell it from its
    /// own grants.
    pub(crate) fn wrap(permit: Permit) -> Self {
        Self {
            cost: permit.cost,
            kind: Taken::nested(Nested::Wrapped(permit)).into_kind(),
        }
    }

    /// The permit inside a [`Permit::wrap`], if this is one.
    pub(crate) fn wrapped_mut(&mut self) -> Option<&mut Permit> {
        match self.nested_mut() {
            Some(Nested::Wrapped(permit)) => Some(permit),
            _ => None,
        }
    }

    /// The permits inside this one, if it holds any.
    fn nested(&self) -> Option<&Nested> {
        match &self.kind {
            PermitKind::Nested(nested) => Some(nested),
            _ => None,
        }
    }

    /// [`nested`](Self::nested), to change in place.
    fn nested_mut(&mut self) -> Option<&mut Nested> {
        match &mut self.kind {
            PermitKind::Nested(nested) => Some(nested),
            _ => None,
        }
    }

    /// The permit inside a [`Permit::wrap`]; otherwise the permit itself.
    pub(crate) fn unwrap_wrapped(mut self) -> Result<Permit, Permit> {
        match self.take() {
            Taken::Nested(nested) => match *nested {
                Nested::Wrapped(permit) => Ok(permit),
                many => {
                    self.kind = Taken::nested(many).into_kind();
                    Err(self)
                }
            },
            taken => {
                self.kind = taken.into_kind();
                Err(self)
            }
        }
    }

    /// The token given to [`Permit::new`] or [`Permit::with_token`].
    ///
    /// ```
    /// use tower_limits::Permit;
    ///
    /// assert_eq!(Permit::with_token(9).token(), Some(9));
    /// assert_eq!(Permit::unit().token(), None);
    /// ```
    #[inline]
    pub fn token(&self) -> Option<u64> {
        match self.kind {
            PermitKind::Token(token) | PermitKind::Held { token, .. } => Some(token),
            PermitKind::Unit | PermitKind::Nested(_) => None,
        }
    }

    /// The same permit for a call costing `cost` units (1 unless set).
    ///
    /// ```
    /// assert_eq!(tower_limits::Permit::with_token(7).with_cost(5).cost(), 5);
    /// ```
    pub fn with_cost(mut self, cost: u32) -> Self {
        self.cost = Cost::new(cost);
        self
    }

    /// How many units the permitted call costs.
    ///
    /// ```
    /// assert_eq!(tower_limits::Permit::unit().cost(), 1);
    /// ```
    pub fn cost(&self) -> u32 {
        self.cost.get()
    }

    /// The permits of a [`Permit::many`], in order; otherwise the permit itself.
    pub(crate) fn into_parts(mut self) -> Vec<Permit> {
        let cost = self.cost;
        let taken = match self.take() {
            Taken::Nested(nested) => match *nested {
                Nested::Many(permits) => return permits,
                wrapped => Taken::nested(wrapped),
            },
            taken => taken,
        };
        vec![Permit {
            kind: taken.into_kind(),
            cost,
        }]
    }

    /// The token and cost, with the permit taken apart so that dropping it
    /// records nothing: for a limiter's own [`Limiter::refund`](super::Limiter::refund).
    pub(crate) fn disarm(mut self) -> (Option<u64>, u32) {
        let token = self.token();
        drop(self.take());
        (token, self.cost.get())
    }

    /// Changes the cost (and, for a permit that has one, the token) after a
    /// limiter settled it.
    pub(crate) fn settled(&mut self, cost: u32, token: Option<u64>) {
        self.cost = Cost::new(cost);
        if let (Some(new), PermitKind::Token(token) | PermitKind::Held { token, .. }) =
            (token, &mut self.kind)
        {
            *token = new;
        }
    }

    /// Changes the cost after a limiter settled it, and forgets a plain
    /// token: the grant can no longer be adjusted (its store gave it a new
    /// ticket the permit cannot learn, or none).
    pub(crate) fn settled_for_good(&mut self, cost: u32) {
        self.cost = Cost::new(cost);
        if matches!(self.kind, PermitKind::Token(_)) {
            drop(self.take());
        }
    }

    /// The permits of a [`Permit::many`], to settle one by one.
    pub(crate) fn parts_mut(&mut self) -> &mut [Permit] {
        // Tested first: a slice of the nested permits, else of `self`, is
        // more than one borrow of `self` can give.
        if !matches!(self.nested(), Some(Nested::Many(_))) {
            return std::slice::from_mut(self);
        }
        match self.nested_mut() {
            Some(Nested::Many(permits)) => permits,
            _ => &mut [],
        }
    }

    /// Returns an unused permit through its [`Release::refund`], if it has one.
    pub(crate) fn refund_held(mut self) {
        match self.take() {
            Taken::Held { release, token } => release.refund(token),
            Taken::Nested(nested) => match *nested {
                Nested::Many(permits) => permits.into_iter().for_each(Permit::refund_held),
                Nested::Wrapped(permit) => permit.refund_held(),
            },
            Taken::Unit | Taken::Token(_) => {}
        }
    }

    /// The kind, leaving nothing in the permit: the one way a kind leaves
    /// its permit (see [`PermitKind`]).
    #[inline]
    fn take(&mut self) -> Taken {
        let kind = std::mem::replace(&mut self.kind, PermitKind::Unit);
        kind.map(ManuallyDrop::into_inner, ManuallyDrop::into_inner)
    }
}

impl Drop for Permit {
    // Out of line: inlined into the callers, this one test made the
    // decision benchmarks slower (`limiters`' `decision/gcra_fast_clock`:
    // 25 ns where it takes 20.5 on the machine that measured it, the
    // instructions fewer). The drop glue stays empty (see `PermitKind`).
    #[inline(never)]
    fn drop(&mut self) {
        self.release_now();
    }
}

impl Permit {
    /// Records the call's completion now, as dropping the permit does,
    /// and leaves a permit that releases nothing: for a holder that keeps
    /// it in place (a response future), without moving it out first.
    #[inline]
    pub(crate) fn release_now(&mut self) {
        // The permits of in-memory rate limiters hold nothing: one test.
        if matches!(self.kind, PermitKind::Held { .. } | PermitKind::Nested(_)) {
            self.release();
        }
    }

    #[cold]
    #[inline(never)]
    fn release(&mut self) {
        match self.take() {
            Taken::Held { release, token } => release.complete(token),
            // Nested permits release themselves as they drop.
            taken => drop(taken),
        }
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            PermitKind::Unit => f.write_str("Permit"),
            PermitKind::Token(token) | PermitKind::Held { token, .. } => {
                f.debug_struct("Permit").field("token", token).finish()
            }
            PermitKind::Nested(nested) => match &***nested {
                Nested::Many(permits) => f.debug_tuple("Permit").field(permits).finish(),
                Nested::Wrapped(permit) => f.debug_tuple("Permit").field(permit).finish(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

    use super::*;

    /// Counts what its permits told it.
    #[derive(Default)]
    struct Counted {
        completed: AtomicU32,
        refunded: AtomicU32,
    }

    impl Release for Counted {
        fn complete(self: Arc<Self>, _token: u64) {
            self.completed.fetch_add(1, SeqCst);
        }

        fn refund(self: Arc<Self>, _token: u64) {
            self.refunded.fetch_add(1, SeqCst);
        }
    }

    /// Runs `use_permits` on two permits of one release, then checks that
    /// no handle to it is left (none leaked, none dropped twice: the count
    /// would have underflowed first) and returns (completed, refunded).
    fn told(use_permits: impl FnOnce(Permit, Permit)) -> (u32, u32) {
        let counted = Arc::new(Counted::default());
        let permit = || Permit::new(Arc::clone(&counted) as Arc<dyn Release>, 7).with_cost(3);
        use_permits(permit(), permit());
        assert_eq!(Arc::strong_count(&counted), 1, "a handle leaked");
        (
            counted.completed.load(SeqCst),
            counted.refunded.load(SeqCst),
        )
    }

    #[test]
    fn every_path_lets_go_of_the_release_once() {
        assert_eq!(told(|a, b| drop((a, b))), (2, 0));
        assert_eq!(told(|a, b| drop(Permit::many(vec![a, b]))), (2, 0));
        assert_eq!(told(|a, b| drop((Permit::wrap(a), b))), (2, 0));
        assert_eq!(told(|a, b| Permit::many(vec![a, b]).refund_held()), (0, 2));
        assert_eq!(
            told(|a, b| Permit::wrap(Permit::many(vec![a, b])).refund_held()),
            (0, 2)
        );
        // Disarmed: nobody is told, and the handle still goes.
        let disarmed = told(|a, b| {
            assert_eq!(a.disarm(), (Some(7), 3));
            b.refund_held();
        });
        assert_eq!(disarmed, (0, 1));
        let taken_apart = told(|a, b| {
            let parts = Permit::many(vec![a, b]).into_parts();
            assert_eq!(parts.len(), 2);
            let unwrapped = Permit::wrap(Permit::many(parts)).unwrap_wrapped();
            let not_wrapped = unwrapped.map(Permit::unwrap_wrapped);
            assert!(matches!(not_wrapped, Ok(Err(_))));
        });
        assert_eq!(taken_apart, (2, 0));
        // Released in place (a response future's), then dropped: told once.
        let released_in_place = told(|mut a, b| {
            a.release_now();
            a.release_now();
            let mut many = Permit::many(vec![b]);
            many.release_now();
            drop((a, many));
        });
        assert_eq!(released_in_place, (2, 0));
    }

    #[test]
    fn nested_permits_are_reached_in_place() {
        let (completed, _) = told(|a, b| {
            let mut many = Permit::many(vec![a, b]);
            many.parts_mut()
                .iter_mut()
                .for_each(|part| part.settled(1, Some(9)));
            let tokens: Vec<_> = many
                .into_parts()
                .iter()
                .map(|part| (part.token(), part.cost()))
                .collect();
            assert_eq!(tokens, [(Some(9), 1), (Some(9), 1)]);
        });
        assert_eq!(completed, 2);
        let mut wrapped = Permit::wrap(Permit::with_token(4));
        assert_eq!(
            wrapped.wrapped_mut().and_then(|inner| inner.token()),
            Some(4)
        );
        assert_eq!(wrapped.token(), None);
        let mut token = Permit::with_token(5);
        token.settled_for_good(2);
        assert_eq!((token.token(), token.cost()), (None, 2));
    }
}
