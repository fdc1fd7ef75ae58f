//! When a flush may run: the backoff in `.cicy/memory/.flush-backoff.json` and the flush lock
//! `.cicy/memory/.flush.lock`, beside the buffer.
//!
//! Owns when the next automatic flush may be tried after failed ones (5 min after the first
//! failure, doubling with each further failure up to 6 h, cleared by a flush that succeeds) and
//! that one flush runs at a time per agent. The backoff lives on disk so a one-shot process
//! honours a failure another process saw, instead of waiting on a failing recognizer after
//! every command; the lock matters because a flush holds no turn lock, so a session's timer and
//! a one-shot process could otherwise send the same turns twice. Must not touch the buffer's
//! turns or memory files, and never calls the gateway.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::buffer::{from_millis, millis, with_lock};
use super::MemoryError;
use cicy_store::fsutil;

/// The backoff file inside the memory folder.
pub const FILE: &str = ".flush-backoff.json";
/// The lock file a running flush holds (flock, released when the process ends however it ends).
pub const LOCK_FILE: &str = ".flush.lock";
/// The wait after the first failed flush (ours: one prompt-cache TTL, as the idle timer).
pub const FIRST: Duration = Duration::from_secs(5 * 60);
/// The longest wait between two automatic tries (ours: a few tries a day at worst).
pub const MAX: Duration = Duration::from_secs(6 * 60 * 60);

/// The state after `failures` consecutive failed flushes, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    /// Failed flushes in a row (at least 1 when the file exists).
    pub failures: u32,
    /// No automatic flush before this time (ms since the Unix epoch).
    pub next_try_ms: u64,
    /// The last failure, for a person reading the file.
    pub last_error: String,
}

impl Backoff {
    /// When the next automatic flush may run.
    pub fn next_try(&self) -> SystemTime {
        from_millis(self.next_try_ms)
    }
}

/// The wait after the `failures`-th failure in a row: 5, 10, 20, 40, 80, 160, 320 min, then 6 h.
pub fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST.saturating_mul(1 << doublings).min(MAX)
}

/// The backoff in `dir`, `None` when the last flush succeeded (no file). A file that does not
/// parse counts as no backoff: it only ever delays, so ignoring it loses nothing.
pub fn load(dir: &Path) -> Result<Option<Backoff>, MemoryError> {
    let p = dir.join(FILE);
    match std::fs::read(&p) {
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(MemoryError::io(&p, e)),
    }
}

/// Records a failed flush at `now`: one more failure, the next try after [`delay`].
pub fn record_failure(dir: &Path, now: SystemTime, error: &str) -> Result<Backoff, MemoryError> {
    with_lock(dir, || {
        let failures = load(dir)?.map_or(0, |b| b.failures).saturating_add(1);
        let b = Backoff { failures, next_try_ms: millis(now + delay(failures)), last_error: error.to_string() };
        let p = dir.join(FILE);
        let bytes = serde_json::to_vec(&b).map_err(|e| MemoryError::io(&p, e.into()))?;
        fsutil::write_atomic(&p, &bytes).map_err(|e| MemoryError::io(&p, e))?;
        Ok(b)
    })
}

/// Held while a flush runs; dropping it releases the lock.
#[derive(Debug)]
pub struct FlushLock {
    _file: std::fs::File,
}

/// Takes the flush lock of `dir` without waiting: `None` when another flush holds it.
pub fn try_flush_lock(dir: &Path) -> Result<Option<FlushLock>, MemoryError> {
    std::fs::create_dir_all(dir).map_err(|e| MemoryError::io(dir, e))?;
    let p = dir.join(LOCK_FILE);
    let file = std::fs::File::options().create(true).truncate(false).write(true).open(&p).map_err(|e| MemoryError::io(&p, e))?;
    // SAFETY: flock on a descriptor we own and keep open in the returned guard; no memory is shared.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(Some(FlushLock { _file: file }));
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == std::io::ErrorKind::WouldBlock {
        return Ok(None);
    }
    Err(MemoryError::io(&p, e))
}

/// Forgets the failures (a flush succeeded).
pub fn clear(dir: &Path) -> Result<(), MemoryError> {
    let p = dir.join(FILE);
    match std::fs::remove_file(&p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(MemoryError::io(&p, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn the_wait_doubles_from_5_minutes_to_at_most_6_hours() {
        let min: Vec<u64> = (1..=10).map(|n| delay(n).as_secs() / 60).collect();
        assert_eq!(min, [5, 10, 20, 40, 80, 160, 320, 360, 360, 360]);
        assert_eq!(delay(u32::MAX), MAX);
    }

    #[test]
    fn failures_are_counted_on_disk_and_a_success_clears_them() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(load(d).unwrap(), None);
        let b = record_failure(d, t0, "HTTP 500").unwrap();
        assert_eq!(b, Backoff { failures: 1, next_try_ms: 1_000_300_000, last_error: "HTTP 500".into() });
        assert_eq!(std::fs::read_to_string(d.join(FILE)).unwrap(), r#"{"failures":1,"next_try_ms":1000300000,"last_error":"HTTP 500"}"#);
        let b = record_failure(d, t0 + Duration::from_secs(300), "timeout").unwrap();
        assert_eq!((b.failures, b.next_try()), (2, t0 + Duration::from_secs(300 + 600)));
        assert_eq!(load(d).unwrap(), Some(b));
        clear(d).unwrap();
        assert_eq!(load(d).unwrap(), None);
        clear(d).unwrap();
        std::fs::write(d.join(FILE), "{torn").unwrap();
        assert_eq!(load(d).unwrap(), None, "an unreadable file never blocks a flush");
        assert_eq!(record_failure(d, t0, "again").unwrap().failures, 1);
    }

    #[test]
    fn one_flush_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let held = try_flush_lock(dir.path()).unwrap().expect("free");
        assert!(try_flush_lock(dir.path()).unwrap().is_none(), "a second flush is refused, not queued");
        drop(held);
        assert!(try_flush_lock(dir.path()).unwrap().is_some());
    }
}
