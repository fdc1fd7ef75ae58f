//! The `cicy-agent` binary as a user runs it: real processes, a temporary `$CICY_HOME`, the
//! scripted gateway. Covers create/ls/roles/show/chat/history and bad input.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use cicy_test_support::cli::{cicy, cicy_bytes};
use cicy_test_support::gateway::*;

fn home() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

#[tokio::test]
async fn create_ls_roles_show() {
    let h = home();
    let o = cicy(h.path(), "http://127.0.0.1:9", &["create", "Ada"], None).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "w-1\n"), "{}", o.stderr);
    let o = cicy(h.path(), "http://127.0.0.1:9", &["create", "Bo", "--role-template", "concierge", "--role", "front desk"], None).await;
    assert_eq!(o.stdout, "w-2\n");
    assert!(o.stderr.contains("warning: --role `front desk` is only a roster label"), "{}", o.stderr);
    let agents_md = std::fs::read_to_string(h.path().join("workers/w-1/AGENTS.md")).unwrap();
    let ws = h.path().join("workers/w-1");
    assert_eq!(
        agents_md,
        format!("# Role\n\nYou are Ada (agent w-1), a general assistant.\nYour workspace is {}; keep your files there unless the user says otherwise.\n", ws.display())
    );
    let o = cicy(h.path(), "http://127.0.0.1:9", &["create", "Cy", "--master", "w-1"], None).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "w-3\n"), "{}", o.stderr);
    let o = cicy(h.path(), "", &["ls"], None).await;
    let ws = |n: u32| h.path().join(format!("workers/w-{n}")).display().to_string();
    // The master column: `-` for none, else the master's id.
    assert_eq!(
        o.stdout,
        format!(
            "w-1\tAda\tassistant\tworker\t{}\t-\nw-2\tBo\tconcierge\tfront desk\t{}\t-\nw-3\tCy\tassistant\tworker\t{}\tw-1\n",
            ws(1),
            ws(2),
            ws(3)
        )
    );
    let o = cicy(h.path(), "", &["roles"], None).await;
    assert!(o.stdout.contains("assistant\tAssistant\ttools: [inbox, reply, send, shell, skill, sleep_until, todo]"), "{}", o.stdout);
    assert!(o.stdout.contains("concierge\tConcierge\ttools: []"), "{}", o.stdout);
    assert!(
        o.stdout.contains(
            "coordinator\tCoordinator\ttools: [agents, broadcast, fork, inbox, msg, reply, send, shell, skill, sleep_until, todo]"
        ),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("developer\tDeveloper\ttools: [ask_user, edit_file, glob, grep, inbox, ls, read_file, reply, send, shell, skill, sleep_until, task, todo, wish, write_file, write_todos]"),
        "{}",
        o.stdout
    );
    let o = cicy(h.path(), "", &["show", "w-2"], None).await;
    assert!(o.stdout.contains("role_template: concierge\n"), "{}", o.stdout);
    assert!(o.stdout.contains("conversation: (none yet)\n"), "{}", o.stdout);
}

#[tokio::test]
async fn bad_input_is_a_clear_error_at_create_and_at_turn_time() {
    let h = home();
    let o = cicy(h.path(), "http://127.0.0.1:9", &["create", "X", "--role-template", "wizard"], None).await;
    assert_eq!(o.code, 2);
    assert_eq!(o.stderr.trim(), "error: unknown role template `wizard` (available: assistant, concierge, coordinator, developer)");
    let role = h.path().join("roles/broken");
    std::fs::create_dir_all(&role).unwrap();
    std::fs::write(role.join("meta.yaml"), "tools: [core, teleport]\n").unwrap();
    let o = cicy(h.path(), "", &["create", "X", "--role-template", "broken"], None).await;
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("roles/broken/meta.yaml: tools: `teleport` is neither a tool group nor a tool"), "{}", o.stderr);
    std::fs::write(role.join("meta.yaml"), "tools: [core\n").unwrap();
    let o = cicy(h.path(), "", &["create", "X", "--role-template", "broken"], None).await;
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("roles/broken/meta.yaml:"), "{}", o.stderr);
    assert!(!h.path().join("workers").exists(), "a failed create must not make a workspace");

    // Broken after create: the turn refuses to start and the history is untouched; the line
    // failed (exit 1), as through serve.
    std::fs::write(role.join("meta.yaml"), "tools: [core]\n").unwrap();
    let o = cicy(h.path(), "", &["create", "X", "--role-template", "broken"], None).await;
    assert_eq!(o.stdout, "w-1\n", "{}", o.stderr);
    std::fs::write(role.join("meta.yaml"), "tools: [teleport]\n").unwrap();
    let gw = ScriptedGateway::start().await;
    let o = cicy(h.path(), &gw.url(), &["chat", "w-1", "hi"], None).await;
    assert_eq!(o.code, 1);
    assert!(o.stderr.starts_with("error (open): ") && o.stderr.contains("`teleport` is neither a tool group nor a tool"), "{}", o.stderr);
    assert!(gw.requests().is_empty());
}

#[tokio::test]
async fn chat_streams_text_to_stdout_and_json_events() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("Hello there, friend.")));
    gw.push(Reply::sse(anthropic_text("Second answer.")));
    let h = home();
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    let o = cicy(h.path(), &url, &["chat", "w-1", "hi"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "Hello there, friend.\n");
    assert!(o.stderr.contains("· usage: input 25, output 15, cache write 10, cache read 100"), "{}", o.stderr);

    let o = cicy(h.path(), &url, &["chat", "w-1", "again", "--json"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let events: Vec<serde_json::Value> = o.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        ["turn_started", "prompt", "round_started", "text_delta", "text_delta", "text_delta", "text_end", "usage", "turn_ended"]
    );
    assert_eq!(events[1]["text"], "again", "the prompt, for a client that did not send it");
    // The agent's event log numbers every run: the first chat logged seq 1..=9.
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (10..=18).collect::<Vec<u64>>());
    let log = std::fs::read_to_string(h.path().join("workers/w-1/.cicy/events/events.jsonl")).unwrap();
    let logged: Vec<String> = log.lines().skip(9).map(str::to_string).collect();
    assert_eq!(logged, o.stdout.lines().map(str::to_string).collect::<Vec<_>>(), "--json prints the lines the log holds");
    assert_eq!(events[8]["outcome"], "completed");
    assert!(events.iter().all(|e| e["agent_id"] == "w-1"));

    let o = cicy(h.path(), &url, &["history", "w-1"], None).await;
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(&lines[1..], ["[1] user: hi", "[2] assistant: Hello there, friend.", "[3] user: again", "[4] assistant: Second answer."]);
}

#[tokio::test]
async fn a_line_by_line_session_reads_stdin_until_exit() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("one")));
    gw.push(Reply::sse(anthropic_text("two")));
    let h = home();
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    let o = cicy(h.path(), &url, &["chat", "w-1"], Some("first\n\nsecond\n/exit\nnever sent\n")).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "one\ntwo\n");
    assert!(o.stderr.contains("Hi, I'm your assistant."), "greeting shown: {}", o.stderr);
    assert_eq!(gw.requests().len(), 2);
    let greeting_sent = gw.requests().iter().any(|r| r.body_str().contains("Hi, I'm your assistant."));
    assert!(!greeting_sent, "the greeting is never sent to the model");
}

#[tokio::test]
async fn a_corrupt_history_is_moved_aside_named_and_not_overwritten() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("fine")));
    gw.push(Reply::sse(anthropic_text("fresh start")));
    let h = home();
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    cicy(h.path(), &url, &["chat", "w-1", "hi"], None).await;
    let link = h.path().join("workers/w-1/.cicy/history/current.json");
    let real = link.parent().unwrap().join(std::fs::read_link(&link).unwrap());
    std::fs::write(&real, b"{\"conversation_id\": truncated").unwrap();
    let o = cicy(h.path(), &url, &["chat", "w-1", "hello?"], None).await;
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("current.json could not be parsed"), "{}", o.stderr);
    assert!(o.stderr.contains("moved aside to"), "{}", o.stderr);
    let aside: Vec<_> = std::fs::read_dir(real.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("current.json.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1);
    let kept = std::fs::read(real.parent().unwrap().join(&aside[0])).unwrap();
    assert_eq!(kept, b"{\"conversation_id\": truncated");
    assert_eq!(gw.requests().len(), 1, "nothing is sent while the history is broken");
    let o = cicy(h.path(), &url, &["chat", "w-1", "hello again"], None).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "fresh start\n"), "{}", o.stderr);
}

#[tokio::test]
async fn no_gateway_configured_is_a_clear_error() {
    let h = home();
    cicy(h.path(), "", &["create", "Ada"], None).await;
    let o = cicy(h.path(), "", &["chat", "w-1", "hi"], None).await;
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("no gateway configured: set CICY_GATEWAY_URL or gateway.url in"), "{}", o.stderr);
}

#[tokio::test]
async fn a_workspace_that_cannot_be_made_leaves_no_agent_behind() {
    let h = home();
    let blocker = h.path().join("a-file");
    std::fs::write(&blocker, "not a folder").unwrap();
    let ws = blocker.join("ws");
    let o = cicy(h.path(), "", &["create", "X", "--workspace", ws.to_str().unwrap()], None).await;
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("a-file/ws"), "{}", o.stderr);
    let o = cicy(h.path(), "", &["ls"], None).await;
    assert_eq!(o.stdout, "");
    let o = cicy(h.path(), "", &["create", "Y"], None).await;
    assert_eq!(o.stdout, "w-1\n", "the failed create gave its id back: {}", o.stderr);
}

/// An answer cut by Ctrl-C is one message (its partial text, the cut-off note, the marker):
/// `history` prints it as one line under its one number.
#[tokio::test]
async fn history_prints_an_answer_cut_by_ctrl_c_as_one_line() {
    let h = home();
    let gw = ScriptedGateway::start().await;
    let deltas = ["Half an ".to_string(), "answer".to_string()];
    let (slow, _gate) = Reply::paused(anthropic_text_deltas(&deltas), 4);
    gw.push(slow);
    cicy(h.path(), &gw.url(), &["create", "Ada"], None).await;
    let mut child = cicy_test_support::cli::command(h.path(), &gw.url(), &["chat", "w-1", "tell me"]).spawn().unwrap();
    cicy_test_support::cli::read_until(child.stdout.as_mut().unwrap(), "Half an ").await;
    // SAFETY: SIGINT to the child this test started.
    assert_eq!(unsafe { libc::kill(child.id().unwrap() as libc::pid_t, libc::SIGINT) }, 0);
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    let o = cicy(h.path(), &gw.url(), &["history", "w-1"], None).await;
    assert_eq!(
        o.stdout.lines().skip(1).collect::<Vec<_>>(),
        ["[1] user: tell me", "[2] assistant: Half an [cut off: cancelled by user] (no reply this turn · cancelled)"],
        "{}",
        o.stdout
    );
}

#[tokio::test]
async fn sigint_cancels_a_running_tool_and_writes_the_marker() {
    signal_cancels_a_running_tool(libc::SIGINT, 130, 30).await;
}

#[tokio::test]
async fn sigterm_cancels_a_running_tool_writes_the_marker_and_exits_143() {
    signal_cancels_a_running_tool(libc::SIGTERM, 143, 31).await;
}

#[tokio::test]
async fn sighup_cancels_a_running_tool_writes_the_marker_and_exits_129() {
    signal_cancels_a_running_tool(libc::SIGHUP, 129, 32).await;
}

/// Sends `sig` while a tool runs (`sleep <secs>`). The tool says its pid through a FIFO once it
/// has started; the test then holds it by a pidfd and waits for it to end.
async fn signal_cancels_a_running_tool(sig: libc::c_int, code: i32, secs: u32) {
    let h = home();
    let started = cicy_test_support::wait::Fifo::new(h.path().join("started"));
    let tool = format!("echo $$ > {}; sleep {secs}; touch finished", started.path.display());
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_use("t1", "shell", &format!(r#"{{"command":"{tool}"}}"#))));
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_cicy-agent"))
        .args(["chat", "w-1", "wait"])
        .env("CICY_HOME", h.path())
        .env("CICY_GATEWAY_URL", &url)
        .env("CICY_MODEL", "test-model")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let tool_pid = started.read().await.trim().parse().expect("the tool writes its pid");
    let tool_process = cicy_test_support::wait::Pidfd::open(tool_pid).expect("the tool runs");
    let pid = child.id().unwrap() as libc::pid_t;
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(code));
    let o = cicy(h.path(), &url, &["history", "w-1"], None).await;
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.last(), Some(&"[4] assistant: (no reply this turn · cancelled)"), "{}", o.stdout);
    assert!(lines[3].starts_with("[3] error ← "), "{}", o.stdout);
    assert!(tool_process.exited_within(Duration::from_secs(10)).await, "the tool's shell survived signal {sig}");
    assert!(!h.path().join("workers/w-1/finished").exists());
}

#[tokio::test]
async fn an_error_names_its_cause_once() {
    let h = home();
    // Outside the home: a workspace inside it is refused before the folder is made.
    let outside = tempfile::tempdir().unwrap();
    let file = outside.path().join("a-file");
    std::fs::write(&file, "not a folder").unwrap();
    let o = cicy(h.path(), "", &["create", "X", "--workspace", file.to_str().unwrap()], None).await;
    assert_eq!(o.code, 2);
    assert_eq!(o.stderr, format!("error: {}: File exists (os error 17)\n", file.display()));
}

/// Runs the binary with a stdout whose reader closed before it started: every write fails with
/// EPIPE, as with `cicy-agent … | true`.
fn with_closed_stdout(home: &Path, gateway: &str, args: &[&str]) -> (i32, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cicy-agent"))
        .args(args)
        .env("CICY_HOME", home)
        .env("CICY_GATEWAY_URL", gateway)
        .env("CICY_MODEL", "test-model")
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

// Multi-threaded: the scripted gateway must keep serving while the test blocks on the binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_stops_listings_quietly_and_chat_finishes_its_turn() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("Hello there.")));
    let h = home();
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    let (code, stderr) = with_closed_stdout(h.path(), &url, &["chat", "w-1", "hi"]);
    assert_eq!(code, 0, "{stderr}");
    let o = cicy(h.path(), &url, &["history", "w-1"], None).await;
    assert!(o.stdout.ends_with("[2] assistant: Hello there.\n"), "the turn ran to the end: {}", o.stdout);
    let mem = h.path().join("workers/w-1/.cicy/memory");
    std::fs::create_dir_all(&mem).unwrap();
    std::fs::write(mem.join("fact_shell.md"), "---\ntype: fact\ntitle: Shell\n---\n\nUses zsh.\n").unwrap();
    for args in [
        &["ls"][..],
        &["roles"],
        &["show", "w-1"],
        &["history", "w-1"],
        &["history", "w-1", "--json"],
        &["history", "w-1", "--all", "--json"],
        &["memory", "w-1", "ls"],
        &["memory", "w-1", "show", "fact_shell"],
    ] {
        let (code, stderr) = with_closed_stdout(h.path(), &url, args);
        assert_eq!((code, stderr.as_str()), (0, ""), "{args:?}");
    }
}

#[tokio::test]
async fn an_empty_message_is_refused_and_nothing_is_sent_or_stored() {
    let gw = ScriptedGateway::start().await;
    let h = home();
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    for text in ["", " \n\t "] {
        let o = cicy(h.path(), &url, &["chat", "w-1", text], None).await;
        assert_eq!(o.code, 2);
        assert_eq!(o.stderr, "error: the message is empty: give some text, or leave it out to read messages from stdin\n");
    }
    assert!(gw.requests().is_empty());
    let o = cicy(h.path(), &url, &["history", "w-1"], None).await;
    assert_eq!((o.stdout.as_str(), o.stderr.as_str()), ("", "w-1 has no conversation yet\n"));
}

#[tokio::test]
async fn a_relative_cicy_home_stores_absolute_workspaces() {
    let dir = home();
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_cicy-agent"))
        .args(["create", "Ada"])
        .current_dir(dir.path())
        .env("CICY_HOME", "rel/home")
        .output()
        .await
        .unwrap();
    assert_eq!(o.stdout, b"w-1\n", "{}", String::from_utf8_lossy(&o.stderr));
    let o = cicy(&dir.path().join("rel/home"), "", &["show", "w-1"], None).await;
    let ws = dir.path().join("rel/home/workers/w-1");
    assert!(o.stdout.contains(&format!("workspace: {}\n", ws.display())), "{}", o.stdout);
}

#[tokio::test]
async fn a_gateway_url_that_is_not_http_is_refused_before_anything_is_written() {
    let h = home();
    cicy(h.path(), "", &["create", "Ada"], None).await;
    let o = cicy(h.path(), "ftp://127.0.0.1:9", &["chat", "w-1", "hi"], None).await;
    assert_eq!(o.code, 2);
    assert_eq!(o.stderr, "error: CICY_GATEWAY_URL: the gateway URL must be an http:// or https:// URL, got `ftp://127.0.0.1:9`\n");
    assert!(!h.path().join("workers/w-1/.cicy/history").exists());
}

#[tokio::test]
async fn a_workspace_of_another_agent_is_refused_at_create() {
    let h = home();
    let o = cicy(h.path(), "", &["create", "Ada"], None).await;
    assert_eq!(o.stdout, "w-1\n", "{}", o.stderr);
    let ws = h.path().join("workers/w-1");
    // The same folder spelled another way, through `..`.
    let other_spelling = h.path().join("workers/../workers/w-1");
    for given in [&ws, &other_spelling] {
        let o = cicy(h.path(), "", &["create", "Bo", "--workspace", given.to_str().unwrap()], None).await;
        assert_eq!(o.code, 2);
        assert_eq!(
            o.stderr,
            format!("error: {} is already the workspace of agent w-1; give this agent its own --workspace\n", given.display())
        );
    }
    let o = cicy(h.path(), "", &["ls"], None).await;
    assert_eq!(o.stdout.lines().count(), 1, "{}", o.stdout);
    let o = cicy(h.path(), "", &["create", "Bo"], None).await;
    assert_eq!(o.stdout, "w-2\n", "the refused create gave its id back: {}", o.stderr);
}

#[tokio::test]
async fn a_title_that_would_break_ls_is_refused() {
    let h = home();
    for title in ["", "  ", "two\nlines", "a\ttab"] {
        let o = cicy(h.path(), "", &["create", title], None).await;
        assert_eq!(o.code, 2, "{title:?}");
        assert_eq!(
            o.stderr,
            format!("error: bad title {title:?}: it must not be empty or contain control characters (tab, newline), which break `cicy-agent ls`\n")
        );
    }
    assert!(!h.path().join("cicy.db").exists(), "nothing is created");
}

#[tokio::test]
async fn a_stdin_line_that_is_not_utf8_is_decoded_lossily_and_the_session_goes_on() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("one")));
    gw.push(Reply::sse(anthropic_text("two")));
    let h = home();
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    let o = cicy_bytes(h.path(), &url, &["chat", "w-1"], Some(b"caf\xe9\nsecond")).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "one\ntwo\n"), "{}", o.stderr);
    let o = cicy(h.path(), &url, &["history", "w-1"], None).await;
    assert!(o.stdout.contains("[1] user: caf\u{FFFD}\n"), "{}", o.stdout);
    assert!(o.stdout.contains("[3] user: second\n"), "the last line needs no newline: {}", o.stdout);
}

#[tokio::test]
async fn debug_logs_to_a_file_have_no_colour_codes() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("fine")));
    let h = home();
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_cicy-agent"))
        .args(["chat", "w-1", "hi"])
        .env("CICY_HOME", h.path())
        .env("CICY_GATEWAY_URL", &url)
        .env("CICY_MODEL", "test-model")
        .env("CICY_LOG", "debug")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("DEBUG"), "{stderr}");
    assert!(!stderr.contains('\x1b'), "{stderr}");
}
