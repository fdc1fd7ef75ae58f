//! The `wake` tool group (docs/design.md §10 "Tools"): `todo`, `sleep_until`, `reply`, `send`,
//! `inbox`, and their refusals (cryo's hibernate gate).
//!
//! Each tool reads its input, does its one thing through `super::db`, `super::inbox`,
//! `super::claim` and `super::deliver` on a blocking thread, updates the turn's
//! [`WakeTurn`] and reports a [`WakeNote`]. Must not touch the turn loop: `sleep_until` only
//! leaves the text the turn ends with (`WakeState::end`).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::at::{parse_at, At};
use super::claim::{claim_next, has_unclaimed};
use super::db::WakeDb;
use super::deliver::{deliver, Outgoing};
use super::inbox::{dialog, DialogFilter, Mailbox};
use super::obligation::ResolvedBy;
use super::state::{Claim, WakeNote, WakeTurn};
use super::todo::todo_line;
use super::WakeError;
use crate::event::TodoAction;
use crate::messages::route;
use crate::tools::{Tool, ToolContext, ToolOutput};

pub const TODO: &str = "todo";
pub const SLEEP_UNTIL: &str = "sleep_until";
pub const REPLY: &str = "reply";
pub const SEND: &str = "send";
pub const INBOX: &str = "inbox";

/// The wake tool called `name`, if it is one.
pub fn builtin(name: &str) -> Option<Arc<dyn Tool>> {
    let kind = match name {
        TODO => Kind::Todo,
        SLEEP_UNTIL => Kind::SleepUntil,
        REPLY => Kind::Reply,
        SEND => Kind::Send,
        INBOX => Kind::Inbox,
        _ => return None,
    };
    Some(Arc::new(WakeTool(kind)))
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Todo,
    SleepUntil,
    Reply,
    Send,
    Inbox,
}

#[derive(Debug)]
struct WakeTool(Kind);

const AT_FORMS: &str = "\"+N <unit>\" (minute|min|hour|hr|day|week, optional s; one space), \"YYYY-MM-DDTHH:MM[:SS]\", \"YYYY-MM-DD HH:MM[:SS]\" or \"YYYY-MM-DD\", local time";

impl Tool for WakeTool {
    fn name(&self) -> &str {
        match self.0 {
            Kind::Todo => TODO,
            Kind::SleepUntil => SLEEP_UNTIL,
            Kind::Reply => REPLY,
            Kind::Send => SEND,
            Kind::Inbox => INBOX,
        }
    }

    fn description(&self) -> &str {
        match self.0 {
            Kind::Todo => "Your todo list; a pending todo wakes you at its time. action add (text, at), ls, done (id), remove (id).",
            Kind::SleepUntil => "End this turn and sleep. With `at`, a todo wakes you then (text: `summary`); without it, you wake at your earliest pending todo. `complete: true` ends the plan. Refused while the inbox has unread messages, while a claimed conversation is unanswered, and (complete) while a todo is due. Call it last: nothing after it in the same batch matters.",
            Kind::Reply => "Answer the conversation claimed for this wake (its sender, its thread). Your final answer is also sent as the reply in a direct chat when you call neither reply nor send.",
            Kind::Send => "Send a message: `to` is `human`, an agent id (w-<n>) or a name. An agent gets it in its inbox and wakes.",
            Kind::Inbox => "action receive: claim the next conversation of your inbox and read it (refused while the one you hold is unanswered). action dialog: the transcript of your messages (last N, default 20; since ISO time; or all).",
        }
    }

    fn input_schema(&self) -> Value {
        match self.0 {
            Kind::Todo => json!({"type": "object", "properties": {
                "action": {"type": "string", "enum": ["add", "ls", "done", "remove"]},
                "text": {"type": "string"},
                "at": {"type": "string", "description": format!("when: {AT_FORMS}")},
                "id": {"type": "integer"}}, "required": ["action"]}),
            Kind::SleepUntil => json!({"type": "object", "properties": {
                "at": {"type": "string", "description": format!("next wake: {AT_FORMS}")},
                "summary": {"type": "string"},
                "complete": {"type": "boolean"}}}),
            Kind::Reply => json!({"type": "object", "properties": {
                "text": {"type": "string"}, "question": {"type": "boolean"}}, "required": ["text"]}),
            Kind::Send => json!({"type": "object", "properties": {
                "to": {"type": "string"}, "text": {"type": "string"},
                "question": {"type": "boolean"}, "thread": {"type": "string"}}, "required": ["to", "text"]}),
            Kind::Inbox => json!({"type": "object", "properties": {
                "action": {"type": "string", "enum": ["receive", "dialog"]},
                "last": {"type": "integer"}, "since": {"type": "string"}, "all": {"type": "boolean"}}, "required": ["action"]}),
        }
    }

    fn run<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let Some(w) = ctx.extensions.get::<Arc<WakeTurn>>().cloned() else {
                return ToolOutput::error("error: the wake tools need an agent (none in this context)");
            };
            let kind = self.0;
            let input = input.clone();
            let joined = tokio::task::spawn_blocking(move || match kind {
                Kind::Todo => todo(&w, &input),
                Kind::SleepUntil => sleep_until(&w, &input),
                Kind::Reply => reply(&w, &input),
                Kind::Send => send(&w, &input),
                Kind::Inbox => inbox(&w, &input),
            })
            .await;
            match joined {
                Ok(Ok(out)) => out,
                Ok(Err(e)) => ToolOutput::error(format!("error: {e}")),
                Err(e) => ToolOutput::error(format!("error: the tool stopped: {e}")),
            }
        })
    }
}

type Ran = Result<ToolOutput, WakeError>;

fn str_field<'a>(input: &'a Value, key: &str) -> Option<&'a str> {
    input.get(key).and_then(Value::as_str).filter(|s| !s.trim().is_empty())
}

fn missing(field: &str, tool: &str) -> ToolOutput {
    ToolOutput::error(format!("error: `{field}` is required for {tool}"))
}

fn parse_when(at: &str) -> Result<At, ToolOutput> {
    parse_at(at, chrono::Local::now()).map_err(|e| ToolOutput::error(format!("error: {e}")))
}

fn todo(w: &WakeTurn, input: &Value) -> Ran {
    let mut db = WakeDb::open(&w.home)?;
    let id = input.get("id").and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok());
    match input.get("action").and_then(Value::as_str) {
        Some("add") => {
            let Some(text) = str_field(input, "text") else { return Ok(missing("text", "todo add")) };
            let Some(at) = str_field(input, "at") else { return Ok(missing("at", "todo add")) };
            let at = match parse_when(at) {
                Ok(at) => at,
                Err(refused) => return Ok(refused),
            };
            let added = db.todo_add(&w.agent_id, text.trim(), &at)?;
            let line = format!("#{} {} (at: {})", added.id, text.trim(), at.local);
            if added.existed {
                return Ok(ToolOutput::ok(format!("Todo {line} already exists.")));
            }
            w.note(WakeNote::Todo { action: TodoAction::Add, id: added.id, line: line.clone() });
            Ok(ToolOutput::ok(format!("Added todo {line}.")))
        }
        Some("ls") => {
            let todos = db.todo_list(&w.agent_id, false)?;
            if todos.is_empty() {
                return Ok(ToolOutput::ok("No todos."));
            }
            Ok(ToolOutput::ok(todos.iter().map(todo_line).collect::<Vec<_>>().join("\n")))
        }
        Some(action @ ("done" | "remove")) => {
            let Some(id) = id else { return Ok(missing("id", &format!("todo {action}"))) };
            let t = if action == "done" { db.todo_done(&w.agent_id, id)? } else { db.todo_remove(&w.agent_id, id)? };
            let line = todo_line(&t);
            w.note(WakeNote::Todo { action: if action == "done" { TodoAction::Done } else { TodoAction::Remove }, id, line: line.clone() });
            Ok(ToolOutput::ok(if action == "done" { format!("Done: #{id} {}", t.text) } else { format!("Removed: #{id} {}", t.text) }))
        }
        _ => Ok(ToolOutput::error("error: `action` must be add, ls, done or remove")),
    }
}

/// The hibernate gate *(cryo)*: unread inbox, then an unanswered claim, then (complete) a due
/// todo, then (no `at`) no pending todo.
fn sleep_until(w: &WakeTurn, input: &Value) -> Ran {
    let mut db = WakeDb::open(&w.home)?;
    let complete = input.get("complete").and_then(Value::as_bool).unwrap_or(false);
    let summary = str_field(input, "summary").map(str::trim);
    if has_unclaimed(&db, &Mailbox::of_workspace(&w.workspace), &w.agent_id)? {
        return Ok(ToolOutput::error(
            "error: refused: unread messages are waiting in your inbox. Call inbox {\"action\":\"receive\"}, answer them, then sleep_until again.",
        ));
    }
    if let Some(c) = w.state().claim.as_ref().filter(|c| !c.answered) {
        return Ok(ToolOutput::error(format!(
            "error: refused: the conversation from {} is not answered yet. Call reply first, then sleep_until again.",
            c.from
        )));
    }
    let now = chrono::Local::now().timestamp();
    if complete {
        if let Some(t) = db.todo_list(&w.agent_id, false)?.into_iter().find(|t| t.at_unix <= now) {
            return Ok(ToolOutput::error(format!(
                "error: refused: todo #{} is due ({}, at: {}). Do it and mark it done, or remove it, before completing the plan.",
                t.id, t.text, t.at_local
            )));
        }
        let end = format!("Plan complete.{}", summary.map(|s| format!(" {s}")).unwrap_or_default());
        w.state().end = Some(end.clone());
        return Ok(ToolOutput::ok(end));
    }
    let end = match str_field(input, "at") {
        Some(at) => {
            let at = match parse_when(at) {
                Ok(at) => at,
                Err(refused) => return Ok(refused),
            };
            let text = summary.unwrap_or("Continue the plan");
            let added = db.todo_add(&w.agent_id, text, &at)?;
            let line = format!("#{} {text} (at: {})", added.id, at.local);
            w.note(WakeNote::Todo { action: TodoAction::Add, id: added.id, line });
            format!("Sleeping until {}.", at.local)
        }
        None => match db.todo_next_due(&w.agent_id)? {
            Some(t) => format!("Sleeping until {} (todo #{}).", t.at_local, t.id),
            None => return Ok(ToolOutput::error(
                "error: refused: no pending todo would wake you. Give `at` for the next wake, or `complete: true` when the plan is done.",
            )),
        },
    };
    w.state().end = Some(end.clone());
    Ok(ToolOutput::ok(end))
}

fn reply(w: &WakeTurn, input: &Value) -> Ran {
    let Some(text) = str_field(input, "text") else { return Ok(missing("text", "reply")) };
    let Some(claim) = w.state().claim.clone() else {
        return Ok(ToolOutput::error("error: no claimed conversation to reply to; use send (or inbox receive first)"));
    };
    let question = input.get("question").and_then(Value::as_bool).unwrap_or(false);
    let out = answer(w, &claim, text, question)?;
    Ok(ToolOutput::ok(format!("Replied to {} ({out}).", claim.from)))
}

/// Sends `text` to the claim's sender in its conversation and resolves its obligation (again
/// harmlessly when it was resolved); returns the outbox copy's name. The outbox commands'
/// replies (`crate::messages::commands`) answer through it too.
///
/// Errors: the delivery's and `cicy.db`'s.
pub fn answer(w: &WakeTurn, claim: &Claim, text: &str, question: bool) -> Result<String, WakeError> {
    let msg = Outgoing { to: claim.from.clone(), text: text.to_string(), question, meta: claim_meta(claim) };
    let file = deliver(&w.home, &w.workspace, &w.agent_id, &msg)?;
    WakeDb::open(&w.home)?.obligation_resolve(claim.obligation_id, ResolvedBy::Agent)?;
    {
        let mut st = w.state();
        st.sent += 1;
        if let Some(c) = st.claim.as_mut() {
            c.answered = true;
        }
    }
    w.note(WakeNote::MessageOut { from: w.agent_id.clone(), to: claim.from.clone(), text: text.to_string(), file: file.name.clone() });
    Ok(file.name)
}

/// Front matter of a reply: the `msg` calls it answers (comma-separated ids).
pub const MSG_CALLS: &str = "msg_calls";

/// The front matter a reply carries so it lands in the claimed conversation and thread.
pub fn claim_meta(c: &Claim) -> BTreeMap<String, String> {
    let mut meta = BTreeMap::new();
    if let Some(t) = &c.thread {
        meta.insert("thread".to_string(), t.clone());
    }
    if let Some(g) = &c.group {
        meta.insert("group".to_string(), g.clone());
    }
    if !c.conv.starts_with("direct:") {
        meta.insert("conv".to_string(), c.conv.clone());
    }
    meta.insert(route::META_HOPS.to_string(), c.hops.to_string());
    if !c.msg_calls.is_empty() {
        let ids: Vec<String> = c.msg_calls.iter().map(i64::to_string).collect();
        meta.insert(MSG_CALLS.to_string(), ids.join(","));
    }
    meta
}

fn send(w: &WakeTurn, input: &Value) -> Ran {
    let Some(to) = str_field(input, "to") else { return Ok(missing("to", "send")) };
    let Some(text) = str_field(input, "text") else { return Ok(missing("text", "send")) };
    let question = input.get("question").and_then(Value::as_bool).unwrap_or(false);
    let claim = w.state().claim.clone();
    // A send to the sender of the claimed conversation answers it (cryo: any send does).
    if let Some(c) = claim.filter(|c| !c.answered && c.from == to.trim()) {
        let file = answer(w, &c, text, question)?;
        return Ok(ToolOutput::ok(format!("Sent to {} ({file}).", c.from)));
    }
    let mut meta = BTreeMap::new();
    if let Some(t) = str_field(input, "thread") {
        meta.insert("thread".to_string(), t.trim().to_string());
    }
    // The hops of what this turn answers; `deliver` adds this message's own.
    let hops = w.state().claim.as_ref().map_or(0, |c| c.hops);
    meta.insert(route::META_HOPS.to_string(), hops.to_string());
    let msg = Outgoing { to: to.trim().to_string(), text: text.to_string(), question, meta };
    let file = deliver(&w.home, &w.workspace, &w.agent_id, &msg)?;
    w.state().sent += 1;
    w.note(WakeNote::MessageOut { from: w.agent_id.clone(), to: msg.to.clone(), text: text.to_string(), file: file.name.clone() });
    Ok(ToolOutput::ok(format!("Sent to {} ({}).", msg.to, file.name)))
}

fn inbox(w: &WakeTurn, input: &Value) -> Ran {
    if !w.waking {
        return Ok(ToolOutput::error(
            "error: the inbox is read in wake turns of `cicy-agent serve`: a message wakes you with it, and you are woken again while unread ones remain",
        ));
    }
    let action = input.get("action").and_then(Value::as_str);
    if !matches!(action, Some("receive" | "dialog")) {
        return Ok(ToolOutput::error("error: `action` must be receive or dialog"));
    }
    let mb = Mailbox::of_workspace(&w.workspace);
    let held = w.state().claim.clone();
    let unanswered = held.as_ref().is_some_and(|c| !c.answered);
    let mut new_files = held.map(|c| c.files).unwrap_or_default();
    let mut received = None;
    if !unanswered {
        let mut db = WakeDb::open(&w.home)?;
        let claimed = claim_next(&mut db, &mb, &w.agent_id, std::time::SystemTime::now(), crate::fsutil::write_grace())?;
        for note in claimed.aside {
            w.note(note);
        }
        if let Some((claim, msgs)) = claimed.claim {
            for m in &msgs {
                w.note(WakeNote::MessageIn { from: m.from.clone(), subject: m.subject.clone(), file: m.name.clone() });
            }
            new_files = claim.files.clone();
            w.state().claim = Some(claim);
            received = Some(route::prompt_for(&w.home, &w.agent_id, &msgs));
        }
    }
    if action == Some("receive") {
        return Ok(match (received, unanswered) {
            (Some(text), _) => ToolOutput::ok(text),
            (None, true) => ToolOutput::error(
                "error: refused: the conversation you hold is not answered yet. Reply to it before you receive the next one.",
            ),
            (None, false) => ToolOutput::ok("No messages."),
        });
    }
    let filter = if input.get("all").and_then(Value::as_bool).unwrap_or(false) {
        DialogFilter::All
    } else if let Some(since) = str_field(input, "since") {
        DialogFilter::Since(since.trim().to_string())
    } else {
        DialogFilter::Last(input.get("last").and_then(Value::as_u64).map_or(20, |n| n as usize))
    };
    Ok(ToolOutput::ok(dialog(&mb, &filter, &new_files)?))
}
