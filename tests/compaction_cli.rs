//! `/compact`, `/clear`, `compact`, `clear`, `retry` and `history --all` through the real
//! `cicy-agent` binary: refusal while another process runs a turn, the chat-line commands, and
//! what `history` shows after a compaction.

use tokio::io::{AsyncBufReadExt, BufReader};

use cicy::conversation::message::SUMMARY_PREFIX;
use cicy_test_support::cli::{cicy, command};
use cicy_test_support::gateway::*;
use cicy_test_support::history::{assert_valid_request, body, wire_messages};
use cicy_test_support::wait::Fifo;

const SUMMARY: &str = "1. User goals and requests: work.\n8. Next step: none";

fn home() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

#[tokio::test]
async fn compact_and_clear_are_refused_while_another_process_runs_a_turn() {
    // The tool holds the turn open until the test releases it through a FIFO.
    let h = home();
    let release = Fifo::new(h.path().join("release"));
    let tool = format!(r#"{{"command":"read line < {}"}}"#, release.path.display());
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_use("t1", "shell", &tool)));
    gw.push(Reply::sse(anthropic_text("done")));
    gw.push(Reply::sse(anthropic_text(SUMMARY)));
    let url = gw.url();
    assert_eq!(cicy(h.path(), &url, &["create", "Ada"], None).await.stdout, "w-1\n");
    let mut running = command(h.path(), &url, &["chat", "w-1", "work"]).spawn().expect("spawn chat");
    let mut stderr = BufReader::new(running.stderr.take().expect("stderr")).lines();
    while !stderr.next_line().await.expect("stderr").expect("the tool starts").starts_with("→ shell") {}
    let current = std::fs::read(h.path().join("workers/w-1/.cicy/history/current.json")).unwrap();
    for (args, what) in [
        (&["compact", "w-1"][..], "/compact"),
        (&["clear", "w-1"][..], "/clear"),
        (&["chat", "w-1", "/compact"][..], "/compact"),
        (&["chat", "w-1", "hello"][..], "the message"),
        (&["retry", "w-1"][..], "retry"),
    ] {
        let o = cicy(h.path(), &url, args, None).await;
        assert_eq!(o.code, 1, "{args:?}: {}", o.stderr);
        assert_eq!(o.stderr, format!("error (busy): {what} was NOT executed: a turn is running for w-1\n"), "{args:?}");
    }
    release.write("go\n").await;
    let o = running.wait_with_output().await.unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(gw.requests().len(), 2, "the refused commands sent nothing");
    assert_ne!(std::fs::read(h.path().join("workers/w-1/.cicy/history/current.json")).unwrap(), current, "the turn went on");

    // Once the turn is over, the same command runs.
    let o = cicy(h.path(), &url, &["compact", "w-1"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("· compacted: 4 → 1 messages\n"), "{}", o.stderr);
    assert!(o.stderr.contains("· /compact done: 1 summary call(s), input 25, output 15, cache write 10, cache read 100; the state before is archived as current."), "{}", o.stderr);
    assert_eq!(gw.requests()[2].header("x-cicy-aux"), Some("compact"));

    let o = cicy(h.path(), &url, &["history", "w-1"], None).await;
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(lines[0].ends_with("(5 messages; showing the 1 from the last compaction on — history --all shows all)"), "{}", o.stdout);
    assert_eq!(&lines[1..], ["[5] summary: 1. User goals and requests: work.", "8. Next step: none"]);
    let o = cicy(h.path(), &url, &["history", "w-1", "--all"], None).await;
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(lines[0].ends_with("(5 messages, 1 compaction(s))"), "{}", o.stdout);
    assert!(lines[1].starts_with("archived snapshots (chat/"), "{}", o.stdout);
    assert!(lines[2].starts_with("  current.") && lines[2].ends_with("  4 messages"), "{}", o.stdout);
    assert_eq!(lines[3], "[1] user: work");
    assert!(lines.contains(&"── compacted: the window starts here ──"), "{}", o.stdout);
    assert_eq!(lines[lines.len() - 2], "[5] summary: 1. User goals and requests: work.");
    let o = cicy(h.path(), &url, &["history", "w-1", "--all", "--json"], None).await;
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["archives"][0]["messages"], 4);
    assert_eq!(v["messages"].as_array().unwrap().len(), 5);
}

#[tokio::test]
async fn compact_and_clear_typed_as_whole_lines_in_a_chat_session() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("hi there")));
    gw.push(Reply::sse(anthropic_text(SUMMARY)));
    gw.push(Reply::sse(anthropic_text("again answer")));
    gw.push(Reply::sse(anthropic_text("fresh answer")));
    let h = home();
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    let o = cicy(h.path(), &url, &["chat", "w-1"], Some("hello\n /compact \nagain\n/clear\nfresh\n/exit\n")).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "hi there\nagain answer\nfresh answer\n");
    assert!(o.stderr.contains("· compacted: 2 → 1 messages\n"), "{}", o.stderr);
    assert!(o.stderr.contains("· /clear: new conversation "), "{}", o.stderr);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 4);
    assert_eq!(reqs[1].header("x-cicy-aux"), Some("compact"));
    assert_eq!(body(&reqs[1])["max_tokens"], 4096);
    for i in [0, 2, 3] {
        assert_eq!(reqs[i].header("x-cicy-aux"), None);
        assert_valid_request(&reqs[i]);
    }
    let after_compact = wire_messages(&reqs[2]);
    assert_eq!(after_compact.len(), 1);
    assert!(after_compact[0].plain_text().ends_with(&format!("</role>\n{SUMMARY_PREFIX}{SUMMARY}\nagain")));
    assert_ne!(reqs[3].header("x-cicy-session-id"), reqs[0].header("x-cicy-session-id"), "/clear starts a new conversation");
    let after_clear = wire_messages(&reqs[3]);
    assert_eq!(after_clear.len(), 1);
    assert!(after_clear[0].plain_text().ends_with("</role>\nfresh"));
    let chats: Vec<_> = std::fs::read_dir(h.path().join("workers/w-1/.cicy/history/chat")).unwrap().collect();
    assert_eq!(chats.len(), 2, "the old conversation is kept");

    // One-shot: the text `/compact` is the command; a line that only contains it is a message.
    gw.push(Reply::sse(anthropic_text("S2")));
    let o = cicy(h.path(), &url, &["chat", "w-1", "/compact"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    gw.push(Reply::sse(anthropic_text("sure")));
    let o = cicy(h.path(), &url, &["chat", "w-1", "please /compact later"], None).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "sure\n"), "{}", o.stderr);
    assert_eq!(gw.requests()[5].header("x-cicy-aux"), None);
}

#[tokio::test]
async fn a_failed_compact_says_nothing_changed_and_retry_reruns_a_failed_turn() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(400, &[], "bad request"));
    gw.push(Reply::sse(anthropic_text("second time")));
    gw.push(Reply::sse(anthropic_empty()));
    let h = home();
    let url = gw.url();
    std::fs::write(h.path().join("config.yaml"), "gateway:\n  max_retries: 0\n").unwrap();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    let o = cicy(h.path(), &url, &["chat", "w-1", "question"], None).await;
    assert_eq!(o.code, 1, "{}", o.stderr);
    let o = cicy(h.path(), &url, &["retry", "w-1"], None).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "second time\n"), "{}", o.stderr);
    let o = cicy(h.path(), &url, &["retry", "w-1"], None).await;
    assert_eq!(o.code, 1);
    assert!(o.stderr.starts_with("nothing to retry"), "{}", o.stderr);
    let before = std::fs::read(h.path().join("workers/w-1/.cicy/history/current.json")).unwrap();
    let o = cicy(h.path(), &url, &["compact", "w-1"], None).await;
    assert_eq!(o.code, 1);
    assert_eq!(o.stderr, "error (compact): /compact failed: the summary came back empty; nothing was changed\n");
    assert_eq!(std::fs::read(h.path().join("workers/w-1/.cicy/history/current.json")).unwrap(), before);
    let o = cicy(h.path(), &url, &["history", "w-1"], None).await;
    assert_eq!(o.stdout.lines().skip(1).collect::<Vec<_>>(), ["[1] user: question", "[3] assistant: second time"]);
}

#[tokio::test]
async fn compact_keeping_every_message_of_the_window_is_refused_without_a_summary_call() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("one")));
    gw.push(Reply::sse(anthropic_text("two")));
    let h = home();
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    for q in ["first", "second"] {
        let o = cicy(h.path(), &url, &["chat", "w-1", q], None).await;
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
    let history = h.path().join("workers/w-1/.cicy/history");
    let before = std::fs::read(history.join("current.json")).unwrap();
    for keep in ["10", "4"] {
        let o = cicy(h.path(), &url, &["compact", "w-1", "--keep", keep], None).await;
        assert_eq!((o.code, o.stdout.as_str()), (1, ""));
        assert_eq!(
            o.stderr,
            format!("error (compact): /compact: nothing to compact: --keep {keep} keeps all 4 message(s) of the window (the cut moves to a turn boundary); nothing was changed\n")
        );
    }
    assert_eq!(gw.requests().len(), 2, "only the two chat turns reached the gateway");
    assert_eq!(std::fs::read(history.join("current.json")).unwrap(), before);
    let conversation = std::fs::canonicalize(history.join("current.json")).unwrap().parent().unwrap().to_path_buf();
    let mut files: Vec<String> =
        std::fs::read_dir(&conversation).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert_eq!(files, ["current.json", "reply.json"], "no snapshot is archived");
}
