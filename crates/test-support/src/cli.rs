//! Runs the `cicy-agent` binary as a user would: a temporary `$CICY_HOME`, the gateway from the
//! environment, and `HOME` pointed at the temporary home so the `shell` tool's login shell reads
//! no profile of the machine running the tests. Test fixtures only.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The `cicy-agent` binary cargo built beside the running test or bench: it lives in the
/// profile's folder, one above the `deps/` folder that holds test and bench executables (cargo
/// builds a package's binaries before its integration tests and benches). A library cannot read
/// `CARGO_BIN_EXE_cicy-agent`; cargo sets that only when it compiles a test or bench target.
pub fn bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the running test's executable");
    let mut dir = exe.parent().expect("the executable's folder").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let bin = dir.join("cicy-agent");
    assert!(bin.is_file(), "{} is missing: build it with `cargo build` (cargo test builds it)", bin.display());
    bin
}

/// The command, ready to spawn: env set, stdio piped (stdin null).
pub fn command(home: &Path, gateway: &str, args: &[&str]) -> tokio::process::Command {
    command_with(&bin(), home, gateway, args)
}

/// [`command`] with the binary at `program` (e.g. a link to it that another user can reach).
pub fn command_with(program: &Path, home: &Path, gateway: &str, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
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

/// The JSON events a `--json` run printed, as `type` (and `text` for system lines).
pub fn event_types(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON event per line");
            match v["type"].as_str().expect("type") {
                "system" => format!("system: {}", v["text"].as_str().expect("text")),
                t => t.to_string(),
            }
        })
        .collect()
}

/// Reads `stdout` until what was read ends with `text` (e.g. the first delta of an answer that
/// the gateway then holds), and returns it all. Panics when the stream ends first.
pub async fn read_until(stdout: &mut tokio::process::ChildStdout, text: &str) -> String {
    let mut seen = Vec::new();
    while !seen.ends_with(text.as_bytes()) {
        let mut buf = [0u8; 256];
        let n = stdout.read(&mut buf).await.expect("read stdout");
        assert_ne!(n, 0, "stdout ended before {text:?}: {:?}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&seen).into_owned()
}
