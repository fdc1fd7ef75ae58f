//! The dashboard (docs/design.md §14, issue 13) measured in a real headless chromium against a real
//! `cicy-agent serve` and the scripted gateway on 127.0.0.1:
//!
//! - page weight: the bytes of the four embedded files as served, plain and gzipped (target
//!   < 40 KB plain, hard limit 60 KB);
//! - start to first paint: from spawning serve with 100 agents to the page showing all 100
//!   rows (median of 5), with the browser's own first-contentful-paint, and the time of
//!   `GET /api/agents` for those 100 agents (docs/design.md §14: 100 agents < 100 ms);
//! - render rate: one answer of 20,000 text deltas streamed as fast as the gateway can, from
//!   the page's first event to the whole text shown; events per second, and how far the
//!   page's `cicyStats.rendered` fell behind `cicyStats.events`.
//!
//! Run: `cargo bench --bench dashboard` (needs chromium + chromium-driver, see
//! `scripts/test.sh`). Figures go to stdout.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is how it fails
// A bench reports its figures on the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::time::Instant;

use serde_json::{json, Value};

use cicy_test_support::browser::{Browser, LAPTOP};
use cicy_test_support::fixture::TestHome;
use cicy_test_support::gateway::{anthropic_text_deltas, Reply, ScriptedGateway};
use cicy_test_support::serve::Serve;

/// Deltas in the render-rate answer.
const DELTAS: usize = 20_000;

fn gzip(bytes: &[u8]) -> usize {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap().len()
}

async fn page_weight(gw: &ScriptedGateway) {
    let t = TestHome::new(&gw.url(), 0);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let plain = reqwest::Client::builder().no_proxy().build().unwrap();
    println!("page weight (as served):");
    println!("  {:<14} {:>9} {:>9}", "file", "bytes", "gzip");
    let (mut total, mut total_gz) = (0, 0);
    for path in ["/", "/app.js", "/app.css", "/favicon.svg"] {
        let r = plain.get(s.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let body = r.bytes().await.unwrap();
        let gz = gzip(&body);
        println!("  {path:<14} {:>9} {gz:>9}", body.len());
        total += body.len();
        total_gz += gz;
    }
    println!("  {:<14} {total:>9} {total_gz:>9}   (aim < 40,960; limit 61,440)", "total");
    assert_eq!(s.stop().await, 0);
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

async fn start_to_rows(gw: &ScriptedGateway, b: &Browser) {
    let t = TestHome::new(&gw.url(), 0);
    for i in 0..100 {
        t.create_titled("tester", &format!("Worker {i:03}"), None);
    }
    let plain = reqwest::Client::builder().no_proxy().build().unwrap();
    let (mut walls, mut fcps, mut rows_in_page, mut lists) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        let start = Instant::now();
        let s = Serve::start(t.root(), &gw.url(), &[]).await;
        let health: Value = plain.get(s.url("/api/health")).send().await.unwrap().json().await.unwrap();
        assert_eq!(health["agents"], 100);
        b.goto(&format!("{}/?token={}", s.url(""), s.token)).await;
        // performance.now() when the 100th row is there: time since the navigation began.
        let at = b.wait_js("100 agent rows", "document.querySelectorAll('#agents .agent').length === 100 && performance.now()").await;
        walls.push(start.elapsed().as_secs_f64() * 1000.0);
        rows_in_page.push(at.as_f64().unwrap());
        let fcp = b.js("const p = performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint'); return p ? p.startTime : null").await;
        fcps.push(fcp.as_f64().expect("a first-contentful-paint entry"));
        for _ in 0..4 {
            let start = Instant::now();
            let rows: Value = s.request(reqwest::Method::GET, "/api/agents").send().await.unwrap().json().await.unwrap();
            lists.push(start.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(rows.as_array().unwrap().len(), 100);
        }
        assert_eq!(s.stop().await, 0);
    }
    println!(
        "100 agents: spawn serve to all 100 rows shown {:.0} ms (median of 5; min {:.0}, max {:.0}); in the page: first contentful paint {:.0} ms, 100 rows {:.0} ms after navigation",
        median(walls.clone()),
        walls.iter().cloned().fold(f64::MAX, f64::min),
        walls.iter().cloned().fold(0.0, f64::max),
        median(fcps),
        median(rows_in_page)
    );
    println!("100 agents: GET /api/agents (the list the page draws) {:.1} ms (median of 20)", median(lists));
}

/// An Anthropic stream of one text block of `DELTAS` deltas (`w00000 `, `w00001 `, …); the
/// whole text.
fn long_answer() -> (Vec<Vec<u8>>, String) {
    let deltas: Vec<String> = (0..DELTAS).map(|i| format!("w{i:05} ")).collect();
    (anthropic_text_deltas(&deltas), deltas.concat())
}

/// Installed in the page before the prompt: one sample per animation frame of
/// `[now, cicyStats.events, cicyStats.rendered, length of the last text block]` until the
/// block holds `want` characters.
const MONITOR: &str = "const want = arguments[0];
    window.cicyBench = {samples: [], done: null};
    (function frame() {
        const st = window.cicyStats;
        const blocks = document.querySelectorAll('#live .ev.text');
        const len = blocks.length ? blocks[blocks.length - 1].textContent.length : 0;
        const now = performance.now();
        window.cicyBench.samples.push([now, st.events, st.rendered, len]);
        if (len >= want) { window.cicyBench.done = now; return; }
        requestAnimationFrame(frame);
    })();
    return null;";

async fn render_rate(gw: &ScriptedGateway, b: &Browser) {
    let (chunks, text) = long_answer();
    gw.push(Reply::sse(chunks));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    b.goto(&format!("{}/?token={}", s.url(""), s.token)).await;
    b.wait_js("1 agent row", "document.querySelectorAll('#agents .agent').length === 1").await;
    b.click(&format!("#agents .agent[data-id='{id}']")).await;
    b.wait_css(&format!("#detail[data-id='{id}']")).await;
    b.wait_js("the event stream live", "document.querySelector('#conn').dataset.state === 'live'").await;
    let want = text.chars().count();
    b.client.execute(MONITOR, vec![json!(want)]).await.unwrap();
    let (status, _) = s.post(&format!("/api/agents/{id}/prompt"), json!({"text": "talk for a long time"})).await;
    assert_eq!(status, 200);
    // Bounded (within the WebDriver's 30 s script timeout): a page that lost deltas never
    // gets the whole text; that is reported instead of hanging.
    let done = b
        .client
        .execute_async(
            "const cb = arguments[arguments.length - 1]; const until = performance.now() + 25000;
             (function check() {
                 const d = window.cicyBench.done;
                 if (d !== null || performance.now() > until) return cb(d);
                 requestAnimationFrame(check);
             })();",
            vec![],
        )
        .await
        .unwrap();
    let samples: Vec<[f64; 4]> = serde_json::from_value(b.js("return window.cicyBench.samples").await).unwrap();
    let base = samples[0][1];
    let first = samples.iter().find(|s| s[1] > base).map(|s| s[0]).unwrap_or(samples[0][0]);
    // The page draws in one batch per frame, so at a frame it may owe at most what arrived
    // since the frame before; owing more means a frame was skipped and it fell behind.
    let behind: Vec<f64> = samples.iter().map(|s| s[1] - s[2]).collect();
    let most = behind.iter().cloned().fold(0.0, f64::max);
    let late = samples.windows(2).filter(|w| w[1][1] - w[1][2] > w[1][1] - w[0][1]).count();
    let kept_up = if late == 0 {
        "every frame drew all it had received".to_string()
    } else {
        format!("{late} frames owed more than they had received since the frame before")
    };
    match done.as_f64() {
        Some(end) => {
            let ms = end - first;
            println!(
                "render rate: {DELTAS} text deltas ({want} characters) from the first event to the whole text shown in {ms:.0} ms \
                 ({} frames): {:.0} events/s; events - rendered at most {most:.0}, {kept_up}",
                samples.len(),
                DELTAS as f64 / (ms / 1000.0),
            );
        }
        None => {
            let got = samples.last().map(|s| s[3]).unwrap_or(0.0);
            println!(
                "render rate: the page showed {got:.0} of {want} characters within 25 s (events lost or the page fell behind); events - rendered at most {most:.0}, {kept_up}"
            );
        }
    }
    assert_eq!(s.stop().await, 0);
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("dashboard: bench");
        return;
    }
    // `cargo test --all-targets` runs bench binaries without `--bench`: only a compile check
    // there, the measurement is `cargo bench`'s.
    if !std::env::args().any(|a| a == "--bench") {
        println!("dashboard bench: skipped (run it with `cargo bench --bench dashboard`)");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let gw = ScriptedGateway::start().await;
        page_weight(&gw).await;
        let b = Browser::start(LAPTOP).await;
        start_to_rows(&gw, &b).await;
        render_rate(&gw, &b).await;
        b.close().await;
    });
}
