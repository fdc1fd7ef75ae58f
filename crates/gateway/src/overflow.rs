//! Recognizing a gateway's refusal of a request that exceeds the model's context window.
//!
//! Owns one pure computation, [`detect`]: from a [`GatewayError`] to the window and prompt size
//! the gateway states, if the error is a context overflow. It sends nothing and stores nothing;
//! learning the window and compacting are `crate::compact`'s and the turn loop's.
//!
//! The texts recognized (matched case-insensitively, in an HTTP error body or an in-stream
//! error):
//! - Anthropic Messages, HTTP 400 `invalid_request_error`:
//!   `prompt is too long: 215000 tokens > 200000 maximum`.
//! - OpenAI chat completions, HTTP 400, `code: context_length_exceeded`: `This model's maximum
//!   context length is 8192 tokens. However, your messages resulted in 9100 tokens.`
//! - llama.cpp server, HTTP 400 `exceed_context_size_error`: `request (9000 tokens) exceeds the
//!   available context size (8192 tokens)` with `"n_prompt_tokens":9000,"n_ctx":8192` beside it;
//!   older builds say `the request exceeds the available context size, try increasing it` and
//!   state no numbers.

use super::GatewayError;

/// What a context-overflow refusal states. Both numbers are tokens as the gateway counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow {
    /// The model's context window, when the error states it.
    pub window: Option<u64>,
    /// The size of the refused prompt, when the error states it.
    pub prompt_tokens: Option<u64>,
}

/// The context overflow `e` reports, if it is one: an HTTP error or an in-stream error whose
/// text is one of the module's recognized refusals. Any other error is `None`.
pub fn detect(e: &GatewayError) -> Option<Overflow> {
    match e {
        GatewayError::Status { body, .. } => from_text(body),
        GatewayError::StreamError { message, .. } => from_text(message),
        GatewayError::Connect { .. }
        | GatewayError::NoKey { .. }
        | GatewayError::NotFound { .. }
        | GatewayError::Incomplete(_)
        | GatewayError::Decode(_)
        | GatewayError::Timeout(_)
        | GatewayError::Cancelled => None,
    }
}

/// [`detect`] on the text of an error body.
pub fn from_text(text: &str) -> Option<Overflow> {
    let t = text.to_ascii_lowercase();
    let positive = |n: Option<u64>| n.filter(|n| *n > 0);
    if t.contains("prompt is too long") {
        return Some(Overflow {
            window: positive(number_after(&t, "tokens > ")),
            prompt_tokens: positive(number_after(&t, "prompt is too long: ")),
        });
    }
    if t.contains("context_length_exceeded") || t.contains("maximum context length is") {
        return Some(Overflow {
            window: positive(number_after(&t, "maximum context length is ")),
            prompt_tokens: positive(number_after(&t, "resulted in ").or_else(|| number_after(&t, "you requested "))),
        });
    }
    if t.contains("exceeds the available context size") || t.contains("exceed_context_size_error") {
        return Some(Overflow {
            window: positive(number_after(&t, "\"n_ctx\":").or_else(|| number_after(&t, "available context size ("))),
            prompt_tokens: positive(number_after(&t, "\"n_prompt_tokens\":").or_else(|| number_after(&t, "request ("))),
        });
    }
    None
}

/// The decimal number that follows the first `prefix` in `text` (spaces allowed between).
fn number_after(text: &str, prefix: &str) -> Option<u64> {
    let rest = &text[text.find(prefix)? + prefix.len()..];
    let rest = rest.trim_start();
    let digits: &str = &rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len())];
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(body: &str) -> GatewayError {
        GatewayError::Status { status: 400, body: body.to_string(), retry_after_ms: None, should_retry: None }
    }

    #[test]
    fn anthropic_states_both_numbers() {
        let body =
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215000 tokens > 200000 maximum"}}"#;
        assert_eq!(detect(&status(body)), Some(Overflow { window: Some(200_000), prompt_tokens: Some(215_000) }));
    }

    #[test]
    fn openai_states_the_maximum_context_length() {
        let body = r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        assert_eq!(detect(&status(body)), Some(Overflow { window: Some(8192), prompt_tokens: Some(9100) }));
        let code_only = r#"{"error":{"message":"too long","code":"context_length_exceeded"}}"#;
        assert_eq!(detect(&status(code_only)), Some(Overflow { window: None, prompt_tokens: None }));
    }

    #[test]
    fn llama_cpp_states_n_ctx_in_its_body_and_older_builds_state_nothing() {
        let body = r#"{"error":{"code":400,"message":"request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#;
        assert_eq!(detect(&status(body)), Some(Overflow { window: Some(8192), prompt_tokens: Some(9000) }));
        let old = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"invalid_request_error"}}"#;
        assert_eq!(detect(&status(old)), Some(Overflow { window: None, prompt_tokens: None }));
        let in_stream = GatewayError::StreamError { kind: "error".into(), message: body.to_string() };
        assert_eq!(detect(&in_stream).and_then(|o| o.window), Some(8192));
    }

    #[test]
    fn other_errors_are_not_overflows() {
        assert_eq!(detect(&status(r#"{"error":{"type":"invalid_request_error","message":"max_tokens: must be positive"}}"#)), None);
        assert_eq!(
            detect(&status(
                r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#
            )),
            None
        );
        assert_eq!(detect(&GatewayError::Timeout(300)), None);
        // A stated window of 0 is no window.
        assert_eq!(from_text("prompt is too long: 10 tokens > 0 maximum"), Some(Overflow { window: None, prompt_tokens: Some(10) }));
    }
}
