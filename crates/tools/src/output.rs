//! What a tool process printed, as `tool_result` text: bounded capture, lossy decoding that says
//! what it replaced, and the head + tail cap.
//!
//! Owns the [`Collector`] (bytes in, capped text out), [`cap_output`] and the note on bytes that
//! were not valid UTF-8. Pure data handling: it spawns, reads and signals nothing (that is
//! `super::process`) and knows nothing of any tool's input.

use std::borrow::Cow;

/// Caps `s` at `cap` bytes: unchanged when it fits, else its head, a marker line
/// `\n[… N bytes omitted …]\n` and its tail, cut on UTF-8 character boundaries, where N counts
/// the bytes left out. The tail gets any byte the head gives up, so the end of the output (the
/// status line) survives. The result is at most `cap` bytes whenever `cap` can hold the marker;
/// for a smaller `cap` it is the marker alone.
pub fn cap_output(s: &str, cap: usize) -> String {
    if s.len() <= cap {
        return s.to_owned();
    }
    elide(s, s, s.len(), cap)
}

/// The line that says how many bytes lossy decoding replaced, or `None` when there were none.
/// E.g. `[note: 7 bytes were not valid UTF-8 and are shown as �]` (� is U+FFFD).
pub fn invalid_utf8_note(invalid_bytes: usize) -> Option<String> {
    match invalid_bytes {
        0 => None,
        1 => Some("[note: 1 byte was not valid UTF-8 and is shown as \u{fffd}]".to_owned()),
        n => Some(format!("[note: {n} bytes were not valid UTF-8 and are shown as \u{fffd}]")),
    }
}

/// `bytes` decoded as `String::from_utf8_lossy` does, with the count of bytes it replaced.
pub fn decode_lossy(bytes: &[u8]) -> (Cow<'_, str>, usize) {
    let invalid = bytes.utf8_chunks().map(|chunk| chunk.invalid().len()).sum();
    (String::from_utf8_lossy(bytes), invalid)
}

/// Keeps a prefix of `head_src` and a suffix of `tail_src` around a marker, where `head_src` is a
/// prefix and `tail_src` a suffix of a `total`-byte text that no longer fits in `cap`.
fn elide(head_src: &str, tail_src: &str, total: usize, cap: usize) -> String {
    // The marker for `total` is at least as long as the one actually written (omitted ≤ total).
    let keep = cap.saturating_sub(marker(total).len());
    let head_end = floor_char_boundary(head_src, keep / 2);
    let tail_want = keep - head_end;
    let tail_start = ceil_char_boundary(tail_src, tail_src.len().saturating_sub(tail_want));
    let tail = &tail_src[tail_start..];
    let omitted = total - head_end - tail.len();
    let mut capped = String::with_capacity(cap);
    capped.push_str(&head_src[..head_end]);
    capped.push_str(&marker(omitted));
    capped.push_str(tail);
    capped
}

fn marker(omitted: usize) -> String {
    format!("\n[… {omitted} bytes omitted …]\n")
}

fn floor_char_boundary(s: &str, index: usize) -> usize {
    let mut index = index.min(s.len());
    while !s.is_char_boundary(index) {
        index -= 1;
    }
    index
}

fn ceil_char_boundary(s: &str, index: usize) -> usize {
    let mut index = index.min(s.len());
    while !s.is_char_boundary(index) {
        index += 1;
    }
    index
}

/// Counts, across chunks, the bytes of a stream that are not valid UTF-8: the same bytes that
/// `String::from_utf8_lossy` of the whole stream would replace, however the stream is split.
#[derive(Debug, Default)]
struct InvalidUtf8 {
    /// The start of a character cut by the end of the last chunk (at most 3 bytes).
    pending: Vec<u8>,
    invalid: usize,
}

impl InvalidUtf8 {
    fn push(&mut self, chunk: &[u8]) {
        let joined: Cow<'_, [u8]> = if self.pending.is_empty() {
            Cow::Borrowed(chunk)
        } else {
            let mut joined = std::mem::take(&mut self.pending);
            joined.extend_from_slice(chunk);
            Cow::Owned(joined)
        };
        let mut rest: &[u8] = &joined;
        while let Err(err) = std::str::from_utf8(rest) {
            let after = &rest[err.valid_up_to()..];
            match err.error_len() {
                Some(len) => {
                    self.invalid += len;
                    rest = &after[len..];
                }
                // A character that may still be completed by the next chunk.
                None => {
                    self.pending = after.to_vec();
                    break;
                }
            }
        }
    }

    /// The count once the stream has ended: a character still cut off is invalid too.
    fn total(&self) -> usize {
        self.invalid + self.pending.len()
    }
}

/// The combined output in bounded memory: the first `limit` bytes, the last `limit` to
/// `2 × limit` bytes, and the count of bytes dropped between them, so a command that prints
/// gigabytes costs at most about three times `limit` and still yields what [`cap_output`] would.
/// It also counts the bytes of the whole output that are not valid UTF-8.
#[derive(Debug)]
pub struct Collector {
    head: Vec<u8>,
    tail: Vec<u8>,
    gap: usize,
    limit: usize,
    invalid: InvalidUtf8,
}

impl Collector {
    pub fn new(limit: usize) -> Self {
        Self { head: Vec::new(), tail: Vec::new(), gap: 0, limit, invalid: InvalidUtf8::default() }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        self.invalid.push(chunk);
        let to_head = chunk.len().min(self.limit - self.head.len());
        self.head.extend_from_slice(&chunk[..to_head]);
        self.tail.extend_from_slice(&chunk[to_head..]);
        // Trim only past twice the limit, so trimming costs amortised O(1) per byte.
        if self.tail.len() > 2 * self.limit {
            let excess = self.tail.len() - self.limit;
            self.tail.drain(..excess);
            self.gap += excess;
        }
    }

    /// The output decoded lossily, then (when any byte was not valid UTF-8) the
    /// [`invalid_utf8_note`] line, then `status` on a line of its own, capped at `cap` bytes
    /// (`cap` ≤ the collector's `limit`, or the dropped middle would show). The note counts the
    /// invalid bytes of the whole output, including any part the cap leaves out; it sits just
    /// above the status line so the cap, which keeps the end, keeps it too.
    pub fn finish(self, status: &str, cap: usize) -> String {
        let status = match invalid_utf8_note(self.invalid.total()) {
            Some(note) => format!("{note}\n{status}"),
            None => status.to_owned(),
        };
        if self.gap == 0 {
            let mut bytes = self.head;
            bytes.extend_from_slice(&self.tail);
            let text = with_status(String::from_utf8_lossy(&bytes).into_owned(), &status);
            return cap_output(&text, cap);
        }
        // Both ends next to the gap may hold part of a character; count those bytes as omitted
        // rather than let lossy decoding turn them into replacement characters.
        let head_cut = self.head.utf8_chunks().last().map_or(0, |chunk| chunk.invalid().len());
        let tail_cut = self.tail.iter().take(3).take_while(|&&byte| byte & 0xC0 == 0x80).count();
        let head = String::from_utf8_lossy(&self.head[..self.head.len() - head_cut]);
        let tail = String::from_utf8_lossy(&self.tail[tail_cut..]).into_owned();
        let tail = with_status(tail, &status);
        let total = head.len() + head_cut + self.gap + tail_cut + tail.len();
        elide(&head, &tail, total, cap)
    }
}

fn with_status(mut text: String, status: &str) -> String {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(status);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_output_leaves_text_that_fits_unchanged() {
        assert_eq!(cap_output("", 0), "");
        assert_eq!(cap_output("", 10), "");
        assert_eq!(cap_output("abcdefghij", 10), "abcdefghij");
        assert_eq!(cap_output("éé€😀", 11), "éé€😀");
    }

    #[test]
    fn cap_output_keeps_head_and_tail_around_the_marker() {
        let digits = "0123456789".repeat(10);
        // The marker for 100 bytes is 29 bytes long, so a cap of 39 keeps 5 + 5 bytes.
        assert_eq!(cap_output(&digits, 39), "01234\n[… 90 bytes omitted …]\n56789");
        assert_eq!(cap_output(&digits, 40), "01234\n[… 89 bytes omitted …]\n456789");
        // One byte over the cap is enough to elide; a 2-digit total makes a 28-byte marker.
        assert_eq!(cap_output(&"x".repeat(40), 39), "xxxxx\n[… 29 bytes omitted …]\nxxxxxx");
    }

    #[test]
    fn cap_output_cuts_multibyte_characters_only_on_boundaries() {
        // Cap 39 on 100+ bytes keeps 10: the head rounds 5 down, the tail takes the rest,
        // rounding its start up.
        assert_eq!(cap_output(&"é".repeat(50), 39), "éé\n[… 90 bytes omitted …]\nééé");
        assert_eq!(cap_output(&"€".repeat(40), 39), "€\n[… 111 bytes omitted …]\n€€");
        assert_eq!(cap_output(&"😀".repeat(25), 39), "😀\n[… 92 bytes omitted …]\n😀");
        let text = format!("{}€€", "x".repeat(94));
        assert_eq!(cap_output(&text, 39), "xxxxx\n[… 92 bytes omitted …]\n€");
    }

    #[test]
    fn cap_output_below_the_marker_size_is_the_marker_alone() {
        assert_eq!(cap_output("abc", 0), "\n[… 3 bytes omitted …]\n");
        assert_eq!(cap_output("abcdef", 5), "\n[… 6 bytes omitted …]\n");
    }

    #[test]
    fn cap_output_fills_every_cap_with_a_prefix_and_a_suffix() {
        let text = "aé€😀\nstderr: boom\n".repeat(20);
        let marker_len = marker(text.len()).len();
        for cap in marker_len..text.len() {
            let capped = cap_output(&text, cap);
            let (head, rest) = capped.split_once("\n[… ").unwrap_or_else(|| panic!("{capped}"));
            let (omitted, tail) = rest.split_once(" bytes omitted …]\n").unwrap_or_default();
            let omitted: usize = omitted.parse().unwrap_or_else(|_| panic!("{capped}"));
            assert!(text.starts_with(head) && text.ends_with(tail), "cap {cap}: {capped}");
            assert_eq!(head.len() + omitted + tail.len(), text.len(), "cap {cap}");
            // At most 3 bytes are lost to a character boundary, and nothing else is wasted.
            assert!(capped.len() <= cap && head.len() + tail.len() + 3 >= cap - marker_len);
        }
    }

    #[test]
    fn collector_gives_what_cap_output_gives_for_the_whole_text() {
        let whole: Vec<u8> = (0..5000).flat_map(|i| format!("line {i}: é€\n").into_bytes()).collect();
        let text = format!("{}exit code: 0", String::from_utf8_lossy(&whole));
        for chunk in [1, 7, 100, 4096, whole.len()] {
            for limit in [40, 1000, 100_000] {
                let mut collector = Collector::new(limit);
                whole.chunks(chunk).for_each(|part| collector.push(part));
                let capped = collector.finish("exit code: 0", limit);
                assert_eq!(capped, cap_output(&text, limit), "chunk {chunk}, limit {limit}");
            }
        }
    }

    #[test]
    fn collector_decodes_a_split_character_and_notes_the_bytes_it_replaced() {
        let mut collector = Collector::new(100);
        collector.push(b"caf\xc3");
        collector.push(b"\xa9 \xff\xfe!");
        assert_eq!(
            collector.finish("exit code: 1", 100),
            "café \u{fffd}\u{fffd}!\n[note: 2 bytes were not valid UTF-8 and are shown as \u{fffd}]\nexit code: 1"
        );
        // A character cut off by the end of the output is one replacement for its 2 bytes.
        let mut collector = Collector::new(100);
        collector.push(b"x\xe2\x82");
        assert_eq!(
            collector.finish("exit code: 0", 100),
            "x\u{fffd}\n[note: 2 bytes were not valid UTF-8 and are shown as \u{fffd}]\nexit code: 0"
        );
        let mut collector = Collector::new(100);
        collector.push(b"\x80");
        assert_eq!(
            collector.finish("exit code: 0", 100),
            "\u{fffd}\n[note: 1 byte was not valid UTF-8 and is shown as \u{fffd}]\nexit code: 0"
        );
        // A valid U+FFFD in the output is not a replaced byte.
        let mut collector = Collector::new(100);
        collector.push("ok \u{fffd}".as_bytes());
        assert_eq!(collector.finish("exit code: 0", 100), "ok \u{fffd}\nexit code: 0");
        assert_eq!(Collector::new(100).finish("exit code: 0", 100), "exit code: 0");
    }

    #[test]
    fn the_invalid_byte_count_is_the_whole_stream_count_however_it_is_split() {
        let stream: Vec<u8> = [
            &b"ok \xf0\x9f\x98\x80 cut \xf0\x9f\x98 bad \xff\xfe\xfd lone \x80\xbf "[..],
            "中文 ".as_bytes(),
            b"\xed\xa0\x80 surrogate \xc0\xaf overlong \xe2\x82",
        ]
        .concat();
        let (_, whole) = decode_lossy(&stream);
        assert_eq!(whole, 3 + 3 + 2 + 3 + 2 + 2);
        for size in 1..=stream.len() {
            let mut count = InvalidUtf8::default();
            stream.chunks(size).for_each(|part| count.push(part));
            assert_eq!(count.total(), whole, "chunks of {size}");
        }
    }

    #[test]
    fn the_note_survives_the_cap_and_counts_bytes_left_out() {
        let mut bytes = vec![b'a'; 700];
        // In the middle the cap leaves out; the other invalid byte ends the output.
        bytes[150] = 0xff;
        bytes.push(0xfe);
        let mut collector = Collector::new(200);
        collector.push(&bytes);
        let note = "[note: 2 bytes were not valid UTF-8 and are shown as \u{fffd}]";
        let capped = collector.finish("exit code: 0", 200);
        assert!(capped.starts_with(&format!("{}\n[… ", "a".repeat(85))), "{capped}");
        assert!(capped.ends_with(&format!("aaa\u{fffd}\n{note}\nexit code: 0")), "{capped}");
        assert_eq!(capped.matches('\u{fffd}').count(), 2, "one shown, one in the note: {capped}");
        assert!(capped.len() <= 200);
    }

    #[test]
    fn decode_lossy_counts_what_it_replaced() {
        assert_eq!(decode_lossy(b"plain"), (Cow::Borrowed("plain"), 0));
        let (text, invalid) = decode_lossy(b"a\xff\xfe\xe2\x82b");
        assert_eq!((text.as_ref(), invalid), ("a\u{fffd}\u{fffd}\u{fffd}b", 4));
    }
}
