//! The `write_todos` tool: the agent's working plan in `<workspace>/.cicy/plan.json`
//! (docs/design.md §12, CMDC `write_todos`). Not §10's `todo` (timed wake-ups), which is the runtime's `wake`.
//!
//! Owns the input check, the plan file and the `plan_change` event. Each call replaces the whole
//! list (CMDC: the full list every time); the file is written atomically, so a reader sees the
//! old plan or the new one. It knows nothing of the turn loop or the prompt: the plan reaches
//! the model only through its own calls' inputs, which stay in the history.

use std::path::Path;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub use cicy_protocol::plan::{Status, Todo};

use super::{Tool, ToolContext, ToolOutput};
use cicy_protocol::event::EventKind;
use cicy_store::fsutil;

pub const NAME: &str = "write_todos";

/// CMDC: what the model reads after a successful call (a one-line summary follows it).
pub const APPLIED: &str = "[effect applied]";

/// `plan.json`: `{"todos": [...]}` in the order the model gave them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub todos: Vec<Todo>,
}

/// The tool description shown to the model.
pub fn description() -> &'static str {
    "Write your plan for the current task as a todo list. Send the WHOLE list every time: it \
     replaces the previous one. Mark at most one item in_progress; mark items completed as \
     soon as they are done, cancelled when dropped. Use it for tasks of three or more steps."
}

/// JSON Schema of the input: `todos` (required), each `{id, content, status}`.
pub fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "description": "The complete list, replacing the previous one.",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "description": "Stable id of the item, e.g. \"1\"."},
                        "content": {"type": "string", "description": "What to do, one line."},
                        "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "cancelled"]}
                    },
                    "required": ["id", "content", "status"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["todos"],
        "additionalProperties": false
    })
}

/// The `write_todos` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteTodos;

impl Tool for WriteTodos {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        description()
    }

    fn input_schema(&self) -> Value {
        input_schema()
    }

    fn run<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move { run(input, ctx) })
    }
}

/// Checks the list, replaces `plan.json` and emits `plan_change {todos}`. The result is
/// `[effect applied] N todos: a pending, b in_progress, c completed, d cancelled` (only the
/// non-zero counts).
/// Errors (nothing written): input not matching the schema, an empty or repeated `id`, more
/// than one item `in_progress`, the file not writable.
pub fn run(input: &Value, ctx: &ToolContext) -> ToolOutput {
    let plan: Plan = match Plan::deserialize(input) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(format!("error: invalid input: {e}; expected {{\"todos\": [{{\"id\", \"content\", \"status\"}}]}} with status pending, in_progress, completed or cancelled")),
    };
    if let Some(problem) = check(&plan.todos) {
        return ToolOutput::error(format!("error: {problem}; the plan was not changed"));
    }
    let path = cicy_protocol::plan::path(&ctx.workspace);
    if let Err(e) = write(&path, &plan) {
        return ToolOutput::error(format!("error: could not write the plan: {e}"));
    }
    if let Some(events) = &ctx.events {
        events.emit(EventKind::PlanChange { todos: plan.todos.clone() });
    }
    ToolOutput::ok(format!("{APPLIED} {}", summary(&plan.todos)))
}

/// Why a list is refused, if it is.
fn check(todos: &[Todo]) -> Option<String> {
    if let Some(t) = todos.iter().find(|t| t.id.trim().is_empty()) {
        return Some(format!("a todo has an empty id (content {:?})", t.content));
    }
    for (i, t) in todos.iter().enumerate() {
        if todos[..i].iter().any(|u| u.id == t.id) {
            return Some(format!("the id {:?} is used twice", t.id));
        }
    }
    let running: Vec<&str> = todos.iter().filter(|t| t.status == Status::InProgress).map(|t| t.id.as_str()).collect();
    (running.len() > 1).then(|| format!("{} todos are in_progress ({}); at most one may be", running.len(), running.join(", ")))
}

/// `N todos: a completed, b in_progress, c pending, d cancelled` (only the non-zero counts).
pub fn summary(todos: &[Todo]) -> String {
    let counts: Vec<String> = Status::ALL
        .iter()
        .map(|s| (todos.iter().filter(|t| t.status == *s).count(), s.as_str()))
        .filter(|(n, _)| *n > 0)
        .map(|(n, s)| format!("{n} {s}"))
        .collect();
    let noun = if todos.len() == 1 { "todo" } else { "todos" };
    if counts.is_empty() {
        format!("0 {noun}")
    } else {
        format!("{} {noun}: {}", todos.len(), counts.join(", "))
    }
}

fn write(path: &Path, plan: &Plan) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(plan).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    fsutil::blocking(|| fsutil::write_atomic(path, &bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cicy_protocol::event::{Emitter, Event};
    use std::sync::{Arc, Mutex};

    fn context(ws: &Path) -> (ToolContext, Arc<Mutex<Vec<EventKind>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let events = Emitter::new("w-1", move |e: &Event| sink.lock().unwrap().push(e.kind.clone()));
        (ToolContext { events: Some(events), ..ToolContext::for_tests(ws) }, seen)
    }

    fn todo(id: &str, content: &str, status: Status) -> Todo {
        Todo { id: id.into(), content: content.into(), status }
    }

    #[test]
    fn a_list_replaces_plan_json_and_is_reported() {
        let ws = tempfile::tempdir().unwrap();
        let (ctx, seen) = context(ws.path());
        let input = json!({"todos": [
            {"id": "1", "content": "Read the spec", "status": "completed"},
            {"id": "2", "content": "Write the code", "status": "in_progress"},
            {"id": "3", "content": "Test", "status": "pending"}
        ]});
        assert_eq!(run(&input, &ctx), ToolOutput::ok("[effect applied] 3 todos: 1 pending, 1 in_progress, 1 completed"));
        let path = ws.path().join(".cicy/plan.json");
        let expected = "{\n  \"todos\": [\n    {\n      \"id\": \"1\",\n      \"content\": \"Read the spec\",\n      \"status\": \"completed\"\n    },\n    {\n      \"id\": \"2\",\n      \"content\": \"Write the code\",\n      \"status\": \"in_progress\"\n    },\n    {\n      \"id\": \"3\",\n      \"content\": \"Test\",\n      \"status\": \"pending\"\n    }\n  ]\n}\n";
        assert_eq!(std::fs::read_to_string(&path).unwrap(), expected);
        let todos = vec![
            todo("1", "Read the spec", Status::Completed),
            todo("2", "Write the code", Status::InProgress),
            todo("3", "Test", Status::Pending),
        ];
        assert_eq!(*seen.lock().unwrap(), [EventKind::PlanChange { todos }]);
        assert_eq!(serde_json::to_value(&seen.lock().unwrap()[0]).unwrap()["type"], "plan_change");

        assert_eq!(run(&json!({"todos": []}), &ctx), ToolOutput::ok("[effect applied] 0 todos"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\n  \"todos\": []\n}\n");
    }

    #[test]
    fn a_bad_list_is_an_error_result_and_changes_nothing() {
        let ws = tempfile::tempdir().unwrap();
        let (ctx, seen) = context(ws.path());
        let two = json!({"todos": [
            {"id": "a", "content": "x", "status": "in_progress"},
            {"id": "b", "content": "y", "status": "in_progress"}
        ]});
        assert_eq!(
            run(&two, &ctx),
            ToolOutput::error("error: 2 todos are in_progress (a, b); at most one may be; the plan was not changed")
        );
        let twice = json!({"todos": [{"id": "a", "content": "x", "status": "pending"}, {"id": "a", "content": "y", "status": "pending"}]});
        assert_eq!(run(&twice, &ctx), ToolOutput::error("error: the id \"a\" is used twice; the plan was not changed"));
        let blank = json!({"todos": [{"id": " ", "content": "x", "status": "pending"}]});
        assert_eq!(run(&blank, &ctx), ToolOutput::error("error: a todo has an empty id (content \"x\"); the plan was not changed"));
        let bad_status = json!({"todos": [{"id": "a", "content": "x", "status": "done"}]});
        let out = run(&bad_status, &ctx);
        assert!(out.is_error);
        assert!(
            out.content.starts_with(
                "error: invalid input: unknown variant `done`, expected one of `pending`, `in_progress`, `completed`, `cancelled`"
            ),
            "{}",
            out.content
        );
        assert!(run(&json!({}), &ctx).content.starts_with("error: invalid input: missing field `todos`"));
        assert!(!ws.path().join(".cicy/plan.json").exists());
        assert!(seen.lock().unwrap().is_empty());
    }
}
