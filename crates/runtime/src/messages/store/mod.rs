//! The message store: the migration-3 tables of `cicy.db` (docs/design.md §11 "SQLite").
//!
//! Owns the connection they are read and written through, its errors, and the principal
//! syntax. The rows' meaning is in `conversation.rs` (conversations, members, group
//! resolution, roster), `message.rs` (messages, threads, paging, deliveries) and `task.rs`
//! (board tasks), `cron.rs` (cron jobs). Must not touch: `agent_config` (read for display names only), the wake
//! tables, files.
//!
//! The whole of `cicy.db` is one Choruz "workspace": group names resolve across it.

mod call;
mod conversation;
mod cron;
mod message;
mod task;

use std::path::{Path, PathBuf};

use rusqlite::Connection;

pub use call::{Answered, CallState, MsgCall};
pub use conversation::{ConvKind, Conversation, Member, Visibility, DIRECT_NAME};
pub use cron::{next_run, CronJob, CronKind};
pub use message::{Delivery, DeliveryState, Message, NewMessage, Page, MESSAGE_PAGE_MAX};
pub use task::{Created, NewTask, Task, TaskError, TaskErrorCode, TaskRef, TaskStatus, TaskUpdate};

use crate::home::Home;
use crate::registry::{Registry, RegistryError};

/// An open connection to `cicy.db` for the message tables.
pub struct MessageStore {
    conn: Connection,
    path: PathBuf,
}

/// Errors of the message tables; each names the table, field or value at fault. The texts of
/// [`StoreError::GroupNotFound`], [`StoreError::GroupAmbiguous`] and
/// [`StoreError::ThreadNotFound`] are Choruz's (B7 `send`), exactly.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Opening or migrating the file failed.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("{path}: {source}")]
    Sql { path: PathBuf, source: rusqlite::Error },
    /// A row no version of cicy writes: the file was edited by hand or damaged.
    #[error("{path}: {table} row {key}: {detail}")]
    BadRow { path: PathBuf, table: &'static str, key: String, detail: String },
    #[error("`{value}` is not a principal: give an agent id (w-<n>) or human:<name>")]
    BadPrincipal { value: String },
    #[error("`{value}` cannot be a person's name here: {why}")]
    BadPerson { value: String, why: &'static str },
    #[error("conversation {id} does not exist")]
    NoConversation { id: String },
    #[error("{principal} is not an active member of conversation {conv}")]
    NotMember { conv: String, principal: String },
    #[error("a direct conversation needs two different principals; got {principal} twice")]
    SelfDirect { principal: String },
    #[error("conversation {conv} is direct: its two members are fixed")]
    DirectMembers { conv: String },
    #[error("group name '{name}' {problem}")]
    BadGroupName { name: String, problem: &'static str },
    /// Creating (or joining) would give `principal` two active groups of this name, and every
    /// send of theirs to it would fail as ambiguous.
    #[error("group name '{name}' is already used by group {other}, of which {principal} is a member; choose another name")]
    GroupNameTaken { name: String, other: String, principal: String },
    #[error("group '{group}' was not found in this workspace, or this agent is not a member")]
    GroupNotFound { group: String },
    /// A person named a group that does not exist (an agent gets Choruz's text instead).
    #[error("there is no group '{group}' (see `cicy-agent group create`)")]
    NoGroup { group: String },
    /// A person named a group that exists but does not have them as an active member.
    #[error("{person} is not a member of group '{group}'")]
    NotGroupMember { group: String, person: String },
    #[error("group name '{group}' is ambiguous in this workspace")]
    GroupAmbiguous { group: String },
    /// `group` is the group's name, or for a direct conversation its id.
    #[error("thread target '{thread}' was not found in group '{group}'")]
    ThreadNotFound { thread: String, group: String },
    /// A `set_cron` schedule that is neither a 5-field cron expression nor a period.
    #[error("schedule '{schedule}' {reason}")]
    BadSchedule { schedule: String, reason: String },
    #[error("message {id} does not exist")]
    NoMessage { id: String },
    #[error("message page limit {limit} is out of range: give 1 to {MESSAGE_PAGE_MAX}")]
    BadLimit { limit: u32 },
    #[error("`{cursor}` is not a cursor of a message list (pass back the `before` of a page)")]
    BadCursor { cursor: String },
    #[error("message {message_id} has no delivery to {agent}")]
    NoDelivery { message_id: String, agent: String },
    #[error("delivery of message {message_id} to {agent} is {from}; it cannot become {to}")]
    DeliveryBackwards { message_id: String, agent: String, from: &'static str, to: &'static str },
}

impl MessageStore {
    /// Opens cicy.db through [`Registry::open`] (so migrations run), in WAL mode with the
    /// registry's busy timeout and `synchronous=FULL`, like `crate::wake::db` (a posted message
    /// and its deliveries survive a power loss once `post` returns).
    ///
    /// Errors: [`StoreError::Registry`] (naming the file), [`StoreError::Sql`].
    pub fn open(home: &Home) -> Result<Self, StoreError> {
        Self::from_registry(Registry::open(&home.db_path())?)
    }

    /// Takes over an open registry's connection.
    ///
    /// Errors: [`StoreError::Registry`] (setting `synchronous=FULL`).
    pub fn from_registry(reg: Registry) -> Result<Self, StoreError> {
        let (conn, path) = reg.into_durable()?;
        Ok(Self { conn, path })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql_err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sql { path: self.path.clone(), source }
    }

    fn bad_row(&self, table: &'static str, key: &str, detail: String) -> StoreError {
        StoreError::BadRow { path: self.path.clone(), table, key: key.to_string(), detail }
    }
}

/// Whether `p` is a principal: `w-<n>` (an agent) or `human:<name>` with a non-empty name
/// without control characters (docs/design.md §11 `member.principal`).
pub fn is_principal(p: &str) -> bool {
    if let Some(n) = p.strip_prefix("w-") {
        return !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    }
    p.strip_prefix("human:").is_some_and(|name| !name.is_empty() && !name.chars().any(char::is_control))
}

fn check_principal(p: &str) -> Result<(), StoreError> {
    if is_principal(p) {
        Ok(())
    } else {
        Err(StoreError::BadPrincipal { value: p.to_string() })
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::*;

    /// A store on a fresh `cicy.db` with agents `w-1`… titled `titles`.
    pub(crate) fn store_with(titles: &[&str]) -> (tempfile::TempDir, MessageStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = MessageStore::open(&Home::at(dir.path())).unwrap();
        for (i, t) in titles.iter().enumerate() {
            store
                .conn
                .execute(
                    "INSERT INTO agent_config (id, n, title, workspace, role_template, created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, 'assistant', 't', 't')",
                    rusqlite::params![format!("w-{}", i + 1), i as i64 + 1, t, format!("ws{}", i + 1)],
                )
                .unwrap();
        }
        (dir, store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_are_agent_ids_or_named_humans() {
        for ok in ["w-1", "w-42", "human:ann", "human:Ann Lee"] {
            assert!(is_principal(ok), "{ok}");
        }
        for bad in ["w-", "w-x", "w-1a", "human:", "human:a\nb", "ann", "", "W-1"] {
            assert!(!is_principal(bad), "{bad}");
        }
    }

    #[test]
    fn open_sets_full_sync_on_a_migrated_file() {
        let (_dir, store) = testutil::store_with(&[]);
        let sync: i64 = store.conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        let version: i64 = store.conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!((sync, version), (2, crate::registry::MIGRATIONS.len() as i64));
        assert!(store.path().ends_with("cicy.db"));
    }
}
