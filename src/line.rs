//! The line of callers waiting for one limiter after a denial, and the turn
//! to ask it.
//!
//! One caller at a time holds the turn: it sleeps on its denial (so nobody
//! behind it asks a limiter that would say no), then asks. An answer that is
//! ready at once (an in-memory limiter) is taken holding the turn. An answer
//! that takes a round trip (a store) is not: the caller gives the turn up
//! while its request is in flight, and the next caller in line may ask too,
//! as long as fewer retries are in flight than were granted since the last
//! denial (at least one). That window doubles each round trip while every
//! retry is granted and falls back to one at a denial, so a refill that
//! admits many callers admits them in a few round trips, while a backlog
//! behind a limit that admits one caller per refill costs the store two
//! decisions per refill (the grant, and the denial that closes the window),
//! not one per waiting caller.
//!
//! A caller keeps its position in line when a retry is denied: it goes back
//! ahead of everyone ranked after it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::error::{LimiterError, Overloaded};
use crate::limiter::Admission;

/// The line of one layer's limiter (or one key's), in arrival order.
pub(crate) type Queue = Line<Fifo, ()>;

/// How a line ranks its waiting callers, filed under a `Lane` (their key,
/// for a fair line): it hands the turn to the lowest rank first, and among
/// equal ranks to the caller who joined first.
pub(crate) trait Order<Lane>: Default + Send + 'static {
    /// Whether the caller holding the turn counts against `max_waiting`.
    const HOLDER_WAITS: bool;

    /// The rank of a caller of `lane` joining the line now.
    fn rank(&mut self, lane: &Lane) -> u128;
    /// The caller of `lane` ranked `rank` was handed the turn.
    fn served(&mut self, lane: &Lane, rank: u128) {
        let _ = (lane, rank);
    }
    /// A waiting caller of `lane` gave up.
    fn left(&mut self, lane: &Lane) {
        let _ = lane;
    }
    /// A caller of `lane` whose retry was denied is back in line, with the
    /// rank it had.
    fn refiled(&mut self, lane: &Lane, rank: u128) {
        let _ = (lane, rank);
    }
}

/// Callers served in the order they joined the line.
#[derive(Default)]
pub(crate) struct Fifo;

impl Order<()> for Fifo {
    const HOLDER_WAITS: bool = true;

    fn rank(&mut self, (): &()) -> u128 {
        0
    }
}

/// A waiting caller: its lane, and a signal for when the turn is handed to
/// it.
struct Ticket<Lane> {
    lane: Lane,
    granted: AtomicBool,
    notify: Notify,
}

impl<Lane> Ticket<Lane> {
    fn grant(&self) {
        self.granted.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    fn is_granted(&self) -> bool {
        self.granted.load(Ordering::Acquire)
    }

    async fn granted(&self) {
        while !self.is_granted() {
            // `notify_one` stores a permit: a grant before this await is kept.
            self.notify.notified().await;
        }
    }
}

/// Where a caller stands in line: its rank, then when it joined.
type Position = (u128, u64);

/// Shared by every service of a layer (or by the callers of one key).
pub(crate) struct Line<O, Lane> {
    state: Mutex<State<O, Lane>>,
    /// Callers holding a [`Place`]; changed under the lock, read without it.
    places: AtomicUsize,
}

struct State<O, Lane> {
    /// Callers waiting for the turn.
    waiting: BTreeMap<Position, Arc<Ticket<Lane>>>,
    order: O,
    /// A caller holds the turn.
    held: bool,
    /// Retries sent to the limiter and not answered yet.
    in_flight: usize,
    /// Retries granted since the last denial: how many (at least one) may
    /// be in flight at once.
    granted_since_denial: usize,
    next_seq: u64,
}

impl<O: Default, Lane> Default for Line<O, Lane> {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                waiting: BTreeMap::new(),
                order: O::default(),
                held: false,
                in_flight: 0,
                granted_since_denial: 0,
                next_seq: 0,
            }),
            places: AtomicUsize::new(0),
        }
    }
}

impl<O, Lane> fmt::Debug for Line<O, Lane> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Line")
            .field("waiting", &self.places.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<O: Order<Lane>, Lane> Line<O, Lane> {
    /// Nobody is in line: a newcomer may ask the limiter without queueing.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.places.load(Ordering::Acquire) == 0
    }

    fn lock(&self) -> MutexGuard<'_, State<O, Lane>> {
        // Every update completes under the lock: a poisoned state is consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place in line (behind every caller ranked before it), unless
    /// `max_waiting` callers already wait.
    pub(crate) fn enter(
        self: &Arc<Self>,
        lane: Lane,
        max_waiting: Option<usize>,
    ) -> Result<Place<O, Lane>, Overloaded> {
        let mut state = self.lock();
        let places = self.places.load(Ordering::Acquire);
        let waiting = places - usize::from(!O::HOLDER_WAITS && state.held);
        if max_waiting.is_some_and(|max| waiting >= max) {
            return Err(Overloaded::new(waiting));
        }
        self.places.store(places + 1, Ordering::Release);
        let position = (state.order.rank(&lane), state.next_seq);
        state.next_seq += 1;
        let ticket = Arc::new(Ticket {
            lane,
            granted: AtomicBool::new(false),
            notify: Notify::new(),
        });
        state.waiting.insert(position, Arc::clone(&ticket));
        state.pass_turn();
        Ok(Place {
            line: Arc::clone(self),
            position,
            ticket,
            status: Status::Queued,
        })
    }
}

impl<O: Order<Lane>, Lane> State<O, Lane> {
    /// Hands a free turn to the next caller in line, if the window lets one
    /// more retry out.
    fn pass_turn(&mut self) {
        if self.held || self.in_flight >= self.granted_since_denial.max(1) {
            return;
        }
        if let Some(((rank, _), ticket)) = self.waiting.pop_first() {
            self.order.served(&ticket.lane, rank);
            self.held = true;
            ticket.grant();
        }
    }
}

/// A caller's place in line, from its first denial until it is admitted or
/// gives up. Dropping it at any point leaves the line and passes on a turn
/// it held.
pub(crate) struct Place<O: Order<Lane>, Lane> {
    line: Arc<Line<O, Lane>>,
    position: Position,
    ticket: Arc<Ticket<Lane>>,
    status: Status,
}

enum Status {
    /// Waits for the turn (and may have just been handed it).
    Queued,
    /// Holds the turn.
    Turn,
    /// Gave the turn up while its retry is in flight.
    Asking,
    /// Has its answer.
    Done,
}

impl<O: Order<Lane>, Lane> Place<O, Lane> {
    /// Waits until the caller holds the turn.
    pub(crate) async fn turn(&mut self) {
        if let Status::Queued = self.status {
            self.ticket.granted().await;
            self.status = Status::Turn;
        }
    }

    /// The caller holding the turn sends a retry that takes a round trip:
    /// the turn goes on while it is in flight.
    pub(crate) fn asking(&mut self) {
        let mut state = self.line.lock();
        state.held = false;
        state.in_flight += 1;
        self.status = Status::Asking;
        state.pass_turn();
    }

    /// The retry sent by [`asking`](Place::asking) is answered: a grant
    /// widens the window; a denial narrows it to one and puts the caller
    /// back in line with the position it had.
    pub(crate) fn answered(&mut self, answer: &Result<Admission, LimiterError>) {
        let mut state = self.line.lock();
        state.in_flight -= 1;
        self.status = Status::Done;
        match answer {
            Ok(Admission::Granted(_)) => {
                state.granted_since_denial = state.granted_since_denial.saturating_add(1)
            }
            Ok(Admission::Denied(_)) => {
                state.granted_since_denial = 0;
                self.ticket.granted.store(false, Ordering::Release);
                state.order.refiled(&self.ticket.lane, self.position.0);
                state
                    .waiting
                    .insert(self.position, Arc::clone(&self.ticket));
                self.status = Status::Queued;
            }
            Err(_) => {}
        }
        state.pass_turn();
    }
}

impl<O: Order<Lane>, Lane> Drop for Place<O, Lane> {
    fn drop(&mut self) {
        let mut state = self.line.lock();
        match self.status {
            Status::Queued if self.ticket.is_granted() => state.held = false,
            Status::Queued => {
                state.waiting.remove(&self.position);
                state.order.left(&self.ticket.lane);
            }
            Status::Turn => state.held = false,
            Status::Asking => state.in_flight -= 1,
            Status::Done => {}
        }
        self.line.places.fetch_sub(1, Ordering::AcqRel);
        state.pass_turn();
    }
}
