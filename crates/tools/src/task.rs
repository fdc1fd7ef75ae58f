//! `task` (docs/design.md §12, CMDC SubAgent): hands a piece of work to a sub-agent that runs in
//! the same process with a fresh conversation and returns its last answer text.
//!
//! Owns the tool's name, schema and input checks. Running the sub-agent is the turn loop's
//! business ([`Spawn`], implemented in the runtime's `turn`), reached through
//! [`ToolContext::subagent`]; a context without one (inside a sub-agent, where `task` is never
//! offered) refuses the call, so a sub-agent can never start another.

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::{Tool, ToolContext, ToolOutput};

/// The tool's name.
pub const NAME: &str = "task";
/// CMDC: the built-in sub-agent type, which runs with this agent's own role template.
pub const GENERAL_PURPOSE: &str = "general-purpose";
/// CMDC: a sub-agent that has not ended after 120 s is stopped (meta.yaml `task_timeout_secs`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// The result of a `task` call where no sub-agent may start (inside a sub-agent).
pub const NESTED_RESULT: &str = "error: task is not available here: a sub-agent cannot start another sub-agent";

/// Runs sub-agents for `task`.
pub trait Spawn: std::fmt::Debug + Send + Sync {
    /// Runs one sub-agent on `description` (its one user message) with `subagent_type`
    /// (`general-purpose` or a role template slug) until it ends, is cancelled through
    /// `ctx.cancel` or times out; returns the result the parent reads. Never fails: every
    /// problem is an error result.
    fn run<'a>(&'a self, description: &'a str, subagent_type: &'a str, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput>;
}

/// The `task` tool.
#[derive(Debug, Default)]
pub struct Task;

fn description() -> &'static str {
    "Hand a self-contained piece of work to a sub-agent. It starts with a fresh conversation (it sees none of this one), has your tools except `task`, works in the same workspace, and its final answer text comes back as this tool's result. Put everything it needs into `description`. `subagent_type` is `general-purpose` (your own role) or the slug of a role template."
}

fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "description": {"type": "string", "description": "The whole task: what to do, what to return."},
            "subagent_type": {"type": "string", "description": "`general-purpose` or a role template slug."}
        },
        "required": ["description", "subagent_type"]
    })
}

/// The non-blank string field `name` of `input`, or the error result naming it.
fn field<'a>(input: &'a Value, name: &str) -> Result<&'a str, ToolOutput> {
    match input.get(name).and_then(Value::as_str) {
        Some(s) if !s.trim().is_empty() => Ok(s),
        _ => Err(ToolOutput::error(format!("error: task needs `{name}`: a non-empty string"))),
    }
}

impl Tool for Task {
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
        Box::pin(async move {
            let (description, subagent_type) = match (field(input, "description"), field(input, "subagent_type")) {
                (Ok(d), Ok(t)) => (d, t),
                (Err(e), _) | (_, Err(e)) => return e,
            };
            match &ctx.subagent {
                Some(spawn) => spawn.run(description, subagent_type.trim(), ctx).await,
                None => ToolOutput::error(NESTED_RESULT),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_input_and_a_context_without_a_spawner_are_error_results() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::for_tests(dir.path());
        assert_eq!(
            Task.run(&json!({"subagent_type": "general-purpose"}), &ctx).await,
            ToolOutput::error("error: task needs `description`: a non-empty string")
        );
        assert_eq!(
            Task.run(&json!({"description": "x", "subagent_type": " "}), &ctx).await,
            ToolOutput::error("error: task needs `subagent_type`: a non-empty string")
        );
        assert_eq!(
            Task.run(&json!({"description": "x", "subagent_type": "general-purpose"}), &ctx).await,
            ToolOutput::error(NESTED_RESULT)
        );
    }
}
