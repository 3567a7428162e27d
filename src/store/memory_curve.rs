//! [`CurveStore`] for [`MemoryStore`]: one record per name.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use super::{CurveRecord, CurveStore, MemoryStore};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;

/// A named shared curve in a [`MemoryStore`], made by
/// [`CurveStore::curve_key`]. Keys for the same name refer to the same
/// record.
///
/// ```
/// use tower_limits::store::{CurveRecord, CurveStore, MemoryCurveKey, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let key: MemoryCurveKey = store.curve_key("api");
/// store.swap_curve(&key, CurveRecord::from_words(0, [1; 6])).await?;
/// assert!(store.load_curve(&store.curve_key("api")).await?.is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct MemoryCurveKey(Arc<Mutex<Option<CurveRecord>>>);

impl fmt::Debug for MemoryCurveKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MemoryCurveKey")
    }
}

impl MemoryCurveKey {
    fn record(&self) -> std::sync::MutexGuard<'_, Option<CurveRecord>> {
        // A record is replaced whole: a poisoned lock is usable.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl CurveStore for MemoryStore {
    type CurveKey = MemoryCurveKey;

    fn curve_key(&self, name: &str) -> MemoryCurveKey {
        self.curve_state(name)
    }

    fn load_curve<'a>(
        &'a self,
        key: &'a MemoryCurveKey,
    ) -> LimiterFuture<'a, Result<Option<CurveRecord>, LimiterError>> {
        LimiterFuture::ready(Ok(*key.record()))
    }

    fn swap_curve<'a>(
        &'a self,
        key: &'a MemoryCurveKey,
        record: CurveRecord,
    ) -> LimiterFuture<'a, Result<bool, LimiterError>> {
        let mut stored = key.record();
        let current = stored.map_or(0, |stored| stored.version());
        if current != record.version() {
            return LimiterFuture::ready(Ok(false));
        }
        *stored = Some(record.over(current + 1));
        LimiterFuture::ready(Ok(true))
    }
}
