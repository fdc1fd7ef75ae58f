//! Canonical conversation messages (Anthropic Messages shape).
//!
//! Owns the in-memory and on-disk form of a message: a role and either a plain string or a list
//! of content blocks (`text`, `tool_use`, `tool_result`, `thinking`). Wire-only additions such as
//! `cache_control`, `<role>` or `<memories>` never live here; the prompt assembler adds them to a
//! copy at send time.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Start of the user message that carries a compact summary (docs/design.md §7). Such a message is a
/// *fence*: the wire window starts at the last one, and healing never merges across one.
pub const SUMMARY_PREFIX: &str =
    "[Compressed summary of the earlier conversation, kept for context continuity; the most recent original messages follow.]\n\n";

/// Who wrote a message. Anthropic Messages has only these two in `messages`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// One content block (Anthropic Messages content block types).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// A tool call. `input` is kept as the model produced it (key order preserved), so the bytes
    /// sent back on later rounds do not change.
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    /// A tool's answer; content is plain text in cicy.
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    Thinking {
        thinking: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        signature: String,
    },
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    /// True for a block that carries nothing (an empty or whitespace-only text block).
    pub fn is_empty(&self) -> bool {
        match self {
            ContentBlock::Text { text } => text.trim().is_empty(),
            ContentBlock::Thinking { thinking, signature } => thinking.is_empty() && signature.is_empty(),
            ContentBlock::ToolUse { .. } | ContentBlock::ToolResult { .. } => false,
        }
    }
}

/// A message's content: Anthropic accepts a plain string or a list of blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Blocks(Vec<ContentBlock>),
}

impl Content {
    /// The content as blocks (a string becomes one text block; an empty string none).
    pub fn to_blocks(&self) -> Vec<ContentBlock> {
        match self {
            Content::Text(t) if t.is_empty() => Vec::new(),
            Content::Text(t) => vec![ContentBlock::text(t.clone())],
            Content::Blocks(b) => b.clone(),
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Content::Text(t) => t.trim().is_empty(),
            Content::Blocks(b) => b.iter().all(ContentBlock::is_empty),
        }
    }
}

/// One message of a conversation. `id` is the 1-based display id of `current.json`; it is
/// stripped on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    pub role: Role,
    pub content: Content,
}

impl Message {
    pub fn user_text(text: impl Into<String>) -> Self {
        Self { id: None, role: Role::User, content: Content::Text(text.into()) }
    }

    pub fn assistant(blocks: Vec<ContentBlock>) -> Self {
        Self { id: None, role: Role::Assistant, content: Content::Blocks(blocks) }
    }

    pub fn user_blocks(blocks: Vec<ContentBlock>) -> Self {
        Self { id: None, role: Role::User, content: Content::Blocks(blocks) }
    }

    /// The `tool_use` blocks of this message, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        let blocks: &[ContentBlock] = match &self.content {
            Content::Blocks(b) => b,
            Content::Text(_) => &[],
        };
        blocks.iter().filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }

    /// A user message holding the summary of a compaction (its text starts with
    /// [`SUMMARY_PREFIX`]).
    pub fn is_summary(&self) -> bool {
        let first_text = match &self.content {
            Content::Text(t) => Some(t.as_str()),
            Content::Blocks(b) => b.iter().find_map(|x| match x {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            }),
        };
        self.role == Role::User && first_text.is_some_and(|t| t.starts_with(SUMMARY_PREFIX))
    }

    /// All text of the message's text blocks, joined with newlines.
    pub fn plain_text(&self) -> String {
        match &self.content {
            Content::Text(t) => t.clone(),
            Content::Blocks(b) => b
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// Token usage of one gateway response (Anthropic names; OpenAI's are mapped onto them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_creation_input_tokens += other.cache_creation_input_tokens;
        self.cache_read_input_tokens += other.cache_read_input_tokens;
    }
}

/// Index of the last compact-summary message, where the wire window starts.
pub fn window_start(history: &[Message]) -> usize {
    history.iter().rposition(Message::is_summary).unwrap_or(0)
}

/// Tool blocks for unit tests of the modules that reason about tool pairs, here and in the
/// runtime (its dev-dependency turns on the `fixtures` feature).
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures {
    use super::ContentBlock;

    /// A `shell` `tool_use` with id `id`.
    pub fn tool_use(id: &str) -> ContentBlock {
        ContentBlock::ToolUse { id: id.into(), name: "shell".into(), input: serde_json::json!({"command": "ls"}) }
    }

    /// A successful `tool_result` answering `id`.
    pub fn result(id: &str) -> ContentBlock {
        ContentBlock::ToolResult { tool_use_id: id.into(), content: "ok".into(), is_error: false }
    }
}
