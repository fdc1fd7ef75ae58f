//! Confinement of the file tools to the agent's workspace (DESIGN.md §12).
//!
//! Owns the one rule every file tool obeys: a path names something beneath the workspace, and it
//! is opened *relative to an open handle of the workspace* through `cap-std`, whose `Dir` opens
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` on Linux (an `O_NOFOLLOW` walk where
//! `openat2` is missing). The kernel resolves every symlink during the open itself, so a symlink
//! that stays inside works, one that leaves (absolute, `..`, dangling to outside, an ancestor
//! directory swapped for a link between two calls) fails the open: there is no check-then-use
//! window. The lexical check in [`Workspace::resolve`] only turns `~`, escaping `..` and outside
//! absolute paths into the same error early, with the path as the model gave it.
//!
//! Also owns the write guard: writes under `.cicy/{history,outbox,events,checkpoints}` (the
//! runtime's state) are refused by comparing the identity (device, inode) of the directory the
//! file will really be written in, and of each of its ancestors up to the workspace, with the
//! identity of those four directories, so `a/../.cicy/history` or a link into them is caught.
//! Knows nothing of tool inputs or output formats.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, MetadataExt};

/// The runtime-owned folders under `<workspace>/.cicy/` that no file tool writes into
/// (DESIGN.md §12 **[chosen]**): conversations, the outbox, the event log, checkpoints.
pub const PROTECTED: [&str; 4] = ["history", "outbox", "events", "checkpoints"];

/// Why a file tool could not do its work; `Display` is the exact `tool_result` text.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// `~…`, a `..` that climbs out, an absolute path outside, or a symlink met on the way that
    /// leads outside. The path is shown as the model gave it.
    #[error("error: path out of bounds: {0}")]
    OutOfBounds(String),
    #[error("error: not found: {0}")]
    NotFound(String),
    #[error("error: {0} is a directory")]
    IsDirectory(String),
    #[error("error: {0} is not a directory")]
    NotDirectory(String),
    #[error("error: {0} is not a regular file")]
    NotRegular(String),
    #[error("error: permission denied: {0}")]
    PermissionDenied(String),
    /// write_file / edit_file never replace a symlink (DESIGN.md §12 "no symlink leaf").
    #[error("error: {0} is a symlink; files are not written through symlinks")]
    SymlinkLeaf(String),
    /// A write whose real target is inside one of [`PROTECTED`].
    #[error("error: write refused: {path} is inside .cicy/{area}, which the runtime owns")]
    Protected { path: String, area: &'static str },
    /// The workspace folder itself could not be opened.
    #[error("error: the workspace cannot be opened: {0}")]
    Workspace(io::Error),
    #[error("error: {path}: {source}")]
    Io { path: String, source: io::Error },
}

impl FileError {
    /// Names an I/O error of an operation on `shown` (the path as the model gave it). A
    /// `cap-std` escape (its own `PermissionDenied` without an OS code, or `EXDEV` from
    /// `openat2`) becomes [`FileError::OutOfBounds`].
    pub fn from_io(source: io::Error, shown: &str) -> Self {
        let shown = shown.to_owned();
        match (source.kind(), source.raw_os_error()) {
            (io::ErrorKind::PermissionDenied, None) => Self::OutOfBounds(shown),
            (_, Some(libc::EXDEV)) => Self::OutOfBounds(shown),
            (io::ErrorKind::NotFound, _) => Self::NotFound(shown),
            (io::ErrorKind::PermissionDenied, Some(_)) => Self::PermissionDenied(shown),
            (_, Some(libc::EISDIR)) => Self::IsDirectory(shown),
            (_, Some(libc::ENOTDIR)) => Self::NotDirectory(shown),
            _ => Self::Io { path: shown, source },
        }
    }
}

/// A directory's identity: (device, inode).
type Id = (u64, u64);

fn id_of(dir: &Dir) -> io::Result<Id> {
    let meta = dir.dir_metadata()?;
    Ok((meta.dev(), meta.ino()))
}

/// An open handle of the workspace: every file tool call opens one and does all its I/O
/// relative to it.
#[derive(Debug)]
pub struct Workspace {
    dir: Dir,
    /// The workspace path as configured, `.` and `..` applied: an absolute path under it (or
    /// under its canonical form) is taken as relative to the workspace.
    root: PathBuf,
}

impl Workspace {
    /// Opens the workspace folder `root` (the only open that is not beneath it).
    pub fn open(root: &Path) -> Result<Self, FileError> {
        let dir = Dir::open_ambient_dir(root, ambient_authority()).map_err(FileError::Workspace)?;
        Ok(Self { dir, root: normalize_absolute(root) })
    }

    /// The open workspace; paths given to it must come from [`Workspace::resolve`].
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// The workspace path as configured (absolute when it was), for walkers that need a path.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `given` as a normalized path relative to the workspace (empty for the workspace itself):
    /// `.` components dropped and `..` applied lexically; an absolute path under the workspace
    /// made relative. Errors with [`FileError::OutOfBounds`] for a path starting with `~`, a `..`
    /// above the workspace, an absolute path outside it, and a NUL byte. Symlinks are not looked
    /// at here: the open does that (see the module doc).
    pub fn resolve(&self, given: &str) -> Result<PathBuf, FileError> {
        let out = || FileError::OutOfBounds(given.to_owned());
        if given.starts_with('~') || given.contains('\0') {
            return Err(out());
        }
        let path = Path::new(given);
        if path.is_absolute() {
            let normal = normalize_absolute(path);
            if let Ok(rel) = normal.strip_prefix(&self.root) {
                return Ok(rel.to_path_buf());
            }
            // Only mapping text here (the open still confines): the workspace's canonical path,
            // e.g. when it was configured through a symlinked folder.
            let canonical = std::fs::canonicalize(&self.root).map_err(|_| out())?;
            return normal.strip_prefix(canonical).map(Path::to_path_buf).map_err(|_| out());
        }
        let mut rel = PathBuf::new();
        for part in path.components() {
            match part {
                Component::Normal(name) => rel.push(name),
                Component::ParentDir => {
                    if !rel.pop() {
                        return Err(out());
                    }
                }
                Component::CurDir => {}
                Component::RootDir | Component::Prefix(_) => return Err(out()),
            }
        }
        Ok(rel)
    }

    /// Opens the directory `rel` (from [`Workspace::resolve`]) beneath the workspace, following
    /// symlinks that stay inside.
    pub fn open_dir(&self, rel: &Path, shown: &str) -> Result<Dir, FileError> {
        self.dir.open_dir(dot(rel)).map_err(|e| FileError::from_io(e, shown))
    }

    /// The directory a file `rel` is to be written in, created (with its missing parents) when
    /// needed, and the file's name in it. Refuses the workspace itself as a file, any target
    /// whose real parent is one of [`PROTECTED`] or inside one, and the names of [`PROTECTED`]
    /// in `.cicy` itself. The check runs on the opened handle, so the caller writes into exactly
    /// the directory that was checked.
    pub fn parent_for_write(&self, rel: &Path, shown: &str) -> Result<(Dir, OsString), FileError> {
        let Some(name) = rel.file_name() else {
            return Err(FileError::IsDirectory(shown.to_owned()));
        };
        let parent_rel = rel.parent().unwrap_or(Path::new(""));
        let guard = Guard::new(self).map_err(|e| FileError::from_io(e, shown))?;
        // Check the deepest existing ancestor before creating anything, so that no folder is
        // made inside a protected one; then check the real parent once it exists.
        let mut existing = parent_rel;
        let ancestor = loop {
            match self.dir.open_dir(dot(existing)) {
                Ok(dir) => break dir,
                Err(e) if e.kind() == io::ErrorKind::NotFound && existing != Path::new("") => {
                    existing = existing.parent().unwrap_or(Path::new(""));
                }
                Err(e) => return Err(FileError::from_io(e, shown)),
            }
        };
        guard.check(&ancestor, shown)?;
        let (parent, guard) = if existing == parent_rel {
            (ancestor, guard)
        } else {
            self.dir.create_dir_all(parent_rel).map_err(|e| FileError::from_io(e, shown))?;
            let parent = self.open_dir(parent_rel, shown)?;
            // Read the identities again: the folders just made may be the protected ones
            // (`.cicy/history/x` in a workspace that had no `.cicy` yet).
            let guard = Guard::new(self).map_err(|e| FileError::from_io(e, shown))?;
            guard.check(&parent, shown)?;
            (parent, guard)
        };
        if let Some(area) = PROTECTED.iter().find(|a| name == **a) {
            if guard.cicy.is_some_and(|cicy| id_of(&parent).ok() == Some(cicy)) {
                return Err(FileError::Protected { path: shown.to_owned(), area });
            }
        }
        Ok((parent, name.to_owned()))
    }
}

/// The identities the write guard compares against, read once per write.
struct Guard {
    workspace: Id,
    /// `.cicy` itself, when it exists.
    cicy: Option<Id>,
    /// Each existing protected folder (symlinks inside followed: the real folder counts).
    areas: Vec<(Id, &'static str)>,
}

impl Guard {
    fn new(ws: &Workspace) -> io::Result<Self> {
        let cicy = ws.dir.open_dir(".cicy").ok().and_then(|d| id_of(&d).ok());
        let areas = PROTECTED
            .iter()
            .filter_map(|area| {
                let dir = ws.dir.open_dir(Path::new(".cicy").join(area)).ok()?;
                Some((id_of(&dir).ok()?, *area))
            })
            .collect();
        Ok(Self { workspace: id_of(&ws.dir)?, cicy, areas })
    }

    /// Walks from `dir` up through `..` to the workspace; fails if any folder on the way is a
    /// protected one. A walk that reaches the filesystem root without meeting the workspace
    /// means `dir` is not beneath it (it cannot happen for a handle opened beneath).
    fn check(&self, dir: &Dir, shown: &str) -> Result<(), FileError> {
        let io_err = |e| FileError::from_io(e, shown);
        let mut id = id_of(dir).map_err(io_err)?;
        let mut current = None::<Dir>;
        loop {
            if let Some((_, area)) = self.areas.iter().find(|(area_id, _)| *area_id == id) {
                return Err(FileError::Protected { path: shown.to_owned(), area });
            }
            if id == self.workspace {
                return Ok(());
            }
            let up = current.as_ref().unwrap_or(dir).open_parent_dir(ambient_authority()).map_err(io_err)?;
            let up_id = id_of(&up).map_err(io_err)?;
            if up_id == id {
                return Err(FileError::OutOfBounds(shown.to_owned()));
            }
            id = up_id;
            current = Some(up);
        }
    }
}

/// `rel`, or `.` for the workspace itself (`cap-std` wants a non-empty path).
pub fn dot(rel: &Path) -> &Path {
    if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    }
}

/// An absolute path with `.` dropped and `..` applied lexically (never above `/`).
fn normalize_absolute(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                if out.parent().is_some() {
                    out.pop();
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn resolve_normalizes_inside_paths_and_refuses_escapes_with_the_given_text() {
        let (dir, ws) = ws();
        assert_eq!(ws.resolve("a/./b/../c").unwrap(), PathBuf::from("a/c"));
        assert_eq!(ws.resolve(".").unwrap(), PathBuf::new());
        assert_eq!(ws.resolve(&dir.path().join("x/y").to_string_lossy()).unwrap(), PathBuf::from("x/y"));
        assert_eq!(ws.resolve(&format!("{}/../{}/z", dir.path().display(), dir.path().file_name().unwrap().to_string_lossy())).unwrap(), PathBuf::from("z"));
        for bad in ["../x", "a/../../x", "~/.ssh/id_rsa", "~", "/etc/passwd", "a\0b"] {
            assert_eq!(ws.resolve(bad).unwrap_err().to_string(), format!("error: path out of bounds: {bad}"));
        }
    }

    #[test]
    fn an_absolute_path_under_the_canonical_workspace_is_inside_too() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("link")).unwrap();
        let ws = Workspace::open(&dir.path().join("link")).unwrap();
        let real = std::fs::canonicalize(dir.path().join("real")).unwrap();
        assert_eq!(ws.resolve(&real.join("x").to_string_lossy()).unwrap(), PathBuf::from("x"));
        assert_eq!(ws.resolve(&dir.path().join("link/y").to_string_lossy()).unwrap(), PathBuf::from("y"));
        let sibling = dir.path().join("other").display().to_string();
        assert_eq!(ws.resolve(&sibling).unwrap_err().to_string(), format!("error: path out of bounds: {sibling}"));
    }

    #[test]
    fn a_write_into_a_protected_folder_is_refused_by_its_identity() {
        let (dir, ws) = ws();
        std::fs::create_dir_all(dir.path().join(".cicy/history/sub")).unwrap();
        std::fs::create_dir_all(dir.path().join("ok")).unwrap();
        std::os::unix::fs::symlink(".cicy/history", dir.path().join("hist")).unwrap();
        let refused = |p: &str| ws.parent_for_write(&ws.resolve(p).unwrap(), p).unwrap_err().to_string();
        assert_eq!(refused(".cicy/history/x"), "error: write refused: .cicy/history/x is inside .cicy/history, which the runtime owns");
        assert_eq!(refused("hist/sub/new/x"), "error: write refused: hist/sub/new/x is inside .cicy/history, which the runtime owns");
        assert_eq!(refused(".cicy/outbox"), "error: write refused: .cicy/outbox is inside .cicy/outbox, which the runtime owns");
        assert!(!dir.path().join(".cicy/history/sub/new").exists(), "no folder is created inside a protected one");
        let (_, name) = ws.parent_for_write(Path::new("ok/deep/f"), "ok/deep/f").unwrap();
        assert_eq!(name, "f");
        assert!(dir.path().join("ok/deep").is_dir());
        assert_eq!(ws.parent_for_write(Path::new(""), ".").unwrap_err().to_string(), "error: . is a directory");
    }

    #[test]
    fn a_protected_folder_made_by_the_write_itself_is_refused() {
        let (_dir, ws) = ws();
        let refused = |p: &str| ws.parent_for_write(&ws.resolve(p).unwrap(), p).unwrap_err().to_string();
        assert_eq!(refused(".cicy/events/2026/e.jsonl"), "error: write refused: .cicy/events/2026/e.jsonl is inside .cicy/events, which the runtime owns");
        assert_eq!(refused(".cicy/checkpoints"), "error: write refused: .cicy/checkpoints is inside .cicy/checkpoints, which the runtime owns");
    }
}
