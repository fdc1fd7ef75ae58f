//! The `files` tool group (docs/design.md §12, CMDC names and limits): `read_file`, `write_file`,
//! `edit_file`, `grep`, `glob`, `ls`.
//!
//! Owns the tools' names, descriptions, input schemas, input validation and dispatch. Each call
//! opens the workspace once ([`sandbox::Workspace`]) and does all its I/O relative to that handle
//! on a blocking thread: `read` reads, `write` writes and edits, `grep` searches, `walk` lists
//! (`glob`, `ls`). Must not touch the turn loop, the conversation or events; every failure is an
//! error result whose text the model reads.

pub mod grep;
pub mod read;
pub mod sandbox;
pub mod walk;
pub mod write;

use std::path::Path;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use self::sandbox::{FileError, Workspace};
use super::{Tool, ToolContext, ToolOutput};

pub const READ_FILE: &str = "read_file";
pub const WRITE_FILE: &str = "write_file";
pub const EDIT_FILE: &str = "edit_file";
pub const GREP: &str = "grep";
pub const GLOB: &str = "glob";
pub const LS: &str = "ls";

/// Output cap of `read_file` and `grep`, in bytes (CMDC: 50 KiB).
pub const OUTPUT_CAP_BYTES: usize = 50 * 1024;

/// The file tool called `name`, if it is one.
pub fn builtin(name: &str) -> Option<Arc<dyn Tool>> {
    Kind::named(name).map(|kind| Arc::new(FileTool(kind)) as Arc<dyn Tool>)
}

/// Runs file tool `name` on this thread (it blocks on file I/O): what the tool's `run` does on a
/// blocking thread, for callers that are not async. `workspace` is the agent's workspace folder,
/// `cancel` stops a long walk. A name that is not a file tool is an error result.
pub fn call(name: &str, input: &Value, workspace: &Path, cancel: &CancellationToken) -> ToolOutput {
    match Kind::named(name) {
        Some(kind) => execute(kind, input, workspace, cancel),
        None => ToolOutput::error(format!("error: `{name}` is not a file tool")),
    }
}

fn execute(kind: Kind, input: &Value, workspace: &Path, cancel: &CancellationToken) -> ToolOutput {
    let ran = Workspace::open(workspace).map_err(CallError::from).and_then(|ws| match kind {
        Kind::Read => read::run(&ws, input),
        Kind::Write => write::write_file(&ws, input),
        Kind::Edit => write::edit_file(&ws, input),
        Kind::Grep => grep::run(&ws, input, cancel),
        Kind::Glob => walk::glob(&ws, input, cancel),
        Kind::Ls => walk::ls(&ws, input),
    });
    match ran {
        Ok(text) => ToolOutput::ok(text),
        Err(e) => ToolOutput::error(e.to_string()),
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Read,
    Write,
    Edit,
    Grep,
    Glob,
    Ls,
}

impl Kind {
    fn named(name: &str) -> Option<Self> {
        Some(match name {
            READ_FILE => Self::Read,
            WRITE_FILE => Self::Write,
            EDIT_FILE => Self::Edit,
            GREP => Self::Grep,
            GLOB => Self::Glob,
            LS => Self::Ls,
            _ => return None,
        })
    }
}

#[derive(Debug)]
struct FileTool(Kind);

const PATH_NOTE: &str = "relative to the workspace (an absolute path inside it is accepted)";

impl Tool for FileTool {
    fn name(&self) -> &str {
        match self.0 {
            Kind::Read => READ_FILE,
            Kind::Write => WRITE_FILE,
            Kind::Edit => EDIT_FILE,
            Kind::Grep => GREP,
            Kind::Glob => GLOB,
            Kind::Ls => LS,
        }
    }

    fn description(&self) -> &str {
        match self.0 {
            Kind::Read => "Read a text file of the workspace. Lines come as `N|text` (N is the 1-based line number). At most 2000 lines or 50 KiB per call; a last line in brackets then gives the `offset` to continue from.",
            Kind::Write => "Write a whole file of the workspace (created or replaced atomically; missing parent folders are made). Use edit_file to change part of a file. Nothing under .cicy/ (the runtime's own state) can be written.",
            Kind::Edit => "Replace `old_string` by `new_string` in a file of the workspace. `old_string` must occur exactly once: include enough surrounding lines to make it unique. An empty `new_string` deletes it.",
            Kind::Grep => "Search file contents of the workspace with a regular expression (Rust regex syntax). Matching lines come as `path:N|text`, context lines as `path-N|text`, `--` between separate groups. Skips .git, node_modules, vendor, tmp and similar folders. Output is capped at 50 KiB.",
            Kind::Glob => "List workspace paths matching a glob (`*`, `**`, `?`, `[abc]`, `{a,b}`; `*` does not cross `/`), relative to the workspace and sorted; folders end in `/`. At most 500.",
            Kind::Ls => "List a folder of the workspace: `[dir]  name/`, `[file] name (N bytes)`, `[link] name` (a symlink leading outside the workspace or nowhere) or `[other] name` per entry, sorted by name.",
        }
    }

    fn input_schema(&self) -> Value {
        let path = |what: &str| json!({"type": "string", "description": format!("{what}, {PATH_NOTE}.")});
        match self.0 {
            Kind::Read => json!({"type": "object", "properties": {
                "path": path("The file"),
                "offset": {"type": "integer", "description": "First line to show, 1-based. Default 1."},
                "limit": {"type": "integer", "description": "Number of lines to show. Default and maximum 2000."}},
                "required": ["path"]}),
            Kind::Write => json!({"type": "object", "properties": {
                "path": path("The file"),
                "content": {"type": "string", "description": "The whole new content."}},
                "required": ["path", "content"]}),
            Kind::Edit => json!({"type": "object", "properties": {
                "path": path("The file"),
                "old_string": {"type": "string", "description": "The exact text to replace; must occur exactly once."},
                "new_string": {"type": "string", "description": "The replacement (empty deletes)."}},
                "required": ["path", "old_string", "new_string"]}),
            Kind::Grep => json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "Regular expression matched against each line."},
                "path": path("File or folder to search. Default: the whole workspace"),
                "include": {"type": "string", "description": "Only files whose name matches this glob, e.g. `*.rs` or `*.{ts,tsx}`."},
                "context_lines": {"type": "integer", "description": "Lines shown before and after each match. Default 2."},
                "max_results": {"type": "integer", "description": "Most matching lines shown. Default 50, at most 100."}},
                "required": ["pattern"]}),
            Kind::Glob => json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "Glob matched against paths relative to `path`, e.g. `**/*.rs`."},
                "path": path("Folder to search in. Default: the workspace")},
                "required": ["pattern"]}),
            Kind::Ls => json!({"type": "object", "properties": {
                "path": path("The folder. Default: the workspace")}}),
        }
    }

    fn run<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let kind = self.0;
            let input = input.clone();
            let workspace = ctx.workspace.clone();
            let cancel = ctx.cancel.clone();
            let joined = tokio::task::spawn_blocking(move || execute(kind, &input, &workspace, &cancel)).await;
            joined.unwrap_or_else(|e| ToolOutput::error(format!("error: the tool stopped: {e}")))
        })
    }
}

/// A tool's failure; `Display` is the error result's exact text.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    File(#[from] FileError),
    /// The whole text: a bad input (`invalid input: "path" is required (a string)`) or a
    /// refusal of what the file holds (`error: old_string not found in <p>`).
    #[error("{0}")]
    Message(String),
    /// A `grep` pattern or `include` / `glob` pattern that does not compile.
    #[error("error: invalid {what}: {message}")]
    Pattern { what: &'static str, message: String },
    #[error("cancelled by user")]
    Cancelled,
}

/// A required string field.
fn required_str<'a>(input: &'a Value, name: &str) -> Result<&'a str, CallError> {
    optional_str(input, name)?.ok_or_else(|| CallError::Message(format!("invalid input: \"{name}\" is required (a string)")))
}

/// An optional string field; absent and null are both `None`.
fn optional_str<'a>(input: &'a Value, name: &str) -> Result<Option<&'a str>, CallError> {
    match input.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(CallError::Message(format!("invalid input: \"{name}\" must be a string, got {other}"))),
    }
}

/// An optional whole number field at least `min`; absent and null give `default`.
fn whole_number(input: &Value, name: &str, min: u64, default: u64) -> Result<u64, CallError> {
    match input.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(got) => got
            .as_u64()
            .filter(|n| *n >= min)
            .ok_or_else(|| CallError::Message(format!("invalid input: \"{name}\" must be a whole number of at least {min}, got {got}"))),
    }
}

/// The `path` field for the listing tools: absent, null or empty mean the workspace.
fn folder_path(input: &Value) -> Result<&str, CallError> {
    Ok(optional_str(input, "path")?.filter(|p| !p.is_empty()).unwrap_or("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_tool_runs_through_its_name_and_reports_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::for_tests(dir.path());
        let run = |name: &'static str, input: Value| {
            let ctx = ctx.clone();
            async move { builtin(name).unwrap().run(&input, &ctx).await }
        };
        assert_eq!(run(WRITE_FILE, json!({"path": "a.txt", "content": "one\ntwo\n"})).await, ToolOutput::ok("created a.txt (8 bytes)"));
        assert_eq!(
            run(EDIT_FILE, json!({"path": "a.txt", "old_string": "two", "new_string": "2"})).await,
            ToolOutput::ok("edited a.txt (1 replacement, 6 bytes)")
        );
        assert_eq!(run(READ_FILE, json!({"path": "a.txt"})).await, ToolOutput::ok("1|one\n2|2"));
        assert_eq!(run(GREP, json!({"pattern": "^o"})).await, ToolOutput::ok("a.txt:1|one\na.txt-2|2"));
        assert_eq!(run(GLOB, json!({"pattern": "*.txt"})).await, ToolOutput::ok("a.txt"));
        assert_eq!(run(LS, json!({})).await, ToolOutput::ok("[file] a.txt (6 bytes)"));
        assert_eq!(run(READ_FILE, json!({})).await, ToolOutput::error("invalid input: \"path\" is required (a string)"));
        assert_eq!(run(READ_FILE, json!({"path": 3})).await, ToolOutput::error("invalid input: \"path\" must be a string, got 3"));
        assert_eq!(
            run(READ_FILE, json!({"path": "a.txt", "offset": 0})).await,
            ToolOutput::error("invalid input: \"offset\" must be a whole number of at least 1, got 0")
        );
        assert_eq!(run(LS, json!({"path": "../"})).await, ToolOutput::error("error: path out of bounds: ../"));
        assert!(builtin("shell").is_none());
        assert_eq!(
            call("shell", &json!({}), dir.path(), &CancellationToken::new()),
            ToolOutput::error("error: `shell` is not a file tool")
        );
        let gone = ToolContext::for_tests(&dir.path().join("missing"));
        let out = builtin(LS).unwrap().run(&json!({}), &gone).await;
        assert!(out.is_error && out.content.starts_with("error: the workspace cannot be opened: "), "{out:?}");
    }
}
