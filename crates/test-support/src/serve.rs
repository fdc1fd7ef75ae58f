//! A real `cicy-agent serve` process for a test home, and an HTTP client for it: JSON calls and
//! an SSE reader that returns frames exactly as they were sent. Test fixtures only.
//!
//! The process is started on port 0 and found through the `serve.json` it writes; dropping a
//! [`Serve`] kills it, so every test stops what it started.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;

use crate::wait;

/// A running serve.
pub struct Serve {
    pub child: tokio::process::Child,
    pub pid: i32,
    pub port: u16,
    pub token: String,
    pub home: PathBuf,
    http: reqwest::Client,
}

/// One SSE frame as sent: `id:` (absent for frames outside the log), `event:`, `data:` parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub id: Option<u64>,
    pub event: String,
    pub data: Value,
}

impl Serve {
    /// Starts `cicy-agent serve --port 0` with `extra` arguments and waits for its `serve.json`.
    pub async fn start(home: &Path, gateway: &str, extra: &[&str]) -> Self {
        Self::start_with(home, gateway, extra, &[]).await
    }

    /// [`Serve::start`] with `env` set for serve.
    pub async fn start_with(home: &Path, gateway: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let info = home.join("serve.json");
        let _ = std::fs::remove_file(&info);
        let mut args = vec!["serve", "--port", "0"];
        args.extend_from_slice(extra);
        let mut cmd = crate::cli::command(home, gateway, &args);
        cmd.envs(env.iter().copied());
        cmd.stdout(Stdio::null()).stderr(Stdio::inherit());
        let child = cmd.spawn().expect("spawn cicy-agent serve");
        let pid = child.id().expect("pid") as i32;
        assert!(wait::appears_within(&info, Duration::from_secs(20)).await, "serve never wrote serve.json");
        let json: Value = loop {
            // The file is renamed into place, so once it exists it is whole.
            match std::fs::read(&info).ok().and_then(|b| serde_json::from_slice(&b).ok()) {
                Some(v) => break v,
                None => tokio::task::yield_now().await,
            }
        };
        assert_eq!(json["pid"], pid, "serve.json names this process");
        let port = json["port"].as_u64().expect("port") as u16;
        let token = std::fs::read_to_string(home.join("api_token")).expect("api_token").trim().to_string();
        let http = reqwest::Client::builder().no_proxy().build().expect("client");
        Self { child, pid, port, token, home: home.to_path_buf(), http }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// A request with the bearer token.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, self.url(path)).bearer_auth(&self.token)
    }

    /// POSTs `body`; the status and the JSON answer (`Null` when it is not JSON).
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self.request(reqwest::Method::POST, path).json(&body).send().await.expect("POST");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Waits (up to 30 s) until nothing is left that could wake an agent: every agent serve
    /// lists is idle with nothing queued, before and after none of `workspaces` is seen holding
    /// a message file in its inbox or a command in its outbox. A message sent by mistake stays
    /// in one of those places until a turn takes it, and a turn makes the agent busy, so what a
    /// test counts after this is final. It replaces "sleep, then check that nothing happened",
    /// which a slow machine passes without the check having looked.
    pub async fn settled(&self, workspaces: &[PathBuf]) {
        let waiting = |ws: &PathBuf| {
            let listed = |dir: PathBuf, md_only: bool| {
                std::fs::read_dir(dir).into_iter().flatten().flatten().any(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    !name.starts_with('.') && e.path().is_file() && (!md_only || name.ends_with(".md"))
                })
            };
            listed(ws.join(".cicy/messages/inbox"), true) || listed(ws.join(".cicy/outbox/new"), false)
        };
        let start = std::time::Instant::now();
        loop {
            if self.all_idle().await && !workspaces.iter().any(waiting) && self.all_idle().await {
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "serve never settled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn all_idle(&self) -> bool {
        let (status, rows) = self.get("/api/agents").await;
        assert_eq!(status, 200, "{rows}");
        rows.as_array()
            .expect("agent rows")
            .iter()
            .all(|r| r["state"] == "idle" && r["busy"] == false && r["pending"] == 0 && r["steering"] == 0)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.request(reqwest::Method::GET, path).send().await.expect("GET");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Opens `POST /api/cicy/chat` for `text` as an SSE stream.
    pub async fn chat(&self, agent: &str, text: &str) -> Sse {
        let r = self
            .request(reqwest::Method::POST, "/api/cicy/chat")
            .json(&serde_json::json!({"agent_id": agent, "text": text}))
            .send()
            .await
            .expect("chat");
        assert_eq!(r.status(), 200, "chat answered {}", r.status());
        Sse::new(r)
    }

    /// Opens `GET /api/agents/<id>/events`, after `last` when given.
    pub async fn events(&self, agent: &str, last: Option<u64>) -> Sse {
        let mut req = self.request(reqwest::Method::GET, &format!("/api/agents/{agent}/events"));
        if let Some(n) = last {
            req = req.header("last-event-id", n.to_string());
        }
        let r = req.send().await.expect("events");
        assert_eq!(r.status(), 200);
        Sse::new(r)
    }

    /// Opens `GET /api/agents/<id>/events?last=<n>`: the `n` newest logged events, then live.
    pub async fn events_last(&self, agent: &str, n: usize) -> Sse {
        let r = self.request(reqwest::Method::GET, &format!("/api/agents/{agent}/events?last={n}")).send().await.expect("events");
        assert_eq!(r.status(), 200);
        Sse::new(r)
    }

    /// Opens `GET /api/events` (every agent), after gseq `last` when given.
    pub async fn all_events(&self, last: Option<u64>) -> Sse {
        let mut req = self.request(reqwest::Method::GET, "/api/events");
        if let Some(n) = last {
            req = req.header("last-event-id", n.to_string());
        }
        let r = req.send().await.expect("events");
        assert_eq!(r.status(), 200);
        Sse::new(r)
    }

    /// SIGTERM, then the exit code (bounded: a serve that does not stop fails the test).
    pub async fn stop(mut self) -> i32 {
        // SAFETY: kill(2) on the pid of the child this fixture started and has not reaped.
        unsafe { libc::kill(self.pid, libc::SIGTERM) };
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("serve stops within 30 s of SIGTERM")
            .expect("wait");
        status.code().unwrap_or(-1)
    }

    /// `kill -9`, reaped.
    pub async fn kill9(mut self) {
        self.child.start_kill().expect("kill");
        let _ = self.child.wait().await;
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// The `proof` that `GET /api/health?proof=<nonce>` must answer, computed here on its own:
/// hex HMAC-SHA256 keyed with `token` over `cicy-health-proof:<port>:<nonce>`.
pub fn health_proof(token: &str, port: u16, nonce: &str) -> String {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(token.as_bytes()).expect("any key length");
    mac.update(format!("cicy-health-proof:{port}:{nonce}").as_bytes());
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// An SSE response read frame by frame.
pub struct Sse {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl Sse {
    fn new(r: reqwest::Response) -> Self {
        Self { body: Box::pin(r.bytes_stream()), buf: Vec::new() }
    }

    /// The next frame (comments such as `: ping` skipped); `None` at the end of the stream.
    /// Panics after 60 s without one.
    pub async fn next(&mut self) -> Option<Frame> {
        tokio::time::timeout(Duration::from_secs(60), self.next_frame()).await.expect("an SSE frame within 60 s")
    }

    async fn next_frame(&mut self) -> Option<Frame> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let raw: Vec<u8> = self.buf.drain(..end + 2).collect();
                if let Some(f) = parse(&String::from_utf8_lossy(&raw)) {
                    return Some(f);
                }
                continue;
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                _ => return None,
            }
        }
    }

    /// Frames up to and including the first of type `event`.
    pub async fn until(&mut self, event: &str) -> Vec<Frame> {
        let mut out = Vec::new();
        while let Some(f) = self.next().await {
            let end = f.event == event;
            out.push(f);
            if end {
                return out;
            }
        }
        panic!("the stream ended before a `{event}` frame: {out:#?}");
    }
}

fn parse(raw: &str) -> Option<Frame> {
    let (mut id, mut event, mut data) = (None, None, None);
    for line in raw.lines() {
        if let Some(v) = line.strip_prefix("id: ") {
            id = Some(v.parse().expect("numeric id"));
        } else if let Some(v) = line.strip_prefix("event: ") {
            event = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("data: ") {
            data = Some(serde_json::from_str(v).expect("JSON data"));
        }
    }
    Some(Frame { id, event: event?, data: data? })
}

/// Leaves the event log of the workspace `ws` as a process killed while holding its writer
/// lease would (a range reserved up to 1024 in `hwm`, the lease's marker not `free`), so the
/// next run numbers from 1025: the seq jump of a crash, with every event written before it.
pub fn as_if_killed_holding_the_lease(ws: &Path) {
    let dir = ws.join(".cicy/events");
    std::fs::write(dir.join("hwm"), "1024").expect("hwm");
    std::fs::write(dir.join("writer"), "held").expect("writer");
}

/// The `type`s of `frames`.
pub fn types(frames: &[Frame]) -> Vec<String> {
    frames.iter().map(|f| f.event.clone()).collect()
}
