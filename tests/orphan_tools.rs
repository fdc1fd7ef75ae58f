//! A `kill -9` of `cicy-agent` while a tool runs must not leave the tool's process group
//! running for good: the next start of the agent kills it (only if it is provably the same
//! group) and says so. A real `cicy-agent chat` runs a scripted `shell` call and is killed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is how it fails

mod common;

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use common::cli::{cicy, command};
use common::gateway::*;

/// The tool call: bash writes its pid (the group id) and becomes `sleep 600`.
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

/// Waits (up to 20 s, by polling the files) until the tool has written its pid and its group
/// has been recorded; returns the pid.
async fn started_tool(workspace: &Path) -> i32 {
    for _ in 0..2000 {
        let pid = std::fs::read_to_string(workspace.join("tool.pid")).ok().and_then(|s| s.trim().parse::<i32>().ok());
        if let Some(pid) = pid.filter(|&pid| pid > 1) {
            if workspace.join(format!(".cicy/running/{pid}.json")).exists() {
                return pid;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the tool did not start within 20 s");
}

/// Waits for process `pid` (not our child) to end, through a pidfd: it becomes readable when
/// the process exits. False if it is still running after 10 s.
fn wait_for_exit(pid: i32) -> bool {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return !alive(pid);
    }
    // SAFETY: `fd` is a descriptor we own from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut poll = libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(&fd), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    let ready = unsafe { libc::poll(&mut poll, 1, 10_000) };
    ready == 1
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

    let mut chat = command(h.path(), &url, &["chat", "w-1", "start the server"]).spawn().expect("spawn chat");
    let pid = started_tool(&workspace).await;
    let _cleanup = Cleanup(Some(pid));
    chat.start_kill().expect("SIGKILL");
    chat.wait().await.expect("wait");
    assert!(alive(pid), "the tool's group outlives the killed cicy-agent");

    let o = cicy(h.path(), &url, &["chat", "w-1", "and now?"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "done\n");
    let line = format!("· killed the process group {pid} of a tool left running by an interrupted turn (shell: {COMMAND})\n");
    assert!(o.stderr.contains(&line), "{}", o.stderr);
    assert!(wait_for_exit(pid), "process {pid} still runs");
    assert_eq!(std::fs::read_dir(workspace.join(".cicy/running")).unwrap().count(), 0);
    assert_eq!(gw.requests().len(), 2);
}
