//! Errors a new user meets, through a real `cicy-agent` process: each must say what is wrong
//! (a read-only home, `compact` with nothing to compact, a history set aside as corrupt,
//! `max_tool_rounds: 0`, a role folder with an invalid name, no memories, a turn's outcome).

use std::path::Path;

use cicy_test_support::cli::{cicy, command_with};
use cicy_test_support::gateway::*;

fn home() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// Sets the mode of every folder (`dir_mode`) and file (`file_mode`) under `root`, itself
/// included; symlinks are left alone.
fn chmod_tree(root: &Path, dir_mode: u32, file_mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(root).expect("stat");
    if meta.is_dir() {
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(dir_mode)).expect("chmod");
        for e in std::fs::read_dir(root).expect("read_dir") {
            chmod_tree(&e.expect("entry").path(), dir_mode, file_mode);
        }
    } else if meta.is_file() {
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(file_mode)).expect("chmod");
    }
}

/// Runs `cicy-agent <args>` as a user the file modes apply to: as root (which writes anything)
/// the child runs as `nobody` (65534). The checkout may sit in a folder only root can enter
/// (a `mktemp -d` clone), so `nobody` runs a link to the binary from a folder it can reach.
async fn cicy_unprivileged(home: &Path, gateway: &str, args: &[&str]) -> cicy_test_support::cli::Out {
    use std::os::unix::fs::PermissionsExt;
    let exe = Path::new(env!("CARGO_BIN_EXE_cicy-agent"));
    let reachable = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(reachable.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let link = reachable.path().join("cicy-agent");
    if std::fs::hard_link(exe, &link).is_err() {
        std::fs::copy(exe, &link).expect("copy cicy-agent");
    }
    let mut cmd = command_with(&link, home, gateway, args);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.uid(65534).gid(65534);
    }
    let out = cmd.output().await.expect("run cicy-agent");
    cicy_test_support::cli::Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn read_only_message(home: &Path) -> String {
    format!(
        "error: cannot write the registry {}: its folder is read-only. Commands that only read (`ls`, `show`, `history`, `memory <id> ls`) work on a read-only CICY_HOME; this one writes, so make it writable or set CICY_HOME to a writable folder\n",
        home.join("cicy.db").display()
    )
}

#[tokio::test]
async fn a_read_only_home_serves_reads_and_says_why_a_write_cannot_run() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("Hello.")));
    let h = home();
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    let o = cicy(h.path(), &url, &["chat", "w-1", "hi"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    chmod_tree(h.path(), 0o555, 0o444);

    let o = cicy_unprivileged(h.path(), &url, &["ls"]).await;
    let ws = h.path().join("workers/w-1");
    assert_eq!(
        (o.code, o.stdout.as_str(), o.stderr.as_str()),
        (0, format!("w-1\tAda\tassistant\tworker\t{}\t-\n", ws.display()).as_str(), "")
    );
    let o = cicy_unprivileged(h.path(), &url, &["show", "w-1"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.starts_with("id: w-1\ntitle: Ada\n"), "{}", o.stdout);
    let o = cicy_unprivileged(h.path(), &url, &["history", "w-1"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout.lines().skip(1).collect::<Vec<_>>(), ["[1] user: hi", "[2] assistant: Hello."]);
    let o = cicy_unprivileged(h.path(), &url, &["memory", "w-1", "ls"]).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, ""), "{}", o.stderr);
    let lock = ws.join(".cicy/memory/.lock");
    assert_eq!(
        o.stderr,
        format!("no memories yet for w-1\n· cannot count the buffered turns: {}: Permission denied (os error 13)\n", lock.display())
    );

    let o = cicy_unprivileged(h.path(), &url, &["create", "Bo"]).await;
    assert_eq!((o.code, o.stdout.as_str()), (2, ""));
    assert_eq!(o.stderr, read_only_message(h.path()));
    let o = cicy_unprivileged(h.path(), &url, &["chat", "w-1", "again"]).await;
    assert_eq!(o.code, 2);
    assert_eq!(o.stderr, read_only_message(h.path()));
    assert_eq!(gw.requests().len(), 1, "nothing is sent from a read-only home");
    chmod_tree(h.path(), 0o755, 0o644);
}

#[tokio::test]
async fn creating_in_an_empty_read_only_home_says_it_is_read_only() {
    let h = home();
    chmod_tree(h.path(), 0o555, 0o444);
    let o = cicy_unprivileged(h.path(), "http://127.0.0.1:9", &["create", "Ada"]).await;
    assert_eq!(o.code, 2);
    assert_eq!(o.stderr, read_only_message(h.path()));
    let o = cicy_unprivileged(h.path(), "http://127.0.0.1:9", &["ls"]).await;
    assert_eq!((o.code, o.stderr.as_str()), (0, "no agents yet (create one with `cicy-agent create <title>`)\n"));
    chmod_tree(h.path(), 0o755, 0o644);
}

#[tokio::test]
async fn compact_on_an_empty_conversation_says_it_is_empty() {
    let gw = ScriptedGateway::start().await;
    let h = home();
    cicy(h.path(), &gw.url(), &["create", "Ada"], None).await;
    let o = cicy(h.path(), &gw.url(), &["compact", "w-1"], None).await;
    assert_eq!(o.code, 1);
    assert_eq!(o.stderr, "error (compact): /compact: nothing to compact: the conversation is empty; nothing was changed\n");
    assert!(gw.requests().is_empty());
}

#[tokio::test]
async fn history_after_a_corrupt_current_json_was_set_aside_names_it() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("fine")));
    let h = home();
    let url = gw.url();
    cicy(h.path(), &url, &["create", "Ada"], None).await;
    cicy(h.path(), &url, &["chat", "w-1", "hi"], None).await;
    let link = h.path().join("workers/w-1/.cicy/history/current.json");
    let real = link.parent().expect("history dir").join(std::fs::read_link(&link).expect("symlink"));
    let conv = real.parent().and_then(|p| p.file_name()).expect("conv").to_string_lossy().into_owned();
    std::fs::write(&real, b"{\"conversation_id\": truncated").expect("corrupt it");
    let o = cicy(h.path(), &url, &["chat", "w-1", "hello?"], None).await;
    assert_eq!(o.code, 2, "the corrupt file is set aside: {}", o.stderr);
    let aside = std::fs::read_dir(real.parent().expect("conv dir"))
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("current.json.corrupt-"))
        .expect("set aside");

    let o = cicy(h.path(), &url, &["history", "w-1"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, format!("conversation {conv} (0 messages)\n"));
    assert_eq!(
        o.stderr,
        format!("note: conversation {conv} has no current.json: the unreadable one was set aside as chat/{conv}/{aside} (kept as it was); the next chat starts this conversation afresh\n")
    );
}

#[tokio::test]
async fn max_tool_rounds_zero_is_refused_naming_the_file_and_field() {
    let h = home();
    let dir = h.path().join("roles/zero");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("meta.yaml"), "name: Zero\nmax_tool_rounds: 0\n").expect("meta.yaml");
    let o = cicy(h.path(), "http://127.0.0.1:9", &["create", "X", "--role-template", "zero"], None).await;
    assert_eq!(o.code, 2);
    assert_eq!(
        o.stderr,
        format!(
            "error: {}: max_tool_rounds: 0 is not allowed: a turn needs at least 1 round (1: one answer without tools)\n",
            dir.join("meta.yaml").display()
        )
    );
    assert!(!h.path().join("workers").exists());
}

#[tokio::test]
async fn a_role_folder_with_an_invalid_name_is_named_not_skipped_silently() {
    let h = home();
    std::fs::create_dir_all(h.path().join("roles/My Role")).expect("mkdir");
    std::fs::create_dir_all(h.path().join("roles/good-one")).expect("mkdir");
    let o = cicy(h.path(), "", &["roles"], None).await;
    assert_eq!(o.code, 0);
    assert_eq!(
        o.stderr,
        "warning: roles/My Role is skipped: `My Role` is not a valid role template name (use letters, digits, `-` and `_`)\n"
    );
    assert!(o.stdout.contains("good-one\t"), "{}", o.stdout);
    let o = cicy(h.path(), "", &["create", "X", "--role-template", "myrole"], None).await;
    assert_eq!(o.code, 2);
    assert_eq!(
        o.stderr,
        "error: unknown role template `myrole` (available: assistant, concierge, coordinator, developer, good-one); skipped for their names: roles/My Role\n"
    );
}

#[tokio::test]
async fn memory_ls_with_no_memories_says_so() {
    let h = home();
    cicy(h.path(), "", &["create", "Ada"], None).await;
    let o = cicy(h.path(), "", &["memory", "w-1", "ls"], None).await;
    assert_eq!((o.code, o.stdout.as_str(), o.stderr.as_str()), (0, "", "no memories yet for w-1\n"));
}

#[tokio::test]
async fn the_turn_end_line_prints_the_outcome_bare() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(400, &[], r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#));
    let h = home();
    cicy(h.path(), &gw.url(), &["create", "Ada"], None).await;
    let o = cicy(h.path(), &gw.url(), &["chat", "w-1", "hi"], None).await;
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert_eq!(o.stderr.lines().last(), Some("· turn ended: blocked"), "{}", o.stderr);
}
