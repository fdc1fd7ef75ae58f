//! One answer's wall while many event-stream (SSE) clients are connected (issue 22): a real
//! `cicy-agent serve` and the scripted gateway on 127.0.0.1 answer one chat of 20,000 text
//! deltas, timed from the request to the chat stream's `done`, with 0 and then 200 other
//! clients connected and reading (half on `GET /api/agents/<id>/events`, half on
//! `GET /api/events`). Target: 200 clients add less than 2× to the wall. Median of 7 each.
//!
//! Run: `cargo bench --bench sse_clients`. Figures go to stdout.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is how it fails
// A bench reports its figures on the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;

use cicy_test_support::fixture::TestHome;
use cicy_test_support::gateway::{anthropic_text_deltas, Reply, ScriptedGateway};
use cicy_test_support::serve::Serve;

const DELTAS: usize = 20_000;
const CLIENTS: usize = 200;
const RUNS: usize = 7;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Opens `n` streams (every other one the agent's, the rest every agent's) that read and
/// count bytes until aborted.
async fn clients(s: &Serve, agent: &str, n: usize, bytes: &Arc<AtomicU64>) -> Vec<tokio::task::JoinHandle<()>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let path = if i % 2 == 0 { format!("/api/agents/{agent}/events") } else { "/api/events".to_string() };
        let r = s.request(reqwest::Method::GET, &path).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let bytes = Arc::clone(bytes);
        out.push(tokio::spawn(async move {
            let mut body = r.bytes_stream();
            while let Some(Ok(chunk)) = body.next().await {
                bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
        }));
    }
    out
}

async fn answer_wall(gw: &ScriptedGateway, s: &Serve, agent: &str, text: &str) -> f64 {
    let deltas: Vec<String> = (0..DELTAS).map(|i| format!("w{i:05} ")).collect();
    // Each answer is ~35k tokens: without a `/clear` the fifth one no longer fits the
    // context window and the turn fails before it asks the gateway.
    let (status, body) = s.post("/api/cicy/clear", serde_json::json!({"agent_id": agent})).await;
    assert_eq!(status, 200, "{body}");
    gw.push(Reply::sse(anthropic_text_deltas(&deltas)));
    let start = Instant::now();
    let frames = s.chat(agent, text).await.until("done").await;
    let wall = start.elapsed().as_secs_f64();
    let got = frames.iter().filter(|f| f.event == "text_delta").count();
    assert_eq!(got, DELTAS, "frames other than text_delta: {:?}", frames.iter().filter(|f| f.event != "text_delta").collect::<Vec<_>>());
    wall
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("sse_clients: bench");
        return;
    }
    // `cargo test --all-targets` runs bench binaries without `--bench`: only a compile check
    // there, the measurement is `cargo bench`'s.
    if !std::env::args().any(|a| a == "--bench") {
        println!("sse_clients bench: skipped (run it with `cargo bench --bench sse_clients`)");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let gw = ScriptedGateway::start().await;
        let t = TestHome::new(&gw.url(), 0);
        let agent = t.create("assistant", None);
        let s = Serve::start(t.root(), &gw.url(), &[]).await;
        // A first answer warms the session, the gateway connection and the page cache.
        answer_wall(&gw, &s, &agent, "warm up").await;
        let mut walls = Vec::new();
        for n in [0, CLIENTS] {
            let bytes = Arc::new(AtomicU64::new(0));
            let readers = clients(&s, &agent, n, &bytes).await;
            let mut runs = Vec::with_capacity(RUNS);
            for run in 0..RUNS {
                runs.push(answer_wall(&gw, &s, &agent, &format!("run {run}")).await);
            }
            let wall = median(runs.clone());
            println!(
                "{DELTAS}-delta answer with {n:>3} other SSE clients: {:.0} ms (median of {RUNS}: {}), clients read {:.1} MB",
                wall * 1e3,
                runs.iter().map(|r| format!("{:.0}", r * 1e3)).collect::<Vec<_>>().join(", "),
                bytes.load(Ordering::Relaxed) as f64 / 1e6
            );
            for r in readers {
                r.abort();
            }
            walls.push(wall);
        }
        println!("{CLIENTS} clients: {:.2}× the wall without them (target < 2×)", walls[1] / walls[0]);
        assert_eq!(s.stop().await, 0);
    });
}
