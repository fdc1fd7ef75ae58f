//! `cicy-agent serve` under load (issue 8 benchmarks), a bench binary against a real serve
//! process and the scripted gateway on 127.0.0.1:
//!
//! - 100 agents each running one turn at once against a gateway that answers after 200 ms:
//!   total wall time (target < 1 s: nothing serial in the runtime) and serve's peak RSS;
//! - 1,000 registered idle agents: time from spawning serve to `/api/health` answering, and
//!   its RSS (targets < 1 s, < 60 MB);
//! - one `cicy-agent chat` through serve against the same chat in-process (wall of each).
//!
//! Run: `cargo bench --bench serve`. Figures go to stdout; docs/benchmarks.md quotes them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is how it fails
// A bench reports its figures on the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::{Duration, Instant};

use cicy_test_support::cli::command;
use cicy_test_support::fixture::TestHome;
use cicy_test_support::gateway::{anthropic_text, Reply, ScriptedGateway};
use cicy_test_support::serve::Serve;

/// `VmHWM` and `VmRSS` of `pid` in MB.
fn memory_mb(pid: i32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = |key: &str| {
        status.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse::<f64>().ok()).unwrap()
            / 1024.0
    };
    (kb("VmHWM:"), kb("VmRSS:"))
}

fn home_with(gw: &ScriptedGateway, n: usize) -> (TestHome, Vec<String>) {
    let t = TestHome::new(&gw.url(), 0);
    let ids = (0..n).map(|_| t.create("tester", None)).collect();
    (t, ids)
}

async fn concurrent_turns(gw: &ScriptedGateway) {
    gw.fallback(|_| Reply::Held { chunks: anthropic_text("ok"), gate: None, after: Duration::from_millis(200) });
    let (t, ids) = home_with(gw, 100);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let round = async || {
        let start = Instant::now();
        let chats = ids.iter().map(|id| {
            let s = &s;
            async move { s.chat(id, "hello").await.until("done").await }
        });
        let all = futures_util::future::join_all(chats).await;
        assert!(all.iter().all(|f| f.iter().any(|f| f.event == "turn_ended" && f.data["outcome"] == "completed")));
        start.elapsed().as_secs_f64() * 1000.0
    };
    // The first round may find sessions still being opened by the warm-up after boot; the
    // second is the resident steady state.
    let (first, second) = (round().await, round().await);
    let (peak, _) = memory_mb(s.pid);
    println!("100 agents, one turn each at once, gateway answers after 200 ms: wall {second:.0} ms (first round after boot {first:.0} ms), serve peak RSS {peak:.1} MB");
    assert_eq!(s.stop().await, 0);
}

async fn idle_start(gw: &ScriptedGateway) {
    let (t, _) = home_with(gw, 1000);
    let mut walls = Vec::new();
    let mut rss = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let s = Serve::start(t.root(), &gw.url(), &[]).await;
        let plain = reqwest::Client::builder().no_proxy().build().unwrap();
        let health: serde_json::Value = plain.get(s.url("/api/health")).send().await.unwrap().json().await.unwrap();
        walls.push(start.elapsed());
        assert_eq!(health["agents"], 1000);
        // Warming opens every session after bind; RSS is taken once it is done.
        let (_, rows) = s.get("/api/agents").await;
        assert_eq!(rows.as_array().unwrap().len(), 1000);
        tokio::time::sleep(Duration::from_secs(2)).await;
        rss.push(memory_mb(s.pid));
        assert_eq!(s.stop().await, 0);
    }
    walls.sort();
    let (peak, now) = rss.iter().fold((0.0f64, 0.0f64), |(p, n), (a, b)| (p.max(*a), n.max(*b)));
    println!(
        "1,000 idle agents: serve start to /api/health {:.0} ms (median of 5; min {:.0}, max {:.0}), RSS {now:.1} MB (peak {peak:.1} MB)",
        walls[2].as_secs_f64() * 1000.0,
        walls[0].as_secs_f64() * 1000.0,
        walls[4].as_secs_f64() * 1000.0
    );
}

async fn chat_paths(gw: &ScriptedGateway) {
    gw.fallback(|_| Reply::sse(anthropic_text("ok")));
    let (t, ids) = home_with(gw, 1);
    let id = &ids[0];
    let run = |args: Vec<String>| {
        let t = &t;
        let gw = gw.url();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let start = Instant::now();
            let out = command(t.root(), &gw, &args).output().await.unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
            start.elapsed()
        }
    };
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1000.0
    };
    let mut local = Vec::new();
    for _ in 0..11 {
        local.push(run(vec!["chat".into(), id.clone(), "hi".into(), "--local".into()]).await);
    }
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut remote = Vec::new();
    for _ in 0..11 {
        remote.push(run(vec!["chat".into(), id.clone(), "hi".into()]).await);
    }
    println!("one chat turn: in-process {:.1} ms, through serve {:.1} ms (median of 11)", median(local), median(remote));
    assert_eq!(s.stop().await, 0);
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("serve: bench");
        return;
    }
    // `cargo test --all-targets` runs bench binaries without `--bench`: only a compile check
    // there, the measurement is `cargo bench`'s.
    if !std::env::args().any(|a| a == "--bench") {
        println!("serve bench: skipped (run it with `cargo bench --bench serve`)");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let gw = ScriptedGateway::start().await;
        concurrent_turns(&gw).await;
        idle_start(&gw).await;
        chat_paths(&gw).await;
    });
}
