//! The context window learned from the gateway.
//!
//! Owns `<workspace>/.cicy/context_windows.json`, one entry per model this agent has sent to:
//! `{"<model>": {"tokens": 8192, "learned_at": "<RFC 3339 UTC>", "reason": "<what the gateway
//! said>", "asked": ["<base URL>"]}}`. A window is written when a gateway refuses a request as
//! over the context window (see `crate::gateway::overflow`) or reports its window when asked
//! (`GET /props`, see `crate::gateway::props` and [`ask_gateway`]), and lowers the configured
//! window of that model from then on (see `super::Settings`). `asked` lists the gateways (base
//! URLs) already asked for this model, whatever they answered, so each is asked once; an entry
//! of a gateway that reported no window has only `asked`. Delete the file (or the entry) after
//! giving the model a larger window. Must not touch: the history, the configuration files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil;
use crate::gateway::overflow::Overflow;
use crate::gateway::props::PropsAnswer;
use crate::gateway::{GatewayClient, GatewayError};

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

/// One model's entry in the file. `learned` is flattened so an entry written before `asked`
/// existed reads, and is written back, byte for byte as it was.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    #[serde(flatten)]
    learned: Option<Learned>,
    /// Base URLs (without user info) of the gateways asked for this model's window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    asked: Vec<String>,
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
    Ok(read(&path(workspace))?.remove(model).and_then(|e| e.learned))
}

/// Records `tokens` as the window of `model` (an atomic write of the whole file).
pub fn record(workspace: &Path, model: &str, tokens: u64, reason: &str) -> Result<(), WindowError> {
    update(workspace, model, |e| e.learned = Some(Learned { tokens, learned_at: fsutil::now_rfc3339(), reason: reason.to_string() }))
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

/// What [`ask_gateway`] did.
#[derive(Debug, Clone)]
pub enum Asked {
    /// This gateway was asked for this model before: nothing was sent.
    Before,
    /// It reports `tokens` (the reason, as recorded); the window learned for the model is now
    /// `window`, the lower of that and a window learned before.
    Window { tokens: u64, window: u64, reason: String },
    /// It answered (or kept silent past [`crate::gateway::props::TIMEOUT`]) without a window, for this reason;
    /// recorded, so it is not asked again.
    NoWindow(String),
    /// It could not be reached: nothing is recorded, and the next call asks again.
    Unreached(GatewayError),
}

/// Asks the gateway of `client` for its context window (`GET /props`) unless the file records
/// that this gateway (its base URL) was asked for `model` already, and records the answer: a
/// reported window lowers the learned one (never raises it), and the gateway is added to the
/// entry's `asked` whatever it answered, unless it could not be reached.
///
/// Errors: as [`learned`] for the read, [`WindowError::Io`] when the record cannot be written.
pub async fn ask_gateway(client: &GatewayClient, workspace: &Path, model: &str) -> Result<Asked, WindowError> {
    let base = client.base_url_display();
    if read(&path(workspace))?.get(model).is_some_and(|e| e.asked.contains(&base)) {
        return Ok(Asked::Before);
    }
    let answer = match client.ask_props().await {
        Ok(answer) => answer,
        Err(GatewayError::Timeout(secs)) => PropsAnswer::NoWindow(format!("it did not answer within {secs} s")),
        Err(e) => return Ok(Asked::Unreached(e)),
    };
    update(workspace, model, |e| {
        e.asked.push(base.clone());
        match answer {
            PropsAnswer::Window(tokens) => {
                let reason = format!("the gateway at {base} reports a context window of {tokens} tokens (GET /props)");
                if e.learned.as_ref().is_none_or(|l| l.tokens > tokens) {
                    e.learned = Some(Learned { tokens, learned_at: fsutil::now_rfc3339(), reason: reason.clone() });
                }
                let window = e.learned.as_ref().map_or(tokens, |l| l.tokens);
                Asked::Window { tokens, window, reason }
            }
            PropsAnswer::NoWindow(why) => Asked::NoWindow(why),
        }
    })
}

/// Changes `model`'s entry with `change` and writes the whole file atomically; returns what
/// `change` returned.
fn update<T>(workspace: &Path, model: &str, change: impl FnOnce(&mut Entry) -> T) -> Result<T, WindowError> {
    let p = path(workspace);
    // A corrupt file was moved aside by `read`: recording starts a new one.
    let mut all = read(&p).unwrap_or_default();
    let changed = change(all.entry(model.to_string()).or_default());
    let io = |source| WindowError::Io { path: p.clone(), source };
    let mut bytes = serde_json::to_vec_pretty(&all).map_err(|e| io(e.into()))?;
    bytes.push(b'\n');
    fsutil::write_atomic(&p, &bytes).map_err(io)?;
    Ok(changed)
}

fn read(p: &Path) -> Result<BTreeMap<String, Entry>, WindowError> {
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
    fn an_entry_written_before_asked_existed_is_kept_byte_for_byte_and_recording_keeps_asked() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(".cicy")).unwrap();
        let old =
            "{\n  \"m\": {\n    \"tokens\": 8192,\n    \"learned_at\": \"2026-01-02T03:04:05Z\",\n    \"reason\": \"stated\"\n  }\n}\n";
        std::fs::write(path(d.path()), old).unwrap();
        update(d.path(), "other", |e| e.asked.push("http://127.0.0.1:1".to_string())).unwrap();
        let both = std::fs::read_to_string(path(d.path())).unwrap();
        assert_eq!(
            both,
            format!("{}{}", &old[..old.len() - 3], ",\n  \"other\": {\n    \"asked\": [\n      \"http://127.0.0.1:1\"\n    ]\n  }\n}\n")
        );
        assert_eq!(learned(d.path(), "other").unwrap(), None, "asked without an answer is no window");
        record(d.path(), "other", 4096, "halved").unwrap();
        let all = read(&path(d.path())).unwrap();
        assert_eq!(all["other"].asked, ["http://127.0.0.1:1"]);
        assert_eq!(all["other"].learned.as_ref().map(|l| l.tokens), Some(4096));
        assert_eq!(all["m"].learned.as_ref().map(|l| (l.tokens, l.learned_at.as_str())), Some((8192, "2026-01-02T03:04:05Z")));
    }

    #[test]
    fn an_unstated_window_halves_the_assumed_one_down_to_a_floor() {
        let none = Overflow { window: None, prompt_tokens: None };
        assert_eq!(after_overflow(200_000, &none).0, 100_000);
        assert_eq!(after_overflow(1500, &none).0, MIN_WINDOW);
        assert_eq!(after_overflow(200_000, &Overflow { window: Some(8192), prompt_tokens: None }).0, 8192);
    }
}
