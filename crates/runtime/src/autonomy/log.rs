//! `<workspace>/.cicy/autonomy.log`: one line per thing autonomy did, for a person to read
//! (docs/design.md §13: "rest → one line per streak"; the idle seed: the side that gives way writes a
//! log line). Lines are `<RFC 3339 UTC> <job> <what happened>`.
//!
//! Owns the file's path and line format. Appends only; a failed append is logged by the caller
//! and loses nothing else (the ledger is the record). Must not touch the ledger.

use std::io::Write;
use std::path::{Path, PathBuf};

/// `<workspace>/.cicy/autonomy.log`.
pub fn log_path(workspace: &Path) -> PathBuf {
    workspace.join(".cicy").join("autonomy.log")
}

/// The line a rest streak starts with.
pub const REST_LINE: &str = "rest (nothing wanted and runnable)";

/// [`append`], a failure only traced: the ledger is the record, the log its reading aid.
pub fn note(workspace: &Path, text: &str) {
    if let Err(e) = append(workspace, text) {
        tracing::warn!(error = %e, "cannot write autonomy.log");
    }
}

/// Appends `<now> <text>` (one line; newlines in `text` become spaces).
///
/// Errors: the file cannot be opened or written.
pub fn append(workspace: &Path, text: &str) -> std::io::Result<()> {
    let path = log_path(workspace);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let line = format!("{} {}\n", crate::fsutil::now_rfc3339(), text.replace(['\n', '\r'], " "));
    std::fs::OpenOptions::new().create(true).append(true).open(&path)?.write_all(line.as_bytes())
}
