//! Conversations and their members (docs/design.md §11 `conversation`, `member`): direct and group
//! conversations, membership, group resolution by name (Choruz B7 `send`), display names and
//! the roster (Choruz B1).
//!
//! Owns the `conversation` and `member` rows. Must not touch: messages, tasks, `agent_config`
//! (read only).

use rusqlite::{params, OptionalExtension, Transaction, TransactionBehavior};

use std::path::Path;

use super::{check_principal, MessageStore, StoreError};
use crate::messages::envelope::{clean_name, sort_roster, RosterEntry, NAME_MAX_CHARS};

/// The `name` of every direct conversation: Choruz's literal for a DM, never resolvable as a
/// group (resolution looks at `kind = 'group'` only).
pub const DIRECT_NAME: &str = "[DM]";

/// `conversation.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConvKind {
    Direct,
    Group,
}

impl ConvKind {
    /// The column's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Group => "group",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "direct" => Some(Self::Direct),
            "group" => Some(Self::Group),
            _ => None,
        }
    }
}

/// `member.visibility`: `internal` members get deliveries but are left out of the roster
/// (Choruz `channel_visibility`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Visibility {
    Visible,
    Internal,
}

impl Visibility {
    /// The column's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Visible => "visible",
            Self::Internal => "internal",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "visible" => Some(Self::Visible),
            "internal" => Some(Self::Internal),
            _ => None,
        }
    }
}

/// One conversation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Conversation {
    /// A UUIDv4 string.
    pub id: String,
    pub kind: ConvKind,
    /// The group's name; [`DIRECT_NAME`] for a direct conversation.
    pub name: String,
    pub description: String,
    /// The principal that created it.
    pub created_by: String,
    /// RFC 3339 UTC.
    pub created_at: String,
}

impl Conversation {
    /// How errors and envelopes name it: the group's name, or the id of a direct conversation.
    pub fn label(&self) -> &str {
        match self.kind {
            ConvKind::Group => &self.name,
            ConvKind::Direct => &self.id,
        }
    }
}

/// One member row; removed members stay, `active = false`, so their old messages keep a sender.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Member {
    pub principal: String,
    pub visibility: Visibility,
    pub active: bool,
}

const CONV_COLUMNS: &str = "id, kind, name, description, created_by, created_at";

type RawConv = (Conversation, String);

fn read_conv(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawConv> {
    let c = Conversation {
        id: r.get(0)?,
        kind: ConvKind::Group,
        name: r.get(2)?,
        description: r.get(3)?,
        created_by: r.get(4)?,
        created_at: r.get(5)?,
    };
    Ok((c, r.get(1)?))
}

impl MessageStore {
    /// The direct conversation between `a` and `b`, created (with both as visible members) if
    /// there is none; the same pair in either order always gives the same conversation, also
    /// under concurrent calls (one `BEGIN IMMEDIATE` transaction).
    ///
    /// Errors: [`StoreError::BadPrincipal`], [`StoreError::SelfDirect`], [`StoreError::Sql`].
    pub fn direct(&mut self, a: &str, b: &str) -> Result<Conversation, StoreError> {
        check_principal(a)?;
        check_principal(b)?;
        if a == b {
            return Err(StoreError::SelfDirect { principal: a.to_string() });
        }
        let path = self.path.clone();
        let sql = |source| StoreError::Sql { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        let found: Option<String> = tx
            .query_row(
                "SELECT c.id FROM conversation c
                 JOIN member x ON x.conv_id = c.id AND x.principal = ?1
                 JOIN member y ON y.conv_id = c.id AND y.principal = ?2
                 WHERE c.kind = 'direct' ORDER BY c.created_at, c.rowid LIMIT 1",
                [a, b],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql)?;
        let id = match found {
            Some(id) => id,
            None => {
                let id = insert_conversation(&tx, ConvKind::Direct, DIRECT_NAME, "", a).map_err(sql)?;
                for p in [a, b] {
                    upsert_member(&tx, &id, p, Visibility::Visible).map_err(sql)?;
                }
                id
            }
        };
        tx.commit().map_err(sql)?;
        self.conversation(&id)
    }

    /// Creates the group `name` (trimmed) with `members` and the requester as visible members
    /// (Choruz B7 `create_group`: the requester is always added; duplicates are merged).
    ///
    /// **[chosen]** A name another active group already has is refused when one of the new
    /// members is in that group ([`StoreError::GroupNameTaken`]): that member's sends to the
    /// name would fail as ambiguous. Groups of the same name with disjoint members may coexist,
    /// since each member still resolves one. Names must be 1 to 120 characters without control
    /// characters or `|`, so the envelope shows them exactly as an agent must type them.
    ///
    /// Errors: [`StoreError::BadGroupName`], [`StoreError::BadPrincipal`],
    /// [`StoreError::GroupNameTaken`], [`StoreError::Sql`].
    pub fn create_group(&mut self, requester: &str, name: &str, description: &str, members: &[&str]) -> Result<Conversation, StoreError> {
        let name = check_group_name(name)?;
        check_principal(requester)?;
        let mut all: Vec<&str> = vec![requester];
        for m in members {
            check_principal(m)?;
            if !all.contains(m) {
                all.push(m);
            }
        }
        let path = self.path.clone();
        let sql = |source| StoreError::Sql { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        for p in &all {
            refuse_taken_name(&tx, &path, name, p, "")?;
        }
        let id = insert_conversation(&tx, ConvKind::Group, name, description, requester).map_err(sql)?;
        for p in &all {
            upsert_member(&tx, &id, p, Visibility::Visible).map_err(sql)?;
        }
        tx.commit().map_err(sql)?;
        self.conversation(&id)
    }

    /// Makes `principal` an active member of group `conv` with `visibility` (re-activating a
    /// removed member, or changing a member's visibility).
    ///
    /// Errors: [`StoreError::NoConversation`], [`StoreError::DirectMembers`],
    /// [`StoreError::BadPrincipal`], [`StoreError::GroupNameTaken`], [`StoreError::Sql`].
    pub fn add_member(&mut self, conv: &str, principal: &str, visibility: Visibility) -> Result<(), StoreError> {
        check_principal(principal)?;
        let c = self.group_conversation(conv)?;
        let path = self.path.clone();
        let sql = |source| StoreError::Sql { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        refuse_taken_name(&tx, &path, &c.name, principal, &c.id)?;
        upsert_member(&tx, &c.id, principal, visibility).map_err(sql)?;
        tx.commit().map_err(sql)
    }

    /// Marks `principal` no longer a member of group `conv`; its row stays (`active = 0`).
    ///
    /// Errors: [`StoreError::NoConversation`], [`StoreError::DirectMembers`],
    /// [`StoreError::NotMember`], [`StoreError::Sql`].
    pub fn remove_member(&mut self, conv: &str, principal: &str) -> Result<(), StoreError> {
        let c = self.group_conversation(conv)?;
        let n = self
            .conn
            .execute("UPDATE member SET active = 0 WHERE conv_id = ?1 AND principal = ?2 AND active = 1", [&c.id, principal])
            .map_err(|e| self.sql_err(e))?;
        if n == 0 {
            return Err(StoreError::NotMember { conv: c.id, principal: principal.to_string() });
        }
        Ok(())
    }

    /// The conversation `id`.
    ///
    /// Errors: [`StoreError::NoConversation`], [`StoreError::BadRow`], [`StoreError::Sql`].
    pub fn conversation(&self, id: &str) -> Result<Conversation, StoreError> {
        let raw = self
            .conn
            .query_row(&format!("SELECT {CONV_COLUMNS} FROM conversation WHERE id = ?1"), [id], read_conv)
            .optional()
            .map_err(|e| self.sql_err(e))?;
        let (c, kind) = raw.ok_or_else(|| StoreError::NoConversation { id: id.to_string() })?;
        self.conv_of(c, kind)
    }

    /// Every member row of `conv`, removed ones included, by principal.
    ///
    /// Errors: [`StoreError::BadRow`], [`StoreError::Sql`].
    pub fn members(&self, conv: &str) -> Result<Vec<Member>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT principal, visibility, active FROM member WHERE conv_id = ?1 ORDER BY principal")
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt
            .query_map([conv], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, bool>(2)?)))
            .map_err(|e| self.sql_err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (principal, vis, active) = row.map_err(|e| self.sql_err(e))?;
            let visibility = Visibility::parse(&vis)
                .ok_or_else(|| self.bad_row("member", &format!("{conv}/{principal}"), format!("visibility `{vis}`")))?;
            out.push(Member { principal, visibility, active });
        }
        Ok(out)
    }

    /// The group `name` that `agent` is an active member of (Choruz B7 `send` group resolution:
    /// exact name, `kind = 'group'`; a UUID-shaped name is still looked up as a name).
    ///
    /// Errors: [`StoreError::GroupNotFound`] (none, or `agent` is not a member),
    /// [`StoreError::GroupAmbiguous`] (two or more), [`StoreError::Sql`].
    pub fn resolve_group(&self, agent: &str, name: &str) -> Result<Conversation, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT c.id FROM conversation c JOIN member m ON m.conv_id = c.id
                 WHERE c.kind = 'group' AND c.name = ?1 AND m.principal = ?2 AND m.active = 1 LIMIT 2",
            )
            .map_err(|e| self.sql_err(e))?;
        let ids: Vec<String> = stmt.query_map([name, agent], |r| r.get(0)).and_then(|rows| rows.collect()).map_err(|e| self.sql_err(e))?;
        match ids.as_slice() {
            [id] => self.conversation(id),
            [] => Err(StoreError::GroupNotFound { group: name.to_string() }),
            _ => Err(StoreError::GroupAmbiguous { group: name.to_string() }),
        }
    }

    /// Whether a group named `name` exists, whoever its members are.
    ///
    /// Errors: [`StoreError::Sql`].
    pub fn group_exists(&self, name: &str) -> Result<bool, StoreError> {
        self.conn
            .query_row("SELECT EXISTS (SELECT 1 FROM conversation WHERE kind = 'group' AND name = ?1)", [name], |r| r.get(0))
            .map_err(|e| self.sql_err(e))
    }

    /// The roster of `conv` (Choruz B1): its active, visible agent members that are still in
    /// `agent_config`, named by `agent_config.title`, sorted by lowercase name, then id.
    ///
    /// Errors: [`StoreError::Sql`].
    pub fn roster(&self, conv: &str) -> Result<Vec<RosterEntry>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT a.id, a.title FROM member m JOIN agent_config a ON a.id = m.principal
                 WHERE m.conv_id = ?1 AND m.active = 1 AND m.visibility = 'visible'",
            )
            .map_err(|e| self.sql_err(e))?;
        let mut roster: Vec<RosterEntry> = stmt
            .query_map([conv], |r| Ok(RosterEntry { id: r.get(0)?, name: r.get(1)?, kind: "agent".to_string(), host: None }))
            .and_then(|rows| rows.collect())
            .map_err(|e| self.sql_err(e))?;
        sort_roster(&mut roster);
        Ok(roster)
    }

    /// How a principal is shown as `from:@<name>`: an agent's `agent_config.title`, a human's
    /// `<name>`; an agent no longer registered falls back to the first 8 characters of its id
    /// (Choruz B1 `resolve_principal_name`).
    ///
    /// Errors: [`StoreError::Sql`].
    pub fn display_name(&self, principal: &str) -> Result<String, StoreError> {
        if let Some(name) = principal.strip_prefix("human:") {
            return Ok(name.to_string());
        }
        let title: Option<String> = self
            .conn
            .query_row("SELECT title FROM agent_config WHERE id = ?1", [principal], |r| r.get(0))
            .optional()
            .map_err(|e| self.sql_err(e))?;
        Ok(title.unwrap_or_else(|| principal.chars().take(8).collect()))
    }

    /// Whether `principal` is an active member of `conv`.
    pub(super) fn is_active_member(&self, conv: &str, principal: &str) -> Result<bool, StoreError> {
        self.conn
            .query_row("SELECT 1 FROM member WHERE conv_id = ?1 AND principal = ?2 AND active = 1", [conv, principal], |_| Ok(()))
            .optional()
            .map(|o| o.is_some())
            .map_err(|e| self.sql_err(e))
    }

    fn group_conversation(&self, conv: &str) -> Result<Conversation, StoreError> {
        let c = self.conversation(conv)?;
        match c.kind {
            ConvKind::Group => Ok(c),
            ConvKind::Direct => Err(StoreError::DirectMembers { conv: c.id }),
        }
    }

    fn conv_of(&self, mut c: Conversation, kind: String) -> Result<Conversation, StoreError> {
        c.kind = ConvKind::parse(&kind).ok_or_else(|| self.bad_row("conversation", &c.id, format!("kind `{kind}`")))?;
        Ok(c)
    }
}

/// The trimmed group name, or why it cannot be one.
fn check_group_name(name: &str) -> Result<&str, StoreError> {
    let trimmed = name.trim();
    let problem = if trimmed.is_empty() {
        Some("is empty")
    } else if clean_name(trimmed) != trimmed {
        Some(if trimmed.chars().count() > NAME_MAX_CHARS { "is longer than 120 characters" } else { "contains a control character or '|'" })
    } else {
        None
    };
    match problem {
        Some(problem) => Err(StoreError::BadGroupName { name: name.to_string(), problem }),
        None => Ok(trimmed),
    }
}

/// Refuses when `principal` is an active member of another group (not `except`) named `name`.
fn refuse_taken_name(tx: &Transaction<'_>, path: &Path, name: &str, principal: &str, except: &str) -> Result<(), StoreError> {
    let other: Option<String> = tx
        .query_row(
            "SELECT c.id FROM conversation c JOIN member m ON m.conv_id = c.id
             WHERE c.kind = 'group' AND c.name = ?1 AND m.principal = ?2 AND m.active = 1 AND c.id <> ?3 LIMIT 1",
            [name, principal, except],
            |r| r.get(0),
        )
        .optional()
        .map_err(|source| StoreError::Sql { path: path.to_path_buf(), source })?;
    match other {
        None => Ok(()),
        Some(other) => Err(StoreError::GroupNameTaken { name: name.to_string(), other, principal: principal.to_string() }),
    }
}

fn insert_conversation(tx: &Transaction<'_>, kind: ConvKind, name: &str, description: &str, created_by: &str) -> rusqlite::Result<String> {
    let id = uuid::Uuid::new_v4().to_string();
    tx.execute(
        "INSERT INTO conversation (id, kind, name, description, created_by, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![id, kind.as_str(), name, description, created_by, crate::fsutil::now_rfc3339()],
    )?;
    Ok(id)
}

fn upsert_member(tx: &Transaction<'_>, conv: &str, principal: &str, visibility: Visibility) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO member (conv_id, principal, visibility, active) VALUES (?1, ?2, ?3, 1)
         ON CONFLICT (conv_id, principal) DO UPDATE SET visibility = excluded.visibility, active = 1",
        params![conv, principal, visibility.as_str()],
    )?;
    Ok(())
}

#[cfg(test)]
#[path = "conversation_tests.rs"]
mod tests;
