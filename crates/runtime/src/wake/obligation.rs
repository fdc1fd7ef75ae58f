//! Reply obligations (docs/design.md §10 "Obligations"; cryo's reply-obligation journal, reference
//! A10): the durable record that a wake claimed messages and owes their sender an answer.
//!
//! Owns the `obligation` rows. The order that makes them safe is the caller's: commit the
//! obligation, then move the claimed files, then start the turn. Must not touch: message files,
//! the todo rows.

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::db::{WakeDb, WakeDbError};
use super::inbox::settle::FileStamp;

/// Who answered a claimed conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResolvedBy {
    /// The agent replied or sent.
    Agent,
    /// serve wrote the `(cicy: agent hibernated|crashed before replying)` message.
    Fallback,
    /// serve wrote the interruption notice at start after a hard stop.
    Notice,
}

impl ResolvedBy {
    /// The `resolved_by` column's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Fallback => "fallback",
            Self::Notice => "notice",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "agent" => Some(Self::Agent),
            "fallback" => Some(Self::Fallback),
            "notice" => Some(Self::Notice),
            _ => None,
        }
    }
}

/// One claimed file: its name in `inbox/`, the name it has in `inbox/archive/` (the same
/// unless that was taken) and its stamp when claimed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimedFile {
    pub name: String,
    pub archived: String,
    #[serde(flatten)]
    pub stamp: FileStamp,
}

/// One obligation row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Obligation {
    pub id: i64,
    pub agent_id: String,
    /// The claimed conversation (§11).
    pub conv_id: String,
    /// File names of the claimed messages in `<ws>/.cicy/messages/inbox/archive/`, in claim
    /// order (their inbox names, unless a reused name made them `<stem>~<n>.md` there).
    pub message_ids: Vec<String>,
    /// What each claimed file was, in claim order; empty on rows older than this record.
    pub files: Vec<ClaimedFile>,
    /// RFC 3339 UTC.
    pub claimed_at: String,
    /// The wake turn that owes the answer, once started.
    pub turn_id: Option<String>,
    /// RFC 3339 UTC.
    pub resolved_at: Option<String>,
    pub resolved_by: Option<ResolvedBy>,
}

const COLUMNS: &str = "id, agent_id, conv_id, message_ids, claimed_at, turn_id, resolved_at, resolved_by, files";

impl WakeDb {
    /// Records that `agent` claimed `files` of conversation `conv_id` and returns the row.
    /// Committed with `synchronous=FULL` before it returns, so the caller may then move files.
    ///
    /// Errors: [`WakeDbError::Sql`].
    pub fn obligation_commit(&mut self, agent: &str, conv_id: &str, files: &[ClaimedFile]) -> Result<Obligation, WakeDbError> {
        let ids = serde_json::Value::from(files.iter().map(|f| f.archived.clone()).collect::<Vec<_>>()).to_string();
        let files = serde_json::to_string(files).map_err(|e| self.bad_row("obligation", "new".into(), e.to_string()))?;
        let id = self
            .conn
            .query_row(
                "INSERT INTO obligation (agent_id, conv_id, message_ids, claimed_at, files) VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id",
                params![agent, conv_id, ids, crate::fsutil::now_rfc3339(), files],
                |r| r.get(0),
            )
            .map_err(|e| self.sql_err(e))?;
        self.obligation_get(id)
    }

    /// Deletes obligation `id`: a claim released before its turn could start, once its files
    /// are back in `inbox/` (the stored deliveries it marked go back to `pending`).
    ///
    /// Errors: [`WakeDbError::Sql`].
    pub fn obligation_release(&mut self, id: i64) -> Result<(), WakeDbError> {
        let path = self.path().to_path_buf();
        let sql = |source| WakeDbError::Sql { path: path.clone(), source };
        let tx = self.conn.transaction().map_err(sql)?;
        tx.execute("UPDATE delivery SET state = 'pending', obligation_id = NULL WHERE obligation_id = ?1", params![id]).map_err(sql)?;
        tx.execute("DELETE FROM obligation WHERE id = ?1", params![id]).map_err(sql)?;
        tx.commit().map_err(sql)
    }

    /// Names the wake turn that owes obligation `id`.
    ///
    /// Errors: [`WakeDbError::NoSuchObligation`], [`WakeDbError::Sql`].
    pub fn obligation_set_turn(&mut self, id: i64, turn_id: &str) -> Result<(), WakeDbError> {
        let changed =
            self.conn.execute("UPDATE obligation SET turn_id = ?2 WHERE id = ?1", params![id, turn_id]).map_err(|e| self.sql_err(e))?;
        if changed == 0 {
            return Err(WakeDbError::NoSuchObligation { path: self.path().to_path_buf(), id });
        }
        Ok(())
    }

    /// Resolves obligation `id` now. Idempotent: one already resolved keeps its time and
    /// `resolved_by` (the first answer counts).
    ///
    /// Errors: [`WakeDbError::NoSuchObligation`], [`WakeDbError::Sql`].
    pub fn obligation_resolve(&mut self, id: i64, by: ResolvedBy) -> Result<(), WakeDbError> {
        let exists: Option<i64> = self
            .conn
            .query_row(
                "UPDATE obligation SET resolved_at = COALESCE(resolved_at, ?2), resolved_by = COALESCE(resolved_by, ?3) WHERE id = ?1 RETURNING id",
                params![id, crate::fsutil::now_rfc3339(), by.as_str()],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql_err(e))?;
        match exists {
            Some(_) => {
                // The stored deliveries this claim took are answered with it (§11 `delivery`;
                // `crate::wake::claim` recorded the obligation on them when it claimed).
                self.conn
                    .execute("UPDATE delivery SET state = 'answered' WHERE obligation_id = ?1", params![id])
                    .map_err(|e| self.sql_err(e))?;
                Ok(())
            }
            None => Err(WakeDbError::NoSuchObligation { path: self.path().to_path_buf(), id }),
        }
    }

    /// Unresolved obligations by id: of `agent`, or of every agent with `None` (serve's start).
    ///
    /// Errors: [`WakeDbError::BadRow`], [`WakeDbError::Sql`].
    pub fn obligation_unresolved(&self, agent: Option<&str>) -> Result<Vec<Obligation>, WakeDbError> {
        match agent {
            Some(a) => self.obligations("WHERE agent_id = ?1 AND resolved_at IS NULL ORDER BY id", params![a]),
            None => self.obligations("WHERE resolved_at IS NULL ORDER BY id", params![]),
        }
    }

    /// Every obligation of `agent` by id (the recovery that finishes interrupted file moves).
    ///
    /// Errors: [`WakeDbError::BadRow`], [`WakeDbError::Sql`].
    pub fn obligation_all(&self, agent: &str) -> Result<Vec<Obligation>, WakeDbError> {
        self.obligations("WHERE agent_id = ?1 ORDER BY id", params![agent])
    }

    /// The archive name of the claimed file that the inbox file `name` with `stamp` is, if an
    /// obligation of `agent` (resolved or not) claimed exactly that file: its move out of
    /// `inbox/` failed or was cut short, and it is never claimed again. A new file under a
    /// claimed name is not it. Rows older than the stamps match by name while unresolved.
    ///
    /// Errors: [`WakeDbError::BadRow`], [`WakeDbError::Sql`].
    pub fn obligation_claimed_as(&self, agent: &str, name: &str, stamp: &FileStamp) -> Result<Option<String>, WakeDbError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT o.id, o.files FROM obligation o WHERE o.agent_id = ?1 AND (
                   EXISTS (SELECT 1 FROM json_each(o.files) j WHERE json_extract(j.value, '$.name') = ?2)
                   OR (o.files IS NULL AND o.resolved_at IS NULL AND EXISTS (SELECT 1 FROM json_each(o.message_ids) j WHERE j.value = ?2)))",
            )
            .map_err(|e| self.sql_err(e))?;
        let rows: Vec<(i64, Option<String>)> = stmt
            .query_map(params![agent, name], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|rows| rows.collect())
            .map_err(|e| self.sql_err(e))?;
        for (id, files) in rows {
            let Some(files) = files else { return Ok(Some(name.to_string())) };
            let files = self.files_of(id, &files)?;
            if let Some(f) = files.into_iter().find(|f| f.name == name && f.stamp == *stamp) {
                return Ok(Some(f.archived));
            }
        }
        Ok(None)
    }

    fn files_of(&self, id: i64, json: &str) -> Result<Vec<ClaimedFile>, WakeDbError> {
        serde_json::from_str(json)
            .map_err(|e| self.bad_row("obligation", id.to_string(), format!("files is not a JSON array of claimed files ({e}): {json}")))
    }

    /// How many of `agent`'s obligations are unresolved.
    pub fn obligation_count_unresolved(&self, agent: &str) -> Result<u32, WakeDbError> {
        self.conn
            .query_row("SELECT COUNT(*) FROM obligation WHERE agent_id = ?1 AND resolved_at IS NULL", [agent], |r| r.get(0))
            .map_err(|e| self.sql_err(e))
    }

    /// Obligation `id`.
    ///
    /// Errors: [`WakeDbError::NoSuchObligation`], [`WakeDbError::BadRow`], [`WakeDbError::Sql`].
    pub fn obligation_get(&self, id: i64) -> Result<Obligation, WakeDbError> {
        self.obligations("WHERE id = ?1", params![id])?
            .pop()
            .ok_or_else(|| WakeDbError::NoSuchObligation { path: self.path().to_path_buf(), id })
    }

    fn obligations(&self, clause: &str, params: impl rusqlite::Params) -> Result<Vec<Obligation>, WakeDbError> {
        let mut stmt = self.conn.prepare(&format!("SELECT {COLUMNS} FROM obligation {clause}")).map_err(|e| self.sql_err(e))?;
        let rows = stmt
            .query_map(params, |r| {
                let o = Obligation {
                    id: r.get(0)?,
                    agent_id: r.get(1)?,
                    conv_id: r.get(2)?,
                    message_ids: Vec::new(),
                    files: Vec::new(),
                    claimed_at: r.get(4)?,
                    turn_id: r.get(5)?,
                    resolved_at: r.get(6)?,
                    resolved_by: None,
                };
                Ok((o, r.get::<_, String>(3)?, r.get::<_, Option<String>>(7)?, r.get::<_, Option<String>>(8)?))
            })
            .map_err(|e| self.sql_err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (mut o, ids, by, files) = row.map_err(|e| self.sql_err(e))?;
            let bad = |detail: String| self.bad_row("obligation", o.id.to_string(), detail);
            o.message_ids =
                serde_json::from_str(&ids).map_err(|e| bad(format!("message_ids is not a JSON array of file names ({e}): {ids}")))?;
            if let Some(files) = files {
                o.files = self.files_of(o.id, &files)?;
            }
            o.resolved_by = match by {
                None => None,
                Some(b) => Some(ResolvedBy::parse(&b).ok_or_else(|| bad(format!("unknown resolved_by `{b}`")))?),
            };
            out.push(o);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::home::Home;

    fn open() -> (tempfile::TempDir, WakeDb) {
        let dir = tempfile::tempdir().unwrap();
        let db = WakeDb::open(&Home::at(dir.path())).unwrap();
        (dir, db)
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    fn stamp(ino: u64) -> FileStamp {
        FileStamp { ino, size: 10, mtime_ns: 1_780_000_000_123_456_789 }
    }

    /// Files claimed under their own names, the n-th with inode n.
    fn files(n: &[&str]) -> Vec<ClaimedFile> {
        n.iter().zip(1..).map(|(name, ino)| ClaimedFile { name: name.to_string(), archived: name.to_string(), stamp: stamp(ino) }).collect()
    }

    #[test]
    fn commit_set_turn_and_resolve() {
        let (dir, mut db) = open();
        let a = db.obligation_commit("w-1", "conv-a", &files(&["1_a.md", "2_b.md"])).unwrap();
        let b = db.obligation_commit("w-2", "conv-b", &files(&["3_c.md"])).unwrap();
        let c = db.obligation_commit("w-1", "conv-c", &[]).unwrap();
        assert_eq!((a.id, b.id, c.id), (1, 2, 3));
        assert_eq!((a.agent_id.as_str(), a.conv_id.as_str(), a.message_ids.clone()), ("w-1", "conv-a", names(&["1_a.md", "2_b.md"])));
        assert_eq!((a.claimed_at.len(), a.turn_id.clone(), a.resolved_at.clone(), a.resolved_by), (20, None, None, None));

        db.obligation_set_turn(1, "turn-9").unwrap();
        assert_eq!(db.obligation_count_unresolved("w-1").unwrap(), 2);
        db.obligation_resolve(1, ResolvedBy::Agent).unwrap();
        // Idempotent: the first answer stays.
        db.obligation_resolve(1, ResolvedBy::Fallback).unwrap();
        db.obligation_resolve(2, ResolvedBy::Notice).unwrap();

        // Committed: another connection sees it.
        let other = WakeDb::open(&Home::at(dir.path())).unwrap();
        let all = other.obligation_all("w-1").unwrap();
        assert_eq!(
            all.iter().map(|o| (o.id, o.turn_id.as_deref(), o.resolved_by)).collect::<Vec<_>>(),
            [(1, Some("turn-9"), Some(ResolvedBy::Agent)), (3, None, None)]
        );
        assert_eq!(all[0].resolved_at.as_ref().map(String::len), Some(20));
        assert_eq!(other.obligation_unresolved(Some("w-1")).unwrap().iter().map(|o| o.id).collect::<Vec<_>>(), [3]);
        assert_eq!(other.obligation_unresolved(Some("w-2")).unwrap(), []);
        assert_eq!(other.obligation_unresolved(None).unwrap().iter().map(|o| o.id).collect::<Vec<_>>(), [3]);
        assert_eq!(other.obligation_count_unresolved("w-1").unwrap(), 1);
    }

    #[test]
    fn a_file_is_the_claimed_one_only_with_its_stamp_and_old_rows_match_by_name_while_open() {
        let (_dir, mut db) = open();
        let mut reused = files(&["x.md"]);
        reused[0].archived = "x~1.md".into();
        let ob = db.obligation_commit("w-1", "c", &reused).unwrap();
        assert_eq!((ob.message_ids.clone(), ob.files.clone()), (names(&["x~1.md"]), reused));
        assert_eq!(db.obligation_claimed_as("w-1", "x.md", &stamp(1)).unwrap().as_deref(), Some("x~1.md"));
        db.obligation_resolve(ob.id, ResolvedBy::Agent).unwrap();
        assert_eq!(db.obligation_claimed_as("w-1", "x.md", &stamp(1)).unwrap().as_deref(), Some("x~1.md"), "resolved or not");
        assert_eq!(db.obligation_claimed_as("w-1", "x.md", &stamp(2)).unwrap(), None, "a new file under the name");
        assert_eq!(db.obligation_claimed_as("w-2", "x.md", &stamp(1)).unwrap(), None);

        // A row claimed before the stamps were recorded.
        db.conn
            .execute("INSERT INTO obligation (agent_id, conv_id, message_ids, claimed_at) VALUES ('w-1', 'c', '[\"y.md\"]', 't')", [])
            .unwrap();
        let legacy = db.conn.last_insert_rowid();
        assert_eq!(db.obligation_claimed_as("w-1", "y.md", &stamp(9)).unwrap().as_deref(), Some("y.md"));
        db.obligation_resolve(legacy, ResolvedBy::Notice).unwrap();
        assert_eq!(db.obligation_claimed_as("w-1", "y.md", &stamp(9)).unwrap(), None);
        assert!(db.obligation_get(legacy).unwrap().files.is_empty());

        db.obligation_release(ob.id).unwrap();
        assert!(matches!(db.obligation_get(ob.id), Err(WakeDbError::NoSuchObligation { .. })));
    }

    #[test]
    fn an_unknown_obligation_is_an_error() {
        let (dir, mut db) = open();
        let path = dir.path().join("cicy.db");
        assert_eq!(db.obligation_resolve(7, ResolvedBy::Agent).unwrap_err().to_string(), format!("{}: no obligation 7", path.display()));
        assert!(matches!(db.obligation_set_turn(7, "t"), Err(WakeDbError::NoSuchObligation { id: 7, .. })));
    }

    #[test]
    fn a_damaged_row_is_an_error_naming_the_file_and_row() {
        let (dir, mut db) = open();
        db.obligation_commit("w-1", "c", &files(&["x.md"])).unwrap();
        db.conn.execute("UPDATE obligation SET message_ids = 'x.md'", []).unwrap();
        let e = db.obligation_unresolved(None).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}: obligation row 1: message_ids is not a JSON array of file names (expected value at line 1 column 1): x.md",
                dir.path().join("cicy.db").display()
            )
        );
    }
}
