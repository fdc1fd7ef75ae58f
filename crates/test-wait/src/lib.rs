//! Waits on events instead of clocks: a named pipe a tool signals through ([`Fifo`]), a
//! process's end (a pidfd, [`exited_within`]) and a file's arrival (inotify, [`appears_within`]).
//! Every wait is bounded, so a test whose event never comes fails instead of hanging; none polls.
//!
//! Owns: test fixtures only; nothing here is part of the product. A crate of its own, below
//! every cicy crate, so the unit tests of `cicy-tools` and `cicy-runtime` take it without
//! waiting for the whole workspace to build (`cicy-test-support`, which re-exports it as
//! `wait`, depends on `cicy`). Linux only (pidfd_open(2), inotify(7)).

// Test code: a panic is how a fixture fails its test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A named pipe a tool command signals through, so a test waits on what the tool did instead
/// of sleeping: a tool running `echo started > P` is blocked until the test [`Fifo::read`]s,
/// one running `read x < P` until the test [`Fifo::write`]s.
pub struct Fifo {
    pub path: PathBuf,
}

impl Fifo {
    /// Makes the pipe at `path` (mode 0600).
    pub fn new(path: PathBuf) -> Self {
        let c = c_path(&path);
        // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
        Self { path }
    }

    /// Waits until a tool has written into the pipe and closed it; returns what it wrote.
    pub async fn read(&self) -> String {
        let path = self.path.clone();
        Self::blocking(move || std::fs::read_to_string(path).expect("read the fifo")).await
    }

    /// Writes `text` into the pipe once a tool opens it for reading.
    pub async fn write(&self, text: &str) {
        let (path, text) = (self.path.clone(), text.to_string());
        Self::blocking(move || std::fs::write(path, text).expect("write the fifo")).await
    }

    /// Runs a blocking open of the pipe on a thread of its own (not tokio's blocking pool, whose
    /// shutdown would wait for it forever if the tool never came), bounded so a test whose tool
    /// never runs fails instead of hanging.
    async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        tokio::time::timeout(Duration::from_secs(30), rx).await.expect("the tool never opened the fifo").expect("the fifo thread panicked")
    }
}

/// A process (any, not only our child) held by a pidfd, which becomes readable when the
/// process ends: a zombie has ended. Holding it from while the process is known to run means
/// a reused pid can never be mistaken for it.
pub struct Pidfd {
    pid: i32,
    fd: AsyncFd<OwnedFd>,
}

impl Pidfd {
    /// `None` when there is no process `pid` any more (ended and reaped).
    pub fn open(pid: i32) -> Option<Self> {
        assert!(pid > 1, "not a process to wait for: {pid}");
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            let err = io::Error::last_os_error();
            assert_eq!(err.raw_os_error(), Some(libc::ESRCH), "pidfd_open({pid}): {err}");
            return None;
        }
        let fd = i32::try_from(fd).expect("a descriptor fits an int");
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Some(Self { pid, fd: register(fd) })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the process ended within `limit`.
    pub async fn exited_within(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.fd.readable()).await.is_ok_and(|ready| ready.is_ok())
    }
}

/// Whether process `pid` has ended, or ends within `limit`. Open a [`Pidfd`] instead while the
/// process is known to run when the pid could be reused before this call.
pub async fn exited_within(pid: i32, limit: Duration) -> bool {
    match Pidfd::open(pid) {
        Some(p) => p.exited_within(limit).await,
        None => true,
    }
}

/// Whether `path` exists or appears within `limit` (created or renamed into place), waking on
/// inotify events of its folder; a missing folder is waited for the same way.
pub async fn appears_within(path: &Path, limit: Duration) -> bool {
    tokio::time::timeout(limit, appears(path.to_path_buf())).await.is_ok()
}

fn appears(path: PathBuf) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        let dir = path.parent().expect("a path with a folder").to_path_buf();
        if !dir.exists() {
            appears(dir.clone()).await;
        }
        // Watch first, then look: an arrival between the two still wakes the watch.
        let watch = Inotify::watch(&dir);
        while !path.exists() {
            watch.next().await;
        }
    })
}

/// An inotify instance watching one folder for entries created or moved into it.
struct Inotify(AsyncFd<OwnedFd>);

impl Inotify {
    fn watch(dir: &Path) -> Self {
        // SAFETY: inotify_init1 takes flags and returns a new descriptor or -1.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(fd >= 0, "inotify_init1: {}", io::Error::last_os_error());
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let c = c_path(dir);
        // SAFETY: a valid descriptor and a NUL-terminated path that outlives the call.
        let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), libc::IN_CREATE | libc::IN_MOVED_TO) };
        assert!(wd >= 0, "inotify_add_watch {}: {}", dir.display(), io::Error::last_os_error());
        Self(register(fd))
    }

    /// Waits for the next events and discards them (the caller looks at the folder itself).
    async fn next(&self) {
        let mut guard = self.0.readable().await.expect("inotify readable");
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reads at most `buf.len()` bytes into `buf`, which outlives the call.
            let n = unsafe { libc::read(self.0.get_ref().as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let err = io::Error::last_os_error();
                assert_eq!(err.kind(), io::ErrorKind::WouldBlock, "read inotify: {err}");
                guard.clear_ready();
                return;
            }
        }
    }
}

/// Registers `fd` with tokio's reactor for readability.
fn register(fd: OwnedFd) -> AsyncFd<OwnedFd> {
    // SAFETY: an `OwnedFd` stays open and names the same descriptor until it is dropped, which
    // happens only with the `AsyncFd` that owns it.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.expect("register with the reactor")
}

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("path without NUL")
}
