//! Running one hook process (DESIGN.md §12): exec'd directly, JSON on stdin, stdout and stderr
//! read, stopped on timeout or cancel.
//!
//! Owns finding the program ([`resolve`]), starting it and waiting for it ([`run`]). The process
//! is prepared exactly as a tool's (`crate::tools::process::prepare`: the gateway API key
//! variables removed, the outbox variables set, a process group of its own, recorded for the
//! reaper) and its whole group is SIGKILLed on timeout, on cancel and when it returns. It does
//! not read what the hook printed (`super::chain` does).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::tools::process::{prepare, Group};
use crate::tools::ToolContext;

/// Stdout a hook may print: a JSON action is small; 1 MiB leaves room for a modified tool result.
pub const STDOUT_LIMIT: u64 = 1 << 20;
/// Stderr kept for a deny reason or an error message.
pub const STDERR_LIMIT: u64 = 64 << 10;

/// How a hook process ended.
#[derive(Debug)]
pub enum Ran {
    /// It exited (`code` `None`: killed by signal `signal`).
    Exited { code: Option<i32>, signal: Option<i32>, stdout: Vec<u8>, stderr: Vec<u8> },
    /// Still running after its timeout; its group was killed.
    TimedOut,
    /// The turn was cancelled; its group was killed.
    Cancelled,
    /// It could not be started (the text says why).
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
/// exits, `timeout` passes or `ctx.cancel` fires; `label` names its group for the reaper. Output
/// past [`STDOUT_LIMIT`] / [`STDERR_LIMIT`] is not read, so a hook that prints more blocks
/// until its timeout.
pub async fn run(program: &Path, input: &[u8], timeout: Duration, ctx: &ToolContext, label: &str) -> Ran {
    let mut command = Command::new(program);
    prepare(&mut command, ctx);
    command.current_dir(&ctx.workspace).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return Ran::NotStarted(format!("cannot start {}: {e}", program.display())),
    };
    let Some(_group) = Group::of(&mut child, ctx, label) else {
        return Ran::NotStarted(format!("cannot start {}: no process id", program.display()));
    };
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let write = async move {
        if let Some(mut stdin) = stdin {
            // A hook that does not read its stdin may exit first: a broken pipe is not an error.
            let _ = stdin.write_all(input).await;
        }
    };
    let finished = async {
        let (_, stdout, stderr, status) = tokio::join!(write, read_capped(stdout, STDOUT_LIMIT), read_capped(stderr, STDERR_LIMIT), child.wait());
        (stdout, stderr, status)
    };
    let ran = tokio::select! {
        (stdout, stderr, status) = finished => match status {
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt;
                Ran::Exited { code: status.code(), signal: status.signal(), stdout, stderr }
            }
            Err(e) => Ran::NotStarted(format!("cannot wait for {}: {e}", program.display())),
        },
        () = tokio::time::sleep(timeout) => Ran::TimedOut,
        () = ctx.cancel.cancelled() => Ran::Cancelled,
    };
    // `_group` drops here: whatever is left of the hook's group (all of it on a timeout or a
    // cancel, background children otherwise) is SIGKILLed; tokio reaps the killed child.
    ran
}

/// Reads `pipe` to its end, keeping at most `limit` bytes.
async fn read_capped<R: AsyncRead + Unpin>(pipe: Option<R>, limit: u64) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(pipe) = pipe {
        // A read error leaves what was read; the exit status still decides.
        let _ = pipe.take(limit).read_to_end(&mut buf).await;
    }
    buf
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
    async fn a_missing_program_does_not_start() {
        let d = tempfile::tempdir().unwrap();
        let ctx = ToolContext::for_tests(d.path());
        let ran = run(&d.path().join("nope.sh"), b"{}", Duration::from_secs(20), &ctx, "hook: test").await;
        assert!(matches!(&ran, Ran::NotStarted(e) if e.contains("nope.sh")), "{ran:?}");
    }
}
