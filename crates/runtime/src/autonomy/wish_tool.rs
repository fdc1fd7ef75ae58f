//! The `wish` tool (docs/design.md §13 "wish"): the agent writes an intent for its idle time into
//! its own ledger, `by: self`, checked by the guardrails before it is written.
//!
//! Owns the tool's input, description and result text; the wish itself is
//! [`crate::autonomy::wish::wish`]. Must not touch the ledger's format or the guardrails. It
//! lives beside autonomy, not in `tools`, so `tools` needs nothing of autonomy.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::autonomy::guard::Judge;
use crate::autonomy::ledger::{By, Needs, Status};
use crate::autonomy::wish::{self, WishInput};
use crate::gateway::GatewayClient;
use crate::tools::{ToolContext, ToolOutput};

pub const NAME: &str = "wish";

/// What the guardrails' judge (an aux call, `X-Cicy-Aux: guard`) runs on: the agent's gateway
/// client, model and id, and `$CICY_HOME`.
#[derive(Debug, Clone)]
pub struct WishJudge {
    pub home: PathBuf,
    pub client: GatewayClient,
    pub model: String,
    pub agent_id: String,
}

impl WishJudge {
    pub fn judge(&self) -> Judge<'_> {
        Judge { client: &self.client, model: &self.model, agent_id: &self.agent_id }
    }
}

/// The tool description shown to the model.
pub fn description() -> &'static str {
    "Write down something you want to do when nothing is asked of you (an intent in your \
     ledger .cicy/intents.jsonl). When you are idle it runs: `run` as a bash command in your \
     workspace, or without `run` a turn of yours with `what` as the prompt; a person, an alarm \
     or a task interrupts it. It is checked before it is written: deleting or cleaning memory, \
     changing the kernel, the model, the handoff format, the prompt's injection or the limits, \
     migrating or merging, network access, installing dependencies and git push are refused. \
     Use needs human or external for something that must wait for a person's approval."
}

/// JSON Schema of the input: `what` (required), `why`, `run`, `priority` 4–7, `min_gap`
/// seconds, `needs`.
pub fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "what": {"type": "string", "description": "What you want to do, one or two sentences (at most 2000 characters)."},
            "why": {"type": "string", "description": "Why it is worth doing."},
            "run": {"type": "string", "description": "A bash command that does it. Omit it to do it in a turn of your own."},
            "priority": {"type": "integer", "minimum": 4, "maximum": 7, "description": "4 (first) to 7 (last). Default 5."},
            "min_gap": {"type": "integer", "minimum": 0, "description": "Seconds to wait after a start before it may start again (after an interruption). Default 0."},
            "needs": {"type": "string", "enum": ["none", "human", "external"], "description": "none: runs on its own (default). human / external: only reported until a person approves it."}
        },
        "required": ["what"],
        "additionalProperties": false
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    what: String,
    #[serde(default)]
    why: Option<String>,
    #[serde(default)]
    run: Option<String>,
    #[serde(default)]
    priority: Option<u8>,
    #[serde(default)]
    min_gap: Option<u64>,
    #[serde(default)]
    needs: Option<Needs>,
}

/// The `wish` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wish;

cicy_tools::module_tool!(Wish);

/// Writes the wish. Results: `wished <iid> (pending)` (with what it waits for when `needs` is
/// not none); the error `refused <iid>: <class>: <reason>` when the guardrails refused it (the
/// refused line is written); `error: …` when nothing was written (bad input, the ledger).
pub async fn run(input: &Value, ctx: &ToolContext) -> ToolOutput {
    let input = match Input::deserialize(input) {
        Ok(i) => i,
        Err(e) => {
            return ToolOutput::error(format!(
                "error: invalid input: {e}; expected {{\"what\", \"why\"?, \"run\"?, \"priority\"? 4–7, \"min_gap\"? seconds, \"needs\"? none|human|external}}"
            ))
        }
    };
    let Some(judge) = ctx.extensions.get::<std::sync::Arc<WishJudge>>() else {
        return ToolOutput::error("error: wish is not available here (no gateway to check the wish with)");
    };
    let input = WishInput {
        what: input.what,
        why: input.why,
        run: input.run,
        priority: input.priority,
        min_gap: input.min_gap.unwrap_or(0),
        needs: input.needs.unwrap_or_default(),
    };
    match wish::wish(&ctx.workspace, &judge.home, By::Agent, input, &judge.judge(), &ctx.cancel).await {
        Ok(i) if i.status == Status::Refused => {
            ToolOutput::error(format!("refused {}: {}", i.id, i.refused_reason.as_deref().unwrap_or("(no reason given)")))
        }
        Ok(i) => match i.needs {
            Needs::None => ToolOutput::ok(format!("wished {} (pending)", i.id)),
            Needs::Human | Needs::External => ToolOutput::ok(format!(
                "wished {} (pending; needs {}: it is only reported until a person approves it)",
                i.id,
                i.needs.as_str()
            )),
        },
        Err(e) => ToolOutput::error(format!("error: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_input_and_a_context_without_a_judge_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::for_tests(dir.path());
        let out = run(&json!({"what": "x", "when": "now"}), &ctx).await;
        assert!(out.is_error && out.content.starts_with("error: invalid input: unknown field `when`"), "{}", out.content);
        let out = run(&json!({"what": "x", "needs": "maybe"}), &ctx).await;
        assert!(out.content.starts_with("error: invalid input: unknown variant `maybe`"), "{}", out.content);
        assert_eq!(
            run(&json!({"what": "x"}), &ctx).await,
            ToolOutput::error("error: wish is not available here (no gateway to check the wish with)")
        );
        assert!(!crate::autonomy::ledger::ledger_path(dir.path()).exists());
    }
}
