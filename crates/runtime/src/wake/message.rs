//! The user message that starts a wake turn (docs/design.md §10 "Wake message").
//!
//! Owns the exact text: the `[cicy-wake]` line, the notices (delayed wake, previous crash), the
//! due todos, the todo list (cryo's 2048-byte cap), then the envelopes of the claimed messages
//! as `crate::messages::route::prompt_for` wrote them. Pure: it reads nothing.

use super::todo::{prompt_section, Todo};

/// Why a wake turn runs (docs/design.md §10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// A todo came due.
    Todo,
    /// A message landed in the inbox.
    Inbox,
    /// Found at serve's start: overdue todos, or mail that arrived while serve was down.
    Recovery,
    /// Idle autonomy's tick (§13).
    Heartbeat,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Todo => "todo",
            Reason::Inbox => "inbox",
            Reason::Recovery => "recovery",
            Reason::Heartbeat => "heartbeat",
        }
    }
}

/// cryo: a non-inbox wake more than 5 minutes after its todo's time says so.
pub const DELAY_NOTICE_AFTER_SECS: i64 = 300;

/// The notice read by the agent in the wake after one that crashed.
pub const PREVIOUS_CRASH_NOTICE: &str = "(cicy: the previous wake ended without finishing: any messages it claimed are archived and were answered by cicy, and its due todos were rescheduled with \"(attempt k)\". Check what it may have left half done.)";

/// Everything a wake message shows.
#[derive(Debug, Clone)]
pub struct WakeInputs<'a> {
    pub reason: Reason,
    /// The agent's wake count, from 1.
    pub n: u64,
    /// Local `YYYY-MM-DDTHH:MM:SS`.
    pub now_local: &'a str,
    pub now_unix: i64,
    /// The previous wake crashed (serve was killed, or its turn failed).
    pub previous_crash: bool,
    /// The todos this wake claimed.
    pub due: &'a [Todo],
    /// Every todo of the agent (pending, claimed, done) for the list.
    pub todos: &'a [Todo],
    /// The envelopes of the one conversation this wake claimed (§11), or empty.
    pub envelopes: &'a str,
}

/// The `DELAYED WAKE` notice when the earliest due todo is more than 5 minutes late *(cryo)*:
/// `DELAYED WAKE: scheduled <at>, <Xh Ym|Ym> late`.
pub fn delayed_notice(due: &[Todo], now_unix: i64) -> Option<String> {
    let first = due.iter().min_by_key(|t| t.at_unix)?;
    let late = now_unix - first.at_unix;
    if late <= DELAY_NOTICE_AFTER_SECS {
        return None;
    }
    let (h, m) = (late / 3600, (late % 3600) / 60);
    let span = if h > 0 { format!("{h}h {m}m") } else { format!("{m}m") };
    Some(format!("DELAYED WAKE: scheduled {}, {span} late", first.at_local))
}

/// The wake turn's user message.
pub fn wake_message(w: &WakeInputs<'_>) -> String {
    let mut out = format!("[cicy-wake] reason:{} wake:{} now:{}\n", w.reason.as_str(), w.n, w.now_local);
    if let Some(d) = delayed_notice(w.due, w.now_unix) {
        out.push_str(&d);
        out.push('\n');
    }
    if w.previous_crash {
        out.push_str(PREVIOUS_CRASH_NOTICE);
        out.push('\n');
    }
    for t in w.due {
        out.push_str(&format!("Due: #{} {} (at: {})\n", t.id, t.text, t.at_local));
    }
    out.push('\n');
    match prompt_section(w.todos) {
        _ if w.todos.is_empty() => out.push_str("Todos: none.\n"),
        Some(s) => {
            out.push_str("Todos (the whole list; no need to call todo ls):\n");
            out.push_str(s.trim_end());
            out.push('\n');
        }
        None => out.push_str("Todos: too long to show here; call todo {\"action\":\"ls\"} for the full text.\n"),
    }
    if !w.envelopes.is_empty() {
        out.push('\n');
        out.push_str(w.envelopes);
        out.push('\n');
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wake::todo::TodoStatus;

    fn todo(id: u32, text: &str, at_unix: i64, status: TodoStatus) -> Todo {
        Todo {
            id,
            text: text.into(),
            at_local: format!("AT{id}"),
            at_unix,
            status,
            attempt: 0,
            created: "2026-12-01T00:00:00Z".into(),
            done_at: None,
        }
    }

    #[test]
    fn a_late_todo_says_how_late_in_hours_and_minutes_after_five_minutes_only() {
        let due = [todo(1, "x", 1000, TodoStatus::Claimed)];
        assert_eq!(delayed_notice(&due, 1000 + 300), None);
        assert_eq!(delayed_notice(&due, 1000 + 6 * 60 + 5).as_deref(), Some("DELAYED WAKE: scheduled AT1, 6m late"));
        assert_eq!(delayed_notice(&due, 1000 + 2 * 3600 + 5 * 60).as_deref(), Some("DELAYED WAKE: scheduled AT1, 2h 5m late"));
        assert_eq!(delayed_notice(&[], 99_999), None);
    }

    #[test]
    fn the_wake_message_reads_reason_notices_due_todos_list_and_envelope_in_that_order() {
        let due = [todo(2, "ship it", 0, TodoStatus::Claimed)];
        let all = [todo(1, "plan", 10_000, TodoStatus::Pending), todo(2, "ship it", 0, TodoStatus::Claimed)];
        let text = wake_message(&WakeInputs {
            reason: Reason::Todo,
            n: 7,
            now_local: "2026-12-01T09:30:00",
            now_unix: 600,
            previous_crash: true,
            due: &due,
            todos: &all,
            envelopes: "[choruz-incoming] from:@human direct-chat conv:0123456789abc roster:[] | how is it going?",
        });
        assert_eq!(
            text,
            format!(
                "[cicy-wake] reason:todo wake:7 now:2026-12-01T09:30:00\nDELAYED WAKE: scheduled AT2, 10m late\n{PREVIOUS_CRASH_NOTICE}\n\
                 Due: #2 ship it (at: AT2)\n\nTodos (the whole list; no need to call todo ls):\n1. [ ] plan (at: AT1)\n2. [~] ship it (at: AT2)\n\n\
                 [choruz-incoming] from:@human direct-chat conv:0123456789abc roster:[] | how is it going?"
            )
        );
    }
}
