//! The per-agent turn lock (docs/design.md §7: `/compact` and `/clear` are refused while a turn runs).
//!
//! Owns `<workspace>/.cicy/turn.lock`. Whoever runs a turn, a compaction or a clear for an agent
//! holds an exclusive `flock(2)` on it, so a second `cicy-agent` process working on the same
//! agent is refused instead of overwriting the first one's history. The kernel drops the lock
//! when its holder exits, even by `kill -9`, so a crash never leaves a stale lock; the file is
//! opened close-on-exec (Rust's default), so tool processes the holder starts, which may
//! outlive it, do not keep it. It knows nothing of what the holder does.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Errors taking the lock.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another holder (usually another process) is running a turn, compaction or clear.
    #[error("a turn is running for {agent_id}")]
    Busy { agent_id: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// A held turn lock; released on drop (and by the kernel if the process dies).
#[derive(Debug)]
pub struct TurnLock {
    // Closing the file releases the lock; it is kept only for that.
    _file: File,
}

/// `<workspace>/.cicy/turn.lock`.
pub fn lock_path(workspace: &Path) -> PathBuf {
    workspace.join(".cicy").join("turn.lock")
}

impl TurnLock {
    /// Takes the lock of the agent whose workspace is `workspace` without waiting.
    ///
    /// Errors: [`LockError::Busy`] when it is held (by another process, or by another open
    /// `TurnLock` of this one); [`LockError::Io`] when the file cannot be created or locked.
    pub fn try_acquire(workspace: &Path, agent_id: &str) -> Result<Self, LockError> {
        let path = lock_path(workspace);
        let io = |source| LockError::Io { path: path.clone(), source };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io)?;
        loop {
            // SAFETY: flock only reads the descriptor, which `file` keeps open for the call.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                return Ok(Self { _file: file });
            }
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EWOULDBLOCK) => return Err(LockError::Busy { agent_id: agent_id.to_string() }),
                _ => return Err(io(err)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = TurnLock::try_acquire(dir.path(), "w-1").unwrap();
        let second = TurnLock::try_acquire(dir.path(), "w-1").unwrap_err();
        assert_eq!(second.to_string(), "a turn is running for w-1");
        drop(first);
        // Another test's process spawn can fork while the lock file is open: the child holds a
        // copy of the descriptor (and so the lock) until its exec closes it, a moment later.
        let free = (0..200).any(|_| {
            let ok = TurnLock::try_acquire(dir.path(), "w-1").is_ok();
            if !ok {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            ok
        });
        assert!(free, "the lock was still held 2 s after its holder let go");
        assert!(lock_path(dir.path()).exists());
    }
}
