//! `/compact` and `/clear` as library operations (docs/design.md §7), so the CLI and `serve` run
//! them the same way and report them with the same events, byte for byte.
//!
//! Owns reading a chat text as a command or a message (`parse`), what each command does to an
//! open session and the `system`/`error` event texts that report it. Must not touch: the turn
//! lock (the caller holds it and refuses a command while a turn runs), exit codes and HTTP
//! answers (the caller maps [`CommandEnd`] to them), signals.

mod parse;

pub use parse::{Command, Line, NotACommand, Posted};

use tokio_util::sync::CancellationToken;

use crate::agent::{AgentError, Session};
use crate::compact::{self, CompactError};
use crate::conversation::message::Message;
use crate::event::{Emitter, ErrorKind, EventKind};
use crate::gateway::GatewayError;
use crate::prompt::window_start;

/// How a command ended; it was reported as events either way. The CLI exits 0, 130 and 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandEnd {
    /// Message counts of the active window before and after (for `/clear`: all messages of the
    /// old conversation, and 0).
    Done { before: usize, after: usize },
    /// The cancel token ended it; nothing was changed.
    Cancelled,
    /// Reported as an `error` event; nothing was changed.
    Failed,
}

/// `/compact`: summarizes the window except its last `keep` messages (see
/// [`compact::compact_session`]) and reports it: `compacted {before, after}` and a `system`
/// event with the summary calls' usage and the archive's name; or an `error` event of kind
/// `compact` saying nothing was changed (cancelled, nothing to compact, the summary failed).
/// Errors: the history could not be read or written, or the agent's materials not loaded.
pub async fn compact(session: &mut Session, keep: usize, events: &Emitter, cancel: &CancellationToken) -> Result<CommandEnd, AgentError> {
    let failed = |message: String| {
        events.emit(EventKind::Error { kind: ErrorKind::Compact, message });
    };
    match compact::compact_session(session, keep, events, cancel).await {
        Ok(done) => {
            let archived = done
                .archive
                .as_ref()
                .and_then(|a| a.current.file_name())
                .map(|n| format!("; the state before is archived as {}", n.to_string_lossy()))
                .unwrap_or_default();
            events.emit(EventKind::System {
                text: format!(
                    "/compact done: {} summary call(s), input {}, output {}, cache write {}, cache read {}{archived}",
                    done.requests,
                    done.usage.input_tokens,
                    done.usage.output_tokens,
                    done.usage.cache_creation_input_tokens,
                    done.usage.cache_read_input_tokens
                ),
            });
            Ok(CommandEnd::Done { before: done.before, after: done.after })
        }
        Err(CompactError::Gateway(GatewayError::Cancelled)) => {
            failed("/compact was cancelled; nothing was changed".to_string());
            Ok(CommandEnd::Cancelled)
        }
        Err(CompactError::History(e)) => Err(e.into()),
        Err(CompactError::Agent(e)) => Err(*e),
        Err(CompactError::Nothing) => {
            failed(format!("/compact: {}; nothing was changed", nothing_to_compact(&session.conversation().current.messages, keep)));
            Ok(CommandEnd::Failed)
        }
        Err(e @ (CompactError::Gateway(_) | CompactError::Empty | CompactError::TooLarge { .. })) => {
            failed(format!("/compact failed: {e}; nothing was changed"));
            Ok(CommandEnd::Failed)
        }
    }
}

/// Why `/compact` found nothing to summarize, in the terms of what the user sees: an empty
/// conversation has no summary to mention.
fn nothing_to_compact(messages: &[Message], keep: usize) -> String {
    let window = &messages[window_start(messages)..];
    let plain = window.iter().filter(|m| !m.is_summary()).count();
    if messages.is_empty() {
        "nothing to compact: the conversation is empty".to_string()
    } else if plain == 0 {
        "nothing to compact: the window holds only the last summary".to_string()
    } else {
        format!("nothing to compact: --keep {keep} keeps all {plain} message(s) of the window (the cut moves to a turn boundary)")
    }
}

/// `/clear`: starts a new, empty conversation (see [`Session::clear`]) and reports it as a
/// `system` event; returns `Done { before: messages of the old conversation, after: 0 }` and
/// the old conversation's id, which stays on disk. Errors: the new conversation's files could
/// not be written.
pub fn clear(session: &mut Session, events: &Emitter) -> Result<(CommandEnd, String), AgentError> {
    let before = session.conversation().current.messages.len();
    let old = session.clear()?;
    events.emit(EventKind::System {
        text: format!(
            "/clear: new conversation {}; the previous one ({old}) is kept on disk",
            session.conversation().current.conversation_id
        ),
    });
    Ok((CommandEnd::Done { before, after: 0 }, old))
}
