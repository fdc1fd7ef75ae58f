//! cicy: a headless role-agent runtime.
//!
//! Agents are created from role templates, keep their identity in an editable AGENTS.md, and
//! hold conversations against an AI gateway through a turn loop with tools, byte-stable prompts
//! and history files that survive a crash. The contract is `DESIGN.md`; each module names the
//! section it implements.

pub mod agent;
pub mod ask;
pub mod autonomy;
pub mod checkpoint;
pub mod command;
pub mod compact;
pub mod config;
pub mod conversation;
pub use cicy_protocol::event;
pub mod eventlog;
pub mod fsutil;
pub mod gateway;
pub mod home;
pub mod hooks;
pub mod lock;
pub mod mcp;
pub mod memory;
pub mod messages;
pub mod outbox;
pub mod prompt;
pub mod registry;
pub mod role;
pub mod serve;
pub mod tools;
pub mod turn;
pub mod unique_map;
pub mod wake;
