//! `cicy-agent status <id> [--json]` (docs/design.md §10 CLI): what an agent is doing and when it
//! wakes next. Through a live serve it is serve's status row (`GET /api/agents/{id}`); without
//! one it is read from the files and `cicy.db` (state `idle`, or `busy` when another process
//! holds the agent's turn lock).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::{json, Value};

use super::remote::{request, Method};
use cicy::home::Home;
use cicy::registry::Registry;
use cicy::wake::db::WakeDb;
use cicy::wake::inbox::Mailbox;

/// Prints the status of `id`.
pub(super) fn run(home: &Home, id: &str, json_out: bool, out: &mut impl Write) -> Result<ExitCode> {
    let record = Registry::open(&home.db_path())?.get(id)?;
    let pending_inbox = Mailbox::of_workspace(&record.workspace).pending()?.0.len();
    let row = match request(home, Method::Get, &["api", "agents", id])? {
        Some(mut row) => {
            if let Value::Object(m) = &mut row {
                m.insert("served".into(), Value::Bool(true));
            }
            row
        }
        None => {
            let db = WakeDb::open(home)?;
            let busy = matches!(cicy::lock::TurnLock::try_acquire(&record.workspace, id), Err(cicy::lock::LockError::Busy { .. }));
            json!({
                "id": record.id, "title": record.title, "role": record.role, "master_id": record.master_id,
                "state": if busy { "busy" } else { "idle" }, "busy": busy,
                "wake_at": db.todo_next_due(id)?.map(|t| t.at_local),
                "unanswered": db.obligation_count_unresolved(id)?,
                "served": false,
            })
        }
    };
    let mut row = row;
    if let Value::Object(m) = &mut row {
        m.insert("inbox_pending".into(), json!(pending_inbox));
    }
    if json_out {
        writeln!(out, "{row}")?;
        return Ok(ExitCode::SUCCESS);
    }
    let text = |k: &str| row.get(k).map_or(String::new(), |v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
    writeln!(out, "{}  {}", text("id"), text("title"))?;
    writeln!(out, "state: {}{}", text("state"), if row["served"] == Value::Bool(true) { " (serve)" } else { " (no serve running)" })?;
    let wake = row.get("wake_at").and_then(Value::as_str).unwrap_or("none (no pending todo)");
    writeln!(out, "next wake: {wake}")?;
    writeln!(out, "unanswered: {}", text("unanswered"))?;
    writeln!(out, "inbox: {pending_inbox} pending")?;
    Ok(ExitCode::SUCCESS)
}
