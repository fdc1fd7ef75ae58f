//! The skill guard (docs/design.md §12, CMDC SkillGuard): with `skill_guard: strict` in the role's
//! meta.yaml, a tool call runs only when the tool is in the union of the active skills'
//! `allowed_tools`.
//!
//! Owns which skills are active and the check. A skill is active in a conversation once a
//! `skill` call has read it there successfully, counted over the window the model sees (from
//! the last compaction on), so the rule survives restarts and follows `/clear` and
//! `/compact` **[chosen]**; a skill read earlier in the same batch counts for the later calls.
//! CMDC's rules: no active skill, or any active skill without `allowed_tools`, means
//! unrestricted. A skill whose SKILL.md front matter does not parse never becomes active (the
//! `skill` tool refuses to read it), so it cannot lift a `strict` guard **[chosen]**. The
//! `skill` tool itself is always allowed, so the model can load another
//! skill (which only widens the union) **[chosen]**. `warn` runs the call and emits a `system`
//! event instead (CMDC `enforce_mode: :warn`). It never edits the history or a skill.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::skill::{self, Installed};
use super::{ToolContext, ToolOutput};
pub use cicy_config::skill_guard::Mode;
use cicy_protocol::event::EventKind;
use cicy_protocol::message::{ContentBlock, Message};

/// The guard of one tool batch: the mode and the active skills with their `allowed_tools`
/// (`None`: that skill restricts nothing).
#[derive(Debug)]
pub struct Guard {
    mode: Mode,
    active: Mutex<Vec<(String, Option<Vec<String>>)>>,
}

impl Guard {
    /// The guard for the next batch of a turn whose role (read at the turn's start) says
    /// `mode`, over the conversation's `messages`, with the skills installed in `skills_dir`
    /// and the agent's `workspace`: `None` when it is off.
    pub fn for_batch(messages: &[Message], skills_dir: &Path, workspace: &Path, mode: Mode) -> Option<Arc<Self>> {
        if mode == Mode::Off {
            return None;
        }
        let skills = skill::scan_all(skills_dir, &skill::project_dir(workspace));
        Some(Arc::new(Self::new(mode, active_in(&messages[cicy_protocol::message::window_start(messages)..], &skills))))
    }

    fn new(mode: Mode, active: Vec<(String, Option<Vec<String>>)>) -> Self {
        Self { mode, active: Mutex::new(active) }
    }

    /// A guard of `mode` with no active skill, for other modules' tests.
    #[cfg(test)]
    pub(crate) fn for_tests(mode: Mode) -> Self {
        Self::new(mode, Vec::new())
    }

    /// The allowed tools, sorted, when the active skills restrict them; `None` when not.
    fn allowed(&self) -> Option<BTreeSet<String>> {
        let active = self.active.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if active.is_empty() {
            return None;
        }
        let mut union = BTreeSet::new();
        for (_, allowed) in active.iter() {
            union.extend(allowed.as_ref()?.iter().cloned());
        }
        Some(union)
    }
}

/// The skills successfully read by `skill` calls in `window`, in order, each once, with their
/// `allowed_tools` as installed now (a skill since removed restricts nothing).
fn active_in(window: &[Message], skills: &[Installed]) -> Vec<(String, Option<Vec<String>>)> {
    let blocks = || window.iter().flat_map(|m| m.content.to_blocks());
    let failed: BTreeSet<String> = blocks()
        .filter_map(|b| match b {
            ContentBlock::ToolResult { tool_use_id, is_error: true, .. } => Some(tool_use_id),
            _ => None,
        })
        .collect();
    let answered: BTreeSet<String> = blocks()
        .filter_map(|b| match b {
            ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id),
            _ => None,
        })
        .collect();
    let mut active: Vec<(String, Option<Vec<String>>)> = Vec::new();
    for b in blocks() {
        let ContentBlock::ToolUse { id, name, input } = b else { continue };
        if name != skill::NAME || failed.contains(&id) || !answered.contains(&id) {
            continue;
        }
        let Some(wanted) = input.get("name").and_then(|v| v.as_str()) else { continue };
        let entry = match skill::find(skills, wanted) {
            // Its front matter no longer parses: what it allows is unknown, so it lifts nothing.
            Some(s) if s.problem.is_some() => continue,
            Some(s) => (s.info.name.clone(), s.allowed_tools.clone()),
            None => (wanted.to_string(), None),
        };
        if !active.iter().any(|(n, _)| *n == entry.0) {
            active.push(entry);
        }
    }
    active
}

/// Called by the `skill` tool when it has read skill `name`: it is active from now on.
pub fn activate(ctx: &ToolContext, name: &str, allowed_tools: Option<Vec<String>>) {
    let Some(guard) = &ctx.skill_guard else { return };
    let mut active = guard.active.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match active.iter_mut().find(|(n, _)| n == name) {
        Some(entry) => entry.1 = allowed_tools,
        None => active.push((name.to_string(), allowed_tools)),
    }
}

/// In `strict` mode, the tools a sub-agent (`task`) started under this guard may have: what
/// the active skills allow, and `skill`. `None` when nothing restricts them. Without it a
/// child, whose fresh conversation has no active skill, would be a way around the guard.
pub fn child_limit(ctx: &ToolContext) -> Option<BTreeSet<String>> {
    let guard = ctx.skill_guard.as_ref().filter(|g| g.mode == Mode::Strict)?;
    let mut allowed = guard.allowed()?;
    allowed.insert(skill::NAME.to_string());
    Some(allowed)
}

/// The error result for a call of `tool` the guard blocks, `None` when it may run:
/// `error: tool 'X' is not in the active skills' allowed_tools (a, b)`. In `warn` mode the
/// same text (without `error: `) is a `system` event and the call runs.
pub fn refusal(ctx: &ToolContext, tool: &str) -> Option<ToolOutput> {
    let guard = ctx.skill_guard.as_ref()?;
    if tool == skill::NAME {
        return None;
    }
    let allowed = guard.allowed()?;
    if allowed.contains(tool) {
        return None;
    }
    let list = allowed.into_iter().collect::<Vec<_>>().join(", ");
    let text = format!("tool '{tool}' is not in the active skills' allowed_tools ({list})");
    match guard.mode {
        Mode::Strict => Some(ToolOutput::error(format!("error: {text}"))),
        Mode::Warn | Mode::Off => {
            if let Some(events) = &ctx.events {
                events.emit(EventKind::System { text: format!("skill guard (warn): {text}") });
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx(mode: Mode, active: Vec<(String, Option<Vec<String>>)>) -> ToolContext {
        let dir = std::env::temp_dir();
        ToolContext { skill_guard: Some(Arc::new(Guard::new(mode, active))), ..ToolContext::for_tests(&dir) }
    }

    fn allow(name: &str, tools: &[&str]) -> (String, Option<Vec<String>>) {
        (name.to_string(), Some(tools.iter().map(|t| t.to_string()).collect()))
    }

    #[test]
    fn strict_allows_only_the_union_of_the_active_skills() {
        let c = ctx(Mode::Strict, vec![allow("pdf", &["shell", "read_file"]), allow("git", &["shell", "grep"])]);
        assert_eq!(refusal(&c, "shell"), None);
        assert_eq!(refusal(&c, "grep"), None);
        assert_eq!(refusal(&c, "skill"), None);
        assert_eq!(
            refusal(&c, "write_todos"),
            Some(ToolOutput::error("error: tool 'write_todos' is not in the active skills' allowed_tools (grep, read_file, shell)"))
        );
        // Loading a skill without allowed_tools lifts the restriction.
        activate(&c, "free", None);
        assert_eq!(refusal(&c, "write_todos"), None);
    }

    #[test]
    fn warn_runs_the_call_and_says_so_in_a_system_event() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let events =
            cicy_protocol::event::Emitter::new("w-1", move |e: &cicy_protocol::event::Event| sink.lock().unwrap().push(e.kind.clone()));
        let c = ToolContext { events: Some(events), ..ctx(Mode::Warn, vec![allow("pdf", &["read_file"])]) };
        assert_eq!(refusal(&c, "shell"), None);
        let text = "skill guard (warn): tool 'shell' is not in the active skills' allowed_tools (read_file)".to_string();
        assert_eq!(*seen.lock().unwrap(), [EventKind::System { text }]);
    }

    #[test]
    fn no_active_skill_or_no_guard_restricts_nothing() {
        assert_eq!(refusal(&ctx(Mode::Strict, vec![]), "shell"), None);
        let dir = std::env::temp_dir();
        assert_eq!(refusal(&ToolContext::for_tests(&dir), "shell"), None);
        let c = ctx(Mode::Strict, vec![]);
        activate(&c, "pdf", Some(vec!["read_file".into()]));
        assert!(refusal(&c, "shell").is_some());
    }

    #[test]
    fn a_skill_counts_as_active_once_read_without_error() {
        let window = vec![
            Message::assistant(vec![
                ContentBlock::ToolUse { id: "a".into(), name: "skill".into(), input: json!({"name": "pdf"}) },
                ContentBlock::ToolUse { id: "b".into(), name: "skill".into(), input: json!({"name": "nope"}) },
                ContentBlock::ToolUse { id: "c".into(), name: "skill".into(), input: json!({}) },
                ContentBlock::ToolUse { id: "d".into(), name: "skill".into(), input: json!({"name": "pending"}) },
            ]),
            Message::user_blocks(vec![
                ContentBlock::ToolResult { tool_use_id: "a".into(), content: "# PDF".into(), is_error: false },
                ContentBlock::ToolResult { tool_use_id: "b".into(), content: "unknown".into(), is_error: true },
                ContentBlock::ToolResult { tool_use_id: "c".into(), content: "list".into(), is_error: false },
            ]),
        ];
        assert_eq!(active_in(&window, &[]), [("pdf".to_string(), None)]);
    }

    #[test]
    fn a_skill_whose_front_matter_no_longer_parses_is_not_active() {
        let dir = tempfile::tempdir().unwrap();
        for (folder, text) in [("pdf", "---\nallowed-tools: read_file\n---\n"), ("free", "---\nname: [x\n---\n")] {
            std::fs::create_dir_all(dir.path().join(folder)).unwrap();
            std::fs::write(dir.path().join(folder).join("SKILL.md"), text).unwrap();
        }
        let skills = skill::scan_all(dir.path(), &dir.path().join("none"));
        let window = vec![
            Message::assistant(vec![
                ContentBlock::ToolUse { id: "a".into(), name: "skill".into(), input: json!({"name": "pdf"}) },
                ContentBlock::ToolUse { id: "b".into(), name: "skill".into(), input: json!({"name": "free"}) },
            ]),
            Message::user_blocks(vec![
                ContentBlock::ToolResult { tool_use_id: "a".into(), content: "# PDF".into(), is_error: false },
                ContentBlock::ToolResult { tool_use_id: "b".into(), content: "read before it broke".into(), is_error: false },
            ]),
        ];
        assert_eq!(active_in(&window, &skills), [("pdf".to_string(), Some(vec!["read_file".to_string()]))]);
    }

    #[test]
    fn meta_yaml_spells_the_modes_in_lowercase() {
        let meta = cicy_config::role::parse_meta("skill_guard: strict\n", "meta.yaml").unwrap();
        assert_eq!(meta.skill_guard, Mode::Strict);
        assert_eq!(cicy_config::role::parse_meta("name: x\n", "meta.yaml").unwrap().skill_guard, Mode::Off);
        assert!(cicy_config::role::parse_meta("skill_guard: loose\n", "meta.yaml").is_err());
    }
}
