//! Running one hook process (docs/design.md §12): exec'd directly, JSON on stdin, stdout and stderr
//! read, stopped on timeout or cancel.
//!
//! Owns finding the program ([`resolve`]), starting it and waiting for it ([`run`]). The process
//! is prepared exactly as a tool's (`crate::tools::process::prepare`: the gateway API key
//! variables removed, the outbox variables set, a process group of its own, recorded for the
//! reaper) and its whole group is SIGKILLed on timeout, on cancel and when its leader exits. It
//! does not read what the hook answered (`super::chain` does).
//!
//! A hook's answer is complete when the hook (the group's leader) exits, not when its pipes
//! close: a background child (`sleep 30 &`) keeps them open. So once the leader has exited the
//! group is killed, which closes the pipes, and what is still buffered is read for at most
//! [`DRAIN_GRACE`] (a process that left the group with `setsid` may hold them for ever).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::time::{sleep_until, Instant};

use crate::tools::process::{prepare, Group};
use crate::tools::ToolContext;

/// Stdout a hook may print: a JSON action is small; 1 MiB leaves room for a modified tool result.
/// A hook that prints more fails ([`Ran::StdoutOverLimit`]).
pub const STDOUT_LIMIT: usize = 1 << 20;
/// Stderr kept for a deny reason or an error message; more is read and dropped.
pub const STDERR_LIMIT: usize = 64 << 10;
/// After the leader exits (and its group is killed), how long to keep reading output that is
/// already on its way; as `crate::tools::process` allows a shell command.
const DRAIN_GRACE: Duration = Duration::from_millis(200);
const READ_CHUNK: usize = 8192;

/// How a hook process ended.
#[derive(Debug)]
pub enum Ran {
    /// It exited (`code` `None`: killed by signal `signal`).
    Exited { code: Option<i32>, signal: Option<i32>, stdout: Vec<u8>, stderr: Vec<u8> },
    /// It printed more than [`STDOUT_LIMIT`] bytes on stdout (then its stdout was closed, so it
    /// may have died of SIGPIPE); its answer is not read.
    StdoutOverLimit,
    /// Still running after its timeout; its group was killed.
    TimedOut,
    /// The turn was cancelled; its group was killed.
    Cancelled,
    /// The program does not exist (`ENOENT` from exec; the text says which path).
    NotFound(String),
    /// It could not be started for another reason (the text says why).
    NotStarted(String),
}

/// Where `command` (as meta.yaml writes it) is run from **[chosen]**: an absolute path as is; a
/// relative one in the role's own folder (`role_dir`, `$CICY_HOME/roles/<slug>/`, where hooks
/// ship with the role) when it exists there, else in the workspace when it exists there; a bare
/// name found in neither is left to `PATH` (e.g. `jq`); any other relative path is taken in the
/// workspace (and fails to start when missing, which the error names).
pub fn resolve(command: &str, role_dir: Option<&Path>, workspace: &Path) -> PathBuf {
    let path = Path::new(command);
    if path.is_absolute() {
        return path.to_path_buf();
    }
    if let Some(found) = role_dir.map(|d| d.join(path)).filter(|p| p.is_file()) {
        return found;
    }
    let in_workspace = workspace.join(path);
    if in_workspace.is_file() || command.contains('/') {
        return in_workspace;
    }
    path.to_path_buf()
}

/// Runs `program` with cwd = the workspace of `ctx`, `input` on stdin (then closed), until it
/// exits, `timeout` passes or `ctx.cancel` fires; `label` names its group for the reaper. When
/// it exits, whatever is left of its group is killed and the output it printed up to then is
/// the answer; stdout past [`STDOUT_LIMIT`] ends the read ([`Ran::StdoutOverLimit`]), stderr
/// past [`STDERR_LIMIT`] is dropped.
pub async fn run(program: &Path, input: &[u8], timeout: Duration, ctx: &ToolContext, label: &str) -> Ran {
    let deadline = Instant::now() + timeout;
    let mut command = Command::new(program);
    prepare(&mut command, ctx);
    command.current_dir(&ctx.workspace).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ran::NotFound(format!("cannot start {}: {e}", program.display())),
        Err(e) => return Ran::NotStarted(format!("cannot start {}: {e}", program.display())),
    };
    let Some(group) = Group::of(&mut child, ctx, label) else {
        return Ran::NotStarted(format!("cannot start {}: no process id", program.display()));
    };
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let (mut out, mut err) = (Capture::default(), Capture::default());
    let ended = {
        let write = async move {
            if let Some(mut stdin) = stdin {
                // A hook that does not read its stdin may exit first: a broken pipe is not an error.
                let _ = stdin.write_all(input).await;
            }
        };
        let io = async { tokio::join!(write, out.read(stdout, STDOUT_LIMIT, true), err.read(stderr, STDERR_LIMIT, false)) };
        tokio::pin!(io);
        let mut io_done = false;
        let ended = loop {
            tokio::select! {
                _ = &mut io, if !io_done => io_done = true,
                status = child.wait() => break Ok(status),
                () = sleep_until(deadline) => break Err(Ran::TimedOut),
                () = ctx.cancel.cancelled() => break Err(Ran::Cancelled),
            }
        };
        // Dropping the group SIGKILLs what is left of it (all of it on a timeout or a cancel,
        // background children otherwise); tokio reaps a killed leader. Their end closes the pipes.
        drop(group);
        if ended.is_ok() && !io_done {
            let _ = tokio::time::timeout(DRAIN_GRACE, &mut io).await;
        }
        ended
    };
    match ended {
        Err(ran) => ran,
        Ok(_) if out.over => Ran::StdoutOverLimit,
        Ok(Ok(status)) => {
            use std::os::unix::process::ExitStatusExt;
            Ran::Exited { code: status.code(), signal: status.signal(), stdout: out.bytes, stderr: err.bytes }
        }
        Ok(Err(e)) => Ran::NotStarted(format!("cannot wait for {}: {e}", program.display())),
    }
}

/// What was read from one pipe.
#[derive(Debug, Default)]
struct Capture {
    bytes: Vec<u8>,
    /// More than the limit arrived.
    over: bool,
}

impl Capture {
    /// Reads `pipe` to its end (or a read error), keeping at most `limit` bytes; past the limit
    /// it stops reading (closing the pipe) when `stop_when_over`, else it reads on and drops
    /// the rest so a chatty writer is not blocked. Cancel-safe: a chunk is kept in the same
    /// poll that reads it.
    async fn read<R: AsyncRead + Unpin>(&mut self, pipe: Option<R>, limit: usize, stop_when_over: bool) {
        let Some(mut pipe) = pipe else { return };
        let mut chunk = vec![0; READ_CHUNK];
        loop {
            let n = match pipe.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let room = limit.saturating_sub(self.bytes.len());
            self.bytes.extend_from_slice(&chunk[..n.min(room)]);
            if n > room {
                self.over = true;
                if stop_when_over {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn relative_commands_look_in_the_role_folder_then_the_workspace() {
        let d = tempfile::tempdir().unwrap();
        let (role, ws) = (d.path().join("role"), d.path().join("ws"));
        std::fs::create_dir_all(role.join("hooks")).unwrap();
        std::fs::create_dir_all(ws.join("hooks")).unwrap();
        std::fs::write(role.join("hooks/a.sh"), "").unwrap();
        std::fs::write(ws.join("hooks/a.sh"), "").unwrap();
        std::fs::write(ws.join("hooks/b.sh"), "").unwrap();
        assert_eq!(resolve("hooks/a.sh", Some(&role), &ws), role.join("hooks/a.sh"));
        assert_eq!(resolve("hooks/b.sh", Some(&role), &ws), ws.join("hooks/b.sh"));
        assert_eq!(resolve("hooks/c.sh", None, &ws), ws.join("hooks/c.sh"));
        assert_eq!(resolve("jq", Some(&role), &ws), PathBuf::from("jq"));
        assert_eq!(resolve("/bin/true", Some(&role), &ws), PathBuf::from("/bin/true"));
    }

    #[tokio::test]
    async fn stdin_reaches_the_hook_in_the_workspace_and_hidden_variables_do_not() {
        let d = tempfile::tempdir().unwrap();
        let p = script(d.path(), "h.sh", "pwd; cat; echo \"[${CARGO_PKG_NAME-unset}]\" >&2; exit 3");
        let mut ctx = ToolContext::for_tests(d.path());
        ctx.hidden_env = vec!["CARGO_PKG_NAME".into()];
        match run(&p, b"{\"a\":1}", Duration::from_secs(20), &ctx, "hook: test").await {
            Ran::Exited { code, stdout, stderr, .. } => {
                let cwd = d.path().canonicalize().unwrap();
                assert_eq!(String::from_utf8(stdout).unwrap(), format!("{}\n{{\"a\":1}}", cwd.display()));
                assert_eq!((code, stderr.as_slice()), (Some(3), &b"[unset]\n"[..]));
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_missing_program_is_not_found() {
        let d = tempfile::tempdir().unwrap();
        let ctx = ToolContext::for_tests(d.path());
        let program = d.path().join("nope.sh");
        let ran = run(&program, b"{}", Duration::from_secs(20), &ctx, "hook: test").await;
        let want = format!("cannot start {}: No such file or directory (os error 2)", program.display());
        assert!(matches!(&ran, Ran::NotFound(e) if *e == want), "{ran:?}");
    }

    #[tokio::test]
    async fn the_answer_is_complete_when_the_hook_exits_and_its_background_child_is_killed() {
        let d = tempfile::tempdir().unwrap();
        // The child holds stdout and stderr open for 30 s; the answer must not wait for it (a
        // wait would end in TimedOut after the 20 s timeout).
        let p = script(d.path(), "h.sh", "sleep 30 &\necho $! > bg.pid\necho '{\"action\":\"allow\"}'\necho note >&2\nexit 0");
        let ctx = ToolContext::for_tests(d.path());
        match run(&p, b"{}", Duration::from_secs(20), &ctx, "hook: test").await {
            Ran::Exited { code, stdout, stderr, .. } => {
                assert_eq!((code, stdout.as_slice(), stderr.as_slice()), (Some(0), &b"{\"action\":\"allow\"}\n"[..], &b"note\n"[..]));
            }
            other => panic!("{other:?}"),
        }
        let pid: i32 = std::fs::read_to_string(d.path().join("bg.pid")).unwrap().trim().parse().unwrap();
        assert!(cicy_test_wait::exited_within(pid, Duration::from_secs(10)).await, "the background sleep was not killed");
    }

    #[tokio::test]
    async fn stdout_past_the_limit_is_reported_as_such() {
        let d = tempfile::tempdir().unwrap();
        // 1 MiB + 1 byte, then exit 0: the bytes past the limit are never read.
        let p = script(d.path(), "h.sh", &format!("head -c {} /dev/zero; exit 0", STDOUT_LIMIT + 1));
        let ctx = ToolContext::for_tests(d.path());
        let ran = run(&p, b"{}", Duration::from_secs(20), &ctx, "hook: test").await;
        assert!(matches!(ran, Ran::StdoutOverLimit), "{ran:?}");
        // Exactly the limit is an answer (here not JSON, which `super::chain` reports).
        let p = script(d.path(), "h2.sh", &format!("head -c {STDOUT_LIMIT} /dev/zero; head -c 100000 /dev/zero >&2"));
        match run(&p, b"{}", Duration::from_secs(20), &ctx, "hook: test").await {
            Ran::Exited { code, stdout, stderr, .. } => {
                assert_eq!((code, stdout.len(), stderr.len()), (Some(0), STDOUT_LIMIT, STDERR_LIMIT))
            }
            other => panic!("{other:?}"),
        }
    }
}
