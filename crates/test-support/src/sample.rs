//! The 600-message history (~400 KB) and the tool list shared by the benches.

use serde_json::json;

use cicy::conversation::message::{ContentBlock, Message};
use cicy::gateway::ToolSpec;

/// 150 rounds of user text → assistant text + `tool_use` → `tool_result` → assistant text.
pub fn history() -> Vec<Message> {
    let mut h = Vec::with_capacity(600);
    for i in 0..150 {
        h.push(Message::user_text(format!(
            "Request {i}: please check the build log and tell me what failed. {}",
            "Context line. ".repeat(20)
        )));
        h.push(Message::assistant(vec![
            ContentBlock::text(format!("Looking at step {i}.")),
            ContentBlock::ToolUse {
                id: format!("toolu_{i:04}"),
                name: "shell".into(),
                input: json!({"command": format!("grep -n error build-{i}.log | tail -50"), "timeout": 60}),
            },
        ]));
        h.push(Message::user_blocks(vec![ContentBlock::ToolResult {
            tool_use_id: format!("toolu_{i:04}"),
            content: format!("{i}: error[E0308]: mismatched types in src/lib.rs\n").repeat(30),
            is_error: false,
        }]));
        h.push(Message::assistant(vec![ContentBlock::text(format!(
            "Step {i}: the type mismatch comes from the new signature. {}",
            "Explanation. ".repeat(25)
        ))]));
    }
    h
}

/// The built-in tools, as an `assistant` agent offers them.
pub fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "shell".into(),
            description: cicy::tools::shell::description().into(),
            input_schema: cicy::tools::shell::input_schema(),
        },
        ToolSpec {
            name: "skill".into(),
            description: cicy::tools::skill::description().into(),
            input_schema: cicy::tools::skill::input_schema(),
        },
    ]
}
