//! The context window learned from the gateway.
//!
//! Owns `<workspace>/.cicy/context_windows.json`, one entry per model this agent has sent to:
//! `{"<model>": {"tokens": 8192, "learned_at": "<RFC 3339 UTC>", "reason": "<what the gateway
//! said>"}}`. An entry is written when a gateway refuses a request as over the context window
//! (see `crate::gateway::overflow`) and lowers the configured window of that model from then on
//! (see `super::Settings`). Delete the file (or the entry) after giving the model a larger
//! window. Must not touch: the history, the configuration files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil;
use crate::gateway::overflow::Overflow;

/// The file's name under `<workspace>/.cicy/`.
pub const FILE_NAME: &str = "context_windows.json";

/// cicy: halving an unstated window never goes below 1024 tokens.
pub const MIN_WINDOW: u64 = 1024;

/// One model's learned window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Learned {
    /// Tokens.
    pub tokens: u64,
    /// RFC 3339 UTC.
    pub learned_at: String,
    /// Why: the gateway's stated window, or that it stated none and the estimate was halved.
    pub reason: String,
}

/// Errors reading or writing the file; each names it.
#[derive(Debug, thiserror::Error)]
pub enum WindowError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} could not be parsed ({message}); it was moved aside to {moved_to}")]
    Corrupt { path: PathBuf, message: String, moved_to: PathBuf },
}

/// `<workspace>/.cicy/context_windows.json`.
pub fn path(workspace: &Path) -> PathBuf {
    workspace.join(".cicy").join(FILE_NAME)
}

/// The learned window of `model`, if one was recorded.
///
/// Errors: [`WindowError::Io`] when the file cannot be read; [`WindowError::Corrupt`] when it
/// does not parse (it is moved aside first, so the next record starts a fresh file).
pub fn learned(workspace: &Path, model: &str) -> Result<Option<Learned>, WindowError> {
    Ok(read(&path(workspace))?.remove(model))
}

/// Records `tokens` as the window of `model` (an atomic write of the whole file).
pub fn record(workspace: &Path, model: &str, tokens: u64, reason: &str) -> Result<(), WindowError> {
    let p = path(workspace);
    // A corrupt file was moved aside by `read`: recording starts a new one.
    let mut all = read(&p).unwrap_or_default();
    all.insert(model.to_string(), Learned { tokens, learned_at: fsutil::now_rfc3339(), reason: reason.to_string() });
    let io = |source| WindowError::Io { path: p.clone(), source };
    let mut bytes = serde_json::to_vec_pretty(&all).map_err(|e| io(e.into()))?;
    bytes.push(b'\n');
    fsutil::write_atomic(&p, &bytes).map_err(io)
}

/// The window to assume after `overflow` refused a request sized for `assumed` tokens: the
/// window the gateway states, else half of `assumed` (at least [`MIN_WINDOW`]); with the words
/// to record as the reason.
pub fn after_overflow(assumed: u64, overflow: &Overflow) -> (u64, String) {
    match overflow.window {
        Some(w) => (w, format!("the gateway stated a context window of {w} tokens")),
        None => {
            let w = (assumed / 2).max(MIN_WINDOW);
            (w, format!("the gateway refused a request as over the context window without stating it; halved the assumed {assumed} tokens"))
        }
    }
}

fn read(p: &Path) -> Result<BTreeMap<String, Learned>, WindowError> {
    let bytes = match std::fs::read(p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => return Err(WindowError::Io { path: p.to_path_buf(), source }),
    };
    serde_json::from_slice(&bytes).or_else(|e| {
        let moved_to = fsutil::move_aside(p).map_err(|source| WindowError::Io { path: p.to_path_buf(), source })?;
        Err(WindowError::Corrupt { path: p.to_path_buf(), message: e.to_string(), moved_to })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_window_is_read_back_per_model_and_a_corrupt_file_is_moved_aside() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(".cicy")).unwrap();
        assert_eq!(learned(d.path(), "m").unwrap(), None);
        record(d.path(), "m", 8192, "stated").unwrap();
        record(d.path(), "other", 4096, "halved").unwrap();
        assert_eq!(learned(d.path(), "m").unwrap().map(|l| l.tokens), Some(8192));
        assert_eq!(learned(d.path(), "other").unwrap().map(|l| (l.tokens, l.reason)), Some((4096, "halved".to_string())));
        std::fs::write(path(d.path()), "{not json").unwrap();
        assert!(matches!(learned(d.path(), "m"), Err(WindowError::Corrupt { .. })));
        assert!(!path(d.path()).exists());
        let aside: Vec<_> = std::fs::read_dir(d.path().join(".cicy")).unwrap().flatten().collect();
        assert_eq!(aside.len(), 1, "the corrupt file is kept beside");
    }

    #[test]
    fn an_unstated_window_halves_the_assumed_one_down_to_a_floor() {
        let none = Overflow { window: None, prompt_tokens: None };
        assert_eq!(after_overflow(200_000, &none).0, 100_000);
        assert_eq!(after_overflow(1500, &none).0, MIN_WINDOW);
        assert_eq!(after_overflow(200_000, &Overflow { window: Some(8192), prompt_tokens: None }).0, 8192);
    }
}
