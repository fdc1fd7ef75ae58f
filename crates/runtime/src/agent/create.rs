//! Creating an agent (docs/design.md §3): the checks on its title and template, its `w-<n>` id and
//! registry row, its workspace and the AGENTS.md seeded from the role. It must not open a
//! session or run a turn; an agent whose workspace could not be made is deleted again.

use std::path::PathBuf;

use super::AgentError;
use crate::gateway::ApiStyle;
use crate::home::Home;
use crate::registry::{AgentRecord, AgentSettings, NewAgent, Registry};
use crate::role::{self, RoleTemplate, ToolConfig};

/// Options of `cicy-agent create`.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    pub title: String,
    pub role_template: String,
    pub role: String,
    pub model: Option<String>,
    pub master: Option<String>,
    pub workspace: Option<PathBuf>,
    pub api_style: Option<ApiStyle>,
}

/// What `create` did, for the CLI to report.
#[derive(Debug, Clone)]
pub struct Created {
    pub record: AgentRecord,
    /// False when an existing AGENTS.md was kept.
    pub wrote_agents_md: bool,
    /// Set when `--role` is neither `worker` nor `master` (it loses the worker marker).
    pub role_warning: Option<String>,
}

/// Creates an agent: validates the title and template, allocates `w-<n>`, makes the workspace,
/// writes AGENTS.md only if missing, inserts the registry row. A `--workspace` that is already
/// another agent's is refused ([`RegistryError::WorkspaceTaken`]); a default one never clashes
/// (see [`Registry::create`]).
pub fn create(home: &Home, opts: CreateOptions) -> Result<Created, AgentError> {
    if opts.title.trim().is_empty() || opts.title.chars().any(char::is_control) {
        return Err(AgentError::BadTitle(opts.title));
    }
    home.ensure()?;
    let tools = ToolConfig::load(home, crate::builtin_tools::names())?;
    let template = role::load_template(home, &opts.role_template, &tools)?;
    let mut reg = Registry::open(&home.db_path())?;
    let workspace = opts.workspace.map(|w| absolute(&w));
    let record = reg.create(
        NewAgent {
            title: opts.title.clone(),
            workspace,
            role: opts.role.clone(),
            role_template: template.slug.clone(),
            default_model: opts.model,
            master_id: opts.master,
            config: AgentSettings { api_style: opts.api_style, ..AgentSettings::default() },
        },
        |id| home.default_workspace(id),
    )?;
    let wrote_agents_md = match make_workspace(&record, &template) {
        Ok(wrote) => wrote,
        Err(e) => {
            // Leave no agent without a workspace behind.
            reg.delete(&record.id)?;
            return Err(e);
        }
    };
    let role_warning = match opts.role.as_str() {
        "worker" | "master" => None,
        other => Some(format!(
            "--role `{other}` is only a roster label (never prompt text) and drops the `worker` marker; set the persona with --role-template or by editing AGENTS.md"
        )),
    };
    Ok(Created { record, wrote_agents_md, role_warning })
}

/// Makes the workspace and writes AGENTS.md if it is missing; returns whether it wrote it.
fn make_workspace(record: &AgentRecord, template: &RoleTemplate) -> Result<bool, AgentError> {
    std::fs::create_dir_all(&record.workspace).map_err(|source| AgentError::Io { path: record.workspace.clone(), source })?;
    let agents_md = record.workspace.join("AGENTS.md");
    if agents_md.exists() {
        return Ok(false);
    }
    let text = role::seed_agents_md(&template.role_md, &record.id, &record.title, &record.workspace);
    crate::fsutil::write_atomic(&agents_md, text.as_bytes()).map_err(|source| AgentError::Io { path: agents_md.clone(), source })?;
    Ok(true)
}

fn absolute(p: &std::path::Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map(|d| d.join(p)).unwrap_or_else(|_| p.to_path_buf())
    }
}
