//! One conformance suite, run against every store: the same assertions
//! (in `common/conformance.rs`), so no store is tested less than another.
//!
//! Adding a store is one `conformance!` line with an async expression that
//! makes a fresh store, or `None` (after saying why on stderr) when the
//! store's server is not configured.
//!
//! Redis runs when `REDIS_URL` is set (`.ci/run` sets it); unset, its tests
//! print that they were skipped; set but unreachable, they fail.

mod common;

use common::conformance;
use tower_limits::store::MemoryStore;

/// Runs every conformance check against the store `$make` makes.
macro_rules! conformance {
    ($store:ident, $make:expr) => {
        mod $store {
            use super::*;

            conformance!(@checks $make;
                quota_grants_capacity_then_names_retry,
                quota_refund_and_peek,
                quota_settle,
                quota_pause,
                quota_take_and_reset,
                quota_decisions_are_atomic,
                shared_limiter_shares_one_limit,
                sliding_log_limits_and_reports,
                sliding_log_refund_settle_pause_clear,
                sliding_log_backoff,
                leases_limit_expire_and_renew,
                leased_limiter_renews_and_releases,
            );
        }
    };
    (@checks $make:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                if let Some(store) = $make {
                    conformance::$check(store).await;
                }
            }
        )*
    };
}

conformance!(memory, Some(MemoryStore::new()));

#[cfg(feature = "redis")]
conformance!(redis, common::redis::store("conformance").await);
