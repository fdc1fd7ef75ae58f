//! Whether a pending inbox file's writer has finished, and the identity of a message file.
//!
//! A file renamed into `inbox/` is whole the moment it appears; one written in place
//! (`printf … > inbox/x.md`) is not until its writer closes it. Every claim path (a wake, the
//! periodic scan, the end of a turn, `inbox receive`) asks [`settled`]: a file is taken once
//! the inbox watch saw its writer close it or rename it in with exactly the stamp it has now
//! ([`note_finished`]), or once it has not changed for the write grace
//! (`crate::fsutil::write_grace`) — unless the watch saw it made or written in place and not
//! closed since ([`note_writing`]): its writer still holds it, however long it pauses. A lost
//! close (the event queue overflowed) puts every such file back on the grace
//! ([`forget_writers`]); a writer that dies is closed by the kernel, which the watch sees.
//!
//! A file under a name cicy gives its own messages (`…_<nanos:032x>_<pid:08x>_<seq:04x>.md`) is
//! whole at once: only `Mailbox::write` makes those, always aside and renamed in (so one left
//! while serve was down waits for nothing). Owns the process-wide record of those sightings.
//! Must not read, parse or move a file.

use std::collections::{HashMap, HashSet};
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// **[chosen]** The record is cleared past this many files (each claim removes its own): a
/// file that then loses its sighting only waits for the write grace.
const MAX_SIGHTINGS: usize = 10_000;

/// Who a message file is, beyond its name: its inode, size and mtime. A rename (the move to
/// `inbox/archive/`) keeps all three; a new file saved under an old name, or a rewrite, changes
/// at least one, so a name that comes back is a new message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileStamp {
    pub ino: u64,
    pub size: u64,
    /// Nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
}

impl FileStamp {
    pub fn of(meta: &Metadata) -> Self {
        FileStamp {
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: meta.mtime().saturating_mul(1_000_000_000).saturating_add(meta.mtime_nsec()),
        }
    }
}

/// The watch's sightings. One process (serve) both watches and claims.
#[derive(Default)]
struct Sightings {
    /// Path → the stamp the file had when its writer closed it or renamed it in.
    finished: HashMap<PathBuf, FileStamp>,
    /// Made or written in place, and not closed since.
    writing: HashSet<PathBuf>,
}

static SIGHTINGS: Mutex<Option<Sightings>> = Mutex::new(None);

fn with_sightings<T>(f: impl FnOnce(&mut Sightings) -> T) -> T {
    let mut seen = SIGHTINGS.lock().unwrap_or_else(PoisonError::into_inner);
    f(seen.get_or_insert_with(Sightings::default))
}

/// The inbox watch saw `path`'s writer close it (or a rename put it there): recorded with the
/// stamp it has now, so a later write in place makes it unfinished again. Blocking (one stat).
pub fn note_finished(path: &Path) {
    let Ok(meta) = std::fs::metadata(path) else { return };
    with_sightings(|s| {
        s.writing.remove(path);
        if s.finished.len() >= MAX_SIGHTINGS {
            s.finished.clear();
        }
        s.finished.insert(path.to_path_buf(), FileStamp::of(&meta));
    });
}

/// The inbox watch saw `path` made or written in place: not whole until its close is seen.
pub fn note_writing(path: &Path) {
    with_sightings(|s| {
        if s.writing.len() >= MAX_SIGHTINGS {
            s.writing.clear();
        }
        s.writing.insert(path.to_path_buf());
    });
}

/// The watch may have missed closes (its event queue overflowed, a watcher failed): every
/// file seen being written waits for the grace alone again.
pub fn forget_writers() {
    with_sightings(|s| s.writing.clear());
}

/// Forgets `path` (claimed, or moved aside).
pub fn forget(path: &Path) {
    with_sightings(|s| {
        s.finished.remove(path);
        s.writing.remove(path);
    });
}

/// Whether the file at `path`, whose metadata is `meta`, may be read as whole at `now`:
/// `Ok(())`, or `Err(wait)`, how long until it has been unchanged for `grace` (a look again
/// then, if nothing wakes the agent sooner; the grace itself for a file still open for
/// writing, whose close wakes the agent). An mtime in the future counts as now.
pub fn settled(path: &Path, meta: &Metadata, now: SystemTime, grace: Duration) -> Result<(), Duration> {
    if path.file_name().and_then(|n| n.to_str()).and_then(super::name_nanos).is_some() {
        return Ok(());
    }
    let (finished, writing) = with_sightings(|s| (s.finished.get(path).copied(), s.writing.contains(path)));
    if writing {
        return Err(grace);
    }
    if finished == Some(FileStamp::of(meta)) {
        return Ok(());
    }
    let age = meta.modified().ok().map_or(Duration::ZERO, |t| now.duration_since(t).unwrap_or(Duration::ZERO));
    match grace.checked_sub(age) {
        Some(wait) if !wait.is_zero() => Err(wait),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_seen_being_written_waits_past_the_grace_for_its_close_unless_closes_may_be_lost() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("paused.md");
        let mut writer = std::fs::File::create(&path).unwrap();
        writer.write_all(b"PART-").unwrap();
        note_writing(&path);
        let grace = Duration::from_secs(2);
        let meta = std::fs::metadata(&path).unwrap();
        let long_after = meta.modified().unwrap() + Duration::from_secs(3600);
        assert_eq!(settled(&path, &meta, long_after, grace), Err(grace), "its writer paused, it did not finish");
        forget_writers();
        assert_eq!(settled(&path, &meta, long_after, grace), Ok(()), "a close may have been lost: the grace decides");
        note_writing(&path);
        writer.write_all(b"REST").unwrap();
        note_finished(&path);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(settled(&path, &meta, meta.modified().unwrap(), grace), Ok(()), "closed");
        forget(&path);
    }

    #[test]
    fn a_file_being_written_waits_for_its_close_or_the_grace_and_a_new_write_undoes_a_close_and_cicys_names_do_not_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.md");
        let mut writer = std::fs::File::create(&path).unwrap();
        writer.write_all(b"PART-").unwrap();
        let grace = Duration::from_secs(2);
        let meta = std::fs::metadata(&path).unwrap();
        let written = meta.modified().unwrap();
        assert_eq!(settled(&path, &meta, written + Duration::from_millis(500), grace), Err(Duration::from_millis(1500)));
        assert_eq!(settled(&path, &meta, written - Duration::from_secs(60), grace), Err(grace), "a future mtime counts as now");
        assert_eq!(settled(&path, &meta, written + grace, grace), Ok(()), "unchanged for the grace");

        writer.write_all(b"REST").unwrap();
        note_finished(&path);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(settled(&path, &meta, meta.modified().unwrap(), grace), Ok(()), "its close was seen");
        writer.write_all(b"+").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert!(settled(&path, &meta, meta.modified().unwrap(), grace).is_err(), "written again after the close");
        forget(&path);
        let cicy = dir.path().join(format!("2026-12-01T09-00-00_x_{:032x}_0000abcd_0001.md", 7));
        std::fs::write(&cicy, "renamed in by cicy").unwrap();
        let meta = std::fs::metadata(&cicy).unwrap();
        assert_eq!(settled(&cicy, &meta, meta.modified().unwrap(), grace), Ok(()), "a name only cicy's renames make");
        note_finished(&dir.path().join("gone.md"));
        assert!(with_sightings(|s| !s.finished.contains_key(&path)));
    }
}
