//! A `kill -9` of `cicy-agent` while a tool runs must not leave the tool's process group
//! running: the watchdog kills it as cicy dies, and should the watchdog have died too, the next
//! start of the agent kills it (only if it is provably the same group) and says so. A real
//! `cicy-agent chat` runs a scripted `shell` call and is killed.

use std::time::Duration;

use cicy_test_support::cli::{cicy, command};
use cicy_test_support::gateway::*;
use cicy_test_support::wait::{appears_within, exited_within, Fifo, Pidfd};

/// The tool call: bash writes its pid (the group id) into the FIFO `tool.pid`, which blocks it
/// until the test reads, and becomes `sleep 600`.
const COMMAND: &str = "echo $$ > tool.pid; exec sleep 600";

/// Kills the tool's group if a failed assertion leaves it running: a test stops what it started.
struct Cleanup(Option<i32>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(pid) = self.0.filter(|&pid| alive(pid)) {
            // SAFETY: kill(2) has no memory effects; pid > 1 was checked when it was read.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }
}

/// Whether process `pid` is running (a zombie has ended).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])))
}

/// A `cicy-agent chat` on a new agent whose tool runs [`COMMAND`], started up to the moment the
/// tool's group is recorded (and so known to the watchdog): the chat, the tool's pid, the agent's
/// home, its workspace and the gateway.
struct Running {
    chat: tokio::process::Child,
    pid: i32,
    home: tempfile::TempDir,
    workspace: std::path::PathBuf,
    gw: ScriptedGateway,
    _cleanup: Cleanup,
}

async fn chat_running_a_tool() -> Running {
    let gw = ScriptedGateway::start().await;
    let input = serde_json::json!({ "command": COMMAND }).to_string();
    gw.push(Reply::sse(anthropic_tool_use("toolu_1", "shell", &input)));
    gw.push(Reply::sse(anthropic_text("done")));
    let h = tempfile::tempdir().unwrap();
    std::fs::write(h.path().join("config.yaml"), "gateway:\n  max_retries: 0\n").unwrap();
    assert_eq!(cicy(h.path(), &gw.url(), &["create", "Ada"], None).await.stdout, "w-1\n");
    let workspace = h.path().join("workers/w-1");

    let fifo = Fifo::new(workspace.join("tool.pid"));
    let chat = command(h.path(), &gw.url(), &["chat", "w-1", "start the server"]).spawn().expect("spawn chat");
    let pid: i32 = fifo.read().await.trim().parse().expect("the tool writes its pid");
    assert!(pid > 1, "{pid}");
    // The agent records the group right after telling the watchdog, beside the running tool,
    // so the record may come a moment later.
    let record = workspace.join(format!(".cicy/running/{pid}.json"));
    assert!(appears_within(&record, Duration::from_secs(20)).await, "{} never appeared", record.display());
    Running { chat, pid, home: h, workspace, gw, _cleanup: Cleanup(Some(pid)) }
}

/// The children of process `pid` whose command line holds `name`.
fn children_named(pid: u32, name: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let children = std::fs::read_to_string(task.unwrap().path().join("children")).unwrap_or_default();
        for child in children.split_whitespace().map(|c| c.parse::<i32>().unwrap()) {
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(name) {
                found.push(child);
            }
        }
    }
    found
}

#[tokio::test]
async fn a_tool_dies_with_a_killed_cicy_agent_without_another_start() {
    let mut r = chat_running_a_tool().await;
    let tool = Pidfd::open(r.pid).expect("the tool runs");
    r.chat.start_kill().expect("SIGKILL");
    r.chat.wait().await.expect("wait");
    assert!(tool.exited_within(Duration::from_secs(60)).await, "the tool {} outlived the killed cicy-agent", r.pid);
    // Nothing else ran: the second reply was never asked for.
    assert_eq!(r.gw.requests().len(), 1);
}

#[tokio::test]
async fn a_tool_left_running_when_its_watchdog_died_too_is_killed_at_the_next_start() {
    let mut r = chat_running_a_tool().await;
    let (pid, url) = (r.pid, r.gw.url());
    let watchdogs = children_named(r.chat.id().unwrap(), "cicy-watchdog");
    assert_eq!(watchdogs.len(), 1, "{watchdogs:?}");
    let watchdog = Pidfd::open(watchdogs[0]).expect("the watchdog runs");
    // SAFETY: kill(2) has no memory effects; the pid is the chat's child, held by a pidfd.
    assert_eq!(unsafe { libc::kill(watchdog.pid(), libc::SIGKILL) }, 0);
    assert!(watchdog.exited_within(Duration::from_secs(20)).await);
    r.chat.start_kill().expect("SIGKILL");
    r.chat.wait().await.expect("wait");
    assert!(alive(pid), "the tool's group outlives the killed cicy-agent and its watchdog");

    let o = cicy(r.home.path(), &url, &["chat", "w-1", "and now?"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "done\n");
    let line = format!("· killed the process group {pid} of a tool left running by an interrupted turn (shell: {COMMAND})\n");
    assert!(o.stderr.contains(&line), "{}", o.stderr);
    assert!(exited_within(pid, Duration::from_secs(10)).await, "process {pid} still runs");
    assert_eq!(std::fs::read_dir(r.workspace.join(".cicy/running")).unwrap().count(), 0);
    assert_eq!(r.gw.requests().len(), 2);
}
