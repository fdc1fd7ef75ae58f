//! `read_file {path, offset=1, limit}` (docs/design.md §12, CMDC A7): a window of a text file as
//! numbered lines.
//!
//! Owns opening a file for reading beneath the workspace ([`open_regular`], shared with `grep`
//! and `edit_file`), the `N|line` format and the caps. The file is streamed line by line, so a
//! huge file costs only the lines up to the window's end. Writes nothing.

use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use cap_std::fs::{File, OpenOptions, OpenOptionsExt};
use serde_json::Value;

use super::sandbox::{FileError, Workspace};
use super::{required_str, whole_number, CallError, OUTPUT_CAP_BYTES};
use crate::output::{decode_lossy, invalid_utf8_note};

/// Most lines one call shows (CMDC: 2000).
pub const LINE_CAP: u64 = 2000;

/// A file whose first this many bytes hold a NUL is binary and not shown.
const BINARY_SNIFF_BYTES: usize = 8192;

/// Opens `rel` for reading beneath the workspace, following symlinks that stay inside. Opens
/// with `O_NONBLOCK` so that a FIFO cannot hang the call; anything but a regular file is an
/// error ([`FileError::IsDirectory`], [`FileError::NotRegular`]).
pub fn open_regular(ws: &Workspace, rel: &Path, shown: &str) -> Result<File, FileError> {
    let file = ws
        .dir()
        .open_with(super::sandbox::dot(rel), OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK))
        .map_err(|e| FileError::from_io(e, shown))?;
    let meta = file.metadata().map_err(|e| FileError::from_io(e, shown))?;
    if meta.is_dir() {
        return Err(FileError::IsDirectory(shown.to_owned()));
    }
    if !meta.is_file() {
        return Err(FileError::NotRegular(shown.to_owned()));
    }
    Ok(file)
}

/// Lines `offset..` of the file, each as `N|text` (N the plain 1-based line number, text without
/// its `\n` or `\r\n`), joined by `\n`, no trailing newline. The window ends at `limit` lines,
/// at [`LINE_CAP`] lines, or before the line that would take the text over
/// [`OUTPUT_CAP_BYTES`]; if the file goes on, a last line says so and names the offset to
/// continue from, e.g. `[truncated at 2000 lines; continue with offset=2001]`. A first line
/// longer than the byte cap is cut and marked. A note line follows when bytes were not UTF-8.
/// An empty file gives `(empty file)`. Errors: bad input, a path out of bounds, not found, a
/// directory, a binary file (NUL in the first 8 KiB), `offset` past the last line.
pub fn run(ws: &Workspace, input: &Value) -> Result<String, CallError> {
    let shown = required_str(input, "path")?;
    let offset = whole_number(input, "offset", 1, 1)?;
    let limit = whole_number(input, "limit", 1, LINE_CAP)?.min(LINE_CAP);
    let rel = ws.resolve(shown)?;
    let file = open_regular(ws, &rel, shown)?;
    let mut reader = BufReader::new(file.into_std());
    let io_err = |e| CallError::File(FileError::from_io(e, shown));
    if reader.fill_buf().map_err(io_err)?.iter().take(BINARY_SNIFF_BYTES).any(|b| *b == 0) {
        return Err(CallError::Message(format!("error: {shown} is a binary file; read_file shows text")));
    }
    let mut window = Window { text: String::new(), shown: 0, invalid: 0 };
    let mut line = Vec::new();
    let mut number = 0u64;
    let stop = loop {
        // Lines before the window are counted, not kept; no line keeps more than the cap.
        let keep = if number + 1 < offset { 0 } else { OUTPUT_CAP_BYTES };
        let Some(length) = next_line(&mut reader, &mut line, keep).map_err(io_err)? else {
            break None;
        };
        number += 1;
        if number < offset {
            continue;
        }
        if window.shown == limit {
            break Some(if limit == LINE_CAP { format!("truncated at {LINE_CAP} lines") } else { "more lines follow".to_owned() });
        }
        if !window.push(number, trim_end(&line), length) {
            break Some(format!("truncated at {} KiB", OUTPUT_CAP_BYTES / 1024));
        }
    };
    if number == 0 {
        return Ok("(empty file)".to_owned());
    }
    if number < offset {
        return Err(CallError::Message(format!("error: offset {offset} is past the end of {shown} ({number} lines)")));
    }
    if let Some(reason) = stop {
        window.text.push_str(&format!("\n[{reason}; continue with offset={}]", offset + window.shown));
    }
    if let Some(note) = invalid_utf8_note(window.invalid) {
        window.text.push('\n');
        window.text.push_str(&note);
    }
    Ok(window.text)
}

/// The lines shown so far.
struct Window {
    text: String,
    shown: u64,
    /// Bytes replaced by U+FFFD in the shown lines.
    invalid: usize,
}

impl Window {
    /// Adds line `number` (`bytes` kept of its `length`) unless it would take the text over the
    /// byte cap (leaving room for the continue line); the first line is then cut instead.
    /// Returns whether the line was added.
    fn push(&mut self, number: u64, bytes: &[u8], length: usize) -> bool {
        const ROOM_FOR_HINT: usize = 100;
        let (text, invalid) = decode_lossy(bytes);
        let entry = format!("{}{number}|{text}", if self.shown == 0 { "" } else { "\n" });
        let budget = OUTPUT_CAP_BYTES - ROOM_FOR_HINT;
        if self.text.len() + entry.len() > budget {
            if self.shown > 0 {
                return false;
            }
            let marker = format!(" [line cut: {length} bytes]");
            let mut end = budget - marker.len();
            while !entry.is_char_boundary(end) {
                end -= 1;
            }
            self.text.push_str(&entry[..end]);
            self.text.push_str(&marker);
        } else {
            self.text.push_str(&entry);
        }
        self.shown += 1;
        self.invalid += invalid;
        true
    }
}

/// Reads one line, through its `\n`, keeping at most `keep` bytes of it in `line` (cleared
/// first), so that a huge line costs no more memory than the cap. Returns the line's whole
/// length in bytes without its `\n`; `None` at the end of the file.
fn next_line(reader: &mut impl BufRead, line: &mut Vec<u8>, keep: usize) -> io::Result<Option<usize>> {
    line.clear();
    let mut length = 0;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok((length > 0).then_some(length));
        }
        let (used, ended) = match chunk.iter().position(|b| *b == b'\n') {
            Some(at) => (at + 1, true),
            None => (chunk.len(), false),
        };
        let room = keep.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..used.min(room)]);
        reader.consume(used);
        length += used;
        if ended {
            return Ok(Some(length - 1));
        }
    }
}

/// `line` without its `\n` or `\r\n`.
pub fn trim_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The whole file `rel` as bytes, opened as [`open_regular`] does.
pub fn read_all(ws: &Workspace, rel: &Path, shown: &str) -> Result<Vec<u8>, FileError> {
    let mut bytes = Vec::new();
    open_regular(ws, rel, shown)?.read_to_end(&mut bytes).map_err(|e| FileError::from_io(e, shown))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(dir: &Path, input: Value) -> Result<String, String> {
        run(&Workspace::open(dir).unwrap(), &input).map_err(|e| e.to_string())
    }

    #[test]
    fn lines_are_numbered_windowed_and_continued() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "a\r\nb\nc\nd").unwrap();
        assert_eq!(read(dir.path(), json!({"path": "f"})).unwrap(), "1|a\n2|b\n3|c\n4|d");
        assert_eq!(
            read(dir.path(), json!({"path": "f", "offset": 2, "limit": 2})).unwrap(),
            "2|b\n3|c\n[more lines follow; continue with offset=4]"
        );
        assert_eq!(read(dir.path(), json!({"path": "f", "offset": 4, "limit": 1})).unwrap(), "4|d");
        assert_eq!(read(dir.path(), json!({"path": "f", "offset": 5})).unwrap_err(), "error: offset 5 is past the end of f (4 lines)");
        std::fs::write(dir.path().join("e"), "").unwrap();
        assert_eq!(read(dir.path(), json!({"path": "e"})).unwrap(), "(empty file)");
        std::fs::write(dir.path().join("bad"), b"ok\n\xff\xfe!\n").unwrap();
        assert_eq!(
            read(dir.path(), json!({"path": "bad"})).unwrap(),
            "1|ok\n2|\u{fffd}\u{fffd}!\n[note: 2 bytes were not valid UTF-8 and are shown as \u{fffd}]"
        );
        std::fs::write(dir.path().join("bin"), b"ELF\0\x01").unwrap();
        assert_eq!(read(dir.path(), json!({"path": "bin"})).unwrap_err(), "error: bin is a binary file; read_file shows text");
        assert_eq!(read(dir.path(), json!({"path": "."})).unwrap_err(), "error: . is a directory");
        assert_eq!(read(dir.path(), json!({"path": "nope"})).unwrap_err(), "error: not found: nope");
        assert_eq!(read(dir.path(), json!({"path": "f/x"})).unwrap_err(), "error: f/x is not a directory");
    }

    #[test]
    fn the_line_and_byte_caps_name_the_next_offset() {
        let dir = tempfile::tempdir().unwrap();
        let many: String = (1..=2001).map(|n| format!("l{n}\n")).collect();
        std::fs::write(dir.path().join("many"), many).unwrap();
        let out = read(dir.path(), json!({"path": "many", "limit": 5000})).unwrap();
        assert!(out.starts_with("1|l1\n2|l2\n"));
        assert!(out.ends_with("\n2000|l2000\n[truncated at 2000 lines; continue with offset=2001]"), "{}", &out[out.len() - 80..]);
        assert_eq!(read(dir.path(), json!({"path": "many", "offset": 2001})).unwrap(), "2001|l2001");

        // 100-byte lines: `N|` plus 100 bytes each; the window stops before 50 KiB.
        let wide: String = (0..1000).map(|_| format!("{}\n", "x".repeat(100))).collect();
        std::fs::write(dir.path().join("wide"), wide).unwrap();
        let out = read(dir.path(), json!({"path": "wide"})).unwrap();
        let shown = out.lines().filter(|l| l.contains('|')).count();
        assert!(out.len() <= OUTPUT_CAP_BYTES, "{}", out.len());
        assert!(out.ends_with(&format!("\n[truncated at 50 KiB; continue with offset={}]", shown + 1)));
        // 9 lines of 102/103 bytes, 90 of 104, then 105 each: 487 lines fit in 51100 bytes.
        assert_eq!(shown, 487);

        std::fs::write(dir.path().join("one"), format!("{}\nnext\n", "y".repeat(200_000))).unwrap();
        let out = read(dir.path(), json!({"path": "one"})).unwrap();
        assert!(out.starts_with("1|yyy"));
        assert!(out.ends_with("y [line cut: 200000 bytes]\n[truncated at 50 KiB; continue with offset=2]"));
        assert_eq!(read(dir.path(), json!({"path": "one", "offset": 2})).unwrap(), "2|next");
    }
}
