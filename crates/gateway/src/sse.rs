//! Server-sent events decoding (WHATWG HTML "Server-sent events", §9.2 event stream
//! interpretation), on top of the `eventsource-stream` crate.
//!
//! Owns: turning the raw response bytes of a gateway into [`SseEvent`]s (event name + data).
//! Must not touch: what an event means (that is `anthropic.rs` / `openai.rs`), HTTP, retries.
//!
//! Contract (docs/design.md §4): bytes are buffered across reads; an event fires only at its blank
//! line; CR, LF and CRLF all end lines; a multi-byte UTF-8 character split across reads decodes
//! correctly; the same byte stream split at any point yields the same events.
//!
//! What `eventsource-stream` 0.2.3 does by itself (read from its source and checked by the tests
//! below): it buffers across reads, keeps an incomplete UTF-8 tail for the next read, fires at the
//! blank line and accepts all three line endings. But (faults 1 and 2 come from a CR that ends a
//! read: its nom line parser must see the next byte to tell CR from CRLF):
//! 1. an event whose blank line is a lone CR at the end of a read is held back until more bytes
//!    arrive — with a gateway that keeps the connection open, `message_stop` never fires;
//! 2. a stream that ends with CR (e.g. `data: x\r\r` then EOF) loses its last event;
//! 3. a stream that starts with a UTF-8 BOM (which the spec says to skip) makes it PANIC: it
//!    strips the BOM with `&string[1..]`, but U+FEFF is 3 bytes long;
//! 4. it treats an invalid UTF-8 byte like an incomplete tail: the rest of the stream piles up in
//!    its buffer and only EOF reports an error.
//!
//! So this module puts a small byte stage in front of it ([`Prepare`]): CRLF and lone CR become
//! LF (exact, since CR and LF are ASCII and never part of a multi-byte character, and the spec
//! gives all three endings the same meaning); the one leading BOM is stripped here and the text
//! handed on starts with a harmless comment line (`:`), so the crate's BOM code never runs; only
//! complete, valid UTF-8 is handed on; an invalid byte is an error at once, a character cut off
//! by EOF is an error at EOF.

use std::convert::Infallible;

use eventsource_stream::{EventStream, EventStreamError};
use futures_util::{stream, FutureExt, Stream, StreamExt};

/// One dispatched event. `event` is the `event:` field, or `message` when the event had none
/// (the spec's default type); `data` is the `data:` lines joined with `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

/// Why the event stream could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum SseError<E> {
    /// A byte sequence that can never be UTF-8; `offset` counts the bytes of (line-ending
    /// normalised) text before it.
    #[error("the event stream is not valid UTF-8 (byte {offset})")]
    Utf8 { offset: u64 },
    /// The stream ended in the middle of a multi-byte character.
    #[error("the event stream ended inside a UTF-8 character")]
    TruncatedUtf8,
    /// The line parser rejected the input (cannot happen for UTF-8 input; kept for completeness).
    #[error("malformed event stream: {0}")]
    Parse(String),
    /// The underlying byte stream failed.
    #[error("{0}")]
    Transport(E),
}

/// The byte stage in front of `eventsource-stream`: line-ending normalisation and UTF-8 checks.
///
/// Feed it reads with [`Prepare::push`], then call [`Prepare::finish`] at EOF. The output of
/// `push` is always complete, valid UTF-8 with LF line endings only.
#[derive(Debug, Default)]
pub struct Prepare {
    /// The previous byte was a CR (already emitted as LF), so a following LF belongs to it.
    after_cr: bool,
    /// Bytes of a multi-byte character whose end has not arrived yet (at most 3).
    tail: Vec<u8>,
    /// Bytes of normalised text produced so far, for error offsets.
    offset: u64,
    /// Some text was handed on (the leading-BOM question is settled).
    started: bool,
}

impl Prepare {
    /// Normalises one read. Errors: [`SseError::Utf8`] at the first byte that can never be
    /// UTF-8.
    pub fn push<E>(&mut self, chunk: &[u8]) -> Result<Vec<u8>, SseError<E>> {
        let mut out = Vec::with_capacity(self.tail.len() + chunk.len());
        out.append(&mut self.tail);
        for &b in chunk {
            if self.after_cr && b == b'\n' {
                // The LF of a CRLF whose CR was already emitted as LF.
                self.after_cr = false;
                continue;
            }
            self.after_cr = b == b'\r';
            out.push(if b == b'\r' { b'\n' } else { b });
        }
        if let Err(e) = std::str::from_utf8(&out) {
            if e.error_len().is_some() {
                return Err(SseError::Utf8 { offset: self.offset + e.valid_up_to() as u64 });
            }
            // Only an incomplete character at the end: keep it for the next read.
            self.tail = out.split_off(e.valid_up_to());
        }
        self.offset += out.len() as u64;
        if !self.started && !out.is_empty() {
            // The first character is complete here (an incomplete one stays in `tail`), so a
            // leading BOM is seen whole. Strip the one BOM the spec allows, then start with a
            // comment line: the crate's own BOM check slices `&string[1..]` and panics on the
            // 3-byte U+FEFF, so the first text it sees must never start with one.
            self.started = true;
            let body = out.strip_prefix("\u{feff}".as_bytes()).unwrap_or(&out);
            let mut first = Vec::with_capacity(body.len() + 2);
            first.extend_from_slice(b":\n");
            first.extend_from_slice(body);
            out = first;
        }
        Ok(out)
    }

    /// Called at EOF. Errors: [`SseError::TruncatedUtf8`] when a character was cut off.
    pub fn finish<E>(&mut self) -> Result<(), SseError<E>> {
        if self.tail.is_empty() {
            Ok(())
        } else {
            Err(SseError::TruncatedUtf8)
        }
    }
}

/// Decodes a stream of byte reads (e.g. `reqwest::Response::bytes_stream`) into events.
///
/// The returned stream ends when the input ends; an event whose blank line never came is
/// dropped, as the spec says. Transport errors are passed through as [`SseError::Transport`].
pub fn decode<S, B, E>(bytes: S) -> impl Stream<Item = Result<SseEvent, SseError<E>>> + Send
where
    S: Stream<Item = Result<B, E>> + Send,
    B: AsRef<[u8]> + Send,
    E: Send,
{
    let mut prepare = Prepare::default();
    let prepared = bytes.map(Some).chain(stream::once(async { None })).map(move |item| match item {
        Some(Ok(chunk)) => prepare.push(chunk.as_ref()),
        Some(Err(e)) => Err(SseError::Transport(e)),
        // EOF: an empty read is skipped by the parser; only a cut-off character is an error.
        None => prepare.finish().map(|()| Vec::new()),
    });
    EventStream::new(prepared).map(|item| match item {
        Ok(ev) => Ok(SseEvent { event: ev.event, data: ev.data }),
        Err(EventStreamError::Transport(e)) => Err(e),
        // Unreachable in practice: `Prepare` only hands on valid UTF-8.
        Err(EventStreamError::Utf8(_)) => Err(SseError::TruncatedUtf8),
        Err(EventStreamError::Parser(e)) => Err(SseError::Parse(format!("{e:?}"))),
    })
}

/// Decodes a complete byte stream given as reads, synchronously (for tests and replays).
///
/// Stops at the first error.
pub fn decode_chunks<I>(chunks: I) -> Result<Vec<SseEvent>, SseError<Infallible>>
where
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    let chunks: Vec<Result<Vec<u8>, Infallible>> = chunks.into_iter().map(|c| Ok(c.as_ref().to_vec())).collect();
    let events = decode(stream::iter(chunks));
    let collected = async move {
        let mut events = std::pin::pin!(events);
        let mut out = Vec::new();
        while let Some(item) = events.next().await {
            out.push(item?);
        }
        Ok(out)
    };
    // Every read is ready at once, so the future completes on its first poll.
    collected.now_or_never().unwrap_or(Err(SseError::Parse("the decoder did not finish".into())))
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
