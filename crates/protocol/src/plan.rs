//! One item of an agent's working plan, as the `write_todos` tool takes it and the
//! `plan_change` event carries it. The tool itself (its checks, `plan.json`) is the runtime's.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// `<workspace>/.cicy/plan.json`, where the `write_todos` plan is kept (the tool writes it, a
/// checkpoint saves and restores it).
pub fn path(workspace: &Path) -> PathBuf {
    workspace.join(".cicy").join("plan.json")
}

/// The status of one plan item (CMDC: pending / in_progress / completed / cancelled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pending,
    InProgress,
    Completed,
    Cancelled,
}

impl Status {
    pub const ALL: [Status; 4] = [Status::Pending, Status::InProgress, Status::Completed, Status::Cancelled];

    /// The wire name (`in_progress`).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
            Status::Cancelled => "cancelled",
        }
    }
}

/// One plan item as the model gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Todo {
    pub id: String,
    pub content: String,
    pub status: Status,
}
