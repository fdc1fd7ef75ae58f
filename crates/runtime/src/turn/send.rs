//! Sending one round's request (docs/design.md §6.2) and naming a failed request in an `error`
//! event.
//!
//! Owns [`send_with_reruns`] and [`error_kind`]. Every retry and re-run decision is
//! `gateway::retry`'s; this module only turns gateway progress into turn events. Must not touch
//! the history: a failed round appends nothing here.

use tokio_util::sync::CancellationToken;

use crate::agent::Session;
use crate::conversation::message::ContentBlock;
use crate::event::{Emitter, ErrorKind, EventKind};
use crate::gateway::{CallOptions, GatewayError, GatewayEvent, Response, RoundFailure};

/// cicy: a round whose stream failed after content began is re-run at most 2 times (decided,
/// like every retry, by `gateway::retry`).
pub use crate::gateway::retry::ROUND_RERUNS;

/// Sends one round through the gateway's one retry layer (`gateway::retry` decides every retry
/// and re-run; nothing of a failed round was appended) and reports its progress as events. A
/// `Retry` after answer text was shown means that text is discarded: it is closed (`text_end`)
/// and marked `[retrying]` so it does not read as one answer with the re-run's. A failure
/// closes shown text too; the error carries it so the turn can keep it.
pub(super) async fn send_with_reruns(
    session: &Session,
    prompt: &crate::gateway::Prompt,
    opts: &CallOptions,
    events: &Emitter,
    cancel: &CancellationToken,
) -> Result<Response, RoundFailure> {
    let mut text_open = false;
    let mut on_event = |ev: GatewayEvent| match ev {
        GatewayEvent::TextDelta(text) => {
            text_open = true;
            events.emit(EventKind::TextDelta { text })
        }
        GatewayEvent::ThinkingDelta(text) => events.emit(EventKind::ThinkingDelta { text }),
        GatewayEvent::Retry { attempt, delay_ms, reason } => {
            if std::mem::take(&mut text_open) {
                events.emit(EventKind::TextEnd);
                events.emit(EventKind::System {
                    text: "[retrying] the answer above was cut off and is discarded; the round is sent again".to_string(),
                });
            }
            events.emit(EventKind::Retry { attempt, delay_ms, reason })
        }
    };
    let result = session.client().send_round(prompt, opts, &mut on_event, cancel).await;
    let shown = match &result {
        Ok(resp) => resp.content.iter().any(|b| matches!(b, ContentBlock::Text { .. })),
        Err(_) => text_open,
    };
    if shown {
        events.emit(EventKind::TextEnd);
    }
    result
}

/// The `kind` of the `error` event for a failed request.
pub(super) fn error_kind(e: &GatewayError) -> ErrorKind {
    match e {
        GatewayError::Connect { .. } => ErrorKind::Connect,
        GatewayError::Status { .. } | GatewayError::NotFound { .. } => ErrorKind::HttpStatus,
        GatewayError::NoKey { .. } => ErrorKind::NoApiKey,
        GatewayError::StreamError { .. } => ErrorKind::StreamError,
        GatewayError::Incomplete(_) => ErrorKind::IncompleteStream,
        GatewayError::Decode(_) => ErrorKind::Decode,
        GatewayError::Timeout(_) => ErrorKind::Timeout,
        GatewayError::Cancelled => ErrorKind::Cancelled,
    }
}
