//! Outcome markers (docs/design.md §6.2): the assistant text that ends a turn that did not end
//! normally, so the history is always well formed. Markers are history bookkeeping: the prompt
//! assembler leaves them out of the wire window, so the model never sees (or imitates) them.

use crate::message::{Content, ContentBlock, Message, Role};

/// How an abnormal turn is recorded in the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Cancelled,
    Blocked,
    Failed,
}

impl Outcome {
    /// The assistant text that marks this outcome (cicy's markers).
    pub fn marker(self) -> &'static str {
        match self {
            Outcome::Cancelled => "(no reply this turn · cancelled)",
            Outcome::Blocked => "(no reply this turn · blocked)",
            Outcome::Failed => "(no reply this turn · generation failed)",
        }
    }

    /// The outcome whose marker is `text`, if it is one.
    pub fn from_marker(text: &str) -> Option<Self> {
        [Outcome::Cancelled, Outcome::Blocked, Outcome::Failed].into_iter().find(|o| o.marker() == text)
    }
}

/// The outcome marker a message ends with, if any: the last block of an assistant message (a
/// failed round's kept partial answer comes before it in the same message).
pub fn marker_of(m: &Message) -> Option<Outcome> {
    if m.role != Role::Assistant {
        return None;
    }
    match &m.content {
        Content::Text(t) => Outcome::from_marker(t.trim()),
        Content::Blocks(b) => match b.last() {
            Some(ContentBlock::Text { text }) => Outcome::from_marker(text.trim()),
            _ => None,
        },
    }
}
