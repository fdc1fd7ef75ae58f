//! Wire-request assembly and history persistence for a large conversation.
//!
//! History: 600 messages (~400 KB): 150 rounds of user text → assistant text + `tool_use` →
//! `tool_result` → assistant text. Targets (issue 2): assembly + encoding under 2 ms;
//! assembly + atomic persist of current.json under 10 ms.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is how it fails
// A bench reports its figures on the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use cicy::conversation::history::{CurrentFile, HistoryStore};
use cicy::gateway::anthropic;
use cicy::prompt::{assemble, PromptInputs};
use cicy_test_support::sample;
use criterion::{criterion_group, criterion_main, Criterion};

fn bench(c: &mut Criterion) {
    let history = sample::history();
    let tools = sample::tools();
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
    c.bench_function("assemble_and_encode_600_messages", |b| b.iter(|| anthropic::encode(&assemble(&inputs), "model", 2048)));
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
