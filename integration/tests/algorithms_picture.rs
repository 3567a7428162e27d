//! The algorithms picture in the README: it is what the example draws now,
//! and what it shows holds (the burst each algorithm lets through).

#[path = "../examples/algorithms_picture.rs"]
#[allow(dead_code, unreachable_pub)]
mod algorithms_picture;

use algorithms_picture::{busiest_second, render};

#[test]
fn the_readme_picture_is_what_the_example_draws() {
    let drawn = tempfile::tempdir().unwrap();
    let path = drawn.path().join("algorithms.svg");
    let runs = render(path.to_str().unwrap()).unwrap();

    let busiest: Vec<(&str, usize)> = runs
        .iter()
        .map(|run| (run.label.as_str(), busiest_second(&run.admitted)))
        .collect();
    assert_eq!(
        busiest,
        [
            // A full bucket of 10, then the refill: 10 + 9 within a second.
            ("Token bucket (capacity 10)", 19),
            ("GCRA (burst 3)", 12),
            // Twice the limit across the window boundary.
            ("Fixed window", 20),
            // Below twice the limit (the documented error bound).
            ("Sliding window counter", 19),
            // Exact: never more than 10 in any second.
            ("Sliding log (RateLimiter, no backoff)", 10),
            ("Leaky bucket (queue 10)", 10),
            ("Evenly spaced", 10),
        ]
    );
    for run in &runs {
        assert_eq!(run.admitted.len() + run.gave_up.len(), 54, "{}", run.label);
    }

    let checked_in = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/algorithms.svg");
    assert!(
        std::fs::read(&path).unwrap() == std::fs::read(checked_in).unwrap(),
        "docs/algorithms.svg is stale: run `cargo run -p integration --example algorithms_picture`"
    );
}
