//! MCP tools (docs/design.md §12) against a real MCP server nobody on this project wrote: the MCP
//! project's reference server `@modelcontextprotocol/server-everything`, installed from npm by
//! `scripts/mcp-test-server.sh` (scripts/test.sh passes its path in `CICY_TEST_MCP_SERVER`;
//! without it the test runs the script itself). Turns run against the scripted gateway.

use std::sync::OnceLock;
use std::time::Duration;

use cicy::event::{EventKind, TurnOutcome};
use cicy::turn;
use cicy_test_support::fixture::{collector, collector_with, kinds, TestHome};
use cicy_test_support::gateway::*;
use cicy_test_support::wait::Pidfd;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// The variable named as the gateway's `api_key_env` in these tests, set in this process: an
/// MCP server must not see it.
const KEY_VAR: &str = "CICY_MCP_TEST_GATEWAY_KEY";
const KEY: &str = "sk-mcp-test-secret-4711";

/// The server's entry script ([`cicy_test_support::mcp::server_entry`]). Also sets [`KEY_VAR`] once,
/// before any test of this binary starts a process (every test calls this first).
fn server_entry() -> &'static str {
    static KEY_SET: OnceLock<()> = OnceLock::new();
    KEY_SET.get_or_init(|| std::env::set_var(KEY_VAR, KEY));
    cicy_test_support::mcp::server_entry()
}

/// A home whose `tester` role has server `everything` (with `timeout_secs`) and whose
/// gateway key lives in [`KEY_VAR`].
fn home(gw: &ScriptedGateway, timeout_secs: u64) -> TestHome {
    let entry = server_entry();
    let t = TestHome::new(&gw.url(), 0);
    let cfg = t.home.config_path();
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(&format!("  api_key_env: {KEY_VAR}\n"));
    std::fs::write(&cfg, text).unwrap();
    let meta = t.home.roles_dir().join("tester/meta.yaml");
    let mut meta_text = std::fs::read_to_string(&meta).unwrap();
    meta_text.push_str(&format!(
        "mcp_servers:\n  everything:\n    command: node\n    args: [{entry:?}, stdio]\n    env: {{MCP_TEST_MARK: from-meta}}\n    timeout_secs: {timeout_secs}\n"
    ));
    std::fs::write(meta, meta_text).unwrap();
    t
}

fn body(r: &RecordedRequest) -> Value {
    serde_json::from_slice(&r.body).expect("request body is JSON")
}

/// The `tool_result` blocks of the last message of request `r`: (content, is_error).
fn results(r: &RecordedRequest) -> Vec<(String, bool)> {
    let b = body(r);
    let last = b["messages"].as_array().unwrap().last().unwrap().clone();
    last["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "tool_result")
        .map(|c| (c["content"].as_str().unwrap().to_string(), c["is_error"] == json!(true)))
        .collect()
}

const TOOLS: &[&str] = &[
    "mcp__everything__echo",
    "mcp__everything__get-annotated-message",
    "mcp__everything__get-env",
    "mcp__everything__get-resource-links",
    "mcp__everything__get-resource-reference",
    "mcp__everything__get-structured-content",
    "mcp__everything__get-sum",
    "mcp__everything__get-tiny-image",
    "mcp__everything__gzip-file-as-resource",
    "mcp__everything__simulate-research-query",
    "mcp__everything__toggle-simulated-logging",
    "mcp__everything__toggle-subscriber-updates",
    "mcp__everything__trigger-long-running-operation",
    "shell",
    "skill",
];

#[tokio::test]
async fn a_turn_lists_the_servers_tools_sorted_and_calls_them() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_uses(&[
        ("t1", "mcp__everything__echo", r#"{"message":"hi there"}"#),
        ("t2", "mcp__everything__get-sum", r#"{"a":2,"b":40}"#),
        ("t3", "mcp__everything__get-tiny-image", r#"{}"#),
        ("t4", "mcp__everything__get-env", r#"{}"#),
        ("t5", "mcp__everything__get-sum", r#"{"a":"x"}"#),
    ])));
    gw.push(Reply::sse(anthropic_text("Done.")));
    gw.push(Reply::sse(anthropic_text("Again.")));
    let t = home(&gw, 60);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "use the tools", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let pid = s.mcp().pid("everything").await.expect("the server runs after the turn");

    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    let first = body(&reqs[0]);
    let names: Vec<&str> = first["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, TOOLS);
    // The server's description and schema, key order as the server sent it, on the wire.
    let echo = r#"{"name":"mcp__everything__echo","description":"Echoes back the input string","input_schema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"message":{"type":"string","description":"Message to echo"}},"required":["message"]}}"#;
    assert!(reqs[0].body_str().contains(echo), "{}", reqs[0].body_str());

    let got = results(&reqs[1]);
    assert_eq!(got[0], ("Echo: hi there".to_string(), false));
    assert_eq!(got[1], ("The sum of 2 and 40 is 42.".to_string(), false));
    assert_eq!(
        got[2],
        ("Here's the image you requested:\n[image: image/png, 4033 bytes]\nThe image above is the MCP logo.".to_string(), false)
    );
    // The server's environment: the meta.yaml `env` is there, the gateway key is not.
    assert!(got[3].0.contains("from-meta"), "{}", got[3].0);
    assert!(!got[3].0.contains(KEY) && !got[3].0.contains(KEY_VAR), "the gateway key reached the server: {}", got[3].0);
    // The server refuses the input with `isError: true`: an error result with its text.
    let refused = "MCP error -32602: Input validation error: Invalid arguments for tool get-sum: Invalid input: expected number, received string at a\nInvalid input: expected number, received undefined at b";
    assert_eq!(got[4], (refused.to_string(), true));

    // stderr went to the log, never into a request or an event.
    let log = std::fs::read_to_string(t.workspace(&id).join(".cicy/logs/mcp-everything.log")).unwrap();
    assert!(log.starts_with("--- ") && log.contains("Starting default (STDIO) server..."), "{log}");
    assert!(reqs.iter().all(|r| !r.body_str().contains("Starting default")));
    assert!(!format!("{:?}", kinds(&ev)).contains("Starting default"));

    // The next turn reuses the running server and sends the same tools, byte for byte.
    assert_eq!(turn::run_turn(&mut s, "again", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert_eq!(s.mcp().pid("everything").await, Some(pid));
    let reqs = gw.requests();
    let tools = |r: &RecordedRequest| serde_json::to_vec(&body(r)["tools"]).unwrap();
    assert_eq!(tools(&reqs[2]), tools(&reqs[0]));
    drop(s);
    assert!(ends(pid).await, "the server outlived its session");
}

#[tokio::test]
async fn a_crashed_server_gives_an_error_result_and_is_started_again() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_use("t1", "mcp__everything__echo", r#"{"message":"one"}"#)));
    let (held, gate) = Reply::gated(anthropic_tool_use("t2", "mcp__everything__echo", r#"{"message":"two"}"#));
    gw.push(held);
    gw.push(Reply::sse(anthropic_tool_use("t3", "mcp__everything__echo", r#"{"message":"three"}"#)));
    gw.push(Reply::sse(anthropic_text("Done.")));
    let t = home(&gw, 60);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let pool = s.mcp().clone();
    let (em, _ev) = collector(&id);
    let kill = async {
        gw.wait_for_requests(2).await;
        let pid = pool.pid("everything").await.expect("running after the first call");
        let proc = Pidfd::open(pid as i32).expect("the server process");
        // SAFETY: kill takes a pid and a signal number.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
        assert!(proc.exited_within(Duration::from_secs(10)).await);
        gate.add_permits(1);
        pid
    };
    let never = CancellationToken::new();
    let (outcome, old_pid) = tokio::join!(turn::run_turn(&mut s, "echo thrice", &em, &never), kill);
    assert_eq!(outcome.unwrap(), TurnOutcome::Completed);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 4);
    assert_eq!(results(&reqs[1]), [("Echo: one".to_string(), false)]);
    assert_eq!(
        results(&reqs[2]),
        [("error: mcp server everything: the server exited; it is started again on the next call".to_string(), true)]
    );
    assert_eq!(results(&reqs[3]), [("Echo: three".to_string(), false)]);
    let new_pid = s.mcp().pid("everything").await.expect("started again");
    assert_ne!(new_pid, old_pid);
    let log = std::fs::read_to_string(t.workspace(&id).join(".cicy/logs/mcp-everything.log")).unwrap();
    assert_eq!(log.matches("Starting default (STDIO) server...").count(), 2, "{log}");
}

#[tokio::test]
async fn a_cancel_ends_a_running_call_and_a_slow_call_times_out() {
    let gw = ScriptedGateway::start().await;
    let slow = r#"{"duration":30,"steps":3}"#;
    gw.push(Reply::sse(anthropic_tool_use("t1", "mcp__everything__trigger-long-running-operation", slow)));
    gw.push(Reply::sse(anthropic_tool_use("t2", "mcp__everything__trigger-long-running-operation", slow)));
    gw.push(Reply::sse(anthropic_text("Done.")));
    let t = home(&gw, 3);
    let id = t.create("tester", None);
    let mut s = t.open(&id);

    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let (em, ev) = collector_with(&id, move |k| {
        if matches!(k, EventKind::ToolStarted { .. }) {
            c.cancel();
        }
    });
    // timeout_secs does not matter here: the cancel comes first.
    assert_eq!(turn::run_turn(&mut s, "slow", &em, &cancel).await.unwrap(), TurnOutcome::Cancelled);
    let finished: Vec<(String, bool)> = kinds(&ev)
        .into_iter()
        .filter_map(|k| match k {
            EventKind::ToolFinished { result, is_error, .. } => Some((result, is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(finished, [("error: cancelled by user".to_string(), true)]);

    let (em, _ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "slow again", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let reqs = gw.requests();
    assert_eq!(
        results(&reqs[2]),
        [("error: mcp server everything: tool trigger-long-running-operation timed out after 3 s".to_string(), true)]
    );
}

/// Whether process `pid` is gone or ends within 10 s.
async fn ends(pid: u32) -> bool {
    match Pidfd::open(pid as i32) {
        None => true,
        Some(p) => p.exited_within(Duration::from_secs(10)).await,
    }
}

#[tokio::test]
async fn a_server_that_cannot_start_is_left_out_with_a_system_event() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("One.")));
    gw.push(Reply::sse(anthropic_text("Two.")));
    let t = home(&gw, 60);
    let meta = t.home.roles_dir().join("tester/meta.yaml");
    let mut text = std::fs::read_to_string(&meta).unwrap();
    text.push_str("  broken:\n    command: cicy-no-such-mcp-server\n");
    std::fs::write(meta, text).unwrap();
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "one", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let failed = "mcp server broken: its tools are left out of this turn: cannot start `cicy-no-such-mcp-server`: No such file or directory (os error 2)";
    assert_eq!(system(&ev), [failed]);
    let names: Vec<String> =
        body(&gw.requests()[0])["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, TOOLS);
    // The next turn tries again at once (later failures in a row wait: `pool::tests`).
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "two", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert_eq!(system(&ev), [failed]);
    assert!(std::fs::read_to_string(t.workspace(&id).join(".cicy/logs/mcp-broken.log")).unwrap().starts_with("--- "));
}

/// A tiny stdio MCP server for the failure cases (the reference server behaves too well):
/// answers `initialize` and `tools/list` (tools `$FAKE_TOOLS`, comma-separated, described as
/// `$FAKE_LABEL <tool>`), and calls with `$FAKE_LABEL <tool>`, except tool `$FAKE_HANG`, which
/// never answers.
const FAKE_SERVER: &str = r#"import json, os, sys, time
tools = [t for t in os.environ.get("FAKE_TOOLS", "").split(",") if t]
label = os.environ.get("FAKE_LABEL", "")
while True:
    line = sys.stdin.readline()
    if not line:
        break
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "fake", "version": "0"}}
    elif method == "tools/list":
        result = {"tools": [{"name": t, "description": label + " " + t, "inputSchema": {"type": "object"}} for t in tools]}
    elif method == "tools/call":
        name = msg["params"]["name"]
        if name == os.environ.get("FAKE_HANG"):
            time.sleep(3600)
        result = {"content": [{"type": "text", "text": label + " " + name}]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
"#;

/// A home whose `tester` role has the servers `servers` (YAML lines under `mcp_servers:`,
/// `{dir}` standing for a folder that holds [`FAKE_SERVER`] as `fake.py`); returns the folder.
fn fake_home(gw: &ScriptedGateway, servers: &str) -> (TestHome, std::path::PathBuf) {
    let t = TestHome::new(&gw.url(), 0);
    let dir = t.root().join("servers");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fake.py"), FAKE_SERVER).unwrap();
    let meta = t.home.roles_dir().join("tester/meta.yaml");
    let mut text = std::fs::read_to_string(&meta).unwrap();
    text.push_str("mcp_servers:\n");
    text.push_str(&servers.replace("{dir}", dir.to_str().unwrap()));
    std::fs::write(meta, text).unwrap();
    (t, dir)
}

/// The texts of the `system` events in `ev`.
fn system(ev: &std::sync::Arc<std::sync::Mutex<Vec<cicy::event::Event>>>) -> Vec<String> {
    kinds(ev)
        .into_iter()
        .filter_map(|k| match k {
            EventKind::System { text } => Some(text),
            _ => None,
        })
        .collect()
}

/// The tool names request `r` offered.
fn tool_names(r: &RecordedRequest) -> Vec<String> {
    body(r)["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

/// The lines of file `path` as numbers (the pids a wrapper script recorded).
fn pids(path: &std::path::Path) -> Vec<u32> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| l.parse().unwrap()).collect()
}

#[tokio::test]
async fn a_call_that_times_out_kills_the_servers_group_and_the_next_call_starts_it_again() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_use("t1", "mcp__slow__hang", "{}")));
    gw.push(Reply::sse(anthropic_tool_use("t2", "mcp__slow__ok", "{}")));
    gw.push(Reply::sse(anthropic_text("Done.")));
    gw.push(Reply::sse(anthropic_text("Again.")));
    // The wrapper leaves a background child in the server's process group, as `npx` does.
    let servers = "  slow:\n    command: sh\n    args: [{dir}/slow.sh, {dir}]\n    env: {FAKE_TOOLS: \"hang,ok\", FAKE_HANG: hang, FAKE_LABEL: slow}\n    timeout_secs: 3\n";
    let (t, dir) = fake_home(&gw, servers);
    let wrapper = "echo $$ >> \"$1/server.pids\"\nsleep 1000 </dev/null >/dev/null 2>&1 &\necho $! >> \"$1/child.pids\"\nexec python3 \"$1/fake.py\"\n";
    std::fs::write(dir.join("slow.sh"), wrapper).unwrap();
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "hang", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(results(&reqs[1]), [("error: mcp server slow: tool hang timed out after 3 s".to_string(), true)]);
    // The same turn's next call started the server again and got its answer.
    assert_eq!(results(&reqs[2]), [("slow ok".to_string(), false)]);
    assert_eq!(system(&ev), Vec::<String>::new());
    let (servers, children) = (pids(&dir.join("server.pids")), pids(&dir.join("child.pids")));
    assert_eq!((servers.len(), children.len()), (2, 2));
    assert!(ends(servers[0]).await && ends(children[0]).await, "the hung server's group outlived the timeout");
    assert_eq!(s.mcp().pid("slow").await, Some(servers[1]));

    // The next turn lists the restarted server as usual.
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "again", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert_eq!(system(&ev), Vec::<String>::new());
    assert_eq!(tool_names(&gw.requests()[3]), ["mcp__slow__hang", "mcp__slow__ok", "shell", "skill"]);
    drop(s);
    assert!(ends(servers[1]).await && ends(children[1]).await, "the server's group outlived its session");
}

#[tokio::test]
async fn servers_start_together_within_their_own_timeouts_and_failed_starts_back_off() {
    let gw = ScriptedGateway::start().await;
    for text in ["One.", "Two.", "Three."] {
        gw.push(Reply::sse(anthropic_text(text)));
    }
    // `p` and `q` each wait for the other to have started (a fifo opens once both ends are
    // open), so they start only if they start together; `cat` and `yes` never answer.
    let servers = "  p:\n    command: sh\n    args: [-c, 'echo go > {dir}/rendezvous && exec python3 {dir}/fake.py']\n    env: {FAKE_TOOLS: x}\n    timeout_secs: 20\n  q:\n    command: sh\n    args: [-c, 'read x < {dir}/rendezvous && exec python3 {dir}/fake.py']\n    env: {FAKE_TOOLS: x}\n    timeout_secs: 20\n  cat:\n    command: cat\n    timeout_secs: 1\n  yes:\n    command: yes\n    timeout_secs: 1\n";
    let (t, dir) = fake_home(&gw, servers);
    cicy_test_support::wait::Fifo::new(dir.join("rendezvous"));
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let timed_out = [
        "mcp server cat: its tools are left out of this turn: initialize timed out after 1 s",
        "mcp server yes: its tools are left out of this turn: initialize timed out after 1 s",
    ];
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "one", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert_eq!(system(&ev), timed_out);
    assert_eq!(tool_names(&gw.requests()[0]), ["mcp__p__x", "mcp__q__x", "shell", "skill"]);
    // The backoff is timed on a paused clock, or a slow machine would let it run out before
    // the third turn looks. Paused, the clock jumps to the next timer whenever the test waits
    // with nothing to do, so a wait on a server that answers could end before its answer, and
    // `yes` keeps the test busy so the clock never moves: from here on the role keeps only
    // `cat`, which never answers; its slot and failure count stay.
    let meta = t.home.roles_dir().join("tester/meta.yaml");
    let text = std::fs::read_to_string(&meta).unwrap();
    let (head, _) = text.split_once("  p:\n").unwrap();
    std::fs::write(&meta, format!("{head}  cat:\n    command: cat\n    timeout_secs: 1\n")).unwrap();
    tokio::time::pause();
    // One failure: the next turn tries again at once; two in a row: starts wait 1 s.
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "two", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert_eq!(system(&ev), timed_out[..1]);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "three", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert_eq!(
        system(&ev),
        ["mcp server cat: its tools are left out of this turn: not started after its last failure (initialize timed out after 1 s); next try in 1.0 s"]
    );
    assert_eq!(tool_names(&gw.requests()[2]), ["shell", "skill"]);
    // Once the second has passed, the next turn starts it again.
    tokio::time::advance(Duration::from_secs(1)).await;
    gw.push(Reply::sse(anthropic_text("Four.")));
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "four", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert_eq!(system(&ev), timed_out[..1]);
}

#[tokio::test]
async fn a_tool_name_two_servers_share_is_offered_once_with_a_system_event() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_use("t1", "mcp__a__b__c", "{}")));
    gw.push(Reply::sse(anthropic_text("Done.")));
    let servers = "  a__b:\n    command: python3\n    args: [{dir}/fake.py]\n    env: {FAKE_TOOLS: \"c,d\", FAKE_LABEL: AB}\n  a:\n    command: python3\n    args: [{dir}/fake.py]\n    env: {FAKE_TOOLS: b__c, FAKE_LABEL: A}\n";
    let (t, _dir) = fake_home(&gw, servers);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "call it", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert_eq!(system(&ev), ["mcp server a__b: tool `c` left out: `mcp__a__b__c` is already the name of tool `b__c` of mcp server a"]);
    let reqs = gw.requests();
    assert_eq!(tool_names(&reqs[0]), ["mcp__a__b__c", "mcp__a__b__d", "shell", "skill"]);
    assert_eq!(body(&reqs[0])["tools"][0]["description"], "A b__c");
    assert_eq!(results(&reqs[1]), [("A b__c".to_string(), false)]);
}

#[tokio::test]
async fn a_server_that_exits_at_start_points_to_its_log() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("One.")));
    let (t, _dir) = fake_home(&gw, "  gone:\n    command: python3\n    args: [{dir}/missing.py]\n");
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "one", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert_eq!(
        system(&ev),
        ["mcp server gone: its tools are left out of this turn: initialize failed: the server exited (or closed its stdin/stdout) before answering; its stderr is in .cicy/logs/mcp-gone.log"]
    );
    let log = std::fs::read_to_string(t.workspace(&id).join(".cicy/logs/mcp-gone.log")).unwrap();
    assert!(log.contains("missing.py': [Errno 2] No such file or directory"), "{log}");
}
