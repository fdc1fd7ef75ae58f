//! `cicy-agent todo <id> add|ls|done|rm` and `cicy-agent time [expr]` (docs/design.md §10 "CLI").
//!
//! Changes go through a live serve of the home (`/api/agents/<id>/todos`), so its scheduler
//! sees a new todo at once; without one they run in this process against `cicy.db` (a serve
//! started later loads them). Listing always reads `cicy.db`. The output is the same either
//! way; the handlers write their lines to any `Write`.

use std::io::Write;

use anyhow::Result;
use clap::Subcommand;

use super::remote::{request, Method};
use cicy::home::Home;
use cicy::registry::{Registry, RegistryError};
use cicy::wake::at::{parse_at, time_command};
use cicy::wake::db::WakeDb;
use cicy::wake::todo::todo_line;

#[derive(Debug, Subcommand)]
pub(super) enum Action {
    /// Add a todo due at --at; a pending todo with the same text and time is kept instead.
    Add {
        text: String,
        /// `+N <unit>` (minute|min|hour|hr|day|week, optional s), `YYYY-MM-DDTHH:MM[:SS]`,
        /// `YYYY-MM-DD HH:MM[:SS]` or `YYYY-MM-DD`; local time.
        #[arg(long, allow_hyphen_values = true)]
        at: String,
    },
    /// List pending (`[ ]`) and claimed (`[~]`) todos; with --all also done (`[x]`).
    Ls {
        #[arg(long)]
        all: bool,
    },
    /// Mark todo <n> done.
    Done { n: u32 },
    /// Remove todo <n> (kept in the database, never listed; its id is not reused).
    Rm { n: u32 },
}

/// Runs `todo <id> <action>`, writing its lines to `out`. A bad `--at` is refused before the
/// database is opened, so nothing is written.
///
/// Errors: the time expression, an unknown agent (the registry's error), an unknown todo, SQL.
pub(super) fn run(home: &Home, id: &str, action: &Action, out: &mut impl Write) -> Result<()> {
    match action {
        Action::Add { text, at: expr } => {
            let at = parse_at(expr, chrono::Local::now())?;
            let body = serde_json::json!({"text": text, "at": expr});
            let (n, existed, at_local) = match request(home, Method::Post(body), &["api", "agents", id, "todos"])? {
                Some(v) => (
                    v["todo"]["id"].as_u64().unwrap_or(0),
                    v["existed"].as_bool().unwrap_or(false),
                    v["todo"]["at_local"].as_str().unwrap_or(&at.local).to_string(),
                ),
                None => {
                    let added = open(home, id, Access::Write)?.todo_add(id, text, &at)?;
                    (u64::from(added.id), added.existed, at.local)
                }
            };
            let verb = if existed { format!("Todo #{n} already exists") } else { format!("Added todo #{n}") };
            writeln!(out, "{verb}: {} (at: {at_local})", text.trim())?;
        }
        Action::Ls { all } => {
            let todos = open(home, id, Access::Read)?.todo_list(id, *all)?;
            if todos.is_empty() {
                writeln!(out, "No todos.")?;
            }
            for t in &todos {
                writeln!(out, "{}", todo_line(t))?;
            }
        }
        Action::Done { n } => {
            let text = match request(home, Method::Post(serde_json::json!({})), &["api", "agents", id, "todos", &n.to_string(), "done"])? {
                Some(v) => v["todo"]["text"].as_str().unwrap_or_default().to_string(),
                None => open(home, id, Access::Write)?.todo_done(id, *n)?.text,
            };
            writeln!(out, "Done: #{n} {text}")?;
        }
        Action::Rm { n } => {
            let text = match request(home, Method::Delete, &["api", "agents", id, "todos", &n.to_string()])? {
                Some(v) => v["todo"]["text"].as_str().unwrap_or_default().to_string(),
                None => open(home, id, Access::Write)?.todo_remove(id, *n)?.text,
            };
            writeln!(out, "Removed: #{n} {text}")?;
        }
    }
    Ok(())
}

/// `cicy-agent time [expr]`: one line, now (`YYYY-MM-DDTHH:MM:SS`) or the expression's local
/// minute. The words of `expr` are joined by one space, so `time +30 min` works unquoted.
pub(super) fn time(expr: &[String], out: &mut impl Write) -> Result<()> {
    let joined = (!expr.is_empty()).then(|| expr.join(" "));
    writeln!(out, "{}", time_command(joined.as_deref())?)?;
    Ok(())
}

/// The wake tables, after checking that agent `id` exists. Opened for writing (migrating an
/// older `cicy.db`); a listing falls back to reading only, so it works on a read-only home.
fn open(home: &Home, id: &str, access: Access) -> Result<WakeDb> {
    if !home.db_path().exists() {
        anyhow::bail!("no agents yet in {} (create one with `cicy-agent create <title>`)", home.root().display());
    }
    let reg = match (Registry::open(&home.db_path()), access) {
        (Err(RegistryError::ReadOnly { .. }), Access::Read) => Registry::open_read_only(&home.db_path())?,
        (opened, Access::Read | Access::Write) => opened?,
    };
    reg.get(id)?;
    Ok(WakeDb::from_registry(reg)?)
}

#[derive(Debug, Clone, Copy)]
enum Access {
    Read,
    Write,
}
