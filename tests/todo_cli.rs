//! `cicy-agent todo …` and `cicy-agent time …` as a user runs them: real processes, a temporary
//! `$CICY_HOME`, `TZ=UTC` (docs/design.md §10 "CLI", "Tests").

use std::path::Path;

use chrono::{DateTime, Utc};
use cicy_test_support::cli::{command, Out};

const NO_GATEWAY: &str = "http://127.0.0.1:9";

const FORMS: &str =
    r#"use "+N <unit>" (unit minute|min|hour|hr|day|week, optional s), "YYYY-MM-DDTHH:MM[:SS]", "YYYY-MM-DD HH:MM[:SS]" or "YYYY-MM-DD""#;

async fn cicy(home: &Path, args: &[&str]) -> Out {
    let out = command(home, NO_GATEWAY, args).env("TZ", "UTC").output().await.unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// (exit code, stdout, stderr).
async fn run(home: &Path, args: &[&str]) -> (i32, String, String) {
    let o = cicy(home, args).await;
    (o.code, o.stdout, o.stderr)
}

fn ok(stdout: &str) -> (i32, String, String) {
    (0, stdout.to_string(), String::new())
}

fn err(stderr: &str) -> (i32, String, String) {
    (2, String::new(), format!("error: {stderr}\n"))
}

async fn create(home: &Path) {
    let o = cicy(home, &["create", "Ada", "--role-template", "concierge"]).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "w-1\n"), "{}", o.stderr);
}

/// `--at` with seconds keeps them, in what is printed and in the unix second the scheduler
/// compares with now: a todo never fires before the second the user wrote.
#[tokio::test]
async fn an_at_with_seconds_is_due_at_that_second() {
    let h = tempfile::tempdir().unwrap();
    let home = h.path();
    create(home).await;
    let steps = [
        ("2026-12-01T14:03:27", "Added todo #1: x (at: 2026-12-01T14:03:27)\n"),
        ("2026-12-01 14:03", "Added todo #2: x (at: 2026-12-01T14:03)\n"),
        ("2026-12-01 14:03:27", "Todo #1 already exists: x (at: 2026-12-01T14:03:27)\n"),
    ];
    for (at, out) in steps {
        assert_eq!(run(home, &["todo", "w-1", "add", "x", "--at", at]).await, ok(out), "{at}");
    }
    let db = rusqlite::Connection::open(home.join("cicy.db")).unwrap();
    let rows: Vec<(u32, String, i64)> = db
        .prepare("SELECT id, at_local, at_unix FROM todo WHERE agent_id = 'w-1' ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let unix = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().timestamp();
    assert_eq!(
        rows,
        [
            (1, "2026-12-01T14:03:27".to_string(), unix("2026-12-01T14:03:27Z")),
            (2, "2026-12-01T14:03".to_string(), unix("2026-12-01T14:03:00Z"))
        ]
    );
    assert_eq!(run(home, &["time", "2026-12-01T14:03:27"]).await, ok("2026-12-01T14:03:27\n"));
}

#[tokio::test]
async fn add_dedupe_ls_done_and_rm() {
    let h = tempfile::tempdir().unwrap();
    let home = h.path();
    create(home).await;

    let add = ["todo", "w-1", "add", "water plants", "--at", "2026-12-01 09:30:15"];
    assert_eq!(run(home, &add).await, ok("Added todo #1: water plants (at: 2026-12-01T09:30:15)\n"));
    assert_eq!(run(home, &add).await, ok("Todo #1 already exists: water plants (at: 2026-12-01T09:30:15)\n"));
    assert_eq!(
        run(home, &["todo", "w-1", "add", "call Bob", "--at", "2026-12-02"]).await,
        ok("Added todo #2: call Bob (at: 2026-12-02T00:00)\n")
    );
    assert_eq!(
        run(home, &["todo", "w-1", "ls"]).await,
        ok("1. [ ] water plants (at: 2026-12-01T09:30:15)\n2. [ ] call Bob (at: 2026-12-02T00:00)\n")
    );

    assert_eq!(run(home, &["todo", "w-1", "done", "1"]).await, ok("Done: #1 water plants\n"));
    assert_eq!(run(home, &["todo", "w-1", "ls"]).await, ok("2. [ ] call Bob (at: 2026-12-02T00:00)\n"));
    assert_eq!(
        run(home, &["todo", "w-1", "ls", "--all"]).await,
        ok("1. [x] water plants (at: 2026-12-01T09:30:15)\n2. [ ] call Bob (at: 2026-12-02T00:00)\n")
    );

    assert_eq!(run(home, &["todo", "w-1", "rm", "2"]).await, ok("Removed: #2 call Bob\n"));
    assert_eq!(run(home, &["todo", "w-1", "ls"]).await, ok("No todos.\n"));
    assert_eq!(run(home, &["todo", "w-1", "ls", "--all"]).await, ok("1. [x] water plants (at: 2026-12-01T09:30:15)\n"));
    // The same text and time after the first is done: a new todo, and ids are never reused.
    assert_eq!(run(home, &add).await, ok("Added todo #3: water plants (at: 2026-12-01T09:30:15)\n"));

    assert_eq!(run(home, &["todo", "w-1", "done", "9"]).await, err("agent w-1 has no todo #9 (see `cicy-agent todo w-1 ls`)"));
    assert_eq!(run(home, &["todo", "w-1", "rm", "2"]).await, err("agent w-1 has no todo #2 (see `cicy-agent todo w-1 ls`)"));
    assert_eq!(run(home, &["todo", "w-1", "done", "1"]).await, err("agent w-1 has no todo #1 (see `cicy-agent todo w-1 ls`)"));
}

#[tokio::test]
async fn a_bad_at_is_refused_with_the_forms_and_writes_nothing() {
    let h = tempfile::tempdir().unwrap();
    let home = h.path();
    create(home).await;
    for expr in ["tomorrow", "30min", "+30  min", "-5 min", "2026-13-01", ""] {
        assert_eq!(
            run(home, &["todo", "w-1", "add", "x", "--at", expr]).await,
            err(&format!("invalid time \"{expr}\": {FORMS}")),
            "--at {expr:?}"
        );
    }
    assert_eq!(run(home, &["todo", "w-1", "ls", "--all"]).await, ok("No todos.\n"));
    assert_eq!(run(home, &["todo", "w-1", "add", " ", "--at", "2026-12-01"]).await, err("a todo needs a text"));
}

#[tokio::test]
async fn an_unknown_agent_or_an_empty_home_is_the_registry_error() {
    let h = tempfile::tempdir().unwrap();
    let home = h.path();
    assert_eq!(
        run(home, &["todo", "w-1", "ls"]).await,
        err(&format!("no agents yet in {} (create one with `cicy-agent create <title>`)", home.display()))
    );
    create(home).await;
    assert_eq!(run(home, &["todo", "w-9", "add", "x", "--at", "+1 day"]).await, err("no agent `w-9` (see `cicy-agent ls`)"));
    assert_eq!(run(home, &["todo", "w-9", "ls"]).await, err("no agent `w-9` (see `cicy-agent ls`)"));
}

/// `YYYY-MM-DDTHH:MM` of `t` in UTC.
fn minute(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M").to_string()
}

#[tokio::test]
async fn time_prints_now_or_the_minute_of_an_expression() {
    let h = tempfile::tempdir().unwrap();
    let home = h.path();
    let half_hour = chrono::TimeDelta::minutes(30);
    for args in [&["time", "+30 min"][..], &["time", "+30", "min"]] {
        let before = Utc::now();
        let o = cicy(home, args).await;
        let after = Utc::now();
        assert_eq!((o.code, o.stderr.as_str()), (0, ""), "{args:?}");
        // The run may cross a minute boundary: either side's minute is right.
        let allowed = [format!("{}\n", minute(before + half_hour)), format!("{}\n", minute(after + half_hour))];
        assert!(allowed.contains(&o.stdout), "{args:?}: {:?} not in {allowed:?}", o.stdout);
    }

    let before = Utc::now().timestamp();
    let o = cicy(home, &["time"]).await;
    let after = Utc::now().timestamp();
    assert_eq!((o.code, o.stderr.as_str(), o.stdout.len()), (0, "", 20), "{:?}", o.stdout);
    let shown = chrono::NaiveDateTime::parse_from_str(&o.stdout, "%Y-%m-%dT%H:%M:%S\n").unwrap().and_utc().timestamp();
    assert!((before..=after).contains(&shown), "{:?} is not between {before} and {after}", o.stdout);

    assert_eq!(run(home, &["time", "2026-12-01 09:30:15"]).await, ok("2026-12-01T09:30:15\n"));
    assert_eq!(run(home, &["time", "2026-12-01", "09:30"]).await, ok("2026-12-01T09:30\n"));
    assert_eq!(run(home, &["time", "tomorrow"]).await, err(&format!("invalid time \"tomorrow\": {FORMS}")));
    assert_eq!(run(home, &["time", "-5 min"]).await, err(&format!("invalid time \"-5 min\": {FORMS}")));
}

/// Sets the mode of every folder and file under `root`, itself included (as in cli_errors.rs).
fn chmod_tree(root: &Path, dir_mode: u32, file_mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(root).unwrap();
    if meta.is_dir() {
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(dir_mode)).unwrap();
        for e in std::fs::read_dir(root).unwrap() {
            chmod_tree(&e.unwrap().path(), dir_mode, file_mode);
        }
    } else if meta.is_file() {
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(file_mode)).unwrap();
    }
}

/// Runs `cicy-agent <args>` as a user the file modes apply to (`nobody` when the tests run as
/// root), through a link to the binary in a folder that user can reach.
async fn run_unprivileged(home: &Path, args: &[&str]) -> (i32, String, String) {
    use std::os::unix::fs::PermissionsExt;
    let reachable = tempfile::tempdir().unwrap();
    std::fs::set_permissions(reachable.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let link = reachable.path().join("cicy-agent");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_cicy-agent"), &link).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_cicy-agent"), &link).unwrap();
    }
    let mut cmd = cicy_test_support::cli::command_with(&link, home, NO_GATEWAY, args);
    cmd.env("TZ", "UTC");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.uid(65534).gid(65534);
    }
    let out = cmd.output().await.unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn ls_works_on_a_read_only_home_and_add_says_why_it_cannot() {
    let h = tempfile::tempdir().unwrap();
    let home = h.path();
    create(home).await;
    assert_eq!(run(home, &["todo", "w-1", "add", "x", "--at", "2026-12-01"]).await.0, 0);
    chmod_tree(home, 0o555, 0o444);
    let ls = run_unprivileged(home, &["todo", "w-1", "ls"]).await;
    let add = run_unprivileged(home, &["todo", "w-1", "add", "y", "--at", "2026-12-01"]).await;
    chmod_tree(home, 0o755, 0o644);
    assert_eq!(ls, ok("1. [ ] x (at: 2026-12-01T00:00)\n"));
    assert_eq!(
        add,
        err(&format!(
            "cannot write the registry {}: its folder is read-only. Commands that only read (`ls`, `show`, `history`, `memory <id> ls`) work on a read-only CICY_HOME; this one writes, so make it writable or set CICY_HOME to a writable folder",
            home.join("cicy.db").display()
        ))
    );
}
