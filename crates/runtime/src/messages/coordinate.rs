//! Master and workers (docs/design.md §11, cicy's topology): `msg` one agent and wait for its
//! answer (or get it back later as a 🔔 message), `broadcast` to every worker of a master,
//! `fork` an agent, and the list of a master's workers.
//!
//! Owns the `msg` message's metadata (`msg_call`), the 🔔 callback's text and metadata
//! (`callback_of`) and the wait. A `msg` travels as a message of the direct conversation of
//! the two principals (`super::route`), so it wakes the worker like any message; the answer
//! travels back through the `msg_call` row, never as an inbox message the caller would then
//! answer again. Must not touch the wake turn; the worker's side of a call is `crate::wake`'s
//! claim, which names the calls it answers.

use std::time::Duration;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::route::{self, Post, RouteError};
use super::store::{Answered, CallState, MessageStore, StoreError};
use crate::agent::{self, AgentError, CreateOptions};
use crate::conversation::history::{CurrentFile, HistoryStore};
use crate::conversation::invariants;
use crate::fsutil;
use crate::home::Home;
use crate::registry::{AgentRecord, Registry, RegistryError};

/// Metadata (and front matter) of a `msg` message: the call's id.
pub const MSG_CALL: &str = "msg_call";
/// Metadata (and front matter) of a 🔔 message: the id of the call it answers.
pub const CALLBACK_OF: &str = "callback_of";
/// cicy: how long `msg` waits by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// cicy: how long `broadcast` waits for each worker by default (300 000 ms).
pub const BROADCAST_TIMEOUT: Duration = Duration::from_secs(300);
/// cicy: a 🔔 callback carries at most this many characters of the answer.
pub const CALLBACK_MAX_CHARS: usize = 2000;
/// How often a waiting `msg` looks at its call (the answer may come from another process).
const POLL: Duration = Duration::from_millis(100);

/// Errors of the master/worker calls; each names the agent or value at fault.
#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error("{path}: {message}")]
    History { path: std::path::PathBuf, message: String },
    #[error("no agent `{0}` to message (see `cicy-agent ls`)")]
    NoAgent(String),
    #[error("an agent cannot msg itself ({0})")]
    ToSelf(String),
    #[error("the text is empty")]
    EmptyText,
    #[error("not sent: it would be hop {0}, past the limit of {max} (agents answering each other stop there)", max = route::MAX_HOPS)]
    TooManyHops(u32),
}

/// How a wait for an answer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    Answered(String),
    /// The timeout passed; the call is now `queued` (a callback brings the answer if asked).
    TimedOut,
    /// The caller's turn was cancelled; the call is now `queued`.
    Cancelled,
}

/// Sends `text` from `from` (`w-<n>` or `human:<name>`) to agent `to` as a `msg` call and
/// returns its id. `wait` records that a caller waits for the answer; `hops` is the new
/// message's hop count (`super::route::MAX_HOPS`).
///
/// Errors: [`CoordError::NoAgent`], [`CoordError::ToSelf`], [`CoordError::EmptyText`],
/// [`CoordError::TooManyHops`], the store's and the files'.
pub fn send(home: &Home, from: &str, to: &str, text: &str, wait: bool, callback: bool, hops: u32) -> Result<i64, CoordError> {
    let to = to.trim();
    if text.trim().is_empty() {
        return Err(CoordError::EmptyText);
    }
    // A message past the limit is delivered to no agent: its call would never be answered.
    if hops > route::MAX_HOPS {
        return Err(CoordError::TooManyHops(hops));
    }
    if to == from {
        return Err(CoordError::ToSelf(to.to_string()));
    }
    match Registry::open(&home.db_path())?.get(to) {
        Ok(_) => {}
        Err(RegistryError::NotFound(_)) => return Err(CoordError::NoAgent(to.to_string())),
        Err(e) => return Err(e.into()),
    }
    let mut store = MessageStore::open(home)?;
    let conv = store.direct(from, to)?;
    let id = store.call_create(from, to, &conv.id, text, wait, callback)?;
    let mut metadata = Map::new();
    metadata.insert(MSG_CALL.to_string(), Value::from(id));
    let post = Post { conv_id: &conv.id, sender: from, content: text, thread: None, hops, wake_agents: true, metadata };
    let posted = route::post(home, &mut store, &post)?;
    store.call_set_message(id, &posted.message.id)?;
    Ok(id)
}

/// Waits up to `timeout` for the answer to call `id`, looking every 100 ms (the worker may
/// answer from another process); a timeout or a cancel releases the call to its callback.
///
/// Errors: the store's.
pub async fn wait(home: &Home, id: i64, timeout: Duration, cancel: &CancellationToken) -> Result<Waited, CoordError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let call = fsutil::blocking(|| MessageStore::open(home)?.call(id))?;
        if let Some(reply) = call.filter(|c| c.state == CallState::Done).and_then(|c| c.reply) {
            return Ok(Waited::Answered(reply));
        }
        let cancelled = tokio::select! {
            () = tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + POLL)) => false,
            () = cancel.cancelled() => true,
        };
        if cancelled || tokio::time::Instant::now() >= deadline {
            let now = fsutil::blocking(|| MessageStore::open(home)?.call_release(id))?;
            return Ok(match now.filter(|c| c.state == CallState::Done).and_then(|c| c.reply) {
                Some(reply) => Waited::Answered(reply),
                None if cancelled => Waited::Cancelled,
                None => Waited::TimedOut,
            });
        }
    }
}

/// The worker `agent` answered calls `ids` with `reply` (its reply, its final answer or
/// serve's fallback): each waiting caller takes it; for each call nobody waits for that asked
/// for a callback, a 🔔 message `🔔 [<agent>] msg <id> → done` + the answer (≤ 2000
/// characters) goes to the caller in their direct conversation. A 🔔 wakes its caller but is
/// never answered back (docs/design.md §11 **[chosen]**).
///
/// Errors: the store's and the files'.
pub fn answer(home: &Home, agent: &str, ids: &[i64], reply: &str, hops: u32) -> Result<(), CoordError> {
    let mut store = MessageStore::open(home)?;
    for id in ids {
        let Some(Answered::Queued(call)) = store.call_answer(*id, reply)? else { continue };
        if !call.callback {
            continue;
        }
        let cut: String = reply.chars().take(CALLBACK_MAX_CHARS).collect();
        let more = if cut.len() < reply.len() { "\n…" } else { "" };
        let text = format!("🔔 [{agent}] msg {} → done\n{cut}{more}", call.id);
        let mut metadata = Map::new();
        metadata.insert(CALLBACK_OF.to_string(), Value::from(call.id));
        // Capped so it is delivered even when the answer is past the limit (a msg at hop 8):
        // a 🔔 is never answered, so it cannot start a loop, and its caller waits for it.
        let hops = hops.min(route::MAX_HOPS);
        let post = Post { conv_id: &call.conv_id, sender: agent, content: &text, thread: None, hops, wake_agents: true, metadata };
        route::post(home, &mut store, &post)?;
    }
    Ok(())
}

/// The workers of `master` (`agent_config.master_id`), in id order.
///
/// Errors: the registry's.
pub fn workers(home: &Home, master: &str) -> Result<Vec<AgentRecord>, CoordError> {
    let all = Registry::open(&home.db_path())?.list()?;
    Ok(all.into_iter().filter(|r| r.master_id.as_deref() == Some(master)).collect())
}

/// Sends `text` to every worker of `master` at once and waits up to `timeout` for each:
/// one `w-<n>: <answer>` line per worker, `w-<n>: timeout` for those that did not answer in
/// time (their calls ask for no callback). `No workers.` when it has none.
///
/// Errors: the registry's, the store's, the files'.
pub async fn broadcast(
    home: &Home,
    master: &str,
    text: &str,
    timeout: Duration,
    cancel: &CancellationToken,
    hops: u32,
) -> Result<String, CoordError> {
    let workers = fsutil::blocking(|| workers(home, master))?;
    if workers.is_empty() {
        return Ok("No workers.".to_string());
    }
    let mut calls = Vec::new();
    for w in &workers {
        let id = fsutil::blocking(|| send(home, master, &w.id, text, true, false, hops))?;
        calls.push((w.id.clone(), id));
    }
    let waits = calls.iter().map(|(_, id)| wait(home, *id, timeout, cancel));
    let results = futures_util::future::join_all(waits).await;
    let mut lines = Vec::new();
    for ((worker, _), r) in calls.iter().zip(results) {
        let line = match r? {
            Waited::Answered(a) => a,
            Waited::TimedOut => "timeout".to_string(),
            Waited::Cancelled => "cancelled".to_string(),
        };
        lines.push(format!("{worker}: {line}"));
    }
    Ok(lines.join("\n"))
}

/// Forks `src` (cicy `fork`): a new agent of the same role template, role label and model,
/// with `src`'s AGENTS.md, memory folder and current conversation (under a new conversation
/// id), whose master is `master` (default: `src`'s). Returns the new agent.
///
/// Errors: the registry's, `create`'s, and the files' (naming the file).
pub fn fork(home: &Home, src: &str, title: Option<&str>, master: Option<&str>) -> Result<AgentRecord, CoordError> {
    let from = Registry::open(&home.db_path())?.get(src)?;
    let created = agent::create(
        home,
        CreateOptions {
            title: title.map_or_else(|| format!("{} (fork)", from.title), str::to_string),
            role_template: from.role_template.clone(),
            role: from.role.clone(),
            model: from.default_model.clone(),
            master: master.map(str::to_string).or_else(|| from.master_id.clone()),
            workspace: None,
            api_style: from.config.api_style,
        },
    )?;
    let rec = created.record;
    let io = |path: &std::path::Path, e: std::io::Error| CoordError::History { path: path.to_path_buf(), message: e.to_string() };
    let agents_md = from.workspace.join("AGENTS.md");
    match std::fs::read(&agents_md) {
        Ok(bytes) => {
            let text = own_identity(&String::from_utf8_lossy(&bytes), &from, &rec);
            fsutil::write_atomic(&rec.workspace.join("AGENTS.md"), text.as_bytes()).map_err(|e| io(&agents_md, e))?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&agents_md, e)),
    }
    copy_memory(&from.workspace.join(".cicy").join("memory"), &rec.workspace.join(".cicy").join("memory"))?;
    let model = from.default_model.clone().unwrap_or_default();
    let mut current = CurrentFile::new(&rec.id, &model);
    // Read, never `restore`d: the source may be in a turn (an agent forking itself), which a
    // restore would take for an interrupted one and mark cancelled under the running turn.
    if let Some(src_current) = read_current(&from.workspace)? {
        current.model = src_current.model;
        current.messages = src_current.messages;
        current.max_history_id = src_current.max_history_id;
        current.prompts = src_current.prompts;
        // A copy taken mid-turn may end in a tool call without its result.
        invariants::heal(&mut current.messages);
        current.number_unnumbered();
    }
    HistoryStore::new(&rec.workspace)
        .start(&current)
        .map_err(|e| CoordError::History { path: rec.workspace.clone(), message: e.to_string() })?;
    Ok(rec)
}

/// The active conversation's `current.json` in workspace `ws`, read only; `None` when the
/// agent has none yet.
fn read_current(ws: &std::path::Path) -> Result<Option<CurrentFile>, CoordError> {
    let store = HistoryStore::new(ws);
    let Some(conv) = store.active_conversation() else { return Ok(None) };
    let path = store.conversation_dir(&conv).join("current.json");
    let bad = |message: String| CoordError::History { path: path.clone(), message };
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| bad(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(bad(e.to_string())),
    }
}

/// `src`'s AGENTS.md for the fork `dst`: its workspace path and its id (as a whole word) name
/// the fork's, so the copy does not tell the fork it is the original **[chosen]**; the rest,
/// the identity a person wrote, is kept as written.
fn own_identity(text: &str, src: &AgentRecord, dst: &AgentRecord) -> String {
    let text = text.replace(&*src.workspace.to_string_lossy(), &dst.workspace.to_string_lossy());
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find(&src.id) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + src.id.len()..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_');
        out.push_str(&rest[..at]);
        out.push_str(if word(before) || word(after) { &src.id } else { &dst.id });
        rest = &rest[at + src.id.len()..];
    }
    out.push_str(rest);
    out
}

/// Copies the memory files (`*.md`, `_archive/`, `.pending.jsonl`) of one agent to another;
/// the locks and the backoff state stay behind.
fn copy_memory(from: &std::path::Path, to: &std::path::Path) -> Result<(), CoordError> {
    let io = |path: &std::path::Path, e: std::io::Error| CoordError::History { path: path.to_path_buf(), message: e.to_string() };
    let entries = match std::fs::read_dir(from) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(from, e)),
    };
    std::fs::create_dir_all(to).map_err(|e| io(to, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io(from, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| io(&path, e))?;
        if kind.is_dir() && name == "_archive" {
            copy_memory(&path, &to.join(&name))?;
        } else if kind.is_file() && (name.ends_with(".md") || name == ".pending.jsonl") {
            let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
            fsutil::write_atomic(&to.join(&name), &bytes).map_err(|e| io(&path, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, ws: &str) -> AgentRecord {
        AgentRecord {
            id: id.into(),
            title: "T".into(),
            workspace: ws.into(),
            agent_type: "cicy".into(),
            role: "worker".into(),
            role_template: "assistant".into(),
            default_model: None,
            master_id: None,
            config: Default::default(),
            created_at: String::new(),
            updated_at: String::new(),
        }
    }

    #[test]
    fn a_forks_agents_md_names_its_own_id_and_workspace() {
        let (src, dst) = (record("w-2", "/h/workers/w-2"), record("w-5", "/h/workers/w-5"));
        let text = "You are Ann (agent w-2).\nYour workspace is /h/workers/w-2.\nAsk w-20 or xw-2, not w-2!";
        assert_eq!(
            own_identity(text, &src, &dst),
            "You are Ann (agent w-5).\nYour workspace is /h/workers/w-5.\nAsk w-20 or xw-2, not w-5!"
        );
    }
}
