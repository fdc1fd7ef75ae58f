//! The persistent per-agent event log (DESIGN.md §9 "Event log").
//!
//! Owns `<workspace>/.cicy/events/`: `events.jsonl` (one [`Event`] per line, exactly as
//! `serde_json::to_string` writes it), its rotated siblings `events.1.jsonl` … `events.4.jsonl`,
//! `hwm` (the highest seq any process has reserved, decimal text), `lock` (an `flock(2)` taken
//! briefly by every append, rotation and reservation) and `dropped` (a marker: rotation has
//! dropped a file). [`EventLog`] is one process's writer; [`read_after`] reads back;
//! [`AgentEvents`] (in `bus`) is the in-memory side: numbering, ring, subscribers and the writer
//! task; [`GlobalFeed`] (in `global`) merges every agent's events for `GET /api/events`. It
//! knows nothing of turns, HTTP or the terminal.
//!
//! Sequence numbers never repeat, even across `kill -9`: a process reserves ranges of
//! [`RESERVE_CHUNK`] by writing `hwm` before it uses any seq of the range, so a restart takes
//! its first range above every seq ever handed out.

mod bus;
mod files;
pub mod global;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::RangeInclusive;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub use bus::{AgentEvents, Subscription};
pub use files::{read_after, Replay};
pub use global::{GlobalFeed, GlobalSubscription};

/// The seq of the newest event logged for the agent of `workspace` (0 when none), without
/// opening a writer (which would reserve seqs): what a status row shows before the agent's
/// log is opened. Errors: [`EventLogError::Io`] naming the unreadable file.
pub fn last_logged(workspace: &Path) -> Result<u64, EventLogError> {
    files::last_logged_in(&events_dir(workspace))
}

use crate::event::Event;
use files::{cut_torn_tail, last_logged_in, line_seq, log_file, max_logged_in, DROPPED};

/// DESIGN.md §9: `events.jsonl` is rotated when it reaches 8 MiB.
pub const ROTATE_BYTES: u64 = 8 * 1024 * 1024;
/// DESIGN.md §9: 4 rotated files are kept (`events.1.jsonl` newest … `events.4.jsonl` oldest).
pub const KEPT_ROTATED: usize = 4;
/// DESIGN.md §9: `hwm` reserves seqs 1024 ahead.
pub const RESERVE_CHUNK: u64 = 1024;

/// Errors of the event log; every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum EventLogError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// A complete line is not an event (`line` is 1-based; 0 = the last line).
    #[error("{path}: line {line}: {source}")]
    Corrupt { path: PathBuf, line: usize, source: serde_json::Error },
    #[error("{path}: cannot encode event {seq}: {source}")]
    Encode { path: PathBuf, seq: u64, source: serde_json::Error },
    /// `hwm` does not hold a decimal u64.
    #[error("{path}: not a sequence number: {text:?}")]
    BadHwm { path: PathBuf, text: String },
    /// The background writer of [`AgentEvents`] failed earlier (the events of that batch are
    /// in the ring and were sent to subscribers, but not on disk).
    #[error("{path}: the event writer failed: {message}")]
    Writer { path: PathBuf, message: String },
}

/// `<workspace>/.cicy/events`.
pub fn events_dir(workspace: &Path) -> PathBuf {
    workspace.join(".cicy").join("events")
}

/// One process's writer of `<workspace>/.cicy/events/` (blocking I/O; async callers run it via
/// `crate::fsutil::blocking` or `spawn_blocking`).
#[derive(Debug)]
pub struct EventLog {
    dir: PathBuf,
    rotate_bytes: u64,
    lock: File,
    /// `events.jsonl` open for appending, with its inode.
    out: Option<(File, u64)>,
    /// `(inode, length)` of `events.jsonl` as this process last left it; `None` = absent.
    expected: Option<(u64, u64)>,
    /// The highest seq this process wrote to `hwm`.
    reserved_to: u64,
    last_logged: u64,
    /// Highest seq another writer appended or reserved since `take_foreign` was last called.
    foreign: Option<u64>,
}

impl EventLog {
    /// Opens the log of the agent at `workspace`, creating the folder. Under the lock it cuts a
    /// torn last line of `events.jsonl` (no trailing newline, or not an event) and, when `hwm`
    /// is missing or unreadable (moved aside as `hwm.corrupt-<unix>`), rebuilds it from the
    /// highest logged seq. `agent_id` is not stored: every event carries its own.
    pub fn open(workspace: &Path, agent_id: &str) -> Result<EventLog, EventLogError> {
        Self::open_with(workspace, agent_id, ROTATE_BYTES)
    }

    /// [`EventLog::open`] with another rotation size (tests use small files).
    pub fn open_with(workspace: &Path, _agent_id: &str, rotate_bytes: u64) -> Result<EventLog, EventLogError> {
        let dir = events_dir(workspace);
        fs::create_dir_all(&dir).map_err(|source| EventLogError::Io { path: dir.clone(), source })?;
        let lock_path = dir.join("lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|source| EventLogError::Io { path: lock_path, source })?;
        let mut log = EventLog {
            dir,
            rotate_bytes: rotate_bytes.max(1),
            lock,
            out: None,
            expected: None,
            reserved_to: 0,
            last_logged: 0,
            foreign: None,
        };
        let held = log.flock()?;
        let current = log_file(&log.dir, 0);
        let cut = cut_torn_tail(&current)?;
        log.last_logged = if cut > 0 { cut } else { last_logged_in(&log.dir)? };
        log.expected = stat(&current)?;
        log.recover_hwm()?;
        drop(held);
        Ok(log)
    }

    /// The seq of the last line logged when this log was opened (0 when none).
    pub fn last_logged(&self) -> u64 {
        self.last_logged
    }

    /// Reserves the next [`RESERVE_CHUNK`] seqs: under the lock, reads `hwm` and writes
    /// `start + 1023` before returning `start..=start + 1023`, where
    /// `start = max(hwm, after) + 1`. Pass the highest seq the caller knows of (0 if none).
    pub fn reserve(&mut self, after: u64) -> Result<RangeInclusive<u64>, EventLogError> {
        let _held = self.flock()?;
        // Saturating: a foreign line claiming a seq near u64::MAX must not wrap the numbering.
        let start = self.read_hwm()?.max(after).max(self.last_logged).saturating_add(1);
        let end = start.saturating_add(RESERVE_CHUNK - 1);
        self.write_hwm(end)?;
        Ok(start..=end)
    }

    /// On a clean shutdown, gives back the unused rest of this process's reservation: `hwm`
    /// becomes `last_used` if no other process reserved meanwhile, so the next run continues
    /// at `last_used + 1`. `last_used` must be at least every seq handed out.
    pub fn release(&mut self, last_used: u64) -> Result<(), EventLogError> {
        let _held = self.flock()?;
        if self.read_hwm()? == self.reserved_to && last_used < self.reserved_to {
            self.write_hwm(last_used)?;
        }
        Ok(())
    }

    /// Appends `events` (seqs already assigned) to `events.jsonl` under the lock, rotating
    /// before a line would take the file past the rotation size (a file holds at least one
    /// line). Not fsynced: see [`EventLog::sync`]. Notices another writer: when `hwm` or
    /// `events.jsonl` changed since this process's last write, [`EventLog::take_foreign`]
    /// reports it.
    pub fn append(&mut self, events: &[Event]) -> Result<(), EventLogError> {
        let current = log_file(&self.dir, 0);
        let mut lines = Vec::with_capacity(events.len());
        for ev in events {
            let mut line = serde_json::to_vec(ev)
                .map_err(|source| EventLogError::Encode { path: current.clone(), seq: ev.seq, source })?;
            line.push(b'\n');
            lines.push(line);
        }
        let _held = self.flock()?;
        self.notice_foreign(&current)?;
        let mut len = self.expected.map_or(0, |e| e.1);
        let mut buf: Vec<u8> = Vec::new();
        for line in lines {
            if len > 0 && len + line.len() as u64 > self.rotate_bytes {
                self.write_out(&current, &buf)?;
                buf.clear();
                self.rotate()?;
                len = 0;
            }
            len += line.len() as u64;
            buf.extend_from_slice(&line);
        }
        self.write_out(&current, &buf)
    }

    /// fsyncs `events.jsonl` (DESIGN.md §9: at `turn_ended`).
    pub fn sync(&mut self) -> Result<(), EventLogError> {
        match &self.out {
            Some((file, _)) => {
                file.sync_data().map_err(|source| EventLogError::Io { path: log_file(&self.dir, 0), source })
            }
            None => Ok(()),
        }
    }

    /// `Some(highest foreign seq)` (0 when only a reservation or a replaced file was seen) if
    /// another writer appended or reserved since the last call; clears it.
    pub fn take_foreign(&mut self) -> Option<u64> {
        self.foreign.take()
    }

    fn notice_foreign(&mut self, current: &Path) -> Result<(), EventLogError> {
        let mut foreign: Option<u64> = None;
        if self.read_hwm()? > self.reserved_to {
            foreign = Some(0);
        }
        let now = stat(current)?;
        if now != self.expected {
            let mut max = 0;
            if let (Some((ino, old_len)), Some((new_ino, new_len))) = (self.expected, now) {
                if ino == new_ino && new_len > old_len {
                    max = max_seq_from(current, old_len)?;
                }
            }
            foreign = Some(foreign.unwrap_or(0).max(max));
            self.expected = now;
        }
        if let Some(f) = foreign {
            self.foreign = Some(self.foreign.unwrap_or(0).max(f));
        }
        Ok(())
    }

    fn write_out(&mut self, current: &Path, buf: &[u8]) -> Result<(), EventLogError> {
        if buf.is_empty() {
            return Ok(());
        }
        let io = |source| EventLogError::Io { path: current.to_path_buf(), source };
        let ino = self.expected.map(|e| e.0);
        if self.out.as_ref().map(|o| o.1) != ino || ino.is_none() {
            let file = OpenOptions::new().create(true).append(true).open(current).map_err(io)?;
            let ino = file.metadata().map_err(io)?.ino();
            self.out = Some((file, ino));
        }
        let Some((file, ino)) = &mut self.out else { return Ok(()) };
        file.write_all(buf).map_err(io)?;
        let len = self.expected.filter(|e| e.0 == *ino).map_or(0, |e| e.1) + buf.len() as u64;
        self.expected = Some((*ino, len));
        Ok(())
    }

    /// `events.jsonl` → `events.1.jsonl` → … ; the oldest beyond [`KEPT_ROTATED`] is dropped.
    fn rotate(&mut self) -> Result<(), EventLogError> {
        let io = |path: PathBuf| move |source| EventLogError::Io { path, source };
        // `sync` only reaches the current file, so a rotated one is made durable here.
        if let Some((file, _)) = &self.out {
            file.sync_data().map_err(io(log_file(&self.dir, 0)))?;
        }
        let oldest = log_file(&self.dir, KEPT_ROTATED);
        if oldest.exists() {
            fs::remove_file(&oldest).map_err(io(oldest.clone()))?;
            let marker = self.dir.join(DROPPED);
            File::create(&marker).map_err(io(marker))?;
        }
        for n in (0..KEPT_ROTATED).rev() {
            let from = log_file(&self.dir, n);
            if from.exists() {
                fs::rename(&from, log_file(&self.dir, n + 1)).map_err(io(from))?;
            }
        }
        crate::fsutil::sync_dir(&self.dir).map_err(io(self.dir.clone()))?;
        self.out = None;
        self.expected = None;
        Ok(())
    }

    fn hwm_path(&self) -> PathBuf {
        self.dir.join("hwm")
    }

    fn read_hwm(&self) -> Result<u64, EventLogError> {
        let path = self.hwm_path();
        match fs::read_to_string(&path) {
            Ok(text) => text.trim().parse().map_err(|_| EventLogError::BadHwm { path, text }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(source) => Err(EventLogError::Io { path, source }),
        }
    }

    /// Takes `hwm` as this process's starting point; when it is missing, unreadable (moved
    /// aside) or below the last logged seq, rebuilds it from the highest logged seq.
    fn recover_hwm(&mut self) -> Result<(), EventLogError> {
        let path = self.hwm_path();
        let on_disk = match self.read_hwm() {
            Ok(n) if path.exists() => Some(n),
            Ok(_) => None,
            Err(EventLogError::BadHwm { .. }) => {
                crate::fsutil::move_aside(&path).map_err(|source| EventLogError::Io { path: path.clone(), source })?;
                None
            }
            Err(e) => return Err(e),
        };
        match on_disk {
            Some(n) if n >= self.last_logged => {
                self.reserved_to = n;
                Ok(())
            }
            _ => {
                let max = max_logged_in(&self.dir)?.max(self.last_logged);
                self.write_hwm(max)
            }
        }
    }

    fn write_hwm(&mut self, n: u64) -> Result<(), EventLogError> {
        let path = self.hwm_path();
        crate::fsutil::write_atomic(&path, n.to_string().as_bytes())
            .map_err(|source| EventLogError::Io { path, source })?;
        self.reserved_to = n;
        Ok(())
    }

    fn flock(&self) -> Result<Flock, EventLogError> {
        Flock::take(&self.lock, libc::LOCK_EX).map_err(|source| EventLogError::Io { path: self.dir.join("lock"), source })
    }
}

/// A held `events/lock` (exclusive for writers, shared for readers); unlocked on drop. Holds
/// the descriptor, not a borrow, so the log can be changed while it is held; it never outlives
/// the function that owns the file.
struct Flock(std::os::fd::RawFd);

impl Flock {
    /// Waits for the lock (`op`: `LOCK_EX` or `LOCK_SH`).
    fn take(file: &File, op: libc::c_int) -> io::Result<Flock> {
        loop {
            // SAFETY: flock only reads the descriptor, which `file` keeps open for the call.
            if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
                return Ok(Flock(file.as_raw_fd()));
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINTR) {
                return Err(err);
            }
        }
    }
}

impl Drop for Flock {
    fn drop(&mut self) {
        // SAFETY: the descriptor belongs to the file the holder owns for longer than this
        // guard, so it is open; an unlock failure leaves the lock to the close.
        unsafe { libc::flock(self.0, libc::LOCK_UN) };
    }
}

/// `(inode, length)` of `path`, `None` when absent.
fn stat(path: &Path) -> Result<Option<(u64, u64)>, EventLogError> {
    match fs::metadata(path) {
        Ok(m) => Ok(Some((m.ino(), m.len()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(EventLogError::Io { path: path.to_path_buf(), source }),
    }
}

/// The highest seq among the complete lines of `path` from byte `from` on.
fn max_seq_from(path: &Path, from: u64) -> Result<u64, EventLogError> {
    let bytes = fs::read(path).map_err(|source| EventLogError::Io { path: path.to_path_buf(), source })?;
    let tail = bytes.get(from as usize..).unwrap_or_default();
    let mut max = 0;
    for line in tail.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        if let Ok(seq) = line_seq(line) {
            max = max.max(seq);
        }
    }
    Ok(max)
}

#[cfg(test)]
mod tests;
