//! The Maildir outbox of one workspace (docs/design.md §11, reference cryo_choruz.md B2–B4, B7, B8):
//! the way shell commands a tool runs hand commands (`send`, `task_create`, …) to the runtime.
//!
//! Owns `<ws>/.cicy/outbox/{tmp,new,results,bad}/`, `.lock` and `.seq`, the shim `<ws>/.cicy/send`
//! and the environment tool processes get to find them. [`send`] is the producer
//! (`cicy-agent outbox-send`), [`drain`] the consumer, [`command`] the typed commands and their
//! validation texts, [`share`] the workspace checks of `share_file`, [`results`] the result
//! envelopes, [`shim`] the shim and the tool env.
//!
//! It must not execute a command (deliver a message, create a task): the caller of
//! [`Outbox::drain`] does that in its handler. It never touches the inbox (`.cicy/messages/`),
//! the registry or the history, so the producer runs without opening any of them.

pub mod command;
pub mod drain;
pub mod results;
pub mod send;
pub mod share;
pub mod shim;

use std::path::{Path, PathBuf};

pub use command::{OutboxCommand, Rejection};
pub use drain::{Claimed, DrainStats, PROCESSING_STALE_AFTER};
pub use results::{ErrorCode, ResultEnvelope};

/// Errors of the outbox; each names the file (and the value) it is about.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    /// The producer's argument is not a command: not JSON, not an object, no `type`.
    #[error("outbox-send: {reason}")]
    Invalid { reason: String },
    /// `.seq` holds something other than a decimal number (Choruz B3 fails the same way).
    #[error("{}: not a sequence number: {value:?}", path.display())]
    BadSeq { path: PathBuf, value: String },
    /// None of `$CICY_OUTBOX_DIR`, the shim's own path, `$CICY_WORKSPACE` names an outbox.
    #[error("outbox-send: no outbox: set CICY_OUTBOX_DIR (absolute) or run it through $CICY_SEND")]
    NoOutbox,
    /// A file operation failed on `path`.
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

impl OutboxError {
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OutboxError + '_ {
        move |source| OutboxError::Io { path: path.to_path_buf(), source }
    }
}

/// The outbox folder of one workspace, `<ws>/.cicy/outbox` by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbox {
    root: PathBuf,
}

impl Outbox {
    /// The outbox at `root` (any folder; `$CICY_OUTBOX_DIR` points the producer at one).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Outbox { root: root.into() }
    }

    /// `<ws>/.cicy/outbox`.
    pub fn of_workspace(ws: &Path) -> Self {
        Outbox::at(ws.join(".cicy").join("outbox"))
    }

    /// The outbox folder itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `tmp/`: the producer's staging files `cmd-XXXXXX` (Choruz B3 step 3).
    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// `new/`: queued `cmd-<seq20>-cmd-XXXXXX.json` and claimed `….processing` files.
    pub fn new_dir(&self) -> PathBuf {
        self.root.join("new")
    }

    /// `results/`: `<ulid>.json` result envelopes of task commands (Choruz B8).
    pub fn results_dir(&self) -> PathBuf {
        self.root.join("results")
    }

    /// `bad/`: command files that did not parse, kept for the user (Choruz deletes them).
    pub fn bad_dir(&self) -> PathBuf {
        self.root.join("bad")
    }

    /// `.lock`: the file every producer holds a `flock(2)` on while it numbers a command.
    pub fn lock_path(&self) -> PathBuf {
        self.root.join(".lock")
    }

    /// `.seq`: the last sequence number handed out, 20 digits and a newline.
    pub fn seq_path(&self) -> PathBuf {
        self.root.join(".seq")
    }
}

/// A fresh 26-character ULID (Crockford base 32, time-sortable): the `<newid>` of claim names
/// and result files (Choruz B4, B8).
pub(crate) fn new_id() -> String {
    ulid::Ulid::generate().to_string()
}
