//! The event files read back: [`read_after`] and the line helpers the writer shares.
//!
//! Owns nothing on disk. A reader opens `events.jsonl` and its rotated siblings under a shared
//! `events/lock` (so a rotation cannot rename a file between listing and opening it) and reads
//! them after letting go; a last line still being written (no newline yet) is skipped.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{events_dir, EventLogError, Flock, KEPT_ROTATED};
use cicy_protocol::event::Event;

/// Events read back from the files.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// Every logged event with `seq > after`, sorted by seq, at most `limit` of them (the
    /// lowest ones).
    pub events: Vec<Event>,
    /// The lowest seq in any kept file; `None` when the files hold no event.
    pub oldest_kept: Option<u64>,
    /// Rotation has dropped an older file at some point, so events below `oldest_kept` may
    /// have existed and are gone.
    pub dropped: bool,
}

impl Replay {
    /// The seqs a reader that has seen everything up to `after` has lost for good
    /// (`from..=to`), or `None` when the files still reach back to `after + 1` or nothing was
    /// ever dropped. A gap may name seqs no event ever had (a crash skips the rest of a
    /// reserved range); it never leaves out one that did.
    pub fn gap(&self, after: u64) -> Option<(u64, u64)> {
        match self.oldest_kept {
            Some(oldest) if self.dropped && oldest > after.saturating_add(1) => Some((after + 1, oldest - 1)),
            _ => None,
        }
    }
}

/// Reads the events with `seq > after` from `<workspace>/.cicy/events/` (the rotated files and
/// `events.jsonl`), at most `limit`, lowest seqs first. The writer lease keeps seqs increasing
/// in file order; logs written before it may not be, so the lines are sorted here. A complete
/// line that is not an event is skipped with a warning naming the file and line (the writer
/// sets it aside when it next rebuilds `hwm`).
///
/// Errors: [`EventLogError::Io`] reading a file.
pub fn read_after(workspace: &Path, after: u64, limit: usize) -> Result<Replay, EventLogError> {
    let dir = events_dir(workspace);
    let mut oldest: Option<u64> = None;
    let mut picked: Vec<(u64, usize, usize)> = Vec::new();
    let mut texts: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    for (path, mut file) in open_snapshot(&dir)? {
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|source| EventLogError::Io { path: path.clone(), source })?;
        let file_ix = texts.len();
        for (line_no, start, end) in complete_lines(&bytes) {
            let Some(seq) = event_seq(&path, line_no, &bytes[start..end]) else { continue };
            oldest = Some(oldest.map_or(seq, |o| o.min(seq)));
            if seq > after {
                picked.push((seq, file_ix, start));
            }
        }
        texts.push((path, bytes));
    }
    picked.sort_unstable_by_key(|p| p.0);
    picked.truncate(limit);
    let mut events = Vec::with_capacity(picked.len());
    for (_, file_ix, start) in picked {
        let (path, bytes) = &texts[file_ix];
        let end = bytes[start..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |p| start + p);
        match serde_json::from_slice(&bytes[start..end]) {
            Ok(event) => events.push(event),
            Err(e) => {
                let line = bytes[..start].iter().filter(|&&b| b == b'\n').count() + 1;
                tracing::warn!("{}: line {line} is not an event ({e}); skipped", path.display());
            }
        }
    }
    Ok(Replay { events, oldest_kept: oldest, dropped: dir.join(DROPPED).exists() })
}

/// The seq just below the `n` newest logged events of seq `upto` or lower (0 when fewer are
/// logged): the starting point of a reader that wants the last `n` events whatever their seqs
/// (they may jump after a crash). `upto` is the newest seq when the reader asked, so events
/// logged between its asking and this read are not counted among the `n` (they follow them).
/// Reads the files newest first and stops at the first that completes the count.
///
/// Errors: [`EventLogError::Io`] reading a file.
pub fn seq_before_last(workspace: &Path, n: usize, upto: u64) -> Result<u64, EventLogError> {
    let mut seqs: Vec<u64> = Vec::new();
    for (path, mut file) in open_snapshot(&events_dir(workspace))?.into_iter().rev() {
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|source| EventLogError::Io { path: path.clone(), source })?;
        let logged = complete_lines(&bytes).filter_map(|(line_no, start, end)| event_seq(&path, line_no, &bytes[start..end]));
        seqs.extend(logged.filter(|&seq| seq <= upto));
        if seqs.len() >= n {
            break;
        }
    }
    seqs.sort_unstable_by(|a, b| b.cmp(a));
    Ok(match n.checked_sub(1).and_then(|i| seqs.get(i)) {
        Some(&seq) => seq - 1,
        None if n == 0 => seqs.first().copied().unwrap_or(0),
        None => 0,
    })
}

/// The seq of a line of `path`, or `None` (with a warning naming the file and line) when it
/// is not an event: one bad line must not hide the others.
fn event_seq(path: &Path, line_no: usize, line: &[u8]) -> Option<u64> {
    match line_seq(line) {
        Ok(seq) => Some(seq),
        Err(e) => {
            tracing::warn!("{}: line {line_no} is not an event ({e}); skipped", path.display());
            None
        }
    }
}

/// The kept files, oldest first, opened under a shared lock; none when the folder is absent.
fn open_snapshot(dir: &Path) -> Result<Vec<(PathBuf, fs::File)>, EventLogError> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let lock_path = dir.join("lock");
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|source| EventLogError::Io { path: lock_path.clone(), source })?;
    let held = Flock::take(&lock, libc::LOCK_SH).map_err(|source| EventLogError::Io { path: lock_path, source })?;
    let mut out = Vec::new();
    for path in files_oldest_first(dir) {
        match fs::File::open(&path) {
            Ok(f) => out.push((path, f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(EventLogError::Io { path, source }),
        }
    }
    drop(held);
    Ok(out)
}

/// Marker file: rotation has dropped a file at least once.
pub(super) const DROPPED: &str = "dropped";

/// `events.jsonl` (`n == 0`) or `events.<n>.jsonl`.
pub(super) fn log_file(dir: &Path, n: usize) -> PathBuf {
    if n == 0 {
        dir.join("events.jsonl")
    } else {
        dir.join(format!("events.{n}.jsonl"))
    }
}

/// The kept files that exist, oldest first (`events.4.jsonl` … `events.jsonl`).
pub(super) fn files_oldest_first(dir: &Path) -> Vec<PathBuf> {
    (0..=KEPT_ROTATED).rev().map(|n| log_file(dir, n)).filter(|p| p.exists()).collect()
}

/// `(1-based line number, start, end)` of every newline-terminated line; `end` excludes the
/// newline. A last line without one is left out.
fn complete_lines(bytes: &[u8]) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    let mut start = 0;
    bytes.iter().enumerate().filter(|(_, &b)| b == b'\n').map(|(i, _)| i).enumerate().map(move |(n, end)| {
        let s = start;
        start = end + 1;
        (n + 1, s, end)
    })
}

#[derive(Deserialize)]
struct SeqOnly {
    seq: u64,
}

/// The seq of one line. Lines this module writes start `{"seq":N,`, read without parsing the
/// rest (a replay reads every line of up to 40 MiB); anything else is parsed in full.
pub(super) fn line_seq(line: &[u8]) -> Result<u64, serde_json::Error> {
    const PREFIX: &[u8] = b"{\"seq\":";
    if let Some(rest) = line.strip_prefix(PREFIX) {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if (1..=19).contains(&digits) && rest.get(digits) == Some(&b',') {
            let mut n: u64 = 0;
            for &b in &rest[..digits] {
                n = n * 10 + u64::from(b - b'0');
            }
            return Ok(n);
        }
    }
    serde_json::from_slice::<SeqOnly>(line).map(|s| s.seq)
}

/// Cuts a torn tail off `path`: bytes after the last newline, then the last line if it is not
/// an event. Returns the seq of the last line left (0 when the file is empty or absent). The
/// caller holds the lock, so no writer is mid-line.
pub(super) fn cut_torn_tail(path: &Path) -> Result<u64, EventLogError> {
    let io = |source| EventLogError::Io { path: path.to_path_buf(), source };
    let mut file = match fs::OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(e)),
    };
    let len = file.metadata().map_err(io)?.len();
    let (mut keep, last) = last_line(&mut file, len).map_err(io)?;
    let mut seq = 0;
    if let Some(line) = last {
        match serde_json::from_slice::<Event>(&line) {
            Ok(ev) => seq = ev.seq,
            Err(_) => keep -= line.len() as u64 + 1,
        }
    }
    if keep < len {
        file.set_len(keep).map_err(io)?;
        file.sync_all().map_err(io)?;
        if seq == 0 && keep > 0 {
            // The cut line was unparsable: the one before it is now the last.
            let (_, prev) = last_line(&mut file, keep).map_err(io)?;
            seq = prev.and_then(|l| line_seq(&l).ok()).unwrap_or(0);
        }
    }
    Ok(seq)
}

/// The seq of the newest logged event: the last line of the newest non-empty file.
pub(super) fn last_logged_in(dir: &Path) -> Result<u64, EventLogError> {
    for n in 0..=KEPT_ROTATED {
        let path = log_file(dir, n);
        let mut file = match fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(source) => return Err(EventLogError::Io { path, source }),
        };
        let io = |source| EventLogError::Io { path: path.clone(), source };
        let len = file.metadata().map_err(io)?.len();
        if let (_, Some(line)) = last_line(&mut file, len).map_err(io)? {
            return line_seq(&line).map_err(|source| EventLogError::Corrupt { path: path.clone(), line: 0, source });
        }
    }
    Ok(0)
}

/// The highest seq in every kept file (used when `hwm` is missing or unreadable). A complete
/// line that is not an event is set aside: the file as it was is kept as
/// `<name>.corrupt-<unix>`, the file is rewritten (atomically) without that line, and a
/// warning names both. The caller holds the lock.
pub(super) fn max_logged_setting_aside(dir: &Path) -> Result<u64, EventLogError> {
    let mut max = 0;
    for path in files_oldest_first(dir) {
        let io = |source| EventLogError::Io { path: path.clone(), source };
        let bytes = fs::read(&path).map_err(io)?;
        let (mut kept, mut bad) = (Vec::with_capacity(bytes.len()), Vec::new());
        for (line_no, start, end) in complete_lines(&bytes) {
            match serde_json::from_slice::<Event>(&bytes[start..end]) {
                Ok(ev) => {
                    max = max.max(ev.seq);
                    kept.extend_from_slice(&bytes[start..=end]);
                }
                Err(e) => bad.push(format!("line {line_no} ({e})")),
            }
        }
        if bad.is_empty() {
            continue;
        }
        let aside = path.with_file_name(format!(
            "{}.corrupt-{}",
            path.file_name().unwrap_or_default().to_string_lossy(),
            crate::fsutil::unix_now()
        ));
        fs::copy(&path, &aside).map_err(io)?;
        crate::fsutil::write_atomic(&path, &kept).map_err(io)?;
        tracing::warn!("{}: {} not an event, left out; the file as it was is kept as {}", path.display(), bad.join(", "), aside.display());
    }
    Ok(max)
}

/// `(length up to and including the last newline, the last complete line)` of the first
/// `len` bytes of `file`, read backwards in blocks (a line may be far longer than a block).
fn last_line(file: &mut fs::File, len: u64) -> io::Result<(u64, Option<Vec<u8>>)> {
    const BLOCK: u64 = 64 * 1024;
    let mut tail: Vec<u8> = Vec::new();
    let mut pos = len;
    // Newline positions (absolute) of the last two newlines found so far.
    let mut newlines: Vec<u64> = Vec::new();
    while pos > 0 && newlines.len() < 2 {
        let from = pos.saturating_sub(BLOCK);
        let mut block = vec![0u8; (pos - from) as usize];
        file.seek(SeekFrom::Start(from))?;
        file.read_exact(&mut block)?;
        for (i, &b) in block.iter().enumerate().rev() {
            if b == b'\n' && newlines.len() < 2 {
                newlines.push(from + i as u64);
            }
        }
        block.extend_from_slice(&tail);
        tail = block;
        pos = from;
    }
    let Some(&last_nl) = newlines.first() else { return Ok((0, None)) };
    let line_start = newlines.get(1).map_or(0, |p| p + 1);
    let rel = |abs: u64| (abs - pos) as usize;
    Ok((last_nl + 1, Some(tail[rel(line_start)..rel(last_nl)].to_vec())))
}
