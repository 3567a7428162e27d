//! One conformance suite, run against every store: the same assertions
//! (in `common/conformance.rs`), so no store is tested less than another.
//!
//! Adding a store is one `conformance!` line with an async expression that
//! makes a fresh store, or `None` (after saying why on stderr) when the
//! store's server is not configured.
//!
//! Redis runs when `REDIS_URL` is set, PostgreSQL when `DATABASE_URL` is
//! (`.ci/run` sets both); unset, their tests print that they were skipped;
//! set but unreachable, they fail.

mod common;

use tower_limits::store::MemoryStore;

conformance!(memory, Some(MemoryStore::new()));

#[cfg(feature = "redis")]
conformance!(redis, common::redis::store("conformance").await);

#[cfg(feature = "postgres")]
conformance!(postgres, common::postgres::store("conformance").await);

// The temporary database is a temporary of the checks' `if let`: it lives
// until they end.
#[cfg(feature = "sqlite")]
conformance!(sqlite, common::sqlite::TempDb::new().store().await);

/// `QuotaStore::reset` against the tickets of grants made before it, on
/// every store: a refund or a settle down of such a grant gives nothing
/// back (the reset already gave everything back), and the grants made
/// after it are refunded as usual once their tickets are past what the
/// reset refuses.
mod reset {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use tower_limits::store::{Quota, QuotaStore, WindowDecision};

    use crate::common::conformance::{count_quotas, day, full_then_refunded, quotas, unique};

    /// Runs both checks against the store `$make` makes (`None` skips), in
    /// a module named `$store`.
    macro_rules! reset_checks {
        ($store:ident, $make:expr) => {
            mod $store {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn a_grant_from_before_a_reset_gives_nothing_back() {
                    if let Some(store) = $make {
                        super::a_grant_from_before_a_reset_gives_nothing_back(store).await;
                    }
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn grants_after_a_reset_are_refunded() {
                    if let Some(store) = $make {
                        super::grants_after_a_reset_are_refunded(store).await;
                    }
                }
            }
        };
    }

    reset_checks!(memory, Some(tower_limits::store::MemoryStore::new()));

    #[cfg(feature = "redis")]
    reset_checks!(redis, crate::common::redis::store("conformance").await);

    #[cfg(feature = "postgres")]
    reset_checks!(
        postgres,
        crate::common::postgres::store("conformance").await
    );

    #[cfg(feature = "sqlite")]
    reset_checks!(sqlite, crate::common::sqlite::TempDb::new().store().await);

    fn granted(decision: WindowDecision) -> u64 {
        match decision {
            WindowDecision::Granted { ticket } => ticket,
            WindowDecision::Denied { retry_at } => panic!("denied until {retry_at:?}"),
        }
    }

    /// How many single units `quota` at `key` grants now, up to `most`.
    async fn grants<S: QuotaStore>(store: &S, key: &S::QuotaKey, quota: &Quota, most: u32) -> u32 {
        let mut granted = 0;
        while granted < most {
            match store.decide(key, quota, 1).await.unwrap() {
                WindowDecision::Granted { .. } => granted += 1,
                WindowDecision::Denied { .. } => break,
            }
        }
        granted
    }

    /// Each quota of 4 (nothing refills within the check): 2 + 2 granted,
    /// a reset, 4 granted again; then the first grant refunded and the
    /// second settled down to 1 unit, which gives nothing back: no unit
    /// more passes, 4 at once and never more.
    pub(super) async fn a_grant_from_before_a_reset_gives_nothing_back<S: QuotaStore>(store: S) {
        let mut excess = Vec::new();
        for (what, quota) in count_quotas(4) {
            let started = day();
            let key = store.quota_key(&unique(what));
            let refunded = granted(store.decide(&key, &quota, 2).await.unwrap());
            let settled = granted(store.decide(&key, &quota, 2).await.unwrap());
            store.reset(&key, &quota).await.unwrap();
            assert_eq!(grants(&store, &key, &quota, 5).await, 4, "{what}: reset");
            store.adjust(&key, &quota, refunded, 2, 0).await.unwrap();
            store.adjust(&key, &quota, settled, 2, 1).await.unwrap();
            let more = grants(&store, &key, &quota, 4).await;
            // A window that rolled at midnight UTC counts afresh.
            if more > 0 && day() == started {
                excess.push(format!("{what}: {} granted at once, capacity 4", 4 + more));
            }
        }
        assert!(
            excess.is_empty(),
            "grants from before a reset gave units back:\n{}",
            excess.join("\n")
        );
    }

    /// Each quota of 3 per 300 ms: full, reset, and once the next window
    /// began (past a GCRA line that the reset emptied), 3 granted and
    /// refunded: all 3 come back, as they would with no reset before.
    pub(super) async fn grants_after_a_reset_are_refunded<S: QuotaStore>(store: S) {
        for (what, quota) in quotas() {
            let key = store.quota_key(&unique(what));
            granted(store.decide(&key, &quota, 3).await.unwrap());
            store.reset(&key, &quota).await.unwrap();
            after_boundary(quota.window()).await;
            // A grant made after the reset comes back.
            full_then_refunded(&store, &key, &quota, what).await;
        }
    }

    /// Sleeps until just after the next boundary of `window` in Unix time.
    async fn after_boundary(window: Duration) {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let left = window.as_nanos() - since.as_nanos() % window.as_nanos();
        let left = Duration::from_nanos(u64::try_from(left).unwrap());
        tokio::time::sleep(left + Duration::from_millis(5)).await;
    }
}
