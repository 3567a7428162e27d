//! The Prometheus example, scraped: its `/metrics` parses as the
//! Prometheus text exposition and holds the exact counts of the calls it
//! made. Its own test binary, because the example installs the global
//! metrics recorder.
#![cfg(all(feature = "metrics", feature = "axum"))]

#[path = "../examples/metrics_prometheus.rs"]
#[allow(dead_code, unreachable_pub)]
mod metrics_prometheus;

use std::collections::BTreeMap;

/// One sample of the exposition text: name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

/// Parses the Prometheus text exposition format (comments, then
/// `name{label="value",...} value` lines); fails on anything else.
fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a value");
            let value: f64 = value.parse().expect("a number");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.strip_suffix('}').expect("closed labels")),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (key, quoted) = pair.split_once('=').expect("key=value");
                    let value = quoted.trim_matches('"').to_owned();
                    (key.to_owned(), value)
                })
                .collect();
            (name.to_owned(), labels, value)
        })
        .collect()
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples.iter().find_map(|(sample, have, value)| {
        let matches = sample == name
            && labels
                .iter()
                .all(|(key, wanted)| have.get(*key).is_some_and(|got| got == wanted));
        matches.then_some(*value)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prometheus_example_serves_exact_counts() {
    let addr = metrics_prometheus::run().await.expect("the example runs");
    let text = metrics_prometheus::scrape(addr)
        .await
        .expect("/metrics answers");
    let samples = parse(&text);
    let decisions = "tower_limits_decisions_total";
    let count = |limiter, outcome| {
        value(
            &samples,
            decisions,
            &[("limiter", limiter), ("outcome", outcome)],
        )
    };
    assert_eq!(count("upstream", "granted"), Some(40.0), "{text}");
    assert_eq!(count("search", "granted"), Some(5.0), "{text}");
    assert_eq!(count("search", "refused"), Some(5.0), "{text}");
    let waits = value(
        &samples,
        "tower_limits_wait_seconds_count",
        &[("limiter", "upstream")],
    );
    assert_eq!(waits, Some(40.0), "{text}");
    // 30 of the 40 waited for the rate (100 ms apart): 3 s in all, then some.
    let waited = value(
        &samples,
        "tower_limits_wait_seconds_sum",
        &[("limiter", "upstream")],
    );
    assert!(waited.is_some_and(|seconds| seconds > 40.0), "{text}");
}
