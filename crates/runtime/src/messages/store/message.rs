//! Messages and deliveries (docs/design.md §11 `message`, `delivery`): posting with a gapless `seq`
//! per conversation and a canonical thread root (Choruz B7 `send` transaction), paged listing,
//! threads, and each agent's delivery state.
//!
//! Owns the `message` and `delivery` rows. Must not touch: members (read to address
//! deliveries), inbox files (`delivery.file` is the wake code's to fill), obligations.

use rusqlite::{params, OptionalExtension, TransactionBehavior};
use serde_json::{Map, Value};

use super::{MessageStore, StoreError};

/// Largest page of [`MessageStore::messages`].
pub const MESSAGE_PAGE_MAX: u32 = 100;

/// Most messages [`MessageStore::thread`] returns: the root and the latest replies
/// (docs/design.md §11).
const THREAD_MAX: usize = crate::messages::envelope::THREAD_CONTEXT_MAX;

/// One message.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Message {
    /// A UUIDv4 string.
    pub id: String,
    pub conv_id: String,
    /// For a thread reply, the id of the thread's root (never of another reply).
    pub thread_root: Option<String>,
    /// The sending principal.
    pub sender: String,
    pub content: String,
    /// `text/plain` unless the poster said otherwise (Choruz: `attachment` for a shared file).
    pub content_type: String,
    pub metadata: Map<String, Value>,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// 1, 2, … per conversation, without gaps.
    pub seq: i64,
}

/// What [`MessageStore::post`] needs.
#[derive(Debug, Clone)]
pub struct NewMessage<'a> {
    pub conv_id: &'a str,
    /// An active member of the conversation.
    pub sender: &'a str,
    pub content: &'a str,
    /// `None`: `text/plain`.
    pub content_type: Option<&'a str>,
    /// Stored as given (Choruz's `send` puts `thread`, `broadcast`, `reply_to_id` there).
    pub metadata: Map<String, Value>,
    /// A message of the conversation to reply in the thread of: its root, or any reply.
    pub thread: Option<&'a str>,
    /// `false`: no delivery rows (a notice people read in the conversation, which must not wake
    /// the agents: cicy's fallbacks, and messages past the hop limit).
    pub deliver: bool,
}

/// One page of [`MessageStore::messages`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Page {
    /// Oldest first.
    pub messages: Vec<Message>,
    /// The cursor of the next, older page; `None` on the oldest.
    pub before: Option<String>,
}

/// `delivery.state`: a message waits (`pending`), is taken by a wake (`claimed`), and is
/// answered; the state only moves forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryState {
    Pending,
    Claimed,
    Answered,
}

impl DeliveryState {
    /// The column's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Claimed => "claimed",
            Self::Answered => "answered",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(Self::Pending),
            "claimed" => Some(Self::Claimed),
            "answered" => Some(Self::Answered),
            _ => None,
        }
    }
}

/// One delivery row: a message addressed to one agent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Delivery {
    pub message_id: String,
    pub agent_id: String,
    pub state: DeliveryState,
    /// The inbox file the message was written to, if any.
    pub file: Option<String>,
    /// The obligation that claimed it.
    pub obligation_id: Option<i64>,
}

const COLUMNS: &str = "id, conv_id, thread_root, sender, content, content_type, metadata, created_at, seq";

type RawMessage = (Message, String);

fn read_raw(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawMessage> {
    let m = Message {
        id: r.get(0)?,
        conv_id: r.get(1)?,
        thread_root: r.get(2)?,
        sender: r.get(3)?,
        content: r.get(4)?,
        content_type: r.get(5)?,
        metadata: Map::new(),
        created_at: r.get(7)?,
        seq: r.get(8)?,
    };
    Ok((m, r.get(6)?))
}

/// The opaque cursor of a page whose oldest message has `seq`.
fn cursor_of(seq: i64) -> String {
    format!("s{seq}")
}

fn seq_of_cursor(cursor: &str) -> Option<i64> {
    cursor.strip_prefix('s')?.parse().ok().filter(|s| *s >= 1)
}

impl MessageStore {
    /// Posts a message, in one `BEGIN IMMEDIATE` transaction (Choruz B7 `send`): re-checks
    /// that the sender is an active member, canonicalizes the thread target to its root,
    /// inserts the message with `seq` = max + 1 in its conversation, and a `pending` delivery
    /// for every other active agent member (visible or internal; humans get none) unless
    /// [`NewMessage::deliver`] is `false`.
    ///
    /// Errors: [`StoreError::NoConversation`], [`StoreError::NotMember`],
    /// [`StoreError::ThreadNotFound`] (`thread target '<t>' was not found in group '<g>'`),
    /// [`StoreError::Sql`].
    pub fn post(&mut self, m: &NewMessage<'_>) -> Result<Message, StoreError> {
        self.insert(m, uuid::Uuid::new_v4().to_string())
    }

    /// [`MessageStore::post`] under the id `id`, unless a message `id` is stored already: then
    /// that one, and `false` (a retried outbox command whose first run posted it).
    ///
    /// Errors: those of [`MessageStore::post`].
    pub fn post_once(&mut self, id: &str, m: &NewMessage<'_>) -> Result<(Message, bool), StoreError> {
        match self.message(id) {
            Ok(existing) => Ok((existing, false)),
            Err(StoreError::NoMessage { .. }) => Ok((self.insert(m, id.to_string())?, true)),
            Err(e) => Err(e),
        }
    }

    fn insert(&mut self, m: &NewMessage<'_>, id: String) -> Result<Message, StoreError> {
        let conv = self.conversation(m.conv_id)?;
        let path = self.path.clone();
        let sql = |source| StoreError::Sql { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        let member: Option<i64> = tx
            .query_row("SELECT 1 FROM member WHERE conv_id = ?1 AND principal = ?2 AND active = 1", [&conv.id, m.sender], |r| r.get(0))
            .optional()
            .map_err(sql)?;
        if member.is_none() {
            return Err(StoreError::NotMember { conv: conv.id, principal: m.sender.to_string() });
        }
        let thread_root = match m.thread {
            None => None,
            Some(t) => {
                let target: Option<Option<String>> = tx
                    .query_row("SELECT thread_root FROM message WHERE id = ?1 AND conv_id = ?2", [t, &conv.id], |r| r.get(0))
                    .optional()
                    .map_err(sql)?;
                match target {
                    None => return Err(StoreError::ThreadNotFound { thread: t.to_string(), group: conv.label().to_string() }),
                    Some(root) => Some(root.unwrap_or_else(|| t.to_string())),
                }
            }
        };
        let seq: i64 =
            tx.query_row("SELECT COALESCE(MAX(seq), 0) + 1 FROM message WHERE conv_id = ?1", [&conv.id], |r| r.get(0)).map_err(sql)?;
        let msg = Message {
            id,
            conv_id: conv.id.clone(),
            thread_root,
            sender: m.sender.to_string(),
            content: m.content.to_string(),
            content_type: m.content_type.unwrap_or("text/plain").to_string(),
            metadata: m.metadata.clone(),
            created_at: crate::fsutil::now_rfc3339(),
            seq,
        };
        tx.execute(
            &format!("INSERT INTO message ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
            params![
                msg.id,
                msg.conv_id,
                msg.thread_root,
                msg.sender,
                msg.content,
                msg.content_type,
                Value::Object(msg.metadata.clone()).to_string(),
                msg.created_at,
                msg.seq
            ],
        )
        .map_err(sql)?;
        if m.deliver {
            tx.execute(
                "INSERT INTO delivery (message_id, agent_id, state)
                 SELECT ?1, principal, 'pending' FROM member
                 WHERE conv_id = ?2 AND active = 1 AND principal GLOB 'w-[0-9]*' AND principal <> ?3",
                [&msg.id, &msg.conv_id, &msg.sender],
            )
            .map_err(sql)?;
        }
        tx.commit().map_err(sql)?;
        Ok(msg)
    }

    /// The message `id`.
    ///
    /// Errors: [`StoreError::NoMessage`], [`StoreError::BadRow`], [`StoreError::Sql`].
    pub fn message(&self, id: &str) -> Result<Message, StoreError> {
        let raw = self
            .conn
            .query_row(&format!("SELECT {COLUMNS} FROM message WHERE id = ?1"), [id], read_raw)
            .optional()
            .map_err(|e| self.sql_err(e))?;
        let raw = raw.ok_or_else(|| StoreError::NoMessage { id: id.to_string() })?;
        self.message_of(raw)
    }

    /// A page of `conv`'s messages: the newest `limit` (1 to [`MESSAGE_PAGE_MAX`]) older than
    /// the cursor `before` (none: the newest), returned oldest first, with the cursor of the
    /// next older page. Messages posted meanwhile never shift a later page: cursors are
    /// positions in `seq`. An unknown conversation has no messages.
    ///
    /// Errors: [`StoreError::BadLimit`], [`StoreError::BadCursor`], [`StoreError::Sql`].
    pub fn messages(&self, conv: &str, before: Option<&str>, limit: u32) -> Result<Page, StoreError> {
        if !(1..=MESSAGE_PAGE_MAX).contains(&limit) {
            return Err(StoreError::BadLimit { limit });
        }
        let below = match before {
            None => i64::MAX,
            Some(c) => seq_of_cursor(c).ok_or_else(|| StoreError::BadCursor { cursor: c.to_string() })?,
        };
        let mut msgs = self.query_messages(
            &format!("SELECT {COLUMNS} FROM message WHERE conv_id = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3"),
            params![conv, below, limit + 1],
        )?;
        let more = msgs.len() > limit as usize;
        msgs.truncate(limit as usize);
        msgs.reverse();
        let before = if more { msgs.first().map(|m| cursor_of(m.seq)) } else { None };
        Ok(Page { messages: msgs, before })
    }

    /// A thread, oldest first: its root (`root` may also be one of its replies) and the latest
    /// replies, at most [`THREAD_MAX`] messages in all; with `before_seq`, only replies
    /// before it — for a follow-up, pass its `seq` to get the root and earlier replies the
    /// envelope shows with it (`envelope::Incoming::earlier`).
    ///
    /// Errors: [`StoreError::NoMessage`], [`StoreError::Sql`].
    pub fn thread(&self, root: &str, before_seq: Option<i64>) -> Result<Vec<Message>, StoreError> {
        let first = self.message(root)?;
        let root = match &first.thread_root {
            Some(r) => self.message(r)?,
            None => first,
        };
        let mut replies = self.query_messages(
            &format!("SELECT {COLUMNS} FROM message WHERE thread_root = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3"),
            params![root.id, before_seq.unwrap_or(i64::MAX), THREAD_MAX as i64 - 1],
        )?;
        replies.reverse();
        let mut out = vec![root];
        out.append(&mut replies);
        Ok(out)
    }

    /// Moves `agent`'s deliveries of `message_ids` to `to` in one transaction, recording the
    /// claiming obligation when given. The same state again is a no-op (a recovery may repeat
    /// a step); a step back is refused and nothing changes.
    ///
    /// Errors: [`StoreError::NoDelivery`], [`StoreError::DeliveryBackwards`],
    /// [`StoreError::BadRow`], [`StoreError::Sql`].
    pub fn mark_deliveries(
        &mut self,
        agent: &str,
        message_ids: &[&str],
        to: DeliveryState,
        obligation_id: Option<i64>,
    ) -> Result<(), StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sql { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        for id in message_ids {
            let state: Option<String> = tx
                .query_row("SELECT state FROM delivery WHERE message_id = ?1 AND agent_id = ?2", [id, &agent], |r| r.get(0))
                .optional()
                .map_err(sql)?;
            let state = state.ok_or_else(|| StoreError::NoDelivery { message_id: id.to_string(), agent: agent.to_string() })?;
            let from = DeliveryState::parse(&state).ok_or_else(|| StoreError::BadRow {
                path: path.clone(),
                table: "delivery",
                key: format!("{id}/{agent}"),
                detail: format!("state `{state}`"),
            })?;
            if from > to {
                return Err(StoreError::DeliveryBackwards {
                    message_id: id.to_string(),
                    agent: agent.to_string(),
                    from: from.as_str(),
                    to: to.as_str(),
                });
            }
            tx.execute(
                "UPDATE delivery SET state = ?3, obligation_id = COALESCE(?4, obligation_id)
                 WHERE message_id = ?1 AND agent_id = ?2",
                params![id, agent, to.as_str(), obligation_id],
            )
            .map_err(sql)?;
        }
        tx.commit().map_err(sql)
    }

    /// The delivery rows of a message, by agent.
    ///
    /// Errors: [`StoreError::BadRow`], [`StoreError::Sql`].
    pub fn deliveries(&self, message_id: &str) -> Result<Vec<Delivery>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT agent_id, state, file, obligation_id FROM delivery WHERE message_id = ?1 ORDER BY agent_id")
            .map_err(|e| self.sql_err(e))?;
        let rows: Vec<(String, String, Option<String>, Option<i64>)> = stmt
            .query_map([message_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .and_then(|rows| rows.collect())
            .map_err(|e| self.sql_err(e))?;
        rows.into_iter()
            .map(|(agent_id, state, file, obligation_id)| {
                let state = DeliveryState::parse(&state)
                    .ok_or_else(|| self.bad_row("delivery", &format!("{message_id}/{agent_id}"), format!("state `{state}`")))?;
                Ok(Delivery { message_id: message_id.to_string(), agent_id, state, file, obligation_id })
            })
            .collect()
    }

    /// Records the inbox file that carries `message_id` to `agent`.
    ///
    /// Errors: [`StoreError::NoDelivery`], [`StoreError::Sql`].
    pub fn set_delivery_file(&mut self, message_id: &str, agent: &str, file: &str) -> Result<(), StoreError> {
        let n = self
            .conn
            .execute("UPDATE delivery SET file = ?3 WHERE message_id = ?1 AND agent_id = ?2", [message_id, agent, file])
            .map_err(|e| self.sql_err(e))?;
        if n == 0 {
            return Err(StoreError::NoDelivery { message_id: message_id.to_string(), agent: agent.to_string() });
        }
        Ok(())
    }

    /// Pending deliveries that have no inbox file yet, oldest message first: a crash between a
    /// post's commit and its files leaves them (`crate::messages::route::redeliver`).
    ///
    /// Errors: [`StoreError::BadRow`], [`StoreError::Sql`].
    pub fn unfiled(&self) -> Result<Vec<Delivery>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT d.message_id, d.agent_id, d.obligation_id FROM delivery d JOIN message m ON m.id = d.message_id
                 WHERE d.state = 'pending' AND d.file IS NULL ORDER BY m.created_at, m.conv_id, m.seq, d.agent_id",
            )
            .map_err(|e| self.sql_err(e))?;
        let rows: Vec<(String, String, Option<i64>)> =
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).and_then(|rows| rows.collect()).map_err(|e| self.sql_err(e))?;
        Ok(rows
            .into_iter()
            .map(|(message_id, agent_id, obligation_id)| Delivery {
                message_id,
                agent_id,
                state: DeliveryState::Pending,
                file: None,
                obligation_id,
            })
            .collect())
    }

    /// `agent`'s pending messages across conversations, oldest first (`created_at`, then
    /// conversation and `seq`); a wake claims one conversation's at a time (docs/design.md §10).
    ///
    /// Errors: [`StoreError::BadRow`], [`StoreError::Sql`].
    pub fn pending_for(&self, agent: &str) -> Result<Vec<Message>, StoreError> {
        let cols = COLUMNS.split(", ").map(|c| format!("m.{c}")).collect::<Vec<_>>().join(", ");
        self.query_messages(
            &format!(
                "SELECT {cols} FROM delivery d JOIN message m ON m.id = d.message_id
                 WHERE d.agent_id = ?1 AND d.state = 'pending' ORDER BY m.created_at, m.conv_id, m.seq"
            ),
            params![agent],
        )
    }

    fn query_messages(&self, sql: &str, args: impl rusqlite::Params) -> Result<Vec<Message>, StoreError> {
        let mut stmt = self.conn.prepare(sql).map_err(|e| self.sql_err(e))?;
        let raws: Vec<RawMessage> = stmt.query_map(args, read_raw).and_then(|rows| rows.collect()).map_err(|e| self.sql_err(e))?;
        raws.into_iter().map(|raw| self.message_of(raw)).collect()
    }

    fn message_of(&self, (mut m, metadata): RawMessage) -> Result<Message, StoreError> {
        m.metadata = match serde_json::from_str(&metadata) {
            Ok(Value::Object(map)) => map,
            _ => return Err(self.bad_row("message", &m.id, format!("metadata `{metadata}` is not a JSON object"))),
        };
        Ok(m)
    }
}

#[cfg(test)]
#[path = "message_tests.rs"]
mod tests;
