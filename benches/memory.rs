//! MEMORY.md with 120 memories (the most the folder holds before archiving).
//!
//! `rebuild_and_read_120`: read and parse all 120 memory files, render the index, write it
//! (atomically when it changed; here it never does, so its time is refreshed), read it back.
//! `index_text_fresh_120`: what every turn pays when nothing changed — stat the files and read
//! MEMORY.md. `index_text_after_hand_edit_120`: one file touched before each read, so every
//! read rebuilds. `parse_one`: the text of one file to a record (front matter split + YAML), to
//! see how much of a rebuild is parsing. Target (issue 3): rebuild + read under 5 ms.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is how it fails
// A bench reports its figures on the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::{Duration, SystemTime};

use criterion::{criterion_group, criterion_main, Criterion};

use cicy::memory::store::{self, MemoryType, Record};
use cicy::memory::{index, Memory, MemorySettings};

fn setup(dir: &std::path::Path) {
    for i in 0..120u32 {
        let kind = MemoryType::ALL[(i % 7) as usize];
        let r = Record {
            mem_id: format!("{}_item_{i:03}", kind.as_str()),
            kind,
            title: format!("Item {i}"),
            salience: (i % 5 + 1) as u8,
            tags: vec!["bench".into(), format!("t{}", i % 10)],
            updated: "2026-01-01T00:00:00Z".into(),
            content: format!(
                "The user keeps item {i} in the second drawer, labelled in 中文 and English; it matters for project {}.",
                i % 9
            ),
        };
        store::write(dir, &r).expect("write memory");
    }
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let memory = Memory::new(tmp.path(), MemorySettings::default());
    let dir = memory.dir().to_path_buf();
    setup(&dir);
    let first = index::rebuild(&dir).expect("rebuild");
    eprintln!("MEMORY.md: {} entries, {} bytes", first.entries, first.text.len());
    c.bench_function("rebuild_and_read_120", |b| {
        b.iter(|| {
            index::rebuild(&dir).expect("rebuild");
            std::fs::read_to_string(index::path(&dir)).expect("read")
        })
    });
    c.bench_function("index_text_fresh_120", |b| b.iter(|| memory.index_text().expect("index text")));
    let one = std::fs::read_to_string(dir.join("fact_item_001.md")).expect("read one");
    c.bench_function("parse_one", |b| b.iter(|| store::parse("fact_item_001", &one).expect("parse")));
    let touched = dir.join("fact_item_001.md");
    c.bench_function("index_text_after_hand_edit_120", |b| {
        b.iter(|| {
            let f = std::fs::File::options().write(true).open(&touched).expect("open");
            f.set_modified(SystemTime::now() + Duration::from_secs(1)).expect("touch");
            memory.index_text().expect("index text")
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
