//! Result envelopes of task commands (Choruz B8; docs/design.md §11 "Results"):
//! `results/<ulid>.json`, written through `results/.partial-<id>` and a rename, never cleaned
//! up (agents tell rounds apart by `emitted_at`).

use std::fs;
use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;

use super::{Outbox, OutboxError};
use crate::fsutil::sync_dir;

/// What replaces a secret in a failure message (Choruz B8).
pub const REDACTED: &str = "[redacted]";

/// Failure codes of a result envelope (Choruz B8), serialized in snake case
/// (`channel_tasks_disabled`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    ChannelTasksDisabled,
    MissingTarget,
    MissingTitle,
    EventStoreUnavailable,
    GroupNotFound,
    AgentTokenUnavailable,
    InvalidAssignee,
    MissingAssignee,
    MissingTask,
    TaskNotFound,
    UnsupportedCommand,
    GatewayUnavailable,
    ValidationFailed,
    Unauthorized,
    Forbidden,
    NotFound,
    IdempotencyConflict,
    GatewayError,
}

impl ErrorCode {
    /// The code of a failed HTTP call by status (B8: 400, 401, 403, 404, 409, else
    /// `gateway_error`).
    pub fn from_http_status(status: u16) -> Self {
        match status {
            400 => ErrorCode::ValidationFailed,
            401 => ErrorCode::Unauthorized,
            403 => ErrorCode::Forbidden,
            404 => ErrorCode::NotFound,
            409 => ErrorCode::IdempotencyConflict,
            _ => ErrorCode::GatewayError,
        }
    }
}

/// One result envelope. Serialized compact, keys in this order, absent ids as `null`;
/// `error_code` and `message` only on failure (B8), e.g.
/// `{"command_type":"task_create","ok":true,"task_key":"K","task_id":null,"idempotency_key":"i","emitted_at":"2026-06-04T12:34:56.789Z"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResultEnvelope {
    pub command_type: String,
    pub ok: bool,
    pub task_key: Option<String>,
    pub task_id: Option<String>,
    pub idempotency_key: Option<String>,
    /// RFC 3339 UTC with milliseconds and `Z`, e.g. `2026-06-04T12:34:56.789Z`.
    pub emitted_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<ErrorCode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl ResultEnvelope {
    /// A success of `command_type` emitted now.
    pub fn ok(command_type: &str, task_key: Option<String>, task_id: Option<String>, idempotency_key: Option<String>) -> Self {
        ResultEnvelope {
            command_type: command_type.to_string(),
            ok: true,
            task_key,
            task_id,
            idempotency_key,
            emitted_at: now_millis(),
            error_code: None,
            message: None,
        }
    }

    /// Turns it into a failure with `code` and `message`, secrets in it replaced by
    /// [`REDACTED`] (see [`redact`]).
    pub fn fail(&mut self, code: ErrorCode, message: &str) {
        self.ok = false;
        self.error_code = Some(code);
        self.message = Some(redact(message));
    }

    /// The compact JSON bytes of the file.
    pub fn to_json(&self) -> String {
        // Only strings, bools and `Option`s: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl Outbox {
    /// Writes `envelope` as `results/<id>.json`, `id` the command's first-claim ULID
    /// ([`super::Claimed::id`]), through `results/.partial-<id>`, fsync and rename, and returns
    /// the path. A retry of the command after a kill replaces its file rather than adding one.
    pub fn write_result(&self, id: &str, envelope: &ResultEnvelope) -> Result<PathBuf, OutboxError> {
        let dir = self.results_dir();
        fs::create_dir_all(&dir).map_err(OutboxError::io(&dir))?;
        let partial = dir.join(format!(".partial-{id}"));
        let target = dir.join(format!("{id}.json"));
        let written = fs::File::create(&partial)
            .and_then(|mut f| f.write_all(envelope.to_json().as_bytes()).and_then(|()| f.sync_all()))
            .and_then(|()| fs::rename(&partial, &target));
        if let Err(e) = written {
            let _ = fs::remove_file(&partial);
            return Err(OutboxError::Io { path: target, source: e });
        }
        sync_dir(&dir).map_err(OutboxError::io(&dir))?;
        Ok(target)
    }
}

/// Now as RFC 3339 UTC with milliseconds and `Z` (B8 `emitted_at`).
pub fn now_millis() -> String {
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    time::OffsetDateTime::now_utc().format(&fmt).unwrap_or_default()
}

/// Words whose assignment (`<word>: v`, `<word>=v`, `"<word>":"v"`) is a secret when a key
/// contains them (B8: bearer tokens, authorization, token, session_token, agent_token,
/// password, secret, private_key).
const SECRET_KEYS: [&str; 5] = ["authorization", "token", "password", "secret", "private_key"];

/// `message` with secrets replaced by [`REDACTED`]: the value of any key containing a
/// [`SECRET_KEYS`] word (quotes kept), and the token after `Bearer`.
pub fn redact(message: &str) -> String {
    let b = message.as_bytes();
    let mut out = String::with_capacity(message.len());
    let mut i = 0;
    while i < b.len() {
        if !is_word(b[i]) || (i > 0 && is_word(b[i - 1])) {
            let ch = message[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
            continue;
        }
        let end = (i..b.len()).find(|&j| !is_word(b[j])).unwrap_or(b.len());
        let word = message[i..end].to_ascii_lowercase();
        out.push_str(&message[i..end]);
        let value_at = if word == "bearer" {
            skip(b, end, b" \t").filter(|&v| v > end)
        } else if SECRET_KEYS.iter().any(|k| word.contains(k)) {
            assignment_value(b, end)
        } else {
            None
        };
        i = match value_at {
            Some(v) => {
                out.push_str(&message[end..v]);
                let quote = [b'"', b'\''].into_iter().find(|&q| b[v] == q);
                // A quoted value keeps its quotes around the redacted text.
                let v = match quote {
                    Some(q) => {
                        out.push(char::from(q));
                        v + 1
                    }
                    None => bearer_prefix(message, v, &mut out),
                };
                out.push_str(REDACTED);
                value_end(b, v, quote)
            }
            None => end,
        };
    }
    out
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}

/// The first index from `i` whose byte is not in `set`, if any remains.
fn skip(b: &[u8], mut i: usize, set: &[u8]) -> Option<usize> {
    while i < b.len() && set.contains(&b[i]) {
        i += 1;
    }
    (i < b.len()).then_some(i)
}

/// After a key ending at `i`: `"`? spaces `:`|`=` spaces `"`? → where the value starts.
fn assignment_value(b: &[u8], i: usize) -> Option<usize> {
    let i = skip(b, i, b"\"' \t")?;
    if b[i] != b':' && b[i] != b'=' {
        return None;
    }
    skip(b, i + 1, b" \t")
}

/// Copies a `Bearer ` that starts the value at `v` (so `authorization: Bearer x` keeps the
/// scheme) and returns where the secret starts.
fn bearer_prefix(message: &str, v: usize, out: &mut String) -> usize {
    let rest = &message.as_bytes()[v..];
    if rest.len() > 7 && rest[..7].eq_ignore_ascii_case(b"bearer ") {
        out.push_str(&message[v..v + 7]);
        return v + 7;
    }
    v
}

/// Where the secret starting at `v` ends: at the closing `quote` (kept), or for a bare value
/// at whitespace or punctuation.
fn value_end(b: &[u8], v: usize, quote: Option<u8>) -> usize {
    if let Some(q) = quote {
        let mut j = v;
        while j < b.len() && b[j] != q {
            j += if b[j] == b'\\' { 2 } else { 1 };
        }
        return j.min(b.len());
    }
    (v..b.len()).find(|&j| b" \t\r\n,;&}])'\"".contains(&b[j])).unwrap_or(b.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(ok: bool) -> ResultEnvelope {
        let mut e = ResultEnvelope::ok("task_create", Some("K-1".into()), None, Some("idem-1".into()));
        e.emitted_at = "2026-06-04T12:34:56.789Z".into();
        if !ok {
            e.fail(ErrorCode::IdempotencyConflict, "token=abc123 already used");
        }
        e
    }

    #[test]
    fn envelope_bytes_are_exact() {
        assert_eq!(
            envelope(true).to_json(),
            r#"{"command_type":"task_create","ok":true,"task_key":"K-1","task_id":null,"idempotency_key":"idem-1","emitted_at":"2026-06-04T12:34:56.789Z"}"#
        );
        assert_eq!(
            envelope(false).to_json(),
            r#"{"command_type":"task_create","ok":false,"task_key":"K-1","task_id":null,"idempotency_key":"idem-1","emitted_at":"2026-06-04T12:34:56.789Z","error_code":"idempotency_conflict","message":"token=[redacted] already used"}"#
        );
    }

    #[test]
    fn a_result_file_is_written_whole_under_the_given_id() {
        let dir = tempfile::tempdir().unwrap();
        let ob = Outbox::at(dir.path());
        let path = ob.write_result(&crate::outbox::new_id(), &envelope(true)).unwrap();
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_eq!(name.len(), 26 + ".json".len(), "{name}");
        assert_eq!(fs::read_to_string(&path).unwrap(), envelope(true).to_json());
        assert_eq!(fs::read_dir(ob.results_dir()).unwrap().count(), 1);
    }

    #[test]
    fn emitted_at_has_milliseconds_and_z() {
        let s = now_millis();
        assert_eq!(s.len(), "2026-06-04T12:34:56.789Z".len(), "{s}");
        assert_eq!(&s[19..20], ".");
        assert!(s.ends_with('Z'));
    }

    #[test]
    fn secrets_are_redacted_and_other_text_kept() {
        let cases = [
            ("Authorization: Bearer sk-live-1 rejected", "Authorization: Bearer [redacted] rejected"),
            ("bad bearer abc.def", "bad bearer [redacted]"),
            (r#"{"token":"t0k","x":1}"#, r#"{"token":"[redacted]","x":1}"#),
            ("session_token=s1; agent_token = a2", "session_token=[redacted]; agent_token = [redacted]"),
            ("password: hunter2, secret=xyz private_key='k'", "password: [redacted], secret=[redacted] private_key='[redacted]'"),
            ("tokens left: 5 — café", "tokens left: 5 — café"),
            ("no secret here", "no secret here"),
            ("HTTP 409: conflict", "HTTP 409: conflict"),
        ];
        for (input, want) in cases {
            assert_eq!(redact(input), want, "{input}");
        }
    }
}
