//! `write_file {path, content}` and `edit_file {path, old_string, new_string}` (docs/design.md §12,
//! CMDC A7): whole-file writes, atomic, beneath the workspace.
//!
//! Owns the atomic replace inside an open directory handle ([`write_atomic`]: a temp file
//! created in the same folder through the handle, fsync, rename, fsync of the folder) and the
//! exactly-one-match rule of `edit_file`. `cicy_store::fsutil::write_atomic` is not used because it
//! works on paths: here every step goes through the handle that the write guard checked
//! (`super::sandbox::Workspace::parent_for_write`), so nothing is re-resolved by name.

use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use serde_json::Value;

use super::sandbox::{FileError, Workspace};
use super::{required_str, CallError};

/// Writes `content` to `path` and says `created <p> (N bytes)` or `replaced <p> (N bytes)`.
/// Errors: bad input, a path that names a folder ([`file_path`]), out of bounds, inside `.cicy/`,
/// a symlink or a folder at `path`.
pub fn write_file(ws: &Workspace, input: &Value) -> Result<String, CallError> {
    let shown = required_str(input, "path")?;
    let content = required_str(input, "content")?;
    let rel = file_path(ws, shown, "write_file")?;
    let (parent, name) = ws.parent_for_write(&rel, shown)?;
    let existed = leaf(ws, &rel, &parent, &name, shown)?;
    write_atomic(&parent, &name, content.as_bytes()).map_err(|e| FileError::from_io(e, shown))?;
    let verb = if existed { "replaced" } else { "created" };
    Ok(format!("{verb} {shown} ({} bytes)", content.len()))
}

/// Replaces the one occurrence of `old_string` by `new_string` and says
/// `edited <p> (1 replacement, N bytes)` with the new size. Occurrences are counted overlapping
/// (`aa` occurs twice in `aaa`), so an ambiguous edit is refused. Errors: bad input (an empty
/// `old_string`), the write errors of [`write_file`], not found, a file that is not UTF-8,
/// `old_string not found in <p>`, and `old_string occurs N times in <p>; …`. A missing parent
/// folder is not created (not found).
pub fn edit_file(ws: &Workspace, input: &Value) -> Result<String, CallError> {
    let shown = required_str(input, "path")?;
    let old = required_str(input, "old_string")?;
    let new = required_str(input, "new_string")?;
    if old.is_empty() {
        return Err(CallError::Message("invalid input: \"old_string\" must not be empty".into()));
    }
    let rel = file_path(ws, shown, "edit_file")?;
    let (parent, name) = ws.parent_for_edit(&rel, shown)?;
    if !leaf(ws, &rel, &parent, &name, shown)? {
        return Err(FileError::NotFound(shown.to_owned()).into());
    }
    let mut bytes = Vec::new();
    parent
        .open_with(&name, OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK))
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| FileError::from_io(e, shown))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| CallError::Message(format!("error: {shown} is not UTF-8 text; edit_file edits text files")))?;
    let at = match occurrences(&text, old) {
        (0, _) => return Err(CallError::Message(format!("error: old_string not found in {shown}"))),
        (1, at) => at,
        (n, _) => {
            return Err(CallError::Message(format!(
                "error: old_string occurs {n} times in {shown}; include more surrounding text so it matches exactly once"
            )))
        }
    };
    let edited = format!("{}{new}{}", &text[..at], &text[at + old.len()..]);
    write_atomic(&parent, &name, edited.as_bytes()).map_err(|e| FileError::from_io(e, shown))?;
    Ok(format!("edited {shown} (1 replacement, {} bytes)", edited.len()))
}

/// `shown` resolved ([`Workspace::resolve`]) as the path of a file for `tool`. Refuses the empty
/// path (`invalid input: "path" must not be empty`) and, after the bounds check, a path whose last
/// part is empty, `.` or `..` (`newdir/`, `a/.`): it names a folder, and resolving it would drop
/// that part and write a file named like the folder.
fn file_path(ws: &Workspace, shown: &str, tool: &str) -> Result<PathBuf, CallError> {
    if shown.is_empty() {
        return Err(CallError::Message("invalid input: \"path\" must not be empty".into()));
    }
    let rel = ws.resolve(shown)?;
    if matches!(shown.rsplit('/').next(), Some("" | "." | "..")) {
        return Err(CallError::Message(format!("error: {shown} names a folder; {tool} needs a file path")));
    }
    Ok(rel)
}

/// How often `needle` occurs in `text`, overlaps counted, and where it first does.
fn occurrences(text: &str, needle: &str) -> (usize, usize) {
    let mut count = 0;
    let mut first = 0;
    let mut from = 0;
    while let Some(found) = text[from..].find(needle) {
        if count == 0 {
            first = from + found;
        }
        count += 1;
        // Step one character past the match start so overlapping matches are seen.
        from += found + text[from + found..].chars().next().map_or(1, char::len_utf8);
    }
    (count, first)
}

/// What is at `name` in `parent` (the folder of `rel`) now, without following a symlink:
/// `false` when nothing is, `true` for a regular file. A folder is an error, and so is a
/// symlink: out of bounds when its target leaves the workspace, else [`FileError::SymlinkLeaf`].
fn leaf(ws: &Workspace, rel: &Path, parent: &Dir, name: &OsStr, shown: &str) -> Result<bool, FileError> {
    match parent.symlink_metadata(name) {
        Ok(meta) if meta.is_symlink() => match ws.dir().metadata(rel).map_err(|e| FileError::from_io(e, shown)) {
            Err(escape @ FileError::OutOfBounds(_)) => Err(escape),
            _ => Err(FileError::SymlinkLeaf(shown.to_owned())),
        },
        Ok(meta) if meta.is_dir() => Err(FileError::IsDirectory(shown.to_owned())),
        Ok(meta) if !meta.is_file() => Err(FileError::NotRegular(shown.to_owned())),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(FileError::from_io(e, shown)),
    }
}

/// Replaces `name` in `parent` by `bytes` atomically: a temp file `.<name>.tmp-<random>` made
/// in `parent` (with the old file's permissions when there was one), written, fsynced, renamed
/// over `name`, then `parent` fsynced. A failure removes the temp file and leaves the old file.
pub fn write_atomic(parent: &Dir, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
    let tmp = format!(".{}.tmp-{:08x}", name.to_string_lossy(), rand::random::<u32>());
    let mut file = parent.open_with(&tmp, OpenOptions::new().write(true).create_new(true))?;
    let written = (|| {
        if let Ok(old) = parent.symlink_metadata(name) {
            if old.is_file() {
                file.set_permissions(old.permissions())?;
            }
        }
        file.write_all(bytes)?;
        file.sync_all()?;
        parent.rename(&tmp, parent, name)
    })();
    if let Err(e) = written {
        let _ = parent.remove_file(&tmp);
        return Err(e);
    }
    // The handle is an `O_PATH` one, which cannot be fsynced: open the folder itself.
    parent.open(".")?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn call(dir: &Path, f: fn(&Workspace, &Value) -> Result<String, CallError>, input: Value) -> String {
        f(&Workspace::open(dir).unwrap(), &input).unwrap_or_else(|e| e.to_string())
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn write_file_creates_parents_replaces_atomically_and_keeps_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        assert_eq!(call(p, write_file, json!({"path": "a/b/c.txt", "content": "hello"})), "created a/b/c.txt (5 bytes)");
        assert_eq!(std::fs::read_to_string(p.join("a/b/c.txt")).unwrap(), "hello");
        std::fs::set_permissions(p.join("a/b/c.txt"), std::fs::Permissions::from_mode(0o750)).unwrap();
        assert_eq!(call(p, write_file, json!({"path": "./a/b/c.txt", "content": ""})), "replaced ./a/b/c.txt (0 bytes)");
        assert_eq!(std::fs::read(p.join("a/b/c.txt")).unwrap(), b"");
        assert_eq!(std::fs::metadata(p.join("a/b/c.txt")).unwrap().permissions().mode() & 0o777, 0o750);
        assert_eq!(names(&p.join("a/b")), ["c.txt"], "no temp file is left");
        assert_eq!(call(p, write_file, json!({"path": "a", "content": "x"})), "error: a is a directory");
        assert_eq!(call(p, write_file, json!({"path": "a/b/c.txt/d", "content": "x"})), "error: a/b/c.txt/d is not a directory");
        assert_eq!(call(p, write_file, json!({"path": "x"})), "invalid input: \"content\" is required (a string)");
    }

    #[test]
    fn a_path_that_names_a_folder_or_nothing_is_refused_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::create_dir(p.join("a")).unwrap();
        std::fs::write(p.join("a/f"), "keep").unwrap();
        for path in ["newdir/", "a/new/", "a/.", "a/f/..", ".", "./"] {
            assert_eq!(
                call(p, write_file, json!({"path": path, "content": "x"})),
                format!("error: {path} names a folder; write_file needs a file path")
            );
            assert_eq!(
                call(p, edit_file, json!({"path": path, "old_string": "keep", "new_string": "x"})),
                format!("error: {path} names a folder; edit_file needs a file path")
            );
        }
        assert_eq!(
            call(p, write_file, json!({"path": "a/f/", "content": "x"})),
            "error: a/f/ names a folder; write_file needs a file path"
        );
        assert_eq!(call(p, write_file, json!({"path": "", "content": "x"})), "invalid input: \"path\" must not be empty");
        assert_eq!(
            call(p, edit_file, json!({"path": "", "old_string": "keep", "new_string": "x"})),
            "invalid input: \"path\" must not be empty"
        );
        assert_eq!(call(p, write_file, json!({"path": "../", "content": "x"})), "error: path out of bounds: ../", "bounds come first");
        assert_eq!(names(p), ["a"]);
        assert_eq!(names(&p.join("a")), ["f"]);
        assert_eq!(std::fs::read_to_string(p.join("a/f")).unwrap(), "keep");
    }

    #[test]
    fn edit_file_makes_no_folder_for_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        assert_eq!(call(p, edit_file, json!({"path": "x/y/z.txt", "old_string": "a", "new_string": "b"})), "error: not found: x/y/z.txt");
        assert!(names(p).is_empty());
    }

    #[test]
    fn a_symlink_leaf_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(p.join("real"), "keep").unwrap();
        symlink("real", p.join("inner")).unwrap();
        symlink("/etc/hostname", p.join("outer")).unwrap();
        symlink("/nonexistent-cicy-target", p.join("dangling")).unwrap();
        assert_eq!(
            call(p, write_file, json!({"path": "inner", "content": "x"})),
            "error: inner is a symlink; files are not written through symlinks"
        );
        assert_eq!(
            call(p, edit_file, json!({"path": "inner", "old_string": "keep", "new_string": "x"})),
            "error: inner is a symlink; files are not written through symlinks"
        );
        assert_eq!(call(p, write_file, json!({"path": "outer", "content": "x"})), "error: path out of bounds: outer");
        assert_eq!(call(p, write_file, json!({"path": "dangling", "content": "x"})), "error: path out of bounds: dangling");
        assert_eq!(std::fs::read_to_string(p.join("real")).unwrap(), "keep");
        assert!(std::fs::symlink_metadata(p.join("inner")).unwrap().is_symlink());
        assert!(!Path::new("/nonexistent-cicy-target").exists());
    }

    #[test]
    fn edit_file_replaces_exactly_one_occurrence() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(p.join("f"), "one two two three aaa").unwrap();
        let edit = |old: &str, new: &str| call(p, edit_file, json!({"path": "f", "old_string": old, "new_string": new}));
        assert_eq!(edit("four", "4"), "error: old_string not found in f");
        assert_eq!(edit("two", "2"), "error: old_string occurs 2 times in f; include more surrounding text so it matches exactly once");
        assert_eq!(edit("aa", "b"), "error: old_string occurs 2 times in f; include more surrounding text so it matches exactly once");
        assert_eq!(edit("", "b"), "invalid input: \"old_string\" must not be empty");
        assert_eq!(std::fs::read_to_string(p.join("f")).unwrap(), "one two two three aaa", "a refused edit writes nothing");
        assert_eq!(edit("two three", "3"), "edited f (1 replacement, 13 bytes)");
        assert_eq!(edit(" aaa", ""), "edited f (1 replacement, 9 bytes)");
        assert_eq!(std::fs::read_to_string(p.join("f")).unwrap(), "one two 3");
        assert_eq!(call(p, edit_file, json!({"path": "nope", "old_string": "a", "new_string": "b"})), "error: not found: nope");
        std::fs::write(p.join("bin"), b"\xff\xfe").unwrap();
        assert_eq!(
            call(p, edit_file, json!({"path": "bin", "old_string": "a", "new_string": "b"})),
            "error: bin is not UTF-8 text; edit_file edits text files"
        );
        assert_eq!(names(p), ["bin", "f"]);
    }
}
