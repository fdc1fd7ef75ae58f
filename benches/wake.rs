//! Hibernate and wake under measurement (issue 9 benchmarks), a bench binary against a real
//! serve process and the scripted gateway on 127.0.0.1:
//!
//! - an inbox file written → the agent's `turn_started`, over 200 messages: p50 and p99
//!   (targets < 100 ms, < 500 ms);
//! - a todo coming due → `turn_started` (target < 1 s);
//! - 10,000 registered hibernating agents, each with a pending todo: serve's start time to
//!   `/api/health`, its RSS and thread count (targets < 2 s, < 200 MB; no thread or timer per
//!   agent).
//!
//! Run: `cargo bench --bench wake [-- inbox|todo|10k]`. Figures go to stdout; docs/benchmarks.md quotes them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is how it fails
// A bench reports its figures on the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cicy::wake::at::at_of_unix;
use cicy::wake::db::WakeDb;
use cicy::wake::inbox::{self, Mailbox, NewMessage};
use cicy_test_support::fixture::TestHome;
use cicy_test_support::gateway::{anthropic_text, Reply, ScriptedGateway};
use cicy_test_support::serve::Serve;

/// A `/proc/<pid>/status` field in its own unit (kB for memory).
fn proc_status(pid: i32, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap()
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn waker_home(gw: &ScriptedGateway, n: usize) -> (TestHome, Vec<String>) {
    let t = TestHome::new(&gw.url(), 0);
    t.write_role("waker", "[core, wake]", 20);
    let ids = (0..n).map(|_| t.create("waker", None)).collect();
    (t, ids)
}

async fn inbox_latency(gw: &ScriptedGateway) {
    gw.fallback(|_| Reply::sse(anthropic_text("ok")));
    let (t, ids) = waker_home(gw, 1);
    let id = &ids[0];
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(id, None).await;
    let mb = Mailbox::of_workspace(&t.workspace(id));
    let mut lat = Vec::new();
    for i in 0..200 {
        let msg = NewMessage {
            from: "human".into(),
            subject: Some(format!("m{i}")),
            body: format!("message {i}"),
            question: false,
            meta: BTreeMap::new(),
        };
        let start = Instant::now();
        mb.write(inbox::Folder::Inbox, &msg).unwrap();
        while events.next().await.unwrap().event != "turn_started" {}
        lat.push(start.elapsed());
        events.until("done").await;
    }
    lat.sort();
    println!(
        "inbox file written → turn_started, 200 messages: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        percentile(&lat, 1.0)
    );
    assert_eq!(s.stop().await, 0);
}

async fn todo_latency(gw: &ScriptedGateway) {
    gw.fallback(|_| Reply::sse(anthropic_text("ok")));
    let (t, ids) = waker_home(gw, 1);
    let id = &ids[0];
    // The `--at` forms name a minute, so these todos are written with exact unix seconds
    // (4 s apart, the first 5 s after serve starts) and the scheduler loads them at start:
    // what is measured is its sleep → claim → turn, not the minute rounding of `--at`.
    let first = chrono::Local::now().timestamp() + 5;
    let dues: Vec<i64> = (0..5).map(|i| first + 4 * i).collect();
    let mut db = WakeDb::open(&t.home).unwrap();
    for (i, due) in dues.iter().enumerate() {
        db.todo_add(id, &format!("t{i}"), &at_of_unix(*due)).unwrap();
    }
    drop(db);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(id, None).await;
    let mut lat = Vec::new();
    for due in &dues {
        while events.next().await.unwrap().event != "turn_started" {}
        let seen = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let due = Duration::from_secs(*due as u64);
        assert!(seen >= due, "a todo woke its agent before its time");
        lat.push(seen - due);
        events.until("done").await;
    }
    lat.sort();
    println!("todo due → turn_started, 5 todos: median {:.1} ms, max {:.1} ms", percentile(&lat, 0.5), percentile(&lat, 1.0));
    assert_eq!(s.stop().await, 0);
}

async fn ten_thousand(gw: &ScriptedGateway) {
    let made = Instant::now();
    let (t, ids) = waker_home(gw, 10_000);
    let mut db = WakeDb::open(&t.home).unwrap();
    let tomorrow = at_of_unix(chrono::Local::now().timestamp() + 86_400);
    for id in &ids {
        db.todo_add(id, "check in", &tomorrow).unwrap();
    }
    drop(db);
    eprintln!("(10,000 agents with a todo made in {:.0} s)", made.elapsed().as_secs_f64());
    let mut walls = Vec::new();
    let mut mem = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let s = Serve::start(t.root(), &gw.url(), &[]).await;
        let plain = reqwest::Client::builder().no_proxy().build().unwrap();
        let health: serde_json::Value = plain.get(s.url("/api/health")).send().await.unwrap().json().await.unwrap();
        walls.push(start.elapsed());
        assert_eq!(health["agents"], 10_000);
        tokio::time::sleep(Duration::from_secs(5)).await;
        mem.push((proc_status(s.pid, "VmRSS:") / 1024.0, proc_status(s.pid, "VmHWM:") / 1024.0, proc_status(s.pid, "Threads:")));
        assert_eq!(s.stop().await, 0);
    }
    walls.sort();
    let (rss, peak, threads) = mem.iter().fold((0.0f64, 0.0f64, 0.0f64), |a, m| (a.0.max(m.0), a.1.max(m.1), a.2.max(m.2)));
    println!(
        "10,000 hibernating agents with a pending todo each: start to /api/health {:.0} ms (median of 3), RSS {rss:.1} MB (peak {peak:.1} MB), {threads} threads",
        walls[1].as_secs_f64() * 1000.0
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("wake: bench");
        return;
    }
    // `cargo test --all-targets` runs bench binaries without `--bench`: only a compile check.
    if !std::env::args().any(|a| a == "--bench") {
        println!("wake bench: skipped (run it with `cargo bench --bench wake`)");
        return;
    }
    // `cargo bench --bench wake -- todo` runs only the parts named (inbox, todo, 10k).
    let named: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let wanted = |part: &str| named.is_empty() || named.iter().any(|n| n == part);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let gw = ScriptedGateway::start().await;
        if wanted("inbox") {
            inbox_latency(&gw).await;
        }
        if wanted("todo") {
            todo_latency(&gw).await;
        }
        if wanted("10k") {
            ten_thousand(&gw).await;
        }
    });
}
