//! The workspace side of `share_file` (Choruz B7; docs/design.md §11 "Commands"): which paths may
//! be shared, whether a file is text or binary, and the reply texts. Delivering the file is the
//! handler's; this only reads the workspace.

use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Extensions shared as binary whatever the bytes (Choruz B7).
pub const BINARY_EXTENSIONS: [&str; 18] =
    ["png", "jpg", "jpeg", "gif", "webp", "svg", "pdf", "zip", "tar", "gz", "mp4", "mp3", "wav", "ogg", "wasm", "exe", "bin", "ico"];

/// The largest file `share_file` takes, in bytes (docs/design.md §11 [chosen]: 25 MB).
pub const MAX_SHARE_BYTES: u64 = 25 * 1024 * 1024;

/// Why a `share_file` path is refused; Choruz ignores the command with a warning.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShareError {
    #[error("share_file: {path:?} is absolute; give a path relative to the workspace")]
    Absolute { path: String },
    #[error("share_file: {path:?} contains `..` or a NUL byte")]
    Forbidden { path: String },
    #[error("share_file: {path:?} does not name a file in the workspace")]
    Missing { path: String },
    #[error("share_file: {path:?} leads outside the workspace")]
    Escapes { path: String },
    #[error("share_file: {path:?} is {size} bytes, more than the 25 MB limit")]
    TooLarge { path: String, size: u64 },
}

/// The real path of the regular file `rel` names inside `workspace`: refused when absolute,
/// with a `..` component or a NUL, missing, not a regular file, over [`MAX_SHARE_BYTES`], or
/// resolving (through symlinks) outside the workspace.
pub fn resolve(workspace: &Path, rel: &str) -> Result<PathBuf, ShareError> {
    let path = rel.to_string();
    let relative = Path::new(rel);
    if relative.is_absolute() {
        return Err(ShareError::Absolute { path });
    }
    if rel.contains('\0') || relative.components().any(|c| c == Component::ParentDir) {
        return Err(ShareError::Forbidden { path });
    }
    let missing = || ShareError::Missing { path: rel.to_string() };
    let root = fs::canonicalize(workspace).map_err(|_| missing())?;
    let real = fs::canonicalize(root.join(relative)).map_err(|_| missing())?;
    if !real.starts_with(&root) {
        return Err(ShareError::Escapes { path });
    }
    let meta = fs::metadata(&real).map_err(|_| missing())?;
    if !meta.is_file() {
        return Err(missing());
    }
    if meta.len() > MAX_SHARE_BYTES {
        return Err(ShareError::TooLarge { path, size: meta.len() });
    }
    Ok(real)
}

/// Whether `path` is shared as binary: an extension of [`BINARY_EXTENSIONS`] (any case) or a
/// NUL byte in its first 8 KB. An unreadable file counts as binary (it is never inlined).
pub fn is_binary(path: &Path) -> bool {
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    if ext.is_some_and(|e| BINARY_EXTENSIONS.contains(&e.as_str())) {
        return true;
    }
    let mut head = Vec::with_capacity(8192);
    match fs::File::open(path).and_then(|f| f.take(8192).read_to_end(&mut head)) {
        Ok(_) => head.contains(&0),
        Err(_) => true,
    }
}

/// The reply for a text file: `**<name>**`, a newline, the content in a fenced block. The fence
/// is one backtick longer than the longest backtick run inside (at least three), so the content
/// cannot close it early (Choruz always uses three).
pub fn text_reply(name: &str, content: &str) -> String {
    let longest = content.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat((longest + 1).max(3));
    let newline = if content.ends_with('\n') { "" } else { "\n" };
    format!("**{name}**\n{fence}\n{content}{newline}{fence}")
}

/// The reply for a binary file sent to a group: `📎 <name> (<size> bytes)` (Choruz B7).
pub fn binary_reply(name: &str, size: u64) -> String {
    format!("📎 {name} ({size} bytes)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_inside_the_workspace_are_shared() {
        let ws = tempfile::tempdir().unwrap();
        fs::create_dir(ws.path().join("docs")).unwrap();
        fs::write(ws.path().join("docs/a.md"), "hi").unwrap();
        std::os::unix::fs::symlink("/etc", ws.path().join("link")).unwrap();
        let real = fs::canonicalize(ws.path().join("docs/a.md")).unwrap();
        assert_eq!(resolve(ws.path(), "docs/a.md"), Ok(real.clone()));
        assert_eq!(resolve(ws.path(), "./docs//a.md"), Ok(real));
        let err = |p: &str| resolve(ws.path(), p).unwrap_err().to_string();
        assert_eq!(err("../x"), "share_file: \"../x\" contains `..` or a NUL byte");
        assert_eq!(err("docs/../docs/a.md"), "share_file: \"docs/../docs/a.md\" contains `..` or a NUL byte");
        assert_eq!(err("/etc/passwd"), "share_file: \"/etc/passwd\" is absolute; give a path relative to the workspace");
        assert_eq!(err("link/passwd"), "share_file: \"link/passwd\" leads outside the workspace");
        assert_eq!(err("a\0b"), "share_file: \"a\\0b\" contains `..` or a NUL byte");
        assert_eq!(err("docs"), "share_file: \"docs\" does not name a file in the workspace");
        assert_eq!(err("nope.txt"), "share_file: \"nope.txt\" does not name a file in the workspace");
    }

    #[test]
    fn binary_by_extension_or_nul_byte() {
        let ws = tempfile::tempdir().unwrap();
        let file = |name: &str, bytes: &[u8]| {
            let p = ws.path().join(name);
            fs::write(&p, bytes).unwrap();
            p
        };
        assert!(is_binary(&file("logo.PNG", b"text really")));
        assert!(is_binary(&file("blob.dat", b"ab\0cd")));
        assert!(!is_binary(&file("notes.md", "plain ✓ text".as_bytes())));
    }

    #[test]
    fn replies_have_the_choruz_shapes() {
        assert_eq!(text_reply("a.md", "hi\n"), "**a.md**\n```\nhi\n```");
        assert_eq!(text_reply("b.md", "x ```` y"), "**b.md**\n`````\nx ```` y\n`````");
        assert_eq!(binary_reply("logo.png", 2048), "📎 logo.png (2048 bytes)");
    }
}
