//! Board tasks of a conversation (docs/design.md §11 `task`; Choruz B7 task commands, B8 result
//! codes): create with an idempotency key, update, transfer, list, and an agent's open tasks
//! for the envelope's `your_tasks`.
//!
//! Owns the `task` rows and the error codes of task results. Must not touch: the result files
//! (the outbox consumer writes them from [`TaskError::code`] and the message), messages.

use std::path::Path;

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::{MessageStore, StoreError};
use crate::messages::envelope::TaskSummary;

/// `task.status` (docs/design.md §11 **[chosen]** names; Choruz leaves them open, B11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Todo,
    InProgress,
    Blocked,
    Done,
}

impl TaskStatus {
    /// The column's (and the command field's) text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Todo => "todo",
            Self::InProgress => "in_progress",
            Self::Blocked => "blocked",
            Self::Done => "done",
        }
    }

    /// Reads a command's `status` field.
    ///
    /// Errors: [`TaskErrorCode::ValidationFailed`] naming the value.
    pub fn parse(s: &str) -> Result<Self, TaskError> {
        match s {
            "todo" => Ok(Self::Todo),
            "in_progress" => Ok(Self::InProgress),
            "blocked" => Ok(Self::Blocked),
            "done" => Ok(Self::Done),
            _ => {
                Err(TaskError::new(TaskErrorCode::ValidationFailed, format!("status '{s}' is not one of todo, in_progress, blocked, done")))
            }
        }
    }
}

/// The `error_code` of a failed task result (Choruz B8), for the codes cicy can produce; the
/// gateway-only ones (`unauthorized`, `gateway_error`, `gateway_unavailable`,
/// `agent_token_unavailable`, `channel_tasks_disabled`) have no cause here. The store returns
/// all but `missing_target` and `unsupported_command`, which the command reader gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskErrorCode {
    /// Neither `group` nor `conversation_id`.
    MissingTarget,
    /// The group did not resolve (not found, not a member, ambiguous).
    GroupNotFound,
    /// `conversation_id` names no conversation.
    NotFound,
    /// The requester is not an active member of the conversation.
    Forbidden,
    MissingTitle,
    /// A bad field: status, a blank idempotency key, a task key already used, nothing to update.
    ValidationFailed,
    /// The assignee matches no visible agent of the conversation, or several.
    InvalidAssignee,
    /// `task_transfer` without an assignee.
    MissingAssignee,
    /// Neither `task_id` nor `task_key`.
    MissingTask,
    TaskNotFound,
    /// The idempotency key was used with another title.
    IdempotencyConflict,
    /// `cicy.db` failed.
    EventStoreUnavailable,
    UnsupportedCommand,
}

impl TaskErrorCode {
    /// The text in the result envelope.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MissingTarget => "missing_target",
            Self::GroupNotFound => "group_not_found",
            Self::NotFound => "not_found",
            Self::Forbidden => "forbidden",
            Self::MissingTitle => "missing_title",
            Self::ValidationFailed => "validation_failed",
            Self::InvalidAssignee => "invalid_assignee",
            Self::MissingAssignee => "missing_assignee",
            Self::MissingTask => "missing_task",
            Self::TaskNotFound => "task_not_found",
            Self::IdempotencyConflict => "idempotency_conflict",
            Self::EventStoreUnavailable => "event_store_unavailable",
            Self::UnsupportedCommand => "unsupported_command",
        }
    }
}

/// A refused task command: the result's `error_code` and `message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct TaskError {
    pub code: TaskErrorCode,
    pub message: String,
}

impl TaskError {
    /// A refusal with `code` and its explanation.
    pub fn new(code: TaskErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

impl From<StoreError> for TaskError {
    fn from(e: StoreError) -> Self {
        let code = match &e {
            StoreError::GroupNotFound { .. } | StoreError::NoGroup { .. } | StoreError::GroupAmbiguous { .. } => {
                TaskErrorCode::GroupNotFound
            }
            StoreError::NoConversation { .. } => TaskErrorCode::NotFound,
            StoreError::NotMember { .. } | StoreError::NotGroupMember { .. } => TaskErrorCode::Forbidden,
            _ => TaskErrorCode::EventStoreUnavailable,
        };
        Self::new(code, e.to_string())
    }
}

/// One task.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Task {
    /// A UUIDv4 string.
    pub id: String,
    pub conv_id: String,
    /// Unique in the conversation; given, or `T-<n>`.
    pub task_key: String,
    pub title: String,
    pub status: TaskStatus,
    /// An agent id.
    pub assignee: Option<String>,
    pub created_by: String,
    pub idempotency_key: String,
    pub blocked_reason: Option<String>,
    pub context_label: Option<String>,
    /// RFC 3339 UTC.
    pub created_at: String,
    pub updated_at: String,
}

/// `task_create` (Choruz B7) after the target is resolved to a conversation.
#[derive(Debug, Clone, Default)]
pub struct NewTask<'a> {
    pub conv_id: &'a str,
    /// The agent sending the command; an active member.
    pub requester: &'a str,
    pub title: &'a str,
    pub idempotency_key: &'a str,
    pub task_key: Option<&'a str>,
    /// `None`: `todo`.
    pub status: Option<TaskStatus>,
    pub context_label: Option<&'a str>,
    /// A roster name (a leading `@` is ignored, case-insensitive) or an agent id.
    pub assignee: Option<&'a str>,
}

/// What [`MessageStore::task_create`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub task: Task,
    /// The key was used before with the same title: these are that task's ids, nothing changed.
    pub existed: bool,
}

/// Which task a `task_update`/`task_transfer` means: by id, by key, or both (then both must
/// match the same task).
#[derive(Debug, Clone, Copy, Default)]
pub struct TaskRef<'a> {
    pub task_id: Option<&'a str>,
    pub task_key: Option<&'a str>,
}

/// `task_update` (Choruz B7): the fields to change; `task_transfer` adds the assignee.
#[derive(Debug, Clone, Copy, Default)]
pub struct TaskUpdate<'a> {
    pub conv_id: &'a str,
    pub requester: &'a str,
    pub task: TaskRef<'a>,
    pub status: Option<TaskStatus>,
    pub blocked_reason: Option<&'a str>,
    pub context_label: Option<&'a str>,
}

const COLUMNS: &str = "id, conv_id, task_key, title, status, assignee, created_by, idempotency_key, blocked_reason,
    context_label, created_at, updated_at";

type RawTask = (Task, String);

fn read_raw(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawTask> {
    let t = Task {
        id: r.get(0)?,
        conv_id: r.get(1)?,
        task_key: r.get(2)?,
        title: r.get(3)?,
        status: TaskStatus::Todo,
        assignee: r.get(5)?,
        created_by: r.get(6)?,
        idempotency_key: r.get(7)?,
        blocked_reason: r.get(8)?,
        context_label: r.get(9)?,
        created_at: r.get(10)?,
        updated_at: r.get(11)?,
    };
    Ok((t, r.get(4)?))
}

/// A blank optional text is an absent one (a command with `"task_key": ""`).
fn given(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

impl MessageStore {
    /// Creates a task in one `BEGIN IMMEDIATE` transaction. The same idempotency key with the
    /// same (trimmed) title returns the existing task (`existed`); with another title it is
    /// refused (docs/design.md §11 "Results"). Without a task key the task gets `T-<n>`, the first
    /// free n from the conversation's task count + 1 **[chosen]**.
    ///
    /// Errors ([`TaskError::code`]): `not_found`, `forbidden`, `missing_title`,
    /// `validation_failed` (blank idempotency key, task key already used), `invalid_assignee`,
    /// `idempotency_conflict`, `event_store_unavailable`.
    pub fn task_create(&mut self, t: &NewTask<'_>) -> Result<Created, TaskError> {
        let title = t.title.trim();
        if title.is_empty() {
            return Err(TaskError::new(TaskErrorCode::MissingTitle, "task_create needs a title"));
        }
        let key = t.idempotency_key.trim();
        if key.is_empty() {
            return Err(TaskError::new(TaskErrorCode::ValidationFailed, "task_create needs an idempotency_key"));
        }
        self.check_requester(t.conv_id, t.requester)?;
        let assignee = match given(t.assignee) {
            Some(a) => Some(self.resolve_assignee(t.conv_id, a)?),
            None => None,
        };
        let path = self.path.clone();
        let db = |source| TaskError::from(StoreError::Sql { path: path.clone(), source });
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db)?;
        let earlier: Option<RawTask> = tx
            .query_row(&format!("SELECT {COLUMNS} FROM task WHERE conv_id = ?1 AND idempotency_key = ?2"), [t.conv_id, key], read_raw)
            .optional()
            .map_err(db)?;
        if let Some(raw) = earlier {
            let task = task_of(&path, raw)?;
            if task.title != title {
                return Err(TaskError::new(
                    TaskErrorCode::IdempotencyConflict,
                    format!("idempotency_key '{key}' was used for task {} titled '{}'", task.task_key, task.title),
                ));
            }
            return Ok(Created { task, existed: true });
        }
        let taken = |k: &str| {
            tx.query_row("SELECT 1 FROM task WHERE conv_id = ?1 AND task_key = ?2", [t.conv_id, k], |_| Ok(()))
                .optional()
                .map(|o| o.is_some())
        };
        let task_key = match given(t.task_key) {
            Some(k) if taken(k).map_err(db)? => {
                return Err(TaskError::new(
                    TaskErrorCode::ValidationFailed,
                    format!("task_key '{k}' is already used in conversation {}", t.conv_id),
                ))
            }
            Some(k) => k.to_string(),
            None => {
                let mut n: i64 = tx.query_row("SELECT COUNT(*) + 1 FROM task WHERE conv_id = ?1", [t.conv_id], |r| r.get(0)).map_err(db)?;
                while taken(&format!("T-{n}")).map_err(db)? {
                    n += 1;
                }
                format!("T-{n}")
            }
        };
        let now = crate::fsutil::now_rfc3339();
        let id = uuid::Uuid::new_v4().to_string();
        tx.execute(
            &format!("INSERT INTO task ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, NULL, ?9, ?10, ?10)"),
            params![
                id,
                t.conv_id,
                task_key,
                title,
                t.status.unwrap_or(TaskStatus::Todo).as_str(),
                assignee,
                t.requester,
                key,
                given(t.context_label),
                now
            ],
        )
        .map_err(db)?;
        tx.commit().map_err(db)?;
        Ok(Created { task: self.task_by_id(&id)?, existed: false })
    }

    /// Changes a task's status, blocked reason and context label (Choruz B7 `task_update`).
    /// A status other than `blocked` without a blocked reason clears the old reason
    /// **[chosen]**: it explained a block that is over.
    ///
    /// Errors ([`TaskError::code`]): `not_found`, `forbidden`, `missing_task`, `task_not_found`,
    /// `validation_failed` (nothing to change), `event_store_unavailable`.
    pub fn task_update(&mut self, u: &TaskUpdate<'_>) -> Result<Task, TaskError> {
        if u.status.is_none() && given(u.blocked_reason).is_none() && given(u.context_label).is_none() {
            return Err(TaskError::new(TaskErrorCode::ValidationFailed, "task_update needs status, blocked_reason or context_label"));
        }
        self.check_requester(u.conv_id, u.requester)?;
        self.change(u, None)
    }

    /// [`MessageStore::task_update`] that also (and possibly only) sets the assignee (Choruz B7
    /// `task_transfer`), resolved like `task_create`'s.
    ///
    /// Errors ([`TaskError::code`]): `missing_assignee`, `invalid_assignee` and those of
    /// `task_update` but `validation_failed`.
    pub fn task_transfer(&mut self, u: &TaskUpdate<'_>, assignee: Option<&str>) -> Result<Task, TaskError> {
        let Some(a) = given(assignee) else {
            return Err(TaskError::new(TaskErrorCode::MissingAssignee, "task_transfer needs an assignee"));
        };
        self.check_requester(u.conv_id, u.requester)?;
        let id = self.resolve_assignee(u.conv_id, a)?;
        self.change(u, Some(&id))
    }

    /// The tasks of `conv` in creation order.
    ///
    /// Errors: [`StoreError::BadRow`], [`StoreError::Sql`].
    pub fn tasks(&self, conv: &str) -> Result<Vec<Task>, StoreError> {
        self.query_tasks(&format!("SELECT {COLUMNS} FROM task WHERE conv_id = ?1 ORDER BY rowid"), [conv])
    }

    /// `agent`'s tasks in `conv` that are not done, in creation order, as the envelope's
    /// `your_tasks` lists them (it shows the first 20).
    ///
    /// Errors: [`StoreError::BadRow`], [`StoreError::Sql`].
    pub fn open_tasks_of(&self, agent: &str, conv: &str) -> Result<Vec<TaskSummary>, StoreError> {
        let tasks = self.query_tasks(
            &format!("SELECT {COLUMNS} FROM task WHERE conv_id = ?1 AND assignee = ?2 AND status <> 'done' ORDER BY rowid"),
            [conv, agent],
        )?;
        Ok(tasks.into_iter().map(|t| TaskSummary { task_key: t.task_key, title: t.title, status: t.status }).collect())
    }

    /// The update itself, after the requester was checked.
    fn change(&mut self, u: &TaskUpdate<'_>, assignee: Option<&str>) -> Result<Task, TaskError> {
        let task = self.find_task(u.conv_id, u.task)?;
        // One statement, so a concurrent update cannot slip between reading the row and
        // writing it back: absent fields keep the row's current values.
        self.conn
            .execute(
                "UPDATE task SET
                    status = COALESCE(?2, status),
                    blocked_reason = CASE WHEN ?3 IS NOT NULL THEN ?3
                                          WHEN ?2 IS NOT NULL AND ?2 <> 'blocked' THEN NULL
                                          ELSE blocked_reason END,
                    context_label = COALESCE(?4, context_label),
                    assignee = COALESCE(?5, assignee),
                    updated_at = ?6
                 WHERE id = ?1",
                params![
                    task.id,
                    u.status.map(TaskStatus::as_str),
                    given(u.blocked_reason),
                    given(u.context_label),
                    assignee,
                    crate::fsutil::now_rfc3339()
                ],
            )
            .map_err(|e| TaskError::from(self.sql_err(e)))?;
        Ok(self.task_by_id(&task.id)?)
    }

    fn check_requester(&self, conv: &str, requester: &str) -> Result<(), TaskError> {
        self.conversation(conv)?;
        if !self.is_active_member(conv, requester)? {
            return Err(StoreError::NotMember { conv: conv.to_string(), principal: requester.to_string() }.into());
        }
        Ok(())
    }

    /// The agent id `a` means in `conv`'s roster (Choruz B7: a leading `@` stripped, names
    /// matched case-insensitively, ids exactly; exactly one entry must match).
    fn resolve_assignee(&self, conv: &str, a: &str) -> Result<String, TaskError> {
        let wanted = a.strip_prefix('@').unwrap_or(a);
        let lower = wanted.to_lowercase();
        let roster = self.roster(conv)?;
        let hits: Vec<&str> = roster.iter().filter(|r| r.id == wanted || r.name.to_lowercase() == lower).map(|r| r.id.as_str()).collect();
        match hits.as_slice() {
            [id] => Ok(id.to_string()),
            [] => {
                Err(TaskError::new(TaskErrorCode::InvalidAssignee, format!("assignee '{a}' is not a visible agent of conversation {conv}")))
            }
            many => Err(TaskError::new(
                TaskErrorCode::InvalidAssignee,
                format!("assignee '{a}' matches {} agents of conversation {conv} ({}); give an id", many.len(), many.join(", ")),
            )),
        }
    }

    fn find_task(&self, conv: &str, r: TaskRef<'_>) -> Result<Task, TaskError> {
        let (id, key) = (given(r.task_id), given(r.task_key));
        if id.is_none() && key.is_none() {
            return Err(TaskError::new(TaskErrorCode::MissingTask, "give task_id or task_key"));
        }
        let found = self.query_tasks(
            &format!("SELECT {COLUMNS} FROM task WHERE conv_id = ?1 AND (?2 IS NULL OR id = ?2) AND (?3 IS NULL OR task_key = ?3)"),
            params![conv, id, key],
        )?;
        found.into_iter().next().ok_or_else(|| {
            let which = [id.map(|i| format!("task_id '{i}'")), key.map(|k| format!("task_key '{k}'"))];
            TaskError::new(
                TaskErrorCode::TaskNotFound,
                format!("no task with {} in conversation {conv}", which.into_iter().flatten().collect::<Vec<_>>().join(" and ")),
            )
        })
    }

    fn task_by_id(&self, id: &str) -> Result<Task, StoreError> {
        let mut found = self.query_tasks(&format!("SELECT {COLUMNS} FROM task WHERE id = ?1"), [id])?;
        found.pop().ok_or_else(|| self.bad_row("task", id, "vanished after it was written".to_string()))
    }

    fn query_tasks(&self, sql: &str, args: impl rusqlite::Params) -> Result<Vec<Task>, StoreError> {
        let mut stmt = self.conn.prepare(sql).map_err(|e| self.sql_err(e))?;
        let raws: Vec<RawTask> = stmt.query_map(args, read_raw).and_then(|rows| rows.collect()).map_err(|e| self.sql_err(e))?;
        raws.into_iter().map(|raw| task_of(&self.path, raw)).collect()
    }
}

/// A row's task, its status checked (a free function: `task_create` reads rows inside its
/// transaction, which holds the connection).
fn task_of(path: &Path, (mut t, status): RawTask) -> Result<Task, StoreError> {
    t.status = TaskStatus::parse(&status).map_err(|_| StoreError::BadRow {
        path: path.to_path_buf(),
        table: "task",
        key: t.id.clone(),
        detail: format!("status `{status}`"),
    })?;
    Ok(t)
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
