//! Wire-request assembly and history persistence for a large conversation.
//!
//! History: 600 messages (~400 KB): 150 rounds of user text → assistant text + `tool_use` →
//! `tool_result` → assistant text. Targets (issue 2): assembly + encoding under 2 ms;
//! assembly + atomic persist of current.json under 10 ms.

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;

use cicy::conversation::history::{CurrentFile, HistoryStore};
use cicy::conversation::message::{ContentBlock, Message};
use cicy::gateway::{anthropic, ToolSpec};
use cicy::prompt::{assemble, PromptInputs};

fn history() -> Vec<Message> {
    let mut h = Vec::with_capacity(600);
    for i in 0..150 {
        h.push(Message::user_text(format!("Request {i}: please check the build log and tell me what failed. {}", "Context line. ".repeat(20))));
        h.push(Message::assistant(vec![
            ContentBlock::text(format!("Looking at step {i}.")),
            ContentBlock::ToolUse { id: format!("toolu_{i:04}"), name: "shell".into(), input: json!({"command": format!("grep -n error build-{i}.log | tail -50"), "timeout": 60}) },
        ]));
        h.push(Message::user_blocks(vec![ContentBlock::ToolResult {
            tool_use_id: format!("toolu_{i:04}"),
            content: format!("{i}: error[E0308]: mismatched types in src/lib.rs\n").repeat(30),
            is_error: false,
        }]));
        h.push(Message::assistant(vec![ContentBlock::text(format!("Step {i}: the type mismatch comes from the new signature. {}", "Explanation. ".repeat(25)))]));
    }
    h
}

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec { name: "shell".into(), description: cicy::tools::shell::description().into(), input_schema: cicy::tools::shell::input_schema() },
        ToolSpec { name: "skill".into(), description: cicy::tools::skill::description().into(), input_schema: cicy::tools::skill::input_schema() },
    ]
}

fn bench(c: &mut Criterion) {
    let history = history();
    let tools = tools();
    let size = serde_json::to_vec(&history).map(|v| v.len()).unwrap_or(0);
    eprintln!("history: {} messages, {size} bytes of JSON", history.len());
    let memory = "- [preference★4] favourite colour: teal\n".repeat(40);
    let inputs = PromptInputs {
        system_md: "You are a capable assistant.",
        skills: &[],
        tools: &tools,
        final_round: false,
        history: &history,
        agents_md: "# Role\n\nYou are Ada.",
        memory_md: &memory,
    };
    c.bench_function("assemble_and_encode_600_messages", |b| {
        b.iter(|| anthropic::encode(&assemble(&inputs), "model", 2048))
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let store = HistoryStore::new(dir.path());
    let mut current = CurrentFile::new("w-1", "model");
    for m in &history {
        current.push(m.clone());
    }
    c.bench_function("assemble_encode_and_persist_current_json", |b| {
        b.iter(|| {
            let body = anthropic::encode(&assemble(&inputs), "model", 2048);
            store.save_current(&mut current).expect("persist");
            body
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
