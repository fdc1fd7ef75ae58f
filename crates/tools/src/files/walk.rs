//! The workspace walk shared by `grep` and `glob`, and the listing tools `glob {pattern, path?}`
//! and `ls {path?}` (docs/design.md §12, CMDC A7).
//!
//! Owns the walk's rules: the `ignore` crate's walker with no symlink following, depth 25, the
//! CMDC skip list, `.cicy/{history,outbox,events,checkpoints}` left out, and no ignore files
//! read (`.gitignore` is not consulted: the walker would read it by path, outside the confined
//! opens). The walker lists folders by path, so each entry is confirmed beneath the workspace
//! through the workspace handle before it is reported or entered: an entry met through a folder
//! swapped for a link to outside fails that check and is dropped with everything under it.
//! Reads no file contents (that is `super::grep`, through `super::read::open_regular`).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_std::fs::Dir;
use globset::GlobBuilder;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::sandbox::{FileError, Workspace, STATE_DIR};
use super::{folder_path, required_str, CallError};

/// Folders no walk enters below its start (CMDC grep skip list).
pub const SKIP_DIRS: [&str; 14] = [
    ".git",
    ".hg",
    ".svn",
    "_build",
    "deps",
    "node_modules",
    ".elixir_ls",
    ".vscode",
    ".idea",
    "__pycache__",
    ".mypy_cache",
    "vendor",
    ".bundle",
    "tmp",
];

/// The folders of the runtime's bulky state under [`STATE_DIR`] that no walk enters below its
/// start **[chosen]**: conversations, the outbox, the event log, checkpoints.
pub const STATE_SKIPPED: [&str; 4] = ["history", "outbox", "events", "checkpoints"];

/// Deepest level a walk goes below its start (CMDC: 25).
pub const MAX_DEPTH: usize = 25;

/// Most paths `glob` returns (CMDC `Sandbox.Local`: 500).
pub const GLOB_CAP: usize = 500;

/// Most entries `ls` shows **[chosen]**.
pub const LS_CAP: usize = 1000;

/// One entry met by [`walk`], as it was (not following a symlink) when confirmed beneath.
#[derive(Debug)]
pub struct Entry {
    /// Relative to the workspace.
    pub rel: PathBuf,
    pub is_dir: bool,
    pub is_file: bool,
}

/// Calls `visit` for each entry below the folder `start` (relative to the workspace), sorted by
/// name, parents before children, until `visit` breaks. Symlinks are reported (neither file nor
/// folder) but not followed. Unreadable folders are skipped.
pub fn walk(
    ws: &Workspace,
    start: &Path,
    cancel: &CancellationToken,
    mut visit: impl FnMut(Entry) -> ControlFlow<()>,
) -> Result<(), CallError> {
    let root = ws.root().to_path_buf();
    let dir = Arc::new(ws.dir().try_clone().map_err(|e| FileError::from_io(e, ".")).map_err(CallError::File)?);
    let filter_root = root.clone();
    let walker = ignore::WalkBuilder::new(root.join(start))
        .standard_filters(false)
        .follow_links(false)
        .max_depth(Some(MAX_DEPTH))
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |entry| entry.depth() == 0 || admitted(&dir, &filter_root, entry))
        .build();
    for entry in walker {
        if cancel.is_cancelled() {
            return Err(CallError::Cancelled);
        }
        let Ok(entry) = entry else { continue };
        if entry.depth() == 0 {
            continue;
        }
        let (Ok(rel), Some(kind)) = (entry.path().strip_prefix(&root), entry.file_type()) else { continue };
        let found = Entry { rel: rel.to_path_buf(), is_dir: kind.is_dir(), is_file: kind.is_file() };
        if visit(found).is_break() {
            break;
        }
    }
    Ok(())
}

/// Whether the walk keeps `entry`: not a skipped folder, and found beneath the
/// workspace through its handle, of the same type the walker saw.
fn admitted(dir: &Dir, root: &Path, entry: &ignore::DirEntry) -> bool {
    let (Ok(rel), Some(kind)) = (entry.path().strip_prefix(root), entry.file_type()) else { return false };
    if kind.is_dir() {
        let name = entry.file_name();
        if SKIP_DIRS.iter().any(|skip| name == *skip) || STATE_SKIPPED.iter().any(|area| rel == Path::new(STATE_DIR).join(area)) {
            return false;
        }
    }
    dir.symlink_metadata(rel)
        .is_ok_and(|meta| meta.is_dir() == kind.is_dir() && meta.is_file() == kind.is_file() && meta.is_symlink() == kind.is_symlink())
}

/// Workspace paths below `path` whose path relative to `path` matches the glob `pattern`
/// (`globset` syntax with `*` not crossing `/`), one a line relative to the workspace, folders
/// with a trailing `/`, sorted by bytes; at most [`GLOB_CAP`], then a line
/// `[500 of N matches shown; narrow the pattern]`. No match gives `no matches`.
pub fn glob(ws: &Workspace, input: &Value, cancel: &CancellationToken) -> Result<String, CallError> {
    let pattern = required_str(input, "pattern")?;
    let shown = folder_path(input)?;
    let start = ws.resolve(shown)?;
    ws.open_dir(&start, shown)?;
    let matcher = GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| CallError::Pattern { what: "glob", message: e.kind().to_string() })?
        .compile_matcher();
    let mut found = Vec::new();
    walk(ws, &start, cancel, |entry| {
        if entry.rel.strip_prefix(&start).is_ok_and(|below| matcher.is_match(below)) {
            let slash = if entry.is_dir { "/" } else { "" };
            found.push(format!("{}{slash}", entry.rel.display()));
        }
        ControlFlow::Continue(())
    })?;
    if found.is_empty() {
        return Ok("no matches".to_owned());
    }
    found.sort();
    let total = found.len();
    found.truncate(GLOB_CAP);
    if total > GLOB_CAP {
        found.push(format!("[{GLOB_CAP} of {total} matches shown; narrow the pattern]"));
    }
    Ok(found.join("\n"))
}

/// The entries of folder `path`, one a line sorted by name: `[dir]  name/`,
/// `[file] name (N bytes)`, or for a symlink what it leads to inside the workspace (`[dir]` or
/// `[file]` as above) and `[link] name` when it leads outside or nowhere; other kinds are
/// `[other] name`. An empty folder gives `(empty folder)`; past [`LS_CAP`] entries a line
/// `[1000 of N entries shown]` ends the list.
pub fn ls(ws: &Workspace, input: &Value) -> Result<String, CallError> {
    let shown = folder_path(input)?;
    let rel = ws.resolve(shown)?;
    let dir = ws.open_dir(&rel, shown)?;
    let io_err = |e| CallError::File(FileError::from_io(e, shown));
    let mut entries = Vec::new();
    for entry in dir.entries().map_err(io_err)? {
        let entry = entry.map_err(io_err)?;
        let name = entry.file_name();
        let kind = entry.file_type().map_err(io_err)?;
        let meta = if kind.is_symlink() { ws.dir().metadata(rel.join(&name)).ok() } else { entry.metadata().ok() };
        let label = name.to_string_lossy();
        let line = match meta {
            Some(m) if m.is_dir() => format!("[dir]  {label}/"),
            Some(m) if m.is_file() => format!("[file] {label} ({} bytes)", m.len()),
            _ if kind.is_symlink() => format!("[link] {label}"),
            _ => format!("[other] {label}"),
        };
        entries.push((name, line));
    }
    if entries.is_empty() {
        return Ok("(empty folder)".to_owned());
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let total = entries.len();
    let mut lines: Vec<String> = entries.into_iter().take(LS_CAP).map(|(_, line)| line).collect();
    if total > LS_CAP {
        lines.push(format!("[{LS_CAP} of {total} entries shown]"));
    }
    Ok(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::os::unix::fs::symlink;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        for d in ["src/a", "node_modules/x", ".cicy/history", ".cicy/memory", "docs"] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        for (f, body) in [
            ("src/main.rs", "fn main() {}\n"),
            ("src/a/lib.rs", "x"),
            ("node_modules/x/i.rs", ""),
            (".cicy/history/current.json", "{}"),
            (".cicy/memory/m.md", "m"),
            ("README.md", "hi"),
        ] {
            std::fs::write(p.join(f), body).unwrap();
        }
        symlink("src", p.join("code")).unwrap();
        symlink("/etc", p.join("etc")).unwrap();
        symlink("missing", p.join("dangling")).unwrap();
        dir
    }

    fn call(dir: &Path, f: fn(&Workspace, &Value) -> Result<String, CallError>, input: Value) -> String {
        f(&Workspace::open(dir).unwrap(), &input).unwrap_or_else(|e| e.to_string())
    }

    fn glob_in(dir: &Path, input: Value) -> String {
        glob(&Workspace::open(dir).unwrap(), &input, &CancellationToken::new()).unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn glob_matches_below_its_folder_sorted_skipping_the_skip_list_and_links() {
        let dir = tree();
        assert_eq!(glob_in(dir.path(), json!({"pattern": "**/*.rs"})), "src/a/lib.rs\nsrc/main.rs");
        assert_eq!(glob_in(dir.path(), json!({"pattern": "*.rs", "path": "src"})), "src/main.rs");
        assert_eq!(glob_in(dir.path(), json!({"pattern": "*"})), ".cicy/\nREADME.md\ncode\ndangling\ndocs/\netc\nsrc/");
        assert_eq!(glob_in(dir.path(), json!({"pattern": "**/*.{md,json}"})), ".cicy/memory/m.md\nREADME.md");
        assert_eq!(glob_in(dir.path(), json!({"pattern": "*.rs", "path": "code"})), "code/main.rs");
        assert_eq!(glob_in(dir.path(), json!({"pattern": "*.py"})), "no matches");
        assert_eq!(glob_in(dir.path(), json!({"pattern": "*", "path": "etc"})), "error: path out of bounds: etc");
        assert_eq!(
            glob_in(dir.path(), json!({"pattern": "a[", "path": "src"})),
            "error: invalid glob: unclosed character class; missing ']'"
        );
    }

    #[test]
    fn glob_caps_at_500() {
        let dir = tempfile::tempdir().unwrap();
        for n in 0..501 {
            std::fs::write(dir.path().join(format!("f{n:03}")), "").unwrap();
        }
        let out = glob_in(dir.path(), json!({"pattern": "f*"}));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            (lines.len(), lines[0], lines[499], lines[500]),
            (501, "f000", "f499", "[500 of 501 matches shown; narrow the pattern]")
        );
    }

    #[test]
    fn ls_lists_sorted_kinds_sizes_and_where_links_lead() {
        let dir = tree();
        assert_eq!(
            call(dir.path(), ls, json!({})),
            "[dir]  .cicy/\n[file] README.md (2 bytes)\n[dir]  code/\n[link] dangling\n[dir]  docs/\n[link] etc\n[dir]  node_modules/\n[dir]  src/"
        );
        assert_eq!(call(dir.path(), ls, json!({"path": "code"})), "[dir]  a/\n[file] main.rs (13 bytes)");
        assert_eq!(call(dir.path(), ls, json!({"path": "docs"})), "(empty folder)");
        assert_eq!(call(dir.path(), ls, json!({"path": "etc"})), "error: path out of bounds: etc");
        assert_eq!(call(dir.path(), ls, json!({"path": "README.md"})), "error: README.md is not a directory");
    }
}
