//! Custom tools: `customTools` of `lite-config.json`, each a bash command the model can call.
//!
//! Owns turning a [`CustomTool`] definition into a [`Tool`]. The model's input reaches the
//! command only as the environment variable `CICY_TOOL_INPUT` (compact JSON) of its process,
//! never as part of the script text, so no input can change what runs. Running is the `shell`
//! tool's job runner (same timeout, capping and process-group handling); it knows nothing of
//! the turn loop.

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::process::Job;
use super::shell::{self, DEFAULT_TIMEOUT_SECS, OUTPUT_CAP_BYTES};
use super::{Tool, ToolContext, ToolOutput};
use cicy_config::role::CustomTool;

/// The environment variable that carries the model's input JSON to a custom tool's command.
pub const INPUT_ENV: &str = "CICY_TOOL_INPUT";

/// A custom tool under its configured name.
#[derive(Debug, Clone)]
pub struct Custom {
    name: String,
    def: CustomTool,
}

impl Custom {
    pub fn new(name: impl Into<String>, def: CustomTool) -> Self {
        Self { name: name.into(), def }
    }
}

impl Tool for Custom {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.def.description
    }

    fn input_schema(&self) -> Value {
        self.def.input_schema.clone()
    }

    /// Runs the command in the workspace with the `shell` tool's default timeout
    /// ([`DEFAULT_TIMEOUT_SECS`]); the result is worded as `shell`'s.
    fn run<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let json = input.to_string();
            let label = format!("{}: {}", self.name, self.def.command);
            let job = Job {
                command: &self.def.command,
                cwd: &ctx.workspace,
                env: &[(INPUT_ENV, &json)],
                timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECS),
                label: &label,
                output_limit: OUTPUT_CAP_BYTES,
            };
            shell::run_job(&job, ctx).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(command: &str) -> Custom {
        let def = CustomTool { description: "d".into(), command: command.into(), input_schema: json!({"type": "object"}) };
        Custom::new("echo_input", def)
    }

    fn context(workspace: &std::path::Path) -> ToolContext {
        ToolContext::for_tests(workspace)
    }

    #[tokio::test]
    async fn the_input_arrives_in_the_environment_exactly_and_runs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let input = json!({"text": "it's '$(touch pwned)' `touch pwned2` \\ \"q\"\n"});
        let out = tool("printf '%s' \"$CICY_TOOL_INPUT\"").run(&input, &ctx).await;
        assert_eq!(out, ToolOutput::ok(format!("{input}\nexit code: 0")));
        assert!(!dir.path().join("pwned").exists() && !dir.path().join("pwned2").exists());
    }

    #[tokio::test]
    async fn the_script_bash_runs_is_the_configured_command_alone() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        // bash's own command line: `bash -lc <script>`; the input must not be part of it.
        let command = "c=$(tr '\\0' '|' < /proc/$$/cmdline); printf '%s' \"$c\"";
        let out = tool(command).run(&json!({"secret": "s3"}), &ctx).await;
        assert_eq!(out, ToolOutput::ok(format!("bash|-lc|{command}|\nexit code: 0")));
    }
}
