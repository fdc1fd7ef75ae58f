//! The intents ledger `<workspace>/.cicy/intents.jsonl` (docs/design.md §13, the idle seed's
//! `ops\intents.jsonl`): one JSON object per line, appended, never rewritten.
//!
//! Owns the line format ([`Intent`]), folding the file into the current state of each intent
//! (the later line of an id wins; a line that does not parse is skipped and reported, a torn
//! last line quietly), and appending under an exclusive `flock(2)` so a `wish` from the CLI and
//! the resident actor never interleave. Nothing is ever deleted: `intents rm` renames the file.
//! Must not touch: what an intent runs, the guardrails, scheduling.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The ledger of the agent whose workspace is `workspace`.
pub fn ledger_path(workspace: &Path) -> PathBuf {
    workspace.join(".cicy").join("intents.jsonl")
}

/// Who wrote a wish: the agent itself (`wish` tool) or a person (`cicy-agent wish`) *(idle)*.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum By {
    #[serde(rename = "self")]
    Agent,
    Human,
}

/// What an intent waits for before it may run *(idle)*: `none` runs; `human` and `external`
/// are only reported until `intents <id> approve` sets `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Needs {
    #[default]
    None,
    Human,
    External,
}

impl Needs {
    pub fn as_str(self) -> &'static str {
        match self {
            Needs::None => "none",
            Needs::Human => "human",
            Needs::External => "external",
        }
    }
}

/// An intent's state **[chosen]**: `pending` (wished, not started), `running`, `interrupted`
/// (preempted or stopped; runs again after `min_gap`), and the final `done`, `failed`,
/// `refused` (by the guardrails), `dropped` (by a person).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pending,
    Running,
    Interrupted,
    Done,
    Failed,
    Refused,
    Dropped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Interrupted => "interrupted",
            Status::Done => "done",
            Status::Failed => "failed",
            Status::Refused => "refused",
            Status::Dropped => "dropped",
        }
    }

    /// Whether the intent is finished for good (nothing runs it again).
    pub fn is_final(self) -> bool {
        match self {
            Status::Done | Status::Failed | Status::Refused | Status::Dropped => true,
            Status::Pending | Status::Running | Status::Interrupted => false,
        }
    }
}

/// One line of the ledger: the whole state of intent `id` as of `line_at`. Fields of the idle
/// seed (`id, at, by, what, why, run, priority, min_gap, needs, status, done_at, result`) plus
/// docs/design.md §13's `preempted_by, preempted_count, promoted, refused_reason` and **[chosen]**
/// `started_at` (the last start, from which `min_gap` counts) and `line_at` (when this line was
/// written). Times are RFC 3339 UTC. Keys this version does not know are kept in `extra` and
/// written back on the next line of that id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Intent {
    pub id: String,
    /// When the wish was written.
    pub at: String,
    pub by: By,
    pub what: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// A bash command line; absent: the intent is a model turn `[cicy-intent] id:<id> | <what>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Smaller wins (`crate::autonomy::priority`); wishes take 4–7, default 5.
    pub priority: u8,
    /// Seconds from the last start before the intent may start again.
    #[serde(default)]
    pub min_gap: u64,
    #[serde(default)]
    pub needs: Needs,
    pub status: Status,
    #[serde(default)]
    pub done_at: Option<String>,
    /// `exit <n>: <last line>` for a command; the turn's outcome for a model turn.
    #[serde(default)]
    pub result: Option<String>,
    /// The class that preempted the last run (`human`, `alarm`, `task`, …).
    #[serde(default)]
    pub preempted_by: Option<String>,
    /// Preemptions since the intent last ran to its end (the starvation rule's "in a row").
    #[serde(default)]
    pub preempted_count: u32,
    /// When the starvation rule last raised the priority.
    #[serde(default)]
    pub promoted: Option<String>,
    #[serde(default)]
    pub refused_reason: Option<String>,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_at: Option<String>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Intent {
    /// A `pending` intent wished `at` by `by`: priority 5 (the table's `intent`), no `run`,
    /// no `min_gap`, needing nothing; set the rest with struct update syntax.
    pub fn new(id: String, at: String, by: By, what: String) -> Self {
        Intent {
            id,
            at,
            by,
            what,
            why: None,
            run: None,
            priority: 5,
            min_gap: 0,
            needs: Needs::None,
            status: Status::Pending,
            done_at: None,
            result: None,
            preempted_by: None,
            preempted_count: 0,
            promoted: None,
            refused_reason: None,
            started_at: None,
            line_at: None,
            extra: serde_json::Map::new(),
        }
    }

    /// The ledger line for this state, stamped `line_at` now; one line, no newline.
    pub fn to_line(&self) -> Result<String, serde_json::Error> {
        let mut line = self.clone();
        line.line_at = Some(crate::fsutil::now_rfc3339());
        serde_json::to_string(&line)
    }

    /// Whether the scheduler may pick this intent (needs and `min_gap` aside).
    pub fn is_open(&self) -> bool {
        matches!(self.status, Status::Pending | Status::Interrupted)
    }
}

/// Unix seconds of an RFC 3339 time; `None` when it does not parse.
pub fn unix_of(rfc3339: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(rfc3339).ok().map(|t| t.timestamp())
}

/// Whether `id` may name an intent: it names a folder (`.cicy/intents/<id>/`) and a log line,
/// so no path separator, no leading dot, nothing but `[A-Za-z0-9_.-]`, at most 64 **[chosen]**.
pub fn valid_id(id: &str) -> bool {
    id.len() <= 64
        && id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// A line the fold skipped: its 1-based number and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub line: usize,
    pub why: String,
}

/// The ledger folded: the current state of every intent in the order first wished, and the
/// lines skipped (a torn last line is not listed: it is a write that a crash cut short).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Folded {
    pub intents: Vec<Intent>,
    pub skipped: Vec<Skipped>,
}

impl Folded {
    /// Folds the ledger's text.
    pub fn parse(text: &str) -> Self {
        let mut folded = Folded::default();
        let mut index: HashMap<String, usize> = HashMap::new();
        let torn_tail = !text.is_empty() && !text.ends_with('\n');
        let lines: Vec<&str> = text.split('\n').collect();
        let last = lines.len().saturating_sub(1);
        for (n, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Intent>(line) {
                Ok(intent) if !valid_id(&intent.id) => {
                    let why = format!("id {:?} is not 1–64 letters, digits, `_`, `-` or `.` starting with a letter or digit", intent.id);
                    folded.skipped.push(Skipped { line: n + 1, why });
                }
                Ok(intent) => match index.get(&intent.id) {
                    Some(&i) => folded.intents[i] = intent,
                    None => {
                        index.insert(intent.id.clone(), folded.intents.len());
                        folded.intents.push(intent);
                    }
                },
                Err(_) if torn_tail && n == last => {}
                Err(e) => folded.skipped.push(Skipped { line: n + 1, why: e.to_string() }),
            }
        }
        folded
    }

    pub fn get(&self, id: &str) -> Option<&Intent> {
        self.intents.iter().find(|i| i.id == id)
    }

    /// The next free id: `i<n>`, one past the largest `n` in use **[chosen]**.
    pub fn next_id(&self) -> String {
        let max = self.intents.iter().filter_map(|i| i.id.strip_prefix('i')?.parse::<u64>().ok()).max().unwrap_or(0);
        format!("i{}", max + 1)
    }
}

/// Errors reading or writing the ledger; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: cannot write a line: {source}")]
    Encode { path: PathBuf, source: serde_json::Error },
}

/// An agent's ledger file.
#[derive(Debug, Clone)]
pub struct Ledger {
    path: PathBuf,
}

impl Ledger {
    pub fn of_workspace(workspace: &Path) -> Self {
        Self { path: ledger_path(workspace) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads and folds the file; a missing file is an empty ledger.
    ///
    /// Errors: [`LedgerError::Io`] when it exists but cannot be read.
    pub fn read(&self) -> Result<Folded, LedgerError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => Ok(Folded::parse(&String::from_utf8_lossy(&bytes))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Folded::default()),
            Err(source) => Err(LedgerError::Io { path: self.path.clone(), source }),
        }
    }

    /// Holding the ledger's lock, folds it, lets `decide` look at the state, and appends the
    /// lines it returns (fsynced). The lock serialises every writer, so a decision (a new id,
    /// a status change) is made on the latest state.
    ///
    /// Errors: the file cannot be opened, locked, read or written; `decide`'s own error.
    pub fn update<T, E>(&self, decide: impl FnOnce(&Folded) -> Result<(Vec<Intent>, T), E>) -> Result<T, E>
    where
        E: From<LedgerError>,
    {
        let mut file = self.open_locked()?;
        let mut text = Vec::new();
        file.read_to_end(&mut text).map_err(|source| self.io(source))?;
        let folded = Folded::parse(&String::from_utf8_lossy(&text));
        let (lines, out) = decide(&folded)?;
        if !lines.is_empty() {
            let mut bytes = Vec::new();
            if text.last().is_some_and(|&b| b != b'\n') {
                // A torn last line stays as it is; ours starts on a line of its own.
                bytes.push(b'\n');
            }
            for intent in &lines {
                let line = intent.to_line().map_err(|source| LedgerError::Encode { path: self.path.clone(), source })?;
                bytes.extend_from_slice(line.as_bytes());
                bytes.push(b'\n');
            }
            file.seek(SeekFrom::End(0)).map_err(|source| self.io(source))?;
            file.write_all(&bytes).and_then(|()| file.sync_data()).map_err(|source| self.io(source))?;
        }
        Ok(out)
    }

    /// Appends `lines` as they are.
    pub fn append(&self, lines: Vec<Intent>) -> Result<(), LedgerError> {
        self.update(|_| Ok::<_, LedgerError>((lines, ())))
    }

    /// `intents rm`: renames the ledger to `intents.jsonl.removed-<unix>` (nothing is deleted);
    /// `None` when there was none.
    ///
    /// Errors: the rename failed.
    pub fn remove(&self) -> Result<Option<PathBuf>, LedgerError> {
        if !self.path.exists() {
            return Ok(None);
        }
        let _lock = self.open_locked()?;
        let target = crate::fsutil::rename_aside(&self.path, "removed").map_err(|source| self.io(source))?;
        if let Some(dir) = self.path.parent() {
            crate::fsutil::sync_dir(dir).map_err(|source| self.io(source))?;
        }
        Ok(Some(target))
    }

    fn open_locked(&self) -> Result<File, LedgerError> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| self.io(source))?;
        }
        let file = OpenOptions::new().read(true).append(true).create(true).open(&self.path).map_err(|source| self.io(source))?;
        file.lock().map_err(|source| self.io(source))?;
        Ok(file)
    }

    fn io(&self, source: io::Error) -> LedgerError {
        LedgerError::Io { path: self.path.clone(), source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: &str, status: &str) -> String {
        format!(r#"{{"id":"{id}","at":"2026-12-01T10:00:00Z","by":"self","what":"tidy {id}","priority":5,"status":"{status}"}}"#)
    }

    #[test]
    fn the_later_line_of_an_id_wins_and_first_wished_order_is_kept() {
        let text = format!("{}\n{}\n{}\n", line("i1", "pending"), line("i2", "pending"), line("i1", "done"));
        let f = Folded::parse(&text);
        let got: Vec<(&str, Status)> = f.intents.iter().map(|i| (i.id.as_str(), i.status)).collect();
        assert_eq!(got, vec![("i1", Status::Done), ("i2", Status::Pending)]);
        assert!(f.skipped.is_empty());
        assert_eq!(f.next_id(), "i3");
    }

    #[test]
    fn an_id_that_could_name_another_folder_is_skipped() {
        let bad = |id: &str| {
            format!(
                r#"{{"id":{},"at":"2026-12-01T10:00:00Z","by":"self","what":"x","priority":5,"status":"pending"}}"#,
                serde_json::to_string(id).unwrap()
            )
        };
        let text = [bad("../../evil"), bad("/tmp/abs"), bad("a\nb"), bad(".hidden"), bad(""), line("i1", "pending"), bad("ok-1.2_x")]
            .join("\n")
            + "\n";
        let f = Folded::parse(&text);
        let ids: Vec<&str> = f.intents.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, vec!["i1", "ok-1.2_x"]);
        assert_eq!(f.skipped.iter().map(|s| s.line).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
        assert!(f.skipped[0].why.starts_with("id \"../../evil\" is not"), "{}", f.skipped[0].why);
    }

    #[test]
    fn a_torn_last_line_is_skipped_quietly_and_a_bad_middle_line_is_reported() {
        let text = format!("{}\nnot json\n{}\n{{\"id\":\"i3\",\"at", line("i1", "pending"), line("i2", "pending"));
        let f = Folded::parse(&text);
        assert_eq!(f.intents.len(), 2);
        assert_eq!(f.skipped.len(), 1);
        assert_eq!(f.skipped[0].line, 2);
    }

    #[test]
    fn unknown_keys_survive_a_rewrite_of_the_intent() {
        let text = r#"{"id":"i1","at":"2026-12-01T10:00:00Z","by":"human","what":"x","priority":4,"status":"pending","note":"mine"}"#;
        let mut i = Folded::parse(text).intents.remove(0);
        i.status = Status::Done;
        let back: serde_json::Value = serde_json::from_str(&i.to_line().unwrap()).unwrap();
        assert_eq!(back["note"], "mine");
        assert_eq!(back["status"], "done");
        assert_eq!(back["by"], "human");
    }

    #[test]
    fn an_append_after_a_torn_line_starts_a_new_line_and_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::of_workspace(dir.path());
        std::fs::create_dir_all(dir.path().join(".cicy")).unwrap();
        let torn = format!("{}\n{{\"id\":\"i2\"", line("i1", "pending"));
        std::fs::write(ledger.path(), &torn).unwrap();
        let mut i = ledger.read().unwrap().intents.remove(0);
        i.status = Status::Dropped;
        ledger.append(vec![i]).unwrap();
        let text = std::fs::read_to_string(ledger.path()).unwrap();
        assert!(text.starts_with(&torn), "{text}");
        let f = Folded::parse(&text);
        assert_eq!(f.intents[0].status, Status::Dropped);
        assert_eq!(f.skipped, vec![Skipped { line: 2, why: f.skipped[0].why.clone() }]);
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn remove_renames_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::of_workspace(dir.path());
        assert_eq!(ledger.remove().unwrap(), None);
        ledger.append(vec![Folded::parse(&line("i1", "pending")).intents.remove(0)]).unwrap();
        let moved = ledger.remove().unwrap().unwrap();
        assert!(!ledger.path().exists());
        assert!(moved.file_name().unwrap().to_string_lossy().starts_with("intents.jsonl.removed-"));
        assert_eq!(Ledger { path: moved }.read().unwrap().intents.len(), 1);
    }
}
