//! Atomic file writes and the "move a corrupt file aside" rule (docs/design.md §2).
//!
//! Every file the runtime writes goes through [`write_atomic`]: a temp file in the same folder,
//! fsync, rename over the target, fsync the folder. A file that fails to parse is never
//! overwritten: [`move_aside`] renames it to `<name>.corrupt-<unix>` so the user can inspect it.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Writes `bytes` to `path` atomically. Errors carry the path.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_all(&[(path, bytes)])
}

/// Writes each `(path, bytes)` atomically, in order, then fsyncs each folder once: a folder
/// holding several of the files costs one fsync, not one per rename. Each file's data is
/// fsynced before its rename, so whichever renames a crash keeps, each name holds either its
/// old or its new bytes; callers order the files so that every prefix of the renames is a
/// state they can recover from. Errors carry the path; files before the failing one stay
/// written.
pub fn write_atomic_all(files: &[(&Path, &[u8])]) -> io::Result<()> {
    let mut dirs: Vec<&Path> = Vec::new();
    for (path, bytes) in files {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        fs::create_dir_all(dir).map_err(|e| with_path(e, dir))?;
        let mut tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir).map_err(|e| with_path(e, dir))?;
        tmp.write_all(bytes).map_err(|e| with_path(e, path))?;
        tmp.as_file().sync_all().map_err(|e| with_path(e, path))?;
        tmp.persist(path).map_err(|e| with_path(e.error, path))?;
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs.into_iter().try_for_each(sync_dir)
}

/// fsyncs a folder so a rename inside it survives a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir).and_then(|f| f.sync_all()).map_err(|e| with_path(e, dir))
}

/// Renames an unparsable file to `<name>.corrupt-<unix>` (a numeric suffix is added if that
/// name exists) and returns the new path.
pub fn move_aside(path: &Path) -> io::Result<PathBuf> {
    rename_aside(path, "corrupt")
}

/// Renames `path` to `<name>.<tag>-<unix>` (a numeric suffix is added if that name exists) and
/// returns the new path: a file kept, not deleted (`move_aside`, `intents rm`).
pub fn rename_aside(path: &Path, tag: &str) -> io::Result<PathBuf> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let base = format!("{name}.{tag}-{}", unix_now());
    let mut target = path.with_file_name(&base);
    let mut n = 1;
    while target.exists() {
        target = path.with_file_name(format!("{base}.{n}"));
        n += 1;
    }
    fs::rename(path, &target).map_err(|e| with_path(e, path))?;
    Ok(target)
}

/// **[chosen]** How long a file written in place (an inbox message, an outbox command) must be
/// unchanged before a reader takes it as whole when nothing told it the writer finished.
pub const DEFAULT_WRITE_GRACE: Duration = Duration::from_secs(2);

static WRITE_GRACE_MS: AtomicU64 = AtomicU64::new(DEFAULT_WRITE_GRACE.as_millis() as u64);

/// The write grace of this process: [`DEFAULT_WRITE_GRACE`] unless serve's `--write-grace-ms`
/// set another.
pub fn write_grace() -> Duration {
    Duration::from_millis(WRITE_GRACE_MS.load(Ordering::Relaxed))
}

/// Sets [`write_grace`] for the whole process (serve's start, before any claim).
pub fn set_write_grace(grace: Duration) {
    WRITE_GRACE_MS.store(u64::try_from(grace.as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// The current time as RFC 3339 UTC with second precision, e.g. `2026-11-30T23:47:31Z`.
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    now.format(&fmt).unwrap_or_else(|_| unix_now().to_string())
}

/// Runs blocking file I/O `f` from async code without stalling the other tasks of the worker:
/// on a multi-threaded tokio runtime through `block_in_place` (the worker's other tasks move
/// to another thread meanwhile); elsewhere (a current-thread runtime, no runtime) it runs `f`
/// directly, as `block_in_place` would panic there.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_content_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(p.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names, vec!["b.json".to_string()]);
    }

    #[test]
    fn write_atomic_all_writes_every_file_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (dir.path().join("a.json"), dir.path().join("b.json"), dir.path().join("sub/c.json"));
        fs::write(&a, b"old").unwrap();
        write_atomic_all(&[(&a, b"one"), (&b, b"two"), (&c, b"three")]).unwrap();
        assert_eq!(
            (fs::read(&a).unwrap(), fs::read(&b).unwrap(), fs::read(&c).unwrap()),
            (b"one".to_vec(), b"two".to_vec(), b"three".to_vec())
        );
        let mut names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, ["a.json", "b.json", "sub"]);
    }

    #[test]
    fn move_aside_keeps_the_bytes_under_a_new_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("current.json");
        fs::write(&p, b"{broken").unwrap();
        let moved = move_aside(&p).unwrap();
        assert!(!p.exists());
        assert!(moved.file_name().unwrap().to_string_lossy().starts_with("current.json.corrupt-"));
        assert_eq!(fs::read(&moved).unwrap(), b"{broken");
        fs::write(&p, b"{again").unwrap();
        let second = move_aside(&p).unwrap();
        assert_ne!(moved, second);
    }

    #[test]
    fn rfc3339_has_the_expected_shape() {
        let s = now_rfc3339();
        assert_eq!(s.len(), 20, "{s}");
        assert!(s.ends_with('Z'));
    }
}
