//! The HTTP edge of `serve` (docs/design.md §9 "Auth"): the guards every request passes, JSON
//! errors and JSON bodies.
//!
//! Owns the `Host` check (loopback:port only, the cryo hub's DNS-rebinding guard → 403), the
//! bearer token on every `/api` route but `GET /api/health` (→ 401), the 1 MiB body limit
//! (→ 413) and the error shape `{"error": code, "message": text}`, also for a bad query
//! string or path parameter. Must not touch agents: the
//! routes are `super::routes`.

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::Hub;

/// docs/design.md §9: a body over 1 MiB is refused with 413.
pub(super) const BODY_LIMIT: usize = 1 << 20;

/// An error answer: `{"error": code, "message": text}` with `status`.
#[derive(Debug)]
pub(super) struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into() }
    }

    pub(super) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub(super) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub(super) fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(json!({"error": self.code, "message": self.message}))).into_response()
    }
}

/// A JSON request body whose every failure is an [`ApiError`]: 413 over [`BODY_LIMIT`], 400
/// for what does not parse (the message says where).
pub(super) struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", format!("the body is over {BODY_LIMIT} bytes"))
            } else {
                ApiError::bad_request(e.body_text())
            }
        })?;
        let bytes = if bytes.is_empty() { axum::body::Bytes::from_static(b"{}") } else { bytes };
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request(format!("the body is not the JSON this route takes: {e}")))
    }
}

/// A query string whose failure to parse is an [`ApiError`] (400, JSON) rather than axum's
/// plain-text rejection.
pub(super) struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state).await.map(|Query(q)| ApiQuery(q)).map_err(|e| ApiError::bad_request(e.body_text()))
    }
}

/// Path parameters whose failure to parse is an [`ApiError`] (400, JSON).
pub(super) struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<T>::from_request_parts(parts, state).await.map(|Path(p)| ApiPath(p)).map_err(|e| ApiError::bad_request(e.body_text()))
    }
}

/// Refuses a `Host` that is not this server's loopback address (403), then a missing or
/// wrong bearer token (401) on every route but `GET /api/health` and the page at `/`.
pub(super) async fn guard(State(hub): State<Hub>, req: Request<Body>, next: Next) -> Response {
    if !host_allowed(req.headers(), hub.port) {
        return ApiError::new(StatusCode::FORBIDDEN, "forbidden_host", "the Host header must name this server on 127.0.0.1 or localhost")
            .into_response();
    }
    let path = req.uri().path();
    let open = path == "/api/health" || !path.starts_with("/api");
    if !open && !token_ok(req.headers(), &hub.token) {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token (Authorization: Bearer <token>; see CICY_API_TOKEN or $CICY_HOME/api_token)",
        )
        .into_response();
    }
    next.run(req).await
}

/// The answer to `GET /api/health?proof=<nonce>` **[chosen]**: lowercase hex of
/// HMAC-SHA256 keyed with the token's bytes over `cicy-health-proof:<port>:<nonce>`, `port`
/// being the one this server listens on. It shows that the server on that port knows the
/// token without revealing it; with the port in it, a program on another port cannot relay the
/// question to serve and pass the answer off as its own. `None` when `nonce` is not 32–128
/// lowercase hex characters (a short or reused nonce would make the proof replayable).
pub(super) fn token_proof(token: &str, port: u16, nonce: &str) -> Option<String> {
    use hmac::Mac;
    Some(proof_mac(token, port, nonce)?.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect())
}

/// The HMAC of [`token_proof`] fed with its message; `None` for a nonce it refuses.
fn proof_mac(token: &str, port: u16, nonce: &str) -> Option<hmac::Hmac<sha2::Sha256>> {
    use hmac::Mac;
    if !(32..=128).contains(&nonce.len()) || !nonce.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(token.as_bytes()).ok()?;
    mac.update(format!("cicy-health-proof:{port}:{nonce}").as_bytes());
    Some(mac)
}

/// Whether `proof` (lowercase hex) is [`token_proof`] of `nonce` for `port`: what a client
/// checks before it sends the token. The MAC is compared in constant time, so the time taken
/// does not tell a prober how much of its guess matched.
pub fn proof_matches(token: &str, port: u16, nonce: &str, proof: &str) -> bool {
    use hmac::Mac;
    match (proof_mac(token, port, nonce), hex_bytes(proof)) {
        (Some(mac), Some(given)) => mac.verify_slice(&given).is_ok(),
        _ => false,
    }
}

/// The bytes of lowercase hex text; `None` for an odd length or any other character.
fn hex_bytes(text: &str) -> Option<Vec<u8>> {
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes.chunks(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}

/// `127.0.0.1:<port>`, `localhost:<port>` or `[::1]:<port>`.
fn host_allowed(headers: &HeaderMap, port: u16) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let Some((name, p)) = host.rsplit_once(':') else {
        return false;
    };
    p.parse::<u16>().ok() == Some(port) && matches!(name.to_ascii_lowercase().as_str(), "127.0.0.1" | "localhost" | "[::1]")
}

fn token_ok(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers.get(header::AUTHORIZATION).and_then(|h| h.to_str().ok()).and_then(|h| h.strip_prefix("Bearer ")) else {
        return false;
    };
    // Compared over the whole length so the time taken does not tell how much matched.
    let (a, b) = (given.trim().as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The answer to a route that does not exist.
pub(super) async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `printf 'cicy-health-proof:8008:00112233445566778899aabbccddeeff' | openssl dgst -sha256 -hmac tok`
    const PROOF_TOK: &str = "97576b935c99e013e1ee52fa52d6872f65ac0ff0281eb26f421b3c69d9ec2143";

    #[test]
    fn the_token_proof_is_hmac_sha256_of_the_prefixed_nonce() {
        let nonce = "00112233445566778899aabbccddeeff";
        assert_eq!(token_proof("tok", 8008, nonce).as_deref(), Some(PROOF_TOK));
        assert_ne!(token_proof("tok2", 8008, nonce).as_deref(), Some(PROOF_TOK));
        assert_ne!(token_proof("tok", 8009, nonce).as_deref(), Some(PROOF_TOK), "the port is part of the proof");
        for bad in ["", "0011", "00112233445566778899AABBCCDDEEFF", &"0".repeat(129), "00112233445566778899aabbccddeefg"] {
            assert_eq!(token_proof("tok", 8008, bad), None, "{bad}");
        }
    }

    #[test]
    fn a_proof_matches_only_for_the_same_token_port_and_nonce() {
        let nonce = "00112233445566778899aabbccddeeff";
        assert!(proof_matches("tok", 8008, nonce, PROOF_TOK));
        assert!(!proof_matches("tok2", 8008, nonce, PROOF_TOK));
        assert!(!proof_matches("tok", 8009, nonce, PROOF_TOK));
        assert!(!proof_matches("tok", 8008, "ffeeddccbbaa99887766554433221100", PROOF_TOK));
        let upper = PROOF_TOK.to_uppercase();
        for bad in ["", &PROOF_TOK[..62], &PROOF_TOK[1..], &format!("{PROOF_TOK}00"), &upper, "zz"] {
            assert!(!proof_matches("tok", 8008, nonce, bad), "{bad}");
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_loopback_hosts_on_our_port_pass() {
        for ok in ["127.0.0.1:8008", "localhost:8008", "LOCALHOST:8008", "[::1]:8008"] {
            assert!(host_allowed(&headers(&[("host", ok)]), 8008), "{ok}");
        }
        for bad in ["evil.example:8008", "127.0.0.1:8009", "127.0.0.1", "127.0.0.1.evil.example:8008"] {
            assert!(!host_allowed(&headers(&[("host", bad)]), 8008), "{bad}");
        }
        assert!(!host_allowed(&HeaderMap::new(), 8008));
    }

    #[test]
    fn the_token_must_match_exactly() {
        assert!(token_ok(&headers(&[("authorization", "Bearer abc")]), "abc"));
        assert!(!token_ok(&headers(&[("authorization", "Bearer abd")]), "abc"));
        assert!(!token_ok(&headers(&[("authorization", "Bearer ab")]), "abc"));
        assert!(!token_ok(&headers(&[("authorization", "abc")]), "abc"));
        assert!(!token_ok(&HeaderMap::new(), "abc"));
    }
}
