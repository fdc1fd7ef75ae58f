//! `grep {pattern, path?, include?, context_lines=2, max_results=50}` (docs/design.md §12, CMDC A7):
//! regex search of file contents beneath the workspace.
//!
//! Owns the search and its output. Matching is `grep-regex` + `grep-searcher` (line-oriented,
//! with before/after context); files come from `super::walk::walk` (skip list, depth 25,
//! confined), and each is opened through the workspace handle (`super::read::open_regular`), so
//! a file swapped for a link to outside is not read. Writes nothing.
//!
//! Output format **[chosen]**, ripgrep's separators with read_file's `N|text`: a matching line is
//! `path:N|text`, a context line `path-N|text`, and `--` stands between groups that are not
//! adjacent (only when context is shown); `path` is relative to the workspace. A line longer
//! than 500 bytes is cut and ends in `…`. A binary file (a NUL byte in it) is not searched further
//! than its first NUL; one found in the first buffer is skipped.

use std::io;
use std::ops::ControlFlow;
use std::path::Path;

use globset::{GlobBuilder, GlobMatcher};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::read::{open_regular, trim_end};
use super::sandbox::Workspace;
use super::{folder_path, optional_str, required_str, whole_number, CallError, OUTPUT_CAP_BYTES};
use crate::output::{decode_lossy, invalid_utf8_note};

/// Default and largest `max_results` (CMDC: default 50; `Sandbox.Local` caps at 100).
pub const DEFAULT_MAX_RESULTS: u64 = 50;
pub const MAX_RESULTS_CAP: u64 = 100;
/// Default `context_lines` (CMDC); larger values are clamped to [`CONTEXT_CAP`] **[chosen]**.
pub const DEFAULT_CONTEXT: u64 = 2;
pub const CONTEXT_CAP: u64 = 20;
/// Bytes of one line shown before it is cut **[chosen]**.
pub const LINE_CAP_BYTES: usize = 500;

/// Searches `path` (a file, or every file below a folder; default the workspace) for lines
/// matching `pattern`, optionally only in files whose name matches the glob `include` (matched
/// against the path relative to the workspace when it holds a `/`). Lines as in the module doc,
/// files in walk order (sorted by name). Stops after `max_results` matching lines, adding
/// `[stopped at N matches; narrow the pattern or the path]` when there were more, or before
/// 50 KiB with `[output cut at 50 KiB; narrow the pattern or the path]`. No match gives
/// `no matches`. Errors: bad input, an invalid pattern or include, out of bounds, not found.
pub fn run(ws: &Workspace, input: &Value, cancel: &CancellationToken) -> Result<String, CallError> {
    let pattern = required_str(input, "pattern")?;
    let shown = folder_path(input)?;
    let include = optional_str(input, "include")?.map(include_matcher).transpose()?;
    let context = whole_number(input, "context_lines", 0, DEFAULT_CONTEXT)?.min(CONTEXT_CAP);
    let max = whole_number(input, "max_results", 1, DEFAULT_MAX_RESULTS)?.min(MAX_RESULTS_CAP);
    let matcher = RegexMatcherBuilder::new()
        .line_terminator(Some(b'\n'))
        .build(pattern)
        .map_err(|e| CallError::Pattern { what: "pattern", message: e.to_string() })?;
    let context = usize::try_from(context).unwrap_or(0);
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .before_context(context)
        .after_context(context)
        .binary_detection(BinaryDetection::quit(0))
        .build();
    let mut report = Report { out: String::new(), matches: 0, max, context: context > 0, ..Report::default() };
    let start = ws.resolve(shown)?;
    if ws.dir().metadata(super::sandbox::dot(&start)).map_err(|e| super::sandbox::FileError::from_io(e, shown))?.is_file() {
        search_one(ws, &start, &matcher, &mut searcher, &mut report)?;
    } else {
        ws.open_dir(&start, shown)?;
        super::walk::walk(ws, &start, cancel, |entry| {
            let wanted = entry.is_file && include.as_ref().is_none_or(|glob| included(glob, &entry.rel));
            // A file that vanished or was swapped for a link to outside since the walk is skipped.
            if wanted && search_one(ws, &entry.rel, &matcher, &mut searcher, &mut report).is_err() {
                return ControlFlow::Continue(());
            }
            if report.limited || report.full {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
    }
    Ok(report.finish())
}

fn include_matcher(glob: &str) -> Result<(GlobMatcher, bool), CallError> {
    let compiled = GlobBuilder::new(glob)
        .literal_separator(true)
        .build()
        .map_err(|e| CallError::Pattern { what: "include", message: e.kind().to_string() })?;
    Ok((compiled.compile_matcher(), glob.contains('/')))
}

fn included((glob, whole_path): &(GlobMatcher, bool), rel: &Path) -> bool {
    if *whole_path {
        glob.is_match(rel)
    } else {
        rel.file_name().is_some_and(|name| glob.is_match(name))
    }
}

/// Searches the file `rel` into `report`.
fn search_one(ws: &Workspace, rel: &Path, matcher: &RegexMatcher, searcher: &mut Searcher, report: &mut Report) -> Result<(), CallError> {
    let path = rel.display().to_string();
    let file = open_regular(ws, rel, &path)?.into_std();
    report.before.clear();
    report.new_file = true;
    searcher
        .search_file(matcher, &file, FileSink { report, path: &path })
        .map_err(|e| CallError::File(super::sandbox::FileError::from_io(e, &path)))
}

/// The output so far and the limits.
#[derive(Debug, Default)]
struct Report {
    out: String,
    matches: u64,
    max: u64,
    /// Whether context lines are shown (and so `--` separators).
    context: bool,
    /// A match beyond `max` was seen.
    limited: bool,
    /// The byte cap was reached.
    full: bool,
    /// Before-context lines of a match not yet seen: shown only if that match is.
    before: Vec<(u64, Vec<u8>)>,
    /// A `--` is due before the next line.
    new_group: bool,
    /// The next line starts a new file (a new group when context is shown).
    new_file: bool,
    invalid: usize,
}

impl Report {
    /// Room kept under the cap for the closing note.
    const ROOM: usize = 100;

    /// Adds one line (`sep` is `:` for a match, `-` for context); false once the cap is hit.
    fn line(&mut self, path: &str, sep: char, number: u64, bytes: &[u8]) -> bool {
        let bytes = trim_end(bytes);
        let (text, invalid) = decode_lossy(bytes);
        let mut end = text.len().min(LINE_CAP_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let cut = if end < text.len() { "…" } else { "" };
        let group = self.context && !self.out.is_empty() && (self.new_group || self.new_file);
        let entry = format!("{}{path}{sep}{number}|{}{cut}\n", if group { "--\n" } else { "" }, &text[..end]);
        if self.out.len() + entry.len() > OUTPUT_CAP_BYTES - Self::ROOM {
            self.full = true;
            return false;
        }
        self.out.push_str(&entry);
        self.invalid += invalid;
        self.new_group = false;
        self.new_file = false;
        true
    }

    fn finish(mut self) -> String {
        if self.out.is_empty() {
            return "no matches".to_owned();
        }
        if self.full {
            self.out.push_str(&format!("[output cut at {} KiB; narrow the pattern or the path]\n", OUTPUT_CAP_BYTES / 1024));
        } else if self.limited {
            self.out.push_str(&format!("[stopped at {} matches; narrow the pattern or the path]\n", self.max));
        }
        if let Some(note) = invalid_utf8_note(self.invalid) {
            self.out.push_str(&note);
        }
        self.out.trim_end_matches('\n').to_owned()
    }
}

struct FileSink<'r, 'p> {
    report: &'r mut Report,
    path: &'p str,
}

impl Sink for FileSink<'_, '_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, io::Error> {
        if self.report.matches >= self.report.max {
            self.report.limited = true;
            return Ok(false);
        }
        for (number, line) in std::mem::take(&mut self.report.before) {
            if !self.report.line(self.path, '-', number, &line) {
                return Ok(false);
            }
        }
        self.report.matches += 1;
        Ok(self.report.line(self.path, ':', mat.line_number().unwrap_or(0), mat.bytes()))
    }

    fn context(&mut self, _: &Searcher, context: &SinkContext<'_>) -> Result<bool, io::Error> {
        let number = context.line_number().unwrap_or(0);
        match context.kind() {
            SinkContextKind::Before => {
                self.report.before.push((number, context.bytes().to_vec()));
                Ok(true)
            }
            SinkContextKind::After => Ok(self.report.line(self.path, '-', number, context.bytes())),
            SinkContextKind::Other => Ok(true),
        }
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, io::Error> {
        self.report.new_group = true;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn grep(dir: &Path, input: Value) -> String {
        run(&Workspace::open(dir).unwrap(), &input, &CancellationToken::new()).unwrap_or_else(|e| e.to_string())
    }

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        for d in ["src", "node_modules/m", ".cicy/history", "docs"] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        let body: String = (1..=12).map(|n| if n == 3 || n == 10 { format!("hit {n}\n") } else { format!("line {n}\n") }).collect();
        std::fs::write(p.join("src/a.rs"), &body).unwrap();
        std::fs::write(p.join("docs/b.md"), "hit md\n").unwrap();
        std::fs::write(p.join("node_modules/m/c.rs"), "hit skipped\n").unwrap();
        std::fs::write(p.join(".cicy/history/current.json"), "hit history\n").unwrap();
        std::fs::write(p.join("bin"), b"hit\0binary").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", p.join("passwd")).unwrap();
        dir
    }

    #[test]
    fn matches_and_context_come_as_path_n_text_with_group_separators() {
        let dir = tree();
        assert_eq!(
            grep(dir.path(), json!({"pattern": "^hit"})),
            "docs/b.md:1|hit md\n--\nsrc/a.rs-1|line 1\nsrc/a.rs-2|line 2\nsrc/a.rs:3|hit 3\nsrc/a.rs-4|line 4\nsrc/a.rs-5|line 5\n--\nsrc/a.rs-8|line 8\nsrc/a.rs-9|line 9\nsrc/a.rs:10|hit 10\nsrc/a.rs-11|line 11\nsrc/a.rs-12|line 12"
        );
        assert_eq!(
            grep(dir.path(), json!({"pattern": "hit", "include": "*.rs", "context_lines": 0})),
            "src/a.rs:3|hit 3\nsrc/a.rs:10|hit 10"
        );
        assert_eq!(grep(dir.path(), json!({"pattern": "hit", "include": "docs/*", "context_lines": 0})), "docs/b.md:1|hit md");
        assert_eq!(
            grep(dir.path(), json!({"pattern": "hit", "path": "src/a.rs", "context_lines": 1, "max_results": 1})),
            "src/a.rs-2|line 2\nsrc/a.rs:3|hit 3\nsrc/a.rs-4|line 4\n[stopped at 1 matches; narrow the pattern or the path]"
        );
        assert_eq!(
            grep(dir.path(), json!({"pattern": "hit", "path": "node_modules", "context_lines": 0})),
            "node_modules/m/c.rs:1|hit skipped"
        );
        assert_eq!(grep(dir.path(), json!({"pattern": "root"})), "no matches");
        assert_eq!(grep(dir.path(), json!({"pattern": "root", "path": "passwd"})), "error: path out of bounds: passwd");
        assert_eq!(
            grep(dir.path(), json!({"pattern": "(", "path": "src"})),
            "error: invalid pattern: regex parse error:\n    (?:()\n    ^\nerror: unclosed group"
        );
        assert_eq!(
            grep(dir.path(), json!({"pattern": "x", "include": "{a"})),
            "error: invalid include: unclosed alternate group; missing '}' (maybe escape '{' with '[{]'?)"
        );
    }

    #[test]
    fn a_cancelled_turn_stops_the_walk() {
        let dir = tree();
        let cancel = CancellationToken::new();
        cancel.cancel();
        let out = run(&Workspace::open(dir.path()).unwrap(), &json!({"pattern": "hit"}), &cancel);
        assert_eq!(out.unwrap_err().to_string(), "cancelled by user");
    }

    #[test]
    fn long_lines_are_cut_and_the_output_stops_before_50_kib() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("long"), format!("{}\n", "é".repeat(400))).unwrap();
        assert_eq!(grep(dir.path(), json!({"pattern": "é"})), format!("long:1|{}…", "é".repeat(250)));
        // Every tenth line matches; with 5 lines of context each match shows 11 cut lines.
        let wide: String = (1..=200).map(|n| format!("{} {n} {}\n", if n % 10 == 0 { "hit" } else { "ctx" }, "w".repeat(600))).collect();
        std::fs::write(dir.path().join("x"), &wide).unwrap();
        let out = grep(dir.path(), json!({"pattern": "hit", "path": "x", "context_lines": 5}));
        assert!(out.len() <= OUTPUT_CAP_BYTES, "{}", out.len());
        assert!(out.ends_with("…\n[output cut at 50 KiB; narrow the pattern or the path]"));
        assert_eq!(out.lines().filter(|l| l.starts_with("x:")).count(), 10);
    }
}
