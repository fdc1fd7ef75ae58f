//! What decides whether and how often an agent works on its own (docs/design.md §13 "Tick", "Off"):
//! the role's `autonomy:` block in meta.yaml and the agent's own switch
//! `<workspace>/.cicy/autonomy.json` (`intents <id> off|on`).
//!
//! Owns both formats and their validation. Must not touch the ledger or the scheduling.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// idle: the heartbeat every 30 s.
pub const DEFAULT_TICK_SECS: u64 = 30;
/// idle: the heartbeat may be set from 1 s to 1 h.
pub const TICK_RANGE_SECS: std::ops::RangeInclusive<u64> = 1..=3600;
/// **[chosen]** A model-turn intent gets at most 20 rounds.
pub const DEFAULT_INTENT_ROUNDS: u32 = 20;
/// **[chosen]** An intent's command is stopped (as a preemption stops it) after an hour.
pub const DEFAULT_RUN_TIMEOUT_SECS: u64 = 3600;
/// **[chosen]** A routine (self-check, recall, web) runs at most once an hour by default.
pub const DEFAULT_EVERY_SECS: u64 = 3600;

/// meta.yaml `autonomy:` (all optional).
///
/// ```yaml
/// autonomy:
///   enabled: true          # false: no intent or routine ever runs for this role
///   tick_secs: 30          # 1…3600
///   intent_rounds: 20      # rounds of a model-turn intent
///   run_timeout_secs: 3600 # an intent's command is stopped after this
///   selfcheck: { run: "cargo test -q", every_secs: 21600 }
///   recall: { prompt: "Look back at …", every_secs: 86400 }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutonomyConfig {
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub tick_secs: Option<u64>,
    #[serde(default)]
    pub intent_rounds: Option<u32>,
    #[serde(default)]
    pub run_timeout_secs: Option<u64>,
    /// The idle seed's middle three, in this order after the intents; each only when set.
    #[serde(default)]
    pub selfcheck: Option<Routine>,
    #[serde(default)]
    pub recall: Option<Routine>,
    /// Off unless a person sets it *(idle: web search is an empty slot)*.
    #[serde(default)]
    pub web: Option<Routine>,
}

/// A routine: a command (`run`) or a model turn (`prompt`), at most once per `every_secs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Routine {
    #[serde(default)]
    pub run: Option<String>,
    #[serde(default)]
    pub prompt: Option<String>,
    #[serde(default)]
    pub every_secs: Option<u64>,
}

impl Routine {
    pub fn every(&self) -> u64 {
        self.every_secs.unwrap_or(DEFAULT_EVERY_SECS)
    }
}

impl AutonomyConfig {
    pub fn enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }

    pub fn tick(&self) -> Duration {
        Duration::from_secs(self.tick_secs.unwrap_or(DEFAULT_TICK_SECS))
    }

    pub fn intent_rounds(&self) -> u32 {
        self.intent_rounds.unwrap_or(DEFAULT_INTENT_ROUNDS)
    }

    pub fn run_timeout(&self) -> Duration {
        Duration::from_secs(self.run_timeout_secs.unwrap_or(DEFAULT_RUN_TIMEOUT_SECS))
    }

    /// The configured routines in the idle seed's order.
    pub fn routines(&self) -> impl Iterator<Item = (crate::priority::Class, &Routine)> {
        use crate::priority::Class;
        [(Class::Selfcheck, &self.selfcheck), (Class::Recall, &self.recall), (Class::Web, &self.web)]
            .into_iter()
            .filter_map(|(c, r)| r.as_ref().map(|r| (c, r)))
    }

    /// Checks the values a type cannot: the tick's range, non-zero counts, one of `run` or
    /// `prompt` per routine. Errors: [`SettingsError`], naming the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if let Some(t) = self.tick_secs.filter(|t| !TICK_RANGE_SECS.contains(t)) {
            return Err(SettingsError::TickRange(t));
        }
        if self.intent_rounds == Some(0) {
            return Err(SettingsError::ZeroRounds);
        }
        if self.run_timeout_secs == Some(0) {
            return Err(SettingsError::ZeroRunTimeout);
        }
        for (class, r) in self.routines() {
            let key = class.as_str();
            match (&r.run, &r.prompt) {
                (Some(run), None) if !run.trim().is_empty() => {}
                (None, Some(p)) if !p.trim().is_empty() => {}
                (Some(_), Some(_)) => return Err(SettingsError::RunAndPrompt(key)),
                _ => return Err(SettingsError::NoRunNorPrompt(key)),
            }
            if r.every_secs == Some(0) {
                return Err(SettingsError::ZeroEvery(key));
            }
        }
        Ok(())
    }
}

/// A value of meta.yaml's `autonomy:` that [`AutonomyConfig::validate`] refuses; the routine's
/// key is its name (`selfcheck`, `recall`, `web`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("autonomy.tick_secs: {0} is out of range (1…3600 seconds)")]
    TickRange(u64),
    #[error("autonomy.intent_rounds: 0 is not allowed (at least 1 round)")]
    ZeroRounds,
    #[error("autonomy.run_timeout_secs: 0 is not allowed (at least 1 second)")]
    ZeroRunTimeout,
    #[error("autonomy.{0}: give run or prompt, not both")]
    RunAndPrompt(&'static str),
    #[error("autonomy.{0}: needs a non-empty run (a command) or prompt (a model turn)")]
    NoRunNorPrompt(&'static str),
    #[error("autonomy.{0}.every_secs: 0 is not allowed (at least 1 second)")]
    ZeroEvery(&'static str),
}

/// `<workspace>/.cicy/autonomy.json`: the agent's switch, written by `intents <id> off|on`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switch {
    pub enabled: bool,
    /// When it was last set (RFC 3339 UTC).
    pub at: String,
}

/// `<workspace>/.cicy/autonomy.json`.
pub fn switch_path(workspace: &Path) -> PathBuf {
    workspace.join(".cicy").join("autonomy.json")
}

/// The switch file could not be read; the agent stays off until it is fixed.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source} (expected {{\"enabled\": true|false, \"at\": \"<time>\"}}; fix or delete it)")]
    Bad { path: PathBuf, source: serde_json::Error },
}

/// Whether the agent's switch is on: no file is on.
///
/// Errors: the file cannot be read or does not parse (it is left as it is).
pub fn switch_on(workspace: &Path) -> Result<bool, SwitchError> {
    let path = switch_path(workspace);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice::<Switch>(&bytes).map(|s| s.enabled).map_err(|source| SwitchError::Bad { path, source }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(source) => Err(SwitchError::Io { path, source }),
    }
}

/// Sets the switch (atomic write).
///
/// Errors: the file cannot be written.
pub fn set_switch(workspace: &Path, enabled: bool) -> Result<(), SwitchError> {
    let path = switch_path(workspace);
    let switch = Switch { enabled, at: cicy_store::fsutil::now_rfc3339() };
    let mut bytes = serde_json::to_vec_pretty(&switch).map_err(|source| SwitchError::Bad { path: path.clone(), source })?;
    bytes.push(b'\n');
    cicy_store::fsutil::write_atomic(&path, &bytes).map_err(|source| SwitchError::Io { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> AutonomyConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn defaults_and_validation_name_the_key() {
        let c = AutonomyConfig::default();
        assert_eq!((c.enabled(), c.tick(), c.intent_rounds()), (true, Duration::from_secs(30), 20));
        assert_eq!(c.validate(), Ok(()));
        let refused = |yaml: &str| parse(yaml).validate().unwrap_err().to_string();
        assert_eq!(refused("tick_secs: 0"), "autonomy.tick_secs: 0 is out of range (1…3600 seconds)");
        assert_eq!(refused("tick_secs: 3601"), "autonomy.tick_secs: 3601 is out of range (1…3600 seconds)");
        assert_eq!(refused("intent_rounds: 0"), "autonomy.intent_rounds: 0 is not allowed (at least 1 round)");
        assert_eq!(refused("run_timeout_secs: 0"), "autonomy.run_timeout_secs: 0 is not allowed (at least 1 second)");
        assert_eq!(refused("selfcheck: {run: x, prompt: y}"), "autonomy.selfcheck: give run or prompt, not both");
        assert_eq!(refused("recall: {every_secs: 5}"), "autonomy.recall: needs a non-empty run (a command) or prompt (a model turn)");
        assert_eq!(refused("web: {run: a, every_secs: 0}"), "autonomy.web.every_secs: 0 is not allowed (at least 1 second)");
        let order: Vec<&str> = parse("web: {run: a}\nselfcheck: {run: b}").routines().map(|(c, _)| c.as_str()).collect();
        assert_eq!(order, vec!["selfcheck", "web"]);
    }

    #[test]
    fn the_switch_is_on_without_a_file_and_a_bad_file_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        assert!(switch_on(dir.path()).unwrap());
        set_switch(dir.path(), false).unwrap();
        assert!(!switch_on(dir.path()).unwrap());
        std::fs::write(switch_path(dir.path()), "off").unwrap();
        assert!(switch_on(dir.path()).unwrap_err().to_string().contains("autonomy.json"));
        assert_eq!(std::fs::read_to_string(switch_path(dir.path())).unwrap(), "off");
    }
}
