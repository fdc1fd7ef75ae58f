//! The `shell` tool: run one bash command for the model and report what it printed.
//!
//! Owns process spawning, process-group signalling, timeouts and output capping for one call.
//! It must not touch the turn loop, the conversation, events or the terminal: it turns a
//! `{command, cwd?, timeout?}` input into a [`ToolOutput`] and leaves nothing running behind.
//!
//! Lifecycle of a call:
//! - `bash -lc <command>` starts as the leader of a new process group, stdin `/dev/null`, stdout
//!   and stderr piped and read concurrently into one buffer in arrival order.
//! - The call ends when bash (the main process) exits, not when the pipes close, so a background
//!   child that keeps them open (`sleep 100 & echo hi`) cannot stall it; output already buffered
//!   is drained for at most [`DRAIN_GRACE`].
//! - On timeout or cancel the group gets SIGTERM, then SIGKILL after [`TERM_GRACE`] if any member
//!   is still alive.
//! - Whatever is left of the group when the call returns (background jobs) is killed with
//!   SIGKILL, as codex-style runtimes do: a tool call must not leak processes into the agent's
//!   life, and a cancelled turn must really stop. A command that has to outlive the call detaches
//!   itself into its own session (`setsid server &`).

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::time::{sleep, sleep_until, Instant};

use super::{ToolContext, ToolOutput};

pub const NAME: &str = "shell";

/// Upper bound, in bytes, of a result's `content`: longer output keeps its head and its tail.
pub const OUTPUT_CAP_BYTES: usize = 12_000;

const DEFAULT_TIMEOUT_SECS: u64 = 120;
const MAX_TIMEOUT_SECS: u64 = 1800;
/// Between SIGTERM and SIGKILL: long enough for a well-behaved program to clean up.
const TERM_GRACE: Duration = Duration::from_secs(2);
/// After bash exits, how long to keep reading output that is already on its way.
const DRAIN_GRACE: Duration = Duration::from_millis(200);
/// How often to look whether a terminated group is empty yet.
const GROUP_POLL: Duration = Duration::from_millis(50);
const READ_CHUNK: usize = 8192;

/// The tool description shown to the model.
pub fn description() -> &'static str {
    "Run a bash command (`bash -lc`) and return its combined stdout and stderr followed by a final \
     line `exit code: N`. Runs in the agent's workspace unless `cwd` is given; stdin is empty, so \
     interactive programs will not wait for input. Default timeout 120 s, at most 1800 s. Output \
     longer than 12000 bytes keeps its beginning and its end. Background processes are killed \
     when the command returns; detach with `setsid` only if something must keep running."
}

/// JSON Schema of the input: `command` (string, required), `cwd` (string: a directory, relative
/// to the workspace unless absolute), `timeout` (integer seconds, 1..=1800; larger is clamped).
pub fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The bash command line to run."},
            "cwd": {
                "type": "string",
                "description": "Working directory, relative to the workspace unless absolute. Default: the workspace."
            },
            "timeout": {
                "type": "integer",
                "description": "Seconds before the command is stopped. Default 120, at most 1800."
            }
        },
        "required": ["command"]
    })
}

/// Runs `input.command` and returns its output (at most [`OUTPUT_CAP_BYTES`] bytes, non-UTF-8
/// bytes replaced) with a final status line: `exit code: N`, `killed by signal N`,
/// `timed out after N s` or `cancelled by user`. `is_error` is set for bad input, a spawn
/// failure, a non-zero exit, a signal, a timeout or a cancel.
pub async fn run(input: &Value, ctx: &ToolContext) -> ToolOutput {
    let request = match Request::parse(input, &ctx.workspace) {
        Ok(request) => request,
        Err(message) => return ToolOutput::error(message),
    };
    if ctx.cancel.is_cancelled() {
        return ToolOutput::error("cancelled by user");
    }
    let mut command = Command::new("bash");
    for name in &ctx.hidden_env {
        command.env_remove(name);
    }
    let mut child = match command
        .arg("-lc")
        .arg(&request.command)
        .current_dir(&request.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
    {
        Ok(child) => child,
        Err(err) => return ToolOutput::error(format!("failed to start bash: {err}")),
    };
    // process_group(0) makes bash the leader, so its pid is the group id. A pid of 0 or 1 must
    // never reach kill(-pid): that would signal our own group or every process we may signal.
    let Some(group) = child
        .id()
        .and_then(|id| libc::pid_t::try_from(id).ok())
        .filter(|&id| id > 1)
    else {
        // Unreachable in practice (the child is not reaped yet), but never leave it running.
        let _ = child.start_kill();
        return ToolOutput::error("failed to start bash: no process id");
    };
    let group = Group(group);
    let mut pipes = Pipes::take_from(&mut child);
    let mut out = Collector::new(OUTPUT_CAP_BYTES);

    let deadline = Instant::now() + Duration::from_secs(request.timeout_secs);
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

    let (status, is_error) = ending.describe(request.timeout_secs);
    let content = out.finish(&status, OUTPUT_CAP_BYTES);
    ToolOutput { content, is_error }
    // `group` drops here and SIGKILLs any background job still in it.
}

/// Caps `s` at `cap` bytes: unchanged when it fits, else its head, a marker line
/// `\n[… N bytes omitted …]\n` and its tail, cut on UTF-8 character boundaries, where N counts
/// the bytes left out. The tail gets any byte the head gives up, so the end of the output (the
/// status line) survives. The result is at most `cap` bytes whenever `cap` can hold the marker;
/// for a smaller `cap` it is the marker alone.
pub fn cap_output(s: &str, cap: usize) -> String {
    if s.len() <= cap {
        return s.to_owned();
    }
    elide(s, s, s.len(), cap)
}

/// Keeps a prefix of `head_src` and a suffix of `tail_src` around a marker, where `head_src` is a
/// prefix and `tail_src` a suffix of a `total`-byte text that no longer fits in `cap`.
fn elide(head_src: &str, tail_src: &str, total: usize, cap: usize) -> String {
    // The marker for `total` is at least as long as the one actually written (omitted ≤ total).
    let keep = cap.saturating_sub(marker(total).len());
    let head_end = floor_char_boundary(head_src, keep / 2);
    let tail_want = keep - head_end;
    let tail_start = ceil_char_boundary(tail_src, tail_src.len().saturating_sub(tail_want));
    let tail = &tail_src[tail_start..];
    let omitted = total - head_end - tail.len();
    let mut capped = String::with_capacity(cap);
    capped.push_str(&head_src[..head_end]);
    capped.push_str(&marker(omitted));
    capped.push_str(tail);
    capped
}

fn marker(omitted: usize) -> String {
    format!("\n[… {omitted} bytes omitted …]\n")
}

fn floor_char_boundary(s: &str, index: usize) -> usize {
    let mut index = index.min(s.len());
    while !s.is_char_boundary(index) {
        index -= 1;
    }
    index
}

fn ceil_char_boundary(s: &str, index: usize) -> usize {
    let mut index = index.min(s.len());
    while !s.is_char_boundary(index) {
        index += 1;
    }
    index
}

/// A validated input.
struct Request {
    command: String,
    cwd: PathBuf,
    timeout_secs: u64,
}

impl Request {
    /// Errors are complete `tool_result` texts naming the offending field.
    fn parse(input: &Value, workspace: &Path) -> Result<Self, String> {
        let command = string_field(input, "command")?
            .ok_or("invalid input: \"command\" is required (a bash command line)")?;
        if command.trim().is_empty() {
            return Err("invalid input: \"command\" must not be empty".into());
        }
        let (cwd, label) = match string_field(input, "cwd")? {
            Some(cwd) => (workspace.join(cwd), "\"cwd\""),
            None => (workspace.to_path_buf(), "workspace"),
        };
        if !cwd.is_dir() {
            let problem = if cwd.exists() {
                "is not a directory"
            } else {
                "does not exist"
            };
            return Err(format!(
                "invalid input: {label} {problem}: {}",
                cwd.display()
            ));
        }
        let timeout_secs = parse_timeout(input.get("timeout"))?;
        Ok(Self {
            command: command.to_owned(),
            cwd,
            timeout_secs,
        })
    }
}

/// An optional string field; absent and null are both `None`.
fn string_field<'a>(input: &'a Value, name: &str) -> Result<Option<&'a str>, String> {
    match input.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(format!(
            "invalid input: \"{name}\" must be a string, got {other}"
        )),
    }
}

/// Seconds from the `timeout` field: absent or null means the default, above the maximum is
/// clamped, anything but a positive JSON integer is an error.
fn parse_timeout(value: Option<&Value>) -> Result<u64, String> {
    match value {
        None | Some(Value::Null) => Ok(DEFAULT_TIMEOUT_SECS),
        Some(got) => match got.as_u64() {
            Some(secs) if secs > 0 => Ok(secs.min(MAX_TIMEOUT_SECS)),
            _ => Err(format!(
                "invalid input: \"timeout\" must be a positive whole number of seconds, got {got}"
            )),
        },
    }
}

/// How the wait for bash ended.
enum Ending {
    Exited(io::Result<ExitStatus>),
    TimedOut,
    Cancelled,
}

impl Ending {
    /// The final status line and whether the call failed.
    fn describe(&self, timeout_secs: u64) -> (String, bool) {
        match self {
            Ending::Exited(Ok(status)) => match (status.code(), status.signal()) {
                (Some(code), _) => (format!("exit code: {code}"), code != 0),
                (None, Some(signal)) => (format!("killed by signal {signal}"), true),
                (None, None) => (format!("ended with {status}"), true),
            },
            Ending::Exited(Err(err)) => (format!("could not wait for the command: {err}"), true),
            Ending::TimedOut => (format!("timed out after {timeout_secs} s"), true),
            Ending::Cancelled => ("cancelled by user".to_owned(), true),
        }
    }
}

/// The command's process group. Dropping it SIGKILLs whatever is still in the group, which
/// reaps background jobs on return and also covers the caller dropping `run` mid-flight.
struct Group(libc::pid_t);

impl Group {
    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) has no memory effects; the id is > 1, so -id names only this group.
        // ESRCH (group already empty) is the outcome we want, so the result is not checked.
        unsafe {
            libc::kill(-self.0, signal);
        }
    }

    fn any_alive(&self) -> bool {
        // SAFETY: as in `signal`; signal 0 only checks for existence.
        unsafe { libc::kill(-self.0, 0) == 0 }
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
        Self {
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            buf_out: vec![0; READ_CHUNK],
            buf_err: vec![0; READ_CHUNK],
        }
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

async fn read_from<R: AsyncRead + Unpin>(
    pipe: &mut Option<R>,
    buf: &mut [u8],
) -> io::Result<usize> {
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

/// The combined output in bounded memory: the first `limit` bytes, the last `limit` to
/// `2 × limit` bytes, and the count of bytes dropped between them, so a command that prints
/// gigabytes costs at most about three times `limit` and still yields what [`cap_output`] would.
struct Collector {
    head: Vec<u8>,
    tail: Vec<u8>,
    gap: usize,
    limit: usize,
}

impl Collector {
    fn new(limit: usize) -> Self {
        Self {
            head: Vec::new(),
            tail: Vec::new(),
            gap: 0,
            limit,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        let to_head = chunk.len().min(self.limit - self.head.len());
        self.head.extend_from_slice(&chunk[..to_head]);
        self.tail.extend_from_slice(&chunk[to_head..]);
        // Trim only past twice the limit, so trimming costs amortised O(1) per byte.
        if self.tail.len() > 2 * self.limit {
            let excess = self.tail.len() - self.limit;
            self.tail.drain(..excess);
            self.gap += excess;
        }
    }

    /// The output decoded lossily, then `status` on a line of its own, capped at `cap` bytes
    /// (`cap` ≤ the collector's `limit`, or the dropped middle would show).
    fn finish(self, status: &str, cap: usize) -> String {
        if self.gap == 0 {
            let mut bytes = self.head;
            bytes.extend_from_slice(&self.tail);
            let text = with_status(String::from_utf8_lossy(&bytes).into_owned(), status);
            return cap_output(&text, cap);
        }
        // Both ends next to the gap may hold part of a character; count those bytes as omitted
        // rather than let lossy decoding turn them into replacement characters.
        let head_cut = self
            .head
            .utf8_chunks()
            .last()
            .map_or(0, |chunk| chunk.invalid().len());
        let tail_cut = self
            .tail
            .iter()
            .take(3)
            .take_while(|&&byte| byte & 0xC0 == 0x80)
            .count();
        let head = String::from_utf8_lossy(&self.head[..self.head.len() - head_cut]);
        let tail = String::from_utf8_lossy(&self.tail[tail_cut..]).into_owned();
        let tail = with_status(tail, status);
        let total = head.len() + head_cut + self.gap + tail_cut + tail.len();
        elide(&head, &tail, total, cap)
    }
}

fn with_status(mut text: String, status: &str) -> String {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(status);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_util::sync::CancellationToken;

    fn context(workspace: &Path) -> ToolContext {
        let cancel = CancellationToken::new();
        ToolContext {
            workspace: workspace.into(),
            skills_dir: workspace.join("skills"),
            cancel,
            hidden_env: vec!["CICY_TEST_SECRET".to_string()],
        }
    }

    /// Runs the tool, failing the test instead of hanging it if the call does not return.
    async fn shell(input: Value, ctx: &ToolContext) -> ToolOutput {
        let call = tokio::time::timeout(Duration::from_secs(20), run(&input, ctx));
        call.await
            .unwrap_or_else(|_| panic!("shell did not return within 20 s for {input}"))
    }

    /// Whether process `pid` is still running 5 s from now (a zombie counts as dead).
    async fn survives(pid: &str) -> bool {
        for _ in 0..100 {
            match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                Ok(stat) if !stat.rsplit(')').next().is_some_and(|s| s.starts_with(" Z")) => {
                    sleep(Duration::from_millis(50)).await;
                }
                _ => return false,
            }
        }
        true
    }

    fn output(content: &str, is_error: bool) -> ToolOutput {
        ToolOutput {
            content: content.to_owned(),
            is_error,
        }
    }

    #[test]
    fn cap_output_leaves_text_that_fits_unchanged() {
        assert_eq!(cap_output("", 0), "");
        assert_eq!(cap_output("", 10), "");
        assert_eq!(cap_output("abcdefghij", 10), "abcdefghij");
        assert_eq!(cap_output("éé€😀", 11), "éé€😀");
    }

    #[test]
    fn cap_output_keeps_head_and_tail_around_the_marker() {
        let digits = "0123456789".repeat(10);
        // The marker for 100 bytes is 29 bytes long, so a cap of 39 keeps 5 + 5 bytes.
        assert_eq!(
            cap_output(&digits, 39),
            "01234\n[… 90 bytes omitted …]\n56789"
        );
        assert_eq!(
            cap_output(&digits, 40),
            "01234\n[… 89 bytes omitted …]\n456789"
        );
        // One byte over the cap is enough to elide; a 2-digit total makes a 28-byte marker.
        assert_eq!(
            cap_output(&"x".repeat(40), 39),
            "xxxxx\n[… 29 bytes omitted …]\nxxxxxx"
        );
    }

    #[test]
    fn cap_output_cuts_multibyte_characters_only_on_boundaries() {
        // Cap 39 on 100+ bytes keeps 10: the head rounds 5 down, the tail takes the rest,
        // rounding its start up.
        assert_eq!(
            cap_output(&"é".repeat(50), 39),
            "éé\n[… 90 bytes omitted …]\nééé"
        );
        assert_eq!(
            cap_output(&"€".repeat(40), 39),
            "€\n[… 111 bytes omitted …]\n€€"
        );
        assert_eq!(
            cap_output(&"😀".repeat(25), 39),
            "😀\n[… 92 bytes omitted …]\n😀"
        );
        let text = format!("{}€€", "x".repeat(94));
        assert_eq!(cap_output(&text, 39), "xxxxx\n[… 92 bytes omitted …]\n€");
    }

    #[test]
    fn cap_output_below_the_marker_size_is_the_marker_alone() {
        assert_eq!(cap_output("abc", 0), "\n[… 3 bytes omitted …]\n");
        assert_eq!(cap_output("abcdef", 5), "\n[… 6 bytes omitted …]\n");
    }

    #[test]
    fn cap_output_fills_every_cap_with_a_prefix_and_a_suffix() {
        let text = "aé€😀\nstderr: boom\n".repeat(20);
        let marker_len = marker(text.len()).len();
        for cap in marker_len..text.len() {
            let capped = cap_output(&text, cap);
            let (head, rest) = capped
                .split_once("\n[… ")
                .unwrap_or_else(|| panic!("{capped}"));
            let (omitted, tail) = rest.split_once(" bytes omitted …]\n").unwrap_or_default();
            let omitted: usize = omitted.parse().unwrap_or_else(|_| panic!("{capped}"));
            assert!(
                text.starts_with(head) && text.ends_with(tail),
                "cap {cap}: {capped}"
            );
            assert_eq!(head.len() + omitted + tail.len(), text.len(), "cap {cap}");
            // At most 3 bytes are lost to a character boundary, and nothing else is wasted.
            assert!(capped.len() <= cap && head.len() + tail.len() + 3 >= cap - marker_len);
        }
    }

    #[test]
    fn collector_gives_what_cap_output_gives_for_the_whole_text() {
        let whole: Vec<u8> = (0..5000)
            .flat_map(|i| format!("line {i}: é€\n").into_bytes())
            .collect();
        let text = format!("{}exit code: 0", String::from_utf8_lossy(&whole));
        for chunk in [1, 7, 100, 4096, whole.len()] {
            for limit in [40, 1000, 100_000] {
                let mut collector = Collector::new(limit);
                whole.chunks(chunk).for_each(|part| collector.push(part));
                let capped = collector.finish("exit code: 0", limit);
                assert_eq!(
                    capped,
                    cap_output(&text, limit),
                    "chunk {chunk}, limit {limit}"
                );
            }
        }
    }

    #[test]
    fn collector_decodes_a_character_split_across_chunks_and_bad_bytes_lossily() {
        let mut collector = Collector::new(100);
        collector.push(b"caf\xc3");
        collector.push(b"\xa9 \xff\xfe!");
        assert_eq!(
            collector.finish("exit code: 1", 100),
            "café \u{fffd}\u{fffd}!\nexit code: 1"
        );
        assert_eq!(
            Collector::new(100).finish("exit code: 0", 100),
            "exit code: 0"
        );
    }

    #[test]
    fn timeout_defaults_clamps_and_rejects_non_positive_or_non_integer_values() {
        assert_eq!(parse_timeout(None), Ok(120));
        assert_eq!(parse_timeout(Some(&Value::Null)), Ok(120));
        for (secs, clamped) in [(1, 1), (1800, 1800), (99_999, 1800), (u64::MAX, 1800)] {
            assert_eq!(parse_timeout(Some(&json!(secs))), Ok(clamped));
        }
        for bad in [
            json!(0),
            json!(-5),
            json!(1.5),
            json!(10.0),
            json!("10"),
            json!(true),
        ] {
            let expected = format!(
                "invalid input: \"timeout\" must be a positive whole number of seconds, got {bad}"
            );
            assert_eq!(parse_timeout(Some(&bad)), Err(expected));
        }
    }

    #[tokio::test]
    async fn bad_input_is_an_error_result_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        std::fs::write(dir.path().join("file"), "").unwrap();
        let path = |name: &str| dir.path().join(name).display().to_string();
        let required = "\"command\" is required (a bash command line)";
        let cases = [
            (json!({}), required.to_owned()),
            (json!("true"), required.to_owned()),
            (json!({"command": null}), required.to_owned()),
            (
                json!({"command": 5}),
                "\"command\" must be a string, got 5".to_owned(),
            ),
            (
                json!({"command": " \n"}),
                "\"command\" must not be empty".to_owned(),
            ),
            (
                json!({"command": "true", "cwd": 1}),
                "\"cwd\" must be a string, got 1".to_owned(),
            ),
            (
                json!({"command": "true", "cwd": "no"}),
                format!("\"cwd\" does not exist: {}", path("no")),
            ),
            (
                json!({"command": "1", "cwd": "file"}),
                format!("\"cwd\" is not a directory: {}", path("file")),
            ),
            (
                json!({"command": "true", "timeout": 0}),
                "\"timeout\" must be a positive whole number of seconds, got 0".to_owned(),
            ),
        ];
        for (input, message) in cases {
            assert_eq!(
                shell(input, &ctx).await,
                output(&format!("invalid input: {message}"), true)
            );
        }
        let gone = format!("invalid input: workspace does not exist: {}", path("gone"));
        let input = json!({"command": "true"});
        assert_eq!(
            shell(input, &context(&dir.path().join("gone"))).await,
            output(&gone, true)
        );
    }

    #[tokio::test]
    async fn hidden_env_vars_do_not_reach_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = context(dir.path());
        let input = serde_json::json!({"command": "echo \"[${CARGO_PKG_NAME-unset}]\""});
        assert_eq!(run(&input, &ctx).await.content, "[cicy]\nexit code: 0");
        ctx.hidden_env = vec!["CARGO_PKG_NAME".to_string()];
        assert_eq!(run(&input, &ctx).await.content, "[unset]\nexit code: 0");
    }

    #[tokio::test]
    async fn output_and_exit_status_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let leader = "test \"$(cut -d' ' -f5 /proc/$$/stat)\" = $$ && echo leader";
        let cases = [
            ("echo hello", "hello\nexit code: 0", false),
            ("printf hi", "hi\nexit code: 0", false),
            ("true", "exit code: 0", false),
            ("echo no >&2; exit 3", "no\nexit code: 3", true),
            ("kill -9 $$", "killed by signal 9", true),
            // stdin is /dev/null, so `cat` ends at once instead of waiting for input.
            ("cat", "exit code: 0", false),
            (
                "printf 'a\\xff\\xfeb'",
                "a\u{fffd}\u{fffd}b\nexit code: 0",
                false,
            ),
            (leader, "leader\nexit code: 0", false),
        ];
        for (command, content, is_error) in cases {
            assert_eq!(
                shell(json!({"command": command}), &ctx).await,
                output(content, is_error)
            );
        }
    }

    #[tokio::test]
    async fn stdout_and_stderr_are_combined_in_arrival_order() {
        let dir = tempfile::tempdir().unwrap();
        let command = "echo 1; sleep 0.5; echo 2 >&2; sleep 0.5; echo 3; sleep 0.5; echo 4 >&2";
        let out = shell(json!({"command": command}), &context(dir.path())).await;
        assert_eq!(out, output("1\n2\n3\n4\nexit code: 0", false));
    }

    #[tokio::test]
    async fn cwd_defaults_to_the_workspace_and_resolves_relative_paths_against_it() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().canonicalize().unwrap();
        std::fs::create_dir(workspace.join("sub")).unwrap();
        let ctx = context(&workspace);
        let sub = workspace.join("sub");
        for (cwd, expected) in [
            (json!(null), &*workspace),
            (json!("sub"), &sub),
            (json!("/"), Path::new("/")),
        ] {
            let out = shell(json!({"command": "pwd", "cwd": cwd}), &ctx).await;
            assert_eq!(
                out,
                output(&format!("{}\nexit code: 0", expected.display()), false)
            );
        }
    }

    #[tokio::test]
    async fn long_output_is_capped_keeping_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        // The pause keeps the two pipes' order unambiguous, as in the arrival-order test.
        let command = "head -c 50000 /dev/zero | tr '\\0' a; echo; sleep 0.5; echo tail >&2";
        let out = shell(json!({"command": command}), &ctx).await;
        let whole = format!("{}\ntail\nexit code: 0", "a".repeat(50_000));
        assert_eq!(out, output(&cap_output(&whole, OUTPUT_CAP_BYTES), false));
        assert!(out.content.ends_with("aaa\ntail\nexit code: 0"));
        assert!(out.content.len() <= OUTPUT_CAP_BYTES);
        // Far more than the collector keeps in memory.
        let out = shell(json!({"command": "yes abcdefghi | head -c 2000000"}), &ctx).await;
        let whole = format!("{}exit code: 0", "abcdefghi\n".repeat(200_000));
        assert_eq!(out, output(&cap_output(&whole, OUTPUT_CAP_BYTES), false));
    }

    #[tokio::test]
    async fn a_background_child_holding_the_pipes_neither_stalls_the_call_nor_survives_it() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let out = shell(json!({"command": "sleep 30 & echo hi"}), &ctx).await;
        assert_eq!(out, output("hi\nexit code: 0", false));
        let out = shell(json!({"command": "sleep 30 & echo $!"}), &ctx).await;
        let pid = out
            .content
            .strip_suffix("\nexit code: 0")
            .unwrap_or_else(|| panic!("{out:?}"));
        assert!(!survives(pid).await, "background sleep {pid} survived");
    }

    #[tokio::test]
    async fn a_timeout_stops_the_group_and_keeps_the_output_so_far() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let input = json!({"command": "echo before; sleep 30; echo after", "timeout": 2});
        assert_eq!(
            shell(input, &ctx).await,
            output("before\ntimed out after 2 s", true)
        );
        // SIGTERM is ignored here (and by the inherited `sleep`), so only the SIGKILL ends it.
        let input = json!({"command": "trap '' TERM; sleep 30 & echo $!; wait", "timeout": 2});
        let out = shell(input, &ctx).await;
        let pid = out
            .content
            .strip_suffix("\ntimed out after 2 s")
            .unwrap_or_else(|| panic!("{out:?}"));
        assert!(out.is_error && pid.parse::<u32>().is_ok(), "{out:?}");
        assert!(!survives(pid).await, "sleep {pid} survived SIGKILL");
    }

    #[tokio::test]
    async fn cancel_stops_a_running_command_and_a_cancelled_call_starts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let (token, started) = (ctx.cancel.clone(), dir.path().join("started"));
        tokio::spawn(async move {
            while !started.exists() {
                sleep(Duration::from_millis(20)).await;
            }
            token.cancel();
        });
        let input = json!({"command": "echo started; touch started; sleep 30"});
        assert_eq!(
            shell(input, &ctx).await,
            output("started\ncancelled by user", true)
        );
        let input = json!({"command": "touch again"});
        assert_eq!(shell(input, &ctx).await, output("cancelled by user", true));
        assert!(!dir.path().join("again").exists());
    }
}
