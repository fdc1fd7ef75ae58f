//! The integration tests: one binary, one module per area (ripgrep's layout). One binary links the
//! crate once instead of once per file; each module still reads on its own.

// Test code: a panic is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test tells its output what it measured or replayed (a crash run's seed, the local model's answer).
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod architecture;
mod ask_user;
mod autonomy_cli;
mod autonomy_guard;
mod autonomy_serve;
mod autonomy_tick;
mod chat_input;
mod chat_session;
mod checkpoint_cli;
mod cli;
mod cli_errors;
mod cluster;
mod command;
mod compaction;
mod compaction_cli;
mod compaction_snapshots;
mod context_window;
mod coordinate;
mod crash;
mod create;
mod dashboard;
mod dashboard_http;
mod durable_writes;
mod e2e_local_model;
mod file_tools;
mod gateway_client;
mod gateway_retry;
mod gateway_split;
mod groups;
mod history_restore;
mod hooks;
mod inbox_claims;
mod inbox_cli;
mod lifecycle;
mod malformed_replies;
mod mcp;
mod memory;
mod memory_cli;
mod orphan_tools;
mod outbox_drain;
mod outbox_send;
mod plan_skills;
mod prompt_blocks;
mod referee;
mod serve_api;
mod serve_cli;
mod serve_crash;
mod serve_events;
mod steer;
mod subagent;
mod todo_cli;
mod turn_loop;
mod turn_retry;
mod wake_serve;
mod wake_tools;
