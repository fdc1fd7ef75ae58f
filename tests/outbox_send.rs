//! `cicy-agent outbox-send` and the shim as shell scripts use them (docs/design.md §11 Tests):
//! real processes on a temporary outbox, plus a shell tool that queues through `$CICY_SEND`.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use cicy::outbox::{shim, Outbox};
use cicy_test_support::cli::cicy;
use cicy_test_support::gateway::*;

const BIN: &str = env!("CARGO_BIN_EXE_cicy-agent");

/// `cicy-agent outbox-send <json>` writing to `outbox`, none of the caller's outbox variables
/// inherited.
fn send_cmd(outbox: &Path, json: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["outbox-send", json])
        .env("CICY_OUTBOX_DIR", outbox)
        .env_remove("CICY_SHIM")
        .env_remove("CICY_WORKSPACE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn send(outbox: &Path, json: &str) -> Output {
    send_cmd(outbox, json).output().unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.unwrap().file_name().into_string().unwrap()).collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Waits until process `pid` is blocked on a `flock` (a `->` line of `/proc/locks`).
fn wait_blocked_on_lock(pid: u32) {
    let needle = format!(" {pid} ");
    for _ in 0..2000 {
        let locks = fs::read_to_string("/proc/locks").unwrap();
        if locks.lines().any(|l| l.contains("->") && l.contains(&needle)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("process {pid} never waited for the lock");
}

/// A `sh` that holds a flock on `lock` (as a producer does while numbering) until killed.
fn lock_holder(lock: &Path) -> Child {
    let mut holder = Command::new("sh")
        .args(["-c", r#"exec 9>"$0"; flock 9; echo held; exec sleep 60"#])
        .arg(lock)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "held\n");
    holder
}

fn kill9(child: &mut Child) {
    // SAFETY: plain kill(2) on a child we spawned and have not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) }, 0);
    child.wait().unwrap();
}

#[test]
fn hundred_parallel_sends_are_numbered_1_to_100_with_their_bytes_intact() {
    let dir = tempfile::tempdir().unwrap();
    let ob = Outbox::at(dir.path().join("outbox"));
    let children: Vec<Child> =
        (0..100).map(|i| send_cmd(ob.root(), &format!(r#"{{"type":"send","content":"message {i}"}}"#)).spawn().unwrap()).collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert_eq!(fs::read_to_string(ob.seq_path()).unwrap(), "00000000000000000100\n");
    let queued = names(&ob.new_dir());
    assert_eq!(queued.len(), 100);
    let mut contents = Vec::new();
    for (i, name) in queued.iter().enumerate() {
        let prefix = format!("cmd-{:020}-cmd-", i + 1);
        assert!(name.starts_with(&prefix) && name.ends_with(".json"), "{name}");
        assert_eq!(name.len(), prefix.len() + 6 + ".json".len(), "{name}");
        assert!(name[prefix.len()..prefix.len() + 6].bytes().all(|b| b.is_ascii_alphanumeric()), "{name}");
        contents.push(fs::read_to_string(ob.new_dir().join(name)).unwrap());
    }
    contents.sort();
    let mut want: Vec<String> = (0..100).map(|i| format!("{{\"type\":\"send\",\"content\":\"message {i}\"}}\n")).collect();
    want.sort();
    assert_eq!(contents, want);
    assert!(names(&ob.tmp_dir()).is_empty());
}

#[test]
fn a_holder_killed_by_sigkill_releases_the_lock_to_the_waiting_send() {
    let dir = tempfile::tempdir().unwrap();
    let ob = Outbox::at(dir.path().join("outbox"));
    fs::create_dir_all(ob.root()).unwrap();
    let mut holder = lock_holder(&ob.lock_path());
    let waiting = send_cmd(ob.root(), r#"{"type":"send","content":"after"}"#).spawn().unwrap();
    wait_blocked_on_lock(waiting.id());
    assert!(names(&ob.new_dir()).is_empty(), "published without the lock");
    kill9(&mut holder);
    let out = waiting.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(ob.seq_path()).unwrap(), "00000000000000000001\n");
    assert_eq!(names(&ob.new_dir()).len(), 1);
}

#[test]
fn a_send_killed_while_waiting_for_the_lock_leaves_the_next_send_working() {
    let dir = tempfile::tempdir().unwrap();
    let ob = Outbox::at(dir.path().join("outbox"));
    fs::create_dir_all(ob.root()).unwrap();
    let mut holder = lock_holder(&ob.lock_path());
    let mut victim = send_cmd(ob.root(), r#"{"type":"send","content":"killed"}"#).spawn().unwrap();
    wait_blocked_on_lock(victim.id());
    kill9(&mut victim);
    kill9(&mut holder);
    let out = send(ob.root(), r#"{"type":"send","content":"next"}"#);
    assert!(out.status.success(), "{}", stderr(&out));
    let queued = names(&ob.new_dir());
    assert_eq!(queued.len(), 1);
    assert!(queued[0].starts_with("cmd-00000000000000000001-cmd-"), "{queued:?}");
    assert_eq!(fs::read_to_string(ob.new_dir().join(&queued[0])).unwrap(), "{\"type\":\"send\",\"content\":\"next\"}\n");
    // The killed send's staged copy is all it leaves (B3 step 7); it was never numbered.
    assert_eq!(names(&ob.tmp_dir()).len(), 1);
}

#[test]
fn a_stale_lock_directory_is_removed_and_the_send_goes_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let ob = Outbox::at(dir.path().join("outbox"));
    fs::create_dir_all(ob.lock_path()).unwrap();
    fs::File::open(ob.lock_path()).unwrap().set_modified(SystemTime::now() - Duration::from_secs(11)).unwrap();
    let out = send(ob.root(), r#"{"type":"x"}"#);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(ob.lock_path().is_file());
    assert_eq!(names(&ob.new_dir()).len(), 1);
}

#[test]
fn a_non_numeric_seq_exits_1_naming_the_file_and_publishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ob = Outbox::at(dir.path().join("outbox"));
    fs::create_dir_all(ob.root()).unwrap();
    fs::write(ob.seq_path(), "x\n").unwrap();
    let out = send(ob.root(), r#"{"type":"x"}"#);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out), format!("error: {}: not a sequence number: \"x\"\n", ob.seq_path().display()));
    assert!(names(&ob.new_dir()).is_empty());
    assert!(names(&ob.tmp_dir()).is_empty());
    assert_eq!(fs::read_to_string(ob.seq_path()).unwrap(), "x\n");
}

#[test]
fn a_seq_without_newline_continues_from_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let ob = Outbox::at(dir.path().join("outbox"));
    fs::create_dir_all(ob.root()).unwrap();
    fs::write(ob.seq_path(), "7").unwrap();
    let out = send(ob.root(), r#"{"type":"x"}"#);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(ob.seq_path()).unwrap(), "00000000000000000008\n");
    assert!(names(&ob.new_dir())[0].starts_with("cmd-00000000000000000008-cmd-"));
}

#[test]
fn bad_json_or_no_type_exits_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("outbox");
    let cases = [
        ("{\"type\":", "error: outbox-send: the argument is not JSON (EOF while parsing a value at line 1 column 8)\n"),
        (r#"{"content":"hi"}"#, "error: outbox-send: the command has no \"type\" (e.g. {\"type\":\"send\",\"content\":\"hi\"})\n"),
        (r#"{"type":""}"#, "error: outbox-send: \"type\" must be a non-empty string, got \"\"\n"),
        ("-1", "error: outbox-send: the argument must be a JSON object\n"),
    ];
    for (json, text) in cases {
        let out = send(&root, json);
        assert_eq!((out.status.code(), stderr(&out).as_str()), (Some(2), text), "{json}");
        assert!(out.stdout.is_empty());
    }
    assert!(!root.exists());
}

#[test]
fn the_shim_writes_to_the_outbox_beside_it_from_any_cwd() {
    let ws = tempfile::tempdir().unwrap();
    let path = shim::ensure_shim(ws.path(), Path::new(BIN)).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o755);
    let elsewhere = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(&path);
    cmd.arg(r#"{"type":"send","content":"via shim"}"#)
        .current_dir(elsewhere.path())
        .env_remove("CICY_OUTBOX_DIR")
        .env_remove("CICY_WORKSPACE");
    // A child another test forks while the shim is still open for writing holds a copy of
    // that descriptor until its exec: exec of the shim meanwhile fails with ETXTBSY.
    let out = (0..100)
        .find_map(|_| match cmd.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(Duration::from_millis(10));
                None
            }
            other => Some(other.unwrap()),
        })
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let ob = Outbox::of_workspace(ws.path());
    let queued = names(&ob.new_dir());
    assert_eq!(queued.len(), 1);
    assert_eq!(fs::read_to_string(ob.new_dir().join(&queued[0])).unwrap(), "{\"type\":\"send\",\"content\":\"via shim\"}\n");
    assert!(names(elsewhere.path()).is_empty());
}

#[tokio::test]
async fn a_shell_tool_gets_the_shim_and_queues_through_cicy_send() {
    let h = tempfile::tempdir().unwrap();
    let gw = ScriptedGateway::start().await;
    let script = r#""$CICY_SEND" '{"type":"send","content":"from the tool"}' && printf '%s|%s|%s|%s|%s|%s' "$CICY_SEND" "$CHORUZ_SEND" "$CICY_OUTBOX_DIR" "$CHORUZ_OUTBOX_DIR" "$CICY_WORKSPACE|$CHORUZ_WORKSPACE" "$CICY_AGENT_ID""#;
    let input = serde_json::json!({ "command": script }).to_string();
    gw.push(Reply::sse(anthropic_tool_use("t1", "shell", &input)));
    gw.push(Reply::sse(anthropic_text("queued")));
    let url = gw.url();
    let created = cicy(h.path(), &url, &["create", "Ada"], None).await;
    assert_eq!(created.code, 0, "{}", created.stderr);
    let chat = cicy(h.path(), &url, &["chat", "w-1", "queue it", "--local"], None).await;
    assert_eq!(chat.code, 0, "{}", chat.stderr);
    let ws = h.path().join("workers/w-1");
    let shim: PathBuf = ws.join(".cicy/send");
    assert_eq!(fs::read(&shim).unwrap(), shim::shim_script(Path::new(BIN)));
    let ob = Outbox::of_workspace(&ws);
    let queued = names(&ob.new_dir());
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert_eq!(fs::read_to_string(ob.new_dir().join(&queued[0])).unwrap(), "{\"type\":\"send\",\"content\":\"from the tool\"}\n");
    let (s, o, w) = (shim.display(), ob.root().display(), ws.display());
    let want = format!("{s}|{s}|{o}|{o}|{w}|{w}|w-1\nexit code: 0");
    let second_request = String::from_utf8(gw.requests()[1].body.clone()).unwrap();
    assert!(second_request.contains(&serde_json::to_string(&want).unwrap()), "{second_request}");
}
