//! The dashboard (docs/design.md §14, issue 13) in a real browser: Debian's headless chromium,
//! driven through chromedriver, against a real `cicy-agent serve` and the scripted gateway.
//! The token form (and a program that takes serve's port after it stops, which never gets the
//! token), a streamed chat answer and a tool call, a queued prompt and cancelling a long tool, a
//! reconnect of `/api/events` that loses and doubles nothing, and 100 agents at phone and laptop
//! width.
//! Screenshots go to `<target>/dashboard-screenshots/`.
//!
//! Each test starts one serve and one browser; `scripts/test.sh` installs chromium +
//! chromium-driver when chromedriver is missing.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::{stream, StreamExt};
use serde_json::json;
use tokio::net::TcpListener;

use cicy_test_support::browser::{Browser, LAPTOP, PHONE};
use cicy_test_support::fixture::{TestHome, TEST_AGENTS_MD};
use cicy_test_support::gateway::{anthropic_text, anthropic_tool_use, pieces, Reply, ScriptedGateway};
use cicy_test_support::history::wire_messages;
use cicy_test_support::serve::{Frame, Serve};
use cicy_test_support::wait;

/// Opens the page logged in through `/?token=` and waits for `n` agent rows.
async fn open_logged_in(b: &Browser, base: &str, token: &str, n: usize) {
    b.goto(&format!("{base}/?token={token}")).await;
    b.wait_js(&format!("{n} agent rows"), &format!("document.querySelectorAll('#agents .agent').length === {n}")).await;
}

/// Clicks the row of agent `id` and waits for its detail.
async fn select(b: &Browser, id: &str) {
    b.click(&format!("#agents .agent[data-id='{id}']")).await;
    b.wait_css(&format!("#detail[data-id='{id}']")).await;
}

/// Types `text` into the chat box and sends it.
async fn send(b: &Browser, text: &str) {
    b.type_into("#chat-text", text).await;
    b.click("#chat-send").await;
}

/// Waits until the row of `id` shows `state`.
async fn dot(b: &Browser, id: &str, state: &str) {
    b.wait_js(
        &format!("{id}'s dot {state}"),
        &format!("document.querySelector(\"#agents .agent[data-id='{id}'] .dot\").dataset.state === '{state}'"),
    )
    .await;
}

/// The agent's own events from its log, from the first one through its `dones`-th `done`.
async fn agent_events(s: &Serve, id: &str, dones: usize) -> Vec<Frame> {
    let mut sse = s.events(id, Some(0)).await;
    let mut out = Vec::new();
    let mut seen = 0;
    while seen < dones {
        let f = sse.next().await.expect("the log has the agent's events");
        seen += usize::from(f.event == "done");
        out.push(f);
    }
    out
}

/// The rows of `GET /api/agents`, as (id, title).
async fn listed(s: &Serve) -> Vec<(String, String)> {
    let (status, rows) = s.get("/api/agents").await;
    assert_eq!(status, 200);
    rows.as_array().unwrap().iter().map(|r| (r["id"].as_str().unwrap().to_string(), r["title"].as_str().unwrap().to_string())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_form_a_wrong_token_the_link_and_a_reload() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    // Titles are untrusted text: markup in them must show as typed.
    let a = t.create_titled("tester", "Ada <b>bold</b> & <img src=x>", None);
    let c = t.create_titled("tester", "Cy \"two\"", None);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let b = Browser::start(LAPTOP).await;

    b.goto(&s.url("/")).await;
    b.wait_visible("#login").await;
    assert_eq!(b.js("return document.querySelectorAll('#agents .agent').length").await, 0);
    b.screenshot("login").await;

    b.type_into("#token", "not-the-token").await;
    b.click("#login-go").await;
    b.wait_visible("#login-error").await;
    let error = b.find("#login-error").await.text().await.unwrap();
    assert!(error.to_lowercase().contains("wrong token"), "the form says the token is wrong: {error:?}");
    // The page asked serve to prove it knows the token, and sent it nowhere when it did not.
    let asked = b
        .wait_js(
            "the health proof in the resource timings",
            "(() => { const s = performance.getEntriesByType('resource').map(e => new URL(e.name)).filter(u => u.pathname.startsWith('/api/')).map(u => u.pathname + ' ' + /^[0-9a-f]{32,128}$/.test(u.searchParams.get('proof'))); return s.length && s; })()",
        )
        .await;
    assert_eq!(asked, json!(["/api/health true"]), "one proof asked, no other /api call");
    b.wait_visible("#login").await;

    b.type_into("#token", &s.token).await;
    b.click("#login-go").await;
    b.wait_js("2 agent rows", "document.querySelectorAll('#agents .agent').length === 2").await;
    b.wait_hidden("#login").await;
    b.wait_hidden("#login-error").await;
    let mut want = listed(&s).await;
    want.sort();
    let mut mine = vec![(a.clone(), "Ada <b>bold</b> & <img src=x>".to_string()), (c.clone(), "Cy \"two\"".to_string())];
    mine.sort();
    assert_eq!(want, mine);
    let mut rows: Vec<(String, String)> =
        b.attrs("#agents .agent", "data-id").await.into_iter().zip(b.texts("#agents .agent .title").await).collect();
    rows.sort();
    assert_eq!(rows, mine);
    assert_eq!(b.texts("#agent-count").await, vec!["2".to_string()]);
    assert_eq!(b.js("return document.querySelectorAll('#agents img').length").await, 0, "a title's markup stays text");
    assert_eq!(b.js("return localStorage.getItem('cicy.token')").await, json!(s.token));

    // A fresh start through the link: the token is stored and leaves the address bar.
    b.js("localStorage.clear(); return null").await;
    open_logged_in(&b, &s.url(""), &s.token, 2).await;
    assert_eq!(b.js("return location.href").await, json!(s.url("/")));
    assert_eq!(b.js("return localStorage.getItem('cicy.token')").await, json!(s.token));
    b.wait_hidden("#login").await;

    // A reload keeps the session: the token comes from localStorage.
    b.client.refresh().await.unwrap();
    b.wait_js("2 agent rows after a reload", "document.querySelectorAll('#agents .agent').length === 2").await;
    b.wait_hidden("#login").await;
    assert_eq!(b.js("return location.href").await, json!(s.url("/")));
    b.wait_js("the event stream live", "document.querySelector('#conn').dataset.state === 'live'").await;

    // Serve stops and another program takes its port: the open tab must not hand it the token,
    // even when that program passes the proof question on to a serve of the same home now
    // running on another port.
    let (port, token) = (s.port, s.token.clone());
    assert_eq!(s.stop().await, 0);
    let moved = Serve::start(t.root(), &gw.url(), &[]).await;
    assert_ne!(moved.port, port);
    let squatter = Squatter::start(port, moved.url("")).await;
    let check = |r: &String| {
        assert!(!r.contains(&token), "the squatter received the token: {r:?}");
        assert!(!r.to_lowercase().contains("authorization"), "the squatter received an Authorization header: {r:?}");
    };
    squatter.received(1).await.iter().for_each(check);
    b.wait_js(
        "the form, saying the server does not know the token",
        "document.querySelector('#login-error').textContent === 'the server on this port does not know this token'",
    )
    .await;
    b.wait_visible("#login").await;
    assert_eq!(b.js("return localStorage.getItem('cicy.token')").await, json!(null), "the token is forgotten");
    // Typed again, the token is checked the same way before it goes anywhere.
    b.type_into("#token", &token).await;
    b.click("#login-go").await;
    b.wait_js("'wrong token' on the form", "document.querySelector('#login-error').textContent === 'wrong token'").await;
    let requests = squatter.received(2).await;
    let nonces: Vec<&str> = requests
        .iter()
        .map(|r| {
            check(r);
            let nonce = r
                .strip_prefix("GET /api/health?proof=")
                .and_then(|r| r.split(' ').next())
                .unwrap_or_else(|| panic!("a proof asked: {r:?}"));
            assert!(nonce.len() == 32 && nonce.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)), "a hex nonce: {nonce:?}");
            nonce
        })
        .collect();
    assert!(nonces.windows(2).all(|w| w[0] != w[1]), "a fresh nonce each time: {nonces:?}");
    assert!(squatter.relayed.load(Ordering::SeqCst) >= 2, "the squatter got real proofs from the moved serve");

    b.close().await;
    assert_eq!(moved.stop().await, 0);
}

/// Another program on serve's port after serve stopped: it records every request it receives,
/// relays `/api/health?proof=` questions to the real serve now at `relay_to` and hands back its
/// answer (a true proof, but for that serve's port), and answers anything else like
/// `/api/health` without a proof.
struct Squatter {
    requests: tokio::sync::watch::Receiver<Vec<String>>,
    relayed: Arc<AtomicUsize>,
    server: tokio::task::JoinHandle<()>,
}

impl Squatter {
    async fn start(port: u16, relay_to: String) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let (seen, requests) = tokio::sync::watch::channel(Vec::new());
        let seen = Arc::new(seen);
        let relayed = Arc::new(AtomicUsize::new(0));
        let count = relayed.clone();
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let server = tokio::spawn(async move {
            loop {
                let (mut conn, _) = listener.accept().await.unwrap();
                let (seen, count, http, relay_to) = (seen.clone(), count.clone(), http.clone(), relay_to.clone());
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    // The head, and whatever body came with it within a moment.
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(50), conn.read(&mut buf)).await {
                        got.extend_from_slice(&buf[..n]);
                    }
                    let request = String::from_utf8_lossy(&got).into_owned();
                    seen.send_modify(|r| r.push(request.clone()));
                    let asked = request.strip_prefix("GET /api/health?proof=").and_then(|r| r.split(' ').next());
                    let body = match asked {
                        Some(nonce) => {
                            let answer = http.get(format!("{relay_to}/api/health?proof={nonce}")).send().await.unwrap();
                            let answer: serde_json::Value = answer.json().await.unwrap();
                            assert_eq!(answer["proof"].as_str().map(str::len), Some(64), "{answer}");
                            count.fetch_add(1, Ordering::SeqCst);
                            answer.to_string()
                        }
                        None => json!({"ok": true, "instance_id": "squatter", "pid": 1, "agents": 0}).to_string(),
                    };
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(format!("{head}{body}").as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Self { requests, relayed, server }
    }

    /// The requests received once there are at least `n` (bounded by the browser's wait).
    async fn received(&self, n: usize) -> Vec<String> {
        let mut rx = self.requests.clone();
        let got = match tokio::time::timeout(cicy_test_support::browser::WAIT, rx.wait_for(|r| r.len() >= n)).await {
            Ok(got) => got.unwrap().clone(),
            Err(_) => panic!("the squatter received fewer than {n} requests: {:?}", *self.requests.borrow()),
        };
        got
    }
}

impl Drop for Squatter {
    fn drop(&mut self) {
        self.server.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_answer_streams_into_one_block_and_a_tool_call_shows_its_result() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let answer = "The answer is forty-two; it came in three pieces.";
    let parts = pieces(answer, 3);
    // message_start, ping, content_block_start, two deltas | held | the third delta and the end.
    let (held, gate) = Reply::paused(anthropic_text(answer), 5);
    gw.push(held);
    gw.push(Reply::sse(anthropic_tool_use("toolu_1", "shell", r#"{"command": "echo tool-says-hi"}"#)));
    gw.push(Reply::sse(anthropic_text("The tool said hi.")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let b = Browser::start(LAPTOP).await;
    open_logged_in(&b, &s.url(""), &s.token, 1).await;
    select(&b, &id).await;

    send(&b, "what is the answer").await;
    let partial = format!("{}{}", parts[0], parts[1]);
    b.wait_js(
        "the first two pieces on the page",
        &format!("[...document.querySelectorAll('#live .ev.text')].map(e => e.textContent).join('|') === {}", json!(partial)),
    )
    .await;
    dot(&b, &id, "streaming").await;
    gate.add_permits(1);
    b.wait_js(
        "the whole answer in one block",
        &format!("[...document.querySelectorAll('#live .ev.text')].map(e => e.textContent).join('|') === {}", json!(answer)),
    )
    .await;
    dot(&b, &id, "idle").await;
    assert_eq!(
        wire_messages(&gw.requests()[0]).last().unwrap().plain_text(),
        format!("<role>\n{TEST_AGENTS_MD}</role>\nwhat is the answer")
    );

    send(&b, "run a tool").await;
    b.wait_css("#live .ev.tool .result").await;
    b.wait_js(
        "the tool turn's answer",
        "[...document.querySelectorAll('#live .ev.text')].map(e => e.textContent).join('|').endsWith('|The tool said hi.')",
    )
    .await;
    dot(&b, &id, "idle").await;
    let events = agent_events(&s, &id, 2).await;
    let started = events.iter().find(|f| f.event == "tool_started").unwrap();
    let finished = events.iter().find(|f| f.event == "tool_finished").unwrap();
    assert_eq!(finished.data["result"], "tool-says-hi\nexit code: 0");
    assert_eq!(b.texts("#live .ev.text").await, vec![answer.to_string(), "The tool said hi.".to_string()]);
    assert_eq!(b.texts("#live .you").await, vec!["what is the answer".to_string(), "run a tool".to_string()], "the prompts sent");
    assert_eq!(b.texts("#live .ev.tool .name").await, vec!["shell".to_string()]);
    assert_eq!(b.attrs("#live .ev.tool", "data-seq").await, vec![started.data["seq"].to_string()]);
    let input = b.texts("#live .ev.tool .input").await;
    assert!(input.len() == 1 && input[0].contains("echo tool-says-hi"), "the tool's input: {input:?}");
    assert_eq!(b.texts("#live .ev.tool .result").await, vec!["tool-says-hi\nexit code: 0".to_string()]);
    assert_eq!(b.js("return document.querySelectorAll('#live .ev.tool .result.error').length").await, 0);

    b.close().await;
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_a_long_tool_and_the_row_goes_back_to_idle() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    gw.push(Reply::sse(anthropic_tool_use("toolu_1", "shell", r#"{"command": "echo $$ > tool.pid; exec sleep 30"}"#)));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let b = Browser::start(LAPTOP).await;
    open_logged_in(&b, &s.url(""), &s.token, 1).await;
    select(&b, &id).await;

    send(&b, "sleep a while").await;
    let pid_file = t.workspace(&id).join("tool.pid");
    assert!(wait::appears_within(&pid_file, Duration::from_secs(20)).await, "the tool started");
    let pid: i32 = loop {
        if let Ok(pid) = std::fs::read_to_string(&pid_file).unwrap_or_default().trim().parse() {
            break pid;
        }
        tokio::task::yield_now().await;
    };
    let tool = wait::Pidfd::open(pid).expect("the sleeping tool runs");
    b.wait_css("#live .ev.tool").await;
    dot(&b, &id, "executing_tools").await;

    // A second prompt waits for the turn; no event says so, the page re-reads the list.
    send(&b, "and then this").await;
    b.wait_js("the notice says queued", "document.querySelector('#notice').textContent === 'Queued: it runs after the current reply.'")
        .await;
    b.wait_js(
        "1 queued on the row",
        &format!("document.querySelector(\"#agents .agent[data-id='{id}'] .badge\").textContent === '1 queued'"),
    )
    .await;
    assert!(b.texts("#d-meta").await[0].contains(" · 1 queued"), "the header shows the queue: {:?}", b.texts("#d-meta").await);
    let (status, rows) = s.get("/api/agents").await;
    assert_eq!((status, rows[0]["pending"].clone()), (200, json!(1)));

    let clicked = Instant::now();
    b.click("#cancel").await;
    b.wait_js(
        "the turn ended cancelled on the page",
        "[...document.querySelectorAll(\"#live .ev[data-type='turn_ended']\")].some(e => e.textContent.includes('cancelled'))",
    )
    .await;
    dot(&b, &id, "idle").await;
    let took = clicked.elapsed();
    assert!(took < Duration::from_secs(10), "cancel took {took:?} (the tool sleeps 30 s)");
    // serve's cancel drops the queue on purpose; the page says so.
    b.wait_js(
        "the notice on the dropped input",
        "document.querySelector('#notice').textContent === 'Cancelled; the queued input was dropped.'",
    )
    .await;
    b.wait_js("the row's queue gone", &format!("document.querySelector(\"#agents .agent[data-id='{id}'] .badge\").textContent === ''"))
        .await;
    assert!(tool.exited_within(Duration::from_secs(30)).await, "the tool's process is gone");
    let events = agent_events(&s, &id, 1).await;
    let ended = events.iter().find(|f| f.event == "turn_ended").unwrap();
    assert_eq!(ended.data["outcome"], "cancelled");
    let shown = b.attrs("#live .ev[data-type='turn_ended']", "data-seq").await;
    assert_eq!(shown, vec![ended.data["seq"].to_string()]);

    b.close().await;
    assert_eq!(s.stop().await, 0);
}

/// An HTTP pass-through between the browser and serve (serve checks that `Host` names its own
/// port, so a plain TCP relay is refused) whose responses the test can cut: the page's
/// `/api/events` stream breaks mid-body as when a network drops, and while it is down every
/// request gets a 502. Serve's health proof names serve's port, which the page (on the relay's
/// port) refuses; the relay knows the token, as a proxy a user trusts would, and answers the
/// proof for its own port.
struct CutProxy {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    cuts: tokio::sync::watch::Sender<u64>,
    server: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Upstream {
    base: String,
    token: String,
    port: u16,
    http: reqwest::Client,
    up: Arc<AtomicBool>,
    cuts: tokio::sync::watch::Receiver<u64>,
}

async fn relay(State(u): State<Upstream>, req: Request) -> Response {
    if !u.up.load(Ordering::SeqCst) {
        return (StatusCode::BAD_GATEWAY, "the test cut the network").into_response();
    }
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let path = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    if let Some(nonce) = path.strip_prefix("/api/health?proof=") {
        let proof = cicy_test_support::serve::health_proof(&u.token, u.port, nonce);
        return axum::Json(json!({"ok": true, "proof": proof})).into_response();
    }
    let mut out = u.http.request(parts.method.clone(), format!("{}{path}", u.base)).body(body);
    for (k, v) in &parts.headers {
        if !matches!(k.as_str(), "host" | "content-length" | "accept-encoding" | "connection") {
            out = out.header(k.as_str(), v.as_bytes());
        }
    }
    let Ok(r) = out.send().await else {
        return (StatusCode::BAD_GATEWAY, "serve did not answer").into_response();
    };
    let mut builder = Response::builder().status(r.status().as_u16());
    for (k, v) in r.headers() {
        if !matches!(k.as_str(), "content-length" | "transfer-encoding" | "connection") {
            builder = builder.header(k.as_str(), v.as_bytes());
        }
    }
    // The body until it ends or the next cut; a cut ends it with an error, which makes the
    // server drop the connection instead of ending the body cleanly.
    let mut cuts = u.cuts.clone();
    cuts.mark_unchanged();
    let chunks = stream::unfold((r.bytes_stream().boxed(), Some(cuts)), |(mut body, cuts)| async move {
        let mut cuts = cuts?;
        tokio::select! {
            chunk = body.next() => match chunk {
                Some(Ok(b)) => Some((Ok(b), (body, Some(cuts)))),
                Some(Err(e)) => Some((Err(std::io::Error::other(e)), (body, None))),
                None => None,
            },
            _ = cuts.changed() => Some((Err(std::io::Error::other("cut")), (body, None))),
        }
    });
    builder.body(Body::from_stream(chunks)).unwrap()
}

impl CutProxy {
    async fn start(upstream: &str, token: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let (cuts, rx) = tokio::sync::watch::channel(0);
        let state = Upstream {
            base: upstream.to_string(),
            token: token.to_string(),
            port: addr.port(),
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            up: up.clone(),
            cuts: rx,
        };
        let app = Router::new().fallback(relay).with_state(state);
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { addr, up, cuts, server }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Breaks every response in flight and answers 502 until [`CutProxy::restore`].
    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The seqs of the entries the live pane shows for `events` (docs/design.md §14's DOM contract):
/// a run of text (or thinking) deltas is one entry at its first delta, a tool call one entry
/// at its `tool_started` that its `tool_finished` fills in, `text_end` closes a block,
/// `state` shows on the list's dot only and `prompt` as a bubble (`.you`, not `.ev`); every
/// other event is a line of its own (`usage` and `round_started` leave an open text block open).
fn entries(events: &[Frame]) -> Vec<String> {
    let mut out = Vec::new();
    let mut open: Option<&str> = None;
    for f in events {
        let t = f.event.as_str();
        let opens = match t {
            "text_delta" | "thinking_delta" => {
                let fresh = open != Some(t);
                open = Some(t);
                fresh
            }
            "state" => false,
            // A prompt is a bubble (`.you`), not an event line; it closes an open block.
            "prompt" => {
                open = None;
                false
            }
            "text_end" | "tool_finished" => {
                open = None;
                false
            }
            "usage" | "round_started" => true,
            _ => {
                open = None;
                true
            }
        };
        if opens {
            out.push(f.data["seq"].to_string());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_shows_every_event_once() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    gw.push(Reply::sse(anthropic_text("Before the cut.")));
    gw.push(Reply::sse(anthropic_text("Said while the page was away.")));
    gw.push(Reply::sse(anthropic_tool_use("toolu_1", "shell", r#"{"command": "echo away"}"#)));
    gw.push(Reply::sse(anthropic_text("Also while away.")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let proxy = CutProxy::start(&s.url(""), &s.token).await;
    let b = Browser::start(LAPTOP).await;
    open_logged_in(&b, &proxy.url(""), &s.token, 1).await;
    select(&b, &id).await;
    b.wait_js("the event stream live", "document.querySelector('#conn').dataset.state === 'live'").await;

    send(&b, "first").await;
    b.wait_js("the first answer", "[...document.querySelectorAll('#live .ev.text')].some(e => e.textContent === 'Before the cut.')").await;
    dot(&b, &id, "idle").await;

    proxy.cut();
    b.wait_js("the page sees the stream drop", "document.querySelector('#conn').dataset.state !== 'live'").await;
    // Two runs while the page is away, straight to serve, one after the other.
    let mut events = Vec::new();
    for (text, runs) in [("second", 2), ("third", 3)] {
        let (status, body) = s.post(&format!("/api/agents/{id}/prompt"), json!({"text": text})).await;
        assert_eq!((status, body), (200, json!({"queued": false})));
        events = agent_events(&s, &id, runs).await;
    }
    proxy.restore();

    b.wait_js("the page is live again", "document.querySelector('#conn').dataset.state === 'live'").await;
    b.wait_js(
        "the answers given while away",
        "[...document.querySelectorAll('#live .ev.text')].map(e => e.textContent).join('|') === 'Before the cut.|Said while the page was away.|Also while away.'",
    )
    .await;
    let reconnects = b.js("return window.cicyStats.reconnects").await;
    assert!(reconnects.as_u64().unwrap() >= 1, "cicyStats.reconnects = {reconnects}");
    assert_eq!(b.js("return window.cicyStats.gaps").await, 0, "the stream resumed after its last id without a gap");

    // Every event of the log once, in order: the page's entries are exactly the log's events
    // as entries open (see `entries`).
    assert_eq!(b.attrs("#live .ev", "data-seq").await, entries(&events));
    let first_deltas: Vec<String> = events
        .iter()
        .zip(std::iter::once(None).chain(events.iter().map(Some)))
        .filter(|(f, prev)| f.event == "text_delta" && prev.is_none_or(|p| p.event != "text_delta"))
        .map(|(f, _)| f.data["seq"].to_string())
        .collect();
    assert_eq!(b.attrs("#live .ev.text", "data-seq").await, first_deltas);
    let tool_seq = events.iter().find(|f| f.event == "tool_started").unwrap().data["seq"].to_string();
    assert_eq!(b.attrs("#live .ev.tool", "data-seq").await, vec![tool_seq]);
    let turns_ended: Vec<String> = events.iter().filter(|f| f.event == "turn_ended").map(|f| f.data["seq"].to_string()).collect();
    assert_eq!(b.attrs("#live .ev[data-type='turn_ended']", "data-seq").await, turns_ended);
    // Every prompt once, the two sent straight to serve while the page was away included; the
    // page's own bubble took its event's seq.
    assert_eq!(b.texts("#live .you").await, ["first", "second", "third"]);
    let prompts: Vec<String> = events.iter().filter(|f| f.event == "prompt").map(|f| f.data["seq"].to_string()).collect();
    assert_eq!(prompts.len(), 3);
    assert_eq!(b.attrs("#live .you", "data-seq").await, prompts);

    b.close().await;
    assert_eq!(s.stop().await, 0);
}

/// Whether the page scrolls sideways.
async fn scrolls_sideways(b: &Browser) -> bool {
    b.js("return document.documentElement.scrollWidth > window.innerWidth").await == json!(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_agents_at_laptop_and_phone_width_from_this_origin_only() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let ids: Vec<String> = (0..100).map(|i| t.create_titled("tester", &format!("Worker {i:03} of the build farm"), None)).collect();
    let answer = "All hundred workers are listed; this answer streamed in while you watched.";
    gw.push(Reply::sse(anthropic_text(answer)));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    for id in &ids[1..3] {
        let (status, _) = s.post(&format!("/api/agents/{id}/todos"), json!({"text": "check the nightly build", "at": "+2 hours"})).await;
        assert_eq!(status, 201);
    }

    let plain = reqwest::Client::builder().no_proxy().build().unwrap();
    let page = plain.get(s.url("/")).send().await.unwrap();
    assert_eq!(
        page.headers()["content-security-policy"],
        "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"
    );

    let b = Browser::start(LAPTOP).await;
    open_logged_in(&b, &s.url(""), &s.token, 100).await;
    assert_eq!(b.js("return window.innerWidth").await, json!(LAPTOP.0));
    assert_eq!(b.texts("#agent-count").await, vec!["100".to_string()]);
    let mut shown = b.attrs("#agents .agent", "data-id").await;
    shown.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(shown, want);
    assert!(!scrolls_sideways(&b).await, "no sideways scroll at laptop width");
    let wakes = b.texts("#agents .agent .wake").await;
    assert_eq!(wakes.iter().filter(|w| w.starts_with("wakes ")).count(), 2, "the two agents with a todo show their next wake: {wakes:?}");
    select(&b, &ids[0]).await;
    send(&b, "are they all there").await;
    b.wait_js(
        "the streamed answer",
        &format!("[...document.querySelectorAll('#live .ev.text')].some(e => e.textContent === {})", json!(answer)),
    )
    .await;
    dot(&b, &ids[0], "idle").await;
    assert!(!scrolls_sideways(&b).await, "no sideways scroll with an answer shown");
    b.screenshot("agents-laptop").await;

    b.client.set_window_size(PHONE.0, PHONE.1).await.unwrap();
    b.wait_js("a phone-wide window", &format!("window.innerWidth === {}", PHONE.0)).await;
    b.client.refresh().await.unwrap();
    b.wait_js("100 agent rows on the phone", "document.querySelectorAll('#agents .agent').length === 100").await;
    assert!(!scrolls_sideways(&b).await, "no sideways scroll at phone width");
    b.screenshot("agents-phone").await;

    let origin = s.url("");
    let elsewhere = b
        .js(&format!(
            "return performance.getEntriesByType('resource').map(e => e.name).filter(n => new URL(n).origin !== {})",
            json!(origin)
        ))
        .await;
    assert_eq!(elsewhere, json!([]), "every request went to the page's own origin");
    let here = b.js("return performance.getEntriesByType('resource').length").await;
    assert!(here.as_u64().unwrap() >= 3, "the page loaded its script and style and asked the API: {here}");
    b.wait_js("the event stream live", "document.querySelector('#conn').dataset.state === 'live'").await;
    assert_eq!(
        b.js("return [document.querySelectorAll('script:not([src])').length, document.querySelectorAll('style').length]").await,
        json!([0, 0]),
        "no inline script or style element"
    );

    b.close().await;
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_pane_shows_the_past_across_a_seq_jump_after_a_crash() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    gw.push(Reply::sse(anthropic_text("Before the crash.")));
    gw.push(Reply::sse(anthropic_text("After the crash.")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    s.chat(&id, "one").await.until("done").await;
    assert_eq!(s.stop().await, 0);
    // The seqs jump from about 12 to 1025, as after a crash.
    cicy_test_support::serve::as_if_killed_holding_the_lease(&t.workspace(&id));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let after = s.chat(&id, "two").await.until("done").await;
    assert!(after[0].id.unwrap() > 1024, "{:?}", after[0].id);

    let b = Browser::start(LAPTOP).await;
    open_logged_in(&b, &s.url(""), &s.token, 1).await;
    select(&b, &id).await;
    // The pane loads the newest logged events by count: both answers, not only the events
    // above `last_seq - 300`.
    b.wait_js(
        "both answers in the live pane",
        "[...document.querySelectorAll('#live .ev.text')].map(e => e.textContent).join('|') === 'Before the crash.|After the crash.'",
    )
    .await;
    // The prompts come from the log too: neither was sent by this page.
    assert_eq!(b.texts("#live .you").await, ["one", "two"]);
    b.close().await;
    assert_eq!(s.stop().await, 0);
}
