//! The `memory:` section of config.yaml: when buffered turns are flushed to the recognizer.
//! The memory itself is `cicy-memory`'s.

use std::time::Duration;

/// When buffered turns are flushed (the `memory:` section of config.yaml).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemorySettings {
    /// cicy: 6 buffered turns flush.
    pub batch_turns: usize,
    /// cicy: 20 min, the longest the oldest buffered turn waits.
    pub max_wait: Duration,
    /// cicy: 5 min without a new turn (aligned with the prompt-cache TTL, so the memory block
    /// changes when the cache has gone cold anyway).
    pub idle: Duration,
    /// The whole recognizer call, retries included (ours: 30 s; cicy sets none). Short, because
    /// a one-shot process waits on it after the user has the answer.
    pub recognizer_timeout: Duration,
}

impl Default for MemorySettings {
    fn default() -> Self {
        Self {
            batch_turns: 6,
            max_wait: Duration::from_secs(20 * 60),
            idle: Duration::from_secs(5 * 60),
            recognizer_timeout: Duration::from_secs(30),
        }
    }
}
