//! What a person configures: `$CICY_HOME/config.yaml` (overridden by the environment), role
//! templates (`system.md`, `role.md`, `meta.yaml`), `lite-config.json` tool groups and custom
//! tools, and the config types of the features a role turns on (hooks, MCP servers, idle
//! autonomy and its priority table, the skill guard, memory flushing).
//!
//! Owns: parsing and validating these files, with errors that name the file and the field, and
//! the packaged roles. It must not run anything a setting describes (hooks, servers, ticks are
//! the runtime's), and it knows no tool: the runtime passes its built-in tool names in.

pub mod autonomy;
#[allow(clippy::module_inception)] // `cicy_config::config` is config.yaml, as `cicy::config` was
pub mod config;
pub mod hooks;
pub mod mcp;
pub mod memory;
pub mod priority;
pub mod role;
pub mod skill_guard;
pub mod unique_map;
