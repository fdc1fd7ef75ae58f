//! Todos (docs/design.md §10 "Todos", cryo `todo.json` in reference A5): add with dedupe, list,
//! done, remove, the scheduler's claim and finish with `(attempt k)` retries, and the wake
//! message's todo section.
//!
//! Owns the `todo` rows and their text forms. Must not touch: when a wake happens (the
//! scheduler), the obligation rows, files.

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::at::{at_of_unix, At};
use super::db::{WakeDb, WakeDbError};

/// Cap of the wake message's todo section in bytes; over it the section is dropped (cryo
/// `PROMPT_SECTION_CAP_BYTES`).
pub const PROMPT_SECTION_CAP_BYTES: usize = 2048;

/// How many done todos the wake message shows, the newest (cryo `display_for_prompt`).
const PROMPT_DONE_SHOWN: usize = 3;

/// Cap of a retry's delay in minutes (cryo: 2^k minutes, at most one day).
const RETRY_CAP_MINUTES: i64 = 1440;

/// A todo's state. `claimed`: taken by a running wake, which ends it with
/// [`WakeDb::todo_finish`]; `removed` rows are kept so ids are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TodoStatus {
    Pending,
    Claimed,
    Done,
    Removed,
}

impl TodoStatus {
    /// The `status` column's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Claimed => "claimed",
            Self::Done => "done",
            Self::Removed => "removed",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(Self::Pending),
            "claimed" => Some(Self::Claimed),
            "done" => Some(Self::Done),
            "removed" => Some(Self::Removed),
            _ => None,
        }
    }
}

/// One todo of one agent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Todo {
    /// Per agent, from 1; never reused.
    pub id: u32,
    pub text: String,
    /// Local `YYYY-MM-DDTHH:MM`.
    pub at_local: String,
    /// Unix seconds the todo is due at.
    pub at_unix: i64,
    pub status: TodoStatus,
    /// 0 for a todo added by hand; k for the retry `<text> (attempt k)`.
    pub attempt: u32,
    /// RFC 3339 UTC.
    pub created: String,
    /// RFC 3339 UTC, when it became done.
    pub done_at: Option<String>,
}

/// What [`WakeDb::todo_add`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Added {
    pub id: u32,
    /// A pending todo with the same text and `at_local` existed; nothing was added (cryo dedupe).
    pub existed: bool,
}

const COLUMNS: &str = "id, text, at_local, at_unix, status, attempt, created, done_at";

/// A row as read, status still text (checked by [`WakeDb::todo_of`]).
type RawTodo = (Todo, String);

fn read_raw(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawTodo> {
    let todo = Todo {
        id: r.get(0)?,
        text: r.get(1)?,
        at_local: r.get(2)?,
        at_unix: r.get(3)?,
        status: TodoStatus::Pending,
        attempt: r.get(5)?,
        created: r.get(6)?,
        done_at: r.get(7)?,
    };
    Ok((todo, r.get(4)?))
}

impl WakeDb {
    /// Adds a pending todo for `agent` (text trimmed, line breaks made spaces) due at `at`: id = max + 1 over all of the
    /// agent's todos; a pending todo with the same text and `at_local` is returned instead
    /// (`existed`). The agent is not checked here.
    ///
    /// Errors: [`WakeDbError::BlankText`], [`WakeDbError::Sql`].
    pub fn todo_add(&mut self, agent: &str, text: &str, at: &At) -> Result<Added, WakeDbError> {
        // One line each: `todo ls` and the wake message number todos by line.
        let one_line = text.replace(['\r', '\n'], " ");
        let text = one_line.trim();
        if text.is_empty() {
            return Err(WakeDbError::BlankText);
        }
        let path = self.path().to_path_buf();
        let sql = |source| WakeDbError::Sql { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        let added = insert_deduped(&tx, agent, text, at, 0).map_err(sql)?;
        tx.commit().map_err(sql)?;
        Ok(added)
    }

    /// The agent's todos by id: pending and claimed, with `all` also done (never removed).
    pub fn todo_list(&self, agent: &str, all: bool) -> Result<Vec<Todo>, WakeDbError> {
        let statuses = if all { "('pending', 'claimed', 'done')" } else { "('pending', 'claimed')" };
        self.todos(&format!("WHERE agent_id = ?1 AND status IN {statuses} ORDER BY id"), params![agent])
    }

    /// Marks a pending or claimed todo done and returns it.
    ///
    /// Errors: [`WakeDbError::NoSuchTodo`] when it does not exist or is done or removed.
    pub fn todo_done(&mut self, agent: &str, id: u32) -> Result<Todo, WakeDbError> {
        self.todo_set(agent, id, TodoStatus::Done, "('pending', 'claimed')")
    }

    /// Marks a pending, claimed or done todo removed (kept, never listed) and returns it.
    ///
    /// Errors: [`WakeDbError::NoSuchTodo`] when it does not exist or is already removed.
    pub fn todo_remove(&mut self, agent: &str, id: u32) -> Result<Todo, WakeDbError> {
        self.todo_set(agent, id, TodoStatus::Removed, "('pending', 'claimed', 'done')")
    }

    fn todo_set(&mut self, agent: &str, id: u32, to: TodoStatus, from: &str) -> Result<Todo, WakeDbError> {
        let done_at = match to {
            TodoStatus::Done => Some(crate::fsutil::now_rfc3339()),
            TodoStatus::Pending | TodoStatus::Claimed | TodoStatus::Removed => None,
        };
        let changed = self
            .conn
            .execute(
                &format!(
                    "UPDATE todo SET status = ?3, done_at = COALESCE(?4, done_at) WHERE agent_id = ?1 AND id = ?2 AND status IN {from}"
                ),
                params![agent, id, to.as_str(), done_at],
            )
            .map_err(|e| self.sql_err(e))?;
        if changed == 0 {
            return Err(WakeDbError::NoSuchTodo { agent: agent.to_string(), id });
        }
        self.todos("WHERE agent_id = ?1 AND id = ?2", params![agent, id])?
            .pop()
            .ok_or_else(|| WakeDbError::NoSuchTodo { agent: agent.to_string(), id })
    }

    /// Claims the agent's pending todos due at `now_unix` or before, in one `BEGIN IMMEDIATE`
    /// transaction (another connection sees all of them claimed or none), and returns them by
    /// (`at_unix`, id).
    pub fn todo_claim_due(&mut self, agent: &str, now_unix: i64) -> Result<Vec<Todo>, WakeDbError> {
        let path = self.path().to_path_buf();
        let sql = |source| WakeDbError::Sql { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        let raw: Vec<RawTodo> = {
            let mut stmt = tx
                .prepare(&format!(
                    "UPDATE todo SET status = 'claimed' WHERE agent_id = ?1 AND status = 'pending' AND at_unix <= ?2 RETURNING {COLUMNS}"
                ))
                .map_err(sql)?;
            let rows = stmt.query_map(params![agent, now_unix], read_raw).map_err(sql)?;
            rows.collect::<rusqlite::Result<_>>().map_err(sql)?
        };
        tx.commit().map_err(sql)?;
        let mut claimed = raw.into_iter().map(|r| self.todo_of(agent, r)).collect::<Result<Vec<_>, _>>()?;
        claimed.sort_by_key(|t| (t.at_unix, t.id));
        Ok(claimed)
    }

    /// The agent's claimed todos by id (a wake in progress, or one a crash interrupted).
    pub fn todo_claimed(&self, agent: &str) -> Result<Vec<Todo>, WakeDbError> {
        self.todos("WHERE agent_id = ?1 AND status = 'claimed' ORDER BY id", params![agent])
    }

    /// Puts a wake's claimed todos `ids` back to pending, unchanged: the wake could not run
    /// (ids no longer claimed are skipped). One transaction.
    pub fn todo_release(&mut self, agent: &str, ids: &[u32]) -> Result<(), WakeDbError> {
        let path = self.path().to_path_buf();
        let sql = |source| WakeDbError::Sql { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        for &id in ids {
            tx.execute("UPDATE todo SET status = 'pending' WHERE agent_id = ?1 AND id = ?2 AND status = 'claimed'", params![agent, id])
                .map_err(sql)?;
        }
        tx.commit().map_err(sql)
    }

    /// Ends a wake's claimed todos `ids` (ids no longer claimed, e.g. removed meanwhile, are
    /// skipped): `ok` → done; `!ok` → done and, per todo, a retry `<base> (attempt k)` (k = the
    /// previous attempt + 1, parsed from a ` (attempt n)` suffix, else 1) due at
    /// `now_unix + 2^k min`, at most 1440 min, deduped like [`WakeDb::todo_add`] (cryo). One
    /// transaction. Returns the retries added (a deduped one is not returned: it was already
    /// pending).
    pub fn todo_finish(&mut self, agent: &str, ids: &[u32], ok: bool, now_unix: i64) -> Result<Vec<Todo>, WakeDbError> {
        let path = self.path().to_path_buf();
        let sql = |source| WakeDbError::Sql { path: path.clone(), source };
        let done_at = crate::fsutil::now_rfc3339();
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        let mut added = Vec::new();
        for &id in ids {
            let text: Option<String> = tx
                .query_row(
                    "UPDATE todo SET status = 'done', done_at = ?3 WHERE agent_id = ?1 AND id = ?2 AND status = 'claimed' RETURNING text",
                    params![agent, id, done_at],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql)?;
            let Some(text) = text else { continue };
            if ok {
                continue;
            }
            let (base, previous) = split_attempt(&text);
            let k = previous.saturating_add(1);
            let minutes = if k >= 11 { RETRY_CAP_MINUTES } else { (1i64 << k).min(RETRY_CAP_MINUTES) };
            let at = at_of_unix(now_unix.saturating_add(60 * minutes));
            let retry = insert_deduped(&tx, agent, &format!("{base} (attempt {k})"), &at, k).map_err(sql)?;
            if !retry.existed {
                added.push(retry.id);
            }
        }
        tx.commit().map_err(sql)?;
        let mut out = Vec::with_capacity(added.len());
        for id in added {
            out.extend(self.todos("WHERE agent_id = ?1 AND id = ?2", params![agent, id])?);
        }
        Ok(out)
    }

    /// The agent's earliest pending todo (by `at_unix`, then id).
    pub fn todo_next_due(&self, agent: &str) -> Result<Option<Todo>, WakeDbError> {
        Ok(self.todos("WHERE agent_id = ?1 AND status = 'pending' ORDER BY at_unix, id LIMIT 1", params![agent])?.pop())
    }

    /// `(MIN(at_unix), agent_id)` of the pending todos of every agent that has one, in one
    /// query (the scheduler's start), ordered by time then agent.
    pub fn todo_next_due_all(&self) -> Result<Vec<(i64, String)>, WakeDbError> {
        let mut stmt = self
            .conn
            .prepare("SELECT MIN(at_unix) AS due, agent_id FROM todo WHERE status = 'pending' GROUP BY agent_id ORDER BY due, agent_id")
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).map_err(|e| self.sql_err(e))?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| self.sql_err(e))
    }

    /// The agents with a claimed todo: at serve's start, the wakes a kill interrupted.
    pub fn todo_claimed_agents(&self) -> Result<Vec<String>, WakeDbError> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT agent_id FROM todo WHERE status = 'claimed' ORDER BY agent_id")
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt.query_map([], |r| r.get(0)).map_err(|e| self.sql_err(e))?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| self.sql_err(e))
    }

    fn todos(&self, clause: &str, params: impl rusqlite::Params) -> Result<Vec<Todo>, WakeDbError> {
        let mut stmt = self.conn.prepare(&format!("SELECT {COLUMNS}, agent_id FROM todo {clause}")).map_err(|e| self.sql_err(e))?;
        let rows = stmt.query_map(params, |r| Ok((read_raw(r)?, r.get::<_, String>(8)?))).map_err(|e| self.sql_err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (raw, agent) = row.map_err(|e| self.sql_err(e))?;
            out.push(self.todo_of(&agent, raw)?);
        }
        Ok(out)
    }

    fn todo_of(&self, agent: &str, (mut todo, status): RawTodo) -> Result<Todo, WakeDbError> {
        todo.status = TodoStatus::parse(&status)
            .ok_or_else(|| self.bad_row("todo", format!("({agent}, {})", todo.id), format!("unknown status `{status}`")))?;
        Ok(todo)
    }
}

/// Inserts a pending todo unless a pending one with the same text and `at_local` exists.
fn insert_deduped(tx: &rusqlite::Transaction<'_>, agent: &str, text: &str, at: &At, attempt: u32) -> rusqlite::Result<Added> {
    let existing: Option<u32> = tx
        .query_row(
            "SELECT id FROM todo WHERE agent_id = ?1 AND status = 'pending' AND text = ?2 AND at_local = ?3 ORDER BY id LIMIT 1",
            params![agent, text, at.local],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(id) = existing {
        return Ok(Added { id, existed: true });
    }
    let id: u32 = tx.query_row("SELECT COALESCE(MAX(id), 0) + 1 FROM todo WHERE agent_id = ?1", [agent], |r| r.get(0))?;
    tx.execute(
        "INSERT INTO todo (agent_id, id, text, at_local, at_unix, status, attempt, created) VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6, ?7)",
        params![agent, id, text, at.local, at.unix, attempt, crate::fsutil::now_rfc3339()],
    )?;
    Ok(Added { id, existed: false })
}

/// `"x (attempt 3)"` → `("x", 3)`; a text without that suffix → `(text, 0)` (cryo).
fn split_attempt(text: &str) -> (&str, u32) {
    text.strip_suffix(')')
        .and_then(|t| t.rsplit_once(" (attempt "))
        .filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|(base, n)| Some((base, n.parse().ok()?)))
        .unwrap_or((text, 0))
}

/// `<id>. [x| |~] <text> (at: <at>)` (cryo's list line; `~` = claimed, `-` = removed, which no
/// listing shows).
pub fn todo_line(t: &Todo) -> String {
    let mark = match t.status {
        TodoStatus::Pending => ' ',
        TodoStatus::Claimed => '~',
        TodoStatus::Done => 'x',
        TodoStatus::Removed => '-',
    };
    format!("{}. [{mark}] {} (at: {})", t.id, t.text, t.at_local)
}

/// The wake message's todo section (cryo `display_for_prompt`), lines joined by `\n` with no
/// final newline: pending and claimed todos, a line `(<n> older done todos not shown)` when more
/// than 3 are done, then the 3 newest done (highest ids), each as [`todo_line`]; removed ones
/// never. `No todos.` when nothing is left to show. `None` when the section would exceed
/// [`PROMPT_SECTION_CAP_BYTES`] (the caller then points the agent at `todo ls`).
pub fn prompt_section(todos_all: &[Todo]) -> Option<String> {
    let mut open: Vec<&Todo> = Vec::new();
    let mut done: Vec<&Todo> = Vec::new();
    for t in todos_all {
        match t.status {
            TodoStatus::Pending | TodoStatus::Claimed => open.push(t),
            TodoStatus::Done => done.push(t),
            TodoStatus::Removed => {}
        }
    }
    open.sort_by_key(|t| t.id);
    done.sort_by_key(|t| t.id);
    let hidden = done.len().saturating_sub(PROMPT_DONE_SHOWN);
    let mut lines: Vec<String> = open.iter().map(|t| todo_line(t)).collect();
    if hidden > 0 {
        lines.push(format!("({hidden} older done todos not shown)"));
    }
    lines.extend(done[hidden..].iter().map(|t| todo_line(t)));
    if lines.is_empty() {
        return Some("No todos.".to_string());
    }
    let text = lines.join("\n");
    (text.len() <= PROMPT_SECTION_CAP_BYTES).then_some(text)
}

#[cfg(test)]
#[path = "todo_tests.rs"]
mod tests;
