//! The request a turn sends, before any wire style: system blocks, tools, messages, and where
//! the cache breakpoints go; and which wire style and which internal call it is.
//!
//! Owns the types only. Assembling a prompt is the runtime's `prompt` module; encoding it for
//! Anthropic or OpenAI is the gateway's.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{ContentBlock, Role};

/// Which wire protocol a gateway speaks. Default: Anthropic Messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApiStyle {
    /// `POST {base}/v1/messages`, Anthropic Messages streaming.
    #[default]
    Anthropic,
    /// `POST {base}/v1/chat/completions`, OpenAI chat completions streaming.
    Openai,
}

impl ApiStyle {
    /// Parses `anthropic` or `openai` (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "anthropic" => Some(ApiStyle::Anthropic),
            "openai" => Some(ApiStyle::Openai),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ApiStyle::Anthropic => "anthropic",
            ApiStyle::Openai => "openai",
        }
    }
}

/// Which internal call an aux request is; sent as `X-Cicy-Aux`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuxKind {
    Compact,
    Memory,
    /// The wish guard's judge (docs/design.md §13).
    Guard,
}

impl AuxKind {
    pub fn header_value(self) -> &'static str {
        match self {
            AuxKind::Compact => "compact",
            AuxKind::Memory => "memory",
            AuxKind::Guard => "guard",
        }
    }
}

/// One block of the system prompt; `cache` puts a cache breakpoint on it.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemBlock {
    pub text: String,
    pub cache: bool,
}

/// A tool offered to the model: name, description and JSON Schema of its input.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// One content block of an outgoing message; `cache` puts a cache breakpoint on it.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptBlock {
    pub block: ContentBlock,
    pub cache: bool,
}

/// One outgoing message (always in block form on the wire).
#[derive(Debug, Clone, PartialEq)]
pub struct PromptMessage {
    pub role: Role,
    pub blocks: Vec<PromptBlock>,
}

/// A fully assembled request, independent of the wire style (built by the runtime's `prompt` module).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Prompt {
    pub system: Vec<SystemBlock>,
    /// Sorted by name; empty on the final round.
    pub tools: Vec<ToolSpec>,
    /// Puts a cache breakpoint on the last tool.
    pub tools_cache: bool,
    pub messages: Vec<PromptMessage>,
}
