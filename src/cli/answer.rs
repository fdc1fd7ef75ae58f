//! The stdin chat session's answers to `ask_user` (docs/design.md §12): while a line's turn runs and
//! a question of it is open, the next non-blank stdin line (trimmed, taken as it is, even one
//! that looks like a command) is its answer. Lines are read only while a question waits, so
//! piped lines after the question's line are never taken as messages meanwhile. At EOF no
//! answer can come: the question waits out its timeout. Must not touch the turn or the
//! history; the tool itself (`cicy::tools::ask_user`) does the waiting.

use std::future::Future;
use std::sync::Arc;

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use cicy::ask::Questions;
use cicy::event::{Emitter, EventKind};

/// The `system` line that tells the user how to answer.
pub(super) const HINT: &str = "type your answer on the next line";

/// Runs `run` (one line's turn) to its end, answering each question it opens in `questions`
/// with the next non-blank line of `stdin`. `buf` keeps a line that was cut short when the
/// turn ended, for the session's next read.
pub(super) async fn answering<T>(
    run: impl Future<Output = T>,
    questions: Arc<Questions>,
    stdin: &mut (impl AsyncBufRead + Unpin),
    buf: &mut Vec<u8>,
    events: &Emitter,
) -> std::io::Result<T> {
    tokio::pin!(run);
    let mut eof = false;
    loop {
        let question = tokio::select! {
            out = &mut run => return Ok(out),
            q = questions.next_open(), if !eof => q,
        };
        events.emit(EventKind::System { text: HINT.to_string() });
        loop {
            let n = tokio::select! {
                out = &mut run => return Ok(out),
                n = stdin.read_until(b'\n', buf) => n?,
            };
            if n == 0 {
                eof = true;
                break;
            }
            let line = String::from_utf8_lossy(buf).trim().to_string();
            buf.clear();
            if line.is_empty() {
                continue;
            }
            if let Err(e) = questions.respond(&question.reference, &line) {
                // The question ended (timed out, cancelled) while the line was typed.
                events.emit(EventKind::System { text: format!("the answer was not taken: {e}") });
            }
            break;
        }
    }
}

/// The lines of stdin for a session through serve (`super::remote`), read one at a time; a read
/// that another branch of a `select!` cut short keeps its bytes for the next.
pub(super) struct Lines {
    reader: tokio::io::BufReader<tokio::io::Stdin>,
    buf: Vec<u8>,
}

impl Lines {
    pub(super) fn stdin() -> Self {
        Self { reader: tokio::io::BufReader::new(tokio::io::stdin()), buf: Vec::new() }
    }

    /// The next line, trimmed and decoded lossily (one line that is not UTF-8 must not end the
    /// session), or `None` at EOF.
    pub(super) async fn next(&mut self) -> std::io::Result<Option<String>> {
        let n = self.reader.read_until(b'\n', &mut self.buf).await?;
        if n == 0 && self.buf.is_empty() {
            return Ok(None);
        }
        let line = String::from_utf8_lossy(&self.buf).trim().to_string();
        self.buf.clear();
        Ok(Some(line))
    }
}

/// The next non-blank line of `lines`, or `None` at EOF or without stdin (never resolves then,
/// so a `select!` branch on it just waits).
pub(super) async fn next_answer(lines: Option<&mut Lines>) -> std::io::Result<Option<String>> {
    let Some(lines) = lines else { return std::future::pending().await };
    loop {
        match lines.next().await? {
            Some(line) if line.is_empty() => continue,
            other => return Ok(other),
        }
    }
}
