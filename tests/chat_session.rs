//! A `chat` session fed by a pipe and a one-shot `chat` stopped by Ctrl-C, through a real
//! `cicy-agent` process and the scripted gateway: a piped session flushes its memory buffer
//! after the line that made it due (keyword, 6-turn batch) and at EOF, never drops buffered
//! turns; a cancelled turn is followed by no recognizer call; a session's exit code is the
//! worst over its lines (docs/design.md §8 "Write", docs/serve.md "Output, Ctrl-C and exit codes").

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cicy::memory::buffer::{self, PendingTurn};
use cicy_test_support::cli::{cicy, command, event_types};
use cicy_test_support::gateway::*;

fn memory_dir(home: &Path) -> PathBuf {
    home.join("workers/w-1/.cicy/memory")
}

async fn create(home: &Path) {
    let o = cicy(home, "http://127.0.0.1:9", &["create", "Ada", "--role-template", "concierge"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
}

/// Every turn is answered `ok`, every recognizer call finds nothing worth keeping.
async fn healthy_gateway() -> ScriptedGateway {
    let gw = ScriptedGateway::start().await;
    gw.fallback(|_| Reply::sse(anthropic_text("ok")));
    gw.on_aux(Reply::sse(anthropic_text(r#"{"memories":[]}"#)));
    gw
}

/// The requests in arrival order: `turn` for a main request, the `x-cicy-aux` value otherwise.
fn kinds(gw: &ScriptedGateway) -> Vec<String> {
    gw.requests().iter().map(|r| r.header("x-cicy-aux").unwrap_or("turn").to_string()).collect()
}

/// `turns` main requests with a memory request after each one named in `flush_after` (1-based).
fn expected(turns: usize, flush_after: &[usize]) -> Vec<String> {
    let mut v = Vec::new();
    for t in 1..=turns {
        v.push("turn".to_string());
        if flush_after.contains(&t) {
            v.push("memory".to_string());
        }
    }
    v
}

fn lines(n: usize) -> String {
    (1..=n).map(|i| format!("q{i}\n")).collect()
}

#[tokio::test]
async fn eight_piped_lines_flush_once_right_after_the_sixth_turn() {
    let gw = healthy_gateway().await;
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    let o = cicy(h.path(), &gw.url(), &["chat", "w-1", "--json"], Some(&lines(8))).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(kinds(&gw), expected(8, &[6]), "one flush, between the 6th and the 7th turn");
    let events = event_types(&o.stdout);
    let ended: Vec<usize> = events.iter().enumerate().filter(|(_, e)| *e == "turn_ended").map(|(i, _)| i).collect();
    assert_eq!(ended.len(), 8);
    let sending: Vec<usize> = events.iter().enumerate().filter(|(_, e)| e.starts_with("system: memory: sending")).map(|(i, _)| i).collect();
    assert_eq!(sending, [ended[5] + 1], "the flush starts right after the 6th turn_ended: {events:?}");
    assert_eq!(events[ended[5] + 1], "system: memory: sending 6 buffered turns to the recognizer…");
    let left: Vec<String> = buffer::load(&memory_dir(h.path())).unwrap().turns.into_iter().map(|t| t.user).collect();
    assert_eq!(left, ["q7", "q8"], "the two turns after the batch wait for the next flush");
}

#[tokio::test]
async fn a_remember_line_is_flushed_after_its_own_turn() {
    let gw = healthy_gateway().await;
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    let o = cicy(h.path(), &gw.url(), &["chat", "w-1"], Some("remember my dog is Rex\nq2\nq3\n")).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(kinds(&gw), expected(3, &[1]));
    let aux = &gw.requests()[1];
    assert!(aux.body_str().contains("User: remember my dog is Rex\\nAgent: ok\\n"), "{}", aux.body_str());
    assert!(!aux.body_str().contains("User: q2"), "sent before the next line was read");
    assert!(o.stderr.contains("· memory: sending 1 buffered turn to the recognizer…\n"), "{}", o.stderr);
    let left: Vec<String> = buffer::load(&memory_dir(h.path())).unwrap().turns.into_iter().map(|t| t.user).collect();
    assert_eq!(left, ["q2", "q3"]);
}

#[tokio::test]
async fn thirty_piped_lines_flush_every_six_turns_and_drop_nothing() {
    let gw = healthy_gateway().await;
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    let o = cicy(h.path(), &gw.url(), &["chat", "w-1"], Some(&lines(30))).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!o.stderr.contains("dropped"), "{}", o.stderr);
    assert_eq!(kinds(&gw), expected(30, &[6, 12, 18, 24, 30]));
    assert_eq!(o.stderr.matches("· memory: sending 6 buffered turns to the recognizer…\n").count(), 5, "{}", o.stderr);
    assert_eq!(buffer::load(&memory_dir(h.path())).unwrap().turns.len(), 0);
}

#[tokio::test]
async fn a_session_flushes_a_due_buffer_at_eof() {
    let gw = healthy_gateway().await;
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    let ten_min_ago = SystemTime::now() - Duration::from_secs(600);
    buffer::append(&memory_dir(h.path()), PendingTurn::new("my editor is helix", "Noted.", &[], ten_min_ago)).unwrap();
    let o = cicy(h.path(), &gw.url(), &["chat", "w-1"], Some("")).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(kinds(&gw), ["memory"]);
    assert!(o.stderr.contains("· memory: sending 1 buffered turn to the recognizer…\n"), "{}", o.stderr);
    assert_eq!(buffer::load(&memory_dir(h.path())).unwrap().turns.len(), 0);
}

#[tokio::test]
async fn ctrl_c_in_a_one_shot_chat_exits_130_without_a_flush() {
    let gw = ScriptedGateway::start().await;
    // The turn's stream opens and never ends: the process is inside the turn until Ctrl-C.
    gw.push(Reply::SseThenHang { chunks: anthropic_prelude() });
    gw.on_aux(Reply::sse(anthropic_text(r#"{"memories":[]}"#)));
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    // Overdue since before the process started: without the cancel, it would flush after the turn.
    let ten_min_ago = SystemTime::now() - Duration::from_secs(600);
    buffer::append(&memory_dir(h.path()), PendingTurn::new("my editor is helix", "Noted.", &[], ten_min_ago)).unwrap();

    let child = command(h.path(), &gw.url(), &["chat", "w-1", "which editor?"]).spawn().expect("spawn chat");
    gw.wait_for_requests(1).await;
    let pid = i32::try_from(child.id().expect("pid")).unwrap();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.expect("exits").expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.ends_with("· turn ended: cancelled\n"), "nothing after the cancel: {stderr}");
    assert_eq!(kinds(&gw), ["turn"], "no recognizer call after a cancelled turn");
    assert_eq!(buffer::load(&memory_dir(h.path())).unwrap().turns.len(), 1, "the buffered turn waits for the next flush");
}

const BAD_REQUEST: &str = r#"{"error":{"type":"invalid_request_error","message":"no"}}"#;

#[tokio::test]
async fn a_session_exits_with_the_worst_code_over_its_lines() {
    let gw = healthy_gateway().await;
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    for input in ["/compat\nok line\n", "ok line\n/compat\n"] {
        let o = cicy(h.path(), &gw.url(), &["chat", "w-1"], Some(input)).await;
        assert_eq!(o.code, 1, "{input:?}: a refused line fails the session: {}", o.stderr);
        assert_eq!(o.stdout, "ok\n", "{input:?}");
    }
    let o = cicy(h.path(), &gw.url(), &["chat", "w-1"], Some("ok line\nok again\n")).await;
    assert_eq!(o.code, 0, "{}", o.stderr);

    // A turn the API refuses (HTTP 400: blocked), before and after a good one.
    gw.push(Reply::status(400, &[], BAD_REQUEST));
    let o = cicy(h.path(), &gw.url(), &["chat", "w-1"], Some("refused turn\nok line\n")).await;
    assert_eq!((o.code, o.stdout.as_str()), (1, "ok\n"), "{}", o.stderr);
    assert!(o.stderr.contains("· turn ended: blocked\n"), "{}", o.stderr);
    // The other order: the 400 is queued once the good line's request has its answer.
    let sent = gw.requests().len();
    let mut child = command(h.path(), &gw.url(), &["chat", "w-1"]).stdin(std::process::Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, b"ok line\n").await.unwrap();
    gw.wait_for_requests(sent + 1).await;
    gw.push(Reply::status(400, &[], BAD_REQUEST));
    tokio::io::AsyncWriteExt::write_all(&mut stdin, b"refused turn\n").await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("· turn ended: blocked\n"));
}
