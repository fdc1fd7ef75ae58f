//! The lease row of docs/design.md §13 *(idle: the `running` lease with pid and priority)*: table
//! `lease` of `$CICY_HOME/cicy.db`, `(agent_id, job, pid, pgid, priority, started_at)`, one
//! row per agent while its autonomy runs a job.
//!
//! serve's actor takes the lease when it starts an intent or routine and releases it when the
//! job ends; at serve's start the rows a killed serve left are cleared. Another process (`intents
//! <id> status`) reads it to say what runs now. Must not touch the ledger or processes.

use rusqlite::{params, OptionalExtension};
use serde::Serialize;

use crate::wake::db::{WakeDb, WakeDbError};

/// One lease row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lease {
    pub agent_id: String,
    /// `intent:<id>`, `selfcheck`, `recall` or `web`.
    pub job: String,
    /// The command's process (its group's leader); `None` for a model turn.
    pub pid: Option<i64>,
    pub pgid: Option<i64>,
    pub priority: u8,
    /// RFC 3339 UTC.
    pub started_at: String,
}

impl WakeDb {
    /// Takes (or replaces) `lease.agent_id`'s lease.
    ///
    /// Errors: [`WakeDbError::Sql`].
    pub fn lease_take(&self, lease: &Lease) -> Result<(), WakeDbError> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO lease (agent_id, job, pid, pgid, priority, started_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![lease.agent_id, lease.job, lease.pid, lease.pgid, lease.priority, lease.started_at],
            )
            .map(|_| ())
            .map_err(|e| self.sql_err(e))
    }

    /// Releases `agent_id`'s lease (nothing when it holds none).
    ///
    /// Errors: [`WakeDbError::Sql`].
    pub fn lease_release(&self, agent_id: &str) -> Result<(), WakeDbError> {
        self.conn.execute("DELETE FROM lease WHERE agent_id = ?1", [agent_id]).map(|_| ()).map_err(|e| self.sql_err(e))
    }

    /// Clears every lease: at serve's start (it owns the home) a row is what a killed serve
    /// left. Returns how many there were.
    ///
    /// Errors: [`WakeDbError::Sql`].
    pub fn lease_clear_all(&self) -> Result<usize, WakeDbError> {
        self.conn.execute("DELETE FROM lease", []).map_err(|e| self.sql_err(e))
    }

    /// The agents holding a lease (at serve's start: those a killed serve left mid-job).
    ///
    /// Errors: [`WakeDbError::Sql`].
    pub fn lease_agents(&self) -> Result<Vec<String>, WakeDbError> {
        let mut stmt = self.conn.prepare("SELECT agent_id FROM lease ORDER BY agent_id").map_err(|e| self.sql_err(e))?;
        let rows = stmt.query_map([], |r| r.get(0)).map_err(|e| self.sql_err(e))?;
        rows.collect::<Result<Vec<String>, _>>().map_err(|e| self.sql_err(e))
    }

    /// `agent_id`'s lease, if it holds one.
    ///
    /// Errors: [`WakeDbError::Sql`].
    pub fn lease_of(&self, agent_id: &str) -> Result<Option<Lease>, WakeDbError> {
        self.conn
            .query_row("SELECT agent_id, job, pid, pgid, priority, started_at FROM lease WHERE agent_id = ?1", [agent_id], |r| {
                Ok(Lease {
                    agent_id: r.get(0)?,
                    job: r.get(1)?,
                    pid: r.get(2)?,
                    pgid: r.get(3)?,
                    priority: r.get(4)?,
                    started_at: r.get(5)?,
                })
            })
            .optional()
            .map_err(|e| self.sql_err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_taken_replaced_read_and_released() {
        let dir = tempfile::tempdir().unwrap();
        let home = crate::home::Home::at(dir.path());
        let db = WakeDb::open(&home).unwrap();
        assert_eq!(db.lease_of("w-1").unwrap(), None);
        let lease = Lease {
            agent_id: "w-1".into(),
            job: "intent:i1".into(),
            pid: Some(42),
            pgid: Some(42),
            priority: 5,
            started_at: "2026-12-02T08:00:00Z".into(),
        };
        db.lease_take(&lease).unwrap();
        let next = Lease { job: "selfcheck".into(), pid: None, pgid: None, priority: 8, ..lease };
        db.lease_take(&next).unwrap();
        assert_eq!(db.lease_of("w-1").unwrap(), Some(next));
        db.lease_release("w-1").unwrap();
        assert_eq!(db.lease_of("w-1").unwrap(), None);
    }
}
