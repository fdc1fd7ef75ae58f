//! The `shell` tool: run one bash command for the model and report what it printed.
//!
//! Owns the tool's description, input schema and input validation, and the wording of its
//! result. Running the command (process group, timeout, cancel, capture) is `super::process`;
//! output capping and decoding is `super::output`. It must not touch the turn loop, the
//! conversation, events or the terminal: it turns a `{command, cwd?, timeout?}` input into a
//! [`ToolOutput`] and leaves nothing running behind.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::process::{self, Job};
use super::{ToolContext, ToolOutput};

pub const NAME: &str = "shell";

/// Upper bound, in bytes, of a result's `content`: longer output keeps its head and its tail.
pub const OUTPUT_CAP_BYTES: usize = 12_000;

/// `timeout` when the input gives none, in seconds (as [`description`] tells the model); also
/// the timeout of every custom tool.
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;
/// Largest `timeout`, in seconds; larger values are clamped.
const MAX_TIMEOUT_SECS: u64 = 1800;

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

/// The `shell` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shell;

crate::module_tool!(Shell);

/// Runs `input.command` and returns its output (at most [`OUTPUT_CAP_BYTES`] bytes, non-UTF-8
/// bytes replaced and counted in a note line) with a final status line: `exit code: N`,
/// `killed by signal N`, `timed out after N s` or `cancelled by user`. `is_error` is set for bad
/// input, a spawn failure, a non-zero exit, a signal, a timeout or a cancel.
pub async fn run(input: &Value, ctx: &ToolContext) -> ToolOutput {
    let request = match Request::parse(input, &ctx.workspace) {
        Ok(request) => request,
        Err(message) => return ToolOutput::error(message),
    };
    let label = format!("{NAME}: {}", request.command);
    let job = Job {
        command: &request.command,
        cwd: &request.cwd,
        env: &[],
        timeout: Duration::from_secs(request.timeout_secs),
        label: &label,
        output_limit: OUTPUT_CAP_BYTES,
    };
    run_job(&job, ctx).await
}

/// Runs `job` unless the turn is already cancelled, and words its result as described at
/// [`run`]; shared with the custom tools, which are bash commands too.
pub(crate) async fn run_job(job: &Job<'_>, ctx: &ToolContext) -> ToolOutput {
    if ctx.cancel.is_cancelled() {
        return ToolOutput::error("cancelled by user");
    }
    match process::run(job, ctx).await {
        Ok(finished) => {
            let (status, is_error) = finished.ending.describe(job.timeout);
            ToolOutput { content: finished.output.finish(&status, OUTPUT_CAP_BYTES), is_error }
        }
        Err(e) => ToolOutput::error(e.to_string()),
    }
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
        let command = string_field(input, "command")?.ok_or("invalid input: \"command\" is required (a bash command line)")?;
        if command.trim().is_empty() {
            return Err("invalid input: \"command\" must not be empty".into());
        }
        let (cwd, label) = match string_field(input, "cwd")? {
            Some(cwd) => (workspace.join(cwd), "\"cwd\""),
            None => (workspace.to_path_buf(), "workspace"),
        };
        if !cwd.is_dir() {
            let problem = if cwd.exists() { "is not a directory" } else { "does not exist" };
            return Err(format!("invalid input: {label} {problem}: {}", cwd.display()));
        }
        let timeout_secs = parse_timeout(input.get("timeout"))?;
        Ok(Self { command: command.to_owned(), cwd, timeout_secs })
    }
}

/// An optional string field; absent and null are both `None`.
fn string_field<'a>(input: &'a Value, name: &str) -> Result<Option<&'a str>, String> {
    match input.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(format!("invalid input: \"{name}\" must be a string, got {other}")),
    }
}

/// Seconds from the `timeout` field: absent or null means the default, above the maximum is
/// clamped, anything but a positive JSON integer is an error.
fn parse_timeout(value: Option<&Value>) -> Result<u64, String> {
    match value {
        None | Some(Value::Null) => Ok(DEFAULT_TIMEOUT_SECS),
        Some(got) => match got.as_u64() {
            Some(secs) if secs > 0 => Ok(secs.min(MAX_TIMEOUT_SECS)),
            _ => Err(format!("invalid input: \"timeout\" must be a positive whole number of seconds, got {got}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::output::cap_output;
    use super::*;
    use cicy_test_wait::{exited_within, Fifo};

    fn context(workspace: &Path) -> ToolContext {
        ToolContext { hidden_env: vec!["CICY_TEST_SECRET".to_string()], ..ToolContext::for_tests(workspace) }
    }

    /// Runs the tool, failing the test instead of hanging it if the call does not return.
    async fn shell(input: Value, ctx: &ToolContext) -> ToolOutput {
        let call = tokio::time::timeout(Duration::from_secs(20), run(&input, ctx));
        call.await.unwrap_or_else(|_| panic!("shell did not return within 20 s for {input}"))
    }

    /// Whether process `pid` (printed by a command) has ended or ends within 30 s: generous, so
    /// a loaded machine does not miss it; an ended process answers at once.
    async fn ended(pid: &str) -> bool {
        exited_within(pid.parse().unwrap_or_else(|_| panic!("not a pid: {pid}")), Duration::from_secs(30)).await
    }

    fn output(content: &str, is_error: bool) -> ToolOutput {
        ToolOutput { content: content.to_owned(), is_error }
    }

    #[test]
    fn timeout_defaults_clamps_and_rejects_non_positive_or_non_integer_values() {
        assert_eq!(parse_timeout(None), Ok(120));
        assert_eq!(parse_timeout(Some(&Value::Null)), Ok(120));
        for (secs, clamped) in [(1, 1), (1800, 1800), (99_999, 1800), (u64::MAX, 1800)] {
            assert_eq!(parse_timeout(Some(&json!(secs))), Ok(clamped));
        }
        for bad in [json!(0), json!(-5), json!(1.5), json!(10.0), json!("10"), json!(true)] {
            let expected = format!("invalid input: \"timeout\" must be a positive whole number of seconds, got {bad}");
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
            (json!({"command": 5}), "\"command\" must be a string, got 5".to_owned()),
            (json!({"command": " \n"}), "\"command\" must not be empty".to_owned()),
            (json!({"command": "true", "cwd": 1}), "\"cwd\" must be a string, got 1".to_owned()),
            (json!({"command": "true", "cwd": "no"}), format!("\"cwd\" does not exist: {}", path("no"))),
            (json!({"command": "1", "cwd": "file"}), format!("\"cwd\" is not a directory: {}", path("file"))),
            (json!({"command": "true", "timeout": 0}), "\"timeout\" must be a positive whole number of seconds, got 0".to_owned()),
        ];
        for (input, message) in cases {
            assert_eq!(shell(input, &ctx).await, output(&format!("invalid input: {message}"), true));
        }
        let gone = format!("invalid input: workspace does not exist: {}", path("gone"));
        let input = json!({"command": "true"});
        assert_eq!(shell(input, &context(&dir.path().join("gone"))).await, output(&gone, true));
    }

    #[tokio::test]
    async fn hidden_env_vars_do_not_reach_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = context(dir.path());
        let input = serde_json::json!({"command": "echo \"[${CARGO_PKG_NAME-unset}]\""});
        assert_eq!(run(&input, &ctx).await.content, "[cicy-tools]\nexit code: 0");
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
                "a\u{fffd}\u{fffd}b\n[note: 2 bytes were not valid UTF-8 and are shown as \u{fffd}]\nexit code: 0",
                false,
            ),
            (
                "printf 'caf\\xe9 \\xe2\\x82\\n\\xc3'; exit 1",
                "caf\u{fffd} \u{fffd}\n\u{fffd}\n[note: 4 bytes were not valid UTF-8 and are shown as \u{fffd}]\nexit code: 1",
                true,
            ),
            (leader, "leader\nexit code: 0", false),
        ];
        for (command, content, is_error) in cases {
            assert_eq!(shell(json!({"command": command}), &ctx).await, output(content, is_error));
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
        for (cwd, expected) in [(json!(null), &*workspace), (json!("sub"), &sub), (json!("/"), Path::new("/"))] {
            let out = shell(json!({"command": "pwd", "cwd": cwd}), &ctx).await;
            assert_eq!(out, output(&format!("{}\nexit code: 0", expected.display()), false));
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
        let pid = out.content.strip_suffix("\nexit code: 0").unwrap_or_else(|| panic!("{out:?}"));
        assert!(ended(pid).await, "background sleep {pid} survived");
    }

    #[tokio::test]
    async fn a_timeout_stops_the_group_and_keeps_the_output_so_far() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let input = json!({"command": "echo before; sleep 30; echo after", "timeout": 2});
        assert_eq!(shell(input, &ctx).await, output("before\ntimed out after 2 s", true));
        // SIGTERM is ignored here (and by the inherited `sleep`), so only the SIGKILL ends it.
        let input = json!({"command": "trap '' TERM; sleep 30 & echo $!; wait", "timeout": 2});
        let out = shell(input, &ctx).await;
        let pid = out.content.strip_suffix("\ntimed out after 2 s").unwrap_or_else(|| panic!("{out:?}"));
        assert!(out.is_error && pid.parse::<u32>().is_ok(), "{out:?}");
        assert!(ended(pid).await, "sleep {pid} survived SIGKILL");
    }

    #[tokio::test]
    async fn cancel_stops_a_running_command_and_a_cancelled_call_starts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let (token, started) = (ctx.cancel.clone(), Fifo::new(dir.path().join("started")));
        tokio::spawn(async move {
            started.read().await;
            token.cancel();
        });
        let input = json!({"command": "echo started; echo > started; sleep 30"});
        assert_eq!(shell(input, &ctx).await, output("started\ncancelled by user", true));
        let input = json!({"command": "touch again"});
        assert_eq!(shell(input, &ctx).await, output("cancelled by user", true));
        assert!(!dir.path().join("again").exists());
    }
}
