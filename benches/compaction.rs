//! The bookkeeping of a compaction on a 600-message history, without the gateway call, and the
//! size of the request before and after.
//!
//! History: the same 600 messages (~400 KB) as `benches/assembly.rs`. Measured:
//! - `compact_bookkeeping_600_keep_0`: `/compact` — archive current.json + reply.json (two
//!   atomic, fsynced copies), append the summary, heal, rewrite current.json atomically;
//! - `compact_bookkeeping_600_keep_160`: the same with automatic compaction's cut (the summary
//!   inserted before the last 160 messages);
//! - `choose_cut_and_build_transcript_600`: the CPU part before the gateway call.
//!
//! Printed once: the encoded request size before and after each kind of compaction.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is how it fails
// A bench reports its figures on the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use cicy_test_support::sample;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

use cicy::compact::{self, cut, summary, Settings};
use cicy::config::CompactionConfig;
use cicy::conversation::history::{CurrentFile, HistoryStore};
use cicy::conversation::message::Message;
use cicy::gateway::{anthropic, ToolSpec};
use cicy::prompt::{assemble, PromptInputs};

/// A summary of a realistic length (~6 KB, ~1500 tokens) in the eight sections.
fn summary_text() -> String {
    (1..=8)
        .map(|s| format!("{s}. Section {s}:\n{}\n", "- a specific point with names, paths and numbers kept exactly.\n".repeat(12)))
        .collect()
}

fn request_bytes(history: &[Message], tools: &[ToolSpec]) -> usize {
    let inputs = PromptInputs {
        system_md: "You are a capable assistant.",
        skills: &[],
        tools,
        final_round: false,
        history,
        agents_md: "# Role\n\nYou are Ada.",
        memory_md: "",
    };
    anthropic::encode(&assemble(&inputs), "model", 2048).body.len()
}

/// A fresh agent folder whose active conversation is `history`, as a turn left it.
fn fresh(history: &[Message]) -> (tempfile::TempDir, HistoryStore, CurrentFile) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = HistoryStore::new(dir.path());
    let mut current = CurrentFile::new("w-1", "model");
    for m in history {
        current.push(m.clone());
    }
    // Writes current.json and an idle reply.json, as a finished turn leaves them.
    store.start(&current).expect("start");
    (dir, store, current)
}

fn bench(c: &mut Criterion) {
    let history = sample::history();
    let tools = sample::tools();
    let summary = summary_text();
    let settings = Settings::new(&CompactionConfig::default(), None);
    let before = request_bytes(&history, &tools);
    for keep in [0, 160] {
        let (_dir, store, mut current) = fresh(&history);
        let cut = cut::choose(&current.messages, 0, keep, settings.tail_tokens()).expect("a cut");
        compact::apply(&store, &mut current, cut, &summary, settings.config.keep_snapshots).expect("apply");
        let after = request_bytes(&current.messages, &tools);
        eprintln!(
            "request with {} messages: {before} bytes before, {after} bytes after compaction with keep {keep} (cut at {cut}; summary {} bytes)",
            history.len(),
            summary.len()
        );
    }
    for keep in [0, 160] {
        c.bench_function(&format!("compact_bookkeeping_600_keep_{keep}"), |b| {
            b.iter_batched(
                || {
                    let (dir, store, current) = fresh(&history);
                    let cut = cut::choose(&current.messages, 0, keep, settings.tail_tokens()).expect("a cut");
                    (dir, store, current, cut)
                },
                |(dir, store, mut current, cut)| {
                    compact::apply(&store, &mut current, cut, &summary, settings.config.keep_snapshots).expect("apply");
                    (dir, current)
                },
                BatchSize::PerIteration,
            )
        });
    }
    c.bench_function("choose_cut_and_build_transcript_600", |b| {
        b.iter(|| {
            let cut = cut::choose(&history, 0, 160, settings.tail_tokens()).expect("a cut");
            summary::chunks(&summary::transcript(&history[..cut]), settings.chunk_tokens())
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
