//! Role templates, `meta.yaml`, tool groups and AGENTS.md (docs/design.md §3).
//!
//! Owns reading a template (`system.md`, `role.md`, `meta.yaml`) from `$CICY_HOME/roles/<slug>/`
//! with the packaged `roles/` compiled in as the fallback (per file: a user file wins, even
//! empty), `lite-config.json` tool groups, and the AGENTS.md seed and `<role>` body. Everything
//! here is re-read every turn so edits take effect on the next round. It does not run tools.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use cicy_store::home::Home;

/// Packaged role templates: (slug, system.md, role.md, meta.yaml).
const PACKAGED_ROLES: &[(&str, &str, &str, &str)] = &[
    (
        "assistant",
        include_str!("../../../roles/assistant/system.md"),
        include_str!("../../../roles/assistant/role.md"),
        include_str!("../../../roles/assistant/meta.yaml"),
    ),
    (
        "concierge",
        include_str!("../../../roles/concierge/system.md"),
        include_str!("../../../roles/concierge/role.md"),
        include_str!("../../../roles/concierge/meta.yaml"),
    ),
    (
        "coordinator",
        include_str!("../../../roles/coordinator/system.md"),
        include_str!("../../../roles/coordinator/role.md"),
        include_str!("../../../roles/coordinator/meta.yaml"),
    ),
    (
        "developer",
        include_str!("../../../roles/developer/system.md"),
        include_str!("../../../roles/developer/role.md"),
        include_str!("../../../roles/developer/meta.yaml"),
    ),
];

/// The packaged `config/lite-config.json`.
const PACKAGED_LITE_CONFIG: &str = include_str!("../../../config/lite-config.json");

/// cicy: 200 tool rounds per turn unless meta.yaml says otherwise.
pub const DEFAULT_MAX_TOOL_ROUNDS: u32 = 200;

/// Errors loading roles or tool configuration; each names the file and field.
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    /// `skipped`: empty, or a note naming `roles/` folders skipped for their names.
    #[error("unknown role template `{slug}` (available: {available}){skipped}")]
    Unknown { slug: String, available: String, skipped: String },
    #[error("role template name `{0}` is not valid: use letters, digits, `-` and `_`")]
    BadSlug(String),
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{file}: {message}")]
    BadMeta { file: String, message: String },
    #[error("{file}: {source}")]
    BadMcp { file: String, source: crate::mcp::McpConfigError },
    #[error("{file}: {source}")]
    BadAutonomy { file: String, source: crate::autonomy::SettingsError },
    #[error("{file}: tools: `{name}` is neither a tool group nor a tool (groups: {groups}; tools: {tools})")]
    UnknownTool { file: String, name: String, groups: String, tools: String },
    #[error("{file}: {message}")]
    BadLiteConfig { file: String, message: String },
}

/// `meta.yaml` of a role template.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleMeta {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub name_zh: Option<String>,
    /// Shown when history is empty; never sent to the model.
    #[serde(default)]
    pub greeting: Option<String>,
    #[serde(default)]
    pub greeting_zh: Option<String>,
    /// Group or tool names; expanded by [`ToolConfig::expand`].
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub max_tool_rounds: Option<u32>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub description: Option<String>,
    /// The model's context window in tokens (used by automatic compaction).
    #[serde(default)]
    pub context_window: Option<u64>,
    /// How long a `task` sub-agent may run, in seconds (CMDC: 120).
    #[serde(default)]
    pub task_timeout_secs: Option<u64>,
    /// How long `ask_user` waits for the user's answer, in seconds (CMDC: 300).
    #[serde(default)]
    pub ask_user_timeout_secs: Option<u64>,
    /// Programs run at the turn's hook points, validated while parsing (docs/design.md §12, `crate::hooks`).
    #[serde(default)]
    pub hooks: crate::hooks::HooksConfig,
    /// `strict`: a tool call runs only if the active skills allow it (CMDC SkillGuard, see
    /// `crate::tools::skill_guard`); `warn`: it runs with a system event; default `off`.
    #[serde(default)]
    pub skill_guard: crate::skill_guard::Mode,
    /// MCP servers whose tools join each turn as `mcp__<server>__<tool>` (docs/design.md §12).
    #[serde(default, deserialize_with = "crate::unique_map::deserialize")]
    pub mcp_servers: BTreeMap<String, crate::mcp::McpServerConfig>,
    /// Idle autonomy for agents of this role (docs/design.md §13, `crate::autonomy::settings`).
    #[serde(default)]
    pub autonomy: crate::autonomy::AutonomyConfig,
}

/// A loaded role template.
#[derive(Debug, Clone)]
pub struct RoleTemplate {
    pub slug: String,
    pub system_md: String,
    pub role_md: String,
    pub meta: RoleMeta,
    /// Where meta.yaml came from (a path, or `packaged roles/<slug>/meta.yaml`), for errors.
    pub meta_source: String,
    /// The tool names meta.yaml's `tools` expands to, sorted and unique.
    pub tools: Vec<String>,
}

impl RoleTemplate {
    /// `max_tool_rounds` or the cicy default of 200; at least 1 ([`parse_meta`] refuses 0).
    pub fn max_tool_rounds(&self) -> u32 {
        self.meta.max_tool_rounds.unwrap_or(DEFAULT_MAX_TOOL_ROUNDS).max(1)
    }
}

fn valid_slug(slug: &str) -> bool {
    !slug.is_empty() && slug.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Every role template slug: packaged ones and the folders of `$CICY_HOME/roles/`, sorted.
pub fn list_templates(home: &Home) -> Vec<String> {
    let mut slugs: Vec<String> = PACKAGED_ROLES.iter().map(|r| r.0.to_string()).collect();
    if let Ok(rd) = std::fs::read_dir(home.roles_dir()) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() && valid_slug(&name) {
                slugs.push(name);
            }
        }
    }
    slugs.sort();
    slugs.dedup();
    slugs
}

/// Folders of `$CICY_HOME/roles/` that [`list_templates`] skips because their name is not a
/// valid template name (letters, digits, `-`, `_`), sorted; shown lossily when not UTF-8.
pub fn invalid_template_dirs(home: &Home) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(home.roles_dir())
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !valid_slug(n))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Loads template `slug` and validates its meta.yaml and tool names against `tools`.
pub fn load_template(home: &Home, slug: &str, tools: &ToolConfig) -> Result<RoleTemplate, RoleError> {
    if !valid_slug(slug) {
        return Err(RoleError::BadSlug(slug.to_string()));
    }
    let packaged = PACKAGED_ROLES.iter().find(|r| r.0 == slug);
    let user_dir = home.roles_dir().join(slug);
    if packaged.is_none() && !user_dir.is_dir() {
        let skipped = match invalid_template_dirs(home).as_slice() {
            [] => String::new(),
            names => format!("; skipped for their names: {}", names.iter().map(|n| format!("roles/{n}")).collect::<Vec<_>>().join(", ")),
        };
        return Err(RoleError::Unknown { slug: slug.to_string(), available: list_templates(home).join(", "), skipped });
    }
    let pick = |file: &str, packaged_text: Option<&str>| pick_file(&user_dir, slug, file, packaged_text);
    let (system_md, _) = pick("system.md", packaged.map(|r| r.1))?;
    let (role_md, _) = pick("role.md", packaged.map(|r| r.2))?;
    let (meta_text, meta_source) = pick("meta.yaml", packaged.map(|r| r.3))?;
    let meta = parse_meta(&meta_text, &meta_source)?;
    let expanded = tools.expand(&meta.tools, &meta_source)?;
    Ok(RoleTemplate { slug: slug.to_string(), system_md, role_md, meta, meta_source, tools: expanded })
}

/// A template file: `$CICY_HOME/roles/<slug>/<file>` when it exists, else the packaged text;
/// with where it came from, for errors.
fn pick_file(user_dir: &Path, slug: &str, file: &str, packaged_text: Option<&str>) -> Result<(String, String), RoleError> {
    let path = user_dir.join(file);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok((text, path.display().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok((packaged_text.unwrap_or_default().to_string(), format!("packaged roles/{slug}/{file}")))
        }
        Err(source) => Err(RoleError::Read { path, source }),
    }
}

/// Only the meta.yaml of template `slug`, parsed and validated (not its tool names): for a
/// caller that needs one setting often, such as idle autonomy's tick (docs/design.md §13).
///
/// Errors: as [`load_template`], but an unknown slug is [`RoleError::Unknown`] without the list.
pub fn load_meta(home: &Home, slug: &str) -> Result<RoleMeta, RoleError> {
    if !valid_slug(slug) {
        return Err(RoleError::BadSlug(slug.to_string()));
    }
    let packaged = PACKAGED_ROLES.iter().find(|r| r.0 == slug);
    let user_dir = home.roles_dir().join(slug);
    if packaged.is_none() && !user_dir.is_dir() {
        return Err(RoleError::Unknown { slug: slug.to_string(), available: String::new(), skipped: String::new() });
    }
    let (text, source) = pick_file(&user_dir, slug, "meta.yaml", packaged.map(|r| r.3))?;
    parse_meta(&text, &source)
}

/// Parses meta.yaml text; `source` names the file in errors. Empty text is an empty meta.
///
/// Errors: [`RoleError::BadMeta`] for YAML that does not parse, an unknown field,
/// `max_tool_rounds: 0` (a turn needs at least its one answering round), `max_tokens: 0`
/// (both APIs refuse it with 400 on every request), or a `task_timeout_secs` /
/// `ask_user_timeout_secs` of 0.
pub fn parse_meta(text: &str, source: &str) -> Result<RoleMeta, RoleError> {
    if text.trim().is_empty() {
        return Ok(RoleMeta::default());
    }
    let meta: RoleMeta = serde_yaml::from_str(text).map_err(|e| RoleError::BadMeta { file: source.to_string(), message: e.to_string() })?;
    if meta.max_tool_rounds == Some(0) {
        return Err(RoleError::BadMeta {
            file: source.to_string(),
            message: "max_tool_rounds: 0 is not allowed: a turn needs at least 1 round (1: one answer without tools)".to_string(),
        });
    }
    if meta.max_tokens == Some(0) {
        return Err(RoleError::BadMeta {
            file: source.to_string(),
            message: "max_tokens: 0 is not allowed: the gateway refuses a request that allows no output (at least 1)".to_string(),
        });
    }
    for (key, value) in [("task_timeout_secs", meta.task_timeout_secs), ("ask_user_timeout_secs", meta.ask_user_timeout_secs)] {
        if value == Some(0) {
            return Err(RoleError::BadMeta {
                file: source.to_string(),
                message: format!("{key}: 0 is not allowed: nothing could finish in no time (at least 1 second)"),
            });
        }
    }
    crate::mcp::validate(&meta.mcp_servers).map_err(|e| RoleError::BadMcp { file: source.to_string(), source: e })?;
    meta.autonomy.validate().map_err(|e| RoleError::BadAutonomy { file: source.to_string(), source: e })?;
    Ok(meta)
}

/// A custom tool from `lite-config.json` `customTools`: a shell command that gets the model's
/// input JSON in the environment variable `CICY_TOOL_INPUT`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomTool {
    pub description: String,
    pub command: String,
    #[serde(default = "empty_object_schema", alias = "parameters")]
    pub input_schema: serde_json::Value,
}

/// A tool name both APIs accept: `^[a-zA-Z0-9_-]{1,64}$` (Anthropic Messages `tools[].name`,
/// OpenAI `tools[].function.name`); any other is refused with HTTP 400 on every request.
fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn empty_object_schema() -> serde_json::Value {
    serde_json::json!({"type": "object", "properties": {}})
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LiteConfigFile {
    #[serde(default)]
    tool_groups: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    custom_tools: BTreeMap<String, CustomTool>,
}

/// Tool groups and custom tools: the packaged `config/lite-config.json`, overridden per key by
/// `$CICY_HOME/lite-config.json`.
#[derive(Debug, Clone, Default)]
pub struct ToolConfig {
    pub groups: BTreeMap<String, Vec<String>>,
    pub custom: BTreeMap<String, CustomTool>,
    /// The runtime's built-in tool names, given at load: a custom tool may not take one, and a
    /// role may name any of them.
    builtin: Vec<&'static str>,
}

impl ToolConfig {
    /// Reads the packaged config and the home's override; `builtin` names the runtime's
    /// built-in tools (this crate knows no tool).
    pub fn load(home: &Home, builtin: Vec<&'static str>) -> Result<Self, RoleError> {
        let mut cfg = Self { builtin, ..Self::default() };
        cfg.merge(PACKAGED_LITE_CONFIG, "packaged config/lite-config.json")?;
        let path = home.lite_config_path();
        match std::fs::read_to_string(&path) {
            Ok(text) => cfg.merge(&text, &path.display().to_string())?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(RoleError::Read { path, source }),
        }
        Ok(cfg)
    }

    fn merge(&mut self, text: &str, source: &str) -> Result<(), RoleError> {
        let file: LiteConfigFile =
            serde_json::from_str(text).map_err(|e| RoleError::BadLiteConfig { file: source.to_string(), message: e.to_string() })?;
        for (name, def) in &file.custom_tools {
            let bad = |message: String| Err(RoleError::BadLiteConfig { file: source.to_string(), message });
            if self.builtin.contains(&name.as_str()) {
                return bad(format!("customTools: `{name}` is a built-in tool name"));
            }
            if !valid_tool_name(name) {
                return bad(format!(
                    "customTools: `{name}` is not a valid tool name: the APIs accept 1 to 64 letters, digits, `_` and `-`"
                ));
            }
            if def.input_schema.get("type").and_then(|t| t.as_str()) != Some("object") {
                return bad(format!(
                    "customTools: `{name}`: input_schema must be a JSON Schema object (`\"type\": \"object\"`), got {}",
                    def.input_schema
                ));
            }
        }
        self.groups.extend(file.tool_groups);
        self.custom.extend(file.custom_tools);
        Ok(())
    }

    fn is_tool(&self, name: &str) -> bool {
        self.builtin.contains(&name) || self.custom.contains_key(name)
    }

    /// Expands group and tool names to tool names (sorted, unique). A group expands to its
    /// members (groups may name groups); any other name must be a tool. `source` names the file
    /// for the error.
    pub fn expand(&self, names: &[String], source: &str) -> Result<Vec<String>, RoleError> {
        let mut out = Vec::new();
        let mut stack: Vec<(String, usize)> = names.iter().rev().map(|n| (n.clone(), 0)).collect();
        while let Some((name, depth)) = stack.pop() {
            if let Some(members) = self.groups.get(&name).filter(|_| depth < 8) {
                stack.extend(members.iter().rev().map(|m| (m.clone(), depth + 1)));
            } else if self.is_tool(&name) {
                out.push(name);
            } else {
                let mut tools: Vec<String> = self.builtin.iter().map(|s| s.to_string()).collect();
                tools.extend(self.custom.keys().cloned());
                return Err(RoleError::UnknownTool {
                    file: source.to_string(),
                    name,
                    groups: self.groups.keys().cloned().collect::<Vec<_>>().join(", "),
                    tools: tools.join(", "),
                });
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }
}

/// The AGENTS.md written at create: `# Role` heading + role.md with placeholders filled.
pub fn seed_agents_md(role_md: &str, agent_id: &str, title: &str, workspace: &Path) -> String {
    let body = role_md.replace("{{AGENT_ID}}", agent_id).replace("{{TITLE}}", title).replace("{{WORKSPACE}}", &workspace.to_string_lossy());
    format!("# Role\n\n{}\n", body.trim())
}

/// The `<role>` body: AGENTS.md minus an optional leading `---` front-matter block, trimmed.
pub fn agents_md_body(text: &str) -> &str {
    let t = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = t.split_inclusive('\n');
    if lines.next().map(str::trim_end) == Some("---") {
        let mut offset = t.find('\n').map(|i| i + 1).unwrap_or(t.len());
        for line in lines {
            offset += line.len();
            if line.trim_end() == "---" {
                return t[offset..].trim();
            }
        }
    }
    t.trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> (tempfile::TempDir, Home) {
        let d = tempfile::tempdir().unwrap();
        let h = Home::at(d.path());
        (d, h)
    }

    /// The built-in names the packaged `assistant` role and the `core` group need; the
    /// runtime's table (and its test that every packaged role loads) is the real list.
    fn tools(h: &Home) -> ToolConfig {
        ToolConfig::load(h, vec!["inbox", "reply", "send", "shell", "skill", "sleep_until", "todo"]).unwrap()
    }

    #[test]
    fn max_tokens_zero_is_refused_naming_the_file_and_field() {
        assert_eq!(parse_meta("max_tokens: 1\n", "m.yaml").unwrap().max_tokens, Some(1));
        assert_eq!(
            parse_meta("max_tokens: 0\n", "roles/x/meta.yaml").unwrap_err().to_string(),
            "roles/x/meta.yaml: max_tokens: 0 is not allowed: the gateway refuses a request that allows no output (at least 1)"
        );
    }

    #[test]
    fn the_task_and_ask_user_timeouts_are_read_and_zero_is_refused() {
        let meta = parse_meta("task_timeout_secs: 5\nask_user_timeout_secs: 7\n", "m.yaml").unwrap();
        assert_eq!((meta.task_timeout_secs, meta.ask_user_timeout_secs), (Some(5), Some(7)));
        assert_eq!(
            parse_meta("ask_user_timeout_secs: 0\n", "m.yaml").unwrap_err().to_string(),
            "m.yaml: ask_user_timeout_secs: 0 is not allowed: nothing could finish in no time (at least 1 second)"
        );
    }

    #[test]
    fn a_user_file_wins_even_when_empty() {
        let (_d, h) = home();
        let dir = h.roles_dir().join("assistant");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("system.md"), "").unwrap();
        let t = load_template(&h, "assistant", &tools(&h)).unwrap();
        assert_eq!(t.system_md, "");
        assert!(t.role_md.contains("{{TITLE}}"));
    }

    #[test]
    fn bad_templates_are_clear_errors() {
        let (_d, h) = home();
        let tc = tools(&h);
        assert_eq!(
            load_template(&h, "nope", &tc).unwrap_err().to_string(),
            "unknown role template `nope` (available: assistant, concierge, coordinator, developer)"
        );
        let dir = h.roles_dir().join("bad");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("meta.yaml"), "tools: [core, teleport]\n").unwrap();
        let e = load_template(&h, "bad", &tc).unwrap_err().to_string();
        assert!(e.contains("meta.yaml: tools: `teleport` is neither a tool group nor a tool"), "{e}");
        std::fs::write(dir.join("meta.yaml"), "tools: [core\nname: : :\n").unwrap();
        let e = load_template(&h, "bad", &tc).unwrap_err().to_string();
        assert!(e.contains("bad/meta.yaml:"), "{e}");
        std::fs::write(dir.join("meta.yaml"), "toolz: [core]\n").unwrap();
        let e = load_template(&h, "bad", &tc).unwrap_err().to_string();
        assert!(e.contains("toolz"), "{e}");
    }

    #[test]
    fn home_lite_config_overrides_per_key() {
        let (_d, h) = home();
        std::fs::write(
            h.lite_config_path(),
            r#"{"toolGroups":{"ops":["core","deploy"]},"customTools":{"deploy":{"description":"d","command":"true"}}}"#,
        )
        .unwrap();
        let tc = tools(&h);
        assert_eq!(tc.expand(&["ops".into()], "x").unwrap(), vec!["deploy", "shell", "skill"]);
        assert_eq!(tc.groups["core"], vec!["shell", "skill"]);
    }

    #[test]
    fn agents_md_seed_and_body() {
        let s = seed_agents_md("I am {{TITLE}} ({{AGENT_ID}}) in {{WORKSPACE}}.\n", "w-1", "Ada", Path::new("/ws"));
        assert_eq!(s, "# Role\n\nI am Ada (w-1) in /ws.\n");
        assert_eq!(agents_md_body("---\nx: 1\n---\n\n# Role\nhi\n"), "# Role\nhi");
        assert_eq!(agents_md_body("\u{feff}  # Role\n"), "# Role");
        assert_eq!(agents_md_body("---\nunclosed\n"), "---\nunclosed");
    }
}
