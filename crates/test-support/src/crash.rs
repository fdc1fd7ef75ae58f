//! What the kill -9 tests share (`tests/crash.rs` kills a `chat`, `tests/serve_crash.rs` a
//! `serve`): a seeded generator, so a failing run can be replayed, the check that every
//! history file a kill left still loads, and a collector of violations. Test fixtures only.

use std::collections::BTreeSet;
use std::path::Path;

use cicy::conversation::history::{CurrentFile, ReplyFile};
use cicy::conversation::invariants;

/// A small deterministic generator (xorshift64), so a failure can be replayed; its seed must not
/// be 0, which xorshift never leaves.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `lo..hi` (`hi > lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo)
    }
}

/// [`check_history_files`] of a folder that must hold at least two files (a session that ran).
pub fn check_files(history: &Path) {
    assert!(check_history_files(history) >= 2, "no history files under {}", history.display());
}

/// Every `.json` file under the history folder parses (following the symlinks), current.json
/// files as histories that heal into a valid one, reply.json files as snapshots; returns how
/// many there were (a missing folder has none).
pub fn check_history_files(history: &Path) -> usize {
    if !history.exists() {
        return 0;
    }
    let mut stack = vec![history.to_path_buf()];
    let mut seen = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read history dir") {
            let path = entry.expect("entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            // `.tmp-*` and `.<link>.<pid>.tmp` are atomic writes a kill interrupted; never read.
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            if name.starts_with("current") {
                let mut c: CurrentFile =
                    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
                invariants::heal(&mut c.messages);
                assert_eq!(invariants::check_history(&c.messages), Ok(()), "{}", path.display());
            } else {
                serde_json::from_slice::<ReplyFile>(&bytes).unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
            }
            seen += 1;
        }
    }
    seen
}

/// The violations found, each told once, with the first check that saw it (`when`): a run goes
/// on past a violation, so one failing run shows every check that fails, and fails at its end.
#[derive(Default)]
pub struct Faults {
    seen: BTreeSet<String>,
    told: Vec<String>,
    /// Which check is running, e.g. `after kill 3`.
    pub when: String,
}

impl Faults {
    /// Records `what()` unless `ok` (and prints it at once, so a run that hangs later still
    /// shows it).
    pub fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if ok {
            return;
        }
        let what = what();
        if self.seen.insert(what.clone()) {
            eprintln!("{}: {what}", self.when);
            self.told.push(format!("{}: {what}", self.when));
        }
    }

    /// Fails the test when anything was recorded, listing it all.
    pub fn assert_none(&self, run: &str) {
        assert!(self.told.is_empty(), "{run}: {} violation(s):\n{}", self.told.len(), self.told.join("\n"));
    }
}
