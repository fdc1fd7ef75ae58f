//! Asking a gateway for the context window it serves: llama.cpp's `GET {base}/props`.
//!
//! Owns one request and the reading of its answer: `default_generation_settings.n_ctx` of the
//! JSON body, the context of one server slot (llama.cpp divides its `--ctx-size` among its
//! `--parallel` slots, and one request runs in one slot). It stores nothing and decides
//! nothing about when to ask; that is the runtime's `compact::window`.
//!
//! No retry: the question is asked once per gateway and model and the answer remembered, so
//! a gateway that does not know `/props` (Anthropic, OpenAI, most proxies) costs one request.

use std::time::Duration;

use reqwest::header::{HeaderValue, ACCEPT};
use serde_json::Value;

use super::client::root_cause;
use super::{truncate, GatewayClient, GatewayError};

/// cicy: the whole request, connect included. llama.cpp answers `/props` from its HTTP thread
/// in milliseconds, even while its only slot is generating.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// What a gateway that answered said about its context window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropsAnswer {
    /// `default_generation_settings.n_ctx`, in tokens (never 0).
    Window(u64),
    /// An answer without a window: another status (a gateway without `/props` answers 404), a
    /// body that is not JSON or has no positive `n_ctx`. The text says which, for the record.
    NoWindow(String),
}

impl GatewayClient {
    /// `GET {base}/props` with this client's key header, within [`TIMEOUT`].
    ///
    /// Errors: [`GatewayError::Connect`] when the gateway cannot be reached (nothing was
    /// answered, so nothing is known); [`GatewayError::Timeout`] when it did not answer in time.
    pub async fn ask_props(&self) -> Result<PropsAnswer, GatewayError> {
        let url = format!("{}/props", self.settings.base_url.trim_end_matches('/'));
        let mut request = self.http.get(&url).header(ACCEPT, HeaderValue::from_static("application/json"));
        if let Some((name, value)) = &self.auth {
            request = request.header(name.clone(), value.clone());
        }
        let asked = async {
            let response = request.send().await.map_err(|e| GatewayError::Connect { url: self.props_url(), message: root_cause(&e) })?;
            let status = response.status();
            // A body that breaks off is an answer without a window, like any other bad body.
            let body = response.bytes().await.unwrap_or_default();
            Ok(read_answer(status.as_u16(), &body))
        };
        match tokio::time::timeout(TIMEOUT, asked).await {
            Ok(answer) => answer.map_err(|e| self.scrub(e)),
            Err(_) => Err(GatewayError::Timeout(TIMEOUT.as_secs())),
        }
    }

    /// `{base}/props` without user info, for messages and the record.
    fn props_url(&self) -> String {
        format!("{}/props", self.base_url_display())
    }
}

/// The answer of HTTP `status` with `body` to `GET /props`.
pub fn read_answer(status: u16, body: &[u8]) -> PropsAnswer {
    if !(200..300).contains(&status) {
        return PropsAnswer::NoWindow(format!("it answered HTTP {status}"));
    }
    let Ok(json) = serde_json::from_slice::<Value>(body) else {
        let text = String::from_utf8_lossy(body);
        return PropsAnswer::NoWindow(format!("its answer is not JSON: {}", truncate(text.trim(), 80)));
    };
    match json.pointer("/default_generation_settings/n_ctx").and_then(Value::as_u64).filter(|n| *n > 0) {
        Some(n) => PropsAnswer::Window(n),
        None => PropsAnswer::NoWindow("its answer has no default_generation_settings.n_ctx".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ApiStyle, GatewaySettings};

    #[test]
    fn the_gateway_is_named_without_its_password_or_a_trailing_slash() {
        let client = |url: &str| GatewayClient::new(GatewaySettings::new(url, ApiStyle::Openai)).unwrap();
        assert_eq!(client("http://ada:secret@127.0.0.1:8080/").base_url_display(), "http://127.0.0.1:8080");
        assert_eq!(client("http://127.0.0.1:8080/llama/").base_url_display(), "http://127.0.0.1:8080/llama");
    }

    #[test]
    fn llama_cpps_props_give_the_slots_context() {
        let body = br#"{"default_generation_settings":{"params":{"n_predict":-1},"n_ctx":8192},"total_slots":1,"model_alias":"smollm2"}"#;
        assert_eq!(read_answer(200, body), PropsAnswer::Window(8192));
    }

    #[test]
    fn any_other_answer_has_no_window() {
        assert_eq!(read_answer(404, b"Not Found"), PropsAnswer::NoWindow("it answered HTTP 404".to_string()));
        assert_eq!(read_answer(200, b"<html>hi</html>"), PropsAnswer::NoWindow("its answer is not JSON: <html>hi</html>".to_string()));
        let no_ctx = PropsAnswer::NoWindow("its answer has no default_generation_settings.n_ctx".to_string());
        assert_eq!(read_answer(200, br#"{"n_ctx":8192}"#), no_ctx);
        assert_eq!(read_answer(200, br#"{"default_generation_settings":{"n_ctx":0}}"#), no_ctx);
        assert_eq!(read_answer(200, br#"{"default_generation_settings":{"n_ctx":"8192"}}"#), no_ctx);
    }
}
