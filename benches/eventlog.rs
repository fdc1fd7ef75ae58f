//! The event log's two docs/design.md §9 numbers.
//!
//! `emit_then_next`: one `AgentEvents::emit` and the same task's live subscription yielding it
//! (numbering, ring, broadcast, queueing for the writer, which writes to a temp folder on the
//! other worker meanwhile). `emit_to_subscriber_task`: the same with the subscriber on its own
//! task, which hands each seq back over a channel (so two task wake-ups, as an SSE stream has
//! one). Target < 50 µs per event. `read_after_10k`: `read_after` of 10,000 `text_delta` events
//! (one file of about 1 MB); target < 50 ms. `open_agent`: `AgentEvents::open` of a workspace
//! that has a log (the torn-tail check and the last logged seq; the writer lease and any
//! reservation come with the first event), what a server pays per agent at start.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is how it fails

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};

use cicy::event::{Event, EventKind};
use cicy::eventlog::{read_after, AgentEvents, EventLog};

/// Rotation at 1 MiB keeps the bench's files under 5 MiB however long criterion runs.
const BENCH_ROTATE: u64 = 1 << 20;

fn delta() -> EventKind {
    EventKind::TextDelta { text: "a streamed chunk of answer".into() }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn emit_to_subscriber(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let events = rt.block_on(async { AgentEvents::open_with(dir.path(), "w-1", None, BENCH_ROTATE).unwrap() });

    c.bench_function("emit_then_next", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut sub = events.subscribe(None).await;
                let start = Instant::now();
                for _ in 0..iters {
                    let seq = events.emit(delta());
                    assert_eq!(sub.next().await.unwrap().seq, seq);
                }
                start.elapsed()
            })
        })
    });

    c.bench_function("emit_to_subscriber_task", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut sub = events.subscribe(None).await;
                let (back, mut got) = tokio::sync::mpsc::unbounded_channel();
                let reader = tokio::spawn(async move {
                    for _ in 0..iters {
                        back.send(sub.next().await.unwrap().seq).unwrap();
                    }
                });
                let start = Instant::now();
                for _ in 0..iters {
                    let seq = events.emit(delta());
                    assert_eq!(got.recv().await.unwrap(), seq);
                }
                let elapsed = start.elapsed();
                reader.await.unwrap();
                elapsed
            })
        })
    });
    rt.block_on(events.close()).unwrap();
}

fn replay_from_files(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut log = EventLog::open(dir.path(), "w-1").unwrap();
    let mut seq = 0;
    while seq < 10_000 {
        let range = log.reserve(seq).unwrap();
        let batch: Vec<Event> = range
            .map(|s| Event {
                seq: s,
                agent_id: "w-1".into(),
                kind: EventKind::TextDelta { text: format!("chunk {s} of a streamed answer, in 中文 too") },
            })
            .take(10_000 - seq as usize)
            .collect();
        seq = batch.last().unwrap().seq;
        log.append(&batch).unwrap();
    }
    log.sync().unwrap();

    c.bench_function("read_after_10k", |b| {
        b.iter(|| {
            let replay = read_after(dir.path(), 0, 10_000).unwrap();
            assert_eq!(replay.events.len(), 10_000);
            replay
        })
    });
}

fn open_agent(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let events = AgentEvents::open(dir.path(), "w-1", None).unwrap();
        for _ in 0..100 {
            events.emit(delta());
        }
        events.close().await.unwrap();
    });
    c.bench_function("open_agent", |b| b.iter(|| rt.block_on(async { AgentEvents::open(dir.path(), "w-1", None).unwrap() })));
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(5));
    targets = emit_to_subscriber, replay_from_files, open_agent
}
criterion_main!(benches);
