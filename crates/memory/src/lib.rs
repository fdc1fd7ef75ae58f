//! Long-term memory (docs/design.md §8): the agent remembers stable facts, preferences and lessons
//! across `/clear`, compaction and restarts, in plain files under `<workspace>/.cicy/memory/`.
//!
//! Owns that folder and nothing else: the buffer of finished turns (`buffer`), the pause after
//! failed flushes (`backoff`), the recognizer aux call (`recognizer`), the memory files and
//! `_archive/` (`store`), and MEMORY.md (`index`). This file ties them together:
//! [`Memory::record_turn`] is the turn loop's one hook (it only buffers), [`Memory::flush_if_due`]
//! is what whoever runs turns calls once the user has the turn's answer, [`Memory::flush`] runs a
//! batch through the recognizer into files, [`Memory::next_due`] tells a resident process when to
//! flush. Memory work never runs before or inside a turn, so it can neither delay nor endanger
//! one. Must not touch the conversation (history files, reply.json) or the prompt: `prompt.rs`
//! injects the text [`Memory::index_text`] returns.

pub mod backoff;
pub mod buffer;
pub mod index;
pub mod recognizer;
pub mod store;
#[cfg(test)]
mod test_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use cicy_gateway::{GatewayClient, GatewayError};
use cicy_protocol::event::{Emitter, ErrorKind, EventKind};
use cicy_protocol::message::{ContentBlock, Message, Role, Usage};

pub use buffer::FlushReason;
pub use cicy_config::memory::MemorySettings;
pub use recognizer::{RecognizeError, Rejection};

/// Memory errors; each names the file or id at fault.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("cannot write a memory's front matter: {0}")]
    Yaml(String),
    #[error("`{0}` is not a memory id (lowercase letters, digits, Han characters, `_` and `-`; at most 80 bytes)")]
    InvalidId(String),
    #[error("no memory `{mem_id}` in {dir}")]
    NotFound { mem_id: String, dir: PathBuf },
    #[error(transparent)]
    Recognizer(#[from] RecognizeError),
    /// Another process holds `.flush.lock`: it is sending these turns right now.
    #[error("another process is sending the buffered turns to the recognizer right now")]
    FlushBusy,
}

impl MemoryError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        MemoryError::Io { path: path.to_path_buf(), source }
    }
}

/// What the recognizer call runs on: the agent's gateway client and model.
#[derive(Debug, Clone, Copy)]
pub struct AuxTarget<'a> {
    pub client: &'a GatewayClient,
    pub model: &'a str,
    /// The recognizer's session id is `memory-<agent_id>`.
    pub agent_id: &'a str,
}

/// What one flush did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlushReport {
    /// Buffered turns the recognizer read (0: the buffer was empty and no call was made).
    pub turns: usize,
    /// New memory files, by mem_id.
    pub saved: Vec<String>,
    /// Memory files replaced (same slug), by mem_id.
    pub updated: Vec<String>,
    pub rejected: Vec<Rejection>,
    /// Moved to `_archive/` by the 120 → 100 rule, weakest first.
    pub archived: Vec<String>,
    /// Unparsable files that had the slug of an update and were moved aside.
    pub moved_aside: Vec<PathBuf>,
    /// Where lines of the buffer that did not parse were set aside.
    pub buffer_set_aside: Option<PathBuf>,
    /// Memory files skipped because they do not read (see `cicy-agent memory <id> check`).
    pub unreadable: usize,
    /// Memories in MEMORY.md afterwards.
    pub indexed: usize,
    /// The recognizer call's usage (aux: never written to the conversation).
    pub usage: Usage,
}

impl FlushReport {
    /// One line for the user, e.g. `memory: saved 1, updated 0 (from 6 turns)`.
    pub fn summary(&self, agent_id: &str) -> String {
        let turns = if self.turns == 1 { "1 turn".to_string() } else { format!("{} turns", self.turns) };
        let mut s = format!("memory: saved {}, updated {} (from {turns})", self.saved.len(), self.updated.len());
        if !self.rejected.is_empty() {
            let list: Vec<String> = self.rejected.iter().map(|r| format!("`{}`: {}", r.mem_id, r.reason)).collect();
            s.push_str(&format!("; rejected {}: {}", self.rejected.len(), list.join("; ")));
        }
        if !self.archived.is_empty() {
            s.push_str(&format!("; archived {} (over {} files)", self.archived.len(), store::MAX_FILES));
        }
        for p in &self.moved_aside {
            s.push_str(&format!("; an unreadable file was moved aside to {}", p.display()));
        }
        if let Some(p) = &self.buffer_set_aside {
            s.push_str(&format!("; buffer lines that did not parse were set aside in {}", p.display()));
        }
        if self.unreadable > 0 {
            s.push_str(&format!("; {} unreadable file(s) skipped (see `cicy-agent memory {agent_id} check`)", self.unreadable));
        }
        s
    }
}

/// The memory folder of one agent and its flush settings. Cheap to create and clone.
#[derive(Debug, Clone)]
pub struct Memory {
    dir: PathBuf,
    settings: MemorySettings,
}

impl Memory {
    /// The memory of the agent whose workspace is `workspace`: `<workspace>/.cicy/memory/`.
    pub fn new(workspace: &Path, settings: MemorySettings) -> Self {
        Self { dir: workspace.join(".cicy").join("memory"), settings }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn settings(&self) -> &MemorySettings {
        &self.settings
    }

    /// MEMORY.md's text, rebuilt first when a memory file changed since it was written (see
    /// [`index::current`]). Empty when there are no memories.
    pub fn index_text(&self) -> Result<String, MemoryError> {
        index::current(&self.dir)
    }

    /// Why the buffer must be flushed automatically at `now`, if it must: [`buffer::due`], held
    /// back while the [`backoff`] after failed flushes runs.
    pub fn due(&self, now: SystemTime) -> Result<Option<FlushReason>, MemoryError> {
        let turns = buffer::load(&self.dir)?.turns;
        if backoff::load(&self.dir)?.is_some_and(|b| b.next_try() > now) {
            return Ok(None);
        }
        Ok(buffer::due(&turns, &self.settings, now))
    }

    /// When the buffer becomes due (`None` when it is empty), the backoff included: what a
    /// resident process (the `chat` session, later `serve`) sleeps until. Read from disk, so
    /// turns buffered and flushes failed by other processes count.
    pub fn next_due(&self) -> Result<Option<SystemTime>, MemoryError> {
        let due = buffer::next_due(&buffer::load(&self.dir)?.turns, &self.settings);
        let pause = backoff::load(&self.dir)?;
        Ok(due.map(|d| pause.map_or(d, |b| d.max(b.next_try()))))
    }

    /// Runs the buffered turns through the recognizer and stores what it returns: writes the
    /// files, applies the 120 → 100 limit, rebuilds MEMORY.md, and only then removes the turns
    /// it read from the buffer (turns buffered meanwhile stay) and clears the backoff. On an
    /// error the turns stay and the backoff grows (5 min, doubling to 6 h), so automatic
    /// flushes pause instead of waiting on a failing recognizer after every turn; a cancelled
    /// call is no failure. It runs whatever the backoff says (`cicy-agent memory <id> flush`).
    /// An empty buffer makes no call. One flush runs at a time per agent: while another
    /// process flushes, this returns [`MemoryError::FlushBusy`] at once (no failure).
    pub async fn flush(&self, aux: &AuxTarget<'_>, cancel: &CancellationToken) -> Result<FlushReport, MemoryError> {
        self.flush_with(aux, cancel, |_| {}).await
    }

    /// [`Self::flush`], calling `started` with the number of turns just before the call.
    async fn flush_with(
        &self,
        aux: &AuxTarget<'_>,
        cancel: &CancellationToken,
        started: impl FnOnce(usize),
    ) -> Result<FlushReport, MemoryError> {
        let Some(_lock) = backoff::try_flush_lock(&self.dir)? else {
            return Err(MemoryError::FlushBusy);
        };
        let turns = buffer::load(&self.dir)?.turns;
        if turns.is_empty() {
            return Ok(FlushReport::default());
        }
        started(turns.len());
        let ids: Vec<String> = turns.iter().map(|t| t.id.clone()).collect();
        let mut result = self.flush_turns(aux, turns, cancel).await;
        match &mut result {
            Ok(report) => {
                report.buffer_set_aside = buffer::remove(&self.dir, &ids)?;
                backoff::clear(&self.dir)?;
            }
            Err(e) if !is_failure(e) => {}
            Err(e) => {
                if let Err(mark) = backoff::record_failure(&self.dir, SystemTime::now(), &e.to_string()) {
                    tracing::warn!(error = %mark, flush_error = %e, "cannot record the memory flush backoff");
                }
            }
        }
        result
    }

    async fn flush_turns(
        &self,
        aux: &AuxTarget<'_>,
        turns: Vec<buffer::PendingTurn>,
        cancel: &CancellationToken,
    ) -> Result<FlushReport, MemoryError> {
        let scan = store::scan(&self.dir)?;
        let existing: Vec<store::Record> = scan.memories.iter().map(|m| m.record.clone()).collect();
        let (recognized, usage) = recognizer::recognize(aux, &existing, &turns, self.settings.recognizer_timeout, cancel).await?;
        let mut report = FlushReport { turns: turns.len(), rejected: recognized.rejected, usage, ..FlushReport::default() };
        let now = cicy_store::fsutil::now_rfc3339();
        for mut r in recognized.accepted {
            r.updated = now.clone();
            let w = store::write(&self.dir, &r)?;
            // The same mem_id twice in one answer is one memory: count it once.
            if !report.saved.contains(&r.mem_id) && !report.updated.contains(&r.mem_id) {
                let list = if w.updated && w.moved_aside.is_none() { &mut report.updated } else { &mut report.saved };
                list.push(r.mem_id);
            }
            report.moved_aside.extend(w.moved_aside);
        }
        report.archived = store::enforce_limit(&self.dir)?;
        let rebuilt = index::rebuild(&self.dir)?;
        report.unreadable = rebuilt.bad.len();
        report.indexed = rebuilt.entries;
        Ok(report)
    }

    /// Flushes and tells the user: first a progress line (`memory: sending 6 buffered turns to
    /// the recognizer…`), then a `memory: saved …` system line and the aux usage on success; on
    /// failure an `error {kind: memory}` saying the turns are kept and how long automatic
    /// flushes pause. Returns whether the flush succeeded. Never fails: a memory problem must
    /// not fail anyone's turn.
    pub async fn flush_and_report(&self, aux: &AuxTarget<'_>, reason: FlushReason, events: &Emitter, cancel: &CancellationToken) -> bool {
        let started = |pending: usize| {
            let turns = if pending == 1 { "1 buffered turn".to_string() } else { format!("{pending} buffered turns") };
            events.emit(EventKind::System { text: format!("memory: sending {turns} to the recognizer…") });
        };
        match self.flush_with(aux, cancel, started).await {
            Ok(report) => {
                if report.turns > 0 {
                    let u = report.usage;
                    events.emit(EventKind::AuxUsage {
                        aux: cicy_gateway::AuxKind::Memory.header_value().to_string(),
                        input: u.input_tokens,
                        output: u.output_tokens,
                        cache_creation: u.cache_creation_input_tokens,
                        cache_read: u.cache_read_input_tokens,
                    });
                    events.emit(EventKind::System { text: report.summary(aux.agent_id) });
                }
                true
            }
            Err(MemoryError::FlushBusy) => {
                events.emit(EventKind::System { text: format!("memory: {}; not sent again", MemoryError::FlushBusy) });
                true
            }
            Err(e) => {
                let kept = buffer::load(&self.dir).map(|l| l.turns.len()).unwrap_or(0);
                let message = if !is_failure(&e) {
                    format!("memory flush ({}) was cancelled; the {kept} buffered turn(s) are kept for the next flush", reason.as_str())
                } else {
                    let pause = match backoff::load(&self.dir) {
                        Ok(Some(b)) => {
                            let wait = b.next_try().duration_since(SystemTime::now()).unwrap_or(Duration::ZERO);
                            format!(
                                " (automatic flushes pause for {} min; `cicy-agent memory {} flush` tries now)",
                                wait.as_secs().div_ceil(60),
                                aux.agent_id
                            )
                        }
                        Ok(None) | Err(_) => String::new(),
                    };
                    format!(
                        "memory flush ({}) failed: {e}; the {kept} buffered turn(s) are kept for the next flush{pause}",
                        reason.as_str()
                    )
                };
                events.emit(EventKind::Error { kind: ErrorKind::Memory, message });
                false
            }
        }
    }

    /// Flushes when [`Self::due`] says so, or for `overdue` (with [`Self::flush_and_report`]'s
    /// lines); what a process that ran a turn calls once the user has its answer, and what a
    /// resident process's timer calls (`overdue` `None`). A one-shot process passes what
    /// [`Self::due`] said at its start: its own turn, buffered since, restarts the idle period,
    /// and a buffer that became due while no process ran must still be flushed. Returns false
    /// when a flush ran and failed or the buffer could not be read; every problem is reported
    /// as an event.
    pub async fn flush_if_due(
        &self,
        aux: &AuxTarget<'_>,
        overdue: Option<FlushReason>,
        events: &Emitter,
        cancel: &CancellationToken,
    ) -> bool {
        match self.due(SystemTime::now()) {
            Ok(Some(reason)) => self.flush_and_report(aux, reason, events, cancel).await,
            Ok(None) => match overdue {
                Some(reason) => self.flush_and_report(aux, reason, events, cancel).await,
                None => true,
            },
            Err(e) => {
                events.emit(EventKind::Error { kind: ErrorKind::Memory, message: format!("cannot read the memory buffer: {e}") });
                false
            }
        }
    }

    /// The turn loop's hook, called once after a turn that completed: buffers `{user, answer,
    /// tool names}` (answer and tools from `items`, the messages the turn appended). Never calls
    /// the gateway: flushing is [`Self::flush_if_due`]'s, after the turn. Problems are reported
    /// as events, never returned.
    pub fn record_turn(&self, user: &str, items: &[Message], events: &Emitter) {
        let (answer, tools) = answer_and_tools(items);
        let appended = match buffer::append(&self.dir, buffer::PendingTurn::new(user, &answer, &tools, SystemTime::now())) {
            Ok(a) => a,
            Err(e) => {
                events.emit(EventKind::Error { kind: ErrorKind::Memory, message: format!("cannot buffer the turn for memory: {e}") });
                return;
            }
        };
        if let Some(p) = &appended.moved_aside {
            events.emit(EventKind::System {
                text: format!(
                    "memory: lines of the buffer that did not parse were set aside in {}; the {} readable turn(s) are kept",
                    p.display(),
                    appended.turns.len().saturating_sub(1)
                ),
            });
        }
        if appended.dropped > 0 {
            events.emit(EventKind::System {
                text: format!("memory: dropped the {} oldest buffered turn(s) (at most {} wait)", appended.dropped, buffer::MAX_PENDING),
            });
        }
    }
}

/// Whether `e` counts toward the backoff: not a cancel, not a flush left to another process.
fn is_failure(e: &MemoryError) -> bool {
    !matches!(e, MemoryError::Recognizer(RecognizeError::Gateway(GatewayError::Cancelled)) | MemoryError::FlushBusy)
}

/// The answer text (all assistant text of the turn, joined by newlines) and the names of the
/// tools it called (first use order, no repeats).
fn answer_and_tools(items: &[Message]) -> (String, Vec<String>) {
    let mut texts = Vec::new();
    let mut tools: Vec<String> = Vec::new();
    for m in items.iter().filter(|m| m.role == Role::Assistant) {
        for b in m.content.to_blocks() {
            match b {
                ContentBlock::Text { text } if !text.trim().is_empty() => texts.push(text),
                ContentBlock::ToolUse { name, .. } if !tools.contains(&name) => tools.push(name),
                ContentBlock::Text { .. }
                | ContentBlock::ToolUse { .. }
                | ContentBlock::ToolResult { .. }
                | ContentBlock::Thinking { .. } => {}
            }
        }
    }
    (texts.join("\n"), tools)
}

/// `s` cut to at most `max` bytes, never inside a UTF-8 character.
pub fn cut_at_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_answer_and_tools_come_from_the_assistant_messages_of_the_turn() {
        let items = vec![
            Message::assistant(vec![
                ContentBlock::text("Let me look."),
                ContentBlock::ToolUse { id: "t1".into(), name: "shell".into(), input: json!({}) },
            ]),
            Message::user_blocks(vec![ContentBlock::ToolResult { tool_use_id: "t1".into(), content: "x".into(), is_error: false }]),
            Message::assistant(vec![ContentBlock::ToolUse { id: "t2".into(), name: "shell".into(), input: json!({}) }]),
            Message::user_blocks(vec![ContentBlock::ToolResult { tool_use_id: "t2".into(), content: "y".into(), is_error: false }]),
            Message::assistant(vec![ContentBlock::text("Two files.")]),
        ];
        assert_eq!(answer_and_tools(&items), ("Let me look.\nTwo files.".to_string(), vec!["shell".to_string()]));
    }

    #[test]
    fn the_backoff_on_disk_holds_automatic_flushes_until_its_exact_time() {
        let dir = tempfile::tempdir().unwrap();
        let memory = Memory { dir: dir.path().to_path_buf(), settings: MemorySettings::default() };
        let t0 = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let min = |m: u64| Duration::from_secs(60 * m);
        buffer::append(&memory.dir, buffer::PendingTurn::new("remember: port 8080", "ok", &[], t0)).unwrap();
        assert_eq!(memory.next_due().unwrap(), Some(t0));
        assert_eq!(memory.due(t0).unwrap(), Some(FlushReason::Explicit));
        // Failures at t0, t0+5, t0+15 min: the next try is 5, then 10, then 20 min later.
        let mut at = t0;
        for wait in [5, 10, 20] {
            backoff::record_failure(&memory.dir, at, "HTTP 500").unwrap();
            assert_eq!(memory.next_due().unwrap(), Some(at + min(wait)));
            assert_eq!(memory.due(at + min(wait) - Duration::from_millis(1)).unwrap(), None);
            assert_eq!(memory.due(at + min(wait)).unwrap(), Some(FlushReason::Explicit));
            at += min(wait);
        }
        assert_eq!(at, t0 + min(35));
        // A buffer that is due later than the backoff keeps its own time.
        backoff::clear(&memory.dir).unwrap();
        buffer::remove(&memory.dir, &buffer::load(&memory.dir).unwrap().turns.iter().map(|t| t.id.clone()).collect::<Vec<_>>()).unwrap();
        buffer::append(&memory.dir, buffer::PendingTurn::new("hi", "ok", &[], t0)).unwrap();
        backoff::record_failure(&memory.dir, t0 - min(4), "timeout").unwrap();
        assert_eq!(memory.next_due().unwrap(), Some(t0 + min(5)), "idle 5 min after the turn, past the backoff's t0+1 min");
    }

    #[test]
    fn cut_never_splits_a_character() {
        assert_eq!(cut_at_char_boundary("a中", 2), "a");
        assert_eq!(cut_at_char_boundary("a中", 4), "a中");
    }

    #[test]
    fn the_summary_names_what_happened() {
        let r = FlushReport {
            turns: 6,
            saved: vec!["fact_a".into()],
            rejected: vec![Rejection { mem_id: "x".into(), reason: "unknown type `y`".into() }],
            unreadable: 1,
            ..FlushReport::default()
        };
        assert_eq!(
            r.summary("w-1"),
            "memory: saved 1, updated 0 (from 6 turns); rejected 1: `x`: unknown type `y`; 1 unreadable file(s) skipped (see `cicy-agent memory w-1 check`)"
        );
    }
}
