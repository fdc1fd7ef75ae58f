//! The group routes of docs/design.md §11 (for the dashboard and scripts): create a group, post in
//! it as a person, page its messages, list its tasks.
//!
//! Owns turning these requests into `cicy_runtime::messages::groups` calls on a blocking thread and
//! the store's errors into HTTP answers. Must not touch the actors: a post reaches the agents
//! as inbox files, which the inbox watch turns into wakes.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::http::{ApiError, ApiPath, ApiQuery, JsonBody};
use super::Hub;
use cicy_runtime::messages::groups;
use cicy_runtime::messages::route::RouteError;
use cicy_runtime::messages::store::StoreError;
use cicy_store::fsutil;

fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::GroupNotFound { .. }
        | StoreError::NoGroup { .. }
        | StoreError::NoConversation { .. }
        | StoreError::NoMessage { .. } => ApiError::not_found(e.to_string()),
        StoreError::Sql { .. } | StoreError::BadRow { .. } | StoreError::Registry(_) => ApiError::internal(e.to_string()),
        other => ApiError::bad_request(other.to_string()),
    }
}

fn route_error(e: RouteError) -> ApiError {
    match e {
        RouteError::Store(e) => store_error(e),
        other => ApiError::internal(other.to_string()),
    }
}

/// The person a request acts as: `from`, or `human` when it is absent or blank.
fn person_or_default(from: Option<String>) -> Result<String, ApiError> {
    let from = from.filter(|f| !f.trim().is_empty()).unwrap_or_else(|| "human".into());
    groups::person(&from).map_err(store_error)?;
    Ok(from)
}

#[derive(Deserialize)]
pub(super) struct CreateGroup {
    name: Option<String>,
    members: Option<Vec<String>>,
    description: Option<String>,
    from: Option<String>,
}

/// `POST /api/groups {name, members: [w-<n> | person name], description?, from? (human)}` →
/// 201 `{id, name}`.
pub(super) async fn create(State(hub): State<Hub>, JsonBody(body): JsonBody<CreateGroup>) -> Result<(StatusCode, Json<Value>), ApiError> {
    let name = body.name.ok_or_else(|| ApiError::bad_request("name and members required"))?;
    let members = body.members.ok_or_else(|| ApiError::bad_request("name and members required"))?;
    let from = person_or_default(body.from)?;
    let description = body.description.unwrap_or_default();
    let conv = fsutil::blocking(|| groups::create(&hub.shared.home, &from, &name, &description, &members)).map_err(store_error)?;
    Ok((StatusCode::CREATED, Json(json!({"id": conv.id, "name": conv.name}))))
}

#[derive(Deserialize)]
pub(super) struct PostBody {
    text: Option<String>,
    from: Option<String>,
    thread: Option<String>,
}

/// `POST /api/groups/{name}/messages {text, from? (human), thread?}` → 201 `{id, seq,
/// thread_root, delivered: [w-<n>…]}`.
pub(super) async fn post(
    State(hub): State<Hub>,
    ApiPath(name): ApiPath<String>,
    JsonBody(body): JsonBody<PostBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let text = body.text.filter(|t| !t.trim().is_empty()).ok_or_else(|| ApiError::bad_request("text required"))?;
    let from = person_or_default(body.from)?;
    let thread = body.thread.filter(|t| !t.trim().is_empty());
    let posted = fsutil::blocking(|| groups::post(&hub.shared.home, &from, &name, &text, thread.as_deref())).map_err(route_error)?;
    let delivered: Vec<&str> = posted.files.iter().map(|(a, _)| a.as_str()).collect();
    Ok((
        StatusCode::CREATED,
        Json(
            json!({"id": posted.message.id, "seq": posted.message.seq, "thread_root": posted.message.thread_root, "delivered": delivered}),
        ),
    ))
}

#[derive(Deserialize)]
pub(super) struct PageQuery {
    from: Option<String>,
    before: Option<String>,
    limit: Option<u32>,
}

/// `GET /api/groups/{name}/messages?from=&before=<cursor>&limit=1..100` → `{conv_id, name,
/// messages (oldest first), before (the older page's cursor, or null)}`.
pub(super) async fn messages(
    State(hub): State<Hub>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Value>, ApiError> {
    let from = person_or_default(q.from)?;
    let (conv, page) = fsutil::blocking(|| groups::page(&hub.shared.home, &from, &name, q.before.as_deref(), q.limit.unwrap_or(50)))
        .map_err(store_error)?;
    Ok(Json(json!({"conv_id": conv.id, "name": conv.name, "messages": page.messages, "before": page.before})))
}

#[derive(Deserialize)]
pub(super) struct TasksQuery {
    from: Option<String>,
}

/// `GET /api/groups/{name}/tasks?from=` → `{conv_id, name, tasks}`.
pub(super) async fn tasks(
    State(hub): State<Hub>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<TasksQuery>,
) -> Result<Json<Value>, ApiError> {
    let from = person_or_default(q.from)?;
    let (conv, tasks) = fsutil::blocking(|| groups::tasks(&hub.shared.home, &from, &name)).map_err(store_error)?;
    Ok(Json(json!({"conv_id": conv.id, "name": conv.name, "tasks": tasks})))
}
