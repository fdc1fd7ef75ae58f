//! Crash safety (docs/design.md §6.4: "a kill -9 at any point leaves files that load, heal and
//! send"): a real `cicy-agent chat` session runs tool rounds and automatic compactions against
//! the scripted gateway and is killed with SIGKILL at varied moments, again and again. After
//! every kill each history file must parse and heal into a valid history; every request any
//! process sent must satisfy the invariants; each restart must get going again; a last run
//! must finish cleanly.

use std::process::Stdio;
use std::time::Duration;

use cicy::conversation::history::{CurrentFile, CurrentStatus};
use cicy::conversation::invariants;
use cicy::conversation::message::{Content, ContentBlock};
use cicy_test_support::cli::{cicy, command};
use cicy_test_support::crash::{check_files, Rng};
use cicy_test_support::gateway::*;
use cicy_test_support::history::{assert_valid_request, split_aux};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// cicy's contract is about any point; 60 kills spread over start-up, streaming, tool runs,
/// summary calls and file writes.
const KILLS: usize = 60;

/// Main replies: five tool rounds (a short `shell` command each), then an answer; streamed with
/// small gaps so a kill can land inside a stream.
fn main_reply(n: usize) -> Reply {
    let chunks = if n % 6 == 5 {
        anthropic_text(&format!("turn done {n}"))
    } else {
        anthropic_text_and_tool(&format!("step {n}"), &format!("toolu_{n}"), "shell", &format!(r#"{{"command":"sleep 0.03; echo {n}"}}"#))
    };
    Reply::Sse { chunks, delay: Duration::from_millis(2) }
}

#[tokio::test]
async fn kill_9_at_varied_moments_never_leaves_a_history_that_cannot_load_heal_and_send() {
    let gw = ScriptedGateway::start().await;
    gw.fallback(main_reply);
    gw.on_aux(Reply::Sse { chunks: anthropic_text("Summary: shell steps ran; keep going."), delay: Duration::from_millis(3) });
    let h = tempfile::tempdir().unwrap();
    let url = gw.url();
    std::fs::write(h.path().join("config.yaml"), "gateway:\n  max_retries: 0\ncompaction:\n  max_messages: 30\n  keep_recent: 10\n")
        .unwrap();
    assert_eq!(cicy(h.path(), &url, &["create", "Ada"], None).await.stdout, "w-1\n");
    let history = h.path().join("workers/w-1/.cicy/history");

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..KILLS {
        let before = gw.requests().len();
        let mut child = command(h.path(), &url, &["chat", "w-1"]).stdin(Stdio::piped()).spawn().expect("spawn chat");
        let mut stdin = child.stdin.take().expect("stdin");
        let lines: String = (0..20).map(|k| format!("task {i}.{k}: run the next steps\n")).collect();
        stdin.write_all(lines.as_bytes()).await.expect("write stdin");
        // Every fifth kill lands within start-up; the others anywhere in the 700 ms after the
        // run's first request, so that a slow start on a busy machine still leaves them among
        // streams, tool runs and writes.
        if i % 5 == 4 {
            tokio::time::sleep(Duration::from_millis(rng.next_u64() % 40)).await;
        } else {
            gw.wait_for_requests(before + 1).await;
            tokio::time::sleep(Duration::from_millis(rng.next_u64() % 700)).await;
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            let out = child.wait_with_output().await.expect("output");
            panic!("kill {i}: the session ended by itself ({status}) instead of running: {}", String::from_utf8_lossy(&out.stderr));
        }
        child.start_kill().expect("SIGKILL");
        let status = child.wait().await.expect("wait");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL), "kill {i}");
        drop(stdin);
        check_files(&history);
    }

    // A last run, not killed: it loads what the kills left, heals it and finishes its turn.
    let o = cicy(h.path(), &url, &["chat", "w-1", "wrap up"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let reqs = gw.requests();
    let (aux, main) = split_aux(&reqs);
    // Memory recognizer calls (every 6 turns) are aux calls too; only compaction is checked here.
    let compactions: Vec<_> = aux.iter().filter(|r| r.header("x-cicy-aux") == Some("compact")).collect();
    assert!(!compactions.is_empty(), "automatic compaction ran during the kills");
    for r in &aux {
        assert!(matches!(r.header("x-cicy-aux"), Some("compact" | "memory")), "{:?}", r.header("x-cicy-aux"));
        assert!(!r.body_str().contains("\"tool_use\""));
    }
    for r in &main {
        assert_valid_request(r);
        assert!(cicy_test_support::history::wire_messages(r).len() <= 31, "the window stays compacted");
    }
    let current: CurrentFile = serde_json::from_slice(&std::fs::read(history.join("current.json")).unwrap()).unwrap();
    assert_eq!(invariants::check_history(&current.messages), Ok(()));
    assert_eq!(current.status, CurrentStatus::Idle);
    eprintln!("{KILLS} kills, {} main and {} aux requests, {} messages kept", main.len(), aux.len(), current.messages.len());
}

#[tokio::test]
async fn kill_9_after_the_first_of_two_tool_calls_keeps_its_real_result() {
    let gw = ScriptedGateway::start().await;
    // The second call is still running when the process is killed; it ends by itself after.
    gw.push(Reply::sse(anthropic_tool_uses(&[
        ("t1", "shell", r#"{"command":"echo ran > first.txt; echo first-done"}"#),
        ("t2", "shell", r#"{"command":"sleep 5"}"#),
    ])));
    let h = tempfile::tempdir().unwrap();
    let url = gw.url();
    std::fs::write(h.path().join("config.yaml"), format!("gateway:\n  url: {url}\n  model: test-model\n  max_retries: 0\n")).unwrap();
    assert_eq!(cicy(h.path(), &url, &["create", "Ada"], None).await.stdout, "w-1\n");
    let mut child = command(h.path(), &url, &["chat", "w-1", "--json", "two steps"]).spawn().expect("spawn chat");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    while let Some(line) = lines.next_line().await.expect("read events") {
        if line.contains(r#""type":"tool_started""#) && line.contains(r#""id":"t2""#) {
            break;
        }
    }
    child.start_kill().expect("SIGKILL");
    let status = child.wait().await.expect("wait");
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
    let workspace = h.path().join("workers/w-1");
    assert_eq!(std::fs::read_to_string(workspace.join("first.txt")).unwrap(), "ran\n");

    let session = cicy::agent::Session::open(&cicy::home::Home::at(h.path().to_path_buf()), "w-1").expect("open");
    let hist = &session.conversation().current.messages;
    assert_eq!(invariants::check_history(hist), Ok(()));
    assert_eq!(hist.len(), 4, "{hist:?}");
    assert_eq!(
        hist[2].content,
        Content::Blocks(vec![
            ContentBlock::ToolResult { tool_use_id: "t1".into(), content: "first-done\nexit code: 0".into(), is_error: false },
            ContentBlock::ToolResult { tool_use_id: "t2".into(), content: invariants::SYNTHETIC_RESULT.into(), is_error: true },
        ])
    );
    drop(session);

    // What the model is told next: the first command ran, with its output.
    gw.push(Reply::sse(anthropic_text("noted")));
    let o = cicy(h.path(), &url, &["chat", "w-1", "what ran?"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let sent: serde_json::Value = serde_json::from_slice(&gw.requests()[1].body).unwrap();
    assert_eq!(
        sent["messages"][2]["content"][0],
        serde_json::json!({"type": "tool_result", "tool_use_id": "t1", "content": "first-done\nexit code: 0"})
    );
}
