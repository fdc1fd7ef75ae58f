//! The hooks of one hook point, run in order and combined (docs/design.md §12, CMDC plugins).
//!
//! Owns reading what a hook answered ([`Action`]: stdout empty = allow, else one JSON object
//! `{"action": …}`; exit 2 = deny with stderr as the reason), which actions each hook point
//! allows ([`allowed`]), treating every other outcome as a failure (`error {kind: "hook"}` and the
//! hook's `on_error`), and combining the chain ([`run`]): priority order, deny stops, modify
//! chains (the next hook sees the modified value), injects concatenate, the last switch_model
//! wins. One `hook` event per hook run. It does not know what a decision does to the turn
//! (`super` and the turn loop do).

use std::time::Instant;

use serde_json::{Map, Value};

use super::config::{HookName, HookSpec, OnError};
use super::runner::{self, Ran};
use super::Context;
use crate::event::{ErrorKind, EventKind};

/// What a hook asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Allow,
    Deny(String),
    /// The new value of the hook point's modifiable field (`input`, `result` or `text`).
    Modify(Value),
    Inject(String),
    Skip,
    SwitchModel(String),
}

impl Action {
    /// The `action` word of the `hook` event.
    pub fn as_str(&self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny(_) => "deny",
            Action::Modify(_) => "modify",
            Action::Inject(_) => "inject",
            Action::Skip => "skip",
            Action::SwitchModel(_) => "switch_model",
        }
    }
}

/// The field a `modify` at `name` replaces, if it may modify (docs/design.md §12).
pub fn modify_field(name: HookName) -> Option<&'static str> {
    match name {
        HookName::BeforeTool => Some("input"),
        HookName::AfterTool => Some("result"),
        HookName::BeforePrompt | HookName::BeforeSteering => Some("text"),
        _ => None,
    }
}

/// Whether `action` is allowed at `name` (docs/design.md §12; CMDC's table narrowed to the actions
/// §12 names). `deny` aborts the turn where it cannot refuse something smaller, so it is not
/// allowed where nothing is left to stop (after_turn, session_end) **[chosen]**.
pub fn allowed(name: HookName, action: &Action) -> bool {
    match action {
        Action::Allow => true,
        Action::Deny(_) => !matches!(name, HookName::AfterTurn | HookName::SessionEnd),
        Action::Modify(_) => modify_field(name).is_some(),
        Action::Inject(_) => matches!(name, HookName::BeforePrompt | HookName::BeforeFinish),
        Action::Skip => matches!(name, HookName::BeforeCompact | HookName::OnToolError),
        Action::SwitchModel(_) => matches!(name, HookName::BeforeRequest | HookName::AfterResponse),
    }
}

/// What is wrong with a hook's stdout, for the `error` event; a quoted stdout is cut to 200
/// characters.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("stdout is not one JSON object ({source}): {stdout}")]
    NotJson { source: serde_json::Error, stdout: String },
    #[error("stdout is not a JSON object: {0}")]
    NotAnObject(String),
    #[error("no string `action` in {0}")]
    NoAction(String),
    #[error("unknown action `{0}`")]
    UnknownAction(String),
    #[error("action `{action}` is not allowed at {}", .at.as_str())]
    NotAllowed { action: &'static str, at: HookName },
    /// `action` as the JSON wrote it (quoted).
    #[error("`{action}` needs a non-empty string `{key}`")]
    NeedsString { action: String, key: &'static str },
    #[error("`modify` at {} needs `{field}`", .at.as_str())]
    ModifyNeeds { at: HookName, field: &'static str },
    #[error("`modify` at {}: `{field}` has the wrong type: {value}", .at.as_str())]
    ModifyWrongType { at: HookName, field: &'static str, value: Value },
}

/// Parses a hook's stdout (exit 0): empty = allow, else one JSON object with a known `action`
/// and the fields it needs. Errors: [`AnswerError`], what is wrong.
pub fn parse(name: HookName, stdout: &[u8]) -> Result<Action, AnswerError> {
    let text = String::from_utf8_lossy(stdout);
    if text.trim().is_empty() {
        return Ok(Action::Allow);
    }
    let quoted = || crate::event::preview(text.trim(), 200);
    let value: Value = serde_json::from_str(text.trim()).map_err(|source| AnswerError::NotJson { source, stdout: quoted() })?;
    let Some(obj) = value.as_object() else {
        return Err(AnswerError::NotAnObject(quoted()));
    };
    let string = |key: &'static str| -> Result<String, AnswerError> {
        match obj.get(key) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            _ => Err(AnswerError::NeedsString { action: obj.get("action").map(Value::to_string).unwrap_or_default(), key }),
        }
    };
    let action = match obj.get("action").and_then(Value::as_str) {
        Some("allow" | "continue") => Action::Allow,
        Some("deny") => Action::Deny(obj.get("reason").and_then(Value::as_str).unwrap_or("").trim().to_string()),
        Some("modify") => {
            let field = modify_field(name).ok_or(AnswerError::NotAllowed { action: "modify", at: name })?;
            let v = obj.get(field).ok_or(AnswerError::ModifyNeeds { at: name, field })?;
            let ok = match field {
                "input" => v.is_object(),
                "text" => v.as_str().is_some_and(|s| !s.trim().is_empty()),
                _ => v.is_string() || v.get("content").is_some_and(Value::is_string),
            };
            if !ok {
                return Err(AnswerError::ModifyWrongType { at: name, field, value: v.clone() });
            }
            Action::Modify(v.clone())
        }
        Some("inject") => Action::Inject(string("text")?),
        Some("skip") => Action::Skip,
        Some("switch_model") => Action::SwitchModel(string("model")?),
        Some(other) => return Err(AnswerError::UnknownAction(other.to_string())),
        None => return Err(AnswerError::NoAction(quoted())),
    };
    if !allowed(name, &action) {
        return Err(AnswerError::NotAllowed { action: action.as_str(), at: name });
    }
    Ok(action)
}

/// A hook that said no.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// As meta.yaml writes it.
    pub command: String,
    pub reason: String,
}

/// What the chain of one hook point decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    /// The first deny; no hook after it ran.
    pub denied: Option<Denied>,
    pub skipped: bool,
    /// The modifiable field after every `modify`, when any hook modified it.
    pub modified: Option<Value>,
    /// Inject texts in the order their hooks ran.
    pub injects: Vec<String>,
    /// The last `switch_model`.
    pub model: Option<String>,
}

/// Runs the hooks of `name` (those whose `match` fits `tool`, for a tool hook) in order, each
/// with `payload` as it stands (a `modify` replaces the field for the hooks after it), and
/// combines their actions. A cancel stops the chain with what was decided so far.
pub async fn run(cx: &Context, name: HookName, tool: Option<&str>, mut payload: Map<String, Value>) -> Decision {
    let mut decision = Decision::default();
    for spec in cx.config.get(name) {
        if let (Some(m), Some(tool)) = (&spec.matcher, tool) {
            if !m.0.is_match(tool) {
                continue;
            }
        }
        let started = Instant::now();
        let action = match run_one(cx, name, spec, &payload).await {
            Some(action) => action,
            None => return decision,
        };
        cx.events.emit(EventKind::Hook {
            name: name.as_str().to_string(),
            command: spec.command.clone(),
            action: action.as_str().to_string(),
            reason: match &action {
                Action::Deny(r) => Some(r.clone()),
                Action::SwitchModel(m) => Some(m.clone()),
                _ => None,
            },
            duration_ms: started.elapsed().as_millis() as u64,
        });
        match action {
            Action::Allow => {}
            Action::Deny(reason) => {
                decision.denied = Some(Denied { command: spec.command.clone(), reason });
                return decision;
            }
            Action::Skip => {
                // Skipping the pending operation is decided; later hooks have nothing to judge.
                decision.skipped = true;
                return decision;
            }
            Action::Modify(v) => {
                set_modifiable(name, &mut payload, v.clone());
                decision.modified = Some(v);
            }
            Action::Inject(text) => decision.injects.push(text),
            Action::SwitchModel(model) => decision.model = Some(model),
        }
    }
    decision
}

/// Puts a modified value where the next hook of the chain reads it.
fn set_modifiable(name: HookName, payload: &mut Map<String, Value>, v: Value) {
    match (modify_field(name), payload.get_mut("tool")) {
        (Some("input"), Some(Value::Object(tool))) => {
            tool.insert("input".into(), v);
        }
        (Some("result"), _) => {
            if let Some(Value::Object(result)) = payload.get_mut("result") {
                match v {
                    Value::String(s) => {
                        result.insert("content".into(), Value::String(s));
                    }
                    Value::Object(o) => result.extend(o),
                    _ => {}
                }
            }
        }
        (Some(field), _) => {
            payload.insert(field.into(), v);
        }
        (None, _) => {}
    }
}

/// Runs one hook and reads its answer; a failure is reported (`error {kind: "hook"}`) and
/// becomes the hook's `on_error`. `None` when the turn was cancelled meanwhile.
async fn run_one(cx: &Context, name: HookName, spec: &HookSpec, payload: &Map<String, Value>) -> Option<Action> {
    let mut stdin = serde_json::to_vec(payload).unwrap_or_default();
    stdin.push(b'\n');
    let program = runner::resolve(&spec.command, cx.role_dir.as_deref(), &cx.tools.workspace);
    let label = format!("hook {}: {}", name.as_str(), spec.command);
    let failure = match runner::run(&program, &stdin, spec.timeout, &cx.tools, &label).await {
        Ran::Cancelled => return None,
        Ran::Exited { code: Some(0), stdout, .. } => match parse(name, &stdout) {
            Ok(action) => return Some(action),
            Err(e) => e.to_string(),
        },
        Ran::Exited { code: Some(2), stderr, .. } if allowed(name, &Action::Deny(String::new())) => {
            // Claude Code's convention: exit 2 blocks, stderr says why.
            let reason = String::from_utf8_lossy(&stderr).trim().to_string();
            return Some(Action::Deny(if reason.is_empty() { "exit code 2".to_string() } else { reason }));
        }
        Ran::Exited { code: Some(code), stderr, .. } => {
            let stderr = String::from_utf8_lossy(&stderr);
            match stderr.trim() {
                "" => format!("exit code {code}"),
                s => format!("exit code {code}: {}", crate::event::preview(s, 200)),
            }
        }
        Ran::Exited { signal, .. } => format!("killed by signal {}", signal.unwrap_or(0)),
        Ran::StdoutOverLimit => {
            format!("its stdout went over the limit of {} MiB (a hook answers with one JSON object)", runner::STDOUT_LIMIT >> 20)
        }
        Ran::TimedOut => format!("timed out after {} s", spec.timeout.as_secs()),
        Ran::NotFound(e) if spec.command.contains(char::is_whitespace) => {
            format!("{e}; commands run without a shell and take no arguments: put `{}` in a script", spec.command.trim())
        }
        Ran::NotFound(e) | Ran::NotStarted(e) => e,
    };
    cx.events.emit(EventKind::Error { kind: ErrorKind::Hook, message: format!("hook {} ({}): {failure}", spec.command, name.as_str()) });
    Some(match spec.on_error {
        OnError::Allow => Action::Allow,
        OnError::Deny if allowed(name, &Action::Deny(String::new())) => Action::Deny(failure),
        OnError::Deny => Action::Allow,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stdout_is_read_as_one_allowed_action() {
        let t = HookName::BeforeTool;
        let parsed = |name, stdout: &[u8]| parse(name, stdout).map_err(|e| e.to_string());
        assert_eq!(parsed(t, b""), Ok(Action::Allow));
        assert_eq!(parsed(t, b" \n"), Ok(Action::Allow));
        assert_eq!(parsed(t, br#"{"action":"allow"}"#), Ok(Action::Allow));
        assert_eq!(parsed(t, br#"{"action":"deny","reason":" no "}"#), Ok(Action::Deny("no".into())));
        assert_eq!(parsed(t, br#"{"action":"modify","input":{"command":"ls"}}"#), Ok(Action::Modify(json!({"command": "ls"}))));
        assert_eq!(parsed(HookName::BeforeRequest, br#"{"action":"switch_model","model":"m2"}"#), Ok(Action::SwitchModel("m2".into())));
        assert_eq!(parsed(HookName::BeforeFinish, br#"{"action":"inject","text":"again"}"#), Ok(Action::Inject("again".into())));
        assert_eq!(
            parsed(t, br#"{"action":"switch_model","model":"m2"}"#),
            Err("action `switch_model` is not allowed at before_tool".into())
        );
        assert_eq!(
            parsed(HookName::AfterResponse, br#"{"action":"modify"}"#),
            Err("action `modify` is not allowed at after_response".into())
        );
        assert_eq!(parsed(t, br#"{"action":"modify"}"#), Err("`modify` at before_tool needs `input`".into()));
        assert_eq!(
            parsed(t, br#"{"action":"modify","input":"ls"}"#),
            Err(r#"`modify` at before_tool: `input` has the wrong type: "ls""#.into())
        );
        assert_eq!(
            parsed(HookName::BeforeFinish, br#"{"action":"inject","text":" "}"#),
            Err(r#"`"inject"` needs a non-empty string `text`"#.into())
        );
        assert_eq!(parsed(HookName::AfterTurn, br#"{"action":"deny"}"#), Err("action `deny` is not allowed at after_turn".into()));
        assert_eq!(parsed(t, br#"{"action":"fly"}"#), Err("unknown action `fly`".into()));
        assert_eq!(parsed(t, br#"{"act":"allow"}"#), Err(r#"no string `action` in {"act":"allow"}"#.into()));
        assert_eq!(parsed(t, b"xyz"), Err("stdout is not one JSON object (expected value at line 1 column 1): xyz".into()));
        assert_eq!(parsed(t, b"[1]"), Err("stdout is not a JSON object: [1]".into()));
    }

    #[test]
    fn a_modify_is_what_the_next_hook_reads() {
        let mut p = Map::new();
        p.insert("tool".into(), json!({"id": "t", "name": "shell", "input": {"command": "a"}}));
        set_modifiable(HookName::BeforeTool, &mut p, json!({"command": "b"}));
        assert_eq!(p["tool"]["input"], json!({"command": "b"}));
        p.insert("result".into(), json!({"content": "x", "is_error": false, "duration_ms": 1}));
        set_modifiable(HookName::AfterTool, &mut p, json!("y"));
        assert_eq!(p["result"], json!({"content": "y", "is_error": false, "duration_ms": 1}));
        set_modifiable(HookName::BeforePrompt, &mut p, json!("hi"));
        assert_eq!(p["text"], json!("hi"));
    }
}
