//! What the kill -9 tests share (`tests/crash.rs` kills a `chat`, `tests/serve_crash.rs` a
//! `serve`): a seeded generator, so a failing run can be replayed, and the check that every
//! history file a kill left still loads. Test fixtures only.

use std::path::Path;

use cicy::conversation::history::{CurrentFile, ReplyFile};
use cicy::conversation::invariants;

/// A small deterministic generator (xorshift64), so a failure can be replayed.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0, which xorshift never leaves, is taken as 1).
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `lo..hi` (`hi > lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
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
