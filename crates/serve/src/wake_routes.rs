//! The routes of docs/design.md §10 (for the CLI through serve and the dashboard later): an agent's
//! todos (list, add, done, remove) and messages (paged; post one into its inbox), and the
//! §10 columns of the status rows (`wake_at`, `unanswered`).
//!
//! Owns turning these requests into `cicy_runtime::wake` calls on a blocking thread, and telling the
//! agent's actor (events) and the scheduler of a todo change. Must not touch the turn or the
//! claims: a posted message wakes the agent through the inbox watch like any other file.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::actor::{Op, Status};
use super::http::{ApiError, ApiPath, ApiQuery, JsonBody};
use super::routes::agent;
use super::Hub;
use cicy_protocol::event::TodoAction;
use cicy_runtime::wake::at::{at_of_unix, parse_at};
use cicy_runtime::wake::db::{WakeDb, WakeDbError};
use cicy_runtime::wake::inbox::{InboxError, Mailbox, NewMessage};
use cicy_runtime::wake::state::WakeNote;
use cicy_runtime::wake::todo::{todo_line, Todo};
use cicy_store::fsutil;

fn db_error(e: WakeDbError) -> ApiError {
    match e {
        WakeDbError::NoSuchTodo { .. } => ApiError::not_found(e.to_string()),
        other => ApiError::internal(other.to_string()),
    }
}

fn open_db(hub: &Hub) -> Result<WakeDb, ApiError> {
    WakeDb::open(&hub.shared.home).map_err(db_error)
}

/// A todo as the API shows it: its fields and its `todo ls` line.
fn todo_json(t: &Todo) -> Value {
    let mut v = serde_json::to_value(t).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("line".into(), Value::String(todo_line(t)));
    }
    v
}

/// A todo changed: the scheduler looks again and the agent's stream shows it. The change is
/// made, so its note waits for room in a full queue rather than being refused.
async fn changed(hub: &Hub, id: &str, note: WakeNote) {
    hub.shared.scheduler.changed(id);
    if let Some(h) = hub.agent(id) {
        h.send(Op::Note { note }).await;
    }
}

#[derive(Deserialize)]
pub(super) struct TodoQuery {
    all: Option<bool>,
}

/// `GET /api/agents/{id}/todos[?all=true]` → `{agent_id, todos: [{id, text, at_local, at_unix,
/// status, attempt, created, done_at, line}]}`.
pub(super) async fn todos(
    State(hub): State<Hub>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<TodoQuery>,
) -> Result<Json<Value>, ApiError> {
    agent(&hub, &id)?;
    let list = fsutil::blocking(|| open_db(&hub)?.todo_list(&id, q.all.unwrap_or(false)).map_err(db_error))?;
    Ok(Json(json!({"agent_id": id, "todos": list.iter().map(todo_json).collect::<Vec<_>>()})))
}

#[derive(Deserialize)]
pub(super) struct AddTodo {
    text: Option<String>,
    at: Option<String>,
}

/// `POST /api/agents/{id}/todos {text, at}` → 201 `{todo, existed}`; a bad `at` → 400 with the
/// list of accepted forms.
pub(super) async fn add_todo(
    State(hub): State<Hub>,
    ApiPath(id): ApiPath<String>,
    JsonBody(body): JsonBody<AddTodo>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    agent(&hub, &id)?;
    let text = body.text.filter(|t| !t.trim().is_empty()).ok_or_else(|| ApiError::bad_request("text required"))?;
    let at = body.at.ok_or_else(|| ApiError::bad_request("at required"))?;
    let at = parse_at(&at, chrono::Local::now()).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let (added, todo) = fsutil::blocking(|| {
        let mut db = open_db(&hub)?;
        let added = db.todo_add(&id, text.trim(), &at).map_err(db_error)?;
        let todo = db.todo_list(&id, true).map_err(db_error)?.into_iter().find(|t| t.id == added.id);
        Ok::<_, ApiError>((added, todo))
    })?;
    let todo = todo.ok_or_else(|| ApiError::internal("the todo just added is gone"))?;
    if !added.existed {
        changed(&hub, &id, WakeNote::Todo { action: TodoAction::Add, id: todo.id, line: todo_line(&todo) }).await;
    }
    Ok((StatusCode::CREATED, Json(json!({"todo": todo_json(&todo), "existed": added.existed}))))
}

/// `POST /api/agents/{id}/todos/{n}/done` → `{todo}`; 404 for no such pending todo.
pub(super) async fn done_todo(State(hub): State<Hub>, ApiPath((id, n)): ApiPath<(String, u32)>) -> Result<Json<Value>, ApiError> {
    agent(&hub, &id)?;
    let t = fsutil::blocking(|| open_db(&hub)?.todo_done(&id, n).map_err(db_error))?;
    changed(&hub, &id, WakeNote::Todo { action: TodoAction::Done, id: n, line: todo_line(&t) }).await;
    Ok(Json(json!({"todo": todo_json(&t)})))
}

/// `DELETE /api/agents/{id}/todos/{n}` → `{todo}`; 404 for no such todo.
pub(super) async fn remove_todo(State(hub): State<Hub>, ApiPath((id, n)): ApiPath<(String, u32)>) -> Result<Json<Value>, ApiError> {
    agent(&hub, &id)?;
    let t = fsutil::blocking(|| open_db(&hub)?.todo_remove(&id, n).map_err(db_error))?;
    changed(&hub, &id, WakeNote::Todo { action: TodoAction::Remove, id: n, line: todo_line(&t) }).await;
    Ok(Json(json!({"todo": todo_json(&t)})))
}

#[derive(Deserialize)]
pub(super) struct PageQuery {
    before: Option<String>,
    limit: Option<usize>,
}

/// `GET /api/agents/{id}/messages[?before=<cursor>&limit=1..100]` → `{agent_id, messages:
/// [{box, cursor, name, from, subject, timestamp, question, meta, body}]}`, oldest first; the
/// first row's `cursor` pages back *(cryo hub: `"<file name>|<inbox|outbox>"`)*.
pub(super) async fn messages(
    State(hub): State<Hub>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Value>, ApiError> {
    agent(&hub, &id)?;
    let ws = hub.workspace(&id).ok_or_else(|| ApiError::not_found(id.clone()))?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::bad_request("limit must be 1..100"));
    }
    let page = fsutil::blocking(|| Mailbox::of_workspace(&ws).page(q.before.as_deref(), limit))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let rows: Vec<Value> = page
        .into_iter()
        .map(|(folder, m)| {
            let folder = serde_json::to_value(folder).unwrap_or(Value::Null);
            let cursor = format!("{}|{}", m.name, folder.as_str().unwrap_or(""));
            let mut v = serde_json::to_value(&m).unwrap_or(Value::Null);
            if let Value::Object(o) = &mut v {
                o.insert("box".into(), folder);
                o.insert("cursor".into(), Value::String(cursor));
            }
            v
        })
        .collect();
    Ok(Json(json!({"agent_id": id, "messages": rows})))
}

#[derive(Deserialize)]
pub(super) struct PostMessage {
    text: Option<String>,
    from: Option<String>,
    subject: Option<String>,
    question: Option<bool>,
    thread: Option<String>,
}

/// `POST /api/agents/{id}/messages {text, from? (human), subject?, question?, thread?}` → 201
/// `{file}`: one file in the agent's inbox, which wakes it (cryo hub's send).
pub(super) async fn send_message(
    State(hub): State<Hub>,
    ApiPath(id): ApiPath<String>,
    JsonBody(body): JsonBody<PostMessage>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    agent(&hub, &id)?;
    let ws = hub.workspace(&id).ok_or_else(|| ApiError::not_found(id.clone()))?;
    let text = body.text.filter(|t| !t.trim().is_empty()).ok_or_else(|| ApiError::bad_request("text required"))?;
    if body.from.as_deref().map(str::trim) == Some(cicy_runtime::wake::deliver::SERVE_SENDER) {
        return Err(ApiError::bad_request(
            "`from: cicy` is the runtime's own name (its notices are never answered); choose another sender",
        ));
    }
    let mut meta = BTreeMap::new();
    if let Some(t) = body.thread.filter(|t| !t.trim().is_empty()) {
        meta.insert("thread".to_string(), t);
    }
    let msg = NewMessage {
        from: body.from.unwrap_or_else(|| "human".into()),
        subject: body.subject,
        body: text,
        question: body.question.unwrap_or(false),
        meta,
    };
    let written =
        fsutil::blocking(|| Mailbox::of_workspace(&ws).write(cicy_runtime::wake::inbox::Folder::Inbox, &msg)).map_err(|e| match e {
            InboxError::EmptyFrom | InboxError::EmptyBody | InboxError::BadMetaKey { .. } => ApiError::bad_request(e.to_string()),
            e => ApiError::internal(e.to_string()),
        })?;
    Ok((StatusCode::CREATED, Json(json!({"file": written.name}))))
}

/// Fills `wake_at` and `unanswered` of status rows from `cicy.db` (one open for all rows).
pub(super) fn fill_status(hub: &Hub, rows: &mut [Status]) -> Result<(), ApiError> {
    fsutil::blocking(|| {
        let db = open_db(hub)?;
        let next: BTreeMap<String, i64> = db.todo_next_due_all().map_err(db_error)?.into_iter().map(|(at, a)| (a, at)).collect();
        let mut open: BTreeMap<String, usize> = BTreeMap::new();
        for ob in db.obligation_unresolved(None).map_err(db_error)? {
            *open.entry(ob.agent_id).or_default() += 1;
        }
        for row in rows.iter_mut() {
            row.wake_at = next.get(&row.id).map(|at| at_of_unix(*at).local);
            row.unanswered = open.get(&row.id).copied().unwrap_or(0);
        }
        Ok(())
    })
}
