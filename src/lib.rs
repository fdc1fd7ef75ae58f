//! cicy: a headless role-agent runtime.
//!
//! Agents are created from role templates, keep their identity in an editable AGENTS.md, and
//! hold conversations against an AI gateway through a turn loop with tools, byte-stable prompts
//! and history files that survive a crash. The design is `docs/design.md`; each module names the
//! section it implements.

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
pub use cicy_store::{eventlog, fsutil, home, lock, outbox, registry};
pub use cicy_tools as tools;
pub use cicy_tools::{ask, mcp};
pub mod hooks;
pub mod messages;
pub mod prompt;
pub mod serve;
pub mod turn;
pub mod wake;
