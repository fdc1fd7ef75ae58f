//! The dashboard's HTTP side (DESIGN.md §14) against a real serve: the page's files and their
//! headers, and `GET /api/events` resuming from a cursor after a dropped connection. The page
//! itself, in a browser, is `tests/dashboard.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is how it fails

mod common;

use common::fixture::TestHome;
use common::gateway::{anthropic_text, Reply, ScriptedGateway};
use common::serve::{Frame, Serve};

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
