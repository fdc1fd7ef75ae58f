//! History files under `<workspace>/.cicy/history/` (docs/design.md §6.3).
//!
//! Owns `chat/<conv_id>/current.json` (the whole display history), `reply.json` (the snapshot of
//! the running or last turn), the archived snapshots `current.<unix>.json` / `reply.<unix>.json`
//! a compaction leaves (§7) and pruning them to the first and the last N, the relative symlinks `current.json` / `reply.json` that point at
//! the active conversation, starting a new conversation (`/clear`), restore after a crash, and
//! moving unparsable files aside. It never talks to the gateway; healing the restored messages
//! is `invariants`' job, deciding what to compact is `crate::compact`'s.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::fsutil;
use cicy_protocol::invariants;
use cicy_protocol::message::{Message, Usage};
use cicy_protocol::outcome::Outcome;

/// `current.json`: the whole history of one conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurrentFile {
    pub conversation_id: String,
    pub agent_id: String,
    pub model: String,
    /// RFC 3339 UTC.
    pub updated_at: String,
    /// `idle` between turns, `running` while a turn is in flight.
    pub status: CurrentStatus,
    /// The system text of the latest request (for display; re-read from the role each turn).
    #[serde(default)]
    pub system: String,
    /// The tool names of the latest request.
    #[serde(default)]
    pub tools: Vec<String>,
    pub messages: Vec<Message>,
    /// The largest message `id` ever given in this conversation.
    pub max_history_id: u64,
    /// How many user prompts this conversation has received.
    #[serde(default)]
    pub prompts: u64,
}

impl CurrentFile {
    /// An empty conversation with a new UUIDv4 id.
    pub fn new(agent_id: &str, model: &str) -> Self {
        Self {
            conversation_id: uuid::Uuid::new_v4().to_string(),
            agent_id: agent_id.to_string(),
            model: model.to_string(),
            updated_at: fsutil::now_rfc3339(),
            status: CurrentStatus::Idle,
            system: String::new(),
            tools: Vec::new(),
            messages: Vec::new(),
            max_history_id: 0,
            prompts: 0,
        }
    }

    /// Appends a message, giving it the next display id; returns that id.
    pub fn push(&mut self, mut msg: Message) -> u64 {
        self.max_history_id += 1;
        msg.id = Some(self.max_history_id);
        self.messages.push(msg);
        self.max_history_id
    }

    /// Gives the next display ids, in order, to messages that have none (the ones healing
    /// adds, e.g. the synthetic results of an interrupted turn), so `history` can name them.
    pub fn number_unnumbered(&mut self) {
        for m in self.messages.iter_mut().filter(|m| m.id.is_none()) {
            self.max_history_id += 1;
            m.id = Some(self.max_history_id);
        }
    }
}

/// `current.json` `status`: whether a turn was in flight when the file was written (docs/design.md
/// §6.3; the strings on disk are `idle` and `running`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CurrentStatus {
    Idle,
    Running,
    /// Any other string (a hand edit, a newer version): read as a turn that did not end
    /// cleanly, so restore heals it instead of moving the whole file aside.
    #[serde(other)]
    Unknown,
}

/// Status of a turn in `reply.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplyStatus {
    Working,
    Streaming,
    Completed,
    Failed,
    Cancelled,
}

impl ReplyStatus {
    /// True once the turn has ended, one way or another.
    pub fn is_terminal(self) -> bool {
        match self {
            ReplyStatus::Working | ReplyStatus::Streaming => false,
            ReplyStatus::Completed | ReplyStatus::Failed | ReplyStatus::Cancelled => true,
        }
    }
}

/// `reply.json`: the snapshot of one turn, updated as it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplyFile {
    pub turn_id: String,
    pub conversation_id: String,
    /// Display id of the user message that started the turn.
    pub history_id: u64,
    pub status: ReplyStatus,
    pub started_at: String,
    pub updated_at: String,
    /// The messages this turn appended after its user message, with their ids.
    pub items: Vec<Message>,
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub prefix_sha256: String,
    pub last_stop_reason: Option<String>,
}

impl ReplyFile {
    /// A terminal, empty snapshot (used for a new conversation).
    pub fn idle(conversation_id: &str, model: &str) -> Self {
        let now = fsutil::now_rfc3339();
        Self {
            turn_id: String::new(),
            conversation_id: conversation_id.to_string(),
            history_id: 0,
            status: ReplyStatus::Completed,
            started_at: now.clone(),
            updated_at: now,
            items: Vec::new(),
            model: model.to_string(),
            input_tokens: 0,
            output_tokens: 0,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
            prefix_sha256: String::new(),
            last_stop_reason: None,
        }
    }

    pub fn add_usage(&mut self, u: &Usage) {
        self.input_tokens += u.input_tokens;
        self.output_tokens += u.output_tokens;
        self.cache_creation_input_tokens += u.cache_creation_input_tokens;
        self.cache_read_input_tokens += u.cache_read_input_tokens;
    }
}

/// History file errors; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} could not be parsed ({message}); it was moved aside to {moved_to} and nothing was overwritten; the next turn starts an empty history in the same conversation")]
    Corrupt { path: PathBuf, message: String, moved_to: PathBuf },
}

/// What [`HistoryStore::restore`] found.
#[derive(Debug, Clone)]
pub struct Restored {
    pub current: CurrentFile,
    pub reply: Option<ReplyFile>,
    /// Human-readable notes about what was healed (empty when nothing was).
    pub healed: Vec<String>,
}

/// One archived snapshot of a conversation, taken by a compaction before it changed anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archive {
    /// Seconds since the Unix epoch when it was taken.
    pub unix: u64,
    /// 0 for `current.<unix>.json`, n for `current.<unix>-<n>.json` (a second compaction within
    /// the same second).
    pub seq: u32,
    /// `chat/<conv>/current.<unix>[-<n>].json`.
    pub current: PathBuf,
    /// `chat/<conv>/reply.<unix>[-<n>].json`, when there was a reply.json to copy.
    pub reply: Option<PathBuf>,
}

/// The history folder of one agent.
#[derive(Debug, Clone)]
pub struct HistoryStore {
    dir: PathBuf,
    /// The digest of the last `current.json` this store (or a clone of it) wrote, without its
    /// `updated_at`: a round whose history did not change since the turn's start writes no
    /// second copy (two fsyncs a turn).
    last_current: Arc<Mutex<Option<Saved>>>,
}

impl HistoryStore {
    /// The store of the agent whose workspace is `workspace`.
    pub fn new(workspace: &Path) -> Self {
        Self::at(workspace.join(".cicy").join("history"))
    }

    /// A store rooted at `dir` instead of a workspace's `.cicy/history/` (a sub-agent's
    /// `.cicy/history/sub/<id>/`, docs/design.md §12), with the same layout inside.
    pub fn at(dir: PathBuf) -> Self {
        Self { dir, last_current: Arc::default() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `chat/<conv_id>/`.
    pub fn conversation_dir(&self, conv_id: &str) -> PathBuf {
        self.dir.join("chat").join(conv_id)
    }

    /// The conversation the `current.json` symlink points at, if any.
    pub fn active_conversation(&self) -> Option<String> {
        let target = std::fs::read_link(self.dir.join("current.json")).ok()?;
        let conv = target.parent()?.file_name()?.to_str()?.to_string();
        uuid::Uuid::parse_str(&conv).ok().map(|_| conv)
    }

    /// Loads the active conversation (or starts one), merges the finished items of an
    /// interrupted turn, heals the invariants and persists the healed state.
    pub fn restore(&self, agent_id: &str, model: &str) -> Result<Restored, HistoryError> {
        let Some(conv_id) = self.active_conversation() else {
            let current = CurrentFile::new(agent_id, model);
            self.start(&current)?;
            return Ok(Restored { current, reply: None, healed: Vec::new() });
        };
        let dir = self.conversation_dir(&conv_id);
        self.repair_reply_link(&conv_id)?;
        let mut current = match read_json::<CurrentFile>(&dir.join("current.json"))? {
            Some(c) => c,
            None => {
                let mut c = CurrentFile::new(agent_id, model);
                c.conversation_id = conv_id.clone();
                c
            }
        };
        let reply = read_json::<ReplyFile>(&dir.join("reply.json"))?;
        let mut healed = Vec::new();
        if let Some(r) = reply.as_ref().filter(|r| !r.status.is_terminal() && r.conversation_id == conv_id) {
            let missing: Vec<Message> = r.items.iter().filter(|m| m.id.is_some_and(|id| id > current.max_history_id)).cloned().collect();
            if !missing.is_empty() {
                healed.push(format!("restored {} message(s) of an interrupted turn from reply.json", missing.len()));
            }
            for m in missing {
                current.max_history_id = current.max_history_id.max(m.id.unwrap_or(0));
                current.messages.push(m);
            }
        }
        let interrupted = current.status != CurrentStatus::Idle || reply.as_ref().is_some_and(|r| !r.status.is_terminal());
        healed.extend(invariants::heal(&mut current.messages));
        current.number_unnumbered();
        let mut reply = reply;
        if interrupted {
            healed.push("the previous turn was interrupted; marked it cancelled".to_string());
            if current.messages.last().is_some_and(|m| m.role == cicy_protocol::message::Role::User) {
                current.push(Message::assistant(vec![cicy_protocol::message::ContentBlock::text(Outcome::Cancelled.marker())]));
            }
            current.status = CurrentStatus::Idle;
            if let Some(r) = reply.as_mut() {
                r.status = ReplyStatus::Cancelled;
                r.updated_at = fsutil::now_rfc3339();
                self.save_reply(r)?;
            }
        }
        if !healed.is_empty() {
            self.save_current(&mut current)?;
        }
        Ok(Restored { current, reply, healed })
    }

    /// Makes `current` the active conversation: writes its files and repoints the symlinks.
    pub fn start(&self, current: &CurrentFile) -> Result<(), HistoryError> {
        let mut c = current.clone();
        self.save_current(&mut c)?;
        self.save_reply(&ReplyFile::idle(&c.conversation_id, &c.model))?;
        for name in ["current.json", "reply.json"] {
            let target = Path::new("chat").join(&c.conversation_id).join(name);
            self.link(name, &target)?;
        }
        Ok(())
    }

    /// `/clear`: starts a new, empty conversation (UUIDv4) with a terminal reply.json and points
    /// the symlinks at it. The old `chat/<conv_id>/` folder is kept as it is.
    pub fn clear(&self, agent_id: &str, model: &str) -> Result<CurrentFile, HistoryError> {
        let current = CurrentFile::new(agent_id, model);
        self.start(&current)?;
        Ok(current)
    }

    /// Points `reply.json` at the active conversation again when a crash between the two
    /// symlink updates of [`Self::start`] left it at the old one (or left none).
    fn repair_reply_link(&self, conv_id: &str) -> Result<(), HistoryError> {
        let target = Path::new("chat").join(conv_id).join("reply.json");
        if std::fs::read_link(self.dir.join("reply.json")).ok().as_deref() == Some(target.as_path()) {
            return Ok(());
        }
        self.link("reply.json", &target)
    }

    /// Copies the conversation's current.json and reply.json to `current.<unix>.json` /
    /// `reply.<unix>.json` beside them (atomic writes). A later snapshot of the same second is
    /// `-<n>`, n one above the highest of that second on disk, so names keep the order taken
    /// even after [`Self::prune_archives`] freed a lower n. Nothing is written when
    /// current.json does not exist.
    pub fn archive(&self, conv_id: &str) -> Result<Option<Archive>, HistoryError> {
        let dir = self.conversation_dir(conv_id);
        let read = |path: &Path| match std::fs::read(path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(HistoryError::Io { path: path.to_path_buf(), source }),
        };
        let Some(current) = read(&dir.join("current.json"))? else { return Ok(None) };
        let reply = read(&dir.join("reply.json"))?;
        let unix = fsutil::unix_now();
        let name = |kind: &str, seq: u32| match seq {
            0 => format!("{kind}.{unix}.json"),
            n => format!("{kind}.{unix}-{n}.json"),
        };
        let taken = std::fs::read_dir(&dir)
            .map_err(|source| HistoryError::Io { path: dir.clone(), source })?
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let stamp = name.strip_prefix("current.").or_else(|| name.strip_prefix("reply."))?.strip_suffix(".json")?.to_string();
                parse_stamp(&stamp).filter(|(u, _)| *u == unix).map(|(_, n)| n)
            })
            .max();
        let seq = taken.map_or(0, |n| n + 1);
        let write = |path: PathBuf, bytes: &[u8]| {
            fsutil::write_atomic(&path, bytes).map_err(|source| HistoryError::Io { path: path.clone(), source })?;
            Ok::<PathBuf, HistoryError>(path)
        };
        // reply first: an archive counts as taken once its current.<unix>.json exists.
        let reply = reply.map(|b| write(dir.join(name("reply", seq)), &b)).transpose()?;
        let current = write(dir.join(name("current", seq)), &current)?;
        Ok(Some(Archive { unix, seq, current, reply }))
    }

    /// The archived snapshots of a conversation, oldest first.
    pub fn archives(&self, conv_id: &str) -> Result<Vec<Archive>, HistoryError> {
        let dir = self.conversation_dir(conv_id);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(HistoryError::Io { path: dir, source }),
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(stamp) = name.strip_prefix("current.").and_then(|n| n.strip_suffix(".json")) else { continue };
            let Some((unix, seq)) = parse_stamp(stamp) else { continue };
            let reply = dir.join(format!("reply.{stamp}.json"));
            out.push(Archive { unix, seq, current: entry.path(), reply: reply.exists().then_some(reply) });
        }
        out.sort_by_key(|a| (a.unix, a.seq));
        Ok(out)
    }

    /// Deletes archived snapshots of a conversation so that at most the first and the last
    /// `keep` remain (each `current.<unix>[-<n>].json` with its `reply.…json`); returns the
    /// deleted `current.…json` paths, oldest first. The live `current.json` and `reply.json`
    /// are never archives, so never deleted. The reply copy goes first: a crash between the two
    /// removals leaves a `current.…json` that is listed, and deleted by the next prune.
    pub fn prune_archives(&self, conv_id: &str, keep: usize) -> Result<Vec<PathBuf>, HistoryError> {
        let all = self.archives(conv_id)?;
        let excess = all.len().saturating_sub(keep + 1);
        let mut deleted = Vec::with_capacity(excess);
        for a in all.into_iter().skip(1).take(excess) {
            for path in a.reply.iter().chain(std::iter::once(&a.current)) {
                match std::fs::remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(source) => return Err(HistoryError::Io { path: path.clone(), source }),
                }
            }
            deleted.push(a.current);
        }
        Ok(deleted)
    }

    fn link(&self, name: &str, target: &Path) -> Result<(), HistoryError> {
        let link = self.dir.join(name);
        let tmp = self.dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| HistoryError::Io { path, source }
        };
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(target, &tmp).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &link).map_err(io(&link))?;
        fsutil::sync_dir(&self.dir).map_err(io(&self.dir))
    }

    /// Writes `chat/<conv>/current.json` atomically (updating `updated_at`), unless it would
    /// hold what this store last wrote there but for `updated_at`.
    pub fn save_current(&self, current: &mut CurrentFile) -> Result<(), HistoryError> {
        let Some(next) = self.changed_current(current)? else { return Ok(()) };
        write_files(&[(&next.path, &next.bytes)])?;
        self.remember(next);
        Ok(())
    }

    /// Writes `chat/<conv>/reply.json` atomically.
    pub fn save_reply(&self, reply: &ReplyFile) -> Result<(), HistoryError> {
        let path = self.conversation_dir(&reply.conversation_id).join("reply.json");
        write_files(&[(&path, &to_json(&path, reply)?)])
    }

    /// Writes `current.json`, then `reply.json` (a turn's start and end), with one fsync of
    /// their folder. The order is what [`restore`](Self::restore) recovers from: a crash that
    /// keeps only the first rename leaves the new history with the previous reply snapshot,
    /// which restore reads as an interrupted turn whose messages are all in the history.
    pub fn save_turn(&self, current: &mut CurrentFile, reply: &ReplyFile) -> Result<(), HistoryError> {
        current.updated_at = fsutil::now_rfc3339();
        let cur_path = self.conversation_dir(&current.conversation_id).join("current.json");
        let cur_bytes = to_json(&cur_path, current)?;
        let reply_path = self.conversation_dir(&reply.conversation_id).join("reply.json");
        let reply_bytes = to_json(&reply_path, reply)?;
        write_files(&[(&cur_path, &cur_bytes), (&reply_path, &reply_bytes)])?;
        self.remember(Written { digest: digest_without_updated_at(&cur_bytes), path: cur_path, bytes: cur_bytes });
        Ok(())
    }

    /// `current`'s bytes with a fresh `updated_at`, or `None` (and `updated_at` left as it was)
    /// when they equal, but for `updated_at`, what this store last wrote to that path.
    fn changed_current(&self, current: &mut CurrentFile) -> Result<Option<Written>, HistoryError> {
        let before = std::mem::replace(&mut current.updated_at, fsutil::now_rfc3339());
        let path = self.conversation_dir(&current.conversation_id).join("current.json");
        let bytes = to_json(&path, current)?;
        let digest = digest_without_updated_at(&bytes);
        let last = self.last_current.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if last.is_some_and(|s| s.path == path && s.digest == digest) {
            current.updated_at = before;
            return Ok(None);
        }
        Ok(Some(Written { path, bytes, digest }))
    }

    fn remember(&self, w: Written) {
        *self.last_current.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Saved { path: w.path, digest: w.digest });
    }
}

/// The `current.json` a store last wrote: where, and its digest without `updated_at`.
#[derive(Debug, Clone)]
struct Saved {
    path: PathBuf,
    digest: [u8; 32],
}

/// A `current.json` about to be written.
struct Written {
    path: PathBuf,
    bytes: Vec<u8>,
    digest: [u8; 32],
}

/// SHA-256 of a pretty-printed `current.json` with the value of its top-level `updated_at`
/// left out. The first `"updated_at": "` is the top-level key: `CurrentFile` serializes it
/// before any message, and inside a JSON string its quotes would be escaped.
fn digest_without_updated_at(bytes: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    const KEY: &[u8] = b"\"updated_at\": \"";
    let mut h = Sha256::new();
    match bytes.windows(KEY.len()).position(|w| w == KEY) {
        Some(at) => {
            let value = at + KEY.len();
            let end = bytes[value..].iter().position(|&b| b == b'"').map_or(bytes.len(), |n| value + n);
            h.update(&bytes[..value]);
            h.update(&bytes[end..]);
        }
        None => h.update(bytes),
    }
    h.finalize().into()
}

/// `<unix>` or `<unix>-<n>` of an archive's name as (unix, n); n is 0 without a suffix.
fn parse_stamp(stamp: &str) -> Option<(u64, u32)> {
    match stamp.split_once('-') {
        Some((u, n)) => Some((u.parse().ok()?, n.parse().ok()?)),
        None => Some((stamp.parse().ok()?, 0)),
    }
}

fn to_json<T: Serialize>(path: &Path, value: &T) -> Result<Vec<u8>, HistoryError> {
    serde_json::to_vec_pretty(value).map_err(|e| HistoryError::Io { path: path.to_path_buf(), source: e.into() })
}

fn write_files(files: &[(&PathBuf, &Vec<u8>)]) -> Result<(), HistoryError> {
    let files: Vec<(&Path, &[u8])> = files.iter().map(|(p, b)| (p.as_path(), b.as_slice())).collect();
    // A turn saves its history on an async worker; under `serve` the fsyncs must not stall the
    // other agents' tasks of that worker.
    fsutil::blocking(|| fsutil::write_atomic_all(&files)).map_err(|source| {
        // The error names the file; which one failed is in its text.
        let path = files.first().map(|(p, _)| p.to_path_buf()).unwrap_or_default();
        HistoryError::Io { path, source }
    })
}

/// Reads a JSON file: `None` if missing; an unparsable file is moved aside and reported.
fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, HistoryError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(HistoryError::Io { path: path.to_path_buf(), source }),
    };
    match serde_json::from_slice(&bytes) {
        Ok(v) => Ok(Some(v)),
        Err(e) => {
            let moved_to = fsutil::move_aside(path).map_err(|source| HistoryError::Io { path: path.to_path_buf(), source })?;
            Err(HistoryError::Corrupt { path: path.to_path_buf(), message: e.to_string(), moved_to })
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_unchanged_history_is_not_written_again_and_a_changed_one_is() {
        let ws = tempfile::tempdir().unwrap();
        let store = HistoryStore::new(ws.path());
        let mut c = CurrentFile::new("w-1", "m");
        c.push(Message::user_text("hi"));
        c.updated_at = "2000-01-01T00:00:00Z".into();
        let reply = ReplyFile::idle(&c.conversation_id, "m");
        store.save_turn(&mut c, &reply).unwrap();
        let path = store.conversation_dir(&c.conversation_id).join("current.json");
        let first = std::fs::read(&path).unwrap();
        // A clone of the store (the turn's) shares what was last written.
        store.clone().save_current(&mut c).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), first, "an unchanged history was rewritten");
        assert_eq!(c.updated_at, serde_json::from_slice::<CurrentFile>(&first).unwrap().updated_at);
        c.push(Message::user_text("more"));
        store.save_current(&mut c).unwrap();
        let written: CurrentFile = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(written, c);
        // Another store of the same workspace knows nothing of these writes and writes.
        c.updated_at = "2000-01-01T00:00:00Z".into();
        HistoryStore::new(ws.path()).save_current(&mut c).unwrap();
        assert_ne!(c.updated_at, "2000-01-01T00:00:00Z");
    }

    #[test]
    fn the_digest_leaves_out_only_the_top_level_updated_at() {
        let mut c = CurrentFile::new("w-1", "m");
        c.push(Message::user_text(r#"a message that says "updated_at": "x""#));
        let bytes = |c: &CurrentFile| serde_json::to_vec_pretty(c).unwrap();
        let d = digest_without_updated_at(&bytes(&c));
        c.updated_at = "2030-05-05T05:05:05Z".into();
        assert_eq!(digest_without_updated_at(&bytes(&c)), d);
        c.status = CurrentStatus::Running;
        assert_ne!(digest_without_updated_at(&bytes(&c)), d);
    }
}
