//! An agent: creating one (`create`: workspace, AGENTS.md, registry row) and opening a
//! [`Session`] that holds what its turns need (docs/design.md §3).
//!
//! Owns resolving the agent's model, wire style and gateway, and the per-turn reading of its
//! role template, AGENTS.md, MEMORY.md and skills (re-read every turn so edits take effect on
//! the next round). The turn loop itself is `crate::turn`; the memory folder is `crate::memory`.

mod create;

use std::path::PathBuf;

pub use create::{create, CreateOptions, Created};

use crate::config::{Config, ConfigError};
use crate::conversation::history::{CurrentFile, HistoryError, HistoryStore, ReplyFile};
use crate::gateway::{GatewayClient, GatewayError, GatewaySettings};
use crate::home::{Home, HomeError};
use crate::lock::{LockError, TurnLock};
use crate::memory::{AuxTarget, Memory};
use crate::registry::{AgentRecord, Registry, RegistryError};
use crate::role::{self, RoleError, RoleTemplate, ToolConfig};
use crate::tools::reaper::{self, Reaped};
use crate::tools::skill::{self, SkillInfo};
use crate::tools::ToolSet;

/// Errors opening or creating an agent, or preparing a turn. Each names what is at fault.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Home(#[from] HomeError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Role(#[from] RoleError),
    #[error(transparent)]
    History(#[from] HistoryError),
    #[error(transparent)]
    Gateway(#[from] GatewayError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("bad title {0:?}: it must not be empty or contain control characters (tab, newline), which break `cicy-agent ls`")]
    BadTitle(String),
    #[error("no gateway configured: set CICY_GATEWAY_URL or gateway.url in {0}")]
    NoGateway(PathBuf),
    #[error("agent {0}: no model configured: pass --model at create, set `model` in the role's meta.yaml, set CICY_MODEL, or gateway.model in config.yaml")]
    NoModel(String),
    #[error("the message is empty (only whitespace): nothing to send")]
    BlankMessage,
}

/// What one turn reads fresh from disk.
#[derive(Debug, Clone)]
pub struct TurnMaterials {
    pub template: RoleTemplate,
    pub tools: ToolSet,
    pub agents_md: String,
    pub memory_md: String,
    pub skills: Vec<SkillInfo>,
    pub model: String,
    pub max_tokens: u32,
}

/// cicy: 2048 output tokens per main round.
pub const DEFAULT_MAX_TOKENS: u32 = 2048;

/// Who an agent is: the home it lives in and its registry row.
#[derive(Debug, Clone)]
pub struct AgentInfo {
    pub home: Home,
    pub record: AgentRecord,
}

/// A session's conversation: where its history files are and the active conversation.
#[derive(Debug)]
pub struct Conversation {
    pub store: HistoryStore,
    pub current: CurrentFile,
}

impl Conversation {
    /// Writes `current.json` (see [`HistoryStore::save_current`]).
    pub fn save_current(&mut self) -> Result<(), HistoryError> {
        self.store.save_current(&mut self.current)
    }

    /// Writes `reply.json` (see [`HistoryStore::save_reply`]).
    pub fn save_reply(&self, reply: &ReplyFile) -> Result<(), HistoryError> {
        self.store.save_reply(reply)
    }

    /// Writes `current.json` and `reply.json` (see [`HistoryStore::save_turn`]).
    pub fn save_turn(&mut self, reply: &ReplyFile) -> Result<(), HistoryError> {
        self.store.save_turn(&mut self.current, reply)
    }
}

/// What opening (or reloading) the agent found and fixed, for the caller to show.
#[derive(Debug, Default)]
pub struct OpenNotes {
    /// What restoring the history healed.
    pub restored: Vec<String>,
    /// Tool process groups a crash left running that opening the agent for a turn killed (or
    /// could not check); see [`crate::tools::reaper`].
    pub reaped: Vec<Reaped>,
}

/// An open agent, in parts: who it is ([`AgentInfo`]), the home's settings, its gateway
/// client, its [`Conversation`], what opening it found ([`OpenNotes`]), what the runner attaches
/// for its tools ([`Session::extensions`]) and its MCP servers. A function takes the parts it
/// uses; only this module builds or replaces them.
pub struct Session {
    agent: AgentInfo,
    settings: Config,
    client: GatewayClient,
    conversation: Conversation,
    notes: OpenNotes,
    extensions: http::Extensions,
    mcp: crate::mcp::Pool,
}

impl Session {
    /// Opens agent `id`: reads the registry, config and role (a broken role is an error here,
    /// before anything is written), restores and heals the history.
    pub fn open(home: &Home, id: &str) -> Result<Self, AgentError> {
        let record = Registry::open(&home.db_path())?.get(id)?;
        Self::open_with(home, record, None)
    }

    /// Opens the agent of `record` (its registry row, which a resident server already holds:
    /// a hundred agents opening at once do not each open the registry) for a resident server:
    /// its gateway client shares `http` (one connection pool per process) and retries a
    /// refused connection until the gateway answers, as a resident agent must not give up
    /// after cicy's 10 s. Holds no lock; errors as [`Session::open`].
    pub fn open_resident(home: &Home, record: AgentRecord, http: &reqwest::Client) -> Result<Self, AgentError> {
        Self::open_with(home, record, Some(http))
    }

    fn open_with(home: &Home, record: AgentRecord, http: Option<&reqwest::Client>) -> Result<Self, AgentError> {
        let config = Config::load(&home.config_path())?;
        let client = client_for(home, &record, &config, http)?;
        let hidden_env = vec![crate::config::ENV_API_KEY.to_string(), config.api_key_env.clone()];
        let store = HistoryStore::new(&record.workspace);
        let current = CurrentFile::new(&record.id, "");
        let mcp = crate::mcp::Pool::new(record.workspace.clone(), hidden_env);
        let mut session = Self {
            agent: AgentInfo { home: home.clone(), record },
            settings: config,
            client,
            conversation: Conversation { store, current },
            notes: OpenNotes::default(),
            extensions: http::Extensions::new(),
            mcp,
        };
        let materials = session.materials()?;
        let restored = session.conversation.store.restore(&session.agent.record.id, &materials.model)?;
        session.conversation.current = restored.current;
        session.notes.restored = restored.healed;
        Ok(session)
    }

    /// Opens agent `id` holding its turn lock. The lock is taken before the history is
    /// restored, so a restore never "heals" a turn that another process is running, and
    /// before tool process groups left running by a crashed turn are killed ([`OpenNotes::reaped`]),
    /// so no running tool of another process is.
    ///
    /// Errors: [`AgentError::Lock`] with [`LockError::Busy`] when another holder has it, and
    /// whatever [`Session::open`] reports.
    pub fn open_locked(home: &Home, id: &str) -> Result<(Self, TurnLock), AgentError> {
        let record = Registry::open(&home.db_path())?.get(id)?;
        let lock = TurnLock::try_acquire(&record.workspace, id)?;
        let mut session = Self::open(home, id)?;
        session.reap();
        Ok((session, lock))
    }

    /// Kills the tool process groups a crashed turn of this agent left running and notes them
    /// in [`OpenNotes::reaped`]. Call it holding the turn lock, so no running tool of another
    /// process is killed.
    pub fn reap(&mut self) {
        self.notes.reaped = reaper::reap(&reaper::records_dir(&self.agent.record.workspace));
    }

    /// Who this agent is.
    pub fn agent(&self) -> &AgentInfo {
        &self.agent
    }

    /// The home's configuration, as read when the session was opened.
    pub fn settings(&self) -> &Config {
        &self.settings
    }

    /// The agent's gateway client.
    pub fn client(&self) -> &GatewayClient {
        &self.client
    }

    /// The conversation: its history files and the active one.
    pub fn conversation(&self) -> &Conversation {
        &self.conversation
    }

    /// The conversation, to change; call it holding the turn lock.
    pub fn conversation_mut(&mut self) -> &mut Conversation {
        &mut self.conversation
    }

    /// What opening or the last [`Session::reload`] found and fixed.
    pub fn notes(&self) -> &OpenNotes {
        &self.notes
    }

    /// What the runner attaches for this session's tools and turns, by type: serve's wake turn
    /// (docs/design.md §10), the questions a user answers for `ask_user` (docs/design.md §12;
    /// without them the tool refuses with `error: no user attached`). A sub-agent shares them.
    pub fn extensions(&self) -> &http::Extensions {
        &self.extensions
    }

    /// See [`Session::extensions`]: serve replaces the wake turn before each turn it runs.
    pub fn extensions_mut(&mut self) -> &mut http::Extensions {
        &mut self.extensions
    }

    /// The role's MCP servers, started on first need and kept running while the session lives
    /// (docs/design.md §12).
    pub fn mcp(&self) -> &crate::mcp::Pool {
        &self.mcp
    }

    /// Reads the history from disk again, restoring and healing it as [`Session::open`] does:
    /// between two turns of a long session another process may have compacted or cleared it
    /// (or crashed and left a tool running, which is killed as in [`Session::open_locked`]).
    /// Call it holding the turn lock.
    pub fn reload(&mut self) -> Result<(), AgentError> {
        self.reap();
        let model = self.materials().map(|m| m.model).unwrap_or_else(|_| self.conversation.current.model.clone());
        let restored = self.conversation.store.restore(&self.agent.record.id, &model)?;
        self.conversation.current = restored.current;
        self.notes.restored = restored.healed;
        Ok(())
    }

    /// `/clear`: starts a new, empty conversation and makes it the active one (see
    /// [`HistoryStore::clear`]); returns the id of the conversation it replaced, which stays on
    /// disk. AGENTS.md, memory and the registry are not touched. Call it holding the turn lock.
    pub fn clear(&mut self) -> Result<String, AgentError> {
        let model = self.materials().map(|m| m.model).unwrap_or_else(|_| self.conversation.current.model.clone());
        let fresh = self.conversation.store.clear(&self.agent.record.id, &model)?;
        let old = std::mem::replace(&mut self.conversation.current, fresh);
        Ok(old.conversation_id)
    }

    /// A session for a sub-agent of this agent (docs/design.md §12 `task`): the same home, row,
    /// settings, gateway client, extensions (wake state, user) and MCP servers, with an empty
    /// conversation of its own on `model` in `store` (never this agent's history). Writes nothing
    /// and takes no lock: the parent's turn holds it.
    pub fn subagent(&self, store: HistoryStore, model: &str) -> Session {
        Session {
            agent: self.agent.clone(),
            settings: self.settings.clone(),
            client: self.client.clone(),
            conversation: Conversation { store, current: CurrentFile::new(&self.agent.record.id, model) },
            notes: OpenNotes::default(),
            extensions: self.extensions.clone(),
            mcp: self.mcp.clone(),
        }
    }

    /// This session with no MCP server started (a sub-agent of another role starts its own).
    pub fn without_mcp(mut self) -> Session {
        self.mcp = self.mcp.empty_like();
        self
    }

    /// This agent's long-term memory folder with the configured flush periods.
    pub fn memory(&self) -> Memory {
        Memory::new(&self.agent.record.workspace, self.settings.memory.clone())
    }

    /// What a memory recognizer call runs on: this agent's client and `model`.
    pub fn aux_target<'a>(&'a self, model: &'a str) -> AuxTarget<'a> {
        AuxTarget { client: &self.client, model, agent_id: &self.agent.record.id }
    }

    /// Re-reads the role template, tool config, AGENTS.md, MEMORY.md (rebuilt first when a
    /// memory file is newer, so hand edits are injected at once) and skills.
    pub fn materials(&self) -> Result<TurnMaterials, AgentError> {
        let (home, record) = (&self.agent.home, &self.agent.record);
        let tool_cfg = ToolConfig::load(home, crate::builtin_tools::names())?;
        let template = role::load_template(home, &record.role_template, &tool_cfg)?;
        let model = model_for(record, &template, &self.settings)?;
        let ws = &record.workspace;
        let agents_md = read_optional(&ws.join("AGENTS.md"))?;
        let memory = self.memory();
        let memory_md = match memory.index_text() {
            Ok(text) => text,
            // A memory folder we cannot rebuild (permissions, a full disk) must not stop the
            // turn: inject MEMORY.md as it is.
            Err(e) => {
                tracing::warn!(error = %e, "cannot rebuild MEMORY.md; using it as it is");
                read_optional(&crate::memory::index::path(memory.dir()))?
            }
        };
        Ok(TurnMaterials {
            max_tokens: template.meta.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            tools: ToolSet::new(template.tools.clone(), tool_cfg.custom, crate::builtin_tools::BUILTIN),
            agents_md: role::agents_md_body(&agents_md).to_string(),
            memory_md,
            skills: skill::list_skills(&home.skills_dir(), &skill::project_dir(ws)),
            template,
            model,
        })
    }
}

/// The gateway client of `record` under `config`; with `http`, a resident one (see
/// [`Session::open_resident`]).
fn client_for(home: &Home, record: &AgentRecord, config: &Config, http: Option<&reqwest::Client>) -> Result<GatewayClient, AgentError> {
    let url = config.gateway_url.clone().ok_or_else(|| AgentError::NoGateway(home.config_path()))?;
    let defaults = GatewaySettings::default();
    Ok(GatewayClient::new(GatewaySettings {
        http: http.cloned(),
        connect_retry_budget: if http.is_some() { None } else { defaults.connect_retry_budget },
        base_url: url,
        style: record.config.api_style.unwrap_or(config.api_style),
        api_key: config.api_key.clone(),
        api_key_env: config.api_key_env.clone(),
        connect_timeout: config.connect_timeout,
        idle_timeout: config.idle_timeout,
        max_retries: config.max_retries,
        ..defaults
    })?)
}

/// The agent's model: `--model` at create, else the role's meta.yaml, else the config's.
fn model_for(record: &AgentRecord, template: &RoleTemplate, config: &Config) -> Result<String, AgentError> {
    record
        .default_model
        .clone()
        .or_else(|| template.meta.model.clone())
        .or_else(|| config.model.clone())
        .ok_or_else(|| AgentError::NoModel(record.id.clone()))
}

/// An agent's memory without opening its conversation: `memory` commands must not restore
/// (and so possibly rewrite) the history while a turn may be running in another process.
pub struct AgentMemory {
    pub record: AgentRecord,
    pub memory: Memory,
    home: Home,
    config: Config,
}

impl AgentMemory {
    pub fn open(home: &Home, id: &str) -> Result<Self, AgentError> {
        let record = Registry::open_read_only(&home.db_path())?.get(id)?;
        let config = Config::load(&home.config_path())?;
        let memory = Memory::new(&record.workspace, config.memory.clone());
        Ok(Self { record, memory, home: home.clone(), config })
    }

    /// The gateway client and model an aux call of this agent uses: the memory recognizer,
    /// the wish guardrails' judge (`cicy-agent wish`).
    pub fn aux_client(&self) -> Result<(GatewayClient, String), AgentError> {
        let tool_cfg = ToolConfig::load(&self.home, crate::builtin_tools::names())?;
        let template = role::load_template(&self.home, &self.record.role_template, &tool_cfg)?;
        let model = model_for(&self.record, &template, &self.config)?;
        Ok((client_for(&self.home, &self.record, &self.config, None)?, model))
    }
}

/// A text file's content, or empty when it does not exist. Invalid UTF-8 is decoded lossily
/// so a hand-edited file never stops a turn.
fn read_optional(path: &std::path::Path) -> Result<String, AgentError> {
    match std::fs::read(path) {
        Ok(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(source) => Err(AgentError::Io { path: path.to_path_buf(), source }),
    }
}
