//! The fields of events that hold one of a fixed set of names (an error's `kind`, a status, a
//! todo's `action`), as enums whose serde names are the wire strings, so an event's JSON stays
//! what clients and logs already hold.

use serde::{Deserialize, Serialize};

/// What an `error` event is about: its `kind` on the wire. Serialized as the plain string
/// (`"busy"`, `"http_status"`, …); a kind this build does not know (a log written by another
/// version) is kept as [`ErrorKind::Other`] and written back unchanged, so no log line stops
/// parsing over it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ErrorKind {
    /// The agent is busy: a command that needs it idle was refused.
    Busy,
    /// A message too large for the context window.
    TooLarge,
    /// The role or session could not be opened.
    Open,
    /// A turn failed outside the gateway's own errors.
    Turn,
    /// A wake could not run or end.
    Wake,
    Clear,
    Compact,
    Retry,
    /// A conversation command refused or failed.
    Command,
    Hook,
    Memory,
    Autonomy,
    /// serve's own fault (a job that stopped).
    Internal,
    /// The gateway could not be reached.
    Connect,
    /// The gateway answered an error status.
    HttpStatus,
    NoApiKey,
    StreamError,
    IncompleteStream,
    Decode,
    Timeout,
    Cancelled,
    Other(String),
}

impl ErrorKind {
    const KNOWN: [ErrorKind; 21] = [
        ErrorKind::Busy,
        ErrorKind::TooLarge,
        ErrorKind::Open,
        ErrorKind::Turn,
        ErrorKind::Wake,
        ErrorKind::Clear,
        ErrorKind::Compact,
        ErrorKind::Retry,
        ErrorKind::Command,
        ErrorKind::Hook,
        ErrorKind::Memory,
        ErrorKind::Autonomy,
        ErrorKind::Internal,
        ErrorKind::Connect,
        ErrorKind::HttpStatus,
        ErrorKind::NoApiKey,
        ErrorKind::StreamError,
        ErrorKind::IncompleteStream,
        ErrorKind::Decode,
        ErrorKind::Timeout,
        ErrorKind::Cancelled,
    ];

    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorKind::Busy => "busy",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::Open => "open",
            ErrorKind::Turn => "turn",
            ErrorKind::Wake => "wake",
            ErrorKind::Clear => "clear",
            ErrorKind::Compact => "compact",
            ErrorKind::Retry => "retry",
            ErrorKind::Command => "command",
            ErrorKind::Hook => "hook",
            ErrorKind::Memory => "memory",
            ErrorKind::Autonomy => "autonomy",
            ErrorKind::Internal => "internal",
            ErrorKind::Connect => "connect",
            ErrorKind::HttpStatus => "http_status",
            ErrorKind::NoApiKey => "no_api_key",
            ErrorKind::StreamError => "stream_error",
            ErrorKind::IncompleteStream => "incomplete_stream",
            ErrorKind::Decode => "decode",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Other(s) => s,
        }
    }
}

impl From<String> for ErrorKind {
    fn from(s: String) -> Self {
        ErrorKind::KNOWN.into_iter().find(|k| k.as_str() == s).unwrap_or(ErrorKind::Other(s))
    }
}

impl From<ErrorKind> for String {
    fn from(k: ErrorKind) -> String {
        match k {
            ErrorKind::Other(s) => s,
            known => known.as_str().to_string(),
        }
    }
}

/// Compares by wire name (`kind == "busy"`), as a reader of the JSON would.
impl PartialEq<str> for ErrorKind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ErrorKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What became of a steer (the `status` of a `steered` event and of `POST …/steer`'s answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SteerStatus {
    /// Waiting for the running turn's next round.
    Queued,
    /// The agent was idle: the text started a turn of its own.
    Prompted,
    /// the runtime's `turn::Steering::CAP` texts already wait (CMDC's cap 3).
    RejectedFull,
    /// It went into a round's user message.
    Delivered,
    /// A `before_steering` hook refused it (the `hook` event before it gives the reason); it
    /// is dropped.
    Refused,
}

impl SteerStatus {
    /// The wire name (`rejected_full`).
    pub fn as_str(self) -> &'static str {
        match self {
            SteerStatus::Queued => "queued",
            SteerStatus::Prompted => "prompted",
            SteerStatus::RejectedFull => "rejected_full",
            SteerStatus::Delivered => "delivered",
            SteerStatus::Refused => "refused",
        }
    }
}

impl std::fmt::Display for SteerStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happened to a todo: the `action` of a `todo_change` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoAction {
    Add,
    /// A wake that came due claimed it.
    Claim,
    Done,
    Remove,
    /// The wake that claimed it did not finish it (it crashed or ended without it): it is
    /// pending again.
    Retry,
}

impl TodoAction {
    /// The wire name (`claim`).
    pub fn as_str(self) -> &'static str {
        match self {
            TodoAction::Add => "add",
            TodoAction::Claim => "claim",
            TodoAction::Done => "done",
            TodoAction::Remove => "remove",
            TodoAction::Retry => "retry",
        }
    }
}

impl std::fmt::Display for TodoAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What became of an idle-autonomy job: the `status` of an `autonomy` event (docs/design.md §13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AutonomyStatus {
    Running,
    Done,
    Failed,
    /// Preempted, stopped, or left running by a killed serve; it runs again later.
    Interrupted,
    /// The guardrails refused it at pickup.
    Refused,
    /// Its priority was raised after waiting too long (starvation).
    Promoted,
}

impl AutonomyStatus {
    /// The wire name (`interrupted`).
    pub fn as_str(self) -> &'static str {
        match self {
            AutonomyStatus::Running => "running",
            AutonomyStatus::Done => "done",
            AutonomyStatus::Failed => "failed",
            AutonomyStatus::Interrupted => "interrupted",
            AutonomyStatus::Refused => "refused",
            AutonomyStatus::Promoted => "promoted",
        }
    }
}

impl std::fmt::Display for AutonomyStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, EventKind};

    #[test]
    fn a_steer_status_is_written_under_its_wire_name() {
        use SteerStatus::*;
        for status in [Queued, Prompted, RejectedFull, Delivered, Refused] {
            assert_eq!(serde_json::to_string(&status).unwrap(), format!("\"{}\"", status.as_str()));
        }
        let ev = Event { seq: 5, agent_id: "w-1".into(), kind: EventKind::Steered { status: RejectedFull } };
        assert_eq!(serde_json::to_string(&ev).unwrap(), r#"{"seq":5,"agent_id":"w-1","type":"steered","status":"rejected_full"}"#);
    }

    #[test]
    fn an_error_kind_is_its_wire_name_and_one_this_build_does_not_know_is_kept_as_it_came() {
        for kind in ErrorKind::KNOWN {
            assert_eq!(ErrorKind::from(kind.as_str().to_string()), kind);
        }
        let known = r#"{"seq":3,"agent_id":"w-1","type":"error","kind":"http_status","message":"503"}"#;
        let ev: Event = serde_json::from_str(known).unwrap();
        assert_eq!(ev.kind, EventKind::Error { kind: ErrorKind::HttpStatus, message: "503".into() });
        assert_eq!(serde_json::to_string(&ev).unwrap(), known);
        let other = r#"{"seq":4,"agent_id":"w-1","type":"error","kind":"quota","message":"over"}"#;
        let ev: Event = serde_json::from_str(other).unwrap();
        assert_eq!(ev.kind, EventKind::Error { kind: ErrorKind::Other("quota".into()), message: "over".into() });
        assert_eq!(serde_json::to_string(&ev).unwrap(), other);
    }

    #[test]
    fn a_todo_action_is_written_under_its_wire_name() {
        use TodoAction::*;
        let names = [(Add, "add"), (Claim, "claim"), (Done, "done"), (Remove, "remove"), (Retry, "retry")];
        for (action, name) in names {
            let kind = EventKind::TodoChange { action, id: 7, line: "#7 water the plants".into() };
            let json = format!(r##"{{"type":"todo_change","action":"{name}","id":7,"line":"#7 water the plants"}}"##);
            assert_eq!(serde_json::to_string(&kind).unwrap(), json);
            assert_eq!(serde_json::from_str::<EventKind>(&json).unwrap(), kind);
            assert_eq!(action.to_string(), name);
        }
    }

    #[test]
    fn an_autonomy_status_is_written_under_its_wire_name() {
        use AutonomyStatus::*;
        let names = [
            (Running, "running"),
            (Done, "done"),
            (Failed, "failed"),
            (Interrupted, "interrupted"),
            (Refused, "refused"),
            (Promoted, "promoted"),
        ];
        for (status, name) in names {
            let kind = EventKind::Autonomy { job: "intent:i-1".into(), status, detail: None };
            let json = format!(r#"{{"type":"autonomy","job":"intent:i-1","status":"{name}","detail":null}}"#);
            assert_eq!(serde_json::to_string(&kind).unwrap(), json);
            assert_eq!(serde_json::from_str::<EventKind>(&json).unwrap(), kind);
            assert_eq!(status.to_string(), name);
        }
    }
}
