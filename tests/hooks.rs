//! Hooks (docs/design.md §12) through real turns: real scripts in a role folder, run by the turn loop
//! against the scripted gateway; the assertions are on the bytes of the next request, the
//! history file and the events.

use std::os::unix::fs::PermissionsExt;

use cicy::event::{EventKind, SteerStatus, TurnOutcome};
use cicy::turn;
use cicy_test_support::fixture::{collector, kinds, TestHome};
use cicy_test_support::gateway::*;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

fn body(r: &RecordedRequest) -> Value {
    serde_json::from_slice(&r.body).expect("request body is JSON")
}

/// A `tester`-like role `hooked` with `hooks_yaml` (the value of `hooks:`, indented by two) and
/// each `(name, body)` written as an executable `hooks/<name>` in the role's folder.
fn role_with_hooks(t: &TestHome, hooks_yaml: &str, scripts: &[(&str, &str)]) {
    t.write_role("hooked", "[core]", 20);
    let dir = t.home.roles_dir().join("hooked");
    let meta = dir.join("meta.yaml");
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(&meta, format!("{text}hooks:\n{hooks_yaml}")).unwrap();
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    for (name, script) in scripts {
        let p = dir.join("hooks").join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// One turn "go" with a shell call `command`, then the answer "done"; returns the requests, the
/// events and the agent's id.
async fn shell_turn(t: &TestHome, gw: &ScriptedGateway, command: &str) -> (Vec<RecordedRequest>, Vec<EventKind>, String) {
    gw.push(Reply::sse(anthropic_tool_use("toolu_1", "shell", &json!({"command": command}).to_string())));
    gw.push(Reply::sse(anthropic_text("done")));
    let id = t.create("hooked", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "go", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Completed);
    (gw.requests(), kinds(&ev), id)
}

/// The first tool_result of the last message of request `r`.
fn tool_result(r: &RecordedRequest) -> Value {
    let b = body(r);
    let last = b["messages"].as_array().unwrap().last().unwrap().clone();
    let mut block = last["content"][0].clone();
    block.as_object_mut().unwrap().remove("cache_control");
    block
}

fn hook_errors(k: &[EventKind]) -> Vec<String> {
    k.iter()
        .filter_map(|e| match e {
            EventKind::Error { kind, message } if kind == "hook" => Some(message.clone()),
            _ => None,
        })
        .collect()
}

fn hook_actions(k: &[EventKind]) -> Vec<(String, String, String, Option<String>)> {
    k.iter()
        .filter_map(|e| match e {
            EventKind::Hook { name, command, action, reason, .. } => Some((name.clone(), command.clone(), action.clone(), reason.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn exit_2_blocks_the_call_with_stderr_as_the_reason_and_the_turn_goes_on() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let guard = "cat > hook-stdin.json\necho '  no shell today  ' >&2\nexit 2";
    role_with_hooks(&t, "  before_tool: [{command: hooks/guard.sh, match: \"^shell$\", priority: 100}]\n", &[("guard.sh", guard)]);
    let (reqs, k, id) = shell_turn(&t, &gw, "touch ran").await;
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        tool_result(&reqs[1]),
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "error: blocked by hook hooks/guard.sh: no shell today", "is_error": true})
    );
    let ws = t.workspace(&id);
    assert!(!ws.join("ran").exists(), "the blocked command ran");
    // The hook's stdin: the fixed fields, then the call.
    let stdin: Value = serde_json::from_slice(&std::fs::read(ws.join("hook-stdin.json")).unwrap()).unwrap();
    let keys: Vec<&str> = stdin.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["hook", "agent_id", "conv_id", "turn_id", "round", "workspace", "tool"]);
    assert_eq!((&stdin["hook"], &stdin["agent_id"], &stdin["round"]), (&json!("before_tool"), &json!(id), &json!(0)));
    assert_eq!(stdin["workspace"], json!(ws.display().to_string()));
    assert_eq!(stdin["conv_id"], t.current_json(&id)["conversation_id"]);
    assert_eq!(stdin["tool"], json!({"id": "toolu_1", "name": "shell", "input": {"command": "touch ran"}}));
    assert_eq!(hook_actions(&k), [("before_tool".into(), "hooks/guard.sh".into(), "deny".into(), Some("no shell today".into()))]);
    assert!(hook_errors(&k).is_empty());
}

#[tokio::test]
async fn a_match_that_does_not_fit_the_tool_runs_no_hook() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    role_with_hooks(&t, "  before_tool: [{command: hooks/guard.sh, match: \"^skill$\"}]\n", &[("guard.sh", "exit 2")]);
    let (reqs, k, _) = shell_turn(&t, &gw, "echo free").await;
    assert_eq!(tool_result(&reqs[1]), json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "free\nexit code: 0"}));
    assert!(hook_actions(&k).is_empty());
}

#[tokio::test]
async fn a_modified_input_is_what_runs_what_is_stored_and_what_the_next_request_carries() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let modify = r#"echo '{"action":"modify","input":{"command":"echo modified"}}'"#;
    role_with_hooks(&t, "  before_tool: [{command: hooks/modify.sh}]\n", &[("modify.sh", modify)]);
    let (reqs, _, id) = shell_turn(&t, &gw, "echo original").await;
    let second = body(&reqs[1]);
    let use_block = json!({"type": "tool_use", "id": "toolu_1", "name": "shell", "input": {"command": "echo modified"}});
    assert_eq!(second["messages"][1]["content"][0], use_block);
    assert_eq!(tool_result(&reqs[1]), json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "modified\nexit code: 0"}));
    let hist = t.current_json(&id)["messages"].clone();
    assert_eq!(hist[1]["content"][0]["input"], json!({"command": "echo modified"}));
    assert_eq!(hist[2]["content"][0]["content"], json!("modified\nexit code: 0"));
}

#[tokio::test]
async fn an_after_tool_modify_replaces_the_stored_result() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let redact = r#"echo '{"action":"modify","result":"[redacted]"}'"#;
    role_with_hooks(&t, "  after_tool: [{command: hooks/redact.sh}]\n", &[("redact.sh", redact)]);
    let (reqs, _, id) = shell_turn(&t, &gw, "echo secret").await;
    assert_eq!(tool_result(&reqs[1]), json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "[redacted]"}));
    assert_eq!(t.current_json(&id)["messages"][2]["content"][0]["content"], json!("[redacted]"));
}

#[tokio::test]
async fn a_hook_past_its_timeout_is_killed_and_denies() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    // The sleep's pid is written first, so the test can see the whole group was killed.
    let slow = "sleep 30 &\necho $! > sleep.pid\nwait";
    role_with_hooks(&t, "  before_tool: [{command: hooks/slow.sh, timeout_secs: 1}]\n", &[("slow.sh", slow)]);
    let (reqs, k, id) = shell_turn(&t, &gw, "touch ran").await;
    assert_eq!(
        tool_result(&reqs[1]),
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "error: blocked by hook hooks/slow.sh: timed out after 1 s", "is_error": true})
    );
    assert_eq!(hook_errors(&k), ["hook hooks/slow.sh (before_tool): timed out after 1 s"]);
    let pid: i32 = std::fs::read_to_string(t.workspace(&id).join("sleep.pid")).unwrap().trim().parse().unwrap();
    assert!(
        cicy_test_support::wait::exited_within(pid, std::time::Duration::from_secs(10)).await,
        "the hook's background sleep was not killed"
    );
    assert!(!t.workspace(&id).join("ran").exists());
}

#[tokio::test]
async fn stdout_that_is_not_json_is_an_error_and_on_error_decides() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let hooks = "  before_tool:\n    - {command: hooks/xyz.sh, priority: 1, on_error: allow}\n    - {command: hooks/xyz.sh, priority: 2}\n";
    role_with_hooks(&t, hooks, &[("xyz.sh", "echo xyz")]);
    let (reqs, k, _) = shell_turn(&t, &gw, "touch ran").await;
    let why = "stdout is not one JSON object (expected value at line 1 column 1): xyz";
    assert_eq!(
        tool_result(&reqs[1]),
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": format!("error: blocked by hook hooks/xyz.sh: {why}"), "is_error": true})
    );
    let err = format!("hook hooks/xyz.sh (before_tool): {why}");
    assert_eq!(hook_errors(&k), [err.clone(), err]);
    let actions: Vec<String> = hook_actions(&k).into_iter().map(|a| a.2).collect();
    assert_eq!(actions, ["allow", "deny"], "the first hook's on_error allows, the second's default denies");
}

#[tokio::test]
async fn an_action_the_hook_point_does_not_allow_is_an_error() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let switch = r#"echo '{"action":"switch_model","model":"other"}'"#;
    role_with_hooks(&t, "  before_tool: [{command: hooks/switch.sh}]\n", &[("switch.sh", switch)]);
    let (reqs, k, _) = shell_turn(&t, &gw, "true").await;
    assert_eq!(hook_errors(&k), ["hook hooks/switch.sh (before_tool): action `switch_model` is not allowed at before_tool"]);
    assert_eq!(
        tool_result(&reqs[1])["content"],
        json!("error: blocked by hook hooks/switch.sh: action `switch_model` is not allowed at before_tool")
    );
    assert!(reqs.iter().all(|r| body(r)["model"] == "test-model"));
}

#[tokio::test]
async fn before_request_switch_model_changes_the_model_on_the_wire() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    // Switches from the second request on.
    let router = r#"grep -q '"round":1' && echo '{"action":"switch_model","model":"big-model"}'; exit 0"#;
    role_with_hooks(&t, "  before_request: [{command: hooks/router.sh}]\n", &[("router.sh", router)]);
    let (reqs, k, _) = shell_turn(&t, &gw, "true").await;
    let models: Vec<Value> = reqs.iter().map(|r| body(r)["model"].clone()).collect();
    assert_eq!(models, [json!("test-model"), json!("big-model")]);
    let actions: Vec<(String, Option<String>)> = hook_actions(&k).into_iter().map(|a| (a.2, a.3)).collect();
    assert_eq!(actions, [("allow".into(), None), ("switch_model".into(), Some("big-model".into()))]);
}

#[tokio::test]
async fn before_prompt_deny_refuses_the_turn_before_anything_is_written_or_sent() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    role_with_hooks(&t, "  before_prompt: [{command: hooks/no.sh}]\n", &[("no.sh", "echo 'not today' >&2; exit 2")]);
    let id = t.create("hooked", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "hello", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Blocked);
    assert!(gw.requests().is_empty());
    assert!(s.conversation().current.messages.is_empty());
    let k = kinds(&ev);
    assert_eq!(hook_errors(&k), ["the prompt was refused by hook hooks/no.sh: not today"]);
    assert_eq!(k.last(), Some(&EventKind::TurnEnded { outcome: TurnOutcome::Blocked }));
}

#[tokio::test]
async fn hooks_run_by_priority_modify_chains_and_injects_concatenate() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let hooks = "  before_prompt:\n    - {command: hooks/late.sh, priority: 300}\n    - {command: hooks/rewrite.sh, priority: 10}\n    - {command: hooks/seen.sh, priority: 20}\n    - {command: hooks/first.sh, priority: 15}\n";
    let scripts = [
        ("late.sh", r#"echo '{"action":"inject","text":"second"}'"#),
        ("rewrite.sh", r#"echo '{"action":"modify","text":"rewritten"}'"#),
        ("seen.sh", "cat > seen.json"),
        ("first.sh", r#"echo '{"action":"inject","text":"first"}'"#),
    ];
    role_with_hooks(&t, hooks, &scripts);
    gw.push(Reply::sse(anthropic_text("ok")));
    let id = t.create("hooked", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    turn::run_turn(&mut s, "original", &em, &CancellationToken::new()).await.unwrap();
    let wire = body(&gw.requests()[0]);
    assert_eq!(wire["messages"][0]["content"][1]["text"], json!("rewritten\n\nfirst\n\nsecond"));
    assert_eq!(t.current_json(&id)["messages"][0]["content"], json!("rewritten\n\nfirst\n\nsecond"));
    let seen: Value = serde_json::from_slice(&std::fs::read(t.workspace(&id).join("seen.json")).unwrap()).unwrap();
    assert_eq!(seen["text"], json!("rewritten"), "the hook after the modify reads the modified text");
    let order: Vec<String> = hook_actions(&kinds(&ev)).into_iter().map(|a| a.1).collect();
    assert_eq!(order, ["hooks/rewrite.sh", "hooks/first.sh", "hooks/seen.sh", "hooks/late.sh"]);
}

#[tokio::test]
async fn before_finish_injects_at_most_three_times_a_turn() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let review = r#"echo '{"action":"inject","text":"check again"}'"#;
    role_with_hooks(&t, "  before_finish: [{command: hooks/review.sh}]\n", &[("review.sh", review)]);
    for n in 1..=4 {
        gw.push(Reply::sse(anthropic_text(&format!("answer {n}"))));
    }
    let id = t.create("hooked", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "go", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Completed);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 4, "the 4th inject is ignored and the turn ends");
    let last = body(&reqs[3]);
    // The first user message carries the role block before the text.
    let texts: Vec<Value> =
        last["messages"].as_array().unwrap().iter().map(|m| m["content"].as_array().unwrap().last().unwrap()["text"].clone()).collect();
    let want = ["go", "answer 1", "check again", "answer 2", "check again", "answer 3", "check again"];
    assert_eq!(texts, want.map(|s| json!(s)));
    let k = kinds(&ev);
    assert!(k.contains(&EventKind::System { text: "a before_finish inject was ignored: at most 3 per turn".into() }));
    assert_eq!(t.current_json(&id)["messages"].as_array().unwrap().len(), 8);
}

#[tokio::test]
async fn a_deny_at_after_response_aborts_the_turn_as_blocked() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    role_with_hooks(
        &t,
        "  after_response: [{command: hooks/stop.sh}]\n  after_turn: [{command: hooks/end.sh}]\n",
        &[("stop.sh", r#"echo '{"action":"deny","reason":"over budget"}'"#), ("end.sh", "cat > after-turn.json")],
    );
    gw.push(Reply::sse(anthropic_tool_use("toolu_1", "shell", r#"{"command":"touch ran"}"#)));
    let id = t.create("hooked", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "go", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Blocked);
    assert_eq!(hook_errors(&kinds(&ev)), ["the turn was aborted by hook hooks/stop.sh at after_response: over budget"]);
    assert!(!t.workspace(&id).join("ran").exists());
    let end: Value = serde_json::from_slice(&std::fs::read(t.workspace(&id).join("after-turn.json")).unwrap()).unwrap();
    assert_eq!(
        (&end["hook"], &end["outcome"], &end["usage"]["input_tokens"]),
        (&json!("after_turn"), &json!("blocked"), &t.reply_json(&id)["input_tokens"])
    );
}

#[tokio::test]
async fn a_hook_that_leaves_a_background_child_answers_when_it_exits() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    // The sleep holds the hook's stdout open for 30 s; the answer (empty stdout: allow) is
    // complete when the script exits, and the sleep is killed.
    let bg = "sleep 30 &\necho $! > sleep.pid\nexit 0";
    role_with_hooks(&t, "  before_tool: [{command: hooks/bg.sh, timeout_secs: 3}]\n", &[("bg.sh", bg)]);
    let (reqs, k, id) = shell_turn(&t, &gw, "echo ran").await;
    assert_eq!(tool_result(&reqs[1]), json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "ran\nexit code: 0"}));
    assert_eq!(hook_actions(&k), [("before_tool".into(), "hooks/bg.sh".into(), "allow".into(), None)]);
    assert!(hook_errors(&k).is_empty(), "{:?}", hook_errors(&k));
    let pid: i32 = std::fs::read_to_string(t.workspace(&id).join("sleep.pid")).unwrap().trim().parse().unwrap();
    assert!(
        cicy_test_support::wait::exited_within(pid, std::time::Duration::from_secs(10)).await,
        "the hook's background sleep was not killed"
    );
}

#[tokio::test]
async fn a_hook_printing_more_than_1_mib_fails_naming_the_limit() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    role_with_hooks(&t, "  before_tool: [{command: hooks/big.sh}]\n", &[("big.sh", "head -c 2000000 /dev/zero | tr '\\0' x")]);
    let (reqs, k, id) = shell_turn(&t, &gw, "touch ran").await;
    let why = "its stdout went over the limit of 1 MiB (a hook answers with one JSON object)";
    assert_eq!(
        tool_result(&reqs[1]),
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": format!("error: blocked by hook hooks/big.sh: {why}"), "is_error": true})
    );
    assert_eq!(hook_errors(&k), [format!("hook hooks/big.sh (before_tool): {why}")]);
    assert!(!t.workspace(&id).join("ran").exists());
}

#[tokio::test]
async fn a_command_with_arguments_fails_saying_commands_take_none() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    role_with_hooks(&t, "  before_tool: [{command: \"python3 h/x.py\"}]\n", &[]);
    let (reqs, k, id) = shell_turn(&t, &gw, "touch ran").await;
    let why = format!(
        "cannot start {}: No such file or directory (os error 2); commands run without a shell and take no arguments: put `python3 h/x.py` in a script",
        t.workspace(&id).join("python3 h/x.py").display()
    );
    assert_eq!(
        tool_result(&reqs[1]),
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": format!("error: blocked by hook python3 h/x.py: {why}"), "is_error": true})
    );
    assert_eq!(hook_errors(&k), [format!("hook python3 h/x.py (before_tool): {why}")]);
}

#[tokio::test]
async fn a_bad_hook_in_meta_yaml_is_an_error_naming_the_file_and_field() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    role_with_hooks(&t, "  before_tool: [{command: hooks/x.sh, priority: 0}]\n", &[]);
    let e = cicy::agent::create(
        &t.home,
        cicy::agent::CreateOptions {
            title: "Tess".into(),
            role_template: "hooked".into(),
            role: "worker".into(),
            model: None,
            master: None,
            workspace: None,
            api_style: None,
        },
    )
    .unwrap_err()
    .to_string();
    let meta = t.home.roles_dir().join("hooked/meta.yaml");
    assert!(e.starts_with(&format!("{}: hooks.before_tool[0].priority: 0 is outside 1–1000", meta.display())), "{e}");
}

#[tokio::test]
async fn the_hook_environment_has_no_api_key() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("hi")));
    let t = TestHome::new(&gw.url(), 0);
    let config = std::fs::read_to_string(t.home.config_path()).unwrap();
    std::fs::write(t.home.config_path(), format!("{config}  api_key_env: MY_HOOK_TEST_KEY\n")).unwrap();
    role_with_hooks(&t, "  before_prompt: [{command: hooks/env.sh}]\n", &[("env.sh", "env > hook-env.txt")]);
    let id = t.create("hooked", None);
    let mut cmd = cicy_test_support::cli::command(t.root(), &gw.url(), &["chat", &id, "hello"]);
    cmd.env("CICY_API_KEY", "sk-cicy-secret").env("MY_HOOK_TEST_KEY", "sk-other-secret");
    let out = cmd.output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("· hook before_prompt hooks/env.sh: allow ("), "{stderr}");
    assert_eq!(gw.requests()[0].header("x-api-key"), Some("sk-cicy-secret"), "the gateway still gets the key");
    let env = std::fs::read_to_string(t.workspace(&id).join("hook-env.txt")).unwrap();
    assert!(!env.contains("sk-cicy-secret") && !env.contains("sk-other-secret"), "{env}");
    assert!(env.lines().any(|l| l == format!("CICY_AGENT_ID={id}")), "{env}");
}

#[tokio::test]
async fn before_steering_changes_or_refuses_a_steer_before_it_is_delivered() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let gate = r#"grep -q '"text":"drop me"' && { echo 'not this one' >&2; exit 2; }
echo '{"action":"modify","text":"rewritten steer"}'"#;
    role_with_hooks(&t, "  before_steering: [{command: hooks/gate.sh}]\n", &[("gate.sh", gate)]);
    gw.push(Reply::sse(anthropic_tool_use("toolu_1", "shell", r#"{"command":"true"}"#)));
    gw.push(Reply::sse(anthropic_text("done")));
    let id = t.create("hooked", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let steering = turn::Steering::default();
    steering.push("keep me".into()).unwrap();
    steering.push("drop me".into()).unwrap();
    turn::run_turn_with(&mut s, "go", &em, &CancellationToken::new(), &steering).await.unwrap();
    let second = body(&gw.requests()[1]);
    let last = second["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    assert_eq!(last.as_array().unwrap().len(), 2, "{last}");
    assert_eq!(last[1]["text"], json!("rewritten steer"));
    let k = kinds(&ev);
    assert!(k.contains(&EventKind::Steered { status: SteerStatus::Refused }));
    assert!(k.contains(&EventKind::Steered { status: SteerStatus::Delivered }));
}

#[tokio::test]
async fn on_tool_error_sees_the_failed_call_and_its_deny_aborts_the_turn() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    role_with_hooks(&t, "  on_tool_error: [{command: hooks/fail.sh, match: shell}]\n", &[("fail.sh", "cat > error.json; exit 2")]);
    gw.push(Reply::sse(anthropic_tool_use("toolu_1", "shell", r#"{"command":"exit 3"}"#)));
    let id = t.create("hooked", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "go", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Blocked);
    assert_eq!(gw.requests().len(), 1);
    let seen: Value = serde_json::from_slice(&std::fs::read(t.workspace(&id).join("error.json")).unwrap()).unwrap();
    assert_eq!((&seen["error"], &seen["attempt"], &seen["result"]["is_error"]), (&json!("exit code: 3"), &json!(1), &json!(true)));
    assert_eq!(hook_errors(&kinds(&ev)), ["the turn was aborted by hook hooks/fail.sh at on_tool_error: exit code 2"]);
    // The result that was made is kept; the marker ends the turn.
    let hist = t.current_json(&id)["messages"].clone();
    assert_eq!(hist[2]["content"][0]["content"], json!("exit code: 3"));
    assert_eq!(hist[3]["content"], json!([{"type": "text", "text": "(no reply this turn · blocked)"}]));
}

#[tokio::test]
async fn session_hooks_run_at_the_first_turn_and_at_clear() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("hi")));
    let t = TestHome::new(&gw.url(), 0);
    let hooks = "  session_start: [{command: hooks/log.sh}]\n  session_end: [{command: hooks/log.sh}]\n";
    role_with_hooks(&t, hooks, &[("log.sh", "cat >> sessions.jsonl")]);
    let id = t.create("hooked", None);
    let o = cicy_test_support::cli::cicy(t.root(), &gw.url(), &["chat", &id], Some("hello\n/clear\n/exit\n")).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let log = std::fs::read_to_string(t.workspace(&id).join("sessions.jsonl")).unwrap();
    let lines: Vec<Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert_eq!(lines[0]["hook"], "session_start");
    assert_eq!((&lines[1]["hook"], &lines[1]["reason"], &lines[1]["message_count"]), (&json!("session_end"), &json!("clear"), &json!(2)));
    assert_eq!(lines[0]["conv_id"], lines[1]["conv_id"]);
}

#[tokio::test]
async fn before_compact_skip_leaves_the_history_uncompacted() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("done")));
    let t = TestHome::new(&gw.url(), 0);
    cicy_test_support::history::add_config(&t, "compaction:\n  max_messages: 12\n  keep_recent: 4\n");
    let skip = r#"cat > compact.json; echo '{"action":"skip"}'"#;
    role_with_hooks(&t, "  before_compact: [{command: hooks/skip.sh}]\n", &[("skip.sh", skip)]);
    let id = t.create("hooked", None);
    cicy_test_support::history::seed(&t, &id, cicy_test_support::history::tool_turns(3));
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "go", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 1, "no summary request");
    assert_eq!(body(&reqs[0])["messages"].as_array().unwrap().len(), 13);
    assert!(!kinds(&ev).iter().any(|k| matches!(k, EventKind::Compacted { .. })));
    let seen: Value = serde_json::from_slice(&std::fs::read(t.workspace(&id).join("compact.json")).unwrap()).unwrap();
    assert_eq!((&seen["reason"], &seen["message_count"]), (&json!("threshold"), &json!(13)));
}

/// A hook config error found after `create` (meta.yaml edited later) fails `chat` alike through
/// serve and with `--local`: the same `error (open)` line naming the file and field, exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_config_error_exits_1_through_serve_and_locally() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    role_with_hooks(&t, "  before_prompt: [{command: hooks/ok.sh}]\n", &[("ok.sh", "exit 0")]);
    let id = t.create("hooked", None);
    let meta = t.home.roles_dir().join("hooked/meta.yaml");
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(&meta, text.replace("{command: hooks/ok.sh}", "{command: hooks/ok.sh, priority: 0}")).unwrap();
    let expected = format!("error (open): {}: hooks.before_prompt[0].priority: 0 is outside 1–1000\n", meta.display());
    let local = cicy_test_support::cli::cicy(t.root(), &gw.url(), &["chat", &id, "hello", "--local"], None).await;
    assert_eq!((local.code, local.stdout.as_str(), local.stderr.as_str()), (1, "", expected.as_str()));
    let s = cicy_test_support::serve::Serve::start(t.root(), &gw.url(), &[]).await;
    let remote = cicy_test_support::cli::cicy(t.root(), &gw.url(), &["chat", &id, "hello"], None).await;
    assert_eq!((remote.code, remote.stdout.as_str(), remote.stderr.as_str()), (1, "", expected.as_str()));
    assert!(gw.requests().is_empty(), "nothing was sent either way");
    assert_eq!(s.stop().await, 0);
}
