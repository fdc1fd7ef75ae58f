//! `task`'s sub-agents (docs/design.md §12, CMDC SubAgent): one child turn in the same process.
//!
//! Owns what a child gets and how it ends. A child is a [`Session::subagent`] of the parent
//! (same workspace, gateway client, wake state and user) whose conversation is new and lives
//! in `.cicy/history/sub/<id>/`, never in the parent's history. Its tools are the parent's, or
//! those of the role template `subagent_type` names, minus `task` (so its tool context gets no
//! spawner either: no nesting by any path); its model is the parent's unless that template
//! names one. It gets no MEMORY.md and records nothing to memory (CMDC: a child inherits no
//! memory contents). It runs one turn on the task's description with a child of the parent
//! call's cancel token, stopped after the timeout (CMDC: 120 s); its events stay its own (they
//! would read as the parent's turn), the parent's stream gets `subagent_start` and
//! `subagent_end`. The result is its last answer text. Must not touch the parent's history,
//! turn lock or steering.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::agent::{AgentError, Session, TurnMaterials, DEFAULT_MAX_TOKENS};
use crate::conversation::history::HistoryStore;
use crate::conversation::message::Role;
use crate::event::{preview, Emitter, EventKind, SubagentOutcome, TurnOutcome, TOOL_RESULT_PREVIEW_CHARS};
use crate::role::{self, ToolConfig};
use crate::tools::task::{self, Spawn, GENERAL_PURPOSE};
use crate::tools::{plan, skill_guard};
use crate::tools::{ToolContext, ToolOutput, ToolSet};

/// Starts the sub-agents of one parent turn.
pub(super) struct Spawner {
    /// A [`Session::subagent`] of the parent; each child is one of its own.
    seed: Session,
    /// The parent turn's materials, the base of a `general-purpose` child's.
    parent: TurnMaterials,
    timeout: Duration,
}

impl std::fmt::Debug for Spawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spawner").field("agent", &self.seed.agent().record.id).field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

/// A child of another role speaks with that role's system.md, role block and model, but acts
/// under its parent's policy: it never gets a tool its parent lacks (a role without `shell`
/// cannot reach one through a sub-agent), nor an MCP server the parent does not run with the
/// same settings, and the parent's hooks and skill guard apply to it. Its slug becomes the
/// parent's, because that names the folder the hooks' commands are found in.
fn under_parent_policy(template: &mut role::RoleTemplate, parent: &TurnMaterials) {
    template.tools.retain(|t| parent.tools.has(t));
    let servers = &parent.template.meta.mcp_servers;
    template.meta.mcp_servers.retain(|name, config| servers.get(name) == Some(config));
    template.meta.hooks = parent.template.meta.hooks.clone();
    template.meta.skill_guard = parent.template.meta.skill_guard;
    template.slug = parent.template.slug.clone();
}

impl Spawner {
    /// The spawner of the parent turn on `session` with materials `m`.
    pub(super) fn new(session: &Session, m: &TurnMaterials) -> Self {
        let timeout = m.template.meta.task_timeout_secs.map_or(task::DEFAULT_TIMEOUT, Duration::from_secs);
        Self { seed: session.subagent(HistoryStore::at(sub_root(session)), ""), parent: m.clone(), timeout }
    }

    /// The child's materials for `subagent_type`, or the error result naming what is wrong.
    fn materials(&self, subagent_type: &str) -> Result<TurnMaterials, String> {
        let mut m = if subagent_type == GENERAL_PURPOSE {
            self.parent.clone()
        } else {
            let s = self.seed.agent();
            let tool_cfg = ToolConfig::load(&s.home, crate::builtin_tools::names())
                .map_err(|e| format!("error: subagent_type `{subagent_type}`: {e}"))?;
            let mut template = role::load_template(&s.home, subagent_type, &tool_cfg).map_err(|e| {
                format!("error: subagent_type `{subagent_type}` is neither `{GENERAL_PURPOSE}` nor a usable role template: {e}")
            })?;
            under_parent_policy(&mut template, &self.parent);
            let seeded = role::seed_agents_md(&template.role_md, &s.record.id, &s.record.title, &s.record.workspace);
            TurnMaterials {
                tools: ToolSet::new(template.tools.clone(), tool_cfg.custom, crate::builtin_tools::BUILTIN),
                agents_md: role::agents_md_body(&seeded).to_string(),
                memory_md: String::new(),
                skills: self.parent.skills.clone(),
                model: template.meta.model.clone().unwrap_or_else(|| self.parent.model.clone()),
                max_tokens: template.meta.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
                template,
            }
        };
        // No nesting; and the plan (`.cicy/plan.json`) is the parent's, which a child's
        // `write_todos` would replace (CMDC: a child inherits no todos).
        m.tools = m.tools.without(task::NAME).without(plan::NAME);
        m.template.tools.retain(|t| t != task::NAME && t != plan::NAME);
        m.memory_md = String::new();
        Ok(m)
    }

    async fn run_child(&self, description: &str, subagent_type: &str, ctx: &ToolContext) -> ToolOutput {
        let mut m = match self.materials(subagent_type) {
            Ok(m) => m,
            Err(e) => return ToolOutput::error(e),
        };
        if let Some(allowed) = skill_guard::child_limit(ctx) {
            m.tools = m.tools.only(|n| allowed.contains(n));
            m.template.tools.retain(|n| allowed.contains(n));
            // MCP tools are listed when the child's turn starts: only the servers of allowed
            // tools are kept (a kept server offers all its tools).
            m.template.meta.mcp_servers.retain(|server, _| allowed.iter().any(|n| n.starts_with(&format!("mcp__{server}__"))));
        }
        let id = uuid::Uuid::new_v4().to_string();
        let mut child = self.seed.subagent(HistoryStore::at(self.seed.conversation().store.dir().join(&id)), &m.model);
        if subagent_type != GENERAL_PURPOSE {
            child = child.without_mcp();
        }
        if let Err(e) = child.conversation().store.start(&child.conversation().current) {
            return ToolOutput::error(format!("error: cannot start the sub-agent: {e}"));
        }
        let emit = |kind| {
            if let Some(events) = &ctx.events {
                events.emit(kind);
            }
        };
        emit(EventKind::SubagentStart { id: id.clone(), description: description.to_string(), subagent_type: subagent_type.to_string() });
        let errors = Arc::new(Mutex::new(Vec::new()));
        let child_events = {
            let errors = errors.clone();
            Emitter::new(&self.seed.agent().record.id, move |ev| {
                if let EventKind::Error { message, .. } = &ev.kind {
                    errors.lock().unwrap_or_else(|p| p.into_inner()).push(message.clone());
                }
            })
        };
        let cancel = ctx.cancel.child_token();
        let (ended, timed_out) = run_with_timeout(&mut child, description, m, &child_events, &cancel, self.timeout).await;
        let errors = errors.lock().unwrap_or_else(|p| p.into_inner()).join("; ");
        let (outcome, out) = result_of(&child, ended, timed_out, self.timeout, &errors);
        emit(EventKind::SubagentEnd { id, outcome, result: preview(&out.content, TOOL_RESULT_PREVIEW_CHARS) });
        out
    }
}

impl Spawn for Spawner {
    fn run<'a>(&'a self, description: &'a str, subagent_type: &'a str, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(self.run_child(description, subagent_type, ctx))
    }
}

/// `.cicy/history/sub/` of the agent of `session`.
fn sub_root(session: &Session) -> std::path::PathBuf {
    HistoryStore::new(&session.agent().record.workspace).dir().join("sub")
}

/// Runs the child's turn; past `timeout` cancels it and waits for it to end (its marker
/// written). Returns how it ended and whether the time ran out.
async fn run_with_timeout(
    child: &mut Session,
    description: &str,
    m: TurnMaterials,
    events: &Emitter,
    cancel: &CancellationToken,
    timeout: Duration,
) -> (Result<TurnOutcome, AgentError>, bool) {
    let turn = super::run_subagent_turn(child, description, m, events, cancel);
    tokio::pin!(turn);
    tokio::select! {
        ended = &mut turn => (ended, false),
        () = tokio::time::sleep(timeout) => {
            cancel.cancel();
            (turn.await, true)
        }
    }
}

/// The outcome and result of a child turn that ended as `ended`.
fn result_of(
    child: &Session,
    ended: Result<TurnOutcome, AgentError>,
    timed_out: bool,
    timeout: Duration,
    errors: &str,
) -> (SubagentOutcome, ToolOutput) {
    let because = if errors.is_empty() { String::new() } else { format!(": {errors}") };
    match ended {
        Ok(TurnOutcome::Completed) => {
            let text = child
                .conversation()
                .current
                .messages
                .iter()
                .rev()
                .find(|m| m.role == Role::Assistant)
                .map(|m| m.plain_text())
                .unwrap_or_default();
            let text = if text.trim().is_empty() { "(the sub-agent gave no answer text)".to_string() } else { text };
            (SubagentOutcome::Completed, ToolOutput::ok(text))
        }
        Ok(TurnOutcome::Cancelled) if timed_out => (
            SubagentOutcome::TimedOut,
            ToolOutput::error(format!("error: the sub-agent did not finish within {} s and was stopped", timeout.as_secs())),
        ),
        Ok(TurnOutcome::Cancelled) => (SubagentOutcome::Cancelled, ToolOutput::error(super::CANCELLED_RESULT)),
        Ok(TurnOutcome::Blocked) => {
            (SubagentOutcome::Blocked, ToolOutput::error(format!("error: the sub-agent's turn was blocked{because}")))
        }
        Ok(TurnOutcome::Failed) => (SubagentOutcome::Failed, ToolOutput::error(format!("error: the sub-agent's turn failed{because}"))),
        Err(e) => (SubagentOutcome::Failed, ToolOutput::error(format!("error: the sub-agent could not run: {e}"))),
    }
}
