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
