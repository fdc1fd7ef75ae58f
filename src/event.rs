//! Turn progress as typed events (DESIGN.md §6.5).
//!
//! Owns the one event enum the turn loop emits and the per-agent sequence numbers. The CLI
//! prints these values and the server streams them; neither the loop nor this module knows
//! about a terminal or HTTP.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde_json::Value;

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TurnOutcome {
    Completed,
    Cancelled,
    Blocked,
    Failed,
}

/// One step of progress. Serialized with a `type` tag, e.g. `{"type":"text_delta","text":"Hi"}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    TurnStarted { turn_id: String, conv_id: String },
    /// 0-based round number within the turn.
    RoundStarted { round: u32 },
    TextDelta { text: String },
    /// The streamed text of a response is complete.
    TextEnd,
    /// The response that ends the turn has no answer text (it was empty, or only thinking);
    /// the CLI prints `(no answer text)` on stderr.
    NoAnswerText,
    ThinkingDelta { text: String },
    ToolStarted { id: String, name: String, input: Value },
    /// `result` is cut to 600 characters; the full text is in the history.
    ToolFinished { id: String, name: String, result: String, is_error: bool, duration_ms: u64 },
    /// Token usage of one round and the digest of its cached prefix.
    Usage { input: u64, output: u64, cache_creation: u64, cache_read: u64, prefix_sha256: String },
    /// Token usage of an aux call (`aux`: `compact` or `memory`); counted, never part of the
    /// conversation or its snapshots.
    AuxUsage { aux: String, input: u64, output: u64, cache_creation: u64, cache_read: u64 },
    Retry { attempt: u32, delay_ms: u64, reason: String },
    Compacted { before: usize, after: usize },
    System { text: String },
    Queued,
    Error { kind: String, message: String },
    TurnEnded { outcome: TurnOutcome },
}

/// An event with its per-agent sequence number (1, 2, 3, … within one emitter).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub seq: u64,
    pub agent_id: String,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// cicy: `tool_finished.result` carries at most 600 characters.
pub const TOOL_RESULT_PREVIEW_CHARS: usize = 600;

/// Numbers events and hands them to a sink (the CLI printer, an SSE stream, a test vector).
pub struct Emitter {
    agent_id: String,
    seq: AtomicU64,
    sink: Box<dyn Fn(&Event) + Send + Sync>,
}

impl Emitter {
    pub fn new(agent_id: &str, sink: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        Self { agent_id: agent_id.to_string(), seq: AtomicU64::new(0), sink: Box::new(sink) }
    }

    /// Sends `kind` with the next sequence number.
    pub fn emit(&self, kind: EventKind) {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        (self.sink)(&Event { seq, agent_id: self.agent_id.clone(), kind });
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
        e.emit(EventKind::TurnEnded { outcome: TurnOutcome::Completed });
        assert_eq!(
            *out.lock().unwrap(),
            vec![
                r#"{"seq":1,"agent_id":"w-1","type":"text_delta","text":"Hi"}"#,
                r#"{"seq":2,"agent_id":"w-1","type":"turn_ended","outcome":"completed"}"#,
            ]
        );
    }

    #[test]
    fn preview_cuts_on_characters() {
        assert_eq!(preview("中文字", 2), "中文…");
        assert_eq!(preview("ab", 2), "ab");
    }
}
