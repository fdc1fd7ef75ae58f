//! `msg` calls of the master/worker topology (docs/design.md §11, cicy `msg`): who asked whom what,
//! whether a tool still waits for the answer, and the answer.
//!
//! Owns the `msg_call` rows and the one decision they exist for: when the answer comes, a
//! waiting caller takes it (state `waiting` → `done`), otherwise (`queued` → `done`) a 🔔
//! message carries it back if the call asked for a callback. Both sides change the state in
//! one statement, so exactly one of them carries each answer. Must not touch messages or files.

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::{MessageStore, StoreError};

/// `msg_call.state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallState {
    /// The caller's tool waits for the answer.
    Waiting,
    /// Nobody waits: the answer goes back as a 🔔 message when `callback` is set.
    Queued,
    Done,
}

impl CallState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Queued => "queued",
            Self::Done => "done",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "waiting" => Some(Self::Waiting),
            "queued" => Some(Self::Queued),
            "done" => Some(Self::Done),
            _ => None,
        }
    }
}

/// One `msg` call.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MsgCall {
    /// The number shown as `msg <id>`.
    pub id: i64,
    /// The caller: `w-<n>` or `human:<name>`.
    pub from: String,
    pub to: String,
    pub conv_id: String,
    /// The message that carried the text (set right after it is posted).
    pub message_id: Option<String>,
    pub text: String,
    pub callback: bool,
    pub state: CallState,
    pub reply: Option<String>,
    /// RFC 3339 UTC.
    pub created_at: String,
    pub done_at: Option<String>,
}

/// How an answer was taken by [`MessageStore::answer_call`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answered {
    /// A tool was waiting: it returns the answer itself.
    ToWaiter(MsgCall),
    /// Nobody was waiting: send the 🔔 callback when [`MsgCall::callback`] is set.
    Queued(MsgCall),
    /// Already answered (a second reply in the same claim): nothing more to carry.
    Already(MsgCall),
}

const COLUMNS: &str = "id, from_p, to_agent, conv_id, message_id, text, callback, state, reply, created_at, done_at";

type RawCall = (MsgCall, String);

fn read_call(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawCall> {
    let state: String = r.get(7)?;
    Ok((
        MsgCall {
            id: r.get(0)?,
            from: r.get(1)?,
            to: r.get(2)?,
            conv_id: r.get(3)?,
            message_id: r.get(4)?,
            text: r.get(5)?,
            callback: r.get(6)?,
            state: CallState::Waiting,
            reply: r.get(8)?,
            created_at: r.get(9)?,
            done_at: r.get(10)?,
        },
        state,
    ))
}

impl MessageStore {
    /// Records a call from `from` to `to` in conversation `conv`; `wait` makes it `waiting`,
    /// else `queued`. Returns its id.
    ///
    /// Errors: [`StoreError::Sql`].
    pub fn call_create(&mut self, from: &str, to: &str, conv: &str, text: &str, wait: bool, callback: bool) -> Result<i64, StoreError> {
        let state = if wait { CallState::Waiting } else { CallState::Queued };
        self.conn
            .execute(
                "INSERT INTO msg_call (from_p, to_agent, conv_id, text, callback, state, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![from, to, conv, text, callback, state.as_str(), crate::fsutil::now_rfc3339()],
            )
            .map_err(|e| self.sql_err(e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Records the message that carried call `id`.
    ///
    /// Errors: [`StoreError::Sql`].
    pub fn call_set_message(&mut self, id: i64, message_id: &str) -> Result<(), StoreError> {
        self.conn
            .execute("UPDATE msg_call SET message_id = ?2 WHERE id = ?1", params![id, message_id])
            .map(|_| ())
            .map_err(|e| self.sql_err(e))
    }

    /// Call `id`, if it exists.
    ///
    /// Errors: [`StoreError::BadRow`], [`StoreError::Sql`].
    pub fn call(&self, id: i64) -> Result<Option<MsgCall>, StoreError> {
        let raw = self
            .conn
            .query_row(&format!("SELECT {COLUMNS} FROM msg_call WHERE id = ?1"), [id], read_call)
            .optional()
            .map_err(|e| self.sql_err(e))?;
        raw.map(|r| self.call_of(r)).transpose()
    }

    /// The caller stops waiting (its timeout, a cancel): `waiting` → `queued`. Returns the call
    /// as it is now; a call already `done` means the answer came first and is the caller's.
    ///
    /// Errors: [`StoreError::Sql`], [`StoreError::BadRow`].
    pub fn call_release(&mut self, id: i64) -> Result<Option<MsgCall>, StoreError> {
        self.conn.execute("UPDATE msg_call SET state = 'queued' WHERE id = ?1 AND state = 'waiting'", [id]).map_err(|e| self.sql_err(e))?;
        self.call(id)
    }

    /// At serve's start: every `waiting` call becomes `queued`, as the tools that waited died
    /// with the serve before (their answers come back as 🔔 messages). Returns how many.
    ///
    /// Errors: [`StoreError::Sql`].
    pub fn calls_release_waiting(&mut self) -> Result<usize, StoreError> {
        self.conn.execute("UPDATE msg_call SET state = 'queued' WHERE state = 'waiting'", []).map_err(|e| self.sql_err(e))
    }

    /// The answer `reply` to call `id`, in one transaction: `waiting` → [`Answered::ToWaiter`],
    /// `queued` → [`Answered::Queued`], `done` → [`Answered::Already`]; `None` for no such call.
    ///
    /// Errors: [`StoreError::Sql`], [`StoreError::BadRow`].
    pub fn call_answer(&mut self, id: i64, reply: &str) -> Result<Option<Answered>, StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sql { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        let state: Option<String> = tx.query_row("SELECT state FROM msg_call WHERE id = ?1", [id], |r| r.get(0)).optional().map_err(sql)?;
        let Some(state) = state else { return Ok(None) };
        let before = CallState::parse(&state).ok_or_else(|| StoreError::BadRow {
            path: path.clone(),
            table: "msg_call",
            key: id.to_string(),
            detail: format!("state `{state}`"),
        })?;
        if before != CallState::Done {
            tx.execute(
                "UPDATE msg_call SET state = 'done', reply = ?2, done_at = ?3 WHERE id = ?1",
                params![id, reply, crate::fsutil::now_rfc3339()],
            )
            .map_err(sql)?;
        }
        tx.commit().map_err(sql)?;
        let call = self.call(id)?.ok_or_else(|| self.bad_row("msg_call", &id.to_string(), "vanished".into()))?;
        Ok(Some(match before {
            CallState::Waiting => Answered::ToWaiter(call),
            CallState::Queued => Answered::Queued(call),
            CallState::Done => Answered::Already(call),
        }))
    }

    /// Calls from or to `principal`, newest first, at most `limit`.
    ///
    /// Errors: [`StoreError::Sql`], [`StoreError::BadRow`].
    pub fn calls_of(&self, principal: &str, limit: u32) -> Result<Vec<MsgCall>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {COLUMNS} FROM msg_call WHERE from_p = ?1 OR to_agent = ?1 ORDER BY id DESC LIMIT ?2"))
            .map_err(|e| self.sql_err(e))?;
        let raws: Vec<RawCall> =
            stmt.query_map(params![principal, limit], read_call).and_then(|rows| rows.collect()).map_err(|e| self.sql_err(e))?;
        raws.into_iter().map(|r| self.call_of(r)).collect()
    }

    fn call_of(&self, (mut c, state): RawCall) -> Result<MsgCall, StoreError> {
        c.state = CallState::parse(&state).ok_or_else(|| self.bad_row("msg_call", &c.id.to_string(), format!("state `{state}`")))?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::store::testutil::store_with;

    #[test]
    fn exactly_one_side_carries_each_answer() {
        let (_dir, mut store) = store_with(&["Ann", "Bob"]);
        let conv = store.direct("w-1", "w-2").unwrap().id;
        let waited = store.call_create("w-1", "w-2", &conv, "sum?", true, true).unwrap();
        let released = store.call_create("w-1", "w-2", &conv, "diff?", true, true).unwrap();
        assert!(matches!(store.call_answer(waited, "4").unwrap(), Some(Answered::ToWaiter(c)) if c.reply.as_deref() == Some("4")));
        assert!(matches!(store.call_answer(waited, "5").unwrap(), Some(Answered::Already(c)) if c.reply.as_deref() == Some("4")));
        // The waiter gave up first: the answer goes back as a callback.
        assert_eq!(store.call_release(released).unwrap().unwrap().state, CallState::Queued);
        assert!(matches!(store.call_answer(released, "0").unwrap(), Some(Answered::Queued(c)) if c.callback));
        // The answer came first: releasing finds it done and the waiter takes it.
        let late = store.call_create("w-1", "w-2", &conv, "x?", true, false).unwrap();
        store.call_answer(late, "y").unwrap();
        let c = store.call_release(late).unwrap().unwrap();
        assert_eq!((c.state, c.reply.as_deref()), (CallState::Done, Some("y")));
        assert_eq!(store.call_answer(999, "z").unwrap(), None);
        let ids: Vec<i64> = store.calls_of("w-2", 10).unwrap().iter().map(|c| c.id).collect();
        assert_eq!(ids, [late, released, waited]);
        let orphan = store.call_create("w-1", "w-2", &conv, "still there?", true, true).unwrap();
        assert_eq!(store.calls_release_waiting().unwrap(), 1);
        assert!(matches!(store.call_answer(orphan, "yes").unwrap(), Some(Answered::Queued(_))));
    }
}
