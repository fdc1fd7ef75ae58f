//! MCP servers as tools (docs/design.md §12), through the official Rust SDK `rmcp` (client side,
//! child-process transport): `initialize`, `tools/list` with its cursor, `tools/call`.
//!
//! Owns a role's `mcp_servers` entries ([`config`]), one running server ([`server`]), the
//! servers of one agent session with their restarts ([`Pool`]) and the tools they offer
//! ([`McpTool`], named `mcp__<server>__<tool>`).
//!
//! Where the tools join a turn: `Session::materials()` is sync and re-reads the role every
//! turn, while listing a server is async and may start it. So the turn loop asks the pool at
//! the start of each user turn (`turn::run_user_turn`, once the user message is stored) and adds
//! the tools to that turn's `ToolSet`; they are listed at turn start only, so the tool list
//! (and the cached prompt prefix) stays the same for every round of a turn. The pool lives in
//! the `Session`, so servers stay warm for as long as it does (a resident `serve` agent, a
//! `chat` session). Must not touch: the history, the request, other tools.

pub use cicy_config::mcp as config;
mod pool;
pub mod server;
mod tool;

pub use config::{McpServerConfig, DEFAULT_TIMEOUT_SECS};
pub use pool::{backoff, Pool, MAX_BACKOFF};
pub use tool::{result_output, McpTool, EMPTY_RESULT};

/// Why an MCP server could not do what was asked; shown to the model after
/// `error: mcp server <name>: `.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("cannot open its log {path}: {source}")]
    Log { path: std::path::PathBuf, source: std::io::Error },
    #[error("cannot start `{command}`: {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("initialize failed: {0}")]
    Initialize(String),
    /// The server closed its stdin or stdout before answering `initialize` (a missing script,
    /// a crash at start); `log` is its stderr log relative to the workspace.
    #[error("initialize failed: the server exited (or closed its stdin/stdout) before answering; its stderr is in {log}")]
    ExitedAtStart { log: String },
    #[error("{what} timed out after {secs} s")]
    Timeout { what: String, secs: u64 },
    /// Found dead when the call came, or the session closed while the call ran (one text:
    /// which of the two a crash between calls is depends on when rmcp read the end of the pipe).
    #[error("the server exited; it is started again on the next call")]
    Exited,
    #[error("{0}")]
    Request(String),
    #[error("not started after its last failure ({last}); next try in {secs:.1} s")]
    Backoff { last: String, secs: f64 },
    #[error("no longer configured in the role's meta.yaml")]
    NotConfigured,
}
