//! Message files of an agent (docs/design.md §10 "Inbox", reference cryo_choruz.md A6 and A9): the
//! folders under `<ws>/.cicy/messages/` (`inbox/`, `inbox/archive/`, `inbox/bad/`, `outbox/`),
//! the file format, atomic writes, listing, archiving, paging, which pending messages one claim
//! takes, and the dialog transcript.
//!
//! Owns the files only. Must not touch: when a claim happens or who owes a reply (the
//! `obligation` table and the wake turn, `crate::wake` and `cicy-serve`), the watch of the
//! inbox folder (`cicy-serve`).

mod dialog;
mod format;
mod mailbox;
pub mod settle;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

pub use dialog::{dialog, dialog_messages, DialogFilter};
pub use format::{format_receive, name_base, parse, sanitize_header, slug, subject_of, TIMESTAMP_FORMAT};
pub use mailbox::{Claimable, Mailbox};

/// A parsed message file (reference A6 content).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MessageFile {
    /// The file name, e.g. `2026-12-01T09-30-00_hello_<nanos:032x>_<pid:08x>_<seq:04x>.md`;
    /// immutable, it orders messages and serves as a page cursor.
    pub name: String,
    pub from: String,
    pub subject: String,
    /// `YYYY-MM-DDTHH:MM:SS`, local naive time; the file's mtime when the front matter has none
    /// (never the time of reading).
    pub timestamp: String,
    pub question: bool,
    /// Every other front matter key: `conv`, `thread`, `group`, `to`, …
    pub meta: BTreeMap<String, String>,
    /// The body, trimmed.
    pub body: String,
}

/// What to write. `from`, `subject` and meta values are sanitized (CR/LF → space, trimmed); an
/// empty subject is derived from the body's first non-blank line (≤ 60 characters).
#[derive(Debug, Clone, Default)]
pub struct NewMessage {
    pub from: String,
    pub subject: Option<String>,
    /// Written exactly (a trailing newline is kept); must not be blank.
    pub body: String,
    pub question: bool,
    /// Keys are ASCII letters, digits, `_`, `-` and `.`, starting with a letter, digit or `_`
    /// (so no key can forge or end the front matter), and not one of `from`, `subject`,
    /// `timestamp`, `question`.
    pub meta: BTreeMap<String, String>,
}

/// Which box a message is in. Serialized `"inbox"` / `"outbox"` (the page cursor's second part,
/// reference A6); `inbox/archive/` counts as the inbox, `outbox/archive/` as the outbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Folder {
    Inbox,
    Outbox,
}

impl Folder {
    /// `inbox` or `outbox`.
    pub fn as_str(self) -> &'static str {
        match self {
            Folder::Inbox => "inbox",
            Folder::Outbox => "outbox",
        }
    }
}

/// A pending inbox entry that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unparsed {
    pub name: String,
    /// Why, without the path.
    pub error: String,
    /// It changed less than the write grace (`crate::fsutil::write_grace`, 2 s) ago: it may
    /// still be being written, so it is looked at again rather than moved to `inbox/bad/`
    /// (docs/design.md §10).
    pub young: bool,
}

/// Errors of the message files. Each names the file, folder or value at fault.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error("page cursor `{cursor}` is not `<file name>|inbox` or `<file name>|outbox`")]
    BadCursor { cursor: String },
    #[error("page limit {limit} is not in 1..=100")]
    BadLimit { limit: usize },
    #[error("`{name}` is not a message file name (a `.md` name without `/`, not starting with `.`)")]
    BadName { name: String },
    #[error("no message `{name}` in inbox/, inbox/archive/, outbox/ or outbox/archive/ of {root}")]
    NotFound { name: String, root: PathBuf },
    #[error("--since `{value}` is not a time: use YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS] or YYYY-MM-DD HH:MM[:SS]")]
    BadSince { value: String },
    #[error("meta key `{key}` cannot be written: use ASCII letters, digits, `_`, `-` and `.`, starting with a letter, digit or `_`; from, subject, timestamp and question are fields")]
    BadMetaKey { key: String },
    #[error("the message body is empty")]
    EmptyBody,
    #[error("the sender (`from`) is empty")]
    EmptyFrom,
}

/// The order of messages, oldest first: the front matter's second, then the nanoseconds a
/// name written by cicy carries (`…_<nanos:032x>_<pid>_<seq>.md`; 0 for a hand-picked name),
/// then the name. A name alone would sort two messages of one second by their subjects.
pub fn order_key(m: &MessageFile) -> (&str, u128, &str) {
    (&m.timestamp, name_nanos(&m.name).unwrap_or(0), &m.name)
}

/// The nanoseconds field of a name cicy wrote, if `name` is one.
pub(super) fn name_nanos(name: &str) -> Option<u128> {
    let stem = name.strip_suffix(".md")?;
    let mut parts = stem.rsplitn(4, '_');
    let (seq, pid, nanos) = (parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !(hex(seq, 4) && hex(pid, 8) && hex(nanos, 32)) {
        return None;
    }
    u128::from_str_radix(nanos, 16).ok()
}

/// Conversation key of a message: meta `conv` if present, else `direct:<from>`.
pub fn conversation_key(m: &MessageFile) -> String {
    match m.meta.get("conv") {
        Some(conv) => conv.clone(),
        None => format!("direct:{}", m.from),
    }
}

/// The messages one claim takes (cryo's newest model, reference A9): the conversation of the
/// oldest ([`order_key`]) pending message; within it, when that message has meta `thread`,
/// every pending message of that thread, else every pending message of that conversation
/// without `thread`. Oldest first; empty for no pending message.
pub fn select_claim(pending: &[MessageFile]) -> Vec<MessageFile> {
    let Some(oldest) = pending.iter().min_by(|a, b| order_key(a).cmp(&order_key(b))) else {
        return Vec::new();
    };
    let conv = conversation_key(oldest);
    let thread = oldest.meta.get("thread");
    let mut claim: Vec<MessageFile> =
        pending.iter().filter(|m| conversation_key(m) == conv && m.meta.get("thread") == thread).cloned().collect();
    claim.sort_by(|a, b| order_key(a).cmp(&order_key(b)));
    claim
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(name: &str, from: &str, meta: &[(&str, &str)]) -> MessageFile {
        MessageFile {
            name: name.to_string(),
            from: from.to_string(),
            subject: String::new(),
            timestamp: "2026-12-01T09:00:00".to_string(),
            question: false,
            meta: meta.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            body: "b".to_string(),
        }
    }

    fn names(v: &[MessageFile]) -> Vec<&str> {
        v.iter().map(|m| m.name.as_str()).collect()
    }

    #[test]
    fn messages_of_one_second_are_in_the_order_written_not_by_subject() {
        let name = |slug: &str, nanos: u128| format!("2026-12-01T09-00-00_{slug}_{nanos:032x}_0000abcd_0001.md");
        let (first, second) = (msg(&name("zzz", 2_000), "ann", &[]), msg(&name("aaa", 3_000), "ann", &[]));
        let hand = msg("by-hand.md", "bob", &[]);
        let mut all = vec![second.clone(), hand.clone(), first.clone()];
        all.sort_by(|a, b| order_key(a).cmp(&order_key(b)));
        assert_eq!(names(&all), ["by-hand.md", &first.name, &second.name]);
        assert_eq!(names(&select_claim(&[second.clone(), first.clone()])), [&first.name, &second.name]);
        assert_eq!(name_nanos("2026-12-01T09-00-00_x_zz_0000abcd_0001.md"), None);
    }

    #[test]
    fn conversation_key_is_conv_else_direct_sender() {
        assert_eq!(conversation_key(&msg("a", "ann", &[("conv", "group:ops")])), "group:ops");
        assert_eq!(conversation_key(&msg("a", "ann", &[])), "direct:ann");
    }

    #[test]
    fn claim_of_a_thread_takes_that_thread_only() {
        let pending = vec![
            msg("3", "bob", &[("conv", "g"), ("thread", "t1")]),
            msg("1", "ann", &[("conv", "g"), ("thread", "t1")]),
            msg("2", "ann", &[("conv", "g")]),
            msg("4", "ann", &[("conv", "g"), ("thread", "t2")]),
            msg("5", "ann", &[("conv", "h"), ("thread", "t1")]),
        ];
        assert_eq!(names(&select_claim(&pending)), ["1", "3"]);
    }

    #[test]
    fn claim_of_the_main_stream_skips_threads() {
        let pending =
            vec![msg("1", "ann", &[("conv", "g")]), msg("2", "bob", &[("conv", "g"), ("thread", "t1")]), msg("3", "bob", &[("conv", "g")])];
        assert_eq!(names(&select_claim(&pending)), ["1", "3"]);
    }

    #[test]
    fn claim_takes_one_conversation_of_two() {
        let pending = vec![msg("1", "ann", &[]), msg("2", "bob", &[]), msg("3", "ann", &[]), msg("4", "x", &[("conv", "direct:ann")])];
        assert_eq!(names(&select_claim(&pending)), ["1", "3", "4"]);
        assert!(select_claim(&[]).is_empty());
    }
}
