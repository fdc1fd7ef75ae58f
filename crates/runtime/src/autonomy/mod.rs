//! Idle autonomy (docs/design.md §13, from the idle seed): what an agent does when nothing is asked
//! of it, and how it gives way when something is.
//!
//! - `ledger`: the append-only `intents.jsonl`.
//! - `lease`: the row in `cicy.db` naming the job autonomy runs now.
//! - `priority`: the table `sched-priority.json`.
//! - `settings`: the role's `autonomy:` block and the agent's switch.
//! - `plan`: what a tick would run, `min_gap`, starvation.
//! - `guard`: the guardrails a wish passes when it is written.
//! - `key`: the home's secret behind a line's `checked` mark.
//! - `log`: the human-readable `autonomy.log`.
//! - `tick`: one tick's decision with the idle checks, the poll, the recovery.
//! - `report`: the ⑩⑪⑫ report of `intents <id> status` and the API.
//! - `wish`: writing a wish (checked by the guardrails), approve, drop, the pickup check.
//!
//! This module decides and records; it runs nothing. serve's actor runs what a tick picks
//! (`cicy-serve`, its intent job).

pub mod guard;
pub mod key;
pub mod lease;
pub mod ledger;
pub mod log;
pub mod plan;
pub use cicy_config::priority;
pub mod report;
pub use cicy_config::autonomy as settings;
pub mod tick;
pub mod wish;
pub mod wish_tool;
