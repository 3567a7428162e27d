//! The crate's modules read top-down: each imports only modules below it in
//! [`LAYERS`], never one above it, so none depends on a module that depends
//! back on it. Read from the sources (`crate::` paths outside comments).

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

/// The top-level modules, lowest first. A module may use any module before
/// it; `lib` (the crate root) re-exports them all.
const LAYERS: &[&str] = &[
    "clock",
    "error",
    "rate",
    "quota_status",
    "start_log",
    "algorithms",
    "limiter",
    "line",
    "store",
    "limiters",
    "limit",
    "http",
    "job",
    "lib",
];

/// Every `(from, to)` of a `crate::to` path written in the files of the
/// top-level module `from`.
fn edges() -> BTreeSet<(String, String)> {
    let mut edges = BTreeSet::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src");
    let mut files = vec![src.clone()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(
                fs::read_dir(&path)
                    .unwrap()
                    .map(|entry| entry.unwrap().path()),
            );
            continue;
        }
        if path.extension().is_none_or(|extension| extension != "rs") {
            continue;
        }
        let relative = path.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap();
        let from = first.as_os_str().to_str().unwrap().trim_end_matches(".rs");
        for line in fs::read_to_string(&path).unwrap().lines() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (index, _) in line.match_indices("crate::") {
                let rest = &line[index + "crate::".len()..];
                let to: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !to.is_empty() && to != from {
                    edges.insert((from.to_owned(), to));
                }
            }
        }
    }
    edges
}

fn layer(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|layer| *layer == module)
        .unwrap_or_else(|| panic!("module `{module}` is not in LAYERS: place it there"))
}

#[test]
fn no_module_imports_one_above_it() {
    let edges = edges();
    assert!(
        edges.len() > 20,
        "the listing found too few imports: {edges:?}"
    );
    let upward: Vec<_> = edges
        .iter()
        .filter(|(from, to)| layer(to) > layer(from))
        .collect();
    assert!(upward.is_empty(), "imports up the layers: {upward:?}");
}

#[test]
fn the_listing_sees_the_layers_that_are_used() {
    // The edges every layer above the algorithms relies on: if the listing
    // missed them, the test above would pass on nothing.
    let edges = edges();
    for (from, to) in [
        ("limiters", "algorithms"),
        ("store", "algorithms"),
        ("limit", "limiters"),
        ("http", "limit"),
    ] {
        assert!(
            edges.contains(&(from.to_owned(), to.to_owned())),
            "{from} -> {to} not found"
        );
    }
}
