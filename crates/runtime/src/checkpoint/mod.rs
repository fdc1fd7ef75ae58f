//! Checkpoints of one agent (docs/design.md §12, CMDC `Checkpoint` and `AutoCheckpoint`).
//!
//! Owns `<workspace>/.cicy/checkpoints/<unix>-<rand6>/`: saving one (a copy of the active
//! conversation's current.json and reply.json, `.cicy/plan.json`, AGENTS.md and the memory
//! files, plus `meta.json`), listing, loading one back as a new conversation, removing one, and
//! the age/count limits. A checkpoint is built in `.tmp-<id>/` and renamed into place, so a
//! `kill -9` mid-save leaves no checkpoint, only a `.tmp-*` folder that listings ignore and
//! the next save deletes. The automatic checkpoints at turn end are `auto`'s.
//!
//! It never takes the turn lock itself: callers hold it (the CLI's save/load, the turn loop's
//! automatic save), so every save of an agent runs alone and sees the files between turns. It
//! never talks to the gateway and never edits a checkpoint after it is renamed into place.

pub mod auto;
mod load;

pub use load::{load, Loaded};

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::conversation::history::{HistoryError, HistoryStore};
use crate::fsutil;

/// `meta.json` `schema_version` this version writes and reads (CMDC: 1).
pub const SCHEMA_VERSION: u32 = 1;
/// CMDC AutoCheckpoint `max_checkpoints`: at most this many checkpoints per agent.
pub const MAX_CHECKPOINTS: usize = 50;
/// CMDC AutoCheckpoint `ttl_seconds` (2 592 000 s = 30 days): older checkpoints are deleted.
pub const TTL_SECS: u64 = 2_592_000;
/// The label of the checkpoint `load` saves first.
pub const BEFORE_LOAD: &str = "before-load";

/// Prefix of a checkpoint (or a removal) in progress; never listed, deleted by the next save.
const TMP_PREFIX: &str = ".tmp-";
/// Mode of the folders a save creates: the copies are as private as the agent's own files.
const PRIVATE_DIR: u32 = 0o700;
/// Mode of `meta.json`, and of a copy whose source's mode could not be read.
const PRIVATE_FILE: u32 = 0o600;

/// `meta.json` of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The folder name, `<unix>-<rand6>` (6 lowercase hex digits).
    pub checkpoint_id: String,
    /// `--label`, `auto` for an automatic one, `before-load`; `None` when not given.
    pub label: Option<String>,
    /// RFC 3339 UTC, second precision.
    pub saved_at: String,
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The conversation saved; `None` when the agent had none yet.
    pub conv_id: Option<String>,
    /// Messages in the saved current.json.
    pub message_count: usize,
    /// Prompts queued behind the running turn that the saver knew of (0 from the CLI, which
    /// sees no queue). Informational: `load` does not queue them again.
    pub pending: usize,
    /// Steering texts queued and not yet delivered when it was saved. Informational, as
    /// `pending`.
    pub steering: usize,
}

/// One listed checkpoint: its folder and its meta, or why the meta could not be read.
#[derive(Debug)]
pub struct Listed {
    pub id: String,
    pub dir: PathBuf,
    pub meta: Result<Meta, CheckpointError>,
    /// Seconds since the Unix epoch from the folder name.
    pub unix: u64,
}

/// Checkpoint errors; each names the file or the checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("no checkpoint `{0}` (see `checkpoint <id> ls`)")]
    NotFound(String),
    #[error("`{0}` is not a checkpoint id (`<unix>-<rand6>` as `ls` prints it)")]
    BadId(String),
    #[error("{path} could not be parsed ({message}); nothing was changed")]
    Corrupt { path: PathBuf, message: String },
    #[error("{path}: schema_version {found} is not supported (this version reads {SCHEMA_VERSION}); nothing was changed")]
    Schema { path: PathBuf, found: u32 },
    #[error("{path}: {problem}; the checkpoint was not loaded and nothing was changed")]
    Unloadable { path: PathBuf, problem: String },
    #[error("bad label {0:?}: it must not be empty or contain control characters (tab, newline), which break `checkpoint ls`")]
    BadLabel(String),
    /// A load that failed after it had begun to change the agent's files.
    #[error("{source}; loading checkpoint {id} stopped there: {changed}; load checkpoint {before} (before-load) to go back")]
    PartlyLoaded { id: String, source: Box<CheckpointError>, changed: String, before: String },
    #[error(transparent)]
    History(#[from] HistoryError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io { path: path.to_path_buf(), source }
}

/// Where the checkpoints of the agent whose workspace is `workspace` live.
pub fn dir(workspace: &Path) -> PathBuf {
    workspace.join(".cicy").join("checkpoints")
}

pub use cicy_protocol::plan::path as plan_path;

fn memory_dir(workspace: &Path) -> PathBuf {
    workspace.join(".cicy").join("memory")
}

/// What a save records besides the files.
#[derive(Debug, Clone, Default)]
pub struct SaveOptions {
    pub label: Option<String>,
    pub pending: usize,
    pub steering: usize,
}

/// Saves a checkpoint of the agent in `workspace` and returns its meta. Call it holding the
/// turn lock. Stale `.tmp-*` entries (a save or removal that was killed) are deleted first.
/// The folders it creates are 0700 and each copy keeps its source's permission bits
/// (meta.json 0600): the history and AGENTS.md are private, so are their copies.
///
/// Errors: [`CheckpointError::BadLabel`] for a label that is empty or has a control character
/// (checked before anything is written); [`CheckpointError::Io`] naming the file;
/// [`CheckpointError::Corrupt`] when the active current.json cannot be parsed (its message
/// count is recorded). Nothing is left in `checkpoints/` on an error but a `.tmp-*` folder
/// the next save deletes.
pub fn save(workspace: &Path, opts: &SaveOptions) -> Result<Meta, CheckpointError> {
    if let Some(label) = &opts.label {
        if label.trim().is_empty() || label.chars().any(char::is_control) {
            return Err(CheckpointError::BadLabel(label.clone()));
        }
    }
    let root = dir(workspace);
    fs::DirBuilder::new().recursive(true).mode(PRIVATE_DIR).create(&root).map_err(io(&root))?;
    remove_stale(&root)?;
    let unix = fsutil::unix_now();
    let id = format!("{unix}-{:06x}", rand::random::<u32>() & 0xff_ffff);
    let tmp = root.join(format!("{TMP_PREFIX}{id}"));
    fs::DirBuilder::new().mode(PRIVATE_DIR).create(&tmp).map_err(io(&tmp))?;

    let store = HistoryStore::new(workspace);
    let conv_id = store.active_conversation();
    let mut message_count = 0;
    if let Some(conv) = &conv_id {
        let conv_dir = store.conversation_dir(conv);
        if let Some((bytes, mode)) = read_optional(&conv_dir.join("current.json"))? {
            message_count = count_messages(&conv_dir.join("current.json"), &bytes)?;
            write_new(&tmp.join("current.json"), &bytes, mode)?;
        }
        copy_optional(&conv_dir.join("reply.json"), &tmp.join("reply.json"))?;
    }
    copy_optional(&plan_path(workspace), &tmp.join("plan.json"))?;
    copy_optional(&workspace.join("AGENTS.md"), &tmp.join("AGENTS.md"))?;
    copy_memory(&memory_dir(workspace), &tmp.join("memory"))?;
    let meta = Meta {
        checkpoint_id: id.clone(),
        label: opts.label.clone(),
        saved_at: fsutil::now_rfc3339(),
        schema_version: SCHEMA_VERSION,
        conv_id,
        message_count,
        pending: opts.pending,
        steering: opts.steering,
    };
    let meta_path = tmp.join("meta.json");
    let bytes = serde_json::to_vec_pretty(&meta).map_err(|e| io(&meta_path)(e.into()))?;
    write_new(&meta_path, &bytes, PRIVATE_FILE)?;
    sync_filesystem(&tmp)?;
    let done = root.join(&id);
    fs::rename(&tmp, &done).map_err(io(&done))?;
    fsutil::sync_dir(&root).map_err(io(&root))?;
    Ok(meta)
}

/// The checkpoints of the agent in `workspace`, newest first (by the folder name's second,
/// then meta.json's modification time, then the id). `.tmp-*` and other dot entries are
/// skipped; a folder whose meta.json is missing or unreadable is listed with the reason.
pub fn list(workspace: &Path) -> Result<Vec<Listed>, CheckpointError> {
    let root = dir(workspace);
    let entries = match fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&root)(e)),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Ok(id) = entry.file_name().into_string() else { continue };
        let Some(unix) = parse_id(&id) else { continue };
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let dir = entry.path();
        let meta_path = dir.join("meta.json");
        let modified = fs::metadata(&meta_path).and_then(|m| m.modified()).ok();
        let meta = read_meta(&meta_path);
        out.push((modified, Listed { id, dir, meta, unix }));
    }
    out.sort_by(|(ma, a), (mb, b)| (b.unix, mb, &b.id).cmp(&(a.unix, ma, &a.id)));
    Ok(out.into_iter().map(|(_, l)| l).collect())
}

/// Removes checkpoint `id`: renamed to `.tmp-rm-<id>` first, so a crash mid-removal leaves no
/// half checkpoint in the listing. Errors: not found, bad id, I/O.
pub fn remove(workspace: &Path, id: &str) -> Result<(), CheckpointError> {
    let cp = find(workspace, id)?;
    discard(&cp, id)
}

fn discard(cp: &Path, id: &str) -> Result<(), CheckpointError> {
    let gone = cp.with_file_name(format!("{TMP_PREFIX}rm-{id}"));
    fs::rename(cp, &gone).map_err(io(cp))?;
    fs::remove_dir_all(&gone).map_err(io(&gone))
}

/// Deletes checkpoints older than [`TTL_SECS`] and all but the newest [`MAX_CHECKPOINTS`]
/// (CMDC AutoCheckpoint GC), never `keep` (the one just saved); returns the ids deleted,
/// newest first.
pub fn gc(workspace: &Path, now_unix: u64, keep: &str) -> Result<Vec<String>, CheckpointError> {
    let mut deleted = Vec::new();
    for (i, l) in list(workspace)?.into_iter().enumerate() {
        let expired = now_unix.saturating_sub(l.unix) > TTL_SECS;
        if l.id != keep && (i >= MAX_CHECKPOINTS || expired) {
            discard(&l.dir, &l.id)?;
            deleted.push(l.id);
        }
    }
    Ok(deleted)
}

/// The folder of checkpoint `id` (validated: `<unix>-<hex>`, so it names no other path).
fn find(workspace: &Path, id: &str) -> Result<PathBuf, CheckpointError> {
    if parse_id(id).is_none() {
        return Err(CheckpointError::BadId(id.to_string()));
    }
    let cp = dir(workspace).join(id);
    if cp.join("meta.json").is_file() {
        Ok(cp)
    } else {
        Err(CheckpointError::NotFound(id.to_string()))
    }
}

/// The second of a `<unix>-<hex>` checkpoint name, `None` for anything else.
fn parse_id(id: &str) -> Option<u64> {
    let (unix, rand) = id.split_once('-')?;
    let hex = !rand.is_empty() && rand.bytes().all(|b| b.is_ascii_hexdigit());
    let digits = !unix.is_empty() && unix.bytes().all(|b| b.is_ascii_digit());
    if hex && digits {
        unix.parse().ok()
    } else {
        None
    }
}

fn read_meta(path: &Path) -> Result<Meta, CheckpointError> {
    let bytes = fs::read(path).map_err(io(path))?;
    let meta: Meta =
        serde_json::from_slice(&bytes).map_err(|e| CheckpointError::Corrupt { path: path.to_path_buf(), message: e.to_string() })?;
    if meta.schema_version != SCHEMA_VERSION {
        return Err(CheckpointError::Schema { path: path.to_path_buf(), found: meta.schema_version });
    }
    Ok(meta)
}

/// The number of messages in a current.json, without building them.
fn count_messages(path: &Path, bytes: &[u8]) -> Result<usize, CheckpointError> {
    #[derive(Deserialize)]
    struct Count {
        messages: Vec<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Count>(bytes)
        .map(|c| c.messages.len())
        .map_err(|e| CheckpointError::Corrupt { path: path.to_path_buf(), message: e.to_string() })
}

/// Deletes the `.tmp-*` entries of `root`: with the turn lock held, no other save or removal
/// of this agent is running, so each was left by one that was killed.
fn remove_stale(root: &Path) -> Result<(), CheckpointError> {
    for entry in fs::read_dir(root).map_err(io(root))?.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
            continue;
        }
        let path = entry.path();
        let removed = match entry.file_type() {
            Ok(t) if t.is_dir() => fs::remove_dir_all(&path),
            _ => fs::remove_file(&path),
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&path)(e)),
        }
    }
    Ok(())
}

/// The bytes of `path` and its permission bits (`None` when it does not exist).
fn read_optional(path: &Path) -> Result<Option<(Vec<u8>, u32)>, CheckpointError> {
    let mut f = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    let mode = f.metadata().map_or(PRIVATE_FILE, |m| m.mode() & 0o777);
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).map_err(io(path))?;
    Ok(Some((bytes, mode)))
}

/// Writes a new file with permission bits `mode` inside a checkpoint being built. No per-file
/// rename or fsync: the folder's rename makes the whole checkpoint visible at once, after one
/// [`sync_filesystem`].
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), CheckpointError> {
    let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(path).map_err(io(path))?;
    f.write_all(bytes).map_err(io(path))
}

/// Makes everything written under `dir` durable with one `syncfs(2)` instead of an fsync per
/// file (some 25 files: the fsyncs alone were ~60 ms of the 20 ms budget on a plain disk).
fn sync_filesystem(dir: &Path) -> Result<(), CheckpointError> {
    let f = fs::File::open(dir).map_err(io(dir))?;
    // SAFETY: syncfs only reads the descriptor, which `f` keeps open for the call.
    if unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) } == 0 {
        Ok(())
    } else {
        Err(io(dir)(std::io::Error::last_os_error()))
    }
}

fn copy_optional(from: &Path, to: &Path) -> Result<(), CheckpointError> {
    match read_optional(from)? {
        Some((bytes, mode)) => write_new(to, &bytes, mode),
        None => Ok(()),
    }
}

/// Whether a file of the memory folder is agent state (the memory files, their index, the
/// archive, the unrecognized-turns buffer) rather than a lock or the flush backoff, which
/// belong to the running process.
fn is_memory_state(name: &str, is_dir: bool) -> bool {
    if is_dir {
        name == "_archive"
    } else {
        name.ends_with(".md") || name == crate::memory::buffer::FILE
    }
}

/// Copies the memory state of `from` into the new folder `to` (nothing when `from` is missing).
fn copy_memory(from: &Path, to: &Path) -> Result<(), CheckpointError> {
    let entries = match fs::read_dir(from) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(from)(e)),
    };
    fs::DirBuilder::new().recursive(true).mode(PRIVATE_DIR).create(to).map_err(io(to))?;
    for entry in entries {
        let entry = entry.map_err(io(from))?;
        let Ok(name) = entry.file_name().into_string() else { continue };
        let kind = entry.file_type().map_err(io(&entry.path()))?;
        if !is_memory_state(&name, kind.is_dir()) {
            continue;
        }
        if kind.is_dir() {
            copy_memory(&entry.path(), &to.join(&name))?;
        } else if kind.is_file() {
            copy_optional(&entry.path(), &to.join(&name))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
