//! The README and the crate docs say one thing: their guides to the
//! limiters agree word for word, and their tables of cargo
//! features list the same features with the same words (the crate docs'
//! links aside), and every feature of the crate's manifest.

/// The rows of the table under `# Cargo features` in `text` (with `prefix`
/// before each line), without link brackets.
fn feature_rows(text: &str, prefix: &str) -> Vec<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(|line| line.strip_prefix(prefix).unwrap_or(line))
        .skip_while(|line| !line.starts_with("| Feature |"))
        .take_while(|line| line.starts_with('|'))
        .collect();
    assert!(!lines.is_empty(), "no table of features");
    lines
        .iter()
        .map(|line| line.replace(['[', ']'], ""))
        .collect()
}

#[test]
fn the_readme_and_the_crate_docs_list_the_same_features() {
    let readme = feature_rows(include_str!("../../README.md"), "");
    let crate_docs = feature_rows(include_str!("../../src/lib.rs"), "//! ");
    assert_eq!(readme, crate_docs);
}

#[test]
fn the_feature_tables_list_every_feature_of_the_manifest() {
    let manifest = include_str!("../../Cargo.toml");
    let features = manifest
        .lines()
        .skip_while(|line| *line != "[features]")
        .skip(1)
        .take_while(|line| !line.starts_with('['))
        .filter_map(|line| line.split_once(" = ").map(|(name, _)| name))
        .filter(|name| *name != "default");
    let rows = feature_rows(include_str!("../../src/lib.rs"), "//! ");
    for feature in features {
        let cell = format!("| `{feature}`");
        assert!(
            rows.iter().any(|row| row.starts_with(&cell)),
            "the feature table lacks `{feature}`"
        );
    }
}

/// The first paragraph (or list) under the heading `heading` in `text`
/// (with `prefix` before each line), as one line of words, without link
/// brackets and link targets.
fn first_block(text: &str, prefix: &str, heading: &str) -> String {
    let words: Vec<&str> = text
        .lines()
        .map(|line| {
            let line = line.trim_end();
            line.strip_prefix(prefix)
                .or_else(|| line.strip_prefix(prefix.trim_end()))
                .unwrap_or(line)
        })
        .skip_while(|line| line.trim_start_matches('#').trim() != heading)
        .skip(1)
        .skip_while(|line| line.trim().is_empty())
        .take_while(|line| !line.trim().is_empty())
        .flat_map(str::split_whitespace)
        .collect();
    assert!(!words.is_empty(), "nothing under `{heading}`");
    let mut joined = words.join(" ");
    // `[name](target)` and `[name]` read as `name`.
    while let Some(start) = joined.find("](") {
        let end = joined[start..]
            .find(')')
            .map_or(joined.len(), |end| start + end + 1);
        joined.replace_range(start + 1..end, "");
    }
    joined.replace(['[', ']'], "")
}

#[test]
fn the_readme_and_the_crate_docs_give_the_same_guide_to_the_limiters() {
    let heading = "Which limiter do I need?";
    let readme = first_block(include_str!("../../README.md"), "", heading);
    let crate_docs = first_block(include_str!("../../src/lib.rs"), "//! ", heading);
    assert_eq!(readme, crate_docs);
}
