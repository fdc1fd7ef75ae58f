//! What counts as "pending" in an inbox, the cheap scan of one inbox folder, and the
//! translation of raw `notify` events into the three signals the watch task acts on.
//!
//! The handler runs on notify's own threads, sometimes while the watchers are locked (a
//! `PollWatcher` reports a missing folder from inside `watch`), so it must never touch the
//! inbox map or the watchers: it only classifies and sends. Scans are blocking file I/O and
//! run on blocking threads.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RenameMode};
use notify::{Event, EventKind};
use tokio::sync::mpsc::UnboundedSender;

/// What the watch task is told by the watchers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Signal {
    /// A pending file appeared (created or renamed into) in this folder.
    File(PathBuf),
    /// This path was removed or moved away; if it is a watched inbox, its watch is gone.
    Gone(PathBuf),
    /// Events may have been lost (a watcher error or a queue overflow, the text says which).
    Missed(String),
}

/// Identity of a folder (device, inode): an inbox replaced behind our back (its parent moved
/// and a new one made) keeps its path but not this.
pub(super) type DirId = (u64, u64);

/// The identity of the folder at `dir` (follows a symlink, as the watch does).
pub(super) fn dir_id(dir: &Path) -> io::Result<DirId> {
    fs::metadata(dir).map(|m| (m.dev(), m.ino()))
}

/// The inbox naming rule (docs/design.md §10, cryo A6): a message ends in `.md`; a name starting
/// with `.` is a writer's temp file (`.<name>.tmp`) or hidden, never a message.
pub(super) fn is_pending_name(name: &OsStr) -> bool {
    let bytes = name.as_encoded_bytes();
    bytes.ends_with(b".md") && !bytes.starts_with(b".")
}

/// A regular file, following a symlink: an extra wake is harmless, a missed message is not.
fn is_regular(path: &Path) -> bool {
    fs::metadata(path).map(|m| m.is_file()).unwrap_or(false)
}

/// `path` is a pending message: its name passes [`is_pending_name`] and it is a regular file.
pub(super) fn is_pending_path(path: &Path) -> bool {
    path.file_name().is_some_and(is_pending_name) && is_regular(path)
}

/// Whether `dir` holds at least one pending message. Cost: one readdir, stopped at the first
/// pending entry; a stat only for a symlink with a pending name. Errors: reading `dir`.
pub(super) fn has_pending(dir: &Path) -> io::Result<bool> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if !is_pending_name(&entry.file_name()) {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_file() || (kind.is_symlink() && is_regular(&entry.path())) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Which watcher sees an inbox (and which one a handler serves: only inotify reports a
/// writer's close).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Backend {
    /// inotify.
    Notify,
    Poll,
    /// Neither (the folder is missing or could not be watched); a full scan that finds the
    /// folder watches it.
    Unwatched,
}

/// The event handler given to each watcher: classifies and forwards to the watch task. A
/// file whose writer closed it or renamed it in is recorded as finished first
/// (`cicy_runtime::wake::inbox::settle`), so the claim this wake leads to may take it at once; under
/// inotify, one made or written in place is recorded as being written until that close, and
/// anything that may have lost a close puts those back on the write grace.
pub(super) fn handler(signals: UnboundedSender<Signal>, backend: Backend) -> impl FnMut(notify::Result<Event>) + Send + 'static {
    use cicy_runtime::wake::inbox::settle;
    move |res| {
        match &res {
            Ok(event) if backend == Backend::Notify && event.need_rescan() => settle::forget_writers(),
            Ok(event) => {
                if backend == Backend::Notify {
                    for path in writing_paths(event) {
                        settle::note_writing(path);
                    }
                }
                for path in finished_paths(event) {
                    settle::note_finished(path);
                }
            }
            Err(_) if backend == Backend::Notify => settle::forget_writers(),
            Err(_) => {}
        }
        classify(res, |signal| {
            // The task is gone only after `stop`; what the watchers still report then is moot.
            let _ = signals.send(signal);
        })
    }
}

/// The pending files `event` says a writer made or wrote to in place (inotify's create of a
/// regular file, or its modify). A symlink has no close and is never recorded: only a create
/// can be one (a write through a link is reported on its target), so only a create is looked at.
fn writing_paths(event: &Event) -> Vec<&Path> {
    let pending = event.paths.iter().map(PathBuf::as_path).filter(|p| is_pending_path(p));
    match event.kind {
        EventKind::Create(CreateKind::File) => {
            pending.filter(|p| !fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())).collect()
        }
        EventKind::Modify(ModifyKind::Data(_)) => pending.collect(),
        _ => Vec::new(),
    }
}

/// The pending files whose writer `event` says is done with them: closed after writing, or
/// renamed in (of a rename with both ends, the second path). The poller's events say neither.
fn finished_paths(event: &Event) -> Vec<&Path> {
    let paths: Vec<&Path> = match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) | EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Any)) => {
            event.paths.iter().map(PathBuf::as_path).collect()
        }
        EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => event.paths.get(1).map(PathBuf::as_path).into_iter().collect(),
        _ => Vec::new(),
    };
    paths.into_iter().filter(|p| is_pending_path(p)).collect()
}

/// Turns one notify report into signals. A written file closed, a symlink made, rename-into
/// (notify 8: `Access(Close(Write))`, `Create(File)` of a symlink, `Modify(Name(To|Any|Both))`),
/// the poll watcher's `Create(Any)` and the imprecise `Any` of a pending file → `File(folder)`;
/// `Remove(_)` and `Modify(Name(From))` → `Gone(path)` (the task keeps only watched inboxes);
/// an error → `Gone` for each path it names, then `Missed`; an event flagged `need_rescan`
/// (inotify queue overflow) → `Missed`. Everything else (data, metadata, access) is ignored.
pub(super) fn classify(res: notify::Result<Event>, mut emit: impl FnMut(Signal)) {
    let event = match res {
        Ok(event) => event,
        Err(err) => {
            for path in &err.paths {
                emit(Signal::Gone(path.clone()));
            }
            emit(Signal::Missed(format!("watcher error: {err}")));
            return;
        }
    };
    if event.need_rescan() {
        emit(Signal::Missed("the event queue overflowed".to_string()));
        return;
    }
    match event.kind {
        EventKind::Create(CreateKind::Folder) => {}
        // inotify: a file made by open(2) is complete when its writer closes it, which a
        // write in several chunks (`(printf a; sleep 1; printf b) > x.md`) does only at the
        // end; a symlink has no close, so it counts when made.
        EventKind::Create(CreateKind::File) => {
            for path in &event.paths {
                let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
                if let Some(dir) = path.parent().filter(|_| link && is_pending_path(path)) {
                    emit(Signal::File(dir.to_path_buf()));
                }
            }
        }
        EventKind::Any
        | EventKind::Create(_)
        | EventKind::Access(AccessKind::Close(AccessMode::Write))
        | EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Any | RenameMode::Both)) => {
            for path in &event.paths {
                if let Some(dir) = path.parent().filter(|_| is_pending_path(path)) {
                    emit(Signal::File(dir.to_path_buf()));
                }
            }
        }
        EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(RenameMode::From)) => {
            for path in event.paths {
                emit(Signal::Gone(path));
            }
        }
        EventKind::Access(_)
        | EventKind::Modify(
            ModifyKind::Any | ModifyKind::Data(_) | ModifyKind::Metadata(_) | ModifyKind::Name(RenameMode::Other) | ModifyKind::Other,
        )
        | EventKind::Other => {}
    }
}
