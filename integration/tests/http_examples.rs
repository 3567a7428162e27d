//! Runs the integration examples: each starts a loopback server and a
//! client, and returns what the client saw.
#![cfg(feature = "http")]
// Each client example brings the loopback upstream of `examples/common`.
#![allow(clippy::duplicate_mod)]

#[cfg(feature = "tonic")]
#[path = "../examples/tonic_greeter.rs"]
#[allow(dead_code, unreachable_pub)]
mod tonic_greeter;

#[cfg(feature = "tonic")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_client_obeys_resource_exhausted_from_a_limited_tonic_server() {
    use std::time::Duration;
    use tonic::Code;
    let summary = tonic_greeter::run().await.expect("the example runs");
    assert_eq!(summary.codes, [Code::Ok, Code::ResourceExhausted, Code::Ok]);
    // The third call waited for the server's Retry-After (2 s, rounded up).
    assert!(
        summary.paused >= Duration::from_millis(1_900),
        "{summary:?}"
    );
    assert!(summary.paused < Duration::from_secs(3), "{summary:?}");
}

#[path = "../examples/hyper_client.rs"]
#[allow(dead_code, unreachable_pub)]
mod hyper_client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hyper_client_succeeds_through_a_tight_upstream_with_few_429s() {
    let summary = hyper_client::run(12).await.expect("the example runs");
    assert_eq!(summary.succeeded, 12, "{summary:?}");
    // 4 in flight, 4 allowed a second: each second at most the 4 requests
    // already in flight when the upstream refused get a 429, then everyone
    // pauses; 12 requests take 3 such seconds, the last of them clean.
    assert!((1..=8).contains(&summary.refused), "{summary:?}");
}

#[cfg(feature = "reqwest-middleware")]
#[path = "../examples/reqwest_client.rs"]
#[allow(dead_code, unreachable_pub)]
mod reqwest_client;

#[cfg(feature = "reqwest-middleware")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reqwest_client_is_refused_once_then_obeys_the_pause() {
    let summary = reqwest_client::run(6).await.expect("the example runs");
    assert_eq!(summary.succeeded, 6, "{summary:?}");
    assert_eq!(summary.refused, 1, "{summary:?}");
}

#[cfg(feature = "axum")]
#[path = "../examples/axum_tenants.rs"]
#[allow(dead_code, unreachable_pub)]
mod axum_tenants;

#[cfg(feature = "axum")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_router_limits_each_tenant_and_keys_peers_by_connect_info() {
    let (answers, keyed_by_address) = axum_tenants::run().await.expect("the example runs");
    let statuses: Vec<_> = answers
        .iter()
        .map(|answer| answer.status.as_u16())
        .collect();
    assert_eq!(statuses, [200, 200, 429, 200], "{answers:?}");
    assert_eq!(answers[0].headers["ratelimit"], "\"tenant\";r=1;t=10");
    assert_eq!(answers[1].headers["ratelimit"], "\"tenant\";r=0;t=10");
    let refused = &answers[2].headers;
    assert_eq!(refused["retry-after"], "10");
    assert_eq!(refused["ratelimit"], "\"tenant\";r=0;t=10");
    assert_eq!(refused["ratelimit-policy"], "\"tenant\";q=2;w=10");
    assert_eq!(
        answers[3].headers["ratelimit"], "\"tenant\";r=1;t=10",
        "globex has its own quota"
    );
    assert!(
        keyed_by_address,
        "the per-address limit read axum's ConnectInfo"
    );
}

#[cfg(feature = "axum")]
#[path = "../examples/adaptive_client.rs"]
#[allow(dead_code, unreachable_pub)]
mod adaptive_client;

/// 5 s at each limit (20, 40, then 10 a second): the adapted rate goes up
/// past the first limit, then down below the second, with few refusals.
#[cfg(feature = "axum")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_client_follows_its_upstream_up_and_down() {
    use std::time::Duration;
    let seconds = adaptive_client::run(Duration::from_secs(5), |_| {})
        .await
        .expect("the example runs");
    let served: u32 = seconds.iter().map(|s| s.served).sum();
    let refused: u32 = seconds.iter().map(|s| s.refused).sum();
    assert!(refused * 10 <= served + refused, "{seconds:#?}");
    let highest_at_40 = seconds[5..10].iter().map(|s| s.adapted).fold(0.0, f64::max);
    assert!(highest_at_40 > 20.0, "{seconds:#?}");
    assert!(seconds[14].adapted < 20.0, "{seconds:#?}");
}
