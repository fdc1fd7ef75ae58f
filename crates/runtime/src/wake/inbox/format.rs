//! The message file format (reference cryo_choruz.md A6): file names, the front matter written,
//! its parsing, and the receive text (A6 "Receive output format").
//!
//! Owns bytes and names only: no file system access (the caller passes the mtime), no folders.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Local, NaiveDateTime};
use sha2::{Digest, Sha256};

use super::{MessageFile, NewMessage};

/// Timestamp in the front matter: local naive time (cryo A6).
pub const TIMESTAMP_FORMAT: &str = "%Y-%m-%dT%H:%M:%S";
/// Older front matter and every file name use dashes in the time (cryo A6).
const LEGACY_TIMESTAMP_FORMAT: &str = "%Y-%m-%dT%H-%M-%S";
/// A slug longer than this many bytes is replaced by the body hash (cryo A6).
const MAX_SLUG_BYTES: usize = 128;
/// A subject derived from the body keeps at most this many characters.
const DERIVED_SUBJECT_CHARS: usize = 60;
/// Front matter keys that are fields of [`MessageFile`], never meta.
pub(super) const RESERVED_KEYS: [&str; 4] = ["from", "subject", "timestamp", "question"];

/// The per-process sequence number in file names (cryo A6 `seq`, 4 hex digits, wraps).
static SEQ: AtomicU16 = AtomicU16::new(0);

/// What [`render`] produced: the file name and the whole file content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Rendered {
    pub name: String,
    pub content: String,
}

/// The parts of a file name that make it unique: nanoseconds since the Unix epoch, the process
/// id and this process's sequence number.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unique {
    pub nanos: u128,
    pub pid: u32,
    pub seq: u16,
}

impl Unique {
    /// The current values for a file written now.
    pub(super) fn now() -> Self {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        Unique { nanos, pid: std::process::id(), seq: SEQ.fetch_add(1, Ordering::Relaxed) }
    }
}

/// Replaces CR and LF by spaces and trims, so a header value cannot start a new front matter
/// line (cryo A6 "Header sanitizing").
pub fn sanitize_header(value: &str) -> String {
    value.replace(['\r', '\n'], " ").trim().to_string()
}

/// The subject a message gets: the sanitized given one, else the first non-blank line of the
/// body cut to 60 characters (empty when the body is blank).
pub fn subject_of(msg: &NewMessage) -> String {
    let given = msg.subject.as_deref().map(sanitize_header).unwrap_or_default();
    if !given.is_empty() {
        return given;
    }
    let first = msg.body.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let cut: String = first.chars().take(DERIVED_SUBJECT_CHARS).collect();
    sanitize_header(&cut)
}

/// The subject slug (cryo A6): lowercased, each non-alphanumeric character (Unicode-aware)
/// replaced by `-`, leading and trailing `-` trimmed.
pub fn slug(subject: &str) -> String {
    let mapped: String = subject.to_lowercase().chars().map(|c| if c.is_alphanumeric() { c } else { '-' }).collect();
    mapped.trim_matches('-').to_string()
}

/// The `<base>` of a file name: the slug, or when it is empty or longer than 128 bytes the first
/// 8 hex digits of SHA-256 over body, from and subject (cryo A6 names an 8-hex hash; the hash
/// function is ours).
pub fn name_base(body: &str, from: &str, subject: &str) -> String {
    let s = slug(subject);
    if !s.is_empty() && s.len() <= MAX_SLUG_BYTES {
        return s;
    }
    let digest = Sha256::new().chain_update(body).chain_update(from).chain_update(subject).finalize();
    digest.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// Renders a message written at `at` (local naive time): the file name
/// `<YYYY-MM-DDTHH-MM-SS>_<base>_<nanos:032x>_<pid:08x>_<seq:04x>.md` and the content
/// `---\nfrom: …\nsubject: …\ntimestamp: …\n[question: true\n]<meta key: value, by key>\n---\n\n<body>`
/// (cryo A6). The body is written exactly; `from`, `subject` and meta values are sanitized.
/// The caller has checked the meta keys ([`super::InboxError::BadMetaKey`]).
pub(super) fn render(msg: &NewMessage, at: NaiveDateTime, unique: Unique) -> Rendered {
    let from = sanitize_header(&msg.from);
    let subject = subject_of(msg);
    let base = name_base(&msg.body, &from, &subject);
    let name = format!("{}_{base}_{:032x}_{:08x}_{:04x}.md", at.format(LEGACY_TIMESTAMP_FORMAT), unique.nanos, unique.pid, unique.seq);
    let mut content = format!("---\nfrom: {from}\nsubject: {subject}\ntimestamp: {}\n", at.format(TIMESTAMP_FORMAT));
    if msg.question {
        content.push_str("question: true\n");
    }
    for (k, v) in &msg.meta {
        content.push_str(&format!("{k}: {}\n", sanitize_header(v)));
    }
    content.push_str("---\n\n");
    content.push_str(&msg.body);
    Rendered { name, content }
}

/// Parses a message file (cryo A6 "Parsing"): the content trimmed must start with `---`; the
/// front matter ends at the first `\n---`; each line splits on its first `:` (keys and values
/// trimmed; lines without a colon or with an empty key skipped; a repeated key: the last wins);
/// `question` is true when its value is `true` in any case; `timestamp` in
/// `YYYY-MM-DDTHH:MM:SS` or the legacy `YYYY-MM-DDTHH-MM-SS`, else `mtime` as local time (the
/// Unix epoch without one), never now. The body is the trimmed rest.
///
/// Errors: [`NotAMessage`], for the caller to name the file with.
pub fn parse(name: &str, content: &str, mtime: Option<SystemTime>) -> Result<MessageFile, NotAMessage> {
    let text = content.trim();
    let rest = text.strip_prefix("---").ok_or(NotAMessage::NoFrontMatter)?;
    let end = rest.find("\n---").ok_or(NotAMessage::Unclosed)?;
    let (mut from, mut subject, mut timestamp, mut question) = (String::new(), String::new(), None, false);
    let mut meta = BTreeMap::new();
    for line in rest[..end].lines() {
        let Some((k, v)) = line.split_once(':') else { continue };
        let (k, v) = (k.trim(), v.trim());
        match k {
            "" => {}
            "from" => from = v.to_string(),
            "subject" => subject = v.to_string(),
            "timestamp" => timestamp = parse_timestamp(v),
            "question" => question = v.eq_ignore_ascii_case("true"),
            _ => {
                meta.insert(k.to_string(), v.to_string());
            }
        }
    }
    let at = timestamp.unwrap_or_else(|| local_naive(mtime.unwrap_or(UNIX_EPOCH)));
    Ok(MessageFile {
        name: name.to_string(),
        from,
        subject,
        timestamp: at.format(TIMESTAMP_FORMAT).to_string(),
        question,
        meta,
        body: rest[end + 4..].trim().to_string(),
    })
}

/// Why a file's content is not a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotAMessage {
    #[error("it does not start with a `---` front matter line")]
    NoFrontMatter,
    #[error("its front matter is not closed by a `---` line")]
    Unclosed,
}

fn parse_timestamp(v: &str) -> Option<NaiveDateTime> {
    NaiveDateTime::parse_from_str(v, TIMESTAMP_FORMAT).or_else(|_| NaiveDateTime::parse_from_str(v, LEGACY_TIMESTAMP_FORMAT)).ok()
}

/// `t` as the local wall-clock time.
pub(super) fn local_naive(t: SystemTime) -> NaiveDateTime {
    DateTime::<Local>::from(t).naive_local()
}

/// The receive text of messages (cryo A6 "Receive output format"): per message
/// `--- <name> ---`, `From: …` and `Subject: …` when not empty, a blank line, the body, a blank
/// line. Empty for no messages (the caller prints its own "none" line).
pub fn format_receive(messages: &[MessageFile]) -> String {
    let mut out = String::new();
    for m in messages {
        out.push_str(&format!("--- {} ---\n", m.name));
        if !m.from.is_empty() {
            out.push_str(&format!("From: {}\n", m.from));
        }
        if !m.subject.is_empty() {
            out.push_str(&format!("Subject: {}\n", m.subject));
        }
        out.push_str(&format!("\n{}\n\n", m.body));
    }
    out
}

#[cfg(test)]
#[path = "format_tests.rs"]
mod tests;
