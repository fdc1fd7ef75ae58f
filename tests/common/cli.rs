//! Runs the `cicy-agent` binary as a user would: a temporary `$CICY_HOME`, the gateway from the
//! environment, and `HOME` pointed at the temporary home so the `shell` tool's login shell reads
//! no profile of the machine running the tests. Test fixtures only.

use std::path::Path;
use std::process::Stdio;

use tokio::io::AsyncWriteExt;

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The command, ready to spawn: env set, stdio piped (stdin null).
pub fn command(home: &Path, gateway: &str, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_cicy-agent"));
    cmd.args(args)
        .env("CICY_HOME", home)
        .env("HOME", home)
        .env("CICY_GATEWAY_URL", gateway)
        .env("CICY_MODEL", "test-model")
        .env_remove("CICY_API_STYLE")
        .env_remove("CICY_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Runs `cicy-agent <args>` to the end, feeding `stdin` when given.
pub async fn cicy(home: &Path, gateway: &str, args: &[&str], stdin: Option<&str>) -> Out {
    cicy_bytes(home, gateway, args, stdin.map(str::as_bytes)).await
}

/// [`cicy`] with raw bytes on stdin (e.g. a line that is not UTF-8).
pub async fn cicy_bytes(home: &Path, gateway: &str, args: &[&str], stdin: Option<&[u8]>) -> Out {
    let mut cmd = command(home, gateway, args);
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn().expect("spawn cicy-agent");
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(bytes).await.expect("write stdin");
        drop(pipe);
    }
    let out = child.wait_with_output().await.expect("wait");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A named pipe a tool command signals through, so a test waits on what the tool did instead
/// of sleeping: a tool running `echo started > P` is blocked until the test [`Fifo::read`]s,
/// one running `read x < P` until the test [`Fifo::write`]s.
pub struct Fifo {
    pub path: std::path::PathBuf,
}

impl Fifo {
    /// Makes the pipe at `path` (mode 0600).
    pub fn new(path: std::path::PathBuf) -> Self {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("path without NUL");
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
        tokio::time::timeout(std::time::Duration::from_secs(30), rx)
            .await
            .expect("the tool never opened the fifo")
            .expect("the fifo thread panicked")
    }
}
