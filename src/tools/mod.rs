//! Tools the model can call (`tool_use` → `tool_result`).
//!
//! Owns the tool catalogue (names, descriptions, JSON Schema parameters) and dispatch by name.
//! Each tool lives in its own module and knows nothing of the turn loop, the gateway or the
//! terminal: it takes the model's `input` object and a [`ToolContext`], and returns a
//! [`ToolOutput`] whose `content` becomes the `tool_result` text.

pub mod shell;
pub mod skill;

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

/// What a tool may see of the agent it runs for.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The agent's workspace; the default working directory of `shell`.
    pub workspace: PathBuf,
    /// `$CICY_HOME/skills`: one folder per skill, each with a `SKILL.md`.
    pub skills_dir: PathBuf,
    /// Cancelled when the user aborts the turn; a running tool must stop promptly.
    pub cancel: CancellationToken,
    /// Environment variables the tool's processes must not inherit (the gateway API key).
    pub hidden_env: Vec<String>,
}

/// The result of one tool call: the `tool_result` content (plain text) and whether it is an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(content: impl Into<String>) -> Self {
        Self { content: content.into(), is_error: false }
    }

    pub fn error(content: impl Into<String>) -> Self {
        Self { content: content.into(), is_error: true }
    }
}

use crate::gateway::ToolSpec;
use crate::role::CustomTool;
use std::collections::BTreeMap;

/// The enabled tools of a turn: built-ins by name plus `customTools` from lite-config.json.
#[derive(Debug, Clone, Default)]
pub struct ToolSet {
    names: Vec<String>,
    custom: BTreeMap<String, CustomTool>,
}

impl ToolSet {
    /// `names` were validated by `crate::role::ToolConfig::expand`.
    pub fn new(names: Vec<String>, custom: BTreeMap<String, CustomTool>) -> Self {
        Self { names, custom }
    }

    /// Name, description and JSON Schema of each enabled tool, sorted by name.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self
            .names
            .iter()
            .filter_map(|n| match n.as_str() {
                shell::NAME => Some(ToolSpec {
                    name: n.clone(),
                    description: shell::description().to_string(),
                    input_schema: shell::input_schema(),
                }),
                skill::NAME => Some(ToolSpec {
                    name: n.clone(),
                    description: skill::description().to_string(),
                    input_schema: skill::input_schema(),
                }),
                _ => self.custom.get(n).map(|c| ToolSpec {
                    name: n.clone(),
                    description: c.description.clone(),
                    input_schema: c.input_schema.clone(),
                }),
            })
            .collect();
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        specs
    }

    /// Runs tool `name` with the model's `input`. A name that is not enabled is an error
    /// result (the model asked for something it was not offered), never a panic.
    pub async fn run(&self, name: &str, input: &serde_json::Value, ctx: &ToolContext) -> ToolOutput {
        if !self.names.iter().any(|n| n == name) {
            return ToolOutput::error(format!(
                "error: tool `{name}` is not available to this agent (available: {})",
                if self.names.is_empty() { "none".to_string() } else { self.names.join(", ") }
            ));
        }
        match name {
            shell::NAME => shell::run(input, ctx).await,
            skill::NAME => skill::run(input, ctx).await,
            _ => match self.custom.get(name) {
                Some(c) => run_custom(c, input, ctx).await,
                None => ToolOutput::error(format!("error: tool `{name}` has no definition")),
            },
        }
    }
}

/// A custom tool is a shell command that reads the model's input JSON from `$CICY_TOOL_INPUT`.
async fn run_custom(tool: &CustomTool, input: &serde_json::Value, ctx: &ToolContext) -> ToolOutput {
    let json = input.to_string().replace('\'', r"'\''");
    let command = format!("export CICY_TOOL_INPUT='{json}'\n{}", tool.command);
    shell::run(&serde_json::json!({ "command": command }), ctx).await
}
