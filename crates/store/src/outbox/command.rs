//! Typed outbox commands (Choruz B7; docs/design.md §11 "Commands"): one JSON object per file,
//! field `type`, turned into an [`OutboxCommand`] or a [`Rejection`] carrying the exact text
//! (or result envelope) Choruz gives for it.
//!
//! Only the shape is checked here. Whatever needs the message store or the workspace (does the
//! group exist, is a `share_file` path inside the workspace) is the executing handler's.

use serde_json::{Map, Value};

use super::results::{ErrorCode, ResultEnvelope};

/// Task statuses (docs/design.md §11 [chosen]).
pub const TASK_STATUSES: [&str; 4] = ["todo", "in_progress", "blocked", "done"];

/// One command of the outbox. Optional strings are `None` when absent, not a string or blank,
/// as Choruz reads them (`as_str`, non-empty).
#[derive(Debug, Clone, PartialEq)]
pub enum OutboxCommand {
    /// `send`: `content` to `group` (its thread `thread` when set; `broadcast` defaults to
    /// true and is only read with a group), or to agent `to` (cicy [chosen]), else the reply
    /// of the turn. `metadata` is a JSON object or `None`.
    Send {
        content: String,
        group: Option<String>,
        thread: Option<String>,
        broadcast: bool,
        metadata: Option<Map<String, Value>>,
        to: Option<String>,
    },
    /// `share_file`: `path` relative to the workspace (checked by the handler), to `group`.
    ShareFile { path: String, group: Option<String> },
    /// `task_create`: a card `title` in `target`, deduplicated by `idempotency_key`.
    TaskCreate {
        target: TaskTarget,
        title: String,
        idempotency_key: Option<String>,
        task_key: Option<String>,
        status: Option<String>,
        context_label: Option<String>,
        assignee: Option<String>,
    },
    /// `task_update`: the card `task` gets the given fields.
    TaskUpdate { target: TaskTarget, task: TaskRef, status: Option<String>, blocked_reason: Option<String>, context_label: Option<String> },
    /// `task_transfer`: `task_update` plus the new `assignee` (a name, `@` stripped, or an id).
    TaskTransfer {
        target: TaskTarget,
        task: TaskRef,
        assignee: String,
        status: Option<String>,
        blocked_reason: Option<String>,
        context_label: Option<String>,
    },
    /// `create_group`: `members` are names or ids (legacy field `member_ids`).
    CreateGroup { name: String, description: Option<String>, members: Vec<String> },
    /// `set_cron`: `schedule` with a space is a 5-field cron, else `every` `<n>s|m|h|d`.
    SetCron { name: String, schedule: String, message: String },
    /// `provision_agent`: a new agent `name` with `instructions` (docs/design.md §3 create).
    ProvisionAgent { name: String, instructions: String, model: Option<String> },
    /// A non-empty `type` none of the above; the consumer answers `outbox: unknown command type`.
    Unknown(String),
}

/// Where a task command points: `conversation_id` wins over `group` when both are given (B7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskTarget {
    /// A conversation id (`conversation_id`).
    Conversation(String),
    /// A group name, resolved in the agent's workspace (`group`).
    Group(String),
}

/// Which card a task update names; both ids must match when both are given (B7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRef {
    pub task_id: Option<String>,
    pub task_key: Option<String>,
}

/// Why a command is not run: a reply text for the turn (`send` and the other chat commands)
/// or an `ok: false` result envelope (task commands, written to `results/`).
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// The text the turn answers with, e.g. `Failed to send to group 'ops': …`.
    Reply(String),
    /// Boxed: an envelope is large beside a reply text.
    Task(Box<ResultEnvelope>),
}

impl OutboxCommand {
    /// The command in `object` (which has a non-empty string `type`). `Ok(None)`: Choruz
    /// ignores it silently (empty `send` content, no `share_file` path, no name, an empty
    /// cron schedule or message).
    pub fn parse(kind: &str, object: &Map<String, Value>) -> Result<Option<OutboxCommand>, Rejection> {
        let text = |name: &str| opt_str(object, name);
        Ok(Some(match kind {
            "send" => return parse_send(object),
            "share_file" => match text("path") {
                Some(path) => OutboxCommand::ShareFile { path, group: text("group") },
                None => return Ok(None),
            },
            "task_create" | "task_update" | "task_transfer" => return parse_task(kind, object).map(Some),
            "create_group" => {
                let Some(name) = text("name") else { return Ok(None) };
                let members = object.get("members").or_else(|| object.get("member_ids")).and_then(Value::as_array);
                let members = members.into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect();
                OutboxCommand::CreateGroup { name, description: text("description"), members }
            }
            "set_cron" => match (text("schedule"), text("message")) {
                (Some(schedule), Some(message)) => {
                    OutboxCommand::SetCron { name: text("name").unwrap_or_else(|| "unnamed".into()), schedule, message }
                }
                _ => return Ok(None),
            },
            "provision_agent" => match text("name") {
                Some(name) => OutboxCommand::ProvisionAgent {
                    name,
                    instructions: text("instructions").unwrap_or_default(),
                    model: text("model").map(|m| m.trim().to_string()),
                },
                None => return Ok(None),
            },
            other => OutboxCommand::Unknown(other.to_string()),
        }))
    }
}

/// `send` (B7): the `thread`/`broadcast`/`metadata` checks apply to group sends only, and
/// their failure is `Failed to send to group '<g>': <reason>`.
fn parse_send(object: &Map<String, Value>) -> Result<Option<OutboxCommand>, Rejection> {
    let Some(content) = opt_str(object, "content") else { return Ok(None) };
    let to = opt_str(object, "to");
    let Some(group) = opt_str(object, "group") else {
        return Ok(Some(OutboxCommand::Send { content, group: None, thread: None, broadcast: true, metadata: None, to }));
    };
    let fail = |reason: &str| Rejection::Reply(format!("Failed to send to group '{group}': {reason}"));
    let metadata = match object.get("metadata") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m.clone()),
        Some(_) => return Err(fail("metadata must be a JSON object.")),
    };
    let thread = match object.get("thread") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) if !t.trim().is_empty() => Some(t.clone()),
        Some(_) => return Err(fail("thread must be a non-empty message id string.")),
    };
    let broadcast = match object.get("broadcast") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(fail("broadcast must be a JSON boolean.")),
    };
    Ok(Some(OutboxCommand::Send { content, group: Some(group), thread, broadcast, metadata, to }))
}

/// The task commands (B7); failures are result envelopes with B8's codes.
fn parse_task(kind: &str, object: &Map<String, Value>) -> Result<OutboxCommand, Rejection> {
    let text = |name: &str| opt_str(object, name);
    let (task_key, task_id, idempotency_key) = (text("task_key"), text("task_id"), text("idempotency_key"));
    let reject = |code: ErrorCode, message: &str| {
        let mut envelope = ResultEnvelope::ok(kind, text("task_key"), text("task_id"), text("idempotency_key"));
        envelope.fail(code, message);
        Rejection::Task(Box::new(envelope))
    };
    let target = match (text("conversation_id"), text("group")) {
        (Some(conv), _) => TaskTarget::Conversation(conv),
        (None, Some(group)) => TaskTarget::Group(group),
        (None, None) => return Err(reject(ErrorCode::MissingTarget, "group or conversation_id is required.")),
    };
    let status = text("status");
    if let Some(s) = status.as_deref().filter(|s| !TASK_STATUSES.contains(s)) {
        return Err(reject(ErrorCode::ValidationFailed, &format!("status '{s}' must be one of todo, in_progress, blocked, done.")));
    }
    if kind == "task_create" {
        let Some(title) = text("title") else { return Err(reject(ErrorCode::MissingTitle, "title is required.")) };
        let assignee = text("assignee_principal_id").or_else(|| text("assignee"));
        return Ok(OutboxCommand::TaskCreate {
            target,
            title,
            idempotency_key,
            task_key,
            status,
            context_label: text("context_label"),
            assignee,
        });
    }
    if task_id.is_none() && task_key.is_none() {
        return Err(reject(ErrorCode::MissingTask, "task_id or task_key is required."));
    }
    let task = TaskRef { task_id, task_key };
    let (blocked_reason, context_label) = (text("blocked_reason"), text("context_label"));
    if kind == "task_update" {
        return Ok(OutboxCommand::TaskUpdate { target, task, status, blocked_reason, context_label });
    }
    match text("assignee_principal_id").or_else(|| text("assignee")) {
        Some(assignee) => Ok(OutboxCommand::TaskTransfer { target, task, assignee, status, blocked_reason, context_label }),
        None => Err(reject(ErrorCode::MissingAssignee, "assignee is required.")),
    }
}

/// A string field that is present and not blank.
fn opt_str(object: &Map<String, Value>, name: &str) -> Option<String> {
    object.get(name).and_then(Value::as_str).filter(|s| !s.trim().is_empty()).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Option<OutboxCommand>, Rejection> {
        let object = v.as_object().unwrap().clone();
        let kind = object["type"].as_str().unwrap().to_string();
        OutboxCommand::parse(&kind, &object)
    }

    fn reply(v: Value) -> String {
        match parse(v) {
            Err(Rejection::Reply(text)) => text,
            other => panic!("not a reply rejection: {other:?}"),
        }
    }

    #[test]
    fn send_fields_are_checked_with_choruz_texts() {
        let g = |extra: Value| {
            let mut v = json!({"type": "send", "group": "ops", "content": "hi"});
            v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            v
        };
        assert_eq!(reply(g(json!({"metadata": [1]}))), "Failed to send to group 'ops': metadata must be a JSON object.");
        assert_eq!(reply(g(json!({"thread": ""}))), "Failed to send to group 'ops': thread must be a non-empty message id string.");
        assert_eq!(reply(g(json!({"thread": 7}))), "Failed to send to group 'ops': thread must be a non-empty message id string.");
        assert_eq!(reply(g(json!({"broadcast": "false"}))), "Failed to send to group 'ops': broadcast must be a JSON boolean.");
        let ok = parse(g(json!({"thread": "m1", "broadcast": false, "metadata": {"k": 1}}))).unwrap().unwrap();
        let metadata = json!({"k": 1}).as_object().cloned();
        assert_eq!(
            ok,
            OutboxCommand::Send {
                content: "hi".into(),
                group: Some("ops".into()),
                thread: Some("m1".into()),
                broadcast: false,
                metadata,
                to: None
            }
        );
    }

    #[test]
    fn a_send_without_group_ignores_group_fields_and_empty_content_is_ignored() {
        let direct = parse(json!({"type": "send", "content": "hi", "broadcast": "x", "to": "w-2"})).unwrap().unwrap();
        assert_eq!(
            direct,
            OutboxCommand::Send {
                content: "hi".into(),
                group: None,
                thread: None,
                broadcast: true,
                metadata: None,
                to: Some("w-2".into())
            }
        );
        assert_eq!(parse(json!({"type": "send", "group": "ops", "content": ""})).unwrap(), None);
    }

    #[test]
    fn other_commands_take_their_defaults_or_are_ignored() {
        assert_eq!(
            parse(json!({"type": "set_cron", "schedule": "5m", "message": "ping"})).unwrap().unwrap(),
            OutboxCommand::SetCron { name: "unnamed".into(), schedule: "5m".into(), message: "ping".into() }
        );
        assert_eq!(parse(json!({"type": "set_cron", "schedule": "", "message": "ping"})).unwrap(), None);
        assert_eq!(parse(json!({"type": "share_file"})).unwrap(), None);
        assert_eq!(parse(json!({"type": "create_group", "members": ["a"]})).unwrap(), None);
        assert_eq!(
            parse(json!({"type": "create_group", "name": "g", "member_ids": ["a", 3, "b"]})).unwrap().unwrap(),
            OutboxCommand::CreateGroup { name: "g".into(), description: None, members: vec!["a".into(), "b".into()] }
        );
        assert_eq!(
            parse(json!({"type": "provision_agent", "name": "n", "instructions": "do", "model": " m "})).unwrap().unwrap(),
            OutboxCommand::ProvisionAgent { name: "n".into(), instructions: "do".into(), model: Some("m".into()) }
        );
        assert_eq!(parse(json!({"type": "dance"})).unwrap().unwrap(), OutboxCommand::Unknown("dance".into()));
    }

    #[test]
    fn task_commands_fail_with_result_codes() {
        let code = |v: Value| match parse(v) {
            Err(Rejection::Task(e)) => (e.error_code.unwrap(), e.message.unwrap()),
            other => panic!("not a task rejection: {other:?}"),
        };
        assert_eq!(
            code(json!({"type": "task_create", "title": "t"})),
            (ErrorCode::MissingTarget, "group or conversation_id is required.".into())
        );
        assert_eq!(code(json!({"type": "task_create", "group": "g"})), (ErrorCode::MissingTitle, "title is required.".into()));
        assert_eq!(code(json!({"type": "task_update", "group": "g"})), (ErrorCode::MissingTask, "task_id or task_key is required.".into()));
        assert_eq!(
            code(json!({"type": "task_transfer", "group": "g", "task_key": "k"})),
            (ErrorCode::MissingAssignee, "assignee is required.".into())
        );
        assert_eq!(
            code(json!({"type": "task_update", "group": "g", "task_key": "k", "status": "doing"})),
            (ErrorCode::ValidationFailed, "status 'doing' must be one of todo, in_progress, blocked, done.".into())
        );
        let created = parse(json!({"type": "task_create", "group": "g", "conversation_id": "c1", "title": "t", "idempotency_key": "i"}))
            .unwrap()
            .unwrap();
        assert_eq!(
            created,
            OutboxCommand::TaskCreate {
                target: TaskTarget::Conversation("c1".into()),
                title: "t".into(),
                idempotency_key: Some("i".into()),
                task_key: None,
                status: None,
                context_label: None,
                assignee: None
            }
        );
    }
}
