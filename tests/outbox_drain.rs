//! serve drains the agents' outboxes (docs/design.md §11 "Consumer"): after each tool batch of a
//! wake turn, and while no turn runs; a `set_cron` job fires a `[choruz-cron]` wake. Real
//! `serve`, scripted gateway, commands queued by a shell tool through `$CICY_SEND` or dropped
//! into `new/` as a script running beside the agent would.

use std::io::Write;
use std::time::Duration;

use serde_json::json;

use cicy::messages::groups;
use cicy::outbox::Outbox;
use cicy::wake::inbox::{Folder, Mailbox};

use cicy_test_support::gateway::{anthropic_text, anthropic_tool_use, Reply, ScriptedGateway};
use cicy_test_support::serve::{Frame, Serve};
use cicy_test_support::wake::{last_user_text, note, waker};

fn shell(command: &str) -> Reply {
    Reply::sse(anthropic_tool_use("toolu_sh", "shell", &json!({ "command": command }).to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_send_to_a_group_in_a_wake_is_posted_and_wakes_the_other_member() {
    let gw = ScriptedGateway::start().await;
    let (t, a) = waker(&gw);
    let b = t.create("waker", None);
    groups::create(&t.home, "ada", "ops", "", &[a.clone(), b.clone()]).unwrap();
    gw.push(shell(r#""$CICY_SEND" '{"type":"send","group":"ops","content":"hi"}'"#));
    gw.push(Reply::sse(anthropic_text("done")));
    gw.push(Reply::sse(anthropic_text("seen")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut b_events = s.events(&b, None).await;
    Mailbox::of_workspace(&t.workspace(&a)).write(Folder::Inbox, &note("human", "tell ops")).unwrap();
    let reqs = gw.wait_for_requests(3).await;
    b_events.until("done").await;

    let (status, page) = s.get("/api/groups/ops/messages?from=ada").await;
    assert_eq!(status, 200, "{page}");
    let first = &page["messages"][0];
    assert_eq!(
        (first["sender"].as_str(), first["content"].as_str(), first["metadata"]["hops"].as_u64()),
        (Some(a.as_str()), Some("hi"), Some(1))
    );
    let conv = groups::page(&t.home, "ada", "ops", None, 1).unwrap().0.id;
    let woke = last_user_text(&reqs[2]);
    assert!(woke.ends_with(&format!("[choruz-incoming] from:@Tess group:ops conv:{} roster:[{{\"id\":\"{a}\",\"name\":\"Tess\",\"type\":\"agent\"}},{{\"id\":\"{b}\",\"name\":\"Tess\",\"type\":\"agent\"}}] | hi", &conv[..13])), "{woke}");
    assert!(Outbox::of_workspace(&t.workspace(&a)).new_dir().read_dir().unwrap().next().is_none(), "drained");
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agents_outbox_is_drained_and_reported_on_its_stream() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, None).await;
    let new = Outbox::of_workspace(&t.workspace(&id)).new_dir();
    std::fs::create_dir_all(&new).unwrap();
    std::fs::write(new.join("cmd-00000000000000000001-cmd-aaaaaa.json"), "{not json").unwrap();
    std::fs::write(new.join("cmd-00000000000000000002-cmd-bbbbbb.json"), r#"{"type":"send","group":"nope","content":"x"}"#).unwrap();
    let mut texts = Vec::new();
    while texts.len() < 2 {
        let f = events.next().await.unwrap();
        if f.event == "system" {
            texts.push(f.data["text"].as_str().unwrap().to_string());
        }
    }
    // The whole command runs at once; the garbage is judged once the write grace is over
    // (on a machine slow enough to outlast it, in the first pass).
    texts.sort();
    assert_eq!(texts[0], "Failed to send to group 'nope': group 'nope' was not found in this workspace, or this agent is not a member");
    let bad = texts[1].strip_prefix("outbox: cmd-00000000000000000001-cmd-aaaaaa.json.").unwrap();
    assert!(bad.ends_with(".processing is not a JSON command; moved to .cicy/outbox/bad/"), "{bad}");
    assert_eq!(gw.requests().len(), 0, "a drain outside a turn calls no model");
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_job_set_through_the_outbox_fires_a_choruz_cron_wake() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    gw.fallback(|_| Reply::sse(anthropic_text("tick seen")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let new = Outbox::of_workspace(&t.workspace(&id)).new_dir();
    std::fs::create_dir_all(&new).unwrap();
    std::fs::write(
        new.join("cmd-00000000000000000001-cmd-cccccc.json"),
        r#"{"type":"set_cron","name":"tick","schedule":"1s","message":"check the queue"}"#,
    )
    .unwrap();
    let reqs = tokio::time::timeout(Duration::from_secs(20), gw.wait_for_requests(1)).await.expect("a cron wake within 20 s");
    let text = last_user_text(&reqs[0]);
    assert!(text.starts_with("[cicy-wake] reason:inbox wake:1 "), "{text}");
    assert!(text.ends_with(" roster:[] | [choruz-cron] job:tick schedule:1s | check the queue"), "{text}");
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_send_without_group_answers_the_claimed_conversation_once() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    gw.push(shell(r#""$CICY_SEND" '{"type":"send","content":"answered by the script"}'"#));
    gw.push(Reply::sse(anthropic_text("final words")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, None).await;
    Mailbox::of_workspace(&t.workspace(&id)).write(Folder::Inbox, &note("human", "status?")).unwrap();
    events.until("done").await;
    let mb = Mailbox::of_workspace(&t.workspace(&id));
    let mut names: Vec<String> =
        mb.outbox_dir().read_dir().unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).filter(|n| n.ends_with(".md")).collect();
    names.sort();
    let out: Vec<_> = names.iter().map(|n| mb.read(n).unwrap()).collect();
    assert_eq!(out.len(), 1, "the script's send is the reply; the final answer is not sent again: {out:?}");
    assert_eq!((out[0].body.as_str(), out[0].meta.get("to").map(String::as_str)), ("answered by the script", Some("human")));
    assert_eq!(cicy::wake::db::WakeDb::open(&t.home).unwrap().obligation_count_unresolved(&id).unwrap(), 0);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioned_agent_runs_in_serve_at_once() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, None).await;
    let new = Outbox::of_workspace(&t.workspace(&id)).new_dir();
    std::fs::create_dir_all(&new).unwrap();
    std::fs::write(
        new.join("cmd-00000000000000000001-cmd-dddddd.json"),
        r#"{"type":"provision_agent","name":"Scout","instructions":"Watch the logs."}"#,
    )
    .unwrap();
    let f = loop {
        let f = events.next().await.unwrap();
        if f.event == "system" {
            break f;
        }
    };
    assert_eq!(f.data["text"], "Agent 'Scout' created successfully.");
    // serve adds the new agent's actor beside the drain that reported it.
    let mut got = s.get("/api/agents/w-2").await;
    for _ in 0..100 {
        if got.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        got = s.get("/api/agents/w-2").await;
    }
    let (status, agent) = got;
    assert_eq!((status, agent["title"].as_str(), agent["role"].as_str()), (200, Some("Scout"), Some("worker")), "{agent}");
    assert!(std::fs::read_to_string(t.workspace("w-2").join("AGENTS.md")).unwrap().ends_with("\nWatch the logs.\n"));
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_written_in_place_in_two_parts_with_a_send_landing_between_runs_whole() {
    let gw = ScriptedGateway::start().await;
    let (t, id) = waker(&gw);
    // A grace no step of this test can outlast: the half command is judged only once whole.
    let s = Serve::start_with(t.root(), &gw.url(), &[], &[("CICY_WRITE_GRACE_MS", "3600000")]).await;
    let mut events = s.events(&id, None).await;
    let outbox = Outbox::of_workspace(&t.workspace(&id));
    std::fs::create_dir_all(outbox.new_dir()).unwrap();
    let half = outbox.new_dir().join("cmd-00000000000000000000-cmd-byhand.json");
    let mut writer = std::fs::File::create(&half).unwrap();
    writer.write_all(br#"{"type":"send","group":"first","#).unwrap();

    let sent = cicy_test_support::cli::command(t.root(), &gw.url(), &["outbox-send", r#"{"type":"send","group":"beside","content":"x"}"#])
        .env("CICY_OUTBOX_DIR", outbox.new_dir().parent().unwrap())
        .output()
        .await
        .unwrap();
    assert_eq!(sent.status.code(), Some(0), "{}", String::from_utf8_lossy(&sent.stderr));
    let system = |f: Frame| (f.event == "system").then(|| f.data["text"].as_str().unwrap().to_string());
    let mut texts = Vec::new();
    while texts.is_empty() {
        texts.extend(system(events.next().await.unwrap()));
    }
    assert_eq!(texts, ["Failed to send to group 'beside': group 'beside' was not found in this workspace, or this agent is not a member"]);
    assert!(half.exists() && !outbox.bad_dir().exists(), "the half command waits for its writer");

    writer.write_all(br#""content":"whole"}"#).unwrap();
    drop(writer);
    while texts.len() < 2 {
        texts.extend(system(events.next().await.unwrap()));
    }
    assert_eq!(texts[1], "Failed to send to group 'first': group 'first' was not found in this workspace, or this agent is not a member");
    assert!(!half.exists() && !outbox.bad_dir().exists());
    assert_eq!(s.stop().await, 0);
}
