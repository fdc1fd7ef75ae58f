//! `cicy-agent memory …` and the memory timers as a user runs them: real processes, a temporary
//! `$CICY_HOME`, the scripted gateway (DESIGN.md §8 "CLI", "Write").
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is how it fails

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use cicy::memory::buffer::{self, PendingTurn};
use common::cli::{command, Out};
use common::gateway::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

async fn cicy(home: &Path, gateway: &str, args: &[&str]) -> Out {
    common::cli::cicy(home, gateway, args, None).await
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
    assert_eq!(
        o.stdout,
        "latin1.md: not UTF-8 (invalid byte at offset 22)\nunclosed.md: the front matter is not closed by a `---` line\n"
    );
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

#[tokio::test]
async fn a_one_shot_chat_flushes_an_overdue_buffer_before_its_turn() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text(
        r#"{"memories":[{"mem_id":"preference_editor","type":"preference","title":"Editor","content":"Uses helix.","salience":3,"tags":[]}]}"#,
    )));
    gw.push(Reply::sse(anthropic_text("Helix, then.")));
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    // A turn buffered ten minutes ago by a process that has since exited: overdue (5 min idle).
    let ten_min_ago = SystemTime::now() - Duration::from_secs(600);
    buffer::append(&memory_dir(h.path()), PendingTurn::new("my editor is helix", "Noted.", &[], ten_min_ago)).unwrap();

    let o = cicy(h.path(), &gw.url(), &["chat", "w-1", "which editor?"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].header("x-cicy-aux"), Some("memory"), "the overdue flush runs before the turn");
    assert!(reqs[0].body_str().contains("User: my editor is helix\\nAgent: Noted.\\n"), "{}", reqs[0].body_str());
    assert_eq!(reqs[1].header("x-cicy-aux"), None);
    assert!(reqs[1].body_str().contains("<memories>\\n- [preference★3] Editor: Uses helix.\\n"), "the turn already sees the new memory");
    assert!(o.stderr.contains("· memory: saved 1, updated 0 (from 1 turn)"), "{}", o.stderr);
    // The new turn itself is buffered for the next flush.
    assert_eq!(buffer::load(&memory_dir(h.path())).unwrap().turns.len(), 1);
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
