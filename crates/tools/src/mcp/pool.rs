//! The MCP servers of one agent session: which run, their restarts, listing and calling.
//!
//! Owns one slot per configured server, its connection and its failure count. A server starts
//! on the first need (the turn-start listing), stays running for as long as the [`Pool`] (the
//! `Session`) lives, and is stopped when a turn finds it removed from meta.yaml or its entry
//! changed (then started again with the new entry). A crash, or a request that times out (the
//! server is then killed), is reported to the call that finds it (`error: mcp server <name>: …`)
//! and the server is started again on the next need; after a second failure in a row (a crash,
//! a timeout or a failed start with no successful answer in between) starts are spaced 1 s,
//! 2 s, 4 s … at most 60 s apart, counted from the last failure. The servers of a turn are
//! started and listed concurrently.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::{Peer, ServiceError};
use rmcp::RoleClient;
// The backoff is timed on tokio's clock, which tests can pause.
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::{full_name, valid_tool_name, McpServerConfig};
use super::server::Connection;
use super::tool::{result_output, McpTool};
use super::McpError;
use crate::{Tool, ToolOutput};
use cicy_protocol::event::{Emitter, EventKind};

/// Backoff cap between starts of a failing server (docs/design.md §12: 1 … 60 s).
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The agent's MCP servers; cheap to clone, every clone shares the servers. Dropping the last
/// clone kills them.
#[derive(Debug, Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    workspace: PathBuf,
    hidden_env: Vec<String>,
    slots: std::sync::Mutex<BTreeMap<String, Arc<Slot>>>,
}

#[derive(Debug)]
struct Slot {
    name: String,
    config: McpServerConfig,
    state: tokio::sync::Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    conn: Option<Connection>,
    /// Counts starts, so a request that failed on an older connection does not stop a newer one.
    started: u64,
    /// Failures since the last successful answer.
    failures: u32,
    /// When the last one happened and what it was.
    last_failure: Option<(Instant, String)>,
}

impl State {
    /// Drops the connection (which kills the server's process group) and counts a failure.
    fn fail(&mut self, what: String) {
        self.conn = None;
        self.failures += 1;
        self.last_failure = Some((Instant::now(), what));
    }

    /// How long the next start must still wait, with the failure that set the wait.
    fn backoff_left(&self) -> Option<(Duration, &str)> {
        let (at, what) = self.last_failure.as_ref()?;
        let wait = backoff(self.failures).checked_sub(at.elapsed())?;
        (!wait.is_zero()).then_some((wait, what.as_str()))
    }
}

/// The wait before the next start after `failures` failures in a row: none after one, then
/// 1 s doubling up to [`MAX_BACKOFF`].
pub fn backoff(failures: u32) -> Duration {
    match failures {
        0 | 1 => Duration::ZERO,
        n => Duration::from_secs(1u64 << (n - 2).min(6)).min(MAX_BACKOFF),
    }
}

impl Pool {
    /// No server runs yet. Servers start in `workspace` without the variables `hidden_env`
    /// (the gateway's API key, [`crate::ToolContext::hidden_env`]).
    pub fn new(workspace: PathBuf, hidden_env: Vec<String>) -> Self {
        Self { inner: Arc::new(Inner { workspace, hidden_env, slots: std::sync::Mutex::new(BTreeMap::new()) }) }
    }

    /// An empty pool that starts servers as this one does. A sub-agent of another role gets
    /// one: listing its role's servers in this pool would stop the parent's.
    pub fn empty_like(&self) -> Self {
        Self::new(self.inner.workspace.clone(), self.inner.hidden_env.clone())
    }

    /// The tools of the servers in `servers` (a role's `mcp_servers`), for one turn: each
    /// server is started if it does not run and asked for all its tools (`tools/list`,
    /// following `nextCursor`), all servers concurrently, each within its own `timeout_secs`.
    /// Servers not in `servers` are stopped first. A server that cannot be listed, a tool
    /// whose `mcp__<server>__<tool>` name the APIs would refuse, and a tool whose full name an
    /// earlier tool already has (servers in name order, then each server's order) are left out
    /// of the turn with a `system` event saying why. Cancelling `cancel` stops the listing;
    /// the servers listed by then are returned.
    pub async fn tools(
        &self,
        servers: &BTreeMap<String, McpServerConfig>,
        events: &Emitter,
        cancel: &CancellationToken,
    ) -> Vec<Arc<dyn Tool>> {
        let slots = self.sync(servers);
        // All servers at once: a turn waits about the longest start or listing, not their sum.
        let listings = join_all(slots.iter().map(|slot| async move {
            tokio::select! {
                r = self.list(slot) => Some(r),
                () = cancel.cancelled() => None,
            }
        }))
        .await;
        // Which server and tool each offered full name came from: server `a__b`'s tool `c` and
        // server `a`'s tool `b__c` are both `mcp__a__b__c`; the first in server-name order,
        // then the server's own order, keeps it.
        let mut taken: BTreeMap<String, (String, String)> = BTreeMap::new();
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for (slot, listed) in slots.iter().zip(listings) {
            let listed = match listed {
                None => continue,
                Some(Ok(listed)) => listed,
                Some(Err(e)) => {
                    // info, not warn: the system event below tells the user, in chat on stderr.
                    tracing::info!(server = %slot.name, error = %e, "mcp server left out of this turn");
                    events.emit(EventKind::System { text: format!("mcp server {}: its tools are left out of this turn: {e}", slot.name) });
                    continue;
                }
            };
            let (offered, left_out) = offered_tools(self, &slot.name, listed);
            for tool in left_out {
                let name = full_name(&slot.name, &tool);
                tracing::info!(tool = %name, "mcp tool left out: not a valid tool name");
                events.emit(EventKind::System {
                    text: format!(
                        "mcp server {}: tool `{tool}` left out: `{name}` is not a valid tool name (letters, digits, `_`, `-`; at most 64)",
                        slot.name
                    ),
                });
            }
            for tool in offered {
                if let Some((server, first)) = taken.get(&tool.full_name) {
                    tracing::info!(tool = %tool.full_name, "mcp tool left out: its name is taken");
                    events.emit(EventKind::System {
                        text: format!(
                            "mcp server {}: tool `{}` left out: `{}` is already the name of tool `{first}` of mcp server {server}",
                            slot.name, tool.tool, tool.full_name
                        ),
                    });
                    continue;
                }
                taken.insert(tool.full_name.clone(), (slot.name.clone(), tool.tool.clone()));
                tools.push(Arc::new(tool));
            }
        }
        tools
    }

    /// Calls tool `tool` of server `server` with `args`, within the server's `timeout_secs`;
    /// cancelling `cancel` abandons the call (rmcp tells the server with
    /// `notifications/cancelled`). Every failure is an error result
    /// `error: mcp server <server>: …`, never a panic.
    pub async fn call(&self, server: &str, tool: &str, args: JsonObject, cancel: &CancellationToken) -> ToolOutput {
        let slot = self.inner.slots.lock().map(|s| s.get(server).cloned()).unwrap_or_default();
        let Some(slot) = slot else {
            return ToolOutput::error(format!("error: mcp server {server}: {}", McpError::NotConfigured));
        };
        let secs = slot.config.timeout_secs;
        let call = async {
            let (peer, started) = self.peer(&slot, true).await?;
            let mut params = CallToolRequestParams::new(tool.to_string());
            params.arguments = Some(args);
            match tokio::time::timeout(Duration::from_secs(secs), peer.call_tool(params)).await {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(e)) => Err(self.failed(&slot, started, e).await),
                Err(_) => Err(self.timed_out(&slot, started, format!("tool {tool}")).await),
            }
        };
        let outcome = tokio::select! {
            r = call => r,
            () = cancel.cancelled() => return ToolOutput::error("error: cancelled by user"),
        };
        match outcome {
            Ok(result) => {
                slot.state.lock().await.failures = 0;
                result_output(&result)
            }
            Err(e) => ToolOutput::error(format!("error: mcp server {server}: {e}")),
        }
    }

    /// The process id of server `server` while it runs (for diagnostics and tests).
    pub async fn pid(&self, server: &str) -> Option<u32> {
        let slot = self.inner.slots.lock().ok()?.get(server).cloned()?;
        let state = slot.state.lock().await;
        state.conn.as_ref().filter(|c| c.alive()).and_then(Connection::pid)
    }

    /// Keeps the slots of `servers` (a changed entry gets a new slot) and drops the others,
    /// which stops their servers; returns the slots in name order.
    fn sync(&self, servers: &BTreeMap<String, McpServerConfig>) -> Vec<Arc<Slot>> {
        let Ok(mut slots) = self.inner.slots.lock() else {
            return Vec::new();
        };
        slots.retain(|name, slot| servers.get(name) == Some(&slot.config));
        for (name, config) in servers {
            slots.entry(name.clone()).or_insert_with(|| {
                Arc::new(Slot { name: name.clone(), config: config.clone(), state: tokio::sync::Mutex::new(State::default()) })
            });
        }
        slots.values().cloned().collect()
    }

    /// All tools of `slot`'s server, each `tools/list` page within its timeout.
    async fn list(&self, slot: &Slot) -> Result<Vec<rmcp::model::Tool>, McpError> {
        let (peer, started) = self.peer(slot, false).await?;
        let secs = slot.config.timeout_secs;
        match tokio::time::timeout(Duration::from_secs(secs), peer.list_all_tools()).await {
            Ok(Ok(tools)) => {
                slot.state.lock().await.failures = 0;
                Ok(tools)
            }
            Ok(Err(e)) => Err(self.failed(slot, started, e).await),
            Err(_) => Err(self.timed_out(slot, started, "tools/list".into()).await),
        }
    }

    /// A live session with `slot`'s server, starting it if it does not run (unless the
    /// backoff says wait). A server found dead is an error for a call (`at_call`) — the call
    /// was meant for the process that died — and is started again on the next need; the
    /// turn-start listing starts it again at once.
    /// Also returns the start it belongs to, for [`Pool::failed`] and [`Pool::timed_out`].
    async fn peer(&self, slot: &Slot, at_call: bool) -> Result<(Peer<RoleClient>, u64), McpError> {
        let mut state = slot.state.lock().await;
        if let Some(conn) = &state.conn {
            if conn.alive() {
                return Ok((conn.peer(), state.started));
            }
            state.fail("the server exited".into());
            if at_call {
                return Err(McpError::Exited);
            }
        }
        if let Some((wait, what)) = state.backoff_left() {
            return Err(McpError::Backoff { last: what.to_string(), secs: wait.as_secs_f64() });
        }
        match Connection::start(&slot.name, &slot.config, &self.inner.workspace, &self.inner.hidden_env).await {
            Ok(conn) => {
                tracing::info!(server = %slot.name, pid = ?conn.pid(), "mcp server started");
                let peer = conn.peer();
                state.conn = Some(conn);
                state.started += 1;
                Ok((peer, state.started))
            }
            Err(e) => {
                state.fail(e.to_string());
                Err(e)
            }
        }
    }

    /// The error of a failed request on start `started`; a closed session counts as a crash,
    /// so the next need starts the server again.
    async fn failed(&self, slot: &Slot, started: u64, e: ServiceError) -> McpError {
        let mut state = slot.state.lock().await;
        let dead =
            matches!(e, ServiceError::TransportClosed | ServiceError::TransportSend(_)) || state.conn.as_ref().is_some_and(|c| !c.alive());
        if dead {
            tracing::warn!(server = %slot.name, error = %e, "mcp server exited during a request");
            // A request on an older start: its failure was counted and a newer start runs.
            if state.started == started {
                state.fail("the server exited".into());
            }
            return McpError::Exited;
        }
        McpError::Request(e.to_string())
    }

    /// The error of a request on start `started` that got no answer in time. A server that
    /// hangs on one request usually answers no other (one thread, or stuck), so it counts as a
    /// failure: its process group is killed and the next need starts it again.
    async fn timed_out(&self, slot: &Slot, started: u64, what: String) -> McpError {
        let e = McpError::Timeout { what, secs: slot.config.timeout_secs };
        let mut state = slot.state.lock().await;
        if state.started == started && state.conn.is_some() {
            tracing::warn!(server = %slot.name, error = %e, "mcp server killed: a request timed out");
            state.fail(e.to_string());
        }
        e
    }
}

/// The tools of server `server` the model can be offered, and the names of those left out
/// because `mcp__<server>__<tool>` is not a valid tool name.
fn offered_tools(pool: &Pool, server: &str, listed: Vec<rmcp::model::Tool>) -> (Vec<McpTool>, Vec<String>) {
    let mut offered = Vec::new();
    let mut left_out = Vec::new();
    for tool in listed {
        let name = full_name(server, &tool.name);
        if !valid_tool_name(&name) {
            left_out.push(tool.name.to_string());
            continue;
        }
        offered.push(McpTool {
            pool: pool.clone(),
            server: server.to_string(),
            tool: tool.name.to_string(),
            full_name: name,
            description: tool.description.as_deref().or(tool.title.as_deref()).unwrap_or_default().to_string(),
            input_schema: serde_json::Value::Object((*tool.input_schema).clone()),
        });
    }
    (offered, left_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_to_sixty() {
        let secs: Vec<u64> = (0..10).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [0, 0, 1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[tokio::test(start_paused = true)]
    async fn a_start_waits_only_after_a_second_failure_in_a_row() {
        let mut state = State::default();
        assert_eq!(state.backoff_left(), None);
        state.fail("boom".into());
        assert_eq!(state.backoff_left(), None);
        state.fail("boom again".into());
        tokio::time::advance(Duration::from_millis(400)).await;
        assert_eq!(state.backoff_left(), Some((Duration::from_millis(600), "boom again")));
        state.last_failure = Some((Instant::now() - Duration::from_secs(2), "old".into()));
        assert_eq!(state.backoff_left(), None);
    }

    #[test]
    fn a_tool_whose_full_name_is_not_valid_is_left_out() {
        let schema =
            std::sync::Arc::new(serde_json::json!({"type": "object", "properties": {"z": {}, "a": {}}}).as_object().unwrap().clone());
        let listed = vec![
            rmcp::model::Tool::new("read", "Reads.", schema.clone()),
            rmcp::model::Tool::new("fs.write", "Writes.", schema.clone()),
            rmcp::model::Tool::new("x".repeat(55), "Long.", schema.clone()),
            rmcp::model::Tool::new("x".repeat(56), "Too long.", schema.clone()),
        ];
        let (offered, left_out) = offered_tools(&Pool::new("/nonexistent".into(), Vec::new()), "fs", listed);
        let names: Vec<&str> = offered.iter().map(|t| t.name()).collect();
        assert_eq!(names, ["mcp__fs__read".to_string(), format!("mcp__fs__{}", "x".repeat(55))]);
        assert_eq!(left_out, ["fs.write".to_string(), "x".repeat(56)]);
        assert_eq!(
            (offered[0].description(), offered[0].input_schema().to_string()),
            ("Reads.", r#"{"type":"object","properties":{"z":{},"a":{}}}"#.to_string())
        );
    }
}
