//! The priority table `<workspace>/.cicy/sched-priority.json` (docs/design.md §13, the idle seed's
//! `ops\sched-priority.json`): which kind of work gives way to which; a smaller number wins.
//!
//! Owns the classes of work, the defaults, and reading the file (a missing file is the
//! defaults; a file that does not parse stops autonomy and is never rewritten). Must not touch:
//! the ledger, running anything.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// The kinds of work an agent's actor schedules, with their default priorities **[chosen]**
/// (idle: alarm 1, daemon 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// A todo that came due (docs/design.md §10).
    Alarm,
    /// A person: chat, prompt, steer, a command, a message in the inbox.
    Human,
    /// Housekeeping: the outbox drain, the memory flush.
    Daemon,
    /// A task another agent gave (`task_create`, docs/design.md §11).
    Task,
    /// An intent of the ledger (its own priority applies; this is the default for a wish).
    Intent,
    Selfcheck,
    Recall,
    Web,
}

impl Class {
    pub const ALL: [Class; 8] =
        [Class::Alarm, Class::Human, Class::Daemon, Class::Task, Class::Intent, Class::Selfcheck, Class::Recall, Class::Web];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Alarm => "alarm",
            Class::Human => "human",
            Class::Daemon => "daemon",
            Class::Task => "task",
            Class::Intent => "intent",
            Class::Selfcheck => "selfcheck",
            Class::Recall => "recall",
            Class::Web => "web",
        }
    }

    fn default_priority(self) -> u8 {
        match self {
            Class::Alarm | Class::Human => 1,
            Class::Daemon => 2,
            Class::Task => 3,
            Class::Intent => 5,
            Class::Selfcheck => 8,
            Class::Recall => 9,
            Class::Web => 10,
        }
    }
}

/// Priorities a wish may ask for **[chosen]**: 4–7, between `task` and `selfcheck`.
pub const WISH_PRIORITIES: std::ops::RangeInclusive<u8> = 4..=7;

/// The table: a priority per [`Class`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Priorities {
    values: [u8; 8],
}

impl Default for Priorities {
    fn default() -> Self {
        Self { values: Class::ALL.map(Class::default_priority) }
    }
}

/// `sched-priority.json` could not be used; autonomy waits until it is fixed.
#[derive(Debug, thiserror::Error)]
pub enum PriorityError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {problem} (expected an object like {{\"alarm\":1,\"human\":1,\"daemon\":2,\"task\":3,\"intent\":5,\"selfcheck\":8,\"recall\":9,\"web\":10}})")]
    Bad { path: PathBuf, problem: String },
}

/// `<workspace>/.cicy/sched-priority.json`.
pub fn table_path(workspace: &Path) -> PathBuf {
    workspace.join(".cicy").join("sched-priority.json")
}

impl Priorities {
    pub fn of(&self, class: Class) -> u8 {
        self.values[class as usize]
    }

    /// Reads the workspace's table: missing → the defaults; each key present replaces its
    /// default.
    ///
    /// Errors: the file cannot be read, is not a JSON object, has a key that is not a class,
    /// or a value that is not an integer 1–255.
    pub fn load(workspace: &Path) -> Result<Self, PriorityError> {
        let path = table_path(workspace);
        match std::fs::read(&path) {
            Ok(bytes) => Self::parse(&bytes).map_err(|problem| PriorityError::Bad { path, problem }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(PriorityError::Io { path, source }),
        }
    }

    fn parse(bytes: &[u8]) -> Result<Self, String> {
        let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let serde_json::Value::Object(map) = value else {
            return Err("not a JSON object".into());
        };
        let mut table = Self::default();
        for (key, value) in map {
            let Some(class) = Class::ALL.into_iter().find(|c| c.as_str() == key) else {
                return Err(format!("unknown class \"{key}\""));
            };
            let n =
                value.as_u64().filter(|n| (1..=255).contains(n)).ok_or_else(|| format!("\"{key}\": {value} is not an integer 1–255"))?;
            table.values[class as usize] = n as u8;
        }
        Ok(table)
    }

    /// The highest priority (smallest number) starvation may raise an intent to: `task`'s, so
    /// never above alarm or a person *(idle)*.
    pub fn promotion_floor(&self) -> u8 {
        self.of(Class::Task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_design_table() {
        let p = Priorities::default();
        let got: Vec<(&str, u8)> = Class::ALL.iter().map(|c| (c.as_str(), p.of(*c))).collect();
        assert_eq!(
            got,
            vec![("alarm", 1), ("human", 1), ("daemon", 2), ("task", 3), ("intent", 5), ("selfcheck", 8), ("recall", 9), ("web", 10)]
        );
    }

    #[test]
    fn a_file_overrides_what_it_names_and_bad_files_name_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let path = table_path(dir.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, r#"{"task":2,"intent":6}"#).unwrap();
        let p = Priorities::load(dir.path()).unwrap();
        assert_eq!((p.of(Class::Task), p.of(Class::Intent), p.of(Class::Human)), (2, 6, 1));
        std::fs::write(&path, r#"{"taks":2}"#).unwrap();
        let e = Priorities::load(dir.path()).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}: unknown class \"taks\"", path.display())), "{e}");
        std::fs::write(&path, r#"{"task":0}"#).unwrap();
        assert!(Priorities::load(dir.path()).unwrap_err().to_string().contains("\"task\": 0 is not an integer 1–255"));
        std::fs::write(&path, "[1]").unwrap();
        assert!(Priorities::load(dir.path()).unwrap_err().to_string().contains("not a JSON object"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[1]");
    }
}
