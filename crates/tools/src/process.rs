//! One bash command in a process group of its own: spawn it, read its output, stop it on
//! timeout or cancel, and leave nothing of it running.
//!
//! Owns process spawning, process-group signalling, reading the pipes and recording the group
//! for the reaper (`super::reaper`). It must not know any tool's input format or result wording
//! beyond the status line of [`Ending`]; the tools (`shell`, custom tools) build a [`Job`] and
//! turn the [`Finished`] into a `tool_result`.
//!
//! Lifecycle of a job:
//! - `bash -lc <command>` starts as the leader of a new process group, stdin `/dev/null`, stdout
//!   and stderr piped and read concurrently into one buffer in arrival order. Until it ends the
//!   group is known to the watchdog (`super::watchdog`), which kills it if cicy dies, and
//!   recorded under the agent's `.cicy/running/` for the reaper at the next start, so a crash
//!   cannot orphan it.
//! - The job ends when bash (the main process) exits, not when the pipes close, so a background
//!   child that keeps them open (`sleep 100 & echo hi`) cannot stall it; output already buffered
//!   is drained for at most [`DRAIN_GRACE`].
//! - On timeout or cancel the group gets SIGTERM, then SIGKILL after [`TERM_GRACE`] if any member
//!   is still alive.
//! - Whatever is left of the group when the job returns (background jobs) is killed with
//!   SIGKILL, as codex-style runtimes do: a tool call must not leak processes into the agent's
//!   life, and a cancelled turn must really stop. A command that has to outlive the call detaches
//!   itself into its own session (`setsid server &`).

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::time::{sleep, sleep_until, Instant};

use super::output::Collector;
use super::reaper::Recorded;
use super::watchdog::Watched;
use super::ToolContext;

/// Between SIGTERM and SIGKILL: long enough for a well-behaved program to clean up.
const TERM_GRACE: Duration = Duration::from_secs(2);
/// After bash exits, how long to keep reading output that is already on its way.
const DRAIN_GRACE: Duration = Duration::from_millis(200);
/// How often to look whether a terminated group is empty yet.
const GROUP_POLL: Duration = Duration::from_millis(50);
const READ_CHUNK: usize = 8192;

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    /// The bash command line (`bash -lc`).
    pub command: &'a str,
    /// An existing directory.
    pub cwd: &'a Path,
    /// Variables set in the child's environment (after [`ToolContext::hidden_env`] is removed
    /// and [`ToolContext::env`] set; a name in both takes this value).
    pub env: &'a [(&'a str, &'a str)],
    pub timeout: Duration,
    /// What the reaper's note calls the job, e.g. `shell: sleep 600`.
    pub label: &'a str,
    /// How many bytes of output [`Collector`] keeps at each end.
    pub output_limit: usize,
}

/// How the wait for bash ended.
#[derive(Debug)]
pub enum Ending {
    Exited(io::Result<ExitStatus>),
    TimedOut,
    Cancelled,
}

impl Ending {
    /// The final status line (`exit code: N`, `killed by signal N`, `timed out after N s`,
    /// `cancelled by user`) and whether the call failed (anything but exit code 0).
    pub fn describe(&self, timeout: Duration) -> (String, bool) {
        match self {
            Ending::Exited(Ok(status)) => match (status.code(), status.signal()) {
                (Some(code), _) => (format!("exit code: {code}"), code != 0),
                (None, Some(signal)) => (format!("killed by signal {signal}"), true),
                (None, None) => (format!("ended with {status}"), true),
            },
            Ending::Exited(Err(err)) => (format!("could not wait for the command: {err}"), true),
            Ending::TimedOut => (format!("timed out after {} s", timeout.as_secs()), true),
            Ending::Cancelled => ("cancelled by user".to_owned(), true),
        }
    }
}

/// A job that ran: how it ended and what it printed.
#[derive(Debug)]
pub struct Finished {
    pub ending: Ending,
    pub output: Collector,
}

/// Why a job did not start; the text is a complete `tool_result`.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("failed to start bash: {0}")]
    Spawn(#[source] io::Error),
    /// The child had no pid (it was killed at once).
    #[error("failed to start bash: no process id")]
    NoPid,
    #[error("cannot share the log file: {0}")]
    ShareLog(#[source] io::Error),
}

/// Runs `job` to its end (exit, timeout or `ctx.cancel`). Errors: [`StartError`], bash could
/// not be started.
pub async fn run(job: &Job<'_>, ctx: &ToolContext) -> Result<Finished, StartError> {
    let mut child = bash(job, ctx).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(StartError::Spawn)?;
    let group = Group::of(&mut child, ctx, job.label).ok_or(StartError::NoPid)?;
    let mut pipes = Pipes::take_from(&mut child);
    let mut out = Collector::new(job.output_limit);

    let deadline = Instant::now() + job.timeout;
    let ending = loop {
        tokio::select! {
            () = pipes.read_some(&mut out), if pipes.is_open() => {}
            status = child.wait() => break Ending::Exited(status),
            () = sleep_until(deadline) => break Ending::TimedOut,
            () = ctx.cancel.cancelled() => break Ending::Cancelled,
        }
    };
    if !matches!(ending, Ending::Exited(_)) {
        terminate(&mut child, &group, &mut pipes, &mut out).await;
    }
    drain(&mut pipes, &mut out).await;
    Ok(Finished { ending, output: out })
    // `group` drops here, SIGKILLs any background job still in it and removes its record.
}

/// `bash -lc <job.command>` [`prepare`]d, in `job.cwd` with `job.env`, stdin `/dev/null`;
/// the caller sets stdout and stderr.
fn bash(job: &Job<'_>, ctx: &ToolContext) -> Command {
    let mut command = Command::new("bash");
    prepare(&mut command, ctx);
    command.arg("-lc").arg(job.command).envs(job.env.iter().copied()).current_dir(job.cwd).stdin(Stdio::null());
    command
}

/// A command started by [`spawn_logged`]: its output goes to a file, not to the caller.
pub struct Logged {
    child: Child,
    group: Group,
}

/// Starts `job` as [`run`] does (`bash -lc`, a process group of its own, recorded under
/// `ctx.running_dir`), with stdout and stderr appended to `log`: idle autonomy's intents
/// (docs/design.md §13), whose lease needs the group's id while the command runs. `job.timeout` and
/// `job.output_limit` are not used; [`Logged::wait`] takes the timeout.
///
/// Errors: [`StartError`], bash could not be started, or `log` could not be shared with it.
pub fn spawn_logged(job: &Job<'_>, ctx: &ToolContext, log: std::fs::File) -> Result<Logged, StartError> {
    let err = log.try_clone().map_err(StartError::ShareLog)?;
    let mut child = bash(job, ctx).stdout(Stdio::from(log)).stderr(Stdio::from(err)).spawn().map_err(StartError::Spawn)?;
    let group = Group::of(&mut child, ctx, job.label).ok_or(StartError::NoPid)?;
    Ok(Logged { child, group })
}

impl Logged {
    /// The group's id (its leader's pid).
    pub fn pgid(&self) -> i32 {
        self.group.id
    }

    /// Waits for bash to exit, `timeout` to pass or `stop` to be cancelled; on the last two the
    /// group gets SIGTERM, then SIGKILL after [`TERM_GRACE`]. Whatever is left of the group when
    /// this returns is killed (as [`run`] does).
    pub async fn wait(mut self, timeout: Duration, stop: &tokio_util::sync::CancellationToken) -> Ending {
        let ending = tokio::select! {
            status = self.child.wait() => Ending::Exited(status),
            () = sleep(timeout) => Ending::TimedOut,
            () = stop.cancelled() => Ending::Cancelled,
        };
        if !matches!(ending, Ending::Exited(_)) {
            let mut no_pipes = Pipes { stdout: None, stderr: None, buf_out: Vec::new(), buf_err: Vec::new() };
            terminate(&mut self.child, &self.group, &mut no_pipes, &mut Collector::new(0)).await;
        }
        ending
    }
}

/// Prepares `command` as every process a tool or hook starts (the runtime's `hooks::runner` too): the
/// variables of [`ToolContext::hidden_env`] removed, [`ToolContext::env`] set, and a process
/// group of its own (the child is its leader) so [`Group`] can stop all of it.
pub fn prepare(command: &mut Command, ctx: &ToolContext) {
    for name in &ctx.hidden_env {
        command.env_remove(name);
    }
    command.envs(ctx.env.iter().map(|(k, v)| (k, v))).process_group(0);
}

/// The job's process group. Dropping it SIGKILLs whatever is still in the group, which reaps
/// background jobs on return and also covers the caller dropping `run` mid-flight; then the
/// record and the watchdog's entry drop, so the group is covered for as long as any of it may
/// be alive.
pub struct Group {
    id: libc::pid_t,
    _record: Option<Recorded>,
    _watched: Option<Watched>,
}

impl Group {
    /// The group of `child`, spawned from a command [`prepare`]d, recorded under
    /// [`ToolContext::running_dir`] as `label`. `None` (the child killed) when it has no pid.
    pub fn of(child: &mut Child, ctx: &ToolContext, label: &str) -> Option<Self> {
        // process_group(0) makes the child the leader, so its pid is the group id. A pid of 0 or
        // 1 must never reach kill(-pid): that would signal our own group or every process we may
        // signal.
        let Some(id) = child.id().and_then(|id| libc::pid_t::try_from(id).ok()).filter(|&id| id > 1) else {
            // Unreachable in practice (the child is not reaped yet), but never leave it running.
            let _ = child.start_kill();
            return None;
        };
        // Between the spawn and these a crash would leave the group uncovered: the id exists
        // only once the process does. The watchdog first, so a record on disk means it knows.
        let watched = Watched::new(id);
        let record = ctx.running_dir.as_deref().and_then(|dir| match Recorded::write(dir, id, label) {
            Ok(record) => Some(record),
            Err(e) => {
                // The job still runs; only a crash during it would leave the group unreaped.
                tracing::warn!(error = %e, "cannot record the tool's process group");
                None
            }
        });
        Some(Self { id, _record: record, _watched: watched })
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) has no memory effects; the id is > 1, so -id names only this group.
        // ESRCH (group already empty) is the outcome we want, so the result is not checked.
        unsafe {
            libc::kill(-self.id, signal);
        }
    }

    fn any_alive(&self) -> bool {
        // SAFETY: as in `signal`; signal 0 only checks for existence.
        unsafe { libc::kill(-self.id, 0) == 0 }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
    }
}

/// SIGTERM to the group; SIGKILL once [`TERM_GRACE`] has passed with any member alive. Keeps
/// reading output meanwhile so a program that prints while shutting down cannot block on a pipe.
async fn terminate(child: &mut Child, group: &Group, pipes: &mut Pipes, out: &mut Collector) {
    group.signal(libc::SIGTERM);
    let give_up = Instant::now() + TERM_GRACE;
    let mut bash_exited = false;
    loop {
        if bash_exited && !group.any_alive() {
            return;
        }
        tokio::select! {
            () = pipes.read_some(out), if pipes.is_open() => {}
            _ = child.wait(), if !bash_exited => bash_exited = true,
            () = sleep(GROUP_POLL), if bash_exited => {}
            () = sleep_until(give_up) => break,
        }
    }
    group.signal(libc::SIGKILL);
    // Reap bash; after SIGKILL this returns at once, and its status is not reported anyway.
    let _ = child.wait().await;
}

/// Reads what is already on its way, without waiting for an EOF that a background job holding
/// the pipes may never send.
async fn drain(pipes: &mut Pipes, out: &mut Collector) {
    let until = Instant::now() + DRAIN_GRACE;
    while pipes.is_open() {
        tokio::select! {
            () = pipes.read_some(out) => {}
            () = sleep_until(until) => break,
        }
    }
}

/// The child's stdout and stderr; a pipe becomes `None` at EOF or on a read error.
struct Pipes {
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    // On the heap: inside the future they would make every `run` future 16 KiB larger.
    buf_out: Vec<u8>,
    buf_err: Vec<u8>,
}

impl Pipes {
    fn take_from(child: &mut Child) -> Self {
        Self { stdout: child.stdout.take(), stderr: child.stderr.take(), buf_out: vec![0; READ_CHUNK], buf_err: vec![0; READ_CHUNK] }
    }

    fn is_open(&self) -> bool {
        self.stdout.is_some() || self.stderr.is_some()
    }

    /// Appends one chunk from whichever pipe is ready first. Cancel-safe: a chunk is appended in
    /// the same poll that reads it. Pending forever when both pipes are closed.
    async fn read_some(&mut self, out: &mut Collector) {
        tokio::select! {
            read = read_from(&mut self.stdout, &mut self.buf_out) => {
                accept(read, &mut self.stdout, &self.buf_out, out);
            }
            read = read_from(&mut self.stderr, &mut self.buf_err) => {
                accept(read, &mut self.stderr, &self.buf_err, out);
            }
        }
    }
}

async fn read_from<R: AsyncRead + Unpin>(pipe: &mut Option<R>, buf: &mut [u8]) -> io::Result<usize> {
    match pipe {
        Some(pipe) => pipe.read(buf).await,
        None => std::future::pending().await,
    }
}

fn accept<R>(read: io::Result<usize>, pipe: &mut Option<R>, buf: &[u8], out: &mut Collector) {
    match read {
        Ok(n) if n > 0 => out.push(&buf[..n]),
        // EOF, or an error after which the pipe cannot be trusted: stop reading it.
        _ => *pipe = None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cicy_test_wait::{appears_within, Fifo};

    fn context(workspace: &Path, running_dir: &Path) -> ToolContext {
        ToolContext { running_dir: Some(running_dir.into()), ..ToolContext::for_tests(workspace) }
    }

    fn job<'a>(command: &'a str, cwd: &'a Path, env: &'a [(&'a str, &'a str)]) -> Job<'a> {
        Job { command, cwd, env, timeout: Duration::from_secs(20), label: "test: job", output_limit: 1000 }
    }

    fn names(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir).map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default()
    }

    #[tokio::test]
    async fn the_group_is_recorded_while_it_runs_and_forgotten_when_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let running = dir.path().join(".cicy/running");
        let ctx = context(dir.path(), &running);
        // The command says its pid, then runs until the test has read the record.
        let (started, go) = (Fifo::new(dir.path().join("started")), Fifo::new(dir.path().join("go")));
        let command = "echo $$ > started; read -r line < go";
        let while_running = async {
            let pid = started.read().await;
            // Written right after the spawn, beside the running bash.
            let path = running.join(format!("{}.json", pid.trim()));
            assert!(appears_within(&path, Duration::from_secs(20)).await, "no record {}", path.display());
            let record: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            go.write("done\n").await;
            (pid, record)
        };
        let job = job(command, dir.path(), &[]);
        let (finished, (pid, record)) = tokio::join!(run(&job, &ctx), while_running);
        let (status, failed) = finished.unwrap().ending.describe(Duration::from_secs(20));
        assert_eq!((status.as_str(), failed), ("exit code: 0", false));
        assert_eq!(record["label"], "test: job");
        assert_eq!(record["pgid"].to_string(), pid.trim());
        assert!(record["start_time"].as_u64().is_some(), "{record}");
        assert_eq!(names(&running), Vec::<String>::new());
    }

    #[tokio::test]
    async fn env_is_set_for_the_child_and_hidden_env_removed() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = context(dir.path(), &dir.path().join("r"));
        ctx.hidden_env = vec!["CARGO_PKG_NAME".into()];
        ctx.env = vec![("CICY_AGENT_ID", "w-7".into()), ("CICY_TEST_VALUE", "overridden by the job".into())];
        let env = [("CICY_TEST_VALUE", "it's $(here)")];
        let script = "printf '%s|%s|%s' \"$CICY_TEST_VALUE\" \"${CARGO_PKG_NAME-unset}\" \"$CICY_AGENT_ID\"";
        let finished = run(&job(script, dir.path(), &env), &ctx).await.unwrap();
        assert_eq!(finished.output.finish("exit code: 0", 1000), "it's $(here)|unset|w-7\nexit code: 0");
    }
}
