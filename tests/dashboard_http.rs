//! The dashboard's HTTP side (docs/design.md §14) against a real serve: the page's files and their
//! headers, and `GET /api/events` resuming from a cursor after a dropped connection. The page
//! itself, in a browser, is `tests/dashboard.rs`.

use cicy_test_support::fixture::TestHome;
use cicy_test_support::gateway::{anthropic_text, anthropic_text_deltas, Reply, ScriptedGateway};
use cicy_test_support::serve::{Frame, Serve};

const CSP: &str = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_files_load_without_a_token_under_a_strict_csp() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let plain = reqwest::Client::new();
    for (path, kind) in [
        ("/", "text/html; charset=utf-8"),
        ("/?token=abc", "text/html; charset=utf-8"),
        ("/app.js", "text/javascript; charset=utf-8"),
        ("/app.css", "text/css; charset=utf-8"),
        ("/favicon.svg", "image/svg+xml"),
        ("/favicon.ico", "image/svg+xml"),
    ] {
        let r = plain.get(s.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers();
        assert_eq!(h["content-type"], kind, "{path}");
        assert_eq!(h["content-security-policy"], CSP, "{path}");
        assert_eq!(h["referrer-policy"], "no-referrer", "{path}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["cache-control"], "no-store", "{path}");
    }
    // The health proof: HMAC-SHA256 under the token, computed here on its own.
    let nonce = "0123456789abcdef".repeat(4);
    let health: serde_json::Value = plain.get(s.url(&format!("/api/health?proof={nonce}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(health["proof"], cicy_test_support::serve::health_proof(&s.token, s.port, &nonce).as_str());
    assert_eq!(health["ok"], true);
    assert!(plain.get(s.url("/api/health")).send().await.unwrap().json::<serde_json::Value>().await.unwrap().get("proof").is_none());
    assert_eq!(plain.get(s.url("/api/health?proof=abc")).send().await.unwrap().status(), 400);

    let page = plain.get(s.url("/")).send().await.unwrap().text().await.unwrap();
    assert!(page.contains(r#"<script src="/app.js""#), "{page}");
    // The API stays behind the token; the page's files are the only open paths but health.
    assert_eq!(plain.get(s.url("/api/agents")).send().await.unwrap().status(), 401);
    assert_eq!(plain.get(s.url("/app.json")).send().await.unwrap().status(), 404);
    assert_eq!(s.stop().await, 0);
}

fn gseqs(frames: &[Frame]) -> Vec<u64> {
    frames.iter().map(|f| f.id.expect("every event frame of /api/events has an id")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_events_resumes_after_the_last_seen_id_without_gap_or_duplicate() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let (a, b) = (t.create("assistant", None), t.create("tester", None));
    gw.push(Reply::sse(anthropic_text("first answer")));
    gw.push(Reply::sse(anthropic_text("second answer")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;

    let mut live = s.all_events(None).await;
    s.chat(&a, "one").await.until("done").await;
    let first = live.until("done").await;
    assert!(first.iter().all(|f| f.data["agent_id"] == a.as_str()), "{first:#?}");
    let ids = gseqs(&first);
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "gseqs are consecutive: {ids:?}");
    drop(live);

    // While no client listens, the other agent answers.
    let cut = *ids.last().unwrap();
    let missed = s.chat(&b, "two").await.until("done").await;
    let mut resumed = s.all_events(Some(cut)).await;
    let replayed = resumed.until("done").await;
    assert_eq!(gseqs(&replayed), (cut + 1..=cut + replayed.len() as u64).collect::<Vec<_>>());
    let of_b: Vec<_> = replayed.iter().filter(|f| f.data["agent_id"] == b.as_str()).map(|f| (f.event.clone(), f.data.clone())).collect();
    let chat: Vec<_> = missed.iter().map(|f| (f.event.clone(), f.data.clone())).collect();
    assert_eq!(of_b, chat, "the replay has every event of the chat that ran while disconnected, once");

    // A cursor from before this serve's start (another run) gets a gap first, then what the
    // ring holds: everything this run sent.
    let mut old = s.all_events(Some(5)).await;
    let gap = old.next().await.unwrap();
    assert_eq!(gap.event, "gap");
    assert_eq!(gap.id, None);
    assert_eq!(gap.data["from"], 6);
    let to = gap.data["to"].as_u64().unwrap();
    assert!(to < ids[0], "{gap:?}");
    assert_eq!(old.next().await.unwrap().id, Some(to + 1), "the ring follows the gap without a hole");
    // A cursor that is no gseq of this run at all (from the future) also gets a gap.
    let mut future = s.all_events(Some(u64::MAX / 2)).await;
    assert_eq!(future.next().await.unwrap().event, "gap");
    let bad = s.request(reqwest::Method::GET, "/api/events").header("last-event-id", "x1").send().await.unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_never_slows_an_agent_and_resumes_without_a_hole() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let a = t.create("assistant", None);
    // More events than the live channel and the ring hold, and more bytes (15 MB) than the
    // loopback socket's buffers: the stalled client must fall behind the ring.
    let deltas: Vec<String> = (0..30_000).map(|i| format!("{i:06} {}", "x".repeat(500))).collect();
    gw.push(Reply::sse(anthropic_text_deltas(&deltas)));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut stalled = s.all_events(None).await;
    // And the agent's own stream, stalled too, beside 100 more of each kind that are never read.
    let mut stalled_agent = s.events(&a, None).await;
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(s.all_events(None).await);
        idle.push(s.events(&a, None).await);
    }

    // The chat's own stream reads on while the other clients read nothing.
    let chat = s.chat(&a, "talk").await.until("done").await;
    let text: String = chat.iter().filter(|f| f.event == "text_delta").map(|f| f.data["text"].as_str().unwrap()).collect();
    assert_eq!(text, deltas.concat());
    // The agent's stream falls behind its live channel and is refilled from the log: every
    // frame of the chat, once and in order.
    assert_eq!(stalled_agent.until("done").await, chat);
    drop(idle);

    // The stalled client, read at last: gseqs go up by one, or jump exactly over a gap frame.
    let (mut prev, mut pending_gap, mut gaps, mut count) = (None::<u64>, None::<(u64, u64)>, 0, 0);
    loop {
        let f = stalled.next().await.unwrap();
        if f.event == "gap" {
            let (from, to) = (f.data["from"].as_u64().unwrap(), f.data["to"].as_u64().unwrap());
            if let Some(p) = prev {
                assert_eq!(from, p + 1, "a gap starts right after the last frame");
            }
            pending_gap = Some((from, to));
            gaps += 1;
            continue;
        }
        let id = f.id.unwrap();
        match (prev, pending_gap.take()) {
            (_, Some((_, to))) => assert_eq!(id, to + 1, "the frame after a gap"),
            (Some(p), None) => assert_eq!(id, p + 1, "no hole and no duplicate: {f:?}"),
            (None, None) => {}
        }
        prev = Some(id);
        count += 1;
        if f.event == "done" {
            break;
        }
    }
    assert!(gaps >= 1, "the client never fell behind the ring: the test did not test it");
    assert!(count > 8192);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_token_no_header_can_carry() {
    let gw_url = "http://127.0.0.1:9";
    let t = TestHome::new(gw_url, 0);
    let mut cmd = cicy_test_support::cli::command(t.root(), gw_url, &["serve", "--port", "0"]);
    let out = cmd.env("CICY_API_TOKEN", "café token€").output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the API token from CICY_API_TOKEN has a character outside printable ASCII (no spaces)"), "{stderr}");
    assert!(!t.root().join("serve.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_n_events_are_replayed_by_count_across_the_seq_jump_of_a_kill_9() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let a = t.create("assistant", None);
    gw.push(Reply::sse(anthropic_text("before the crash")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let before = s.chat(&a, "one").await.until("done").await;
    assert_eq!(s.stop().await, 0);
    // As a kill -9 between an emit and its write leaves the log, but with every event of the
    // first run written, so the test knows what is logged.
    cicy_test_support::serve::as_if_killed_holding_the_lease(&t.workspace(&a));
    gw.push(Reply::sse(anthropic_text("after the crash")));
    gw.push(Reply::sse(anthropic_text("live")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let after = s.chat(&a, "two").await.until("done").await;
    let last_before = before.last().unwrap().id.unwrap();
    assert!(after[0].id.unwrap() > last_before + 300, "the seqs jumped over the dead run's range: {last_before} → {:?}", after[0].id);

    // More than the frames after the jump, fewer than all: a seq range `last_seq - n` would
    // hold only the frames after the jump.
    let n = after.len() + 3;
    let mut past = s.events_last(&a, n).await;
    let live = s.chat(&a, "three").await.until("done").await;
    let mut got = Vec::new();
    for _ in 0..n + live.len() {
        got.push(past.next().await.unwrap());
    }
    let want: Vec<_> = before[before.len() - 3..].iter().chain(&after).chain(&live).cloned().collect();
    assert_eq!(got, want, "the {n} newest logged events, then live");
    // More than are logged: all of them.
    let mut all = s.events_last(&a, 10_000).await;
    let total = before.len() + after.len() + live.len();
    let mut every = Vec::new();
    for _ in 0..total {
        every.push(all.next().await.unwrap());
    }
    assert_eq!(every, before.iter().chain(&after).chain(&live).cloned().collect::<Vec<_>>());
    assert_eq!(s.request(reqwest::Method::GET, &format!("/api/agents/{a}/events?last=many")).send().await.unwrap().status(), 400);
    assert_eq!(s.stop().await, 0);
}
