//! Loading a checkpoint back (docs/design.md §12 "Checkpoints"): a load restores it as a new
//! conversation and saves a `before-load` checkpoint first.
//!
//! Owns the order that keeps a load whole: read and check EVERYTHING the load needs from the
//! checkpoint into memory first (a corrupt or incomplete checkpoint changes nothing and saves
//! no `before-load`), then save `before-load`, then apply. If applying still fails midway (a
//! full disk, a live file in the way), the error says what was already changed and names the
//! `before-load` checkpoint to load to go back. It never edits a checkpoint.

use std::fs;
use std::path::Path;

use super::{find, is_memory_state, memory_dir, plan_path, read_meta, save, CheckpointError, Meta, SaveOptions, BEFORE_LOAD};
use crate::conversation::history::{CurrentFile, HistoryStore, ReplyFile};
use crate::fsutil;

/// What [`load`] did.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The checkpoint of the state before the load (label `before-load`).
    pub before: Meta,
    /// The checkpoint loaded.
    pub meta: Meta,
    /// The new conversation holding the checkpoint's messages.
    pub conv_id: String,
    pub message_count: usize,
}

/// Loads checkpoint `id` into the agent `agent_id` in `workspace`: checks and reads the whole
/// checkpoint, saves a `before-load` checkpoint, then makes the checkpoint's history the
/// active conversation under a NEW conversation id (its messages, ids and counters as saved;
/// the old conversation stays on disk, as after `/clear`), writes its reply.json there, and
/// puts back AGENTS.md, `.cicy/plan.json` and the memory files as saved (a file the checkpoint
/// does not hold is removed: the saved state had none). Call it holding the turn lock.
///
/// What a checkpoint must hold to be loaded: a meta.json of [`super::SCHEMA_VERSION`]; a
/// current.json that parses, holds exactly meta.json's `message_count` messages and, when
/// meta.json names a `conv_id`, that conversation (it may be missing only when
/// `message_count` is 0); a reply.json that parses, if there is one (without one the new
/// conversation's reply is idle); AGENTS.md and plan.json regular files if present; `memory/`
/// a folder if present, its state entries files or folders as their names say.
///
/// Errors, nothing changed: [`CheckpointError::NotFound`] / [`CheckpointError::BadId`];
/// [`CheckpointError::Corrupt`] / [`CheckpointError::Schema`] for meta.json or a JSON file
/// that does not parse; [`CheckpointError::Unloadable`] for any other check above; an error
/// of the `before-load` save. After the `before-load` save: [`CheckpointError::PartlyLoaded`].
pub fn load(workspace: &Path, agent_id: &str, id: &str) -> Result<Loaded, CheckpointError> {
    let cp = find(workspace, id)?;
    let meta = read_meta(&cp.join("meta.json"))?;
    let snap = Snapshot::read(&cp, &meta)?;

    let before = save(workspace, &SaveOptions { label: Some(BEFORE_LOAD.to_string()), ..SaveOptions::default() })?;

    let store = HistoryStore::new(workspace);
    let fresh = CurrentFile::new(agent_id, snap.current.as_ref().map_or("", |c| c.model.as_str()));
    let current = match snap.current {
        Some(c) => CurrentFile { conversation_id: fresh.conversation_id.clone(), agent_id: agent_id.to_string(), ..c },
        None => fresh,
    };
    let mut done: Vec<&str> = Vec::new();
    let stopped = |done: &[&str], step: &str, source: CheckpointError| CheckpointError::PartlyLoaded {
        id: id.to_string(),
        source: Box::new(source),
        changed: changed_text(done, step),
        before: before.checkpoint_id.clone(),
    };
    let conversation = "the active conversation";
    store.start(&current).map_err(|e| stopped(&done, conversation, e.into()))?;
    if let Some(r) = snap.reply {
        store
            .save_reply(&ReplyFile { conversation_id: current.conversation_id.clone(), ..r })
            .map_err(|e| stopped(&done, conversation, e.into()))?;
    }
    done.push(conversation);
    restore_bytes(snap.agents_md.as_deref(), &workspace.join("AGENTS.md")).map_err(|e| stopped(&done, "AGENTS.md", e))?;
    done.push("AGENTS.md");
    restore_bytes(snap.plan.as_deref(), &plan_path(workspace)).map_err(|e| stopped(&done, "plan.json", e))?;
    done.push("plan.json");
    restore_memory(&snap.memory, &memory_dir(workspace)).map_err(|e| stopped(&done, "the memory files", e))?;
    Ok(Loaded { before, meta, conv_id: current.conversation_id, message_count: current.messages.len() })
}

/// `the active conversation and AGENTS.md were changed and plan.json may be partly changed`.
fn changed_text(done: &[&str], step: &str) -> String {
    match done {
        [] => format!("{step} may be partly changed"),
        [one] => format!("{one} was changed and {step} may be partly changed"),
        [init @ .., last] => format!("{} and {last} were changed and {step} may be partly changed", init.join(", ")),
    }
}

/// Everything a load writes, read from the checkpoint and checked.
struct Snapshot {
    current: Option<CurrentFile>,
    reply: Option<ReplyFile>,
    agents_md: Option<Vec<u8>>,
    plan: Option<Vec<u8>>,
    /// Empty when the checkpoint has no `memory/` (the saved state had no memory files).
    memory: MemoryDir,
}

/// The memory state files of one folder and its state sub-folders (`_archive/`), by name.
#[derive(Default)]
struct MemoryDir {
    files: Vec<(String, Vec<u8>)>,
    dirs: Vec<(String, MemoryDir)>,
}

impl Snapshot {
    fn read(cp: &Path, meta: &Meta) -> Result<Self, CheckpointError> {
        let current_path = cp.join("current.json");
        let current: Option<CurrentFile> = parse_optional(&current_path)?;
        match &current {
            None if meta.message_count > 0 => {
                return Err(unloadable(
                    &current_path,
                    format!("missing, but meta.json says the conversation had {} messages", meta.message_count),
                ))
            }
            Some(c) if c.messages.len() != meta.message_count => {
                return Err(unloadable(
                    &current_path,
                    format!("holds {} messages, but meta.json says {}", c.messages.len(), meta.message_count),
                ))
            }
            Some(c) if meta.conv_id.as_ref().is_some_and(|id| *id != c.conversation_id) => {
                let said = meta.conv_id.as_deref().unwrap_or_default();
                return Err(unloadable(&current_path, format!("holds conversation {}, but meta.json says {said}", c.conversation_id)));
            }
            _ => {}
        }
        Ok(Self {
            current,
            reply: parse_optional(&cp.join("reply.json"))?,
            agents_md: read_file(&cp.join("AGENTS.md"))?,
            plan: read_file(&cp.join("plan.json"))?,
            memory: read_memory_root(&cp.join("memory"))?,
        })
    }
}

fn unloadable(path: &Path, problem: impl Into<String>) -> CheckpointError {
    CheckpointError::Unloadable { path: path.to_path_buf(), problem: problem.into() }
}

/// The bytes of the regular file `path` of a checkpoint; `None` when it does not exist.
/// Anything else there (a folder, a symlink, a pipe) makes the checkpoint unloadable.
fn read_file(path: &Path) -> Result<Option<Vec<u8>>, CheckpointError> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_file() => fs::read(path).map(Some).map_err(|e| unloadable(path, e.to_string())),
        Ok(_) => Err(unloadable(path, "not a regular file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(unloadable(path, e.to_string())),
    }
}

fn parse_optional<T: for<'de> serde::Deserialize<'de>>(path: &Path) -> Result<Option<T>, CheckpointError> {
    match read_file(path)? {
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| CheckpointError::Corrupt { path: path.to_path_buf(), message: e.to_string() }),
        None => Ok(None),
    }
}

/// The checkpoint's `memory/`: empty when missing, unloadable when not a folder.
fn read_memory_root(path: &Path) -> Result<MemoryDir, CheckpointError> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => read_memory(path),
        Ok(_) => Err(unloadable(path, "not a folder")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(MemoryDir::default()),
        Err(e) => Err(unloadable(path, e.to_string())),
    }
}

/// The state entries of memory folder `path` ([`is_memory_state`]); a `.md` name that is not a
/// regular file makes the checkpoint unloadable.
fn read_memory(path: &Path) -> Result<MemoryDir, CheckpointError> {
    let mut out = MemoryDir::default();
    for entry in fs::read_dir(path).map_err(|e| unloadable(path, e.to_string()))? {
        let entry = entry.map_err(|e| unloadable(path, e.to_string()))?;
        let Ok(name) = entry.file_name().into_string() else { continue };
        let kind = entry.file_type().map_err(|e| unloadable(&entry.path(), e.to_string()))?;
        if is_memory_state(&name, kind.is_dir()) {
            if kind.is_dir() {
                out.dirs.push((name, read_memory(&entry.path())?));
            } else if let Some(bytes) = read_file(&entry.path())? {
                out.files.push((name, bytes));
            }
        }
    }
    Ok(out)
}

/// Puts `saved` back at `live` atomically (not rewritten when the bytes are the same), or
/// removes `live` when the checkpoint has no such file.
fn restore_bytes(saved: Option<&[u8]>, live: &Path) -> Result<(), CheckpointError> {
    let io = |e| CheckpointError::Io { path: live.to_path_buf(), source: e };
    match saved {
        Some(bytes) if fs::read(live).ok().as_deref() == Some(bytes) => Ok(()),
        Some(bytes) => fsutil::write_atomic(live, bytes).map_err(io),
        None => match fs::remove_file(live) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(e)),
        },
    }
}

/// Makes the memory state in `live` the one in `saved`, file by file (each write atomic);
/// locks and the backoff file stay, as a memory flush of another process may hold them.
fn restore_memory(saved: &MemoryDir, live: &Path) -> Result<(), CheckpointError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CheckpointError::Io { path, source }
    };
    let present: Vec<(String, bool)> = match fs::read_dir(live) {
        Ok(entries) => entries
            .flatten()
            .filter_map(|e| Some((e.file_name().into_string().ok()?, e.file_type().ok()?.is_dir())))
            .filter(|(n, is_dir)| is_memory_state(n, *is_dir))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io(live)(e)),
    };
    for (name, is_dir) in present {
        let kept = if is_dir { saved.dirs.iter().any(|(n, _)| *n == name) } else { saved.files.iter().any(|(n, _)| *n == name) };
        if !kept {
            let path = live.join(&name);
            if is_dir { fs::remove_dir_all(&path) } else { fs::remove_file(&path) }.map_err(io(&path))?;
        }
    }
    for (name, bytes) in &saved.files {
        restore_bytes(Some(bytes), &live.join(name))?;
    }
    for (name, dir) in &saved.dirs {
        restore_memory(dir, &live.join(name))?;
    }
    Ok(())
}
