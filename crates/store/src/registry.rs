//! The agent registry: table `agent_config` in `$CICY_HOME/cicy.db` (docs/design.md §3).
//!
//! Owns the SQLite schema (versioned with `PRAGMA user_version`, migrations in code) and the
//! agent rows; the index of their workspaces is `workspaces`. It does not create workspaces or
//! read role templates; `crate::agent` does.

mod workspaces;

use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction, TransactionBehavior};
use serde::{Deserialize, Serialize};

use cicy_protocol::prompt::ApiStyle;

/// The per-agent `config` JSON column. Unknown keys written by later versions are kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lang: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_style: Option<ApiStyle>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// One row of `agent_config`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentRecord {
    /// `w-<n>`.
    pub id: String,
    pub title: String,
    pub workspace: PathBuf,
    /// Always `cicy` for now.
    pub agent_type: String,
    /// Roster label; `worker` (default) and `master` are topology markers. Never prompt text.
    pub role: String,
    pub role_template: String,
    pub default_model: Option<String>,
    pub master_id: Option<String>,
    pub config: AgentSettings,
    /// RFC 3339 UTC.
    pub created_at: String,
    pub updated_at: String,
}

/// What `create` supplies; the registry assigns the id and timestamps.
#[derive(Debug, Clone)]
pub struct NewAgent {
    pub title: String,
    /// `None`: `$CICY_HOME/workers/<id>`, resolved by the caller through `workspace_for`.
    pub workspace: Option<PathBuf>,
    pub role: String,
    pub role_template: String,
    pub default_model: Option<String>,
    pub master_id: Option<String>,
    pub config: AgentSettings,
}

/// Registry errors; each names the database or the agent.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("registry {path}: {source}")]
    Sql { path: PathBuf, source: rusqlite::Error },
    #[error("registry {path} has schema version {found}, newer than this cicy-agent understands ({supported}); upgrade cicy-agent")]
    TooNew { path: PathBuf, found: i64, supported: i64 },
    #[error("registry {path} has schema version {found}, older than this cicy-agent's ({supported}); a command that writes (e.g. `create`) upgrades it")]
    TooOld { path: PathBuf, found: i64, supported: i64 },
    /// The command must write the registry and cannot: `what` is "its folder" or "the file".
    #[error("cannot write the registry {path}: {what} is read-only. Commands that only read (`ls`, `show`, `history`, `memory <id> ls`) work on a read-only CICY_HOME; this one writes, so make it writable or set CICY_HOME to a writable folder")]
    ReadOnly { path: PathBuf, what: &'static str },
    #[error("no agent `{0}` (see `cicy-agent ls`)")]
    NotFound(String),
    #[error("master `{0}` does not exist")]
    NoMaster(String),
    /// A `--workspace` given at create that is already another agent's: the two would share
    /// one conversation and identity.
    #[error("{path} is already the workspace of agent {other}; give this agent its own --workspace")]
    WorkspaceTaken { path: PathBuf, other: String },
    /// A `--workspace` given at create that holds the cicy home or another agent's workspace, or
    /// lies inside either (but for the home's `workers/<name>`): the file tools, confined to the
    /// workspace, could then read the API token, edit roles, or rewrite another agent's state.
    #[error("{path} {why}; give this agent a workspace of its own outside it")]
    WorkspaceHolds { path: PathBuf, why: String },
    #[error("agent {id}: the config column is not valid JSON: {message}")]
    BadConfig { id: String, message: String },
}

/// Schema migrations; index i upgrades `user_version` i → i+1.
pub const MIGRATIONS: &[&str] = &[
    "CREATE TABLE agent_config (
        id            TEXT PRIMARY KEY,
        n             INTEGER NOT NULL UNIQUE,
        title         TEXT NOT NULL,
        workspace     TEXT NOT NULL,
        agent_type    TEXT NOT NULL DEFAULT 'cicy',
        role          TEXT NOT NULL DEFAULT 'worker',
        role_template TEXT NOT NULL,
        default_model TEXT,
        master_id     TEXT REFERENCES agent_config(id),
        config        TEXT NOT NULL DEFAULT '{}',
        created_at    TEXT NOT NULL,
        updated_at    TEXT NOT NULL
    );",
    // docs/design.md §10: todos and reply obligations (`crate::wake`). No foreign key to
    // agent_config: the wake code checks the agent itself, and a row must never block a delete.
    "CREATE TABLE todo (
        agent_id TEXT NOT NULL,
        id       INTEGER NOT NULL,
        text     TEXT NOT NULL,
        at_local TEXT NOT NULL,
        at_unix  INTEGER NOT NULL,
        status   TEXT NOT NULL CHECK (status IN ('pending', 'claimed', 'done', 'removed')),
        attempt  INTEGER NOT NULL DEFAULT 0,
        created  TEXT NOT NULL,
        done_at  TEXT,
        PRIMARY KEY (agent_id, id)
    );
    CREATE INDEX todo_due ON todo (status, at_unix);
    CREATE TABLE obligation (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        agent_id    TEXT NOT NULL,
        conv_id     TEXT NOT NULL,
        message_ids TEXT NOT NULL,
        claimed_at  TEXT NOT NULL,
        turn_id     TEXT,
        resolved_at TEXT,
        resolved_by TEXT CHECK (resolved_by IN ('agent', 'fallback', 'notice'))
    );
    CREATE INDEX obligation_open ON obligation (agent_id, resolved_at);",
    // docs/design.md §11: conversations, members, messages, deliveries, tasks and cron jobs
    // (`crate::messages`). Principals are `w-<n>` or `human:<name>`; like the wake tables, no
    // foreign key to agent_config, so deleting an agent never fails on its messages.
    "CREATE TABLE conversation (
        id          TEXT PRIMARY KEY,
        kind        TEXT NOT NULL CHECK (kind IN ('direct', 'group')),
        name        TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        created_by  TEXT NOT NULL,
        created_at  TEXT NOT NULL
    );
    CREATE INDEX conversation_name ON conversation (kind, name);
    CREATE TABLE member (
        conv_id    TEXT NOT NULL REFERENCES conversation(id),
        principal  TEXT NOT NULL CHECK (principal GLOB 'w-[0-9]*' OR principal GLOB 'human:?*'),
        visibility TEXT NOT NULL DEFAULT 'visible' CHECK (visibility IN ('visible', 'internal')),
        active     INTEGER NOT NULL DEFAULT 1 CHECK (active IN (0, 1)),
        PRIMARY KEY (conv_id, principal)
    );
    CREATE INDEX member_principal ON member (principal, active);
    CREATE TABLE message (
        id           TEXT PRIMARY KEY,
        conv_id      TEXT NOT NULL REFERENCES conversation(id),
        thread_root  TEXT REFERENCES message(id),
        sender       TEXT NOT NULL,
        content      TEXT NOT NULL,
        content_type TEXT NOT NULL DEFAULT 'text/plain',
        metadata     TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata) AND json_type(metadata) = 'object'),
        created_at   TEXT NOT NULL,
        seq          INTEGER NOT NULL CHECK (seq >= 1),
        UNIQUE (conv_id, seq)
    );
    CREATE INDEX message_thread ON message (thread_root, seq);
    CREATE TABLE delivery (
        message_id    TEXT NOT NULL REFERENCES message(id),
        agent_id      TEXT NOT NULL,
        state         TEXT NOT NULL CHECK (state IN ('pending', 'claimed', 'answered')),
        file          TEXT,
        obligation_id INTEGER,
        PRIMARY KEY (message_id, agent_id)
    );
    CREATE INDEX delivery_state ON delivery (agent_id, state);
    CREATE TABLE task (
        id              TEXT PRIMARY KEY,
        conv_id         TEXT NOT NULL REFERENCES conversation(id),
        task_key        TEXT NOT NULL,
        title           TEXT NOT NULL,
        status          TEXT NOT NULL CHECK (status IN ('todo', 'in_progress', 'blocked', 'done')),
        assignee        TEXT,
        created_by      TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        blocked_reason  TEXT,
        context_label   TEXT,
        created_at      TEXT NOT NULL,
        updated_at      TEXT NOT NULL,
        UNIQUE (conv_id, task_key),
        UNIQUE (conv_id, idempotency_key)
    );
    CREATE INDEX task_assignee ON task (assignee, conv_id, status);
    CREATE TABLE cron_job (
        agent_id TEXT NOT NULL,
        conv_id  TEXT NOT NULL REFERENCES conversation(id),
        name     TEXT NOT NULL,
        kind     TEXT NOT NULL CHECK (kind IN ('cron', 'every')),
        schedule TEXT NOT NULL,
        message  TEXT NOT NULL,
        next_run INTEGER NOT NULL,
        PRIMARY KEY (agent_id, name)
    );",
    // docs/design.md §11 master/worker: one row per `msg` (`crate::messages::store` call.rs). The
    // state decides who carries the answer back: a waiting tool takes it; otherwise a 🔔
    // message does, when `callback` asks for one.
    "CREATE TABLE msg_call (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        from_p      TEXT NOT NULL,
        to_agent    TEXT NOT NULL,
        conv_id     TEXT NOT NULL REFERENCES conversation(id),
        message_id  TEXT,
        text        TEXT NOT NULL,
        callback    INTEGER NOT NULL CHECK (callback IN (0, 1)),
        state       TEXT NOT NULL CHECK (state IN ('waiting', 'queued', 'done')),
        reply       TEXT,
        created_at  TEXT NOT NULL,
        done_at     TEXT
    );
    CREATE INDEX msg_call_to ON msg_call (to_agent, state);
    CREATE INDEX msg_call_from ON msg_call (from_p, state);",
    // docs/design.md §13 idle autonomy: the job an agent's autonomy runs now, one row per agent
    // (`crate::autonomy::lease`), so another process can report it.
    "CREATE TABLE lease (
        agent_id    TEXT PRIMARY KEY,
        job         TEXT NOT NULL,
        pid         INTEGER,
        pgid        INTEGER,
        priority    INTEGER NOT NULL,
        started_at  TEXT NOT NULL
    );",
    // docs/design.md §10: what each claimed file was (inbox name, archive name, inode, size, mtime;
    // `crate::wake::obligation::ClaimedFile`), so a new message saved under a claimed name is
    // not taken for the claimed one. NULL on rows claimed before this column.
    "ALTER TABLE obligation ADD COLUMN files TEXT;",
    // The workspace index (`workspaces`): each row's canonical workspace path, so `create`
    // checks for shared and nested workspaces by indexed lookups. Rows from before get theirs
    // in code, right after (`workspaces::fill`).
    "ALTER TABLE agent_config ADD COLUMN real_path BLOB;
    CREATE UNIQUE INDEX agent_real_path ON agent_config (real_path);",
];

/// The schema version whose migration adds `agent_config.real_path`.
const REAL_PATH_VERSION: i64 = 7;

/// How long a connection waits for another process's write transaction before SQLite reports
/// `database is locked` (ours: creates in parallel each hold the lock for milliseconds).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// An open registry.
pub struct Registry {
    conn: Connection,
    path: PathBuf,
}

impl Registry {
    /// Opens (creating if needed) the database and brings its schema up to date.
    ///
    /// Errors: [`RegistryError::ReadOnly`] when the file or its folder cannot be written,
    /// [`RegistryError::TooNew`], and [`RegistryError::Sql`] for anything else SQLite reports.
    pub fn open(path: &Path) -> Result<Self, RegistryError> {
        Self::open_writable(path).map_err(|e| match e {
            RegistryError::Sql { source, .. } if cannot_write(&source) => match read_only_part(path) {
                Some(what) => RegistryError::ReadOnly { path: path.to_path_buf(), what },
                None => RegistryError::Sql { path: path.to_path_buf(), source },
            },
            other => other,
        })
    }

    /// Opens an existing database for reading only (`ls`, `show`, `history`): nothing is
    /// created, migrated or written, so a read-only `CICY_HOME` works. When SQLite cannot make
    /// the WAL index beside the file (a read-only folder), the file is read as immutable: no
    /// process of ours can be writing to a folder nobody may write.
    ///
    /// Errors: [`RegistryError::TooNew`], [`RegistryError::TooOld`] (run a writing command
    /// first), [`RegistryError::Sql`].
    pub fn open_read_only(path: &Path) -> Result<Self, RegistryError> {
        let sql = |source| RegistryError::Sql { path: path.to_path_buf(), source };
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let version = |conn: &Connection| conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0));
        let conn = Connection::open_with_flags(path, flags).map_err(sql)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
        let (conn, found) = match version(&conn) {
            Ok(v) => (conn, v),
            Err(e) if cannot_write(&e) => {
                let conn = Connection::open_with_flags(immutable_uri(path), flags).map_err(sql)?;
                conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
                let v = version(&conn).map_err(sql)?;
                (conn, v)
            }
            Err(e) => return Err(sql(e)),
        };
        let supported = MIGRATIONS.len() as i64;
        if found > supported {
            return Err(RegistryError::TooNew { path: path.to_path_buf(), found, supported });
        }
        if found < supported {
            return Err(RegistryError::TooOld { path: path.to_path_buf(), found, supported });
        }
        Ok(Self { conn, path: path.to_path_buf() })
    }

    fn open_writable(path: &Path) -> Result<Self, RegistryError> {
        let sql = |source| RegistryError::Sql { path: path.to_path_buf(), source };
        let conn = Connection::open(path).map_err(sql)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
        set_wal(&conn).map_err(sql)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(sql)?;
        let mut reg = Self { conn, path: path.to_path_buf() };
        reg.migrate()?;
        Ok(reg)
    }

    fn sql_err(&self, source: rusqlite::Error) -> RegistryError {
        RegistryError::Sql { path: self.path.clone(), source }
    }

    fn migrate(&mut self) -> Result<(), RegistryError> {
        let supported = MIGRATIONS.len() as i64;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|source| RegistryError::Sql { path: self.path.clone(), source })?;
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|source| RegistryError::Sql { path: self.path.clone(), source })?;
        if version > supported {
            return Err(RegistryError::TooNew { path: self.path.clone(), found: version, supported });
        }
        for (i, m) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            tx.execute_batch(m)
                .and_then(|_| tx.pragma_update(None, "user_version", i as i64 + 1))
                .map_err(|source| RegistryError::Sql { path: self.path.clone(), source })?;
        }
        if version < REAL_PATH_VERSION {
            workspaces::fill(&tx).map_err(|source| RegistryError::Sql { path: self.path.clone(), source })?;
        }
        tx.commit().map_err(|source| RegistryError::Sql { path: self.path.clone(), source })
    }

    /// Inserts a new agent with the next free `w-<n>` and returns its row, in one write
    /// transaction (`BEGIN IMMEDIATE`), so parallel creates get distinct ids and the workspace
    /// check sees every row committed before.
    ///
    /// `workspace_for(id)` gives the default workspace when `new.workspace` is `None`; an id
    /// whose default workspace is already another agent's (given to it as `--workspace`) is
    /// skipped, so a default create never fails on it.
    ///
    /// Errors: [`RegistryError::NoMaster`], [`RegistryError::WorkspaceTaken`] (a given
    /// workspace that is another agent's, compared through symlinks by the index of
    /// `workspaces`), [`RegistryError::WorkspaceHolds`], [`RegistryError::Sql`].
    pub fn create(&mut self, new: NewAgent, workspace_for: impl Fn(&str) -> PathBuf) -> Result<AgentRecord, RegistryError> {
        let path = self.path.clone();
        let sql = |source| RegistryError::Sql { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql)?;
        if let Some(m) = &new.master_id {
            let found: Option<String> =
                tx.query_row("SELECT id FROM agent_config WHERE id = ?1", [m], |r| r.get(0)).optional().map_err(sql)?;
            if found.is_none() {
                return Err(RegistryError::NoMaster(m.clone()));
            }
        }
        let mut n: i64 = tx.query_row("SELECT COALESCE(MAX(n), 0) + 1 FROM agent_config", [], |r| r.get(0)).map_err(sql)?;
        let (workspace, key) = match new.workspace {
            Some(w) => {
                let key = workspaces::key(&w);
                if let Some((other, _)) = workspaces::same(&tx, &key).map_err(sql)? {
                    return Err(RegistryError::WorkspaceTaken { path: w, other });
                }
                if let Some(why) = misplaced(&key, &path, &tx).map_err(sql)? {
                    return Err(RegistryError::WorkspaceHolds { path: w, why });
                }
                (w, key)
            }
            // Each skipped id's default workspace belongs to a distinct row, so this ends.
            None => loop {
                let w = workspace_for(&format!("w-{n}"));
                let key = workspaces::key(&w);
                if workspaces::same(&tx, &key).map_err(sql)?.is_none() {
                    break (w, key);
                }
                n += 1;
            },
        };
        let id = format!("w-{n}");
        let now = crate::fsutil::now_rfc3339();
        let config_json = serde_json::to_string(&new.config).unwrap_or_else(|_| "{}".to_string());
        tx.execute(
            "INSERT INTO agent_config (id, n, title, workspace, agent_type, role, role_template,
                default_model, master_id, config, created_at, updated_at, real_path)
             VALUES (?1, ?2, ?3, ?4, 'cicy', ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11)",
            params![
                id,
                n,
                new.title,
                workspace.to_string_lossy(),
                new.role,
                new.role_template,
                new.default_model,
                new.master_id,
                config_json,
                now,
                key
            ],
        )
        .map_err(sql)?;
        tx.commit().map_err(sql)?;
        self.get(&id)
    }

    /// Hands over the connection (WAL, busy timeout and schema already set) and the file's
    /// path to another owner of tables in the same file (the runtime's `wake::db`,
    /// `messages::store`), with `synchronous=FULL`: what they commit (an obligation, a
    /// posted message) survives a power loss once the commit returns.
    ///
    /// Errors: [`RegistryError::Sql`].
    pub fn into_durable(self) -> Result<(Connection, PathBuf), RegistryError> {
        match self.conn.pragma_update(None, "synchronous", "FULL") {
            Ok(()) => Ok((self.conn, self.path)),
            Err(source) => Err(RegistryError::Sql { path: self.path, source }),
        }
    }

    /// The database file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The agent with this id.
    pub fn get(&self, id: &str) -> Result<AgentRecord, RegistryError> {
        let row = self.conn.query_row(&format!("{SELECT} WHERE id = ?1"), [id], read_row).optional().map_err(|e| self.sql_err(e))?;
        row.ok_or_else(|| RegistryError::NotFound(id.to_string()))?.into_record()
    }

    /// Removes agent `id`'s row (used to undo a `create` whose workspace could not be made).
    pub fn delete(&self, id: &str) -> Result<(), RegistryError> {
        self.conn.execute("DELETE FROM agent_config WHERE id = ?1", [id]).map_err(|e| self.sql_err(e))?;
        Ok(())
    }

    /// All agents in creation order.
    pub fn list(&self) -> Result<Vec<AgentRecord>, RegistryError> {
        let mut stmt = self.conn.prepare(&format!("{SELECT} ORDER BY n")).map_err(|e| self.sql_err(e))?;
        let rows = stmt.query_map([], read_row).map_err(|e| self.sql_err(e))?;
        let mut out = Vec::new();
        for r in rows {
            out.push(r.map_err(|e| self.sql_err(e))?.into_record()?);
        }
        Ok(out)
    }
}

/// Puts the database in WAL mode (persistent in the file, so only the first open of a new file
/// changes it). The switch needs the file to itself and SQLite reports `SQLITE_BUSY` for it at
/// once, without calling the busy handler, while another process has the file open (parallel
/// creates on a new `CICY_HOME`), so it is retried here until [`BUSY_TIMEOUT`].
fn set_wal(conn: &Connection) -> rusqlite::Result<()> {
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0)) {
            Ok(_) => return Ok(()),
            Err(e) if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) && started.elapsed() < BUSY_TIMEOUT => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Why the workspace of index key `key` may not be an agent's, if it may not: it holds the home
/// of the registry at `db` (its folder) or another agent's workspace, or lies inside one of them
/// — the home's `workers/<name>` excepted, where default workspaces live. Compared through
/// symlinks where the paths exist.
fn misplaced(key: &[u8], db: &Path, tx: &Transaction<'_>) -> rusqlite::Result<Option<String>> {
    let ws = PathBuf::from(std::ffi::OsString::from_vec(key.to_vec()));
    let home = db.parent().map(|h| (h, h.canonicalize().unwrap_or_else(|_| h.to_path_buf())));
    let the_home = |h: &Path| format!("the cicy home {} (its API token, registry, roles and every agent's files)", h.display());
    if let Some((h, _)) = home.as_ref().filter(|(_, h)| h.starts_with(&ws)) {
        return Ok(Some(format!("holds {}", the_home(h))));
    }
    if let Some(why) = workspaces::nested(tx, key)? {
        return Ok(Some(why));
    }
    Ok(home.and_then(|(h, h_real)| {
        (ws.starts_with(&h_real) && ws.parent() != Some(h_real.join("workers").as_path()))
            .then(|| format!("is inside {}; only {} is for workspaces there", the_home(h), h.join("workers/<name>").display()))
    }))
}

/// Whether SQLite failed for want of write access (it says `unable to open database file` when
/// it cannot create the file or its journal, `attempt to write a readonly database` otherwise).
fn cannot_write(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly))
}

/// Which part of the registry's place this process may not write (`access(2)` with `W_OK`, so
/// it answers for this user and a read-only mount), or `None` when both are writable.
fn read_only_part(db: &Path) -> Option<&'static str> {
    let writable = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
            // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
            .is_ok_and(|c| unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0)
    };
    let folder = db.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !writable(folder) {
        Some("its folder")
    } else if db.exists() && !writable(db) {
        Some("the file")
    } else {
        None
    }
}

/// `file:` URI of `path` with `immutable=1` (SQLite URI filenames: `%`, `?` and `#` escaped).
fn immutable_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            c => uri.push(c),
        }
    }
    uri.push_str("?immutable=1");
    uri
}

const SELECT: &str = "SELECT id, title, workspace, agent_type, role, role_template, default_model,
    master_id, config, created_at, updated_at FROM agent_config";

struct RawRow {
    record: AgentRecord,
    config: String,
}

impl RawRow {
    fn into_record(self) -> Result<AgentRecord, RegistryError> {
        let mut record = self.record;
        record.config =
            serde_json::from_str(&self.config).map_err(|e| RegistryError::BadConfig { id: record.id.clone(), message: e.to_string() })?;
        Ok(record)
    }
}

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok(RawRow {
        record: AgentRecord {
            id: r.get(0)?,
            title: r.get(1)?,
            workspace: PathBuf::from(r.get::<_, String>(2)?),
            agent_type: r.get(3)?,
            role: r.get(4)?,
            role_template: r.get(5)?,
            default_model: r.get(6)?,
            master_id: r.get(7)?,
            config: AgentSettings::default(),
            created_at: r.get(9)?,
            updated_at: r.get(10)?,
        },
        config: r.get(8)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_agent(title: &str) -> NewAgent {
        NewAgent {
            title: title.into(),
            workspace: None,
            role: "worker".into(),
            role_template: "assistant".into(),
            default_model: None,
            master_id: None,
            config: AgentSettings::default(),
        }
    }

    #[test]
    fn ids_are_allocated_in_order_and_rows_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("cicy.db");
        let mut reg = Registry::open(&db).unwrap();
        let a = reg.create(new_agent("one"), |id| dir.path().join(id)).unwrap();
        let mut b = new_agent("two");
        b.master_id = Some("w-1".into());
        b.config.api_style = Some(ApiStyle::Openai);
        let b = reg.create(b, |id| dir.path().join(id)).unwrap();
        assert_eq!((a.id.as_str(), b.id.as_str()), ("w-1", "w-2"));
        assert_eq!(b.workspace, dir.path().join("w-2"));
        drop(reg);
        let reg = Registry::open(&db).unwrap();
        let got = reg.get("w-2").unwrap();
        assert_eq!(got.master_id.as_deref(), Some("w-1"));
        assert_eq!(got.config.api_style, Some(ApiStyle::Openai));
        assert_eq!(reg.list().unwrap().len(), 2);
        let v: i64 = reg.conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, 7);
    }

    #[test]
    fn unknown_master_and_unknown_agent_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let mut reg = Registry::open(&dir.path().join("cicy.db")).unwrap();
        let mut a = new_agent("x");
        a.master_id = Some("w-9".into());
        assert_eq!(reg.create(a, |id| dir.path().join(id)).unwrap_err().to_string(), "master `w-9` does not exist");
        assert_eq!(reg.get("w-3").unwrap_err().to_string(), "no agent `w-3` (see `cicy-agent ls`)");
    }

    #[test]
    fn a_read_only_open_reads_rows_and_refuses_an_unmigrated_file() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("cicy.db");
        Registry::open(&db).unwrap().create(new_agent("one"), |id| dir.path().join(id)).unwrap();
        let reg = Registry::open_read_only(&db).unwrap();
        assert_eq!(reg.get("w-1").unwrap().title, "one");
        assert!(reg.delete("w-1").is_err(), "a read-only registry cannot write");
        let old = dir.path().join("old.db");
        Connection::open(&old).unwrap().execute_batch("CREATE TABLE t (x)").unwrap();
        assert_eq!(
            Registry::open_read_only(&old).err().unwrap().to_string(),
            format!(
                "registry {} has schema version 0, older than this cicy-agent's ({}); a command that writes (e.g. `create`) upgrades it",
                old.display(),
                MIGRATIONS.len()
            )
        );
    }

    #[test]
    fn the_immutable_uri_escapes_what_sqlite_reads_as_uri_syntax() {
        assert_eq!(immutable_uri(Path::new("/a b/x?y#z%.db")), "file:/a b/x%3fy%23z%25.db?immutable=1");
    }

    #[test]
    fn a_database_of_schema_version_2_gains_the_message_tables_and_keeps_agents_and_todos() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("cicy.db");
        let old = Connection::open(&db).unwrap();
        for m in &MIGRATIONS[..2] {
            old.execute_batch(m).unwrap();
        }
        old.execute_batch(
            "PRAGMA user_version = 2;
             INSERT INTO agent_config (id, n, title, workspace, role_template, created_at, updated_at)
             VALUES ('w-1', 1, 'Ada', '/w', 'assistant', 't', 't');
             INSERT INTO todo (agent_id, id, text, at_local, at_unix, status, created)
             VALUES ('w-1', 1, 'plan', '2026-12-01T09:00', 1, 'pending', 't');",
        )
        .unwrap();
        drop(old);
        let reg = Registry::open(&db).unwrap();
        assert_eq!(reg.get("w-1").unwrap().title, "Ada");
        let q = |sql: &str| reg.conn.query_row(sql, [], |r| r.get::<_, String>(0)).unwrap();
        assert_eq!(q("SELECT text FROM todo WHERE agent_id = 'w-1' AND id = 1"), "plan");
        assert_eq!(q("SELECT CAST(user_version AS TEXT) FROM pragma_user_version"), MIGRATIONS.len().to_string());
        for t in ["conversation", "member", "message", "delivery", "task", "cron_job", "msg_call"] {
            assert_eq!(q(&format!("SELECT CAST(COUNT(*) AS TEXT) FROM {t}")), "0", "{t}");
        }
        let bad = reg
            .conn
            .execute("INSERT INTO conversation (id, kind, name, created_by, created_at) VALUES ('c', 'channel', 'x', 'w-1', 't')", []);
        assert!(bad.unwrap_err().to_string().contains("CHECK constraint failed"));
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("cicy.db");
        Connection::open(&db).unwrap().pragma_update(None, "user_version", 99).unwrap();
        let e = Registry::open(&db).err().unwrap().to_string();
        assert!(e.contains("schema version 99"), "{e}");
    }
}
