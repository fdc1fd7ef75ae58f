//! What a chat line or file becomes, through a real `cicy-agent` process: the conversation
//! commands are exact lines, a mistyped one is refused (never sent, never run), and `--file`
//! sends a whole file or all of stdin as one message.

use std::path::Path;

use cicy_test_support::cli::cicy;
use cicy_test_support::gateway::*;
use cicy_test_support::history::wire_messages;

use cicy::conversation::message::{Content, ContentBlock};

fn home() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// The id of agent w-1's active conversation (the folder `current.json` links to).
fn conversation(home: &Path) -> String {
    let link = std::fs::read_link(home.join("workers/w-1/.cicy/history/current.json")).expect("symlink");
    link.parent().and_then(|p| p.file_name()).expect("conversation folder").to_string_lossy().into_owned()
}

/// The text of the last text block of the last message of a recorded request: what the user
/// sent this turn (the first user message also carries the `<role>` block in front).
fn last_user_text(r: &RecordedRequest) -> String {
    let msgs = wire_messages(r);
    match &msgs.last().expect("a message").content {
        Content::Text(t) => t.clone(),
        Content::Blocks(b) => match b.last() {
            Some(ContentBlock::Text { text }) => text.clone(),
            other => panic!("last block is not text: {other:?}"),
        },
    }
}

fn refusal(word: &str) -> String {
    format!(
        "error (command): `{word}` is not a command (a command is the whole line: /compact, /clear, /exit); it was NOT sent and NOT executed. To send a message that starts with `/`, begin it with `//`\n"
    )
}

#[tokio::test]
async fn a_mistyped_command_is_refused_and_never_clears_or_sends() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("one")));
    gw.push(Reply::sse(anthropic_text("two")));
    gw.push(Reply::sse(anthropic_text("three")));
    let h = home();
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    let o = cicy(h.path(), &url, &["chat", "w-1", "hi"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let conv = conversation(h.path());

    let o = cicy(h.path(), &url, &["chat", "w-1", "/clera"], None).await;
    assert_eq!((o.code, o.stdout.as_str(), o.stderr.clone()), (1, "", refusal("/clera")));
    let o = cicy(h.path(), &url, &["chat", "w-1"], Some("/compat\n/clera\n/clear now\nsecond\n/exit\n")).await;
    assert_eq!((o.code, o.stdout.as_str()), (1, "two\n"), "the refused lines fail the session: {}", o.stderr);
    for word in ["/compat", "/clera", "/clear now"] {
        assert!(o.stderr.contains(&refusal(word)), "{word}: {}", o.stderr);
    }
    assert_eq!(conversation(h.path()), conv, "nothing was cleared");
    assert_eq!(gw.requests().len(), 2, "no mistyped command reached the gateway");
    assert_eq!(last_user_text(&gw.requests()[1]), "second");

    // A path is a message, and `//` sends a leading `/`.
    let o = cicy(h.path(), &url, &["chat", "w-1", "//clear is what I typed"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(last_user_text(&gw.requests()[2]), "/clear is what I typed");
    let o = cicy(h.path(), &url, &["history", "w-1"], None).await;
    assert_eq!(
        o.stdout.lines().skip(1).collect::<Vec<_>>(),
        [
            "[1] user: hi",
            "[2] assistant: one",
            "[3] user: second",
            "[4] assistant: two",
            "[5] user: /clear is what I typed",
            "[6] assistant: three"
        ]
    );
}

#[tokio::test]
async fn exact_commands_still_run() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("one")));
    let h = home();
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    cicy(h.path(), &url, &["chat", "w-1", "hi"], None).await;
    let conv = conversation(h.path());
    let o = cicy(h.path(), &url, &["chat", "w-1"], Some("  /clear  \n")).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let new = conversation(h.path());
    assert_ne!(new, conv);
    assert!(o.stderr.contains(&format!("· /clear: new conversation {new}; the previous one ({conv}) is kept on disk\n")), "{}", o.stderr);
    assert_eq!(gw.requests().len(), 1);
}

#[tokio::test]
async fn chat_file_sends_the_whole_file_as_one_message() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("read it")));
    gw.push(Reply::sse(anthropic_text("read stdin")));
    let h = home();
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    let file = h.path().join("notes.txt");
    let text = "line one\n/clear\nline three\n";
    std::fs::write(&file, text).expect("write");
    let f = file.to_string_lossy().into_owned();
    let o = cicy(h.path(), &url, &["chat", "w-1", "--file", &f], None).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "read it\n"), "{}", o.stderr);
    assert_eq!(gw.requests().len(), 1);
    assert_eq!(last_user_text(&gw.requests()[0]), text);

    let o = cicy(h.path(), &url, &["chat", "w-1", "--file", "-"], Some("first\nsecond\n")).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "read stdin\n"), "{}", o.stderr);
    assert_eq!(gw.requests().len(), 2, "all of stdin is one turn");
    assert_eq!(last_user_text(&gw.requests()[1]), "first\nsecond\n");
}

#[tokio::test]
async fn chat_file_refuses_an_empty_or_non_utf8_file_before_sending() {
    let gw = ScriptedGateway::start().await;
    let h = home();
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    let empty = h.path().join("empty.txt");
    std::fs::write(&empty, "  \n").expect("write");
    let o = cicy(h.path(), &url, &["chat", "w-1", "--file", &empty.to_string_lossy()], None).await;
    assert_eq!((o.code, o.stderr.clone()), (2, format!("error: {} is empty; nothing was sent\n", empty.display())));
    let bad = h.path().join("bad.txt");
    std::fs::write(&bad, b"ok \xff").expect("write");
    let o = cicy(h.path(), &url, &["chat", "w-1", "--file", &bad.to_string_lossy()], None).await;
    assert_eq!((o.code, o.stderr.clone()), (2, format!("error: {} is not valid UTF-8 (at byte 3); nothing was sent\n", bad.display())));
    let o = cicy(h.path(), &url, &["chat", "w-1", "text", "--file", &bad.to_string_lossy()], None).await;
    assert_eq!(o.code, 2, "text and --file conflict: {}", o.stderr);
    assert!(gw.requests().is_empty());
}
