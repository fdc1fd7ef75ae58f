//! A checkpoint of a 600-message history (docs/design.md §12 "Numbers": < 20 ms).
//!
//! `save_600`: what `checkpoint <id> save` and the automatic checkpoint pay — copy current.json
//! (150 tool turns = 600 messages, tool results of ~400 bytes), reply.json, plan.json,
//! AGENTS.md and 20 memory files into `.tmp-<id>/`, write meta.json, one syncfs, rename into
//! place. The removal after each save is not timed. `load_600`: the before-load save plus the
//! restore as a new conversation.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is how it fails
// A bench reports its figures on the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;

use cicy::checkpoint::{self, SaveOptions};
use cicy::conversation::history::{CurrentFile, HistoryStore};
use cicy::conversation::message::{ContentBlock, Message};

fn setup(ws: &std::path::Path) {
    let mut cur = CurrentFile::new("w-1", "m");
    for i in 0..150 {
        let id = format!("toolu_{i:04}");
        cur.push(Message::user_text(format!("Question {i}: what is in folder {i}?")));
        cur.push(Message::assistant(vec![
            ContentBlock::text(format!("Looking at folder {i}.")),
            ContentBlock::ToolUse { id: id.clone(), name: "shell".into(), input: json!({"command": format!("ls -la /srv/data/{i}")}) },
        ]));
        cur.push(Message::user_blocks(vec![ContentBlock::ToolResult {
            tool_use_id: id,
            content: "-rw-r--r-- 1 u u 4096 file.txt\n".repeat(13),
            is_error: false,
        }]));
        cur.push(Message::assistant(vec![ContentBlock::text(format!("Folder {i} holds 13 files, all text, none larger than 4 KiB."))]));
    }
    HistoryStore::new(ws).start(&cur).expect("history");
    std::fs::write(ws.join("AGENTS.md"), "# Role\n\nYou are Ada.\n".repeat(20)).expect("AGENTS.md");
    std::fs::write(
        checkpoint::plan_path(ws),
        json!({"todos": [{"id": "1", "content": "Check folders", "status": "in_progress"}]}).to_string(),
    )
    .expect("plan");
    let mem = ws.join(".cicy/memory");
    std::fs::create_dir_all(&mem).expect("memory");
    for i in 0..20 {
        std::fs::write(mem.join(format!("fact_{i:02}.md")), format!("---\ntype: fact\ntitle: F{i}\n---\n\nFact number {i}.\n"))
            .expect("memory file");
    }
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = tmp.path();
    setup(ws);
    let bytes = std::fs::metadata(ws.join(".cicy/history/current.json")).expect("current.json").len();
    eprintln!("current.json: 600 messages, {bytes} bytes");
    c.bench_function("save_600", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let meta = checkpoint::save(ws, &SaveOptions::default()).expect("save");
                spent += t.elapsed();
                checkpoint::remove(ws, &meta.checkpoint_id).expect("remove");
            }
            spent
        })
    });
    let keep = checkpoint::save(ws, &SaveOptions::default()).expect("save").checkpoint_id;
    c.bench_function("load_600", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let loaded = checkpoint::load(ws, "w-1", &keep).expect("load");
                spent += t.elapsed();
                checkpoint::remove(ws, &loaded.before.checkpoint_id).expect("remove");
            }
            spent
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
