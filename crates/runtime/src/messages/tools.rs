//! The `coordinate` tool group (docs/design.md §11 master/worker, cicy's names): `msg`, `broadcast`,
//! `fork`, `agents`.
//!
//! Each tool reads its input and calls `super::coordinate`; the caller is the turn's agent
//! (`ToolContext::wake`) and a message it sends has one hop more than what its turn answers.
//! Must not touch the turn loop: a wait is a wait inside one tool call, cancelled with the turn.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::coordinate::{self, Waited, BROADCAST_TIMEOUT, DEFAULT_TIMEOUT};
use crate::fsutil;
use crate::tools::{Tool, ToolContext, ToolOutput};
use crate::wake::state::WakeTurn;

pub const MSG: &str = "msg";
pub const BROADCAST: &str = "broadcast";
pub const FORK: &str = "fork";
pub const AGENTS: &str = "agents";

/// The coordinate tool called `name`, if it is one.
pub fn builtin(name: &str) -> Option<Arc<dyn Tool>> {
    let kind = match name {
        MSG => Kind::Msg,
        BROADCAST => Kind::Broadcast,
        FORK => Kind::Fork,
        AGENTS => Kind::Agents,
        _ => return None,
    };
    Some(Arc::new(CoordTool(kind)))
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Msg,
    Broadcast,
    Fork,
    Agents,
}

#[derive(Debug)]
struct CoordTool(Kind);

impl Tool for CoordTool {
    fn name(&self) -> &str {
        match self.0 {
            Kind::Msg => MSG,
            Kind::Broadcast => BROADCAST,
            Kind::Fork => FORK,
            Kind::Agents => AGENTS,
        }
    }

    fn description(&self) -> &str {
        match self.0 {
            Kind::Msg => "Message one agent (w-<n>) directly and, by default, wait for its answer (timeout_secs, default 600). With wait: false, or when the wait times out, you get `msg <id> queued` now and, unless callback is false, a 🔔 message with the answer later. Do not answer a 🔔 message back to its sender.",
            Kind::Broadcast => "Send the same text to every worker of yours at once and wait for all (timeout_ms, default 300000): one `w-<n>: <answer>` line each, `timeout` for those that did not answer in time.",
            Kind::Fork => "Create a new agent as a copy of one (default: you): same role template and model, its AGENTS.md, memory and current conversation. Prints the new id.",
            Kind::Agents => "List the agents you can msg: id, title, role template and master; your workers are marked.",
        }
    }

    fn input_schema(&self) -> Value {
        match self.0 {
            Kind::Msg => json!({"type": "object", "properties": {
                "to": {"type": "string", "description": "agent id, w-<n>"},
                "text": {"type": "string"},
                "wait": {"type": "boolean"},
                "timeout_secs": {"type": "integer"},
                "callback": {"type": "boolean"}}, "required": ["to", "text"]}),
            Kind::Broadcast => json!({"type": "object", "properties": {
                "text": {"type": "string"}, "timeout_ms": {"type": "integer"}}, "required": ["text"]}),
            Kind::Fork => json!({"type": "object", "properties": {
                "src": {"type": "string"}, "title": {"type": "string"}, "master": {"type": "string"}}}),
            Kind::Agents => json!({"type": "object", "properties": {}}),
        }
    }

    fn run<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let Some(w) = ctx.extensions.get::<Arc<WakeTurn>>().cloned() else {
                return ToolOutput::error("error: the coordinate tools need an agent (none in this context)");
            };
            let out = match self.0 {
                Kind::Msg => msg(&w, input, ctx).await,
                Kind::Broadcast => broadcast(&w, input, ctx).await,
                Kind::Fork => fsutil::blocking(|| fork(&w, input)),
                Kind::Agents => fsutil::blocking(|| agents(&w)),
            };
            out.unwrap_or_else(|e| ToolOutput::error(format!("error: {e}")))
        })
    }
}

type Ran = Result<ToolOutput, coordinate::CoordError>;

fn str_field<'a>(input: &'a Value, key: &str) -> Option<&'a str> {
    input.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty())
}

/// The hops of what this turn sends: one more than the claim it answers (a turn nobody's
/// message started counts as the first hop).
fn next_hops(w: &WakeTurn) -> u32 {
    w.state().claim.as_ref().map_or(1, |c| c.hops.saturating_add(1))
}

async fn msg(w: &WakeTurn, input: &Value, ctx: &ToolContext) -> Ran {
    let (Some(to), Some(text)) = (str_field(input, "to"), str_field(input, "text")) else {
        return Ok(ToolOutput::error("error: `to` and `text` are required for msg"));
    };
    let wait = input.get("wait").and_then(Value::as_bool).unwrap_or(true);
    let callback = input.get("callback").and_then(Value::as_bool).unwrap_or(true);
    let timeout = input.get("timeout_secs").and_then(Value::as_u64).map_or(DEFAULT_TIMEOUT, Duration::from_secs);
    // Not counted in `sent` (the turn's replies and sends): a msg to a worker does not answer
    // the person whose message this turn claimed, whose reply is still the final answer.
    let id = fsutil::blocking(|| coordinate::send(&w.home, &w.agent_id, to, text, wait, callback, next_hops(w)))?;
    if !wait {
        return Ok(ToolOutput::ok(format!("msg {id} queued")));
    }
    Ok(match coordinate::wait(&w.home, id, timeout, &ctx.cancel).await? {
        Waited::Answered(answer) => ToolOutput::ok(format!("[{to}] {answer}")),
        Waited::TimedOut if callback => {
            ToolOutput::ok(format!("msg {id} queued: no answer within {} s; the answer will come as a 🔔 message", timeout.as_secs()))
        }
        Waited::TimedOut => ToolOutput::ok(format!("msg {id} queued: no answer within {} s", timeout.as_secs())),
        Waited::Cancelled => ToolOutput::error("error: cancelled by user"),
    })
}

async fn broadcast(w: &WakeTurn, input: &Value, ctx: &ToolContext) -> Ran {
    let Some(text) = str_field(input, "text") else {
        return Ok(ToolOutput::error("error: `text` is required for broadcast"));
    };
    let timeout = input.get("timeout_ms").and_then(Value::as_u64).map_or(BROADCAST_TIMEOUT, Duration::from_millis);
    // Not counted in `sent`, like `msg`.
    let lines = coordinate::broadcast(&w.home, &w.agent_id, text, timeout, &ctx.cancel, next_hops(w)).await?;
    Ok(ToolOutput::ok(lines))
}

fn fork(w: &WakeTurn, input: &Value) -> Ran {
    let src = str_field(input, "src").unwrap_or(&w.agent_id);
    let rec = coordinate::fork(&w.home, src, str_field(input, "title"), str_field(input, "master"))?;
    Ok(ToolOutput::ok(format!("Forked {src} as {} ({}).", rec.id, rec.title)))
}

fn agents(w: &WakeTurn) -> Ran {
    let all = crate::registry::Registry::open(&w.home.db_path())?.list()?;
    let lines: Vec<String> = all
        .iter()
        .filter(|r| r.id != w.agent_id)
        .map(|r| {
            let mine = if r.master_id.as_deref() == Some(w.agent_id.as_str()) { "  (your worker)" } else { "" };
            format!("{}  {}  template:{}  master:{}{mine}", r.id, r.title, r.role_template, r.master_id.as_deref().unwrap_or("-"))
        })
        .collect();
    Ok(ToolOutput::ok(if lines.is_empty() { "No other agents.".to_string() } else { lines.join("\n") }))
}
