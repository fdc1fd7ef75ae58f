//! `chat`, `retry`, `compact` and `clear` through a running `cicy-agent serve` of this home
//! (docs/design.md §9 "CLI ↔ serve"): while a serve runs it owns the agents (their sessions, turn
//! locks and pending queues), so the CLI asks it over HTTP instead of taking the lock itself.
//!
//! A serve is live when `$CICY_HOME/serve.json` names a pid that exists (`kill(pid, 0)` succeeds
//! or says EPERM, as cryo checks) and `GET /api/health?proof=<nonce>` on its port answers within
//! 200 ms with the same `instance_id`; anything else (no file, a corrupt one, a dead pid, a port
//! that does not answer or answers for another serve) means in-process, so a stale file never
//! breaks the CLI. The answer must also carry the HMAC proof that the server knows the token
//! (docs/serve.md "The dashboard"): a program that took the port of a killed serve and repeats its
//! `instance_id` gets nothing more, and the command fails instead of running in-process (a
//! serve with another token may own the home). A stream that breaks while serve no longer
//! answers its health route is reported as serve having stopped (exit 1). Output and exit codes are those of the in-process path: every event goes through the
//! same printer; `done` and `state` (serve framing, never emitted in-process) are not printed.
//! Ctrl-C, SIGTERM and SIGHUP while a reply streams ask the serve to cancel and keep reading
//! until `done`; at a session's prompt they leave at once, as in-process. An `ask_user`
//! question in a session's stream is answered with the next stdin line through
//! `POST /api/agents/<id>/respond`; a one-shot chat prints how to answer it through that route.
//!
//! Must not touch: the history, the turn lock, the memory buffer: the serve owns them while it
//! runs.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, Result};
use futures_util::{Stream, StreamExt};
use reqwest::{RequestBuilder, Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use cicy::command::{Command, Line, NotACommand};
use cicy::event::{Event, EventKind};
use cicy::gateway::sse::{self, SseEvent};
use cicy::home::Home;
use cicy::lock::LockError;
use cicy::registry::Registry;
use cicy::role::{self, ToolConfig};
use cicy::serve::instance::pid_alive;

use super::answer;
use super::chat::{self, Input};
use super::exit::{Tally, Worst, CANCELLED};
use super::print;

/// docs/design.md §9: a serve that does not answer `/api/health` within 200 ms is not used.
const HEALTH_TIMEOUT: Duration = Duration::from_millis(200);

/// How long a serve whose event stream broke has to answer `/api/health` before it counts as
/// stopped: longer than [`HEALTH_TIMEOUT`], so a busy serve is not declared dead; a killed one
/// refuses the connection at once.
const STOPPED_TIMEOUT: Duration = Duration::from_secs(2);

/// A live serve of this home: one HTTP client (no proxy: the serve is on loopback) and its
/// base URL `http://127.0.0.1:<port>`.
#[derive(Debug)]
pub(super) struct Serve {
    client: reqwest::Client,
    base: reqwest::Url,
    /// The bearer token: `CICY_API_TOKEN`, else `$CICY_HOME/api_token`, trimmed; the serve
    /// proved it knows it before this was made.
    token: String,
    /// serve.json's `pid` and `instance_id`, to tell a serve that stopped from a broken stream.
    pid: u32,
    instance_id: String,
}

/// serve went away while a reply streamed (killed, crashed): the line failed (exit 1,
/// docs/serve.md "Output, Ctrl-C and exit codes") and a session ends, since nothing is left
/// to send its next line to.
#[derive(Debug, thiserror::Error)]
#[error("serve (pid {pid}) stopped while the reply was streaming; the turn is healed and marked cancelled when the agent is next opened (at serve's next start, or by the next `chat`)")]
struct ServeStopped {
    pid: u32,
}

/// The live serve of `home`, or `None` (see the module doc for what "live" means). Errors:
/// the program answering as this home's serve does not prove it knows the token; nothing was
/// sent to it but the health question.
pub(super) async fn live_serve(home: &Home) -> Result<Option<Serve>> {
    let Some(file) = cicy::serve::read_info(home) else {
        return Ok(None);
    };
    if !pid_alive(i64::from(file.pid)) {
        return Ok(None);
    }
    let client = reqwest::Client::builder().no_proxy().build()?;
    let base = reqwest::Url::parse(&format!("http://127.0.0.1:{}", file.port))?;
    let nonce: String = rand::random::<[u8; 16]>().iter().map(|b| format!("{b:02x}")).collect();
    let Some(answer) = health(&client, &base, &file.instance_id, Some(&nonce), HEALTH_TIMEOUT).await else {
        return Ok(None);
    };
    let proof = answer.get("proof").and_then(Value::as_str).unwrap_or_default();
    match token(home) {
        Some(token) if cicy::serve::proof_matches(&token, file.port, &nonce, proof) => {
            Ok(Some(Serve { client, base, token, pid: file.pid, instance_id: file.instance_id }))
        }
        token => Err(unproven(home, &file, token.is_some())),
    }
}

/// `GET /api/health[?proof=<nonce>]`'s answer when it comes within `limit` and names
/// `instance_id`; `None` otherwise.
async fn health(client: &reqwest::Client, base: &reqwest::Url, instance_id: &str, nonce: Option<&str>, limit: Duration) -> Option<Value> {
    let ask = async {
        let mut url = base.join("/api/health").ok()?;
        if let Some(nonce) = nonce {
            url.query_pairs_mut().append_pair("proof", nonce);
        }
        client.get(url).send().await.ok()?.json::<Value>().await.ok()
    };
    let answer = tokio::time::timeout(limit, ask).await.ok().flatten()?;
    (answer.get("instance_id").and_then(Value::as_str) == Some(instance_id)).then_some(answer)
}

/// The refusal when the program on serve.json's port answers with its instance but not with
/// the proof: a program that took the port of a serve killed with kill -9, or a serve with
/// another token. Not run in-process either: if it is serve, it owns this home's agents.
fn unproven(home: &Home, file: &cicy::serve::ServeInfo, have_token: bool) -> anyhow::Error {
    let serve_json = home.root().join("serve.json");
    let why = if have_token {
        "did not prove that it knows the API token"
    } else {
        "could not be asked to prove that it knows the API token: there is none here (CICY_API_TOKEN or api_token)"
    };
    anyhow!(
        "the program on 127.0.0.1:{} that {} names (pid {}) {why}, so neither the token nor the message was sent to it; if serve is not running, remove {}; if it runs with another token, set CICY_API_TOKEN to that token; --local runs in this process",
        file.port,
        serve_json.display(),
        file.pid,
        serve_json.display()
    )
}

fn token(home: &Home) -> Option<String> {
    if let Some(t) = std::env::var("CICY_API_TOKEN").ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty()) {
        return Some(t);
    }
    let t = std::fs::read_to_string(home.root().join("api_token")).ok()?;
    Some(t.trim().to_string()).filter(|t| !t.is_empty())
}

impl Serve {
    fn url(&self, segments: &[&str]) -> Result<reqwest::Url> {
        let mut url = self.base.clone();
        url.path_segments_mut().map_err(|()| anyhow!("{} cannot take a path", self.base))?.pop_if_empty().extend(segments);
        Ok(url)
    }

    fn auth(&self, rb: RequestBuilder) -> RequestBuilder {
        rb.bearer_auth(&self.token)
    }

    async fn post(&self, segments: &[&str], body: Value) -> Result<Response> {
        let url = self.url(segments)?;
        self.auth(self.client.post(url.clone()).json(&body)).send().await.map_err(|e| anyhow!("POST {url}: {e}"))
    }

    async fn get(&self, segments: &[&str], last_event_id: Option<u64>) -> Result<Response> {
        let url = self.url(segments)?;
        let mut rb = self.auth(self.client.get(url.clone()));
        if let Some(n) = last_event_id {
            rb = rb.header("Last-Event-ID", n.to_string());
        }
        rb.send().await.map_err(|e| anyhow!("GET {url}: {e}"))
    }
}

/// The error of a refused request: the serve's `message` (`{"error": code, "message"}`), else
/// the status and body.
async fn api_error(resp: Response) -> anyhow::Error {
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    match serde_json::from_str::<Value>(&body).ok().and_then(|v| v.get("message")?.as_str().map(str::to_string)) {
        Some(message) => anyhow!(message),
        None => anyhow!("the serve answered {status}: {}", body.trim()),
    }
}

/// Reads a JSON answer; a non-success status is an error (see [`api_error`]).
async fn json_answer(resp: Response) -> Result<Value> {
    if !resp.status().is_success() {
        return Err(api_error(resp).await);
    }
    Ok(resp.json().await?)
}

/// The event of one SSE frame, whose data is exactly an [`Event`]'s JSON. `None` for a frame
/// this build does not know (a newer serve's event type): it is skipped, not fatal.
fn parse_frame(frame: &SseEvent) -> Option<Event> {
    match serde_json::from_str(&frame.data) {
        Ok(ev) => Some(ev),
        Err(e) => {
            tracing::debug!("skipping the {} frame {:?}: {e}", frame.event, frame.data);
            None
        }
    }
}

/// The events of an SSE response, in order.
fn events(resp: Response) -> impl Stream<Item = Result<Event>> + Send + Unpin {
    Box::pin(sse::decode(resp.bytes_stream()).filter_map(|item| async move {
        match item {
            Ok(frame) => parse_frame(&frame).map(Ok),
            Err(e) => Some(Err(anyhow!("reading the serve's event stream: {e}"))),
        }
    }))
}

/// What the signal watcher shares with the stream reader.
#[derive(Debug, Default)]
struct SignalState {
    /// A reply is streaming: a signal asks the serve to cancel instead of leaving.
    streaming: bool,
    /// The signal received while streaming: 130 (SIGINT), 143 (SIGTERM) or 129 (SIGHUP); a
    /// SIGTERM or SIGHUP is kept over a later SIGINT, since the process must leave.
    got: Option<u8>,
}

/// Watches SIGINT, SIGTERM and SIGHUP: while streaming, records the code and wakes the reader
/// (which posts the cancel); otherwise exits at once with the signal's code.
fn watch_signals(state: Arc<Mutex<SignalState>>) -> Result<mpsc::UnboundedReceiver<()>> {
    let (tx, rx) = mpsc::unbounded_channel();
    chat::on_signal(move |code| {
        let streaming = state.lock().map(|mut s| {
            if s.streaming && s.got.is_none_or(|g| g == CANCELLED) {
                s.got = Some(code);
            }
            s.streaming
        });
        if streaming.unwrap_or(false) {
            let _ = tx.send(());
        } else {
            std::process::exit(code.into());
        }
    })?;
    Ok(rx)
}

/// The printer of the in-process path.
enum Printer {
    Human(print::Human),
    Json,
}

/// One command's conversation with the serve about one agent.
struct Remote<'a> {
    serve: Serve,
    agent: &'a str,
    printer: Printer,
    signals: Arc<Mutex<SignalState>>,
    cancel_rx: mpsc::UnboundedReceiver<()>,
    /// A stdin session's lines; `None` in a one-shot chat (no user to answer `ask_user`).
    stdin: Option<answer::Lines>,
}

impl<'a> Remote<'a> {
    fn new(serve: Serve, agent: &'a str, json: bool) -> Result<Self> {
        let signals = Arc::new(Mutex::new(SignalState::default()));
        let cancel_rx = watch_signals(signals.clone())?;
        let printer = if json { Printer::Json } else { Printer::Human(print::Human::default()) };
        Ok(Self { serve, agent, printer, signals, cancel_rx, stdin: None })
    }

    fn print(&self, ev: &Event) {
        if matches!(ev.kind, EventKind::Done | EventKind::State { .. }) {
            return;
        }
        match &self.printer {
            Printer::Human(h) => h.print(ev),
            Printer::Json => print::json(ev),
        }
    }

    /// Prints an event made here, not by the serve (a refusal); seq 0 like a stream-local frame.
    fn local(&self, kind: EventKind) {
        self.print(&Event { seq: 0, agent_id: self.agent.to_string(), kind });
    }

    /// Runs one request to the serve with signals turned into cancels: from before its POST
    /// (a signal while it is sent is not lost) until its reply is done. Returns `op`'s exit
    /// code, or 130 after SIGINT; after SIGTERM or SIGHUP the process leaves here with 143 or
    /// 129.
    async fn guarded(&mut self, op: impl AsyncFnOnce(&mut Self) -> Result<u8>) -> Result<u8> {
        // Wake-ups left by signals of an earlier line, whose cancel was already posted.
        while self.cancel_rx.try_recv().is_ok() {}
        if let Ok(mut s) = self.signals.lock() {
            s.streaming = true;
            s.got = None;
        }
        let result = op(self).await;
        let got = self.signals.lock().ok().and_then(|mut s| {
            s.streaming = false;
            s.got
        });
        match got {
            Some(CANCELLED) => result.map(|_| CANCELLED),
            Some(code) => std::process::exit(code.into()),
            None => result,
        }
    }

    /// Prints `events` until `dones` `done` events were counted, posting a cancel for each
    /// signal meanwhile; with `after_start`, a `done` before the first `turn_started` belongs
    /// to an earlier run and is not counted. Returns the exit code of what was streamed.
    async fn follow(
        &mut self,
        mut events: impl Stream<Item = Result<Event>> + Unpin,
        mut dones: usize,
        mut after_start: bool,
        mut tally: Tally,
    ) -> Result<u8> {
        // The open `ask_user` question the next stdin line answers.
        let mut question: Option<String> = None;
        loop {
            let next = tokio::select! {
                Some(()) = self.cancel_rx.recv() => {
                    self.cancel().await;
                    continue;
                }
                line = answer::next_answer(self.stdin.as_mut()), if question.is_some() => {
                    match (line?, question.take()) {
                        (Some(line), Some(reference)) => self.respond(&reference, &line).await,
                        // EOF: no answer can come; the question waits out its timeout.
                        _ => self.stdin = None,
                    }
                    continue;
                }
                next = events.next() => next,
            };
            let ev = match next {
                Some(Ok(ev)) => ev,
                Some(Err(e)) => return Err(self.broken(e).await),
                None => return Err(self.broken(anyhow!("the serve closed the event stream before the reply was done")).await),
            };
            self.print(&ev);
            tally.add(&ev.kind);
            if let EventKind::AskUser { reference, .. } = &ev.kind {
                question = Some(reference.clone());
                self.local(EventKind::System { text: self.answer_hint(reference) });
            }
            match ev.kind {
                EventKind::TurnStarted { .. } => after_start = false,
                EventKind::Done if !after_start => {
                    dones = dones.saturating_sub(1);
                    if dones == 0 {
                        return Ok(tally.code());
                    }
                }
                _ => {}
            }
        }
    }

    /// The error of an event stream that broke with `e`: [`ServeStopped`] when serve no longer
    /// answers its health route as itself within [`STOPPED_TIMEOUT`] (its socket closes as it
    /// dies, so that is usually decided at once), else `e`.
    async fn broken(&self, e: anyhow::Error) -> anyhow::Error {
        match health(&self.serve.client, &self.serve.base, &self.serve.instance_id, None, STOPPED_TIMEOUT).await {
            Some(_) => e,
            None => ServeStopped { pid: self.serve.pid }.into(),
        }
    }

    /// How the user answers a question here: the next line in a stdin session, the route
    /// otherwise (a one-shot chat through serve has no stdin to read).
    fn answer_hint(&self, reference: &str) -> String {
        match self.stdin {
            Some(_) => answer::HINT.to_string(),
            None => format!(
                "answer with POST /api/agents/{}/respond {{\"ref\": \"{reference}\", \"response\": …}}; unanswered, the question times out",
                self.agent
            ),
        }
    }

    /// Answers the open question `reference` through serve's route; a refusal (the question
    /// timed out meanwhile) is shown, not fatal.
    async fn respond(&self, reference: &str, response: &str) {
        let body = json!({ "ref": reference, "response": response });
        let answer = match self.serve.post(&["api", "agents", self.agent, "respond"], body).await {
            Ok(resp) => json_answer(resp).await.map(drop),
            Err(e) => Err(e),
        };
        if let Err(e) = answer {
            self.local(EventKind::System { text: format!("the answer was not taken: {e}") });
        }
    }

    async fn cancel(&self) {
        let answer = match self.serve.post(&["api", "cicy", "cancel"], json!({ "agent_id": self.agent })).await {
            Ok(resp) => json_answer(resp).await.map(drop),
            Err(e) => Err(e),
        };
        if let Err(e) = answer {
            eprintln!("error: cannot cancel the reply: {e}");
        }
    }

    /// Sends one message; prints its stream until `done`.
    async fn chat_line(&mut self, text: &str) -> Result<u8> {
        let resp = self.serve.post(&["api", "cicy", "chat"], json!({ "agent_id": self.agent, "text": wire_text(text) })).await?;
        if !resp.status().is_success() {
            return Err(api_error(resp).await);
        }
        self.follow(events(resp), 1, false, Tally::default()).await
    }

    /// The agent's event stream from now on: its `last_seq` first, then the stream resumed
    /// there, so nothing a following POST starts can be missed.
    async fn agent_events(&self) -> Result<impl Stream<Item = Result<Event>> + Send + Unpin> {
        let status = json_answer(self.serve.get(&["api", "agents", self.agent], None).await?).await?;
        let last_seq = status.get("last_seq").and_then(Value::as_u64).unwrap_or(0);
        let resp = self.serve.get(&["api", "agents", self.agent, "events"], Some(last_seq)).await?;
        if !resp.status().is_success() {
            return Err(api_error(resp).await);
        }
        Ok(events(resp))
    }

    /// Runs `/compact` (keeping `keep` messages) or `/clear`; prints its events until `done`.
    async fn command(&mut self, c: Command, keep: usize) -> Result<u8> {
        self.guarded(async |me| me.command_line(c, keep).await).await
    }

    async fn command_line(&mut self, c: Command, keep: usize) -> Result<u8> {
        let (route, body) = match c {
            Command::Compact => ("compact", json!({ "agent_id": self.agent, "keep": keep })),
            Command::Clear => ("clear", json!({ "agent_id": self.agent })),
        };
        let stream = self.agent_events().await?;
        let resp = self.serve.post(&["api", "cicy", route], body).await?;
        if resp.status() == StatusCode::CONFLICT {
            self.local(chat::refusal(c.as_str(), &LockError::Busy { agent_id: self.agent.to_string() }));
            return Ok(1);
        }
        let answer = json_answer(resp).await?;
        // A turn that `/clear` cancelled ends with its own `done` before the one of `/clear`.
        let dones = if answer.get("canceled").and_then(Value::as_bool) == Some(true) { 2 } else { 1 };
        self.follow(stream, dones, false, Tally::command()).await
    }

    /// Re-runs the last turn; prints its events until `done`.
    async fn retry(&mut self) -> Result<u8> {
        self.guarded(async |me| me.retry_turn().await).await
    }

    async fn retry_turn(&mut self) -> Result<u8> {
        let stream = self.agent_events().await?;
        let answer = json_answer(self.serve.post(&["api", "cicy", "retry"], json!({ "agent_id": self.agent })).await?).await?;
        if answer.get("started").and_then(Value::as_bool) == Some(true) {
            return self.follow(stream, 1, true, Tally::default()).await;
        }
        match answer.get("reason").and_then(Value::as_str).unwrap_or("the serve did not start the retry") {
            "no turn to retry" => eprintln!("{}", chat::nothing_to_retry(self.agent)),
            reason => eprintln!("error: {reason}"),
        }
        Ok(1)
    }

    /// Runs one chat line as the in-process path does.
    async fn line(&mut self, line: &Result<Line, NotACommand>) -> Result<u8> {
        match line {
            Ok(Line::Exit) => {
                self.local(EventKind::System { text: "/exit leaves a chat session; there is none to leave".to_string() });
                Ok(0)
            }
            Ok(Line::Command(c)) => self.command(*c, 0).await,
            Err(e) => {
                self.local(chat::not_a_command(e));
                Ok(1)
            }
            Ok(Line::Message(text)) => self.guarded(async |me| me.chat_line(text).await).await,
        }
    }

    /// The role's greeting when the agent's conversation is empty, as the in-process session
    /// shows it. Errors: the serve's (e.g. an unknown agent), before any line is read. A
    /// greeting that cannot be read locally is left out: the serve reports a broken role at
    /// the first turn.
    async fn greet(&self, home: &Home) -> Result<()> {
        let mut url = self.serve.url(&["api", "cicy", "history"])?;
        url.query_pairs_mut().append_pair("agent_id", self.agent);
        let history = json_answer(self.serve.auth(self.serve.client.get(url)).send().await?).await?;
        if !history.get("messages").and_then(Value::as_array).is_some_and(Vec::is_empty) {
            return Ok(());
        }
        let greeting = (|| {
            let record = Registry::open_read_only(&home.db_path()).ok()?.get(self.agent).ok()?;
            let tools = ToolConfig::load(home, cicy::builtin_tools::names()).ok()?;
            role::load_template(home, &record.role_template, &tools).ok()?.meta.greeting
        })();
        if let Some(g) = greeting.filter(|g| !g.trim().is_empty()) {
            self.local(EventKind::System { text: g });
        }
        Ok(())
    }

    /// A stdin session: one POST per line, each waited for until `done`.
    async fn session(&mut self, home: &Home) -> Result<u8> {
        self.greet(home).await?;
        let interactive = std::io::stdin().is_terminal();
        let mut worst = Worst::default();
        loop {
            if interactive {
                eprint!("> ");
            }
            let lines = self.stdin.get_or_insert_with(answer::Lines::stdin);
            let Some(text) = lines.next().await? else {
                break;
            };
            if text.is_empty() {
                continue;
            }
            match Line::parse(&text) {
                Ok(Line::Exit) => break,
                line => worst.add(self.line(&line).await?),
            }
        }
        Ok(worst.0)
    }
}

/// The text to POST for a message: `/clear` or `/compact` as a message (sent as `//clear`, or
/// the whole `--file`) keeps a leading `/` so the serve, which runs exactly `/clear` and
/// `/compact` as commands, receives it escaped (`//clear`) instead of running it.
fn wire_text(message: &str) -> String {
    match message.trim() {
        "/clear" | "/compact" => format!("/{}", message.trim_start()),
        _ => message.to_string(),
    }
}

/// Runs `f` on a live serve of `home`; `Ok(None)` (nothing done, nothing read) when there is none.
fn with_serve<F>(home: &Home, id: &str, json: bool, f: F) -> Result<Option<ExitCode>>
where
    F: AsyncFnOnce(&mut Remote<'_>) -> Result<u8>,
{
    let rt = chat::runtime()?;
    rt.block_on(async {
        let Some(serve) = live_serve(home).await? else {
            return Ok(None);
        };
        let mut remote = Remote::new(serve, id, json)?;
        match f(&mut remote).await {
            Ok(code) => Ok(Some(ExitCode::from(code))),
            Err(e) if e.is::<ServeStopped>() => {
                eprintln!("error: {e}");
                Ok(Some(ExitCode::from(1)))
            }
            Err(e) => Err(e),
        }
    })
}

/// `chat` through the serve; `Ok(None)` when none is live (run it in-process).
pub(super) fn chat(home: &Home, id: &str, input: &Input, json: bool) -> Result<Option<ExitCode>> {
    with_serve(home, id, json, async |remote| match chat::first_line(input)? {
        Some(line) => remote.line(&line).await,
        None => remote.session(home).await,
    })
}

/// `retry` through the serve; `Ok(None)` when none is live.
pub(super) fn retry(home: &Home, id: &str, json: bool) -> Result<Option<ExitCode>> {
    with_serve(home, id, json, async |remote| remote.retry().await)
}

/// `compact` and `clear` through the serve; `Ok(None)` when none is live.
pub(super) fn command(home: &Home, id: &str, c: Command, keep: usize, json: bool) -> Result<Option<ExitCode>> {
    with_serve(home, id, json, async |remote| remote.command(c, keep).await)
}

/// An HTTP method of [`request`].
pub(super) enum Method {
    Get,
    Post(Value),
    Delete,
}

/// One JSON request to a live serve of `home` (`segments` under the base URL); `Ok(None)` when
/// none is live. A refused request is an error with the serve's message.
pub(super) fn request(home: &Home, method: Method, segments: &[&str]) -> Result<Option<Value>> {
    let rt = chat::runtime()?;
    rt.block_on(async {
        let Some(serve) = live_serve(home).await? else {
            return Ok(None);
        };
        let resp = match method {
            Method::Get => serve.get(segments, None).await?,
            Method::Post(body) => serve.post(segments, body).await?,
            Method::Delete => {
                let url = serve.url(segments)?;
                serve.auth(serve.client.delete(url.clone())).send().await.map_err(|e| anyhow!("DELETE {url}: {e}"))?
            }
        };
        json_answer(resp).await.map(Some)
    })
}

#[cfg(test)]
#[path = "remote_tests.rs"]
mod tests;
