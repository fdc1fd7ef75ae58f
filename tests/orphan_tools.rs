//! A `kill -9` of `cicy-agent` while a tool runs must not leave the tool's process group
//! running for good: the next start of the agent kills it (only if it is provably the same
//! group) and says so. A real `cicy-agent chat` runs a scripted `shell` call and is killed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is how it fails

mod common;

use std::time::Duration;

use common::cli::{cicy, command};
use common::gateway::*;
use common::wait::{appears_within, exited_within, Fifo};

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

#[tokio::test]
async fn a_tool_left_running_by_a_killed_cicy_agent_is_killed_at_the_next_start() {
    let gw = ScriptedGateway::start().await;
    let input = serde_json::json!({ "command": COMMAND }).to_string();
    gw.push(Reply::sse(anthropic_tool_use("toolu_1", "shell", &input)));
    gw.push(Reply::sse(anthropic_text("done")));
    let h = tempfile::tempdir().unwrap();
    let url = gw.url();
    std::fs::write(h.path().join("config.yaml"), "gateway:\n  max_retries: 0\n").unwrap();
    assert_eq!(cicy(h.path(), &url, &["create", "Ada"], None).await.stdout, "w-1\n");
    let workspace = h.path().join("workers/w-1");

    let fifo = Fifo::new(workspace.join("tool.pid"));
    let mut chat = command(h.path(), &url, &["chat", "w-1", "start the server"]).spawn().expect("spawn chat");
    let pid: i32 = fifo.read().await.trim().parse().expect("the tool writes its pid");
    assert!(pid > 1, "{pid}");
    let _cleanup = Cleanup(Some(pid));
    // The agent records the group beside the running tool, so the record may come a moment later.
    let record = workspace.join(format!(".cicy/running/{pid}.json"));
    assert!(appears_within(&record, Duration::from_secs(20)).await, "{} never appeared", record.display());
    chat.start_kill().expect("SIGKILL");
    chat.wait().await.expect("wait");
    assert!(alive(pid), "the tool's group outlives the killed cicy-agent");

    let o = cicy(h.path(), &url, &["chat", "w-1", "and now?"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "done\n");
    let line = format!("· killed the process group {pid} of a tool left running by an interrupted turn (shell: {COMMAND})\n");
    assert!(o.stderr.contains(&line), "{}", o.stderr);
    assert!(exited_within(pid, Duration::from_secs(10)).await, "process {pid} still runs");
    assert_eq!(std::fs::read_dir(workspace.join(".cicy/running")).unwrap().count(), 0);
    assert_eq!(gw.requests().len(), 2);
}
