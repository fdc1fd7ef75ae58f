//! The routes of docs/design.md §9: each turns a request into an [`Op`] for the agent's actor, or
//! reads files no actor owns (history, AGENTS.md), and answers JSON or SSE.
//!
//! SSE frames are cicy's ([`super::sse`]): `event: <type>\ndata: <Event JSON>\nid: <seq>\n\n`,
//! `: ping` after 15 s without one. A frame about one request only (an input that was queued,
//! a command refused while busy) is not in the agent's log: it has no `id:` and its data
//! carries `"seq": 0`. Must not touch sessions or the turn loop.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::actor::{self, Admit, AgentHandle, EventsFrom, Op, Refused, QUEUE_CAPACITY};
use super::http::{ApiError, ApiPath, ApiQuery, JsonBody};
use super::sse::{self, gathered};
use super::Hub;
use cicy_gateway::ApiStyle;
use cicy_protocol::event::{ErrorKind, Event, EventKind, SteerStatus};
use cicy_runtime::agent::{self, CreateOptions};
use cicy_runtime::conversation::history::{CurrentFile, HistoryStore};
use cicy_runtime::prompt::window_start;
use cicy_store::eventlog::{Published, Subscription};
use cicy_store::fsutil;
use cicy_store::registry::Registry;

type SseResponse = Response;

fn sse(body: impl Stream<Item = bytes::Bytes> + Send + 'static, hub: &Hub) -> SseResponse {
    sse::response(body, hub.shutdown.clone().cancelled_owned())
}

/// Events of `sub` up to and including the first `done`.
fn until_done(sub: Subscription) -> impl Stream<Item = Published> + Send {
    stream::unfold((sub, false), |(mut sub, finished)| async move {
        if finished {
            return None;
        }
        let ev = sub.next().await?;
        let done = ev.kind == EventKind::Done;
        Some((ev, (sub, done)))
    })
}

/// Frames about one request only (not logged).
fn local(agent_id: &str, kinds: Vec<EventKind>) -> impl Stream<Item = Published> + Send {
    let agent_id = agent_id.to_string();
    stream::iter(kinds.into_iter().map(move |kind| Event { seq: 0, agent_id: agent_id.clone(), kind }.into()))
}

/// Asks the agent's actor; a full queue is a 503 naming the agent, at once.
pub(super) async fn ask<T>(handle: &AgentHandle, op: impl FnOnce(oneshot::Sender<T>) -> Op) -> Result<T, ApiError> {
    let (tx, rx) = oneshot::channel();
    let gone = || ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", "serve is shutting down");
    match handle.request(op(tx)) {
        Ok(()) => {}
        Err(Refused::Full) => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "queue_full",
                format!("the queue of agent {} is full ({QUEUE_CAPACITY} requests wait); nothing was done, try again shortly", handle.id),
            ))
        }
        Err(Refused::Gone) => return Err(gone()),
    }
    rx.await.map_err(|_| gone())
}

pub(super) fn agent(hub: &Hub, id: &str) -> Result<AgentHandle, ApiError> {
    hub.agent(id).ok_or_else(|| no_agent(id))
}

/// The registry's own words, so the CLI prints the same line through serve as in-process.
fn no_agent(id: &str) -> ApiError {
    ApiError::not_found(cicy_store::registry::RegistryError::NotFound(id.to_string()).to_string())
}

#[derive(Deserialize)]
pub(super) struct ChatBody {
    agent_id: Option<String>,
    text: Option<String>,
}

/// `POST /api/cicy/chat` *(cicy)*.
pub(super) async fn chat(State(hub): State<Hub>, JsonBody(body): JsonBody<ChatBody>) -> Result<SseResponse, ApiError> {
    let (Some(id), Some(text)) = (body.agent_id, body.text.filter(|t| !t.trim().is_empty())) else {
        return Err(ApiError::bad_request("agent_id and text required"));
    };
    let handle = agent(&hub, &id)?;
    let stream: std::pin::Pin<Box<dyn Stream<Item = Published> + Send>> = match ask(&handle, |reply| Op::Chat { text, reply }).await? {
        Admit::Started(sub) => Box::pin(until_done(sub)),
        Admit::Queued => Box::pin(local(&id, vec![EventKind::Queued { text: actor::QUEUED_TEXT.into() }, EventKind::Done])),
        Admit::Refused(message) => Box::pin(local(&id, vec![EventKind::Error { kind: ErrorKind::Busy, message }, EventKind::Done])),
        Admit::Failed(message) => return Err(ApiError::internal(message)),
    };
    Ok(sse(sse::each(stream), &hub))
}

#[derive(Deserialize)]
pub(super) struct AgentBody {
    agent_id: Option<String>,
    #[serde(default)]
    keep: usize,
}

fn agent_of(hub: &Hub, body: &AgentBody) -> Result<AgentHandle, ApiError> {
    let id = body.agent_id.as_deref().ok_or_else(|| ApiError::bad_request("agent_id required"))?;
    agent(hub, id)
}

/// `POST /api/cicy/cancel` *(cicy)* → `{success, canceled, agent_id, dropped}`; `dropped`
/// **[chosen]** counts the queued inputs the cancel dropped.
pub(super) async fn cancel(State(hub): State<Hub>, JsonBody(body): JsonBody<AgentBody>) -> Result<Json<Value>, ApiError> {
    let handle = agent_of(&hub, &body)?;
    let r = ask(&handle, |reply| Op::Cancel { reply }).await?;
    Ok(Json(json!({"success": true, "canceled": r.canceled, "agent_id": handle.id, "dropped": r.dropped})))
}

/// `POST /api/cicy/retry` *(cicy)* → `{success, started, reason}`.
pub(super) async fn retry(State(hub): State<Hub>, JsonBody(body): JsonBody<AgentBody>) -> Result<Json<actor::RetryReply>, ApiError> {
    let handle = agent_of(&hub, &body)?;
    Ok(Json(ask(&handle, |reply| Op::Retry { reply }).await?))
}

/// `POST /api/cicy/clear` *(cicy)* → `{success, canceled, conv_id}`.
pub(super) async fn clear(State(hub): State<Hub>, JsonBody(body): JsonBody<AgentBody>) -> Result<Json<actor::ClearReply>, ApiError> {
    let handle = agent_of(&hub, &body)?;
    ask(&handle, |reply| Op::Clear { reply }).await?.map(Json).map_err(|e| ApiError::internal(e.to_string()))
}

/// `POST /api/cicy/compact` **[chosen]** → `{success, outcome, before, after}`; 409 busy.
pub(super) async fn compact(State(hub): State<Hub>, JsonBody(body): JsonBody<AgentBody>) -> Result<Json<actor::CompactReply>, ApiError> {
    let handle = agent_of(&hub, &body)?;
    let keep = body.keep;
    ask(&handle, |reply| Op::Compact { keep, reply }).await?.map(Json).map_err(|actor::Busy| {
        ApiError::new(
            StatusCode::CONFLICT,
            "busy",
            format!(
                "/compact can only run when the agent is idle — it was NOT executed; resend after the current reply finishes ({} is busy)",
                handle.id
            ),
        )
    })
}

#[derive(Deserialize)]
pub(super) struct HistoryQuery {
    agent_id: Option<String>,
    #[serde(default)]
    all: Option<String>,
}

/// `GET /api/cicy/history?agent_id=&all=` *(cicy)* → `{agent_id, conv_id, messages}`: the
/// window the model sees, or with `all=1|true` every message of the active conversation.
/// Read-only: it heals nothing.
pub(super) async fn history(State(hub): State<Hub>, ApiQuery(q): ApiQuery<HistoryQuery>) -> Result<Json<Value>, ApiError> {
    let id = q.agent_id.ok_or_else(|| ApiError::bad_request("agent_id required"))?;
    let workspace = hub.workspace(&id).ok_or_else(|| no_agent(&id))?;
    let all = match q.all.as_deref() {
        None | Some("0" | "false" | "no") => false,
        Some("1" | "true" | "yes") => true,
        Some(other) => return Err(ApiError::bad_request(format!("all=`{other}` is not one of 1, true, yes, 0, false, no"))),
    };
    let answer = fsutil::blocking(|| {
        let store = HistoryStore::new(&workspace);
        let Some(conv) = store.active_conversation() else {
            return Ok(json!({"agent_id": id, "conv_id": null, "messages": []}));
        };
        let path = store.conversation_dir(&conv).join("current.json");
        let messages = match std::fs::read(&path) {
            Ok(bytes) => {
                let cur: CurrentFile =
                    serde_json::from_slice(&bytes).map_err(|e| ApiError::internal(format!("{}: {e}", path.display())))?;
                let start = if all { 0 } else { window_start(&cur.messages) };
                cur.messages[start..].to_vec()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(ApiError::internal(format!("{}: {e}", path.display()))),
        };
        Ok(json!({"agent_id": id, "conv_id": conv, "messages": messages}))
    })?;
    Ok(Json(answer))
}

/// `GET /api/memory/templates/agent/{id}` *(cicy)*: the agent's AGENTS.md.
pub(super) async fn agents_md(State(hub): State<Hub>, ApiPath(id): ApiPath<String>) -> Result<Json<Value>, ApiError> {
    let workspace = hub.workspace(&id).ok_or_else(|| no_agent(&id))?;
    let path = workspace.join("AGENTS.md");
    let (content, exists) = match fsutil::blocking(|| std::fs::read(&path)) {
        Ok(b) => (String::from_utf8_lossy(&b).into_owned(), true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), false),
        Err(e) => return Err(ApiError::internal(format!("{}: {e}", path.display()))),
    };
    Ok(Json(json!({"scope": "agent", "name": id, "filename": "AGENTS.md", "content": content, "path": path, "exists": exists})))
}

#[derive(Deserialize)]
pub(super) struct ContentBody {
    content: Option<String>,
}

/// `PUT /api/memory/templates/agent/{id}` *(cicy)* `{content}`: writes AGENTS.md atomically;
/// the next round reads it.
pub(super) async fn put_agents_md(
    State(hub): State<Hub>,
    ApiPath(id): ApiPath<String>,
    JsonBody(body): JsonBody<ContentBody>,
) -> Result<Json<Value>, ApiError> {
    let content = body.content.ok_or_else(|| ApiError::bad_request("content required"))?;
    let workspace = hub.workspace(&id).ok_or_else(|| no_agent(&id))?;
    let path = workspace.join("AGENTS.md");
    fsutil::blocking(|| fsutil::write_atomic(&path, content.as_bytes())).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Json(json!({"scope": "agent", "name": id, "filename": "AGENTS.md", "content": content, "path": path, "exists": true})))
}

/// `GET /api/agents`: one status row per agent, in id order.
pub(super) async fn list_agents(State(hub): State<Hub>) -> Result<Json<Vec<actor::Status>>, ApiError> {
    let asks = hub.handles().into_iter().map(|h| async move { ask(&h, |reply| Op::Status { reply }).await });
    let rows = futures_util::future::join_all(asks).await;
    let mut rows = rows.into_iter().collect::<Result<Vec<_>, _>>()?;
    super::wake_routes::fill_status(&hub, &mut rows)?;
    Ok(Json(rows))
}

/// `GET /api/agents/{id}`.
pub(super) async fn get_agent(State(hub): State<Hub>, ApiPath(id): ApiPath<String>) -> Result<Json<actor::Status>, ApiError> {
    let handle = agent(&hub, &id)?;
    let mut row = [ask(&handle, |reply| Op::Status { reply }).await?];
    super::wake_routes::fill_status(&hub, &mut row)?;
    let [row] = row;
    Ok(Json(row))
}

#[derive(Deserialize)]
pub(super) struct CreateBody {
    title: Option<String>,
    role_template: Option<String>,
    role: Option<String>,
    model: Option<String>,
    master_id: Option<String>,
    workspace: Option<std::path::PathBuf>,
    api_style: Option<String>,
}

/// `POST /api/agents` `{title, role_template?, role?, model?, master_id?, workspace?,
/// api_style?}` → 201 `{id}`; the new agent's actor starts at once.
pub(super) async fn create_agent(State(hub): State<Hub>, JsonBody(body): JsonBody<CreateBody>) -> Result<Response, ApiError> {
    let title = body.title.ok_or_else(|| ApiError::bad_request("title required"))?;
    let api_style = match body.api_style.as_deref() {
        None => None,
        Some(s) => Some(ApiStyle::parse(s).ok_or_else(|| ApiError::bad_request(format!("`{s}` is not an API style (anthropic, openai)")))?),
    };
    let opts = CreateOptions {
        title,
        role_template: body.role_template.unwrap_or_else(|| "assistant".into()),
        role: body.role.unwrap_or_else(|| "worker".into()),
        model: body.model,
        master: body.master_id,
        workspace: body.workspace,
        api_style,
    };
    let home = hub.shared.home.clone();
    let created = fsutil::blocking(|| agent::create(&home, opts)).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let id = created.record.id.clone();
    hub.add(created.record);
    Ok((StatusCode::CREATED, Json(json!({"id": id}))).into_response())
}

#[derive(Deserialize)]
pub(super) struct TextBody {
    text: Option<String>,
    #[serde(default)]
    interrupt: bool,
}

fn text_of(body: TextBody) -> Result<(String, bool), ApiError> {
    match body.text.filter(|t| !t.trim().is_empty()) {
        Some(t) => Ok((t, body.interrupt)),
        None => Err(ApiError::bad_request("text required")),
    }
}

/// `POST /api/agents/{id}/prompt` *(CMDC prompt/2)* → `{queued}`.
pub(super) async fn prompt(
    State(hub): State<Hub>,
    ApiPath(id): ApiPath<String>,
    JsonBody(body): JsonBody<TextBody>,
) -> Result<Json<Value>, ApiError> {
    let handle = agent(&hub, &id)?;
    let (text, _) = text_of(body)?;
    let queued = ask(&handle, |reply| Op::Prompt { text, reply }).await?;
    Ok(Json(json!({"queued": queued})))
}

/// `POST /api/agents/{id}/steer` *(CMDC)* `{text, interrupt?}` → `{status}`; 429 when 3 wait.
pub(super) async fn steer(
    State(hub): State<Hub>,
    ApiPath(id): ApiPath<String>,
    JsonBody(body): JsonBody<TextBody>,
) -> Result<Response, ApiError> {
    let handle = agent(&hub, &id)?;
    let (text, interrupt) = text_of(body)?;
    let r = ask(&handle, |reply| Op::Steer { text, interrupt, reply }).await?;
    let status = if r.status == SteerStatus::RejectedFull { StatusCode::TOO_MANY_REQUESTS } else { StatusCode::OK };
    Ok((status, Json(json!({"status": r.status}))).into_response())
}

#[derive(Deserialize)]
pub(super) struct RespondBody {
    #[serde(rename = "ref")]
    reference: Option<String>,
    response: Option<String>,
}

/// `POST /api/agents/{id}/respond` `{ref, response}` (docs/design.md §12, CMDC `user_respond`):
/// answers the agent's open `ask_user` question `ref` → `{success, ref}`; 400 when a field is
/// missing or blank, 404 for an unknown agent or a `ref` that is not open (never asked,
/// answered, timed out).
pub(super) async fn respond(
    State(hub): State<Hub>,
    ApiPath(id): ApiPath<String>,
    JsonBody(body): JsonBody<RespondBody>,
) -> Result<Json<Value>, ApiError> {
    let handle = agent(&hub, &id)?;
    let (Some(reference), Some(response)) = (body.reference, body.response.filter(|r| !r.trim().is_empty())) else {
        return Err(ApiError::bad_request("ref and response required"));
    };
    let answered = ask(&handle, |reply| Op::Respond { reference: reference.clone(), response, reply }).await?;
    answered.map_err(|e| ApiError::not_found(e.to_string()))?;
    Ok(Json(json!({"success": true, "ref": reference})))
}

#[derive(Deserialize)]
pub(super) struct EventsQuery {
    last: Option<usize>,
}

/// `GET /api/agents/{id}/events[?last=N]`: the agent's events as SSE; `Last-Event-ID: N`
/// replays every event after N first (or a `gap` for what is no longer kept); without it,
/// `?last=N` replays the N newest logged events first (a count: seqs jump after a crash).
pub(super) async fn agent_events(
    State(hub): State<Hub>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<EventsQuery>,
    headers: HeaderMap,
) -> Result<SseResponse, ApiError> {
    let handle = agent(&hub, &id)?;
    let from = match (last_event_id(&headers)?, q.last) {
        (Some(n), _) => EventsFrom::After(n),
        (None, Some(n)) => EventsFrom::Last(n),
        (None, None) => EventsFrom::Now,
    };
    let sub = ask(&handle, |reply| Op::Subscribe { from, reply }).await?.map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(sse(gathered(sub), &hub))
}

/// `GET /api/events`: every agent's events as they happen (docs/design.md §14), each frame with
/// `id: <gseq>` ([`cicy_store::eventlog::global`]). `Last-Event-ID: N` replays every event after
/// gseq N once, then goes live; when that cannot be done (N older than the ring, or from
/// another run of serve) an `event: gap` frame `{"from", "to"}` without `id:` comes first. A
/// client that falls behind is refilled the same way; it never slows an agent.
pub(super) async fn all_events(State(hub): State<Hub>, headers: HeaderMap) -> Result<SseResponse, ApiError> {
    let after = last_event_id(&headers)?;
    let sub = hub.shared.global.subscribe(after);
    Ok(sse(gathered(sub), &hub))
}

/// The `Last-Event-ID` header as a sequence number; absent → `None`.
fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    match headers.get("last-event-id").map(|v| v.to_str().map(str::trim)) {
        None => Ok(None),
        Some(Ok(v)) => {
            v.parse::<u64>().map(Some).map_err(|_| ApiError::bad_request(format!("Last-Event-ID `{v}` is not a sequence number")))
        }
        Some(Err(_)) => Err(ApiError::bad_request("Last-Event-ID is not text")),
    }
}

/// `GET /api/agents/{id}/autonomy` (docs/design.md §13 "Reports"): the ⑩⑪⑫ report of
/// [`cicy_runtime::autonomy::report::Report`] (`enabled`, `off_reason`, `tick_secs`, `lease`, `mine`,
/// `mine_total`, `now`, `waiting`, `squeezed`, `skipped`) plus `intents`, every intent's latest
/// state. Read from the files and `cicy.db`, as `intents <id> status --json` does.
pub(super) async fn autonomy(State(hub): State<Hub>, ApiPath(id): ApiPath<String>) -> Result<Json<Value>, ApiError> {
    agent(&hub, &id)?;
    let now = i64::try_from(fsutil::unix_now()).unwrap_or(i64::MAX);
    let (report, folded) = fsutil::blocking(|| cicy_runtime::autonomy::report::of_agent(&hub.shared.home, &id, now))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Json(report.to_json(&folded.intents)))
}

#[derive(Deserialize)]
pub(super) struct HealthQuery {
    proof: Option<String>,
}

/// `GET /api/health[?proof=<nonce>]` (no token): `{ok, instance_id, pid, agents}`, plus
/// `proof` when asked: [`super::http::token_proof`] of the nonce (32–128 lowercase hex
/// characters, else 400). The dashboard checks it before it sends the token, so a program that
/// took the port after serve stopped never gets the token.
pub(super) async fn health(State(hub): State<Hub>, ApiQuery(q): ApiQuery<HealthQuery>) -> Result<Json<Value>, ApiError> {
    let mut answer = json!({"ok": true, "instance_id": &*hub.instance_id, "pid": std::process::id(), "agents": hub.handles().len()});
    if let Some(nonce) = q.proof {
        let proof = super::http::token_proof(&hub.token, hub.port, &nonce)
            .ok_or_else(|| ApiError::bad_request("proof must be a nonce of 32 to 128 lowercase hex characters"))?;
        answer["proof"] = Value::String(proof);
    }
    Ok(Json(answer))
}

/// Registry rows at boot; an absent registry is no agents.
pub(super) fn boot_agents(
    home: &cicy_store::home::Home,
) -> Result<Vec<cicy_store::registry::AgentRecord>, cicy_store::registry::RegistryError> {
    if !home.db_path().exists() {
        return Ok(Vec::new());
    }
    Registry::open(&home.db_path())?.list()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_to_an_agent_whose_queue_is_full_is_a_503_naming_it() {
        // No actor takes from this queue: it stays full.
        let (handle, _queue, _signals) = AgentHandle::new("w-7".into());
        let mut answers = Vec::new();
        for _ in 0..QUEUE_CAPACITY {
            let (reply, answer) = oneshot::channel();
            assert!(handle.request(Op::Warm { reply }).is_ok());
            answers.push(answer);
        }
        let asked = tokio::time::timeout(std::time::Duration::from_secs(5), ask(&handle, |reply| Op::Status { reply }))
            .await
            .expect("a full queue answers at once");
        let Err(refused) = asked else { panic!("a full queue must refuse") };
        let resp = refused.into_response();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&body).unwrap(),
            json!({"error": "queue_full", "message": "the queue of agent w-7 is full (64 requests wait); nothing was done, try again shortly"})
        );
    }
}
