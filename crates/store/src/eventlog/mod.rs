//! The persistent per-agent event log (docs/design.md §9 "Event log").
//!
//! Owns `<workspace>/.cicy/events/`: `events.jsonl` (one [`Event`] per line, exactly as
//! `serde_json::to_string` writes it), its rotated siblings `events.1.jsonl` … `events.4.jsonl`,
//! `hwm` (the highest seq any process has reserved, decimal text), `writer` (the writer lease:
//! an `flock(2)` held by the one process numbering and appending, and a marker of where its
//! last holder stopped; see `lease`), `lock` (an `flock(2)` taken briefly by every append,
//! rotation and reader) and `dropped` (a marker: rotation has dropped a file). [`EventLog`] is
//! one process's writer; [`read_after`] reads back; [`AgentEvents`] (in `bus`) is the in-memory
//! side: numbering, ring, subscribers and the writer task; [`GlobalFeed`] (in `global`) merges
//! every agent's events for `GET /api/events`. It knows nothing of turns, HTTP or the terminal.
//!
//! Sequence numbers never repeat and increase strictly in file order, across processes and
//! `kill -9`: only the lease holder numbers, and it lets the lease go only after every seq it
//! handed out is appended, so the next holder goes on above them. Ranges of [`RESERVE_CHUNK`]
//! are written to `hwm` before any seq of the range is used, so a holder that died holding the
//! lease (or a power loss) is followed by a start above every seq ever handed out: seqs may
//! jump after a crash. Most turns write no `hwm` at all.

mod bus;
mod files;
pub mod global;
mod lease;
mod published;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::RangeInclusive;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub use bus::{AgentEvents, Subscription};
pub use files::{read_after, seq_before_last, Replay};
pub use global::{GlobalFeed, GlobalSubscription};
pub use published::Published;

/// The seq of the newest event logged for the agent of `workspace` (0 when none), without
/// opening a writer (which would reserve seqs): what a status row shows before the agent's
/// log is opened. Errors: [`EventLogError::Io`] naming the unreadable file.
pub fn last_logged(workspace: &Path) -> Result<u64, EventLogError> {
    files::last_logged_in(&events_dir(workspace))
}

use cicy_protocol::event::Event;
use files::{cut_torn_tail, last_logged_in, log_file, max_logged_setting_aside, DROPPED};

/// docs/design.md §9: `events.jsonl` is rotated when it reaches 8 MiB.
pub const ROTATE_BYTES: u64 = 8 * 1024 * 1024;
/// docs/design.md §9: 4 rotated files are kept (`events.1.jsonl` newest … `events.4.jsonl` oldest).
pub const KEPT_ROTATED: usize = 4;
/// docs/design.md §9: `hwm` reserves seqs 1024 ahead.
pub const RESERVE_CHUNK: u64 = 1024;

/// The newest logged seq, for a writer (under the lock): when the last line of the newest file
/// is not an event (the open cut one such line, another was before it), every such line is set
/// aside ([`files::max_logged_setting_aside`]) and the highest seq left is the answer, so a
/// hand-broken tail never stops the agent.
fn last_logged_setting_aside(dir: &Path) -> Result<u64, EventLogError> {
    match last_logged_in(dir) {
        Err(EventLogError::Corrupt { .. }) => max_logged_setting_aside(dir),
        other => other,
    }
}

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
/// `crate::fsutil::blocking` or `spawn_blocking`). It numbers and appends only while it holds
/// the writer lease ([`EventLog::lease`]).
#[derive(Debug)]
pub struct EventLog {
    dir: PathBuf,
    rotate_bytes: u64,
    lock: File,
    /// The held lease; declared before `writer` so it is unlocked before the file closes.
    held: Option<Flock>,
    writer: File,
    /// `events.jsonl` open for appending, with its inode.
    out: Option<(File, u64)>,
    /// Appended since the last fsync.
    dirty: bool,
    /// The length `events.jsonl` had after this process's open or last append.
    appended_to: u64,
    /// The highest seq this process read from or wrote to `hwm` under the lease.
    reserved_to: u64,
    last_logged: u64,
}

impl EventLog {
    /// Opens the log of the agent at `workspace`, creating the folder. Under the lock it cuts a
    /// torn last line of `events.jsonl` (no trailing newline, or not an event). `agent_id` is
    /// not stored: every event carries its own.
    pub fn open(workspace: &Path, agent_id: &str) -> Result<EventLog, EventLogError> {
        Self::open_with(workspace, agent_id, ROTATE_BYTES)
    }

    /// [`EventLog::open`] with another rotation size (tests use small files).
    pub fn open_with(workspace: &Path, _agent_id: &str, rotate_bytes: u64) -> Result<EventLog, EventLogError> {
        let dir = events_dir(workspace);
        fs::create_dir_all(&dir).map_err(|source| EventLogError::Io { path: dir.clone(), source })?;
        let open = |name: &str| {
            let path = dir.join(name);
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|source| EventLogError::Io { path, source })
        };
        let (lock, writer) = (open("lock")?, open("writer")?);
        let mut log = EventLog {
            dir,
            rotate_bytes: rotate_bytes.max(1),
            lock,
            held: None,
            writer,
            out: None,
            dirty: false,
            appended_to: 0,
            reserved_to: 0,
            last_logged: 0,
        };
        let held = log.flock()?;
        let current = log_file(&log.dir, 0);
        let cut = cut_torn_tail(&current)?;
        log.last_logged = if cut > 0 { cut } else { last_logged_setting_aside(&log.dir)? };
        // The file is now as this process left it: the first append need not cut again.
        log.appended_to = stat(&current)?.map_or(0, |(_, len)| len);
        drop(held);
        Ok(log)
    }

    /// The seq of the last line logged when this log was opened (0 when none).
    pub fn last_logged(&self) -> u64 {
        self.last_logged
    }

    /// Takes the writer lease (waiting while another process holds it) and returns the seqs
    /// this process may hand out now. `mine` is `(last seq handed out, end of the range)` from
    /// this process's previous lease: when nobody else held the lease since, numbering goes on
    /// there with no file touched but the marker. After another holder's clean release it
    /// continues above that holder's last seq, within `hwm` when it still reaches. Otherwise
    /// (a holder died holding it, another boot, no marker) it starts above `hwm` and the last
    /// logged seq, rebuilding a missing or unreadable `hwm` from the files
    /// ([`EventLog::reserve`] writes the new range to `hwm` before it is returned).
    pub fn lease(&mut self, mine: Option<(u64, u64)>) -> Result<RangeInclusive<u64>, EventLogError> {
        let writer_path = self.dir.join("writer");
        let io = |source| EventLogError::Io { path: writer_path.clone(), source };
        let held = Flock::take(&self.writer, libc::LOCK_EX).map_err(io)?;
        let range = match (lease::read(&self.writer).map_err(io)?, mine) {
            (lease::Marker::Free { pid, last }, Some((my_last, end))) if my_last == last && pid == std::process::id() => last + 1..=end,
            (lease::Marker::Free { last, .. }, _) => {
                let hwm = self.recover_hwm()?;
                if last < hwm {
                    last + 1..=hwm
                } else {
                    self.reserve(last)?
                }
            }
            (lease::Marker::Unknown, _) => {
                let hwm = self.recover_hwm()?;
                self.reserve(hwm.max(last_logged_setting_aside(&self.dir)?))?
            }
        };
        lease::write(&self.writer, None).map_err(io)?;
        self.held = Some(held);
        Ok(range)
    }

    /// Lets the lease go once every seq up to `last_used` is appended, leaving `free` and
    /// `last_used` in the marker (not fsynced: see `lease`). A no-op without the lease.
    pub fn unlease(&mut self, last_used: u64) -> Result<(), EventLogError> {
        if self.held.is_none() {
            return Ok(());
        }
        let written = lease::write(&self.writer, Some(last_used));
        self.held = None;
        written.map_err(|source| EventLogError::Io { path: self.dir.join("writer"), source })
    }

    /// This process holds the writer lease.
    pub fn is_leased(&self) -> bool {
        self.held.is_some()
    }

    /// The highest seq reserved so far (by this process, or read from `hwm` at a lease).
    pub fn reserved_to(&self) -> u64 {
        self.reserved_to
    }

    /// Reserves the next [`RESERVE_CHUNK`] seqs above `after` and above every seq reserved so
    /// far: writes `start + 1023` to `hwm` (atomically, fsynced) before returning
    /// `start..=start + 1023`. Only under the lease.
    pub fn reserve(&mut self, after: u64) -> Result<RangeInclusive<u64>, EventLogError> {
        // Saturating: a foreign line claiming a seq near u64::MAX must not wrap the numbering.
        let start = self.reserved_to.max(after).saturating_add(1);
        let end = start.saturating_add(RESERVE_CHUNK - 1);
        self.write_hwm(end)?;
        Ok(start..=end)
    }

    /// Appends `events` (seqs already assigned) to `events.jsonl` under the lock, rotating
    /// before a line would take the file past the rotation size (a file holds at least one
    /// line). Not fsynced: see [`EventLog::sync`].
    pub fn append(&mut self, events: &[Event]) -> Result<(), EventLogError> {
        let current = log_file(&self.dir, 0);
        let mut lines = Vec::with_capacity(events.len());
        for ev in events {
            let mut line = serde_json::to_vec(ev).map_err(|source| EventLogError::Encode { path: current.clone(), seq: ev.seq, source })?;
            line.push(b'\n');
            lines.push(line);
        }
        let _held = self.flock()?;
        // Another holder of an earlier lease may have appended or rotated since.
        let mut len = stat(&current)?.map_or(0, |(ino, len)| {
            if self.out.as_ref().is_some_and(|o| o.1 != ino) {
                self.out = None;
            }
            len
        });
        if len == 0 {
            self.out = None;
        } else if len != self.appended_to {
            // Someone else wrote last: a holder of an earlier lease that died mid-line (or a
            // hand edit) leaves a torn tail this append must not run on from. The open's cut,
            // redone here, under the lock.
            cut_torn_tail(&current)?;
            len = stat(&current)?.map_or(0, |(_, len)| len);
        }
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
        self.write_out(&current, &buf)?;
        self.appended_to = len;
        Ok(())
    }

    /// fsyncs `events.jsonl` if anything was appended since the last call (docs/design.md §9: at
    /// `turn_ended`).
    pub fn sync(&mut self) -> Result<(), EventLogError> {
        match &self.out {
            Some((file, _)) if self.dirty => {
                file.sync_data().map_err(|source| EventLogError::Io { path: log_file(&self.dir, 0), source })?;
                self.dirty = false;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn write_out(&mut self, current: &Path, buf: &[u8]) -> Result<(), EventLogError> {
        if buf.is_empty() {
            return Ok(());
        }
        let io = |source| EventLogError::Io { path: current.to_path_buf(), source };
        if self.out.is_none() {
            let file = OpenOptions::new().create(true).append(true).open(current).map_err(io)?;
            let ino = file.metadata().map_err(io)?.ino();
            self.out = Some((file, ino));
        }
        let Some((file, _)) = &mut self.out else { return Ok(()) };
        file.write_all(buf).map_err(io)?;
        self.dirty = true;
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
        self.dirty = false;
        Ok(())
    }

    fn hwm_path(&self) -> PathBuf {
        self.dir.join("hwm")
    }

    fn read_hwm(&self) -> Result<Option<u64>, EventLogError> {
        let path = self.hwm_path();
        match fs::read_to_string(&path) {
            Ok(text) => text.trim().parse().map(Some).map_err(|_| EventLogError::BadHwm { path, text }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(EventLogError::Io { path, source }),
        }
    }

    /// `hwm` as the highest seq ever reserved; when it is missing or unreadable (moved aside
    /// as `hwm.corrupt-<unix>`), the highest logged seq instead, found by a scan that sets
    /// lines that are not events aside ([`files::max_logged_setting_aside`]).
    fn recover_hwm(&mut self) -> Result<u64, EventLogError> {
        let path = self.hwm_path();
        let on_disk = match self.read_hwm() {
            Ok(n) => n,
            Err(EventLogError::BadHwm { text, .. }) => {
                let aside = crate::fsutil::move_aside(&path).map_err(|source| EventLogError::Io { path: path.clone(), source })?;
                tracing::warn!(
                    "{}: not a sequence number ({text:?}); moved to {} and rebuilt from the logged events",
                    path.display(),
                    aside.display()
                );
                None
            }
            Err(e) => return Err(e),
        };
        let hwm = match on_disk {
            Some(n) => n,
            None => {
                let _held = self.flock()?;
                max_logged_setting_aside(&self.dir)?
            }
        };
        self.reserved_to = hwm;
        Ok(hwm)
    }

    fn write_hwm(&mut self, n: u64) -> Result<(), EventLogError> {
        let path = self.hwm_path();
        crate::fsutil::write_atomic(&path, n.to_string().as_bytes()).map_err(|source| EventLogError::Io { path, source })?;
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
#[derive(Debug)]
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

#[cfg(test)]
mod tests;
