//! Messages between agents and humans (docs/design.md §11, from Choruz): conversations (direct and
//! group), their members, messages with per-conversation `seq` and threads, per-agent
//! deliveries, board tasks, and the exact envelope texts an agent reads.
//!
//! Owns the migration-3 tables of `$CICY_HOME/cicy.db` (`conversation`, `member`, `message`,
//! `delivery`, `task`, `cron_job`; the schema itself is in `crate::registry`) and the envelope
//! formats; `route` alone writes files: the inbox copies of a posted message; `commands` runs
//! what an agent's outbox holds (its result envelopes and shared files are the only outbox
//! files it writes). Must not touch: `agent_config` rows (read only, for display names and
//! workspaces; `commands` creates agents through `crate::agent`), the wake tables (`todo`,
//! `obligation`; a command's reply resolves its claim through `crate::wake`). It is a synchronous store: async
//! callers (serve) run it through `spawn_blocking`.

pub mod commands;
pub mod coordinate;
pub mod envelope;
pub mod groups;
pub mod route;
pub mod store;
pub mod tools;
