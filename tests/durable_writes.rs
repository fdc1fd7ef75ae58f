//! What a turn costs the disk: every fsync and fdatasync of a tool-free one-shot `cicy-agent
//! chat`, counted by strace on the real binary, with the file each one made durable. A change
//! that adds a durable write shows here as a changed list; the crash tests (tests/crash.rs)
//! check that the writes left are still enough.

use std::path::Path;

use cicy_test_support::cli::{cicy, command_with};
use cicy_test_support::gateway::*;

/// The durable writes strace saw, in order, as `fsync <path>` with the home, the conversation
/// id and temp-file names masked.
fn durable_writes(trace: &str, home: &Path, conv: &str) -> Vec<String> {
    let home = home.to_string_lossy();
    trace
        .lines()
        .filter_map(|l| {
            let call = ["fsync(", "fdatasync("].into_iter().find(|c| l.contains(c))?;
            let path = l.split_once('<')?.1.split_once('>')?.0;
            let path = path.replace(home.as_ref(), "$CICY_HOME").replace(conv, "<conv>");
            let path = match path.split_once("/.tmp-") {
                Some((dir, _)) => format!("{dir}/.tmp-*"),
                None => path,
            };
            Some(format!("{} {path}", call.trim_end_matches('(')))
        })
        .collect()
}

#[tokio::test]
async fn a_tool_free_one_shot_turn_makes_these_writes_durable_and_no_others() {
    let h = tempfile::tempdir().unwrap();
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("first")));
    gw.push(Reply::sse(anthropic_text("second")));
    assert_eq!(cicy(h.path(), "", &["create", "Ada"], None).await.stdout, "w-1\n");
    // The first turn creates the agent's folders and files; the second is the steady state.
    let o = cicy(h.path(), &gw.url(), &["chat", "w-1", "one"], None).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "first\n"), "{}", o.stderr);

    let trace = h.path().join("strace.txt");
    let strace = Path::new("/usr/bin/strace");
    assert!(strace.exists(), "strace is needed (scripts/test.sh installs it)");
    let mut cmd = command_with(strace, h.path(), &gw.url(), &["-f", "-y", "-e", "trace=fsync,fdatasync", "-o"]);
    cmd.arg(&trace).arg(env!("CARGO_BIN_EXE_cicy-agent")).args(["chat", "w-1", "two"]);
    let out = cmd.output().await.unwrap();
    assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stdout).as_ref()), (Some(0), "second\n"));

    let ws = h.path().join("workers/w-1");
    let conv = std::fs::read_link(ws.join(".cicy/history/current.json")).unwrap();
    let conv = conv.parent().unwrap().file_name().unwrap().to_string_lossy().into_owned();
    let writes = durable_writes(&std::fs::read_to_string(&trace).unwrap(), h.path(), &conv);
    let c = "$CICY_HOME/workers/w-1/.cicy";
    let expected = vec![
        // Turn start: current.json (the question), reply.json (working), one folder fsync.
        format!("fsync {c}/history/chat/<conv>/.tmp-*"),
        format!("fsync {c}/history/chat/<conv>/.tmp-*"),
        format!("fsync {c}/history/chat/<conv>"),
        // Turn end: current.json (the answer), reply.json (completed), one folder fsync.
        format!("fsync {c}/history/chat/<conv>/.tmp-*"),
        format!("fsync {c}/history/chat/<conv>/.tmp-*"),
        format!("fsync {c}/history/chat/<conv>"),
        // The memory write loop's buffer of the turn (§8).
        format!("fsync {c}/memory/.tmp-*"),
        format!("fsync {c}/memory"),
        // The event log at `turn_ended`. No `hwm`: the turn's seqs come from the block the
        // last holder of the log's writer lease left (it is written once per 1024 seqs).
        format!("fdatasync {c}/events/events.jsonl"),
    ];
    assert_eq!(writes, expected);
    assert_eq!(gw.requests().len(), 2);
}
