//! The gateway client: its settings and one streaming HTTP request (an attempt).
//!
//! Owns: the HTTP side (reqwest 0.13, rustls, gzip/br/deflate bodies), headers, endpoint URLs,
//! the idle timeout, the errors of an answer, and driving `sse.rs` + the style's accumulator
//! over the response bytes. Must not touch: the bytes of the body (`anthropic.rs` /
//! `openai.rs` encode them), the retry loop (`round.rs`, deciding through `retry.rs`),
//! conversation history, or anything the caller does with events.
//!
//! The API key goes only into its request header (marked sensitive); every error and retry
//! reason is scrubbed of it before it leaves this module, and nothing here logs it.

use std::time::{Duration, SystemTime};

use super::retry::{self, RetryPolicy};
use super::sse::{self, SseError};
use super::{anthropic, openai, truncate, ApiStyle, AuxKind, GatewayError, GatewayEvent, Response, StreamAccumulator};
use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, ACCEPT_ENCODING, AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE};

/// How long the client keeps reading after a response became complete without being done
/// (OpenAI: after `finish_reason`, for the usage chunk and `[DONE]`), so a server that holds
/// the connection open does not cost the idle timeout *(cicy: 2 s)*.
pub const COMPLETE_GRACE: Duration = Duration::from_secs(2);

/// How to reach the gateway. Build with [`GatewaySettings::new`] for cicy's defaults.
#[derive(Clone)]
pub struct GatewaySettings {
    /// e.g. `http://127.0.0.1:8080` (a trailing `/` is fine); `/v1/messages` or
    /// `/v1/chat/completions` is appended.
    pub base_url: String,
    pub style: ApiStyle,
    /// Sent as `x-api-key` (anthropic) or `Authorization: Bearer` (openai) when set.
    pub api_key: Option<String>,
    /// The environment variable the key is read from (cicy: `CICY_API_KEY`, or the one
    /// `gateway.api_key_env` names); only for the error when no key is set and the gateway
    /// refuses ([`GatewayError::NoKey`]).
    pub api_key_env: String,
    /// TCP/TLS connect timeout (default 10 s).
    pub connect_timeout: Duration,
    /// Max silence while waiting for the response head or between stream reads (default 300 s,
    /// as `config.rs`'s `idle_timeout_secs`; Anthropic pings every few seconds, so only a dead
    /// connection or a very long prompt evaluation is this quiet).
    pub idle_timeout: Duration,
    /// Retries after the first attempt of a round, re-runs after content included *(cicy: 10)*.
    pub max_retries: u32,
    /// How long refused connections are retried; `None` retries them until the gateway
    /// answers (a resident server). *(cicy: 10 s)* — see [`RetryPolicy::connect_retry_budget`].
    pub connect_retry_budget: Option<Duration>,
    /// Backoff base: the first retry waits `retry_base_delay × jitter`, doubling up to 8 s
    /// *(cicy: 0.5 s)*. Tests set it to a millisecond to keep retries fast.
    pub retry_base_delay: Duration,
    /// A pooled HTTP client to share instead of building one (`serve`: one client, one
    /// connection pool, for every agent of the process); `connect_timeout` is then the one it
    /// was built with. reqwest clients must not outlive their tokio runtime's use, so only a
    /// process with one long-lived runtime shares one.
    pub http: Option<reqwest::Client>,
}

impl GatewaySettings {
    /// Settings with cicy's defaults and no key.
    pub fn new(base_url: impl Into<String>, style: ApiStyle) -> Self {
        let policy = RetryPolicy::default();
        Self {
            base_url: base_url.into(),
            style,
            api_key: None,
            api_key_env: DEFAULT_KEY_ENV.to_string(),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_retries: policy.max_retries,
            connect_retry_budget: policy.connect_retry_budget,
            retry_base_delay: policy.base_delay,
            http: None,
        }
    }
}

/// cicy: the key's environment variable when the config names none.
const DEFAULT_KEY_ENV: &str = "CICY_API_KEY";

impl Default for GatewaySettings {
    /// cicy's defaults with an empty `base_url`: fill it in (`..GatewaySettings::default()`).
    fn default() -> Self {
        Self::new(String::new(), ApiStyle::default())
    }
}

impl std::fmt::Debug for GatewaySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewaySettings")
            .field("base_url", &self.base_url)
            .field("style", &self.style)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("api_key_env", &self.api_key_env)
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_retries", &self.max_retries)
            .field("shared_http", &self.http.is_some())
            .field("connect_retry_budget", &self.connect_retry_budget)
            .field("retry_base_delay", &self.retry_base_delay)
            .finish()
    }
}

/// Per-call options.
#[derive(Debug, Clone)]
pub struct CallOptions {
    pub model: String,
    /// cicy: 2048 per main round, 4096 compact summary, 2048 memory recognizer.
    pub max_tokens: u32,
    /// Sent as `X-Cicy-Session-Id` (the conversation id).
    pub session_id: String,
    /// Sent as `X-Cicy-Aux: compact|memory|guard` on aux calls.
    pub aux: Option<AuxKind>,
    /// Whole call including retries and waits (e.g. 90 s for compact); `None` = no limit.
    pub timeout: Option<Duration>,
}

/// A gateway client; cheap to share by reference, one per gateway configuration.
#[derive(Clone)]
pub struct GatewayClient {
    pub(super) http: reqwest::Client,
    pub(super) settings: GatewaySettings,
    /// The endpoint URL.
    url: String,
    /// The endpoint URL without user info, for error messages.
    display_url: String,
    /// The authorization header, built once (so a bad key fails at construction).
    pub(super) auth: Option<(HeaderName, HeaderValue)>,
    pub(super) policy: RetryPolicy,
}

impl std::fmt::Debug for GatewayClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayClient").field("url", &self.display_url).field("settings", &self.settings).finish()
    }
}

impl GatewayClient {
    /// Errors: [`GatewayError::Connect`] (the gateway cannot be used as configured) for a base
    /// URL that does not parse, a key that cannot be an HTTP header value, or an HTTP client that
    /// cannot be built; the message never shows the key.
    pub fn new(settings: GatewaySettings) -> Result<Self, GatewayError> {
        let path = match settings.style {
            ApiStyle::Anthropic => "/v1/messages",
            ApiStyle::Openai => "/v1/chat/completions",
        };
        let url = format!("{}{path}", settings.base_url.trim_end_matches('/'));
        let mut parsed = reqwest::Url::parse(&url)
            .map_err(|e| GatewayError::Connect { url: settings.base_url.clone(), message: format!("not a valid URL: {e}") })?;
        // Best effort: URLs that cannot carry user info simply have none to strip.
        let _ = parsed.set_password(None);
        let _ = parsed.set_username("");
        let display_url = parsed.to_string();
        let config_error = |message: &str| GatewayError::Connect { url: display_url.clone(), message: message.to_string() };
        let auth = match &settings.api_key {
            None => None,
            Some(key) => {
                let (name, value) = match settings.style {
                    ApiStyle::Anthropic => (HeaderName::from_static("x-api-key"), key.clone()),
                    ApiStyle::Openai => (AUTHORIZATION, format!("Bearer {key}")),
                };
                let mut value = HeaderValue::from_str(&value)
                    .map_err(|_| config_error("the API key contains characters an HTTP header cannot carry"))?;
                value.set_sensitive(true);
                Some((name, value))
            }
        };
        let http = match &settings.http {
            Some(shared) => shared.clone(),
            None => reqwest::Client::builder()
                .connect_timeout(settings.connect_timeout)
                .build()
                .map_err(|e| config_error(&format!("cannot set up the HTTP client: {e}")))?,
        };
        let policy = RetryPolicy {
            max_retries: settings.max_retries,
            base_delay: settings.retry_base_delay,
            connect_retry_budget: settings.connect_retry_budget,
            ..RetryPolicy::default()
        };
        Ok(Self { http, url, display_url, auth, settings, policy })
    }

    /// This client making one attempt per call: no retry, a connection failure included. For an
    /// aux call whose failure is an answer in itself (the wish guard's judge: failure refuses).
    pub fn without_retries(&self) -> Self {
        let mut client = self.clone();
        client.policy.max_retries = 0;
        client.policy.connect_retry_budget = Some(Duration::ZERO);
        client
    }

    /// The endpoint this client posts to.
    pub fn endpoint(&self) -> &str {
        &self.display_url
    }

    /// The configured base URL without user info or a trailing `/`: what names this gateway
    /// where a password must not be written (a record in the workspace, a message).
    pub fn base_url_display(&self) -> String {
        let base = self.settings.base_url.trim_end_matches('/');
        let Ok(mut parsed) = reqwest::Url::parse(base) else {
            return base.to_string();
        };
        // Best effort, as for the endpoint: a URL that cannot carry user info has none.
        let _ = parsed.set_password(None);
        let _ = parsed.set_username("");
        parsed.to_string().trim_end_matches('/').to_string()
    }

    /// One HTTP request and its stream. Sets `content_started` once the accumulator saw content.
    pub(super) async fn attempt(
        &self,
        body: &Bytes,
        headers: &HeaderMap,
        on_event: &mut (dyn FnMut(GatewayEvent) + Send),
        content_started: &mut bool,
    ) -> Result<Response, GatewayError> {
        let idle = self.settings.idle_timeout;
        let request = self.http.post(&self.url).headers(headers.clone()).body(body.clone()).send();
        let response = match tokio::time::timeout(idle, request).await {
            Err(_) => return Err(GatewayError::Timeout(idle.as_secs())),
            Ok(Err(e)) => return Err(GatewayError::Connect { url: self.display_url.clone(), message: root_cause(&e) }),
            Ok(Ok(r)) => r,
        };
        let status = response.status();
        if !status.is_success() {
            return Err(self.status_error(response, idle).await);
        }
        // gzip, br and deflate are decoded (and the header removed) by reqwest.
        if let Some(encoding) = response.headers().get(CONTENT_ENCODING) {
            let encoding = String::from_utf8_lossy(encoding.as_bytes());
            if !encoding.trim().eq_ignore_ascii_case("identity") {
                return Err(GatewayError::Decode(format!(
                    "the response body has `content-encoding: {encoding}`, which cicy cannot decode (it asks for `identity` and reads gzip, br and deflate)"
                )));
            }
        }
        let mut acc = accumulator(self.settings.style);
        let mut events = std::pin::pin!(sse::decode(response.bytes_stream()));
        // Set when the response became complete but not done (OpenAI: `finish_reason` came,
        // the usage chunk and `[DONE]` not yet): reading stops at this instant at the latest.
        let mut grace_end: Option<tokio::time::Instant> = None;
        loop {
            if grace_end.is_none() && acc.is_complete() {
                grace_end = Some(tokio::time::Instant::now() + COMPLETE_GRACE);
            }
            let idle_end = tokio::time::Instant::now() + idle;
            let deadline = grace_end.map_or(idle_end, |g| g.min(idle_end));
            let next = match tokio::time::timeout_at(deadline, events.next()).await {
                Ok(next) => next,
                // A complete answer whose server sends neither the rest nor closes.
                Err(_) if acc.is_complete() => break,
                Err(_) => return Err(GatewayError::Incomplete(format!("no data for {idle:?}"))),
            };
            match next {
                None => break,
                Some(Ok(ev)) => {
                    let handled = acc.on_event(&ev, on_event);
                    *content_started = acc.content_started();
                    handled?;
                    if acc.is_done() {
                        break;
                    }
                }
                Some(Err(SseError::Transport(_))) if acc.is_complete() => break,
                Some(Err(SseError::Transport(e))) => {
                    return Err(GatewayError::Incomplete(format!("connection lost: {}", error_chain(&e))));
                }
                Some(Err(e)) => return Err(GatewayError::Decode(e.to_string())),
            }
        }
        acc.finish()
    }

    /// The error of a non-2xx answer: [`GatewayError::NotFound`] for a 404,
    /// [`GatewayError::NoKey`] for a refusal while no key is set (401, 403, or a 500 whose body
    /// speaks of auth or a key), else [`GatewayError::Status`] with `retry-after-ms` or
    /// `retry-after`, `x-should-retry`, and the body (trimmed, at most 2000 bytes).
    async fn status_error(&self, response: reqwest::Response, idle: Duration) -> GatewayError {
        let status = response.status().as_u16();
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let retry_after = header("retry-after-ms")
            .and_then(|v| retry::parse_retry_after_ms(&v))
            .or_else(|| header("retry-after").and_then(|v| retry::parse_retry_after(&v, SystemTime::now())));
        let should_retry = header("x-should-retry").and_then(|v| retry::parse_should_retry(&v));
        // The body is only for the message: a slow or broken one is not worth waiting for.
        let body = match tokio::time::timeout(idle, response.text()).await {
            Ok(Ok(text)) => truncate(text.trim(), 2000),
            _ => String::new(),
        };
        if status == 404 {
            let base_has_v1 = self.settings.base_url.trim_end_matches('/').to_ascii_lowercase().ends_with("/v1");
            return GatewayError::NotFound { url: self.display_url.clone(), body, base_has_v1 };
        }
        if self.auth.is_none() && refusal_for_no_key(status, &body) {
            let env = match self.settings.api_key_env.as_str() {
                DEFAULT_KEY_ENV => format!("`{DEFAULT_KEY_ENV}`"),
                other => format!("`{other}` (named by gateway.api_key_env) or `{DEFAULT_KEY_ENV}`"),
            };
            return GatewayError::NoKey { status, env, body };
        }
        GatewayError::Status {
            status,
            body,
            retry_after_ms: retry_after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            should_retry,
        }
    }

    pub(super) fn headers(&self, opts: &CallOptions) -> Result<HeaderMap, GatewayError> {
        let mut h = HeaderMap::new();
        if let Some((name, value)) = &self.auth {
            h.insert(name.clone(), value.clone());
        }
        if self.settings.style == ApiStyle::Anthropic {
            h.insert(HeaderName::from_static("anthropic-version"), HeaderValue::from_static("2023-06-01"));
        }
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        // A compressing proxy may hold back a stream to fill its buffers: ask for none (a
        // compressed body sent anyway is still decoded).
        h.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        let session = HeaderValue::from_str(&opts.session_id).map_err(|_| GatewayError::Connect {
            url: self.display_url.clone(),
            message: format!("session id `{}` cannot be an HTTP header value", opts.session_id),
        })?;
        h.insert(HeaderName::from_static("x-cicy-session-id"), session);
        if let Some(aux) = opts.aux {
            h.insert(HeaderName::from_static("x-cicy-aux"), HeaderValue::from_static(aux.header_value()));
        }
        Ok(h)
    }

    /// Removes the API key from every text an error carries (a gateway may echo it back).
    pub(super) fn scrub(&self, err: GatewayError) -> GatewayError {
        let Some(key) = self.settings.api_key.as_deref().filter(|k| !k.is_empty()) else {
            return err;
        };
        let clean = |s: String| s.replace(key, "[redacted]");
        match err {
            GatewayError::Connect { url, message } => GatewayError::Connect { url: clean(url), message: clean(message) },
            GatewayError::Status { status, body, retry_after_ms, should_retry } => {
                GatewayError::Status { status, body: clean(body), retry_after_ms, should_retry }
            }
            GatewayError::NoKey { status, env, body } => GatewayError::NoKey { status, env, body: clean(body) },
            GatewayError::NotFound { url, body, base_has_v1 } => GatewayError::NotFound { url: clean(url), body: clean(body), base_has_v1 },
            GatewayError::StreamError { kind, message } => GatewayError::StreamError { kind: clean(kind), message: clean(message) },
            GatewayError::Incomplete(m) => GatewayError::Incomplete(clean(m)),
            GatewayError::Decode(m) => GatewayError::Decode(clean(m)),
            e @ (GatewayError::Timeout(_) | GatewayError::Cancelled) => e,
        }
    }
}

/// 401 and 403 refuse a request without credentials; LiteLLM's proxy answers 500 with the
/// upstream's auth error in the body.
fn refusal_for_no_key(status: u16, body: &str) -> bool {
    let body = body.to_ascii_lowercase();
    matches!(status, 401 | 403) || (status == 500 && (body.contains("auth") || body.contains("key")))
}

/// The innermost source of a request error (e.g. `Connection refused (os error 111)`): the
/// layers above it only repeat the URL, which the error names already, and "error sending
/// request".
pub(super) fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}

/// An error and its sources, joined with `: ` (reqwest hides the OS reason in the sources).
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![err.to_string()];
    let mut source = err.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = e.source();
    }
    parts.join(": ")
}

/// A new accumulator for the wire style.
fn accumulator(style: ApiStyle) -> Box<dyn StreamAccumulator> {
    match style {
        ApiStyle::Anthropic => Box::new(anthropic::Accumulator::new()),
        ApiStyle::Openai => Box::new(openai::Accumulator::new()),
    }
}

/// Decodes a recorded response stream offline exactly as [`GatewayClient::send`] reads one
/// (same SSE stage, same accumulator, same stop rule), given as the reads it arrived in.
/// Returns the response (with an empty `prefix_sha256`) and the events emitted. For tests,
/// replays of captured traffic, and benchmarks.
pub fn replay<I>(style: ApiStyle, reads: I) -> Result<(Response, Vec<GatewayEvent>), GatewayError>
where
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    let events = sse::decode_chunks(reads).map_err(|e| GatewayError::Decode(e.to_string()))?;
    let mut acc = accumulator(style);
    let mut emitted = Vec::new();
    for ev in &events {
        acc.on_event(ev, &mut |e| emitted.push(e))?;
        if acc.is_done() {
            break;
        }
    }
    Ok((acc.finish()?, emitted))
}
