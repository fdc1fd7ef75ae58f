//! The `hooks:` block of a role's `meta.yaml` (docs/design.md §12): its types and their validation.
//!
//! Owns the 13 hook names, one hook's settings ([`HookSpec`]) and the per-name lists sorted by
//! priority ([`HooksConfig`]). Everything is checked while meta.yaml is parsed, so a bad hook is
//! a `RoleError::BadMeta` naming the file and field at create and at every turn, like any other
//! meta.yaml error. It does not run anything (that is `super::runner`) and knows no actions
//! (`super::chain`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::unique_map::UniqueMap;

/// The hook points of a turn (CMDC's 13). `on_turn_end` is accepted as another name of
/// `after_turn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookName {
    SessionStart,
    SessionEnd,
    BeforePrompt,
    BeforeRequest,
    AfterResponse,
    BeforeTool,
    OnToolError,
    AfterTool,
    AfterToolBatch,
    BeforeFinish,
    BeforeCompact,
    BeforeSteering,
    AfterTurn,
}

impl HookName {
    /// Every name, in the order of docs/design.md §12.
    pub const ALL: [HookName; 13] = [
        HookName::SessionStart,
        HookName::SessionEnd,
        HookName::BeforePrompt,
        HookName::BeforeRequest,
        HookName::AfterResponse,
        HookName::BeforeTool,
        HookName::OnToolError,
        HookName::AfterTool,
        HookName::AfterToolBatch,
        HookName::BeforeFinish,
        HookName::BeforeCompact,
        HookName::BeforeSteering,
        HookName::AfterTurn,
    ];

    /// The meta.yaml key and the `hook` field of the hook's stdin.
    pub fn as_str(self) -> &'static str {
        match self {
            HookName::SessionStart => "session_start",
            HookName::SessionEnd => "session_end",
            HookName::BeforePrompt => "before_prompt",
            HookName::BeforeRequest => "before_request",
            HookName::AfterResponse => "after_response",
            HookName::BeforeTool => "before_tool",
            HookName::OnToolError => "on_tool_error",
            HookName::AfterTool => "after_tool",
            HookName::AfterToolBatch => "after_tool_batch",
            HookName::BeforeFinish => "before_finish",
            HookName::BeforeCompact => "before_compact",
            HookName::BeforeSteering => "before_steering",
            HookName::AfterTurn => "after_turn",
        }
    }

    /// The name for a meta.yaml key (`on_turn_end` → [`HookName::AfterTurn`]).
    pub fn parse(key: &str) -> Option<Self> {
        if key == "on_turn_end" {
            return Some(HookName::AfterTurn);
        }
        Self::ALL.into_iter().find(|n| n.as_str() == key)
    }

    /// Hooks about one tool call: their `match` is tested against the tool's name.
    pub fn is_tool_hook(self) -> bool {
        matches!(self, HookName::BeforeTool | HookName::OnToolError | HookName::AfterTool)
    }

    /// What a failed hook means when its `on_error` is not set: deny where letting an
    /// unchecked call or prompt through is the risk (before_tool, before_prompt), allow
    /// elsewhere (docs/design.md §12 **[chosen]**).
    pub fn default_on_error(self) -> OnError {
        match self {
            HookName::BeforeTool | HookName::BeforePrompt => OnError::Deny,
            _ => OnError::Allow,
        }
    }
}

/// What a hook that failed (could not start, non-zero exit other than 2, timed out, printed
/// something that is not an allowed action) counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    Allow,
    Deny,
}

/// cicy: a hook gets 10 s unless `timeout_secs` says otherwise (docs/design.md §12 **[chosen]**).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The priority of a hook without one (CMDC's guide example uses 100).
pub const DEFAULT_PRIORITY: u32 = 100;
/// CMDC: priorities run from 1 to 1000, smaller first.
pub const PRIORITIES: std::ops::RangeInclusive<u32> = 1..=1000;

/// A compiled `match` pattern; equal when the pattern text is.
#[derive(Debug, Clone)]
pub struct Matcher(pub regex::Regex);

impl PartialEq for Matcher {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

/// One hook of meta.yaml, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct HookSpec {
    /// As written: a program run directly (no shell, no arguments). A relative path is looked up
    /// in the role's folder `$CICY_HOME/roles/<slug>/`, then the workspace; a bare name that is
    /// in neither is looked up on `PATH` (see `super::runner::resolve`).
    pub command: String,
    /// Tool hooks only: the hook runs for a call whose tool name matches (unanchored regex).
    pub matcher: Option<Matcher>,
    pub timeout: Duration,
    /// 1–1000, smaller first; equal priorities keep their meta.yaml order.
    pub priority: u32,
    pub on_error: OnError,
}

/// meta.yaml `hooks:`: per hook name, its hooks in the order they run (priority, then meta.yaml
/// order). Deserializing validates (see [`HooksConfig::validate`]); a hook name written twice is
/// an error (``duplicate key `before_tool` ``, [`UniqueMap`]), not a silent drop of the first.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(try_from = "UniqueMap<Vec<RawSpec>>")]
pub struct HooksConfig {
    by_name: BTreeMap<HookName, Vec<HookSpec>>,
}

impl HooksConfig {
    /// The hooks of `name`, in the order they run.
    pub fn get(&self, name: HookName) -> &[HookSpec] {
        self.by_name.get(&name).map_or(&[], Vec::as_slice)
    }

    /// Whether no hook is configured at all (a turn then starts no hook process).
    pub fn is_empty(&self) -> bool {
        self.by_name.values().all(Vec::is_empty)
    }

    /// Validates meta.yaml's map: every key a hook name, every hook a non-empty `command`, a
    /// `match` that compiles (on a tool hook only), `priority` within 1–1000, `timeout_secs` ≥ 1,
    /// `on_error` `allow` or `deny`. Errors: [`HooksError`], naming the field, e.g.
    /// `hooks.before_tool[0].priority: 0 is outside 1–1000`.
    pub fn validate(raw: BTreeMap<String, Vec<RawSpec>>) -> Result<Self, HooksError> {
        let mut by_name: BTreeMap<HookName, Vec<HookSpec>> = BTreeMap::new();
        for (key, specs) in raw {
            let Some(name) = HookName::parse(&key) else {
                return Err(HooksError::UnknownName(key));
            };
            let list = by_name.entry(name).or_default();
            for (i, spec) in specs.into_iter().enumerate() {
                list.push(spec.validate(name, &format!("hooks.{key}[{i}]"))?);
            }
        }
        for list in by_name.values_mut() {
            // Stable: equal priorities keep their order in the file.
            list.sort_by_key(|s| s.priority);
        }
        Ok(Self { by_name })
    }
}

impl TryFrom<UniqueMap<Vec<RawSpec>>> for HooksConfig {
    type Error = HooksError;

    fn try_from(raw: UniqueMap<Vec<RawSpec>>) -> Result<Self, HooksError> {
        Self::validate(raw.0)
    }
}

/// A `hooks:` entry [`HooksConfig::validate`] refuses; `at` names the hook, e.g.
/// `hooks.before_tool[0]`.
#[derive(Debug, thiserror::Error)]
pub enum HooksError {
    #[error("hooks: `{0}` is not a hook name (names: {names}; alias on_turn_end)", names = hook_names())]
    UnknownName(String),
    #[error("{at}.command: must name a program")]
    NoCommand { at: String },
    #[error("{at}.match: only tool hooks (before_tool, on_tool_error, after_tool) match a tool name")]
    MatchOnNonToolHook { at: String },
    #[error("{at}.match: `{pattern}` is not a valid regex: {source}")]
    BadMatch { at: String, pattern: String, source: regex::Error },
    #[error("{at}.priority: {priority} is outside 1–1000")]
    Priority { at: String, priority: u32 },
    #[error("{at}.timeout_secs: 0 is not allowed (at least 1)")]
    ZeroTimeout { at: String },
    #[error("{at}.on_error: `{value}` is not allow or deny")]
    OnError { at: String, value: String },
}

/// Every hook name, for the refusal of one that is none.
fn hook_names() -> String {
    HookName::ALL.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
}

/// One hook as meta.yaml spells it, before validation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSpec {
    command: String,
    #[serde(default, rename = "match")]
    matcher: Option<String>,
    #[serde(default)]
    timeout_secs: Option<u64>,
    #[serde(default)]
    priority: Option<u32>,
    #[serde(default)]
    on_error: Option<String>,
}

impl RawSpec {
    fn validate(self, name: HookName, at: &str) -> Result<HookSpec, HooksError> {
        let at = || at.to_string();
        if self.command.trim().is_empty() {
            return Err(HooksError::NoCommand { at: at() });
        }
        let matcher = match self.matcher {
            None => None,
            Some(_) if !name.is_tool_hook() => return Err(HooksError::MatchOnNonToolHook { at: at() }),
            Some(p) => match regex::Regex::new(&p) {
                Ok(r) => Some(Matcher(r)),
                Err(source) => return Err(HooksError::BadMatch { at: at(), pattern: p, source }),
            },
        };
        let priority = self.priority.unwrap_or(DEFAULT_PRIORITY);
        if !PRIORITIES.contains(&priority) {
            return Err(HooksError::Priority { at: at(), priority });
        }
        let timeout = match self.timeout_secs {
            None => DEFAULT_TIMEOUT,
            Some(0) => return Err(HooksError::ZeroTimeout { at: at() }),
            Some(s) => Duration::from_secs(s),
        };
        let on_error = match self.on_error {
            None => name.default_on_error(),
            Some(v) if v == "allow" => OnError::Allow,
            Some(v) if v == "deny" => OnError::Deny,
            Some(value) => return Err(HooksError::OnError { at: at(), value }),
        };
        Ok(HookSpec { command: self.command, matcher, timeout, priority, on_error })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<HooksConfig, String> {
        serde_yaml::from_str::<HooksConfig>(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn hooks_sort_by_priority_then_file_order_with_defaults() {
        let c = parse(
            "before_tool:\n  - {command: b.sh, priority: 200}\n  - {command: a.sh, match: '^shell$', timeout_secs: 3, on_error: allow}\n  - {command: c.sh, priority: 5}\n  - {command: d.sh}\non_turn_end:\n  - {command: end.sh}\n",
        )
        .unwrap();
        let order: Vec<(&str, u32)> = c.get(HookName::BeforeTool).iter().map(|s| (s.command.as_str(), s.priority)).collect();
        assert_eq!(order, [("c.sh", 5), ("a.sh", 100), ("d.sh", 100), ("b.sh", 200)]);
        let a = &c.get(HookName::BeforeTool)[1];
        assert_eq!(
            (a.timeout, a.on_error, a.matcher.as_ref().map(|m| m.0.as_str())),
            (Duration::from_secs(3), OnError::Allow, Some("^shell$"))
        );
        let d = &c.get(HookName::BeforeTool)[2];
        assert_eq!((d.timeout, d.on_error), (DEFAULT_TIMEOUT, OnError::Deny));
        assert_eq!(c.get(HookName::AfterTurn)[0].on_error, OnError::Allow);
        assert!(c.get(HookName::SessionEnd).is_empty() && !c.is_empty());
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases = [
            ("before_tol: [{command: x}]", "hooks: `before_tol` is not a hook name (names: session_start, session_end, before_prompt, before_request, after_response, before_tool, on_tool_error, after_tool, after_tool_batch, before_finish, before_compact, before_steering, after_turn; alias on_turn_end)"),
            ("before_tool: [{command: x, match: '(' }]", "hooks.before_tool[0].match: `(` is not a valid regex"),
            ("after_turn: [{command: x, match: 'a'}]", "hooks.after_turn[0].match: only tool hooks"),
            ("before_tool: [{command: x}, {command: y, priority: 0}]", "hooks.before_tool[1].priority: 0 is outside 1–1000"),
            ("before_tool: [{command: x, priority: 1001}]", "hooks.before_tool[0].priority: 1001 is outside 1–1000"),
            ("before_tool: [{command: x, on_error: maybe}]", "hooks.before_tool[0].on_error: `maybe` is not allow or deny"),
            ("before_tool: [{command: x, timeout_secs: 0}]", "hooks.before_tool[0].timeout_secs: 0 is not allowed"),
            ("before_tool: [{command: ' '}]", "hooks.before_tool[0].command: must name a program"),
            ("before_tool: [{command: x, when: y}]", "unknown field `when`"),
        ];
        for (yaml, want) in cases {
            let e = parse(yaml).unwrap_err();
            assert!(e.starts_with(want) || e.contains(want), "{yaml}: {e}");
        }
    }
}
