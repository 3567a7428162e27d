//! [`SeqCell`]: a few words of configuration that can change at runtime,
//! read without a lock on every decision.

use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Mutex, PoisonError};

/// A sequence lock over `N` words: readers copy the words and retry if a
/// write overlapped (rare: only on reconfiguration); writers take a mutex
/// among themselves and make the sequence odd while they write.
#[derive(Debug)]
pub(crate) struct SeqCell<const N: usize> {
    /// Even when the words are consistent; odd while a writer is at work.
    sequence: AtomicU64,
    words: [AtomicU64; N],
    writer: Mutex<()>,
}

impl<const N: usize> SeqCell<N> {
    pub(crate) fn new(words: [u64; N]) -> Self {
        Self {
            sequence: AtomicU64::new(0),
            words: words.map(AtomicU64::new),
            writer: Mutex::new(()),
        }
    }

    /// The words as one writer left them: never half of one write and half
    /// of another.
    #[inline]
    pub(crate) fn load(&self) -> [u64; N] {
        loop {
            let before = self.sequence.load(Ordering::Acquire);
            let words = std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if before.is_multiple_of(2) && self.sequence.load(Ordering::Relaxed) == before {
                return words;
            }
            std::hint::spin_loop();
        }
    }

    /// Replaces the words.
    pub(crate) fn store(&self, words: [u64; N]) {
        self.store_then(words, || ());
    }

    /// Replaces the words, then runs `adapt` before readers may see them:
    /// a reader that loads the new words also sees what `adapt` did.
    pub(crate) fn store_then<T>(&self, words: [u64; N], adapt: impl FnOnce() -> T) -> T {
        let _writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        self.sequence.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        for (word, value) in self.words.iter().zip(words) {
            word.store(value, Ordering::Relaxed);
        }
        let adapted = adapt();
        self.sequence.fetch_add(1, Ordering::Release);
        adapted
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Words a reader can check for tearing: each is derived from the first.
    fn words(seed: u64) -> [u64; 3] {
        [seed, seed.wrapping_mul(31), seed ^ 0xdead_beef]
    }

    #[test]
    fn load_returns_what_was_stored() {
        let cell = SeqCell::new(words(3));
        assert_eq!(cell.load(), words(3));
        cell.store(words(8));
        assert_eq!(cell.load(), words(8));
        assert_eq!(cell.store_then(words(9), || 42), 42);
        assert_eq!(cell.load(), words(9));
    }

    #[test]
    fn concurrent_readers_never_see_a_torn_write() {
        let cell = Arc::new(SeqCell::new(words(1)));
        let writer = {
            let cell = Arc::clone(&cell);
            std::thread::spawn(move || {
                for round in 0..20_000 {
                    cell.store(words(1 + round % 7));
                }
            })
        };
        for _ in 0..200_000 {
            let seen = cell.load();
            assert_eq!(seen, words(seen[0]), "torn read: {seen:?}");
        }
        writer.join().expect("writer thread");
    }
}
