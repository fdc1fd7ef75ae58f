//! Idle autonomy under measurement (issue 12 benchmarks, docs/design.md §13 "Numbers"):
//!
//! - an empty tick (no open intent, no routine) in-process: what serve's actor pays every
//!   `tick_secs` per idle agent (target < 1 ms, no gateway call: the bench has no gateway);
//! - the same tick over a ledger of 200 finished intents;
//! - preemption latency against a real serve: an intent running `sleep 30`, a chat posted, and
//!   the time until no process of the intent's group is left; p50 and p99 over 50 trials
//!   (target p99 < 500 ms; the idle seed measured 1–2 s).
//!
//! Run: `cargo bench --bench autonomy [-- tick|preempt]`. Figures go to stdout; docs/benchmarks.md
//! quotes them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is how it fails
// A bench reports its figures on the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::{Duration, Instant};

use cicy::autonomy::tick::{tick, Tick};
use cicy::registry::Registry;
use cicy_test_support::fixture::TestHome;
use cicy_test_support::gateway::{anthropic_text, Reply, ScriptedGateway};
use cicy_test_support::serve::Serve;
use cicy_test_support::wait::Fifo;

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// Mean cost of `tick` over `n` calls, in microseconds.
fn tick_cost(t: &TestHome, id: &str, n: u32) -> f64 {
    let record = Registry::open(&t.home.db_path()).unwrap().get(id).unwrap();
    assert!(matches!(tick(&t.home, &record).tick, Tick::Rest));
    let start = Instant::now();
    for _ in 0..n {
        std::hint::black_box(tick(&t.home, &record));
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(n)
}

fn empty_tick() {
    let t = TestHome::new("http://127.0.0.1:9", 0);
    let id = t.create("tester", None);
    let ws = t.workspace(&id);
    let cost = tick_cost(&t, &id, 2000);
    println!("empty tick (no ledger): {cost:.1} µs");
    let ledger = cicy::autonomy::ledger::ledger_path(&ws);
    let lines: String = (1..=200)
        .map(|n| format!("{{\"id\":\"i{n}\",\"at\":\"2026-12-01T10:00:00Z\",\"by\":\"self\",\"what\":\"finished work number {n}\",\"run\":\"true\",\"priority\":5,\"status\":\"done\",\"result\":\"exit 0: ok\"}}\n"))
        .collect();
    std::fs::create_dir_all(ledger.parent().unwrap()).unwrap();
    std::fs::write(&ledger, lines).unwrap();
    let cost = tick_cost(&t, &id, 500);
    println!("empty tick (200 finished intents): {cost:.1} µs");
}

async fn preemption(gw: &ScriptedGateway) {
    gw.fallback(|_| Reply::sse(anthropic_text("ok")));
    gw.on_aux(Reply::sse(anthropic_text(r#"{"verdict":"allow","class":"none","reason":"fine"}"#)));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.agent_of_role("idler", "[core]", "autonomy:\n  tick_secs: 1\n");
    let ws = t.workspace(&id);
    let fifo = Fifo::new(ws.join("started"));
    let ledger = cicy::autonomy::ledger::ledger_path(&ws);
    std::fs::create_dir_all(ledger.parent().unwrap()).unwrap();
    let at = cicy::fsutil::now_rfc3339();
    let line = format!(
        r#"{{"id":"i1","at":"{at}","by":"human","what":"wait","run":"echo $$ > started; sleep 30","priority":5,"status":"pending"}}"#
    );
    std::fs::write(&ledger, line + "\n").unwrap();
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut lat = Vec::new();
    for n in 0..50 {
        let pgid: i32 = fifo.read().await.trim().parse().unwrap();
        let start = Instant::now();
        let (status, _) = s.post(&format!("/api/agents/{id}/prompt"), serde_json::json!({"text": format!("trial {n}")})).await;
        assert_eq!(status, 200);
        // SAFETY: kill(2) with signal 0 only asks whether a process of the group is left.
        while unsafe { libc::kill(-pgid, 0) } == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        lat.push(start.elapsed());
    }
    lat.sort();
    println!(
        "preemption (prompt → intent group gone), 50 trials: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        percentile(&lat, 1.0)
    );
    assert_eq!(s.stop().await, 0);
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("autonomy: bench");
        return;
    }
    // `cargo test --all-targets` runs bench binaries without `--bench`: only a compile check.
    if !std::env::args().any(|a| a == "--bench") {
        println!("autonomy bench: skipped (run it with `cargo bench --bench autonomy`)");
        return;
    }
    let named: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let wanted = |part: &str| named.is_empty() || named.iter().any(|n| n == part);
    if wanted("tick") {
        empty_tick();
    }
    if wanted("preempt") {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let gw = ScriptedGateway::start().await;
            preemption(&gw).await;
        });
    }
}
