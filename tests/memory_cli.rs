//! `cicy-agent memory …` and the memory timers as a user runs them: real processes, a temporary
//! `$CICY_HOME`, the scripted gateway (docs/design.md §8 "CLI", "Write").

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use cicy::memory::buffer::{self, PendingTurn};
use cicy_test_support::cli::{command, event_types, Out};
use cicy_test_support::gateway::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

async fn cicy(home: &Path, gateway: &str, args: &[&str]) -> Out {
    cicy_test_support::cli::cicy(home, gateway, args, None).await
}

fn memory_dir(home: &Path) -> PathBuf {
    home.join("workers/w-1/.cicy/memory")
}

async fn create(home: &Path) {
    let o = cicy(home, "http://127.0.0.1:9", &["create", "Ada", "--role-template", "concierge"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
}

const COLOUR: &str = "---\nmem_id: preference_colour\ntype: preference\ntitle: Colour\nsalience: 4\ntags: []\nupdated: 2026-01-01T00:00:00Z\n---\n\nFavourite colour: teal.\n";
const SHELL: &str = "---\ntype: fact\ntitle: Shell\n---\n\nUses zsh.\n";

#[tokio::test]
async fn ls_show_check_rebuild_and_forget() {
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    let dir = memory_dir(h.path());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("preference_colour.md"), COLOUR).unwrap();
    std::fs::write(dir.join("fact_shell.md"), SHELL).unwrap();
    std::fs::write(dir.join("unclosed.md"), "---\ntype: fact\nno end\n").unwrap();
    std::fs::write(dir.join("latin1.md"), b"---\ntype: fact\n---\ncaf\xe9\n").unwrap();
    let gw = "http://127.0.0.1:9";

    let o = cicy(h.path(), gw, &["memory", "w-1", "ls"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "preference_colour\tpreference\t4\tColour\nfact_shell\tfact\t3\tShell\n");
    assert!(o.stderr.contains("2 memory file(s) cannot be read and are skipped: `cicy-agent memory w-1 check` lists them"), "{}", o.stderr);

    let o = cicy(h.path(), gw, &["memory", "w-1", "show", "Preference_Colour"]).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, COLOUR));
    let o = cicy(h.path(), gw, &["memory", "w-1", "show", "nope"]).await;
    assert_eq!(o.code, 2);
    assert!(o.stderr.starts_with("error: no memory `nope`"), "{}", o.stderr);

    let o = cicy(h.path(), gw, &["memory", "w-1", "check"]).await;
    assert_eq!(o.code, 1);
    assert_eq!(o.stdout, "latin1.md: not UTF-8 (invalid byte at offset 22)\nunclosed.md: the front matter is not closed by a `---` line\n");
    assert_eq!(o.stderr, "2 of 4 memory files cannot be read; they are skipped (never deleted) until fixed\n");

    let o = cicy(h.path(), gw, &["memory", "w-1", "rebuild"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let index = "- [preference★4] Favourite colour: teal.\n- [fact★3] Shell: Uses zsh.\n";
    assert_eq!(o.stdout, format!("MEMORY.md: 2 memories, {} bytes\n", index.len()));
    assert_eq!(std::fs::read_to_string(dir.join("MEMORY.md")).unwrap(), index);

    let o = cicy(h.path(), gw, &["memory", "w-1", "forget", "preference_colour"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, format!("moved to {}\n", dir.join("_archive/preference_colour.md").display()));
    assert_eq!(std::fs::read_to_string(dir.join("_archive/preference_colour.md")).unwrap(), COLOUR);
    assert_eq!(std::fs::read_to_string(dir.join("MEMORY.md")).unwrap(), "- [fact★3] Shell: Uses zsh.\n");

    std::fs::remove_file(dir.join("unclosed.md")).unwrap();
    std::fs::remove_file(dir.join("latin1.md")).unwrap();
    let o = cicy(h.path(), gw, &["memory", "w-1", "check"]).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "ok: 1 memories, all readable\n"));
    let o = cicy(h.path(), gw, &["memory", "w-1", "forget", "fact_shell"]).await;
    assert_eq!(o.code, 0);
    assert!(!dir.join("MEMORY.md").exists(), "no memories left: no index");
    let o = cicy(h.path(), gw, &["memory", "w-9", "ls"]).await;
    assert_eq!(o.code, 2);
}

#[tokio::test]
async fn flush_sends_the_buffer_now() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("Hello.")));
    gw.push(Reply::sse(anthropic_text(
        r#"{"memories":[{"mem_id":"person_ada","type":"person","title":"Ada","content":"The user is called Ada.","salience":3,"tags":[]}]}"#,
    )));
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    let o = cicy(h.path(), &gw.url(), &["chat", "w-1", "hi, I am Ada"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(gw.requests().len(), 1, "one plain turn: buffered, not flushed");
    let o = cicy(h.path(), &gw.url(), &["memory", "w-1", "ls"]).await;
    assert!(o.stderr.contains("1 turn(s) buffered, not yet recognized"), "{}", o.stderr);

    let o = cicy(h.path(), &gw.url(), &["memory", "w-1", "flush"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("· memory: saved 1, updated 0 (from 1 turn)\n"), "{}", o.stderr);
    assert!(o.stderr.contains("· memory usage: input 25, output 15, cache write 10, cache read 100\n"), "{}", o.stderr);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].header("x-cicy-aux"), Some("memory"));
    assert_eq!(reqs[1].header("x-cicy-session-id"), Some("memory-w-1"));
    assert_eq!(std::fs::read_to_string(memory_dir(h.path()).join("MEMORY.md")).unwrap(), "- [person★3] The user is called Ada.\n");

    let o = cicy(h.path(), &gw.url(), &["memory", "w-1", "flush"]).await;
    assert_eq!((o.code, o.stderr.as_str()), (0, "nothing buffered for w-1\n"));
    assert_eq!(gw.requests().len(), 2);
}

/// A turn buffered ten minutes ago by a process that has since exited: overdue (5 min idle).
fn buffer_an_overdue_turn(home: &Path) {
    let ten_min_ago = SystemTime::now() - Duration::from_secs(600);
    buffer::append(&memory_dir(home), PendingTurn::new("my editor is helix", "Noted.", &[], ten_min_ago)).unwrap();
}

const HELIX: &str =
    r#"{"memories":[{"mem_id":"preference_editor","type":"preference","title":"Editor","content":"Uses helix.","salience":3,"tags":[]}]}"#;

#[tokio::test]
async fn a_one_shot_chat_answers_first_and_then_flushes_an_overdue_buffer() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("Which one do you use?")));
    gw.push(Reply::sse(anthropic_text(HELIX)));
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    buffer_an_overdue_turn(h.path());

    let o = cicy(h.path(), &gw.url(), &["chat", "w-1", "which editor?"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "Which one do you use?\n");
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].header("x-cicy-aux"), None, "the turn goes first");
    assert_eq!(reqs[1].header("x-cicy-aux"), Some("memory"));
    assert!(reqs[1].body_str().contains("User: my editor is helix\\nAgent: Noted.\\n"), "{}", reqs[1].body_str());
    assert!(reqs[1].body_str().contains("User: which editor?\\nAgent: Which one do you use?\\n"), "the new turn rides along");
    let flush = "· memory: sending 2 buffered turns to the recognizer…\n· memory usage: input 25, output 15, cache write 10, cache read 100\n· memory: saved 1, updated 0 (from 2 turns)\n";
    assert!(o.stderr.ends_with(flush), "the flush is the last thing, with a progress line: {}", o.stderr);
    assert_eq!(buffer::load(&memory_dir(h.path())).unwrap().turns.len(), 0);
    assert_eq!(std::fs::read_to_string(memory_dir(h.path()).join("MEMORY.md")).unwrap(), "- [preference★3] Editor: Uses helix.\n");
}

#[tokio::test]
async fn the_question_is_on_disk_before_the_flush_and_a_kill_during_it_loses_nothing() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("Which one do you use?")));
    // The recognizer never answers: the process is held inside the flush until it is killed.
    gw.on_aux(Reply::SseThenHang { chunks: Vec::new() });
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    buffer_an_overdue_turn(h.path());

    let mut child = command(h.path(), &gw.url(), &["chat", "w-1", "which editor?", "--json"]).spawn().expect("spawn chat");
    let reqs = gw.wait_for_requests(2).await;
    assert_eq!(reqs[0].header("x-cicy-aux"), None);
    assert_eq!(reqs[1].header("x-cicy-aux"), Some("memory"), "the aux request comes after the turn's request");
    // The process is blocked in the recognizer call: what is on disk now was there when the
    // aux request arrived.
    let current: serde_json::Value =
        serde_json::from_slice(&std::fs::read(h.path().join("workers/w-1/.cicy/history/current.json")).unwrap()).unwrap();
    assert_eq!(current["status"], "idle");
    let texts: Vec<String> = current["messages"].as_array().unwrap().iter().map(|m| m["content"].to_string()).collect();
    assert_eq!(texts, ["\"which editor?\"", r#"[{"type":"text","text":"Which one do you use?"}]"#]);

    child.start_kill().expect("SIGKILL");
    let out = child.wait_with_output().await.expect("wait");
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&out.status), Some(libc::SIGKILL));
    let types = event_types(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(
        types,
        [
            "turn_started",
            "prompt",
            "round_started",
            "text_delta",
            "text_delta",
            "text_delta",
            "text_end",
            "usage",
            "turn_ended",
            "system: memory: sending 2 buffered turns to the recognizer…"
        ],
        "turn_ended comes before the flush"
    );
    // Both turns are still buffered for the next flush, and a kill is no failure: no backoff.
    let users: Vec<String> = buffer::load(&memory_dir(h.path())).unwrap().turns.into_iter().map(|t| t.user).collect();
    assert_eq!(users, ["my editor is helix", "which editor?"]);
    assert!(!memory_dir(h.path()).join(".flush-backoff.json").exists());
}

#[tokio::test]
async fn a_failed_flush_pauses_automatic_flushes_instead_of_delaying_every_command() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("One.")));
    gw.push(Reply::status(400, &[], r#"{"error":{"type":"invalid_request_error","message":"no"}}"#));
    gw.push(Reply::sse(anthropic_text("Two.")));
    gw.push(Reply::sse(anthropic_text(HELIX)));
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    buffer_an_overdue_turn(h.path());

    let o = cicy(h.path(), &gw.url(), &["chat", "w-1", "one?"]).await;
    assert_eq!(o.code, 0, "a failed flush never fails the command: {}", o.stderr);
    assert_eq!(gw.requests().len(), 2);
    assert!(o.stderr.contains("· memory: sending 2 buffered turns to the recognizer…\n"), "{}", o.stderr);
    assert!(
        o.stderr.ends_with("the 2 buffered turn(s) are kept for the next flush (automatic flushes pause for 5 min; `cicy-agent memory w-1 flush` tries now)\n"),
        "{}",
        o.stderr
    );
    let pause = cicy::memory::backoff::load(&memory_dir(h.path())).unwrap().expect("a backoff on disk");
    assert_eq!(pause.failures, 1);

    // The next one-shot command honours the pause: its turn only, no recognizer call.
    let o = cicy(h.path(), &gw.url(), &["chat", "w-1", "two?"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(gw.requests().len(), 3);
    assert!(!o.stderr.contains("memory"), "{}", o.stderr);
    assert_eq!(buffer::load(&memory_dir(h.path())).unwrap().turns.len(), 3);

    // Asked for explicitly, a flush runs at once and clears the pause.
    let o = cicy(h.path(), &gw.url(), &["memory", "w-1", "flush"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("· memory: saved 1, updated 0 (from 3 turns)\n"), "{}", o.stderr);
    assert!(!memory_dir(h.path()).join(".flush-backoff.json").exists());
}

#[tokio::test]
async fn a_resident_chat_flushes_after_the_configured_idle_period() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("Helix it is.")));
    gw.push(Reply::sse(anthropic_text(
        r#"{"memories":[{"mem_id":"preference_editor","type":"preference","title":"Editor","content":"Uses helix.","salience":3,"tags":[]}]}"#,
    )));
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    std::fs::write(h.path().join("config.yaml"), "memory:\n  idle_secs: 1\n").unwrap();
    let mut child = command(h.path(), &gw.url(), &["chat", "w-1"]).stdin(Stdio::piped()).spawn().expect("spawn chat");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"my editor is helix\n").await.unwrap();
    stdin.flush().await.unwrap();
    // The turn runs at once; the recognizer only after one idle second, with stdin still open:
    // wait for the flush's report on stderr.
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut seen = Vec::new();
    let flushed = "· memory: saved 1, updated 0 (from 1 turn)";
    while seen.last().map(String::as_str) != Some(flushed) {
        let line = tokio::time::timeout(Duration::from_secs(20), stderr.next_line()).await.expect("the idle timer never flushed");
        seen.push(line.unwrap().unwrap_or_else(|| panic!("stderr closed before the flush: {seen:?}")));
    }
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2, "the idle timer never flushed");
    assert_eq!(reqs[0].header("x-cicy-aux"), None);
    assert_eq!(reqs[1].header("x-cicy-aux"), Some("memory"));
    assert!(child.try_wait().unwrap().is_none(), "the session is still running: the resident timer flushed");
    stdin.write_all(b"/exit\n").await.unwrap();
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("exits").unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(memory_dir(h.path()).join("MEMORY.md")).unwrap(), "- [preference★3] Editor: Uses helix.\n");
}

#[tokio::test]
async fn a_session_flushes_without_the_turn_lock_and_one_flush_runs_at_a_time() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("Noted.")));
    gw.on_aux(Reply::SseThenHang { chunks: Vec::new() });
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    let mut child = command(h.path(), &gw.url(), &["chat", "w-1"]).stdin(Stdio::piped()).spawn().expect("spawn chat");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"remember: my editor is helix\n").await.unwrap();
    stdin.flush().await.unwrap();
    // The keyword makes the buffer due at once; the session's flush now waits on the recognizer.
    let reqs = gw.wait_for_requests(2).await;
    assert_eq!(reqs[1].header("x-cicy-aux"), Some("memory"));

    // Meanwhile the agent is free for commands that take the turn lock …
    let o = cicy(h.path(), &gw.url(), &["clear", "w-1"]).await;
    assert_eq!(o.code, 0, "the flush must not hold the turn lock: {}", o.stderr);
    assert!(o.stderr.starts_with("· /clear: new conversation "), "{}", o.stderr);
    // … and a second flush does not send the same turns again.
    let o = cicy(h.path(), &gw.url(), &["memory", "w-1", "flush"]).await;
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (0, "· memory: another process is sending the buffered turns to the recognizer right now; not sent again\n")
    );
    assert_eq!(gw.requests().len(), 2);

    child.start_kill().expect("SIGKILL");
    child.wait().await.expect("wait");
    drop(stdin);
    assert_eq!(buffer::load(&memory_dir(h.path())).unwrap().turns.len(), 1, "the killed flush kept its turn");
}

#[tokio::test]
async fn the_recognizer_call_has_its_own_timeout_from_config() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("Noted.")));
    gw.on_aux(Reply::SseThenHang { chunks: Vec::new() });
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    std::fs::write(h.path().join("config.yaml"), "memory:\n  recognizer_timeout_secs: 1\n").unwrap();
    let o = cicy(h.path(), &gw.url(), &["chat", "w-1", "remember: my editor is helix"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr.ends_with(
            "· memory: sending 1 buffered turn to the recognizer…\nerror (memory): memory flush (explicit) failed: memory recognizer call failed: the request timed out after 1 s; the 1 buffered turn(s) are kept for the next flush (automatic flushes pause for 5 min; `cicy-agent memory w-1 flush` tries now)\n"
        ),
        "{}",
        o.stderr
    );
    assert_eq!(gw.requests().len(), 2);
}

#[tokio::test]
async fn a_session_whose_buffer_another_process_is_flushing_says_so_once_and_reads_on() {
    use tokio::io::AsyncBufReadExt;
    let gw = ScriptedGateway::start().await;
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    buffer_an_overdue_turn(h.path());
    // This test process plays the other flusher.
    let held = cicy::memory::backoff::try_flush_lock(&memory_dir(h.path())).unwrap().expect("the flush lock is free");
    let mut child = command(h.path(), &gw.url(), &["chat", "w-1"]).stdin(Stdio::piped()).spawn().expect("spawn chat");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    let busy = "· memory: another process is sending the buffered turns to the recognizer right now; not sent again";
    let mut seen = Vec::new();
    while seen.last().map(String::as_str) != Some(busy) {
        seen.push(stderr.next_line().await.unwrap().expect("the session said the flush is busy"));
    }
    stdin.write_all(b"/exit\n").await.unwrap();
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait()).await.expect("the session read `/exit`").unwrap();
    drop(held);
    while let Some(line) = stderr.next_line().await.unwrap() {
        seen.push(line);
    }
    assert_eq!(status.code(), Some(0));
    assert_eq!(seen, ["· Welcome! How can I help you today?", busy], "said once, not retried in a loop");
    assert_eq!(gw.requests().len(), 0);
}

#[tokio::test]
async fn retry_runs_the_turn_first_and_then_flushes_an_overdue_buffer() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(400, &[], r#"{"error":{"type":"invalid_request_error","message":"no"}}"#));
    gw.push(Reply::sse(anthropic_text("Helix, then.")));
    gw.push(Reply::sse(anthropic_text(HELIX)));
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    let o = cicy(h.path(), &gw.url(), &["chat", "w-1", "which editor?"]).await;
    assert_eq!(o.code, 1, "the turn is blocked: {}", o.stderr);
    buffer_an_overdue_turn(h.path());

    let o = cicy(h.path(), &gw.url(), &["retry", "w-1"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "Helix, then.\n");
    let reqs = gw.requests();
    let kinds: Vec<Option<&str>> = reqs.iter().map(|r| r.header("x-cicy-aux")).collect();
    assert_eq!(kinds, [None, None, Some("memory")], "the retried turn goes first");
    assert!(reqs[2].body_str().contains("User: which editor?\\nAgent: Helix, then.\\n"), "the retried turn rides along");
    assert!(o.stderr.ends_with("· memory: saved 1, updated 0 (from 2 turns)\n"), "{}", o.stderr);
}

#[tokio::test]
async fn a_torn_buffer_line_is_set_aside_alone_and_named() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("Fine.")));
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    let dir = memory_dir(h.path());
    let kept = buffer::append(&dir, PendingTurn::new("my editor is helix", "Noted.", &[], SystemTime::now())).unwrap().turns;
    let line = std::fs::read_to_string(dir.join(buffer::FILE)).unwrap();
    let torn = r#"{"id":"c3","at_ms":3000,"user":"half a li"#;
    std::fs::write(dir.join(buffer::FILE), format!("{line}{torn}")).unwrap();

    let o = cicy(h.path(), &gw.url(), &["chat", "w-1", "hello"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let aside: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(".pending.jsonl.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(std::fs::read_to_string(&aside[0]).unwrap(), torn);
    assert!(
        o.stderr.contains(&format!(
            "· memory: lines of the buffer that did not parse were set aside in {}; the 1 readable turn(s) are kept\n",
            aside[0].display()
        )),
        "{}",
        o.stderr
    );
    let turns = buffer::load(&dir).unwrap().turns;
    assert_eq!(turns[0], kept[0], "the complete line is kept as it was");
    assert_eq!(turns.iter().map(|t| t.user.as_str()).collect::<Vec<_>>(), ["my editor is helix", "hello"]);
}
