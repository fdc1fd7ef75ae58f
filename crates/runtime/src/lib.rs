//! cicy's runtime: what one agent is and does, with no terminal and no HTTP.
//!
//! Owns sessions (opening, creating and healing an agent), the turn loop and its rounds, the
//! byte-stable prompt, compaction, hooks, slash commands, checkpoints, wakes (todos, the inbox,
//! obligations), messages between agents and people, idle autonomy and its guardrails, and the
//! one table of built-in tools. It emits typed events ([`event`]); the CLI prints them and
//! `cicy-serve` streams them. It must not know of sockets, routes, the dashboard or the
//! terminal, and depends on no crate above it. The design is `docs/design.md`; each module
//! names the section it implements.
//!
//! The crates below are re-exported under the module names they had before the workspace, so a
//! path such as `cicy_runtime::gateway::ApiStyle` still reads as it did.

pub mod agent;
pub mod autonomy;
pub mod builtin_tools;
pub mod checkpoint;
pub mod command;
pub mod compact;
pub mod conversation;
pub use cicy_config::{config, role, unique_map};
pub use cicy_gateway as gateway;
pub use cicy_memory as memory;
pub use cicy_protocol::event;
pub use cicy_store::{eventlog, fsutil, home, instance, lock, outbox, registry};
pub use cicy_tools as tools;
pub use cicy_tools::{ask, mcp};
pub mod hooks;
pub mod messages;
pub mod prompt;
pub mod turn;
pub mod wake;
