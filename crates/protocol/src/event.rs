//! Turn progress as typed events (docs/design.md §6.5).
//!
//! Owns the one event enum the turn loop and `serve` emit, and the [`Emitter`] that hands them
//! to a sink. Persistent per-agent sequence numbers belong to the store's `eventlog`; the CLI prints
//! these values and the server streams them; neither the loop nor this module knows about a
//! terminal or HTTP.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

mod fields;

pub use fields::{AutonomyStatus, ErrorKind, SteerStatus, TodoAction};

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TurnOutcome {
    Completed,
    Cancelled,
    Blocked,
    Failed,
}

/// What a resident agent is doing (docs/design.md §9 states, from CMDC): `idle` → request `running`
/// → first chunk `streaming` → tool calls `executing_tools` → batch done `running` … → `idle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentState {
    Idle,
    Running,
    Streaming,
    ExecutingTools,
}

impl AgentState {
    /// The wire name (`executing_tools`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Running => "running",
            Self::Streaming => "streaming",
            Self::ExecutingTools => "executing_tools",
        }
    }
}

/// One step of progress. Serialized with a `type` tag, e.g. `{"type":"text_delta","text":"Hi"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    TurnStarted {
        turn_id: String,
        conv_id: String,
    },
    /// Right after `turn_started` of a turn a person's message starts (a chat, a prompt, a
    /// steer or queued inputs that start one; not a wake, an intent, a sub-agent or a retry):
    /// the message as the history keeps it (after a `before_prompt` hook), cut to
    /// [`PROMPT_PREVIEW_CHARS`] characters. So every client shows what was asked, whoever sent it.
    Prompt {
        text: String,
    },
    /// 0-based round number within the turn.
    RoundStarted {
        round: u32,
    },
    TextDelta {
        text: String,
    },
    /// The streamed text of a response is complete.
    TextEnd,
    /// The response that ends the turn has no answer text (it was empty, or only thinking);
    /// the CLI prints `(no answer text)` on stderr.
    NoAnswerText,
    ThinkingDelta {
        text: String,
    },
    ToolStarted {
        id: String,
        name: String,
        input: Value,
    },
    /// `result` is cut to 600 characters; the full text is in the history.
    ToolFinished {
        id: String,
        name: String,
        result: String,
        is_error: bool,
        duration_ms: u64,
    },
    /// Token usage of one round and the digest of its cached prefix.
    Usage {
        input: u64,
        output: u64,
        cache_creation: u64,
        cache_read: u64,
        prefix_sha256: String,
    },
    /// Token usage of an aux call (`aux`: `compact` or `memory`); counted, never part of the
    /// conversation or its snapshots.
    AuxUsage {
        aux: String,
        input: u64,
        output: u64,
        cache_creation: u64,
        cache_read: u64,
    },
    Retry {
        attempt: u32,
        delay_ms: u64,
        reason: String,
    },
    Compacted {
        before: usize,
        after: usize,
    },
    System {
        text: String,
    },
    Error {
        kind: ErrorKind,
        message: String,
    },
    TurnEnded {
        outcome: TurnOutcome,
    },
    /// `serve`: the agent's state changed (docs/design.md §9).
    State {
        state: AgentState,
    },
    /// `serve`: this input arrived while the agent was busy and waits in its pending queue
    /// (cicy: "Queued — will be handled after the current reply completes.").
    Queued {
        text: String,
    },
    /// `serve`: the queued inputs, joined with `\n`, start one follow-up turn
    /// (cicy: "Processing queued input…").
    Flush {
        text: String,
    },
    /// `serve`: what became of a steer.
    Steered {
        status: SteerStatus,
    },
    /// `serve`: the run an input started (its turn and every follow-up) is over.
    Done,
    /// A subscriber missed events `from..=to` (older than the kept log, or it lagged behind);
    /// never a silent hole.
    Gap {
        from: u64,
        to: u64,
    },
    /// `serve`: a wake turn starts (docs/design.md §10): `reason` `todo|inbox|recovery|heartbeat`,
    /// `n` the agent's wake count, the todo ids it claimed and the inbox files of the one
    /// conversation it claimed.
    Wake {
        reason: String,
        n: u64,
        todos: Vec<u32>,
        messages: Vec<String>,
    },
    /// A message file landed in this agent's inbox and was claimed for a wake (one per file).
    MessageIn {
        from: String,
        subject: String,
        file: String,
    },
    /// This agent (or serve on its behalf, `from: cicy`) wrote a message: `to` is `human`, an
    /// agent id or a name; `file` is the outbox file.
    MessageOut {
        from: String,
        to: String,
        text: String,
        file: String,
    },
    /// A todo was added, claimed, done, removed or rescheduled (`action`), with its line as
    /// `cicy-agent todo ls` prints it.
    TodoChange {
        action: TodoAction,
        id: u32,
        line: String,
    },
    /// A `task` call started a sub-agent (docs/design.md §12, CMDC `:subagent_start`): `id` names its
    /// folder `.cicy/history/sub/<id>/`; `subagent_type` is `general-purpose` or a role slug.
    SubagentStart {
        id: String,
        description: String,
        subagent_type: String,
    },
    /// The sub-agent `id` ended; `result` is the tool result the parent reads, cut to 600
    /// characters as `tool_finished`'s.
    SubagentEnd {
        id: String,
        outcome: SubagentOutcome,
        result: String,
    },
    /// The `ask_user` tool waits for the user's answer to `question` (docs/design.md §12, CMDC
    /// `:ask_user`): answer with `POST /api/agents/<id>/respond {ref, response}` or the chat
    /// session's next stdin line. `options` is empty for a free-text answer.
    AskUser {
        #[serde(rename = "ref")]
        reference: String,
        question: String,
        options: Vec<AskOption>,
    },
    /// A hook ran (docs/design.md §12): its point (`before_tool`), its `command` as meta.yaml writes
    /// it, the `action` it took (`allow`, `deny`, `modify`, `inject`, `skip`, `switch_model`; a
    /// failed hook reports its `on_error`), the deny reason or the model switched to.
    Hook {
        name: String,
        command: String,
        action: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        duration_ms: u64,
    },
    /// `write_todos` replaced the plan (`.cicy/plan.json`) with `todos` (docs/design.md §12 calls it
    /// `todo_change`; that name is the wake todos' event above, whose shape differs).
    PlanChange {
        todos: Vec<crate::plan::Todo>,
    },
    /// Idle autonomy (docs/design.md §13): a job of the tick changed. `job` is `intent:<id>` or a
    /// routine (`selfcheck`, `recall`, `web`); `status` is `running`, `done`, `failed`,
    /// `interrupted`, `refused` or `promoted`; `detail` the result, the refusal, who preempted
    /// (`preempted by human`) or the new priority.
    Autonomy {
        job: String,
        status: AutonomyStatus,
        detail: Option<String>,
    },
}

/// How a sub-agent (`task`) ended: its turn's outcome, or `timed_out` when its time ran out
/// (CMDC: 120 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubagentOutcome {
    Completed,
    Cancelled,
    Blocked,
    Failed,
    TimedOut,
}

/// One choice offered by `ask_user` (CMDC `{id, label}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskOption {
    pub id: String,
    pub label: String,
}

/// An event with its per-agent sequence number: strictly increasing, never reused (see
/// the store's `eventlog`; an [`Emitter::new`] counts 1, 2, 3, … on its own).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    pub agent_id: String,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// cicy: `tool_finished.result` carries at most 600 characters.
pub const TOOL_RESULT_PREVIEW_CHARS: usize = 600;

/// cicy: `prompt.text` carries at most 2000 characters (the event log and serve's in-memory
/// feed keep every event; a 1 MiB `--file` would otherwise be in both).
pub const PROMPT_PREVIEW_CHARS: usize = 2000;

/// Where an [`Emitter`] hands events when something else numbers them (the agent's event log).
pub trait EventSink: Send + Sync {
    /// Takes one event; numbers, stores and publishes it. Must not block on I/O.
    fn emit(&self, kind: EventKind);
}

/// Hands events to a sink: numbered here (1, 2, 3, …) for a plain callback, or by the sink.
/// Cloning is cheap and every clone feeds the same sink and the same numbering, so a tool that
/// reports progress while it runs (a sub-agent, a question to the user) holds one of its own.
#[derive(Clone)]
pub struct Emitter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Emitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Emitter")
    }
}

enum Inner {
    Counting { agent_id: String, seq: AtomicU64, sink: Box<dyn Fn(&Event) + Send + Sync> },
    Sink(Arc<dyn EventSink>),
}

impl Emitter {
    /// An emitter that numbers events 1, 2, 3, … itself and calls `sink` with each.
    pub fn new(agent_id: &str, sink: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        Self { inner: Arc::new(Inner::Counting { agent_id: agent_id.to_string(), seq: AtomicU64::new(0), sink: Box::new(sink) }) }
    }

    /// An emitter whose sink numbers the events (the agent's persistent event log).
    pub fn from_sink(sink: Arc<dyn EventSink>) -> Self {
        Self { inner: Arc::new(Inner::Sink(sink)) }
    }

    /// Sends `kind` on.
    pub fn emit(&self, kind: EventKind) {
        match self.inner.as_ref() {
            Inner::Counting { agent_id, seq, sink } => {
                let seq = seq.fetch_add(1, Ordering::SeqCst) + 1;
                sink(&Event { seq, agent_id: agent_id.clone(), kind });
            }
            Inner::Sink(sink) => sink.emit(kind),
        }
    }
}

/// The first `max` characters of `s` (a `…` marks a cut).
pub fn preview(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn events_serialize_flat_with_increasing_seq() {
        let out = Arc::new(Mutex::new(Vec::new()));
        let o = out.clone();
        let e = Emitter::new("w-1", move |ev| o.lock().unwrap().push(serde_json::to_string(ev).unwrap()));
        e.emit(EventKind::TextDelta { text: "Hi".into() });
        e.clone().emit(EventKind::TurnEnded { outcome: TurnOutcome::Completed });
        assert_eq!(
            *out.lock().unwrap(),
            vec![
                r#"{"seq":1,"agent_id":"w-1","type":"text_delta","text":"Hi"}"#,
                r#"{"seq":2,"agent_id":"w-1","type":"turn_ended","outcome":"completed"}"#,
            ]
        );
    }

    #[test]
    fn events_read_back_as_written() {
        for kind in [
            EventKind::State { state: AgentState::ExecutingTools },
            EventKind::Queued { text: "q".into() },
            EventKind::Prompt { text: "p".into() },
            EventKind::Gap { from: 3, to: 9 },
            EventKind::Done,
            EventKind::ToolStarted { id: "t".into(), name: "shell".into(), input: serde_json::json!({"command": "ls"}) },
            EventKind::SubagentEnd { id: "s".into(), outcome: SubagentOutcome::TimedOut, result: "r".into() },
            EventKind::AskUser {
                reference: "r1".into(),
                question: "q?".into(),
                options: vec![AskOption { id: "a".into(), label: "A".into() }],
            },
            EventKind::Hook {
                name: "before_tool".into(),
                command: "hooks/g.sh".into(),
                action: "allow".into(),
                reason: None,
                duration_ms: 3,
            },
        ] {
            let ev = Event { seq: u64::MAX, agent_id: "w-1".into(), kind };
            let line = serde_json::to_string(&ev).unwrap();
            assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), ev, "{line}");
        }
        assert_eq!(serde_json::to_string(&EventKind::Prompt { text: "hi".into() }).unwrap(), r#"{"type":"prompt","text":"hi"}"#);
        assert_eq!(
            serde_json::to_string(&EventKind::State { state: AgentState::ExecutingTools }).unwrap(),
            r#"{"type":"state","state":"executing_tools"}"#
        );
        assert_eq!(
            serde_json::to_string(&EventKind::AskUser { reference: "r1".into(), question: "q?".into(), options: Vec::new() }).unwrap(),
            r#"{"type":"ask_user","ref":"r1","question":"q?","options":[]}"#
        );
        let deny = EventKind::Hook {
            name: "before_tool".into(),
            command: "hooks/g.sh".into(),
            action: "deny".into(),
            reason: Some("no".into()),
            duration_ms: 3,
        };
        assert_eq!(
            serde_json::to_string(&deny).unwrap(),
            r#"{"type":"hook","name":"before_tool","command":"hooks/g.sh","action":"deny","reason":"no","duration_ms":3}"#
        );
    }

    #[test]
    fn preview_cuts_on_characters() {
        assert_eq!(preview("中文字", 2), "中文…");
        assert_eq!(preview("ab", 2), "ab");
    }
}
