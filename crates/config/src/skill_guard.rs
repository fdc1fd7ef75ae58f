//! meta.yaml's `skill_guard` setting. The guard itself (which tools an active skill allows) is
//! the runtime's `tools::skill_guard`.

use serde::Deserialize;

/// meta.yaml `skill_guard`: `off` (the default), `warn` or `strict`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Off,
    Warn,
    Strict,
}
