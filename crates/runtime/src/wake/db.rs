//! The wake tables of `$CICY_HOME/cicy.db`: `todo` and `obligation` (docs/design.md §10).
//!
//! Owns the connection the wake code reads and writes them through, and its errors. The schema
//! itself is a migration of `crate::registry` (one file, one `user_version`). The rows' meaning
//! is in `todo.rs` and `obligation.rs`. Must not touch: `agent_config` rows, files.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use crate::home::Home;
use crate::registry::{Registry, RegistryError};

/// An open connection to `cicy.db` for the wake tables.
pub struct WakeDb {
    pub(crate) conn: Connection,
    path: PathBuf,
}

/// Errors of the wake tables; the SQL ones name `cicy.db`'s path.
#[derive(Debug, thiserror::Error)]
pub enum WakeDbError {
    /// Opening or migrating the file failed (a truncated or foreign file, a newer schema, a
    /// read-only home).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("{path}: {source}")]
    Sql { path: PathBuf, source: rusqlite::Error },
    /// A row no version of cicy writes (an unknown status, `message_ids` that is not a JSON
    /// array of strings): the file was edited by hand or damaged.
    #[error("{path}: {table} row {key}: {detail}")]
    BadRow { path: PathBuf, table: &'static str, key: String, detail: String },
    #[error("agent {agent} has no todo #{id} (see `cicy-agent todo {agent} ls`)")]
    NoSuchTodo { agent: String, id: u32 },
    #[error("a todo needs a text")]
    BlankText,
    #[error("{path}: no obligation {id}")]
    NoSuchObligation { path: PathBuf, id: i64 },
}

impl WakeDb {
    /// Opens cicy.db through [`Registry::open`] (so migrations run), in WAL mode with
    /// `synchronous=FULL` (docs/design.md §10 "Obligations": a committed obligation survives a power
    /// loss) and the registry's busy timeout.
    ///
    /// Errors: [`WakeDbError::Registry`] (including a file that is not a database, naming it),
    /// [`WakeDbError::Sql`].
    pub fn open(home: &Home) -> Result<Self, WakeDbError> {
        Self::from_registry(Registry::open(&home.db_path())?)
    }

    /// Takes over an open registry's connection (a caller that first checked the agent).
    ///
    /// Errors: [`WakeDbError::Registry`] (setting `synchronous=FULL`).
    pub fn from_registry(reg: Registry) -> Result<Self, WakeDbError> {
        let (conn, path) = reg.into_durable()?;
        Ok(Self { conn, path })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn sql_err(&self, source: rusqlite::Error) -> WakeDbError {
        WakeDbError::Sql { path: self.path.clone(), source }
    }

    pub(crate) fn bad_row(&self, table: &'static str, key: String, detail: String) -> WakeDbError {
        WakeDbError::BadRow { path: self.path.clone(), table, key, detail }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_migrates_and_sets_full_sync() {
        let dir = tempfile::tempdir().unwrap();
        let db = WakeDb::open(&Home::at(dir.path())).unwrap();
        let sync: i64 = db.conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        let mode: String = db.conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        let tables: Vec<String> = db
            .conn
            .prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'index') AND name NOT LIKE 'sqlite_%' ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!((sync, mode.as_str()), (2, "wal"));
        assert_eq!(
            tables,
            [
                "agent_config",
                "agent_real_path",
                "conversation",
                "conversation_name",
                "cron_job",
                "delivery",
                "delivery_state",
                "lease",
                "member",
                "member_principal",
                "message",
                "message_thread",
                "msg_call",
                "msg_call_from",
                "msg_call_to",
                "obligation",
                "obligation_open",
                "task",
                "task_assignee",
                "todo",
                "todo_due"
            ]
        );
        assert_eq!(db.path(), dir.path().join("cicy.db"));
    }

    #[test]
    fn a_database_of_schema_version_1_gains_the_wake_tables_and_keeps_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        let db = WakeDb::open(&home).unwrap();
        db.conn
            .execute_batch(
                "DROP TABLE lease; DROP TABLE msg_call; DROP TABLE delivery; DROP TABLE task; DROP TABLE cron_job; DROP TABLE member; DROP TABLE message;
                 DROP TABLE conversation; DROP TABLE todo; DROP TABLE obligation;
                 DROP INDEX agent_real_path; ALTER TABLE agent_config DROP COLUMN real_path; PRAGMA user_version = 1;
                 INSERT INTO agent_config (id, n, title, workspace, role_template, created_at, updated_at)
                 VALUES ('w-1', 1, 'Ada', '/w', 'assistant', 't', 't');",
            )
            .unwrap();
        drop(db);
        let mut db = WakeDb::open(&home).unwrap();
        let at = crate::wake::at::At { local: "2026-12-01T09:00".into(), unix: 1 };
        assert_eq!(db.todo_add("w-1", "x", &at).unwrap().id, 1);
        let version: i64 = db.conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        let title: String = db.conn.query_row("SELECT title FROM agent_config", [], |r| r.get(0)).unwrap();
        assert_eq!((version, title.as_str()), (crate::registry::MIGRATIONS.len() as i64, "Ada"));
    }

    #[test]
    fn a_truncated_database_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        let db = WakeDb::open(&home).unwrap();
        db.conn.execute_batch("CREATE TABLE filler (x); INSERT INTO filler VALUES (randomblob(20000));").unwrap();
        drop(db);
        let bytes = std::fs::read(home.db_path()).unwrap();
        std::fs::write(home.db_path(), &bytes[..100]).unwrap();
        let e = WakeDb::open(&home).err().unwrap().to_string();
        assert_eq!(e, format!("registry {}: database disk image is malformed", home.db_path().display()));
    }
}
