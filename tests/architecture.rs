//! The workspace's crate graph against the one docs/architecture.md allows: `cargo metadata`
//! names every cicy crate and its normal dependencies; the page's "Allowed dependencies" table
//! names what each may depend on. A dependency the table does not allow, or a crate the table
//! does not list, fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The table between the `allowed-dependencies` markers: crate → the cicy crates it may use.
fn allowed() -> BTreeMap<String, BTreeSet<String>> {
    let page = std::fs::read_to_string(Path::new(ROOT).join("docs/architecture.md")).unwrap();
    let begin = page.find("<!-- allowed-dependencies: begin -->").expect("docs/architecture.md has the begin marker");
    let end = page.find("<!-- allowed-dependencies: end -->").expect("docs/architecture.md has the end marker");
    let mut table = BTreeMap::new();
    for line in page[begin..end].lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 2, "a row of the allowed-dependencies table has two cells: {line}");
        let names = |cell: &str| -> BTreeSet<String> {
            cell.split(',').map(|n| n.trim().trim_matches('`').to_string()).filter(|n| !n.is_empty()).collect()
        };
        let name = cells[0].trim_matches('`').to_string();
        assert!(table.insert(name.clone(), names(cells[1])).is_none(), "{name} has two rows");
    }
    table
}

/// Each workspace crate and the workspace crates it takes as normal (not dev) dependencies.
fn actual() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(ROOT)
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let ours: BTreeSet<String> = packages.iter().map(|p| p["name"].as_str().unwrap().to_string()).collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null() || d["kind"] == "build")
                .map(|d| d["name"].as_str().unwrap().to_string())
                .filter(|n| ours.contains(n))
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

#[test]
fn every_crate_depends_only_on_what_docs_architecture_md_allows() {
    let allowed = allowed();
    let actual = actual();
    assert!(actual.len() >= 6, "the workspace has its crates: {actual:?}");
    for (name, deps) in &actual {
        let Some(may) = allowed.get(name) else {
            panic!("crate {name} has no row in docs/architecture.md's allowed-dependencies table");
        };
        let forbidden: Vec<&String> = deps.difference(may).collect();
        assert!(forbidden.is_empty(), "crate {name} depends on {forbidden:?}, which docs/architecture.md does not allow");
    }
    let stale: Vec<&String> = allowed.keys().filter(|n| !actual.contains_key(*n)).collect();
    assert!(stale.is_empty(), "docs/architecture.md lists crates the workspace does not have: {stale:?}");
}

#[test]
fn the_product_crates_never_take_the_test_fixtures() {
    for (name, deps) in actual() {
        assert!(!deps.contains("cicy-test-support"), "{name} takes cicy-test-support as a normal dependency");
    }
}

/// Every `.rs`, `.md` and `.toml` file under the folders people write in.
fn source_files() -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut dirs: Vec<std::path::PathBuf> =
        ["src", "crates", "tests", "benches", "docs", "scripts"].iter().map(|d| Path::new(ROOT).join(d)).collect();
    out.push(Path::new(ROOT).join("README.md"));
    out.push(Path::new(ROOT).join("Cargo.toml"));
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs" || e == "md" || e == "toml") {
                out.push(path);
            }
        }
    }
    out
}

/// A citation's quoted topic with its comment markers and line breaks folded to single spaces.
fn fold(topic: &str) -> String {
    topic.split_whitespace().filter(|w| !matches!(*w, "//" | "///" | "//!")).collect::<Vec<_>>().join(" ")
}

#[test]
fn every_design_citation_names_a_section_and_topic_docs_design_md_has() {
    let design = std::fs::read_to_string(Path::new(ROOT).join("docs/design.md")).unwrap();
    let headings: Vec<&str> = design.lines().filter(|l| l.starts_with('#')).collect();
    let cite = regex::Regex::new(r#"docs/design\.md §(\d+(?:\.\d+)*)(?:,? "([^"]+)")?"#).unwrap();
    let mut seen = 0;
    let mut missing = Vec::new();
    for file in source_files().into_iter().filter(|f| !f.ends_with("docs/design.md")) {
        let text = std::fs::read_to_string(&file).unwrap();
        for c in cite.captures_iter(&text) {
            seen += 1;
            let section = format!("§{}", &c[1]);
            let has_section = headings.iter().any(|h| h.split_whitespace().nth(1) == Some(section.as_str()));
            let topic_ok = c.get(2).is_none_or(|t| headings.iter().any(|h| h.contains(&format!("\"{}\"", fold(t.as_str())))));
            if !has_section || !topic_ok {
                missing.push(format!("{}: {}", file.strip_prefix(ROOT).unwrap().display(), &c[0]));
            }
        }
    }
    assert!(seen > 300, "the code cites docs/design.md ({seen} citations found)");
    assert!(missing.is_empty(), "citations docs/design.md has no heading for:\n{}", missing.join("\n"));
}

/// A merge left half-done (`<<<<<<<` … `>>>>>>>`) in a tracked file shows as a broken page or
/// a compile error somewhere else; this names the file and line.
#[test]
fn no_tracked_file_holds_a_merge_conflict_marker() {
    let out = std::process::Command::new("git").args(["ls-files", "-z"]).current_dir(ROOT).output().unwrap();
    assert!(out.status.success(), "git ls-files failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut found = Vec::new();
    for path in out.stdout.split(|b| *b == 0).filter(|p| !p.is_empty()) {
        let path = String::from_utf8_lossy(path).into_owned();
        let Ok(text) = std::fs::read_to_string(Path::new(ROOT).join(&path)) else { continue };
        for (n, line) in text.lines().enumerate() {
            if line.starts_with("<<<<<<< ") || line.starts_with(">>>>>>> ") || line == "=======" {
                found.push(format!("{path}:{}: {line}", n + 1));
            }
        }
    }
    assert!(found.is_empty(), "merge conflict markers: {found:#?}");
}
