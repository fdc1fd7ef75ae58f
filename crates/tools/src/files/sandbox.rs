//! Confinement of the file tools to the agent's workspace (docs/design.md §12).
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
//! Also owns the write guard: no write lands anywhere under `<workspace>/.cicy/`, the runtime's
//! own state (the turn lock, history, outbox, events, checkpoints, memory, the reaper's running
//! records, skills, the plan). A path whose normalized form starts with `.cicy` is refused from
//! its text before anything is opened; any other route (`c/x` with `c` a link to `.cicy`) is
//! caught by comparing the identity (device, inode) of the deepest existing folder on the way, and
//! of each of its ancestors up to the workspace, with that of `.cicy`, before a missing parent
//! folder is created. Reading `.cicy/` is not guarded.
//! Knows nothing of tool inputs or output formats.

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, MetadataExt};

/// The workspace folder of the runtime's own state, which no file tool writes into (docs/design.md §12
/// "writes to `.cicy/` internals refused"; all of it **[chosen]**: a replaced `turn.lock` breaks
/// the running turn's lock, a written skill could lift the skill guard).
pub const STATE_DIR: &str = ".cicy";

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
    /// write_file / edit_file never replace a symlink (docs/design.md §12 "no symlink leaf").
    #[error("error: {0} is a symlink; files are not written through symlinks")]
    SymlinkLeaf(String),
    /// A write whose target is [`STATE_DIR`] or inside it, by its text or its real folder.
    #[error("error: write refused: {0} is inside .cicy/, which the runtime owns")]
    Protected(String),
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

    /// The directory a file `rel` (from [`Workspace::resolve`]) is to be written in, created
    /// (with its missing parents) when needed, and the file's name in it. Refuses the workspace
    /// itself as a file ([`FileError::IsDirectory`]) and any target in [`STATE_DIR`] or named so
    /// in the workspace ([`FileError::Protected`]), before any folder is created. The check runs
    /// on the opened handle, so the caller writes into exactly the directory that was checked.
    pub fn parent_for_write(&self, rel: &Path, shown: &str) -> Result<(Dir, OsString), FileError> {
        self.parent(rel, shown, true)
    }

    /// [`Workspace::parent_for_write`] for a file that must exist already (`edit_file`): a missing
    /// parent folder is [`FileError::NotFound`], nothing is created.
    pub fn parent_for_edit(&self, rel: &Path, shown: &str) -> Result<(Dir, OsString), FileError> {
        self.parent(rel, shown, false)
    }

    fn parent(&self, rel: &Path, shown: &str, create: bool) -> Result<(Dir, OsString), FileError> {
        let Some(name) = rel.file_name() else {
            return Err(FileError::IsDirectory(shown.to_owned()));
        };
        // By its text first (`rel` is normalized, so `a/../.cicy/x` is here too): nothing is
        // opened, let alone created, for such a path.
        if rel.components().next() == Some(Component::Normal(OsStr::new(STATE_DIR))) {
            return Err(FileError::Protected(shown.to_owned()));
        }
        let parent_rel = rel.parent().unwrap_or(Path::new(""));
        let guard = Guard::new(self).map_err(|e| FileError::from_io(e, shown))?;
        // Check the deepest existing folder on the way, and the name to be made in it, before
        // creating anything: the folders made below it are new and hold no link, so none of
        // them can be in `.cicy` unless that folder is.
        let mut existing = parent_rel;
        let ancestor = loop {
            match self.dir.open_dir(dot(existing)) {
                Ok(dir) => break dir,
                Err(e) if create && e.kind() == io::ErrorKind::NotFound && existing != Path::new("") => {
                    existing = existing.parent().unwrap_or(Path::new(""));
                }
                Err(e) => return Err(FileError::from_io(e, shown)),
            }
        };
        let next = rel.strip_prefix(existing).ok().and_then(|rest| rest.iter().next()).unwrap_or(name);
        guard.check(&ancestor, next, shown)?;
        if existing == parent_rel {
            return Ok((ancestor, name.to_owned()));
        }
        self.dir.create_dir_all(parent_rel).map_err(|e| FileError::from_io(e, shown))?;
        let parent = self.open_dir(parent_rel, shown)?;
        // Again on the handle written into, should a folder on the way have been swapped since.
        Guard::new(self).map_err(|e| FileError::from_io(e, shown))?.check(&parent, name, shown)?;
        Ok((parent, name.to_owned()))
    }
}

/// The identities the write guard compares against, read once per check.
struct Guard {
    workspace: Id,
    /// [`STATE_DIR`] when it exists (a link followed: the real folder counts).
    state: Option<Id>,
}

impl Guard {
    fn new(ws: &Workspace) -> io::Result<Self> {
        let state = ws.dir.open_dir(STATE_DIR).ok().and_then(|d| id_of(&d).ok());
        Ok(Self { workspace: id_of(&ws.dir)?, state })
    }

    /// Fails if `dir` is the workspace and `next` (the name to be made or written in it) is
    /// [`STATE_DIR`], or if `dir` or a folder above it, walking up through `..` to the workspace,
    /// is [`STATE_DIR`]. A walk that reaches the filesystem root without meeting the workspace
    /// means `dir` is not beneath it (it cannot happen for a handle opened beneath).
    fn check(&self, dir: &Dir, next: &OsStr, shown: &str) -> Result<(), FileError> {
        let io_err = |e| FileError::from_io(e, shown);
        let refused = || FileError::Protected(shown.to_owned());
        let mut id = id_of(dir).map_err(io_err)?;
        if id == self.workspace && next == STATE_DIR {
            return Err(refused());
        }
        let mut current = None::<Dir>;
        loop {
            if self.state == Some(id) {
                return Err(refused());
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
        assert_eq!(
            ws.resolve(&format!("{}/../{}/z", dir.path().display(), dir.path().file_name().unwrap().to_string_lossy())).unwrap(),
            PathBuf::from("z")
        );
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

    fn refused(p: &str) -> String {
        format!("error: write refused: {p} is inside .cicy/, which the runtime owns")
    }

    /// Every entry under `dir`, relative, sorted, links not followed (folders end in `/`).
    fn tree(dir: &Path) -> Vec<String> {
        fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                let rel = path.strip_prefix(base).unwrap().display().to_string();
                if std::fs::symlink_metadata(&path).unwrap().is_dir() {
                    out.push(format!("{rel}/"));
                    walk(&path, base, out);
                } else {
                    out.push(rel);
                }
            }
        }
        let mut out = Vec::new();
        walk(dir, dir, &mut out);
        out.sort();
        out
    }

    #[test]
    fn a_write_into_cicy_is_refused_by_its_text_or_its_identity() {
        let (dir, ws) = ws();
        std::fs::create_dir_all(dir.path().join(".cicy/history/sub")).unwrap();
        std::fs::create_dir_all(dir.path().join("ok")).unwrap();
        std::os::unix::fs::symlink(".cicy/history", dir.path().join("hist")).unwrap();
        std::os::unix::fs::symlink(".cicy", dir.path().join("c")).unwrap();
        std::os::unix::fs::symlink(".", dir.path().join("self")).unwrap();
        let before = tree(dir.path());
        let write = |p: &str| ws.parent_for_write(&ws.resolve(p).unwrap(), p).map(|(_, name)| name).map_err(|e| e.to_string());
        for p in [
            ".cicy/turn.lock",
            ".cicy/memory/m.md",
            ".cicy/running/42.json",
            ".cicy/skills/free/SKILL.md",
            ".cicy/plan.json",
            ".cicy",
            "a/../.cicy/x",
            ".cicy/history/sub/new/x",
        ] {
            assert_eq!(write(p), Err(refused(p)), "by its text: {p}");
        }
        for p in ["hist/sub/new/x", "c/turn.lock", "c/skills/free/SKILL.md", "self/.cicy", "self/.cicy/new/x", "self/c/x"] {
            assert_eq!(write(p), Err(refused(p)), "by its identity: {p}");
        }
        assert_eq!(tree(dir.path()), before, "no folder was made");
        assert_eq!(write("ok/deep/f"), Ok("f".into()));
        assert!(dir.path().join("ok/deep").is_dir());
        assert_eq!(ws.parent_for_write(Path::new(""), ".").unwrap_err().to_string(), "error: . is a directory");
    }

    #[test]
    fn a_refused_write_makes_no_folder_even_where_cicy_does_not_exist_yet() {
        let (dir, ws) = ws();
        std::os::unix::fs::symlink(".", dir.path().join("self")).unwrap();
        let write = |p: &str| ws.parent_for_write(&ws.resolve(p).unwrap(), p).map(|(_, name)| name).map_err(|e| e.to_string());
        for p in [".cicy/checkpoints/x/meta.json", ".cicy/skills/s/SKILL.md", "self/.cicy/checkpoints/x/meta.json", "self/.cicy"] {
            assert_eq!(write(p), Err(refused(p)), "{p}");
        }
        std::fs::create_dir(dir.path().join(".cicy")).unwrap();
        assert_eq!(write("self/.cicy/checkpoints/x/meta.json"), Err(refused("self/.cicy/checkpoints/x/meta.json")));
        assert_eq!(tree(dir.path()), [".cicy/", "self"]);
    }

    #[test]
    fn an_edit_creates_no_missing_parent_folder() {
        let (dir, ws) = ws();
        let err = ws.parent_for_edit(Path::new("a/b/f"), "a/b/f").unwrap_err().to_string();
        assert_eq!(err, "error: not found: a/b/f");
        assert_eq!(
            ws.parent_for_edit(Path::new(".cicy/plan.json"), ".cicy/plan.json").unwrap_err().to_string(),
            refused(".cicy/plan.json")
        );
        assert!(tree(dir.path()).is_empty());
    }
}
