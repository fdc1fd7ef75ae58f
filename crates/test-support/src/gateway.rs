//! A scripted AI gateway for integration tests (docs/design.md §10).
//!
//! Owns: an axum server on 127.0.0.1:0 inside the test that records every request and answers
//! with queued [`Reply`]s in order (any method, any path but `GET /props`), plus builders of real-looking SSE
//! streams in both wire styles. Optionally, aux requests (`x-cicy-aux`) get a standing reply of
//! their own ([`ScriptedGateway::on_aux`]) and an empty queue falls back to a generator
//! ([`ScriptedGateway::fallback`]). When the script runs out it answers HTTP 500 saying so, so
//! a test that sends too many requests fails loudly.
//!
//! `GET /props`, where llama.cpp's server reports its context window, is answered apart: with
//! the body [`ScriptedGateway::serve_props`] set, else 404 as a gateway without it (Anthropic's
//! answer). It is recorded in [`ScriptedGateway::props_requests`], not among the requests, and
//! takes nothing from the queue, so a test that counts the turn's requests counts the same.
//!
//! Every request to `…/messages` or `…/chat/completions` (aux ones too) is first checked by the
//! [`referee`](crate::referee) against the rules the real API enforces. A request that breaks one
//! gets the 400 the real API would send (the scripted queue is left untouched) and the violation
//! is recorded; dropping the gateway then panics, naming each violation, unless the test is
//! already failing. So no test passes while the runtime sends a request a real API refuses, even
//! when the product tolerates the 400 (choice: a check at `Drop` covers every test without
//! each one asking; [`ScriptedGateway::violations`] lets a test look earlier).
//!
//! Must not touch: the product's code paths — it talks to the client only over HTTP.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use futures_util::{stream, StreamExt};
use serde_json::json;

use crate::referee::{self, Api};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// HTTP 200 `text/event-stream`, the chunks written one by one with `delay` between them.
    Sse { chunks: Vec<Vec<u8>>, delay: Duration },
    /// Any status with headers and a body (e.g. 429 with `retry-after`).
    Status { status: u16, headers: Vec<(String, String)>, body: String },
    /// HTTP 200 stream: the chunks, then the connection stays open without ever ending.
    SseThenHang { chunks: Vec<Vec<u8>> },
    /// Any status with headers and a body of any bytes (e.g. a gzipped stream).
    Raw { status: u16, headers: Vec<(String, String)>, body: Vec<u8> },
    /// HTTP 200 stream whose chunks are written once `gate` gives a permit (a slow answer the
    /// test releases), or after `after` when there is no gate (a gateway that takes its time).
    Held { chunks: Vec<Vec<u8>>, gate: Option<Arc<tokio::sync::Semaphore>>, after: Duration },
    /// HTTP 200 stream: `first` written at once, then `rest` once `gate` gives a permit (an
    /// answer held mid-stream, so a test can look at what the client shows of a partial answer).
    Paused { first: Vec<Vec<u8>>, rest: Vec<Vec<u8>>, gate: Arc<tokio::sync::Semaphore> },
}

impl Reply {
    /// An SSE reply without delays between chunks.
    pub fn sse(chunks: Vec<Vec<u8>>) -> Self {
        Reply::Sse { chunks, delay: Duration::ZERO }
    }

    /// An SSE reply written once the returned gate gets a permit (`gate.add_permits(1)`).
    pub fn gated(chunks: Vec<Vec<u8>>) -> (Self, Arc<tokio::sync::Semaphore>) {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        (Reply::Held { chunks, gate: Some(gate.clone()), after: Duration::ZERO }, gate)
    }

    /// An SSE reply that writes `chunks[..at]`, then the rest once the returned gate gets a
    /// permit (`gate.add_permits(1)`).
    pub fn paused(mut chunks: Vec<Vec<u8>>, at: usize) -> (Self, Arc<tokio::sync::Semaphore>) {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let rest = chunks.split_off(at);
        (Reply::Paused { first: chunks, rest, gate: gate.clone() }, gate)
    }

    pub fn status(status: u16, headers: &[(&str, &str)], body: &str) -> Self {
        Reply::Status { status, headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), body: body.to_string() }
    }
}

/// A request as the gateway received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// Lowercased names, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    pub fn body_str(&self) -> String {
        String::from_utf8(self.body.clone()).expect("request body is UTF-8")
    }
}

/// Makes the reply to the `n`-th main request (0-based, aux requests not counted).
pub type Generator = Arc<dyn Fn(usize) -> Reply + Send + Sync>;

/// Picks the reply to a main request by looking at it (e.g. which agent it is for), or `None`
/// to leave it to the queue and the fallback.
pub type RequestRouter = Arc<dyn Fn(&RecordedRequest) -> Option<Reply> + Send + Sync>;

#[derive(Default)]
struct Script {
    replies: VecDeque<Reply>,
    requests: Vec<RecordedRequest>,
    aux: Option<Reply>,
    fallback: Option<Generator>,
    router: Option<RequestRouter>,
    main_served: usize,
    /// The body of `GET /props`; `None` answers 404.
    props: Option<serde_json::Value>,
    props_requests: Vec<RecordedRequest>,
    /// `<method> <path> (request n): <rule broken, where>` for each request the referee refused.
    violations: Vec<String>,
    /// Woken whenever a request has been recorded.
    arrived: Arc<tokio::sync::Notify>,
}

/// The running gateway; the server stops when this is dropped.
pub struct ScriptedGateway {
    addr: SocketAddr,
    script: Arc<Mutex<Script>>,
    server: tokio::task::JoinHandle<()>,
}

impl ScriptedGateway {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let script = Arc::new(Mutex::new(Script::default()));
        let app = Router::new().fallback(handle).with_state(script.clone());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("scripted gateway server");
        });
        Self { addr, script, server }
    }

    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues a reply; replies are served in the order pushed.
    pub fn push(&self, reply: Reply) {
        self.script.lock().expect("script lock").replies.push_back(reply);
    }

    /// Answers every request carrying `x-cicy-aux` with a copy of `reply` (the queue is left to
    /// the main requests).
    pub fn on_aux(&self, reply: Reply) {
        self.script.lock().expect("script lock").aux = Some(reply);
    }

    /// Answers main requests with `f(n)` whenever the queue is empty.
    pub fn fallback(&self, f: impl Fn(usize) -> Reply + Send + Sync + 'static) {
        self.script.lock().expect("script lock").fallback = Some(Arc::new(f));
    }

    /// Answers each main request with `f(request)` when it gives a reply, before the queue: for
    /// agents whose requests come concurrently, in no fixed order.
    pub fn route(&self, f: impl Fn(&RecordedRequest) -> Option<Reply> + Send + Sync + 'static) {
        self.script.lock().expect("script lock").router = Some(Arc::new(f));
    }

    /// Answers `GET /props` with `body` (HTTP 200, JSON), as llama.cpp's server does.
    pub fn serve_props(&self, body: serde_json::Value) {
        self.script.lock().expect("script lock").props = Some(body);
    }

    /// Every `GET /props` received so far.
    pub fn props_requests(&self) -> Vec<RecordedRequest> {
        self.script.lock().expect("script lock").props_requests.clone()
    }

    /// Every request received so far but `GET /props`.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.script.lock().expect("script lock").requests.clone()
    }

    /// What the referee refused so far, one line per request (see the module doc).
    pub fn violations(&self) -> Vec<String> {
        self.script.lock().expect("script lock").violations.clone()
    }

    /// Waits until `n` requests have been received (woken by each arrival, no polling) and
    /// returns them; panics after 60 s so a test that never gets them fails instead of hanging.
    pub async fn wait_for_requests(&self, n: usize) -> Vec<RecordedRequest> {
        let arrived = self.script.lock().expect("script lock").arrived.clone();
        let wait = async {
            loop {
                let notified = arrived.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let reqs = self.requests();
                if reqs.len() >= n {
                    return reqs;
                }
                notified.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), wait).await.unwrap_or_else(|_| panic!("{n} requests never arrived"))
    }
}

impl Drop for ScriptedGateway {
    fn drop(&mut self) {
        self.server.abort();
        // A test already failing keeps its own message (the violations were printed as they came).
        if std::thread::panicking() {
            return;
        }
        let violations = self.violations();
        if !violations.is_empty() {
            panic!("the runtime sent {} request(s) a real API refuses with HTTP 400:\n{}", violations.len(), violations.join("\n"));
        }
    }
}

async fn handle(State(script): State<Arc<Mutex<Script>>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let reply = {
        let mut s = script.lock().expect("script lock");
        let recorded = RecordedRequest {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            headers: parts
                .headers
                .iter()
                .map(|(k, v)| (k.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
                .collect(),
            body: body.to_vec(),
        };
        if parts.method == axum::http::Method::GET && parts.uri.path() == "/props" {
            s.props_requests.push(recorded);
            return match &s.props {
                Some(props) => Response::builder()
                    .status(StatusCode::OK)
                    .header("content-type", "application/json")
                    .body(Body::from(props.to_string()))
                    .expect("response"),
                None => Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .header("content-type", "application/json")
                    .body(Body::from(r#"{"type":"error","error":{"type":"not_found_error","message":"Not Found"}}"#))
                    .expect("response"),
            };
        }
        s.requests.push(recorded);
        s.arrived.notify_waiters();
        let path = parts.uri.path();
        if let Some(api) = Api::for_path(path) {
            if let Err(rule) = referee::check(api, &body) {
                let line = format!("{} {path} (request {}): {rule}", parts.method, s.requests.len() - 1);
                eprintln!("referee: {line}\n  body: {}", String::from_utf8_lossy(&body));
                s.violations.push(line);
                return Response::builder()
                    .status(StatusCode::BAD_REQUEST)
                    .header("content-type", "application/json")
                    .body(Body::from(api.refusal_body(&rule)))
                    .expect("response");
            }
        }
        let is_aux = parts.headers.contains_key("x-cicy-aux");
        match (&s.aux, is_aux) {
            (Some(aux), true) => Some(aux.clone()),
            _ => {
                let n = s.main_served;
                s.main_served += 1;
                let routed = s.router.clone().and_then(|f| s.requests.last().and_then(|r| f(r)));
                routed.or_else(|| s.replies.pop_front()).or_else(|| s.fallback.as_ref().map(|f| f(n)))
            }
        }
    };
    let sse = |body: Body| {
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .body(body)
            .expect("response")
    };
    match reply {
        None => Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from("scripted gateway: the script ran out of replies (unexpected extra request)"))
            .expect("response"),
        Some(Reply::Status { status, headers, body }) => {
            let mut b = Response::builder().status(status);
            for (k, v) in headers {
                b = b.header(k, v);
            }
            b.body(Body::from(body)).expect("response")
        }
        Some(Reply::Raw { status, headers, body }) => {
            let mut b = Response::builder().status(status);
            for (k, v) in headers {
                b = b.header(k, v);
            }
            b.body(Body::from(body)).expect("response")
        }
        Some(Reply::Sse { chunks, delay }) => {
            let s = stream::iter(chunks.into_iter().enumerate()).then(move |(i, c)| async move {
                if i > 0 && !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                Ok::<_, Infallible>(Bytes::from(c))
            });
            sse(Body::from_stream(s))
        }
        Some(Reply::Held { chunks, gate, after }) => {
            let wait = async move {
                match gate {
                    Some(g) => drop(g.acquire_owned().await),
                    None => tokio::time::sleep(after).await,
                }
                stream::iter(chunks.into_iter().map(|c| Ok::<_, Infallible>(Bytes::from(c))))
            };
            sse(Body::from_stream(stream::once(wait).flatten()))
        }
        Some(Reply::Paused { first, rest, gate }) => {
            let rest = async move {
                drop(gate.acquire_owned().await);
                stream::iter(rest.into_iter().map(|c| Ok::<_, Infallible>(Bytes::from(c))))
            };
            let first = stream::iter(first.into_iter().map(|c| Ok::<_, Infallible>(Bytes::from(c))));
            sse(Body::from_stream(first.chain(stream::once(rest).flatten())))
        }
        Some(Reply::SseThenHang { chunks }) => {
            let s = stream::iter(chunks.into_iter().map(|c| Ok::<_, Infallible>(Bytes::from(c)))).chain(stream::pending());
            sse(Body::from_stream(s))
        }
    }
}

// ---- SSE builders --------------------------------------------------------------------------------

/// One SSE event: `event: <name>\ndata: <data>\n\n`.
pub fn event(name: &str, data: &str) -> Vec<u8> {
    format!("event: {name}\ndata: {data}\n\n").into_bytes()
}

/// One data-only SSE event (OpenAI style): `data: <data>\n\n`.
pub fn data(data: &str) -> Vec<u8> {
    format!("data: {data}\n\n").into_bytes()
}

/// Splits `s` into up to `n` non-empty pieces on character boundaries.
pub fn pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    let size = chars.len().div_ceil(n.max(1));
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// Usage reported by the Anthropic builders: message_start carries input 25, cache creation
/// 10, cache read 100, output 1; message_delta carries output 15.
pub const ANTHROPIC_USAGE: (u64, u64, u64, u64) = (25, 15, 10, 100);

fn anthropic_start() -> Vec<Vec<u8>> {
    vec![
        event(
            "message_start",
            r#"{"type":"message_start","message":{"id":"msg_test","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":10,"cache_read_input_tokens":100,"output_tokens":1}}}"#,
        ),
        event("ping", r#"{"type": "ping"}"#),
    ]
}

fn anthropic_end(stop_reason: &str) -> Vec<Vec<u8>> {
    vec![
        event(
            "message_delta",
            &json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 15}})
                .to_string(),
        ),
        event("message_stop", r#"{"type":"message_stop"}"#),
    ]
}

fn anthropic_text_block(index: u32, text: &str) -> Vec<Vec<u8>> {
    let mut out = vec![event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}).to_string(),
    )];
    for p in pieces(text, 3) {
        out.push(event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}}).to_string(),
        ));
    }
    out.push(event("content_block_stop", &json!({"type": "content_block_stop", "index": index}).to_string()));
    out
}

fn anthropic_tool_block(index: u32, id: &str, name: &str, input_json: &str) -> Vec<Vec<u8>> {
    let mut out = vec![event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})
            .to_string(),
    )];
    // Real streams begin with an empty fragment, then cut the JSON anywhere.
    let mut frags = vec![String::new()];
    frags.extend(pieces(input_json, 4));
    for f in frags {
        out.push(event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": f}}).to_string(),
        ));
    }
    out.push(event("content_block_stop", &json!({"type": "content_block_stop", "index": index}).to_string()));
    out
}

/// A complete Anthropic stream with no content block at all, stop_reason `end_turn`.
pub fn anthropic_empty() -> Vec<Vec<u8>> {
    [anthropic_start(), anthropic_end("end_turn")].concat()
}

/// A complete Anthropic stream answering `text` (in three deltas), stop_reason `end_turn`.
pub fn anthropic_text(text: &str) -> Vec<Vec<u8>> {
    [anthropic_start(), anthropic_text_block(0, text), anthropic_end("end_turn")].concat()
}

/// A complete Anthropic stream answering with one text block sent as exactly the `deltas`
/// given (one `text_delta` each), stop_reason `end_turn`.
pub fn anthropic_text_deltas(deltas: &[String]) -> Vec<Vec<u8>> {
    let mut out = anthropic_start();
    out.push(event("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#));
    for d in deltas {
        out.push(event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": d}}).to_string(),
        ));
    }
    out.push(event("content_block_stop", r#"{"type":"content_block_stop","index":0}"#));
    out.extend(anthropic_end("end_turn"));
    out
}

/// A complete Anthropic stream with one tool_use whose input is streamed as several
/// `input_json_delta` fragments; stop_reason `tool_use`.
pub fn anthropic_tool_use(id: &str, name: &str, input_json: &str) -> Vec<Vec<u8>> {
    [anthropic_start(), anthropic_tool_block(0, id, name, input_json), anthropic_end("tool_use")].concat()
}

/// Text (block 0) then a tool_use (block 1); stop_reason `tool_use`.
pub fn anthropic_text_and_tool(text: &str, id: &str, name: &str, input_json: &str) -> Vec<Vec<u8>> {
    [anthropic_start(), anthropic_text_block(0, text), anthropic_tool_block(1, id, name, input_json), anthropic_end("tool_use")].concat()
}

/// Several tool_use blocks (indexes 0, 1, …) in one response; stop_reason `tool_use`.
pub fn anthropic_tool_uses(calls: &[(&str, &str, &str)]) -> Vec<Vec<u8>> {
    let blocks = calls.iter().zip(0u32..).flat_map(|((id, name, input), i)| anthropic_tool_block(i, id, name, input));
    [anthropic_start(), blocks.collect(), anthropic_end("tool_use")].concat()
}

/// The two events that open an Anthropic stream (message_start, ping) — for cut-off streams.
pub fn anthropic_prelude() -> Vec<Vec<u8>> {
    anthropic_start()
}

/// An in-stream Anthropic error event.
pub fn anthropic_error(kind: &str, message: &str) -> Vec<u8> {
    event("error", &json!({"type": "error", "error": {"type": kind, "message": message}}).to_string())
}

/// Usage reported by the OpenAI builders: prompt 125 (100 cached), completion 15 — which cicy
/// reports as input 25, cache read 100, output 15.
pub const OPENAI_USAGE: &str =
    r#"{"prompt_tokens":125,"completion_tokens":15,"total_tokens":140,"prompt_tokens_details":{"cached_tokens":100}}"#;

fn openai_chunk(delta: serde_json::Value, finish: Option<&str>) -> Vec<u8> {
    data(
        &json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string(),
    )
}

fn openai_end() -> Vec<Vec<u8>> {
    vec![
        data(&format!(
            r#"{{"id":"chatcmpl-test","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[],"usage":{OPENAI_USAGE}}}"#
        )),
        data("[DONE]"),
    ]
}

/// A complete OpenAI stream answering `text` (in three deltas), then the usage chunk and
/// `[DONE]`.
pub fn openai_text(text: &str) -> Vec<Vec<u8>> {
    let mut out = vec![openai_chunk(json!({"role": "assistant", "content": ""}), None)];
    for p in pieces(text, 3) {
        out.push(openai_chunk(json!({"content": p}), None));
    }
    out.push(openai_chunk(json!({}), Some("stop")));
    [out, openai_end()].concat()
}

/// A complete OpenAI stream with one tool call: id and name in the first fragment only,
/// arguments in several fragments; finish_reason `tool_calls`.
pub fn openai_tool_call(id: &str, name: &str, args: &str) -> Vec<Vec<u8>> {
    let mut out = vec![openai_chunk(
        json!({"role": "assistant", "content": null,
               "tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
        None,
    )];
    for p in pieces(args, 4) {
        out.push(openai_chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}), None));
    }
    out.push(openai_chunk(json!({}), Some("tool_calls")));
    [out, openai_end()].concat()
}
