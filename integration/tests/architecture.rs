//! The crate's modules read top-down: each imports only modules below it in
//! [`LAYERS`], never one above it, so none depends on a module that depends
//! back on it, and names what it uses by its module's path, not through the
//! crate root's re-exports. Read from the sources (`crate::` paths outside
//! comments).

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

/// Every line of code (not a comment) of the sources, with the top-level
/// module `from` whose files hold it.
fn code_lines() -> Vec<(String, String)> {
    let mut lines = Vec::new();
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
            if !line.trim_start().starts_with("//") {
                lines.push((from.to_owned(), line.to_owned()));
            }
        }
    }
    lines
}

/// Every `crate::` path written outside comments, as the top-level module
/// `from` whose files hold it and the path's rest
/// (`limiters::ConcurrencyLimiter`).
fn crate_paths() -> Vec<(String, String)> {
    let mut paths = Vec::new();
    for (from, line) in code_lines() {
        for (index, _) in line.match_indices("crate::") {
            let rest: String = line[index + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            paths.push((from.clone(), rest));
        }
    }
    paths
}

/// Every `(from, to)` of a `crate::to` path written in the files of the
/// top-level module `from`.
fn edges() -> BTreeSet<(String, String)> {
    crate_paths()
        .into_iter()
        .filter_map(|(from, rest)| {
            let to: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            (!to.is_empty() && to != from).then_some((from, to))
        })
        .collect()
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

/// The crate root re-exports for users; the modules name each other by
/// their own paths (`crate::limiters::ConcurrencyLimiter`), never through
/// the root (`crate::ConcurrencyLimiter`), which hides which module a file
/// depends on.
#[test]
fn no_module_reaches_another_through_the_crate_root() {
    let detours: Vec<_> = crate_paths()
        .into_iter()
        .filter(|(from, rest)| from != "lib" && rest.starts_with(|c: char| c.is_ascii_uppercase()))
        .collect();
    assert!(
        detours.is_empty(),
        "paths through the crate root: {detours:?}"
    );
}

/// What only HTTP needs lives in `http` (or above it): no module below it
/// compiles code under the `http` feature.
#[test]
fn no_module_below_http_depends_on_its_feature() {
    let below: Vec<_> = code_lines()
        .into_iter()
        .filter(|(from, line)| layer(from) < layer("http") && line.contains("feature = \"http\""))
        .collect();
    assert!(below.is_empty(), "`http` code below `http`: {below:?}");
    let lines = code_lines();
    assert!(
        lines
            .iter()
            .any(|(from, line)| from == "job" && line.contains("feature = \"http\"")),
        "the listing should see `job`'s HTTP code (above `http`): it found none"
    );
}
