//! `mcp_servers` of a role's `meta.yaml` (docs/design.md §12): how to start each server, and the
//! name rules its tools must meet.
//!
//! Owns the [`McpServerConfig`] shape, its validation when meta.yaml is read, and the
//! `mcp__<server>__<tool>` naming. Starts nothing.

use std::collections::BTreeMap;

use serde::Deserialize;

/// docs/design.md §12: a server's request timeout unless meta.yaml says otherwise, in seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;

/// Prefix of every MCP tool's name: `mcp__<server>__<tool>`.
pub const TOOL_PREFIX: &str = "mcp__";

/// One entry of `mcp_servers: {name: {command, args, env, timeout_secs}}`: a stdio MCP server
/// started as `command args…` in the agent's workspace, with `env` added to the environment
/// cicy passes on (which never holds the gateway's API key variables).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The program; looked up on `PATH` like a shell would.
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Limit of a start (spawn and `initialize`) and of each `tools/list` and `tools/call`
    /// request, in seconds; at least 1. A server that never answers costs a turn at most this
    /// long, so a server that downloads itself first (`npx`) needs it higher than its calls do.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_SECS
}

/// `mcp__<server>__<tool>`, the name the model calls the tool by.
pub fn full_name(server: &str, tool: &str) -> String {
    format!("{TOOL_PREFIX}{server}__{tool}")
}

/// Whether `name` is a tool name both APIs accept: `^[a-zA-Z0-9_-]{1,64}$` (Anthropic
/// Messages `tools[].name`, OpenAI `tools[].function.name`).
pub fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks every server of `mcp_servers`: its name uses `[a-zA-Z0-9_-]` and leaves room for a
/// tool name of at least one character in the 64 of [`valid_tool_name`] (so at most 56
/// characters), its command is not empty and its timeout is at least 1 s.
///
/// Errors: [`McpConfigError`], naming the server and the rule.
pub fn validate(servers: &BTreeMap<String, McpServerConfig>) -> Result<(), McpConfigError> {
    for (name, server) in servers {
        let server_error = |rule| McpConfigError { server: name.clone(), rule };
        if name.is_empty() || !valid_tool_name(&full_name(name, "x")) {
            return Err(server_error(McpRule::Name));
        }
        if server.command.trim().is_empty() {
            return Err(server_error(McpRule::EmptyCommand));
        }
        if server.timeout_secs == 0 {
            return Err(server_error(McpRule::ZeroTimeout));
        }
    }
    Ok(())
}

/// A server of `mcp_servers` that breaks a rule of [`validate`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mcp_servers: {}", rule.describe(server))]
pub struct McpConfigError {
    pub server: String,
    pub rule: McpRule,
}

/// The rule an `mcp_servers` entry breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpRule {
    /// The name is empty or leaves no room for a tool name of the 64 characters allowed.
    Name,
    EmptyCommand,
    ZeroTimeout,
}

impl McpRule {
    fn describe(self, name: &str) -> String {
        match self {
            McpRule::Name => format!(
                "`{name}` is not a valid server name: use 1 to 56 letters, digits, `-` and `_` (tools are called mcp__{name}__<tool>, at most 64 characters)"
            ),
            McpRule::EmptyCommand => format!("{name}: `command` is empty"),
            McpRule::ZeroTimeout => format!("{name}: timeout_secs: 0 is not allowed (at least 1)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(command: &str, timeout_secs: u64) -> McpServerConfig {
        McpServerConfig { command: command.into(), args: Vec::new(), env: BTreeMap::new(), timeout_secs }
    }

    #[test]
    fn names_must_fit_the_tool_name_rule() {
        let ok = BTreeMap::from([("a-b_C9".to_string(), server("node", 60)), ("x".repeat(56), server("node", 1))]);
        assert_eq!(validate(&ok), Ok(()));
        for bad in ["", "a.b", "a b", "ü", &"x".repeat(57)] {
            let err = validate(&BTreeMap::from([(bad.to_string(), server("node", 60))])).unwrap_err();
            assert_eq!(err, McpConfigError { server: bad.to_string(), rule: McpRule::Name });
            assert_eq!(
                err.to_string(),
                format!("mcp_servers: `{bad}` is not a valid server name: use 1 to 56 letters, digits, `-` and `_` (tools are called mcp__{bad}__<tool>, at most 64 characters)")
            );
        }
        let err = validate(&BTreeMap::from([("s".to_string(), server(" ", 60))])).unwrap_err();
        assert_eq!(err.to_string(), "mcp_servers: s: `command` is empty");
        let err = validate(&BTreeMap::from([("s".to_string(), server("node", 0))])).unwrap_err();
        assert_eq!(err.to_string(), "mcp_servers: s: timeout_secs: 0 is not allowed (at least 1)");
        assert_eq!(full_name("fs", "read"), "mcp__fs__read");
        assert!(valid_tool_name(&full_name(&"s".repeat(56), "t")));
        assert!(!valid_tool_name(&full_name("s", "a.b")));
    }

    #[test]
    fn yaml_defaults_and_unknown_keys() {
        let c: McpServerConfig = serde_yaml::from_str("command: node\n").unwrap();
        assert_eq!(c, server("node", 60));
        let c: McpServerConfig = serde_yaml::from_str("command: node\nargs: [a, b]\nenv: {K: v}\ntimeout_secs: 5\n").unwrap();
        assert_eq!(
            (c.args, c.env, c.timeout_secs),
            (vec!["a".to_string(), "b".to_string()], BTreeMap::from([("K".to_string(), "v".to_string())]), 5)
        );
        assert!(serde_yaml::from_str::<McpServerConfig>("command: node\ncwd: /\n").is_err());
    }

    #[test]
    fn meta_yaml_is_checked_when_read() {
        let meta = crate::role::parse_meta("mcp_servers:\n  fs: {command: node, args: [s.js]}\n", "meta.yaml").unwrap();
        assert_eq!(meta.mcp_servers["fs"].args, ["s.js"]);
        let err = crate::role::parse_meta("mcp_servers:\n  a.b: {command: node}\n", "meta.yaml").unwrap_err().to_string();
        assert!(err.starts_with("meta.yaml: mcp_servers: `a.b` is not a valid server name"), "{err}");
    }
}
