//! The decisions of the counting algorithms, as pure functions of a state,
//! a time and a cost, written once.
//!
//! The in-memory limiters run them inside their atomics and locks, the
//! SQLite store on the rows it loads; Redis (Lua) and PostgreSQL
//! (PL/pgSQL) run the same rules on the server, and
//! `integration/tests/golden_vectors.rs` checks that they answer exactly as these do.
//! Times are nanoseconds counted from an origin the caller picks (a clock's
//! epoch, or the Unix epoch for a store); nothing here reads a clock.

pub(crate) mod fixed_window;
pub(crate) mod gcra;
pub(crate) mod sliding_log;
pub(crate) mod sliding_window_counter;
pub(crate) mod slots;
pub(crate) mod windows;
