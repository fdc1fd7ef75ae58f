//! Tools the model can call (`tool_use` → `tool_result`).
//!
//! Owns the [`Tool`] trait and the set of enabled tools of a turn ([`ToolSet`]): the catalogue
//! sent to the model and dispatch of a call to its tool. Each tool lives in its own module
//! (`shell`, `skill`, `custom`) and knows nothing of the turn loop, the gateway or the terminal:
//! it takes the model's `input` object and a [`ToolContext`], and returns a [`ToolOutput`] whose
//! `content` becomes the `tool_result` text. `process`, `output` and `reaper` are the machinery
//! the command tools share.

/// Implements [`Tool`] for a unit struct whose module provides the tool as free items: `NAME`,
/// `description()`, `input_schema()` and `async fn run(&Value, &ToolContext) -> ToolOutput`
/// (so each is callable and testable without the trait). `tools::shell` is the model.
// Exported: a tool module outside this crate (the `wish` tool beside autonomy) uses it too.
#[macro_export]
macro_rules! module_tool {
    ($tool:ident) => {
        impl $crate::Tool for $tool {
            fn name(&self) -> &str {
                NAME
            }

            fn description(&self) -> &str {
                description()
            }

            fn input_schema(&self) -> serde_json::Value {
                input_schema()
            }

            fn run<'a>(
                &'a self,
                input: &'a serde_json::Value,
                ctx: &'a $crate::ToolContext,
            ) -> futures_util::future::BoxFuture<'a, $crate::ToolOutput> {
                Box::pin(run(input, ctx))
            }
        }
    };
}
pub mod ask;
pub mod ask_user;
pub mod custom;
pub mod files;
pub mod mcp;
pub mod output;
pub mod plan;
pub mod process;
pub mod reaper;
pub mod shell;
pub mod skill;
pub mod skill_guard;
pub mod task;
pub(crate) mod watchdog;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use cicy_config::role::CustomTool;
use cicy_gateway::ToolSpec;

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
    /// Variables every tool process gets: the outbox's `CICY_SEND`, `CICY_OUTBOX_DIR`, …
    /// ([`cicy_store::outbox::shim::tool_env`], docs/design.md §11).
    pub env: Vec<(&'static str, std::ffi::OsString)>,
    /// Where each running tool's process group is recorded so that the next start of the agent
    /// can kill it after a crash ([`reaper::records_dir`] of the workspace); `None` records
    /// nothing.
    pub running_dir: Option<PathBuf>,
    /// The turn's event stream, for a tool that reports while it runs (`todo_change`,
    /// `subagent_start`, `ask_user`, docs/design.md §12); `None` outside a turn.
    pub events: Option<cicy_protocol::event::Emitter>,
    /// Runs `task`'s sub-agents (docs/design.md §12); `None` where `task` is not enabled, which is
    /// always the case inside a sub-agent (no nesting).
    pub subagent: Option<Arc<dyn task::Spawn>>,
    /// The user `ask_user` asks and how long it waits (docs/design.md §12); `None` when no user is
    /// attached (a one-shot chat).
    pub user: Option<ask_user::User>,
    /// The role's skill guard for this batch (`skill_guard` in meta.yaml); `None`: off.
    pub skill_guard: Option<Arc<skill_guard::Guard>>,
    /// Feature data that only that feature's tools read, by type: the turn's
    /// the runtime's `Arc<wake::state::WakeTurn>` for the wake and coordinate tools (docs/design.md §10), the
    /// `Arc<autonomy::wish_tool::WishJudge>` where `wish` is enabled (docs/design.md §13). A typed map, so this
    /// module holds no slot for a feature above it and a tool finds its data missing, not wrong.
    pub extensions: http::Extensions,
}

/// For unit tests, here and in the runtime (its dev-dependency turns on `fixtures`).
#[cfg(any(test, feature = "fixtures"))]
impl ToolContext {
    /// The context the unit tests start from: `workspace` and its `skills` folder, a fresh
    /// cancel token, no hidden variables, no running-tool records.
    pub fn for_tests(workspace: &std::path::Path) -> Self {
        Self {
            workspace: workspace.into(),
            skills_dir: workspace.join("skills"),
            cancel: CancellationToken::new(),
            hidden_env: Vec::new(),
            env: Vec::new(),
            running_dir: None,
            events: None,
            subagent: None,
            user: None,
            skill_guard: None,
            extensions: http::Extensions::new(),
        }
    }
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

/// One tool the model can call.
pub trait Tool: std::fmt::Debug + Send + Sync {
    /// The name the model calls it by (`^[a-zA-Z0-9_-]{1,64}$` on the Anthropic API).
    fn name(&self) -> &str;
    /// What the model is told the tool does.
    fn description(&self) -> &str;
    /// JSON Schema of the input object.
    fn input_schema(&self) -> serde_json::Value;
    /// Runs one call. Never panics and never fails: bad input, a tool that cannot start and a
    /// cancel are error results the model reads.
    fn run<'a>(&'a self, input: &'a serde_json::Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput>;
}

/// The result text of a tool call that the user cancelled.
pub const CANCELLED_RESULT: &str = "error: cancelled by user";

/// One built-in tool: its name and how to make it (`make` is given the name, so one function
/// can make a family of tools). The runtime's table of them is `builtin_tools::BUILTIN`.
#[derive(Clone, Copy)]
pub struct Builtin {
    pub name: &'static str,
    pub make: fn(&str) -> Option<Arc<dyn Tool>>,
}

/// The enabled tools of a turn: built-ins by name plus `customTools` from lite-config.json,
/// sorted by name.
#[derive(Debug, Clone, Default)]
pub struct ToolSet {
    tools: Vec<Arc<dyn Tool>>,
    /// Enabled names that have no definition (a custom tool removed from lite-config.json).
    undefined: Vec<String>,
}

impl ToolSet {
    /// `names` were validated by `cicy_config::role::ToolConfig::expand`; a built-in name (one of
    /// `builtin`) wins over a custom tool of the same name.
    pub fn new(names: Vec<String>, custom: BTreeMap<String, CustomTool>, builtin: &[Builtin]) -> Self {
        let mut set = Self::default();
        for name in names {
            let made = builtin.iter().find(|b| b.name == name).and_then(|b| (b.make)(&name));
            let tool = made.or_else(|| custom.get(&name).map(|def| Arc::new(custom::Custom::new(&name, def.clone())) as Arc<dyn Tool>));
            match tool {
                Some(tool) => set.tools.push(tool),
                None => set.undefined.push(name),
            }
        }
        set.tools.sort_by(|a, b| a.name().cmp(b.name()));
        set.tools.dedup_by(|a, b| a.name() == b.name());
        set
    }

    /// Whether tool `name` is enabled.
    pub fn has(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name() == name) || self.undefined.iter().any(|n| n == name)
    }

    /// This set without tool `name` (a sub-agent's tools are its parent's minus `task`).
    pub fn without(&self, name: &str) -> ToolSet {
        self.only(|n| n != name)
    }

    /// This set with only the tools whose name `keep` accepts.
    pub fn only(&self, keep: impl Fn(&str) -> bool) -> ToolSet {
        ToolSet {
            tools: self.tools.iter().filter(|t| keep(t.name())).cloned().collect(),
            undefined: self.undefined.iter().filter(|n| keep(n)).cloned().collect(),
        }
    }

    /// Adds `tools` (a turn's MCP tools), keeping the set sorted by name; a name already in
    /// the set keeps its tool.
    pub fn extend(&mut self, tools: Vec<Arc<dyn Tool>>) {
        if tools.is_empty() {
            return;
        }
        self.tools.extend(tools);
        self.tools.sort_by(|a, b| a.name().cmp(b.name()));
        self.tools.dedup_by(|a, b| a.name() == b.name());
    }

    /// Name, description and JSON Schema of each enabled tool, sorted by name.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec { name: t.name().to_owned(), description: t.description().to_owned(), input_schema: t.input_schema() })
            .collect()
    }

    /// Runs tool `name` with the model's `input`. A name that is not enabled is an error
    /// result (the model asked for something it was not offered), never a panic.
    pub async fn run(&self, name: &str, input: &serde_json::Value, ctx: &ToolContext) -> ToolOutput {
        if let Some(blocked) = skill_guard::refusal(ctx, name) {
            return blocked;
        }
        if let Some(tool) = self.tools.iter().find(|t| t.name() == name) {
            return tool.run(input, ctx).await;
        }
        if self.undefined.iter().any(|n| n == name) {
            return ToolOutput::error(format!("error: tool `{name}` has no definition"));
        }
        let names: Vec<&str> = self.tools.iter().map(|t| t.name()).chain(self.undefined.iter().map(String::as_str)).collect();
        ToolOutput::error(format!(
            "error: tool `{name}` is not available to this agent (available: {})",
            if names.is_empty() { "none".to_string() } else { names.join(", ") }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn custom(command: &str) -> CustomTool {
        CustomTool { description: format!("runs {command}"), command: command.into(), input_schema: json!({"type": "object"}) }
    }

    fn context(workspace: &std::path::Path) -> ToolContext {
        ToolContext::for_tests(workspace)
    }

    #[tokio::test]
    async fn one_set_gives_the_sorted_catalogue_and_runs_each_tool_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let defs = BTreeMap::from([("greet".to_string(), custom("echo hi")), ("gone_not_enabled".to_string(), custom("x"))]);
        let builtin = [
            Builtin { name: shell::NAME, make: |_| Some(Arc::new(shell::Shell)) },
            Builtin { name: skill::NAME, make: |_| Some(Arc::new(skill::Skill)) },
        ];
        let set = ToolSet::new(vec!["skill".into(), "shell".into(), "greet".into(), "removed".into()], defs, &builtin);
        let specs = set.specs();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["greet", "shell", "skill"]);
        assert_eq!((specs[0].description.as_str(), &specs[0].input_schema), ("runs echo hi", &json!({"type": "object"})));
        assert_eq!((specs[1].description.as_str(), specs[1].input_schema.clone()), (shell::description(), shell::input_schema()));
        assert_eq!(set.run("greet", &json!({}), &ctx).await, ToolOutput::ok("hi\nexit code: 0"));
        assert_eq!(set.run("shell", &json!({"command": "echo sh"}), &ctx).await, ToolOutput::ok("sh\nexit code: 0"));
        assert_eq!(set.run("skill", &json!({}), &ctx).await, ToolOutput::ok("No skills installed."));
        assert_eq!(set.run("removed", &json!({}), &ctx).await, ToolOutput::error("error: tool `removed` has no definition"));
        assert_eq!(
            set.run("gone_not_enabled", &json!({}), &ctx).await,
            ToolOutput::error("error: tool `gone_not_enabled` is not available to this agent (available: greet, shell, skill, removed)")
        );
        assert_eq!(
            ToolSet::default().run("shell", &json!({}), &ctx).await,
            ToolOutput::error("error: tool `shell` is not available to this agent (available: none)")
        );
    }
}
