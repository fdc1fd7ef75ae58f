//! `cicy-agent send` and `cicy-agent inbox` through the real binary (docs/design.md §10 "CLI"): the
//! files written in the reference A6 format and what `inbox` prints, without moving a file.

use std::fs;
use std::path::{Path, PathBuf};

use cicy::wake::inbox::Mailbox;
use cicy_test_support::cli::Out;

const NO_GATEWAY: &str = "http://127.0.0.1:9";

async fn cicy(home: &Path, args: &[&str]) -> Out {
    cicy_test_support::cli::cicy(home, NO_GATEWAY, args, None).await
}

async fn create(home: &Path) -> Mailbox {
    let o = cicy(home, &["create", "Ada", "--role-template", "concierge"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    Mailbox::of_workspace(&home.join("workers/w-1"))
}

/// The file name `send` printed, checked against the line's shape.
fn sent_name(o: &Out) -> String {
    assert_eq!((o.code, o.stderr.as_str()), (0, ""));
    let name = o.stdout.strip_prefix("Sent to w-1: ").and_then(|s| s.strip_suffix('\n')).expect(&o.stdout);
    assert!(name.ends_with(".md") && !name.contains(['/', '\n']), "{name}");
    name.to_string()
}

fn listing(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn put(dir: &Path, name: &str, ts: &str, from: &str, body: &str) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join(name), format!("---\nfrom: {from}\nsubject: s\ntimestamp: {ts}\n---\n\n{body}\n")).unwrap();
}

#[tokio::test]
async fn send_then_inbox_prints_pending_then_dialog() {
    let h = tempfile::tempdir().unwrap();
    let mb = create(h.path()).await;
    let first = sent_name(&cicy(h.path(), &["send", "w-1", "Is the build green?", "--subject", "Build"]).await);
    let second = sent_name(&cicy(h.path(), &["send", "w-1", "Deploy after lunch.\nThanks", "--from", "ops"]).await);
    assert!(first.contains("_build_") && second.contains("_deploy-after-lunch_"), "{first} {second}");
    put(&mb.archive_dir(), "2026-12-01T09-00-00_a.md", "2026-12-01T09:00:00", "human", "Hi");
    put(&mb.outbox_dir(), "2026-12-01T09-01-00_b.md", "2026-12-01T09:01:00", "agent", "Hello!");

    let o = cicy(h.path(), &["inbox", "w-1"]).await;
    assert_eq!((o.code, o.stderr.as_str()), (0, ""));
    let masked = o.stdout.replace(&first, "<first>").replace(&second, "<second>");
    assert_eq!(
        masked,
        "Pending (2):\n\
         --- <first> ---\nFrom: human\nSubject: Build\n\nIs the build green?\n\n\
         --- <second> ---\nFrom: ops\nSubject: Deploy after lunch.\n\nDeploy after lunch.\nThanks\n\n\
         Dialog:\n\
         [2026-12-01 09:00] from: human\nHi\n\n\
         [2026-12-01 09:01] from: agent\nHello!\n\n"
    );

    let o = cicy(h.path(), &["inbox", "w-1", "--since", "2026-12-01T09:01", "--json"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let pending: Vec<&str> = v["pending"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(pending, [first.as_str(), second.as_str()]);
    assert_eq!(v["pending"][1]["from"], "ops");
    assert_eq!(
        v["dialog"],
        serde_json::json!([{"box": "outbox", "name": "2026-12-01T09-01-00_b.md", "from": "agent", "subject": "s",
            "timestamp": "2026-12-01T09:01:00", "question": false, "meta": {}, "body": "Hello!"}])
    );
}

#[tokio::test]
async fn empty_inbox_and_history() {
    let h = tempfile::tempdir().unwrap();
    create(h.path()).await;
    let o = cicy(h.path(), &["inbox", "w-1"]).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "No pending messages.\n\nDialog:\n(no dialog history yet)\n"));
}

#[tokio::test]
async fn stdin_body_is_written_exactly_with_question_and_thread() {
    let h = tempfile::tempdir().unwrap();
    let mb = create(h.path()).await;
    let o = cicy_test_support::cli::cicy(
        h.path(),
        NO_GATEWAY,
        &["send", "w-1", "--stdin", "--question", "--thread", "t-7", "--subject", "Q"],
        Some("line one\n\nline two\n"),
    )
    .await;
    let name = sent_name(&o);
    let m = mb.read(&name).unwrap();
    let file = fs::read_to_string(mb.inbox_dir().join(&name)).unwrap();
    assert_eq!(
        file,
        format!("---\nfrom: human\nsubject: Q\ntimestamp: {}\nquestion: true\nthread: t-7\n---\n\nline one\n\nline two\n", m.timestamp)
    );
    assert_eq!(name.get(..19), Some(m.timestamp.replace(':', "-").as_str()), "the name starts with the timestamp");
    let names: Vec<String> = fs::read_dir(mb.inbox_dir()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, [name], "no temp file is left");
}

#[tokio::test]
async fn bad_input_is_a_clear_error_and_writes_nothing() {
    let h = tempfile::tempdir().unwrap();
    let mb = create(h.path()).await;
    let o = cicy(h.path(), &["send", "w-9", "hi"]).await;
    assert_eq!((o.code, o.stderr.as_str()), (2, "error: no agent `w-9` (see `cicy-agent ls`)\n"));
    let o = cicy(h.path(), &["send", "w-1", " \n "]).await;
    assert_eq!((o.code, o.stderr.as_str()), (2, "error: the message body is empty\n"));
    let o = cicy(h.path(), &["send", "w-1", "hi", "--from", " "]).await;
    assert_eq!((o.code, o.stderr.as_str()), (2, "error: the sender (`from`) is empty\n"));
    let o = cicy(h.path(), &["inbox", "w-9"]).await;
    assert_eq!((o.code, o.stderr.as_str()), (2, "error: no agent `w-9` (see `cicy-agent ls`)\n"));
    let o = cicy(h.path(), &["inbox", "w-1", "--since", "tomorrow"]).await;
    assert_eq!(o.code, 2);
    assert_eq!(o.stderr, "error: --since `tomorrow` is not a time: use YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS] or YYYY-MM-DD HH:MM[:SS]\n");
    let o = cicy(h.path(), &["inbox", "w-1", "--last", "3", "--all"]).await;
    assert_eq!(o.code, 2);
    assert!(o.stderr.starts_with("error: the argument '--last <N>' cannot be used with '--all'"), "{}", o.stderr);
    assert!(!mb.root().exists());
    let ws = h.path().join("workers/w-1");
    fs::remove_dir_all(&ws).unwrap();
    let o = cicy(h.path(), &["send", "w-1", "hi"]).await;
    assert_eq!((o.code, o.stderr), (2, format!("error: the workspace of w-1 ({}) does not exist\n", ws.display())));
    assert!(!ws.exists());
}

#[tokio::test]
async fn inbox_never_moves_a_file() {
    let h = tempfile::tempdir().unwrap();
    let mb = create(h.path()).await;
    sent_name(&cicy(h.path(), &["send", "w-1", "one"]).await);
    put(&mb.archive_dir(), "2026-12-01T09-00-00_a.md", "2026-12-01T09:00:00", "human", "Hi");
    fs::write(mb.inbox_dir().join("broken.md"), "no front matter").unwrap();
    fs::write(mb.inbox_dir().join(".half.md.tmp"), "---\n").unwrap();
    let before = listing(mb.root());
    let o = cicy(h.path(), &["inbox", "w-1", "--all"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.starts_with("Pending (1):\n"), "{}", o.stdout);
    assert_eq!(
        o.stderr,
        format!(
            "warning: {} cannot be read: it does not start with a `---` front matter line (left in place)\n",
            mb.inbox_dir().join("broken.md").display()
        )
    );
    cicy(h.path(), &["inbox", "w-1", "--json"]).await;
    assert_eq!(listing(mb.root()), before);
}
