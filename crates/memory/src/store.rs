//! Memory files: `.cicy/memory/<slug>.md`, one per memory (docs/design.md §8 "Store").
//!
//! Owns the slug rule, writing a memory (front matter by the YAML serializer, a blank line, the
//! content), reading one tolerantly, listing the folder, moving files to `_archive/`, and the
//! 120 → 100 limit. Must not touch anything outside the memory folder: every path it builds is
//! the folder joined with a validated slug (no `/`, no `.`), so no text from a conversation can
//! name another place. MEMORY.md is `index.rs`'s, the buffer `buffer.rs`'s.
//!
//! Reading: gray_matter finds the front matter (with its YAML engine switched off); the text is
//! normalized first because gray_matter misses a front matter behind a BOM, silently treats an
//! unclosed one as body text, and its YAML engine rejects tab indentation and reads `007` as the
//! integer 7. The front matter is then read by yaml_serde into text fields taken as written, so
//! `yes`, `007` and dates stay what the person typed.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::{cut_at_char_boundary, MemoryError};
use cicy_store::fsutil;

/// cicy: over 120 memory files, the weakest move to `_archive/` …
pub const MAX_FILES: usize = 120;
/// … until 100 remain.
pub const KEEP_FILES: usize = 100;
/// cicy: a slug is at most 80 bytes.
pub const MAX_SLUG_BYTES: usize = 80;
/// Where archived and forgotten memories go (never deleted).
pub const ARCHIVE_DIR: &str = "_archive";
/// The index file (index.rs); never a memory.
pub const INDEX_FILE: &str = "MEMORY.md";
/// Salience used when a value is missing or outside 1–5 (docs/design.md §8).
pub const DEFAULT_SALIENCE: u8 = 3;

/// The kinds of memory the recognizer may write (docs/design.md §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemoryType {
    Preference,
    Fact,
    Person,
    Knowledge,
    Procedure,
    Constraint,
    Lesson,
}

impl MemoryType {
    pub const ALL: [MemoryType; 7] = [
        MemoryType::Preference,
        MemoryType::Fact,
        MemoryType::Person,
        MemoryType::Knowledge,
        MemoryType::Procedure,
        MemoryType::Constraint,
        MemoryType::Lesson,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MemoryType::Preference => "preference",
            MemoryType::Fact => "fact",
            MemoryType::Person => "person",
            MemoryType::Knowledge => "knowledge",
            MemoryType::Procedure => "procedure",
            MemoryType::Constraint => "constraint",
            MemoryType::Lesson => "lesson",
        }
    }

    /// Parses a type name, ignoring surrounding space and ASCII case.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        Self::ALL.into_iter().find(|t| t.as_str().eq_ignore_ascii_case(s))
    }
}

/// One memory. `mem_id` is always a valid slug and equals the file stem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub mem_id: String,
    pub kind: MemoryType,
    /// A short label (the recognizer's is at most 30 characters); may be empty.
    pub title: String,
    /// 1–5.
    pub salience: u8,
    pub tags: Vec<String>,
    /// RFC 3339 UTC of the last write by the runtime; whatever a person typed otherwise.
    pub updated: String,
    pub content: String,
}

/// A memory file as found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub record: Record,
    pub path: PathBuf,
    /// Last modification; hand edits count as recency.
    pub modified: SystemTime,
}

/// A `.md` file in the memory folder that cannot be read as a memory; it is skipped, never
/// deleted or rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadFile {
    pub path: PathBuf,
    pub reason: String,
}

/// Everything in the memory folder: readable memories (sorted by file name) and bad files.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub memories: Vec<Stored>,
    pub bad: Vec<BadFile>,
}

/// What [`write`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub path: PathBuf,
    /// A file with this slug existed (same slug = update).
    pub updated: bool,
    /// An existing file with this slug did not parse; it was moved here instead of overwritten.
    pub moved_aside: Option<PathBuf>,
}

/// The file slug of a mem_id: lowercased, every run of characters outside `[a-z0-9_-]` and Han
/// characters replaced by one `_`, trimmed of `_` and `-`, cut to 80 bytes on a character
/// boundary. `None` when nothing is left, or for `memory` (which would be MEMORY.md on a
/// case-insensitive file system).
pub fn slug(mem_id: &str) -> Option<String> {
    let mut out = String::with_capacity(mem_id.len());
    let mut in_run = false;
    for c in mem_id.to_lowercase().chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' || is_han(c) {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('_');
            in_run = true;
        }
    }
    let trim = |s: &str| s.trim_matches(|c| c == '_' || c == '-').to_string();
    let s = trim(cut_at_char_boundary(&trim(&out), MAX_SLUG_BYTES));
    (!s.is_empty() && s != "memory").then_some(s)
}

/// Han (CJK ideograph) characters: the unified blocks and their extensions, the compatibility
/// blocks and 〇.
fn is_han(c: char) -> bool {
    matches!(c as u32,
        0x3007 | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF
        | 0x20000..=0x2A6DF | 0x2A700..=0x2EBEF | 0x2F800..=0x2FA1F | 0x30000..=0x323AF)
}

/// The front matter as written (field order is the file's).
#[derive(Serialize)]
struct FrontMatterOut<'a> {
    mem_id: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    title: &'a str,
    salience: u8,
    tags: &'a [String],
    updated: &'a str,
}

/// The text of a memory file: `---`, the front matter (yaml_serde quotes whatever needs it, so
/// every value reads back as written), `---`, a blank line, the content, a newline.
pub fn render(r: &Record) -> Result<String, MemoryError> {
    let fm = FrontMatterOut {
        mem_id: &r.mem_id,
        kind: r.kind.as_str(),
        title: &r.title,
        salience: r.salience,
        tags: &r.tags,
        updated: &r.updated,
    };
    let yaml = serde_yaml::to_string(&fm).map_err(|e| MemoryError::Yaml(e.to_string()))?;
    Ok(format!("---\n{yaml}---\n\n{}\n", r.content.trim()))
}

/// Writes `r` to `<dir>/<mem_id>.md` atomically. An existing file with the same slug is
/// replaced (an update); one that does not parse is moved aside first, never overwritten.
/// Errors: [`MemoryError::InvalidId`] when `mem_id` is not a slug, I/O errors with the path.
pub fn write(dir: &Path, r: &Record) -> Result<Written, MemoryError> {
    if slug(&r.mem_id).as_deref() != Some(r.mem_id.as_str()) {
        return Err(MemoryError::InvalidId(r.mem_id.clone()));
    }
    let path = dir.join(format!("{}.md", r.mem_id));
    let mut moved_aside = None;
    let existed = path.exists();
    if existed && read(&path).is_err() {
        moved_aside = Some(fsutil::move_aside(&path).map_err(|e| MemoryError::io(&path, e))?);
    }
    let text = render(r)?;
    fsutil::write_atomic(&path, text.as_bytes()).map_err(|e| MemoryError::io(&path, e))?;
    Ok(Written { path, updated: existed, moved_aside })
}

/// The front matter as read: text fields are taken as written (`007`, `yes`, dates stay text);
/// salience and tags accept any YAML and are interpreted leniently; unknown keys are ignored.
#[derive(Deserialize)]
struct FrontMatterIn {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    salience: Option<serde_yaml::Value>,
    #[serde(default)]
    tags: Option<serde_yaml::Value>,
    #[serde(default)]
    updated: Option<String>,
}

/// gray_matter engine that parses nothing: we only want the split (yaml_serde reads the text).
struct SplitOnly;

impl gray_matter::engine::Engine for SplitOnly {
    fn parse(_content: &str) -> gray_matter::Result<gray_matter::Pod> {
        Ok(gray_matter::Pod::Null)
    }
}

/// Reads one memory file. The file stem is the mem_id and must be a slug. Never panics; every
/// problem is a [`BadFile`] with a reason a person can act on.
pub fn read(path: &Path) -> Result<Stored, BadFile> {
    let bad = |reason: String| BadFile { path: path.to_path_buf(), reason };
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    match slug(stem) {
        Some(s) if s == stem => {}
        Some(s) => return Err(bad(format!("the file name is not a memory id; rename it to `{s}.md`"))),
        None => return Err(bad("the file name is not a memory id (use lowercase letters, digits, `_`, `-`)".into())),
    }
    // One open and an fstat: this runs for every memory file on every rebuild.
    let (bytes, modified) = std::fs::File::open(path)
        .and_then(|mut f| {
            let meta = f.metadata()?;
            let mut b = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
            std::io::Read::read_to_end(&mut f, &mut b)?;
            Ok((b, meta.modified()?))
        })
        .map_err(|e| bad(format!("cannot read: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|e| bad(format!("not UTF-8 (invalid byte at offset {})", e.utf8_error().valid_up_to())))?;
    let record = parse(stem, &text).map_err(|e| bad(e.to_string()))?;
    Ok(Stored { record, path: path.to_path_buf(), modified })
}

/// Parses the text of memory `mem_id`: BOM, CRLF/CR line ends and tab indentation in the front
/// matter are tolerated; a missing front matter, an unclosed one, bad YAML, an unknown type or
/// an empty content are errors naming the problem ([`RecordError`]).
pub fn parse(mem_id: &str, text: &str) -> Result<Record, RecordError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let text: std::borrow::Cow<'_, str> =
        if text.contains('\r') { text.replace("\r\n", "\n").replace('\r', "\n").into() } else { text.into() };
    let mut lines = text.split('\n');
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(RecordError::NoFrontMatter);
    }
    let Some(close) = lines.position(|l| l.trim_end() == "---") else {
        return Err(RecordError::Unclosed);
    };
    let normalized = expand_front_matter_tabs(&text, close);
    let parsed = gray_matter::Matter::<SplitOnly>::new().parse::<gray_matter::Pod>(&normalized).map_err(RecordError::Split)?;
    if parsed.matter.trim().is_empty() {
        return Err(RecordError::EmptyFrontMatter);
    }
    let fm: FrontMatterIn = serde_yaml::from_str(&parsed.matter).map_err(RecordError::Yaml)?;
    let kind_text = fm.kind.unwrap_or_default();
    let kind = MemoryType::parse(&kind_text).ok_or_else(|| RecordError::UnknownType(kind_text.trim().to_string()))?;
    let content = parsed.content.trim().to_string();
    if content.is_empty() {
        return Err(RecordError::NoContent);
    }
    Ok(Record {
        mem_id: mem_id.to_string(),
        kind,
        title: fm.title.unwrap_or_default().trim().to_string(),
        salience: fm.salience.as_ref().map_or(DEFAULT_SALIENCE, salience_of),
        tags: fm.tags.as_ref().map(tags_of).unwrap_or_default(),
        updated: fm.updated.unwrap_or_default().trim().to_string(),
        content,
    })
}

/// Why the text of a memory file is not a memory.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("no front matter: the file must start with a `---` line")]
    NoFrontMatter,
    #[error("the front matter is not closed by a `---` line")]
    Unclosed,
    #[error("cannot split the front matter: {0}")]
    Split(#[source] gray_matter::Error),
    #[error("the front matter is empty (it needs at least `type:`)")]
    EmptyFrontMatter,
    #[error("front matter is not valid YAML: {0}")]
    Yaml(#[source] serde_yaml::Error),
    #[error("unknown type `{0}` (one of: {types})", types = type_names())]
    UnknownType(String),
    #[error("no content after the front matter")]
    NoContent,
}

/// Every memory type, for the refusal of one that is none.
fn type_names() -> String {
    MemoryType::ALL.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
}

/// YAML forbids tabs in indentation, and a hand edit often has them (or indents the whole
/// block): expands leading tabs of the front-matter lines (1..=`close`; line 0 is the opening
/// `---`) to two spaces each, then removes the indent all of them
/// share, so a block indented as a whole reads like one that is not.
fn expand_front_matter_tabs(text: &str, close: usize) -> std::borrow::Cow<'_, str> {
    let inside = |i: usize| (1..=close).contains(&i);
    let needs = text.split('\n').enumerate().filter(|(i, l)| inside(*i) && !l.trim().is_empty()).any(|(_, l)| l.starts_with(['\t', ' ']));
    if !needs {
        return text.into();
    }
    let mut lines: Vec<String> = text
        .split('\n')
        .enumerate()
        .map(|(i, l)| {
            if inside(i) {
                let body = l.trim_start_matches(['\t', ' ']);
                let indent: String = l[..l.len() - body.len()].chars().map(|c| if c == '\t' { "  " } else { " " }).collect();
                format!("{indent}{body}")
            } else {
                l.to_string()
            }
        })
        .collect();
    let common = lines
        .iter()
        .enumerate()
        .filter(|(i, l)| inside(*i) && !l.trim().is_empty())
        .map(|(_, l)| l.len() - l.trim_start_matches(' ').len())
        .min()
        .unwrap_or(0);
    for (i, l) in lines.iter_mut().enumerate() {
        if inside(i) && l.len() >= common {
            l.drain(..common);
        }
    }
    lines.join("\n").into()
}

/// 1–5 from a number or numeric text; anything else (or out of range) is 3.
fn salience_of(v: &serde_yaml::Value) -> u8 {
    let n = match v {
        serde_yaml::Value::Number(n) => n.as_i64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
        serde_yaml::Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    n.filter(|n| (1..=5).contains(n)).map_or(DEFAULT_SALIENCE, |n| n as u8)
}

/// Tags from a list of scalars or from one comma-separated text.
fn tags_of(v: &serde_yaml::Value) -> Vec<String> {
    let scalar = |v: &serde_yaml::Value| match v {
        serde_yaml::Value::String(s) => Some(s.trim().to_string()),
        serde_yaml::Value::Number(n) => Some(n.to_string()),
        serde_yaml::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    };
    let all: Vec<String> = match v {
        serde_yaml::Value::Sequence(items) => items.iter().filter_map(scalar).collect(),
        serde_yaml::Value::String(s) => s.split(',').map(|t| t.trim().to_string()).collect(),
        other => scalar(other).into_iter().collect(),
    };
    all.into_iter().filter(|t| !t.is_empty()).collect()
}

/// True for a name in the memory folder that is a memory file (not MEMORY.md, not hidden).
pub fn is_memory_file_name(name: &str) -> bool {
    name.ends_with(".md") && name != INDEX_FILE && !name.starts_with('.')
}

/// Reads every memory file in `dir` (a missing folder is empty). Sorted by file name.
pub fn scan(dir: &Path) -> Result<Scan, MemoryError> {
    let mut scan = Scan::default();
    for path in memory_paths(dir)? {
        match read(&path) {
            Ok(m) => scan.memories.push(m),
            Err(b) => scan.bad.push(b),
        }
    }
    Ok(scan)
}

/// Paths of the memory files in `dir`, sorted by name; regular files only.
pub fn memory_paths(dir: &Path) -> Result<Vec<PathBuf>, MemoryError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(MemoryError::io(dir, e)),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| MemoryError::io(dir, e))?;
        let name = entry.file_name();
        let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
        if is_file && name.to_str().is_some_and(is_memory_file_name) {
            paths.push(entry.path());
        }
    }
    paths.sort();
    Ok(paths)
}

/// Moves `<dir>/<mem_id>.md` to `<dir>/_archive/` (as `<mem_id>.md`, or `<mem_id>.<n>.md` when
/// that name is taken) and returns the new path. Errors: [`MemoryError::NotFound`] when there
/// is no such memory.
pub fn archive(dir: &Path, mem_id: &str) -> Result<PathBuf, MemoryError> {
    let slug = slug(mem_id).ok_or_else(|| MemoryError::InvalidId(mem_id.to_string()))?;
    let from = dir.join(format!("{slug}.md"));
    if !from.is_file() {
        return Err(MemoryError::NotFound { mem_id: mem_id.to_string(), dir: dir.to_path_buf() });
    }
    let archive = dir.join(ARCHIVE_DIR);
    std::fs::create_dir_all(&archive).map_err(|e| MemoryError::io(&archive, e))?;
    let mut to = archive.join(format!("{slug}.md"));
    let mut n = 1;
    while to.exists() {
        to = archive.join(format!("{slug}.{n}.md"));
        n += 1;
    }
    std::fs::rename(&from, &to).map_err(|e| MemoryError::io(&from, e))?;
    fsutil::sync_dir(&archive).map_err(|e| MemoryError::io(&archive, e))?;
    fsutil::sync_dir(dir).map_err(|e| MemoryError::io(dir, e))?;
    Ok(to)
}

/// The memories to archive so that at most [`KEEP_FILES`] remain, when more than [`MAX_FILES`]
/// are readable: the weakest first (salience ascending, then oldest modification, then id).
pub fn weakest_over_limit(memories: &[Stored]) -> Vec<&Stored> {
    if memories.len() <= MAX_FILES {
        return Vec::new();
    }
    let mut order: Vec<&Stored> = memories.iter().collect();
    order.sort_by(|a, b| (a.record.salience, a.modified, &a.record.mem_id).cmp(&(b.record.salience, b.modified, &b.record.mem_id)));
    order.truncate(memories.len() - KEEP_FILES);
    order
}

/// Applies the 120 → 100 rule to `dir`; returns the archived mem_ids, weakest first.
pub fn enforce_limit(dir: &Path) -> Result<Vec<String>, MemoryError> {
    let scan = scan(dir)?;
    let mut archived = Vec::new();
    for m in weakest_over_limit(&scan.memories) {
        archive(dir, &m.record.mem_id)?;
        archived.push(m.record.mem_id.clone());
    }
    Ok(archived)
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
