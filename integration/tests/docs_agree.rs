//! The README and the crate docs say one thing: their tables of cargo
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
