//! Sending one round's request (DESIGN.md §6.2): the round re-runs and how a failed request
//! is named in an `error` event.
//!
//! Owns [`send_with_reruns`] and [`error_kind`]. Must not touch the history: a failed round
//! appends nothing, so a re-run sends the same request again.

use tokio_util::sync::CancellationToken;

use crate::agent::Session;
use crate::conversation::message::ContentBlock;
use crate::event::{Emitter, EventKind};
use crate::gateway::{CallOptions, GatewayError, GatewayEvent, Response};

/// cicy: a round that fails after the gateway's retries is re-run at most 2 more times.
pub const ROUND_RERUNS: u32 = 2;

/// Sends one round; a failure after the gateway's own retries is re-run up to
/// [`ROUND_RERUNS`] times from the same history (nothing of a failed round was appended).
pub(super) async fn send_with_reruns(
    session: &Session,
    prompt: &crate::gateway::Prompt,
    opts: &CallOptions,
    events: &Emitter,
    cancel: &CancellationToken,
) -> Result<Response, GatewayError> {
    let mut attempt = 0;
    loop {
        let mut streamed_text = false;
        let mut on_event = |ev: GatewayEvent| match ev {
            GatewayEvent::TextDelta(text) => {
                streamed_text = true;
                events.emit(EventKind::TextDelta { text })
            }
            GatewayEvent::ThinkingDelta(text) => events.emit(EventKind::ThinkingDelta { text }),
            GatewayEvent::Retry { attempt, delay_ms, reason } => {
                events.emit(EventKind::Retry { attempt, delay_ms, reason })
            }
        };
        let result = session.client.send(prompt, opts, &mut on_event, cancel).await;
        match result {
            Ok(resp) => {
                if resp.content.iter().any(|b| matches!(b, ContentBlock::Text { .. })) {
                    events.emit(EventKind::TextEnd);
                }
                return Ok(resp);
            }
            Err(GatewayError::Cancelled) => return Err(GatewayError::Cancelled),
            Err(e @ GatewayError::Status { should_retry: Some(false), .. }) => return Err(e),
            Err(e @ GatewayError::Status { status, .. }) if (400..500).contains(&status) && status != 408 && status != 409 && status != 429 => {
                return Err(e)
            }
            // The gateway layer already tried this connection 1 + max_retries times.
            Err(e @ GatewayError::Connect { .. }) => return Err(e),
            Err(e) if attempt < ROUND_RERUNS => {
                attempt += 1;
                if streamed_text {
                    // Close the partial answer so the re-run's text does not run on from it.
                    events.emit(EventKind::TextEnd);
                }
                events.emit(EventKind::System {
                    text: format!("round failed ({e}); running it again ({attempt}/{ROUND_RERUNS})"),
                });
            }
            Err(e) => return Err(e),
        }
    }
}

/// The `kind` of the `error` event for a failed request.
pub(super) fn error_kind(e: &GatewayError) -> &'static str {
    match e {
        GatewayError::Connect { .. } => "connect",
        GatewayError::Status { .. } => "http_status",
        GatewayError::StreamError { .. } => "stream_error",
        GatewayError::Incomplete(_) => "incomplete_stream",
        GatewayError::Decode(_) => "decode",
        GatewayError::Timeout(_) => "timeout",
        GatewayError::Cancelled => "cancelled",
    }
}
