//! `serve`'s event log and control of a running turn (docs/design.md §9): replay after a reconnect,
//! seq numbers that survive `kill -9`, steering that lands after the tool results, abort and
//! interrupt that kill the tool's process group, the memory timer, and the clean stop.
//! Each test runs a real serve process against the scripted gateway.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use cicy_test_support::fixture::TestHome;
use cicy_test_support::gateway::{anthropic_text, anthropic_tool_use, Reply, ScriptedGateway};
use cicy_test_support::history::{add_config, wire_messages};
use cicy_test_support::serve::{types, Serve};
use cicy_test_support::wait;

/// A shell call that writes its shell's pid to `tool.pid` in the workspace, then sleeps.
fn sleeper(id: &str) -> Reply {
    Reply::sse(anthropic_tool_use(id, "shell", r#"{"command": "echo $$ > tool.pid; exec sleep 100"}"#))
}

/// The pid the sleeper wrote, once it has.
async fn tool_pid(ws: &Path) -> i32 {
    let path = ws.join("tool.pid");
    assert!(wait::appears_within(&path, Duration::from_secs(20)).await, "the tool never started");
    loop {
        if let Ok(pid) = std::fs::read_to_string(&path).unwrap_or_default().trim().parse() {
            return pid;
        }
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_with_last_event_id_replays_without_gap_or_duplicate() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    gw.push(Reply::sse(anthropic_tool_use("toolu_1", "shell", r#"{"command": "echo one"}"#)));
    gw.push(Reply::sse(anthropic_text("the whole answer")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let all = s.chat(&id, "go").await.until("done").await;
    assert!(all.len() > 8);
    for cut in [0, 3, all.len() - 2] {
        let last = all[cut].id.unwrap();
        let replayed = s.events(&id, Some(last)).await.until("done").await;
        assert_eq!(replayed, all[cut + 1..].to_vec(), "after {last}");
    }
    // From before anything this serve sent: everything, from the log files.
    let from_start = s.events(&id, Some(0)).await.until("done").await;
    assert_eq!(from_start, all);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_tool_round_kills_the_tool_and_the_restart_continues_seq_and_heals() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let ws = t.workspace(&id);
    gw.push(sleeper("toolu_1"));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut stream = s.chat(&id, "sleep a while").await;
    let mut seen = Vec::new();
    while let Some(f) = stream.next().await {
        let started = f.event == "tool_started";
        seen.push(f.id.unwrap());
        if started {
            break;
        }
    }
    let pid = tool_pid(&ws).await;
    // The group is recorded just after the spawn; a kill before that record (the tool can write
    // its pid first on a loaded machine) leaves nothing to reap, which is not what this tests.
    let record = cicy::tools::reaper::records_dir(&ws).join(format!("{pid}.json"));
    assert!(wait::appears_within(&record, Duration::from_secs(20)).await, "the tool's group was recorded");
    s.kill9().await;
    // The watchdog kills the tool as serve dies; the restart finds only its record.
    assert!(wait::exited_within(pid, Duration::from_secs(60)).await, "the tool outlived the killed serve");

    gw.push(Reply::sse(anthropic_text("back again")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let frames = s.chat(&id, "are you there").await.until("done").await;
    assert_eq!(std::fs::read_dir(cicy::tools::reaper::records_dir(&ws)).unwrap().count(), 0, "the stale record was removed");
    let max_before = *seen.iter().max().unwrap();
    assert!(
        frames.iter().all(|f| f.id.unwrap() > max_before),
        "seq {:?} continue above {max_before}",
        frames.iter().map(|f| f.id).collect::<Vec<_>>()
    );
    let text: String = frames.iter().filter(|f| f.event == "text_delta").map(|f| f.data["text"].as_str().unwrap()).collect();
    assert_eq!(text, "back again");
    // The request the referee accepted carries the healed tool pair and the new question.
    let msgs = wire_messages(&gw.requests()[1]);
    assert_eq!(msgs.last().unwrap().plain_text(), "are you there");
    assert!(gw.requests()[1].body_str().contains("toolu_1"));
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_lands_after_the_tool_results_and_a_fourth_is_refused() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let ws = t.workspace(&id);
    let fifo = wait::Fifo::new(ws.join("go.fifo"));
    gw.push(Reply::sse(anthropic_tool_use("toolu_1", "shell", r#"{"command": "cat go.fifo"}"#)));
    gw.push(Reply::sse(anthropic_text("steered")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut stream = s.chat(&id, "wait for it").await;
    while stream.next().await.unwrap().event != "tool_started" {}
    for text in ["also this", "and that", "and more"] {
        let (status, body) = s.post(&format!("/api/agents/{id}/steer"), json!({"text": text})).await;
        assert_eq!((status, body), (200, json!({"status": "queued"})));
    }
    let (status, body) = s.post(&format!("/api/agents/{id}/steer"), json!({"text": "one too many"})).await;
    assert_eq!((status, body), (429, json!({"status": "rejected_full"})));
    fifo.write("released\n").await;
    let frames = stream.until("done").await;
    assert!(frames.iter().any(|f| f.event == "steered" && f.data["status"] == "delivered"));
    let sent: Value = serde_json::from_slice(&gw.requests()[1].body).unwrap();
    let last = sent["messages"].as_array().unwrap().last().unwrap().clone();
    let mut blocks = last["content"].as_array().unwrap().clone();
    for b in &mut blocks {
        b.as_object_mut().unwrap().remove("cache_control");
    }
    assert_eq!(
        Value::Array(blocks),
        json!([
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "released\nexit code: 0"},
            {"type": "text", "text": "also this"},
            {"type": "text", "text": "and that"},
            {"type": "text", "text": "and more"}
        ])
    );
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_sleeping_tool_kills_its_group_and_ends_the_run() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    gw.push(sleeper("toolu_1"));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut stream = s.chat(&id, "sleep").await;
    let pid = tool_pid(&t.workspace(&id)).await;
    // A waiting steer and a queued prompt are both inputs the cancel drops.
    let (status, _) = s.post(&format!("/api/agents/{id}/steer"), json!({"text": "then this"})).await;
    assert_eq!(status, 200);
    let (status, _) = s.post(&format!("/api/agents/{id}/prompt"), json!({"text": "and later that"})).await;
    assert_eq!(status, 200);
    let (status, body) = s.post("/api/cicy/cancel", json!({"agent_id": id})).await;
    assert_eq!((status, body), (200, json!({"success": true, "canceled": true, "agent_id": id, "dropped": 2})));
    let frames = stream.until("done").await;
    let ended = frames.iter().find(|f| f.event == "turn_ended").unwrap();
    assert_eq!(ended.data["outcome"], "cancelled");
    assert!(wait::exited_within(pid, Duration::from_secs(30)).await, "the tool's group is gone");
    let (_, row) = s.get(&format!("/api/agents/{id}")).await;
    assert_eq!((row["state"].as_str(), row["busy"].as_bool()), (Some("idle"), Some(false)));
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupting_steer_kills_the_tool_and_the_turn_goes_on() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    gw.push(sleeper("toolu_1"));
    gw.push(Reply::sse(anthropic_text("changed course")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut stream = s.chat(&id, "sleep").await;
    let pid = tool_pid(&t.workspace(&id)).await;
    let (status, _) = s.post(&format!("/api/agents/{id}/steer"), json!({"text": "stop that", "interrupt": true})).await;
    assert_eq!(status, 200);
    let frames = stream.until("done").await;
    assert!(wait::exited_within(pid, Duration::from_secs(30)).await);
    let fin = frames.iter().find(|f| f.event == "tool_finished").unwrap();
    assert_eq!((fin.data["result"].as_str(), fin.data["is_error"].as_bool()), (Some("error: interrupted by steer"), Some(true)));
    assert!(frames.iter().any(|f| f.event == "turn_ended" && f.data["outcome"] == "completed"));
    let last = wire_messages(&gw.requests()[1]).pop().unwrap();
    assert!(last.plain_text().contains("stop that"));
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_timer_flushes_after_the_idle_period_without_a_request() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    add_config(&t, "memory:\n  idle_secs: 1\n");
    let id = t.create("tester", None);
    gw.push(Reply::sse(anthropic_text("Noted.")));
    gw.on_aux(Reply::sse(anthropic_text(r#"{"memories":[]}"#)));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    s.chat(&id, "nothing to keep here").await.until("done").await;
    assert_eq!(gw.requests().len(), 1, "no flush inside or right after the turn: the buffer is not due yet");
    let reqs = gw.wait_for_requests(2).await;
    assert_eq!(reqs[1].header("x-cicy-aux"), Some("memory"));
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cancels_the_running_turn_with_its_marker_and_exits_0() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let (held, _gate) = Reply::gated(anthropic_text("never sent"));
    gw.push(held);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut stream = s.chat(&id, "a long question").await;
    gw.wait_for_requests(1).await;
    let stop = tokio::spawn(s.stop());
    let frames = stream.until("done").await;
    assert_eq!(stop.await.unwrap(), 0);
    assert!(frames.iter().any(|f| f.event == "turn_ended" && f.data["outcome"] == "cancelled"));
    let current = t.current_json(&id);
    let last = current["messages"].as_array().unwrap().last().unwrap().to_string();
    assert!(last.contains("cancelled"), "{last}");
    let log = std::fs::read_to_string(t.workspace(&id).join(".cicy/events/events.jsonl")).unwrap();
    let last_line: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(last_line["type"], "done", "the log was flushed before exit");
    assert_eq!(types(&frames).last().map(String::as_str), Some("done"));
}

/// The seqs of `events.jsonl` in file order.
fn seqs_in_file(ws: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(ws.join(".cicy/events/events.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["seq"].as_u64().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_and_a_local_cli_logging_the_same_agent_number_strictly_upward_in_file_order() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let ws = t.workspace(&id);
    gw.push(Reply::sse(anthropic_text("from serve")));
    let (held, gate) = Reply::gated(anthropic_text("from the cli"));
    gw.push(held);
    gw.push(Reply::sse(anthropic_text("serve again")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let first = s.chat(&id, "one").await.until("done").await;

    // A second writer process: the CLI's turn runs (its answer held) while serve logs the
    // same agent's events (the run waiting for the turn lock says so).
    let cli = cicy_test_support::cli::command(t.root(), &gw.url(), &["chat", "--local", "--json", &id, "two"]).spawn().unwrap();
    gw.wait_for_requests(2).await;
    let mut waiting = s.chat(&id, "three").await;
    let mut second = Vec::new();
    while let Some(f) = waiting.next().await {
        let system = f.event == "system";
        second.push(f);
        if system {
            break;
        }
    }
    gate.add_permits(1);
    let out = cli.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    second.extend(waiting.until("done").await);
    let cli_seqs: Vec<u64> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["seq"].as_u64().unwrap()).collect();
    assert!(!cli_seqs.is_empty());
    // Serve writes its log behind its streams; a clean stop writes what it handed out.
    assert_eq!(s.stop().await, 0);

    let in_file = seqs_in_file(&ws);
    assert!(in_file.windows(2).all(|w| w[0] < w[1]), "seqs increase strictly in file order: {in_file:?}");
    let mut every: Vec<u64> = first.iter().chain(&second).map(|f| f.id.unwrap()).chain(cli_seqs).collect();
    every.sort_unstable();
    // The file may hold more: what serve logs after a run's `done` (a memory flush it starts
    // then) reaches no stream the test read.
    let missing: Vec<u64> = every.iter().copied().filter(|s| !in_file.contains(s)).collect();
    assert_eq!(missing, Vec::<u64>::new(), "every seq either process handed out is in the file ({in_file:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_line_in_the_log_with_hwm_missing_is_set_aside_and_the_agent_answers() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let ws = t.workspace(&id);
    let dir = ws.join(".cicy/events");
    std::fs::create_dir_all(&dir).unwrap();
    let line = |seq: u64, text: &str| json!({"seq": seq, "agent_id": id, "type": "text_delta", "text": text}).to_string() + "\n";
    let original = format!("{}{{\"seq\": 2, broken\n{}", line(1, "old"), line(3, "older still kept"));
    std::fs::write(dir.join("events.jsonl"), &original).unwrap();
    gw.push(Reply::sse(anthropic_text("still here")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;

    let frames = s.chat(&id, "hello").await.until("done").await;
    let text: String = frames.iter().filter(|f| f.event == "text_delta").map(|f| f.data["text"].as_str().unwrap()).collect();
    assert_eq!(text, "still here");
    assert_eq!(frames[0].id, Some(4), "numbering goes on above the good lines");
    let replay = s.events(&id, Some(0)).await.until("done").await;
    assert_eq!(
        replay[..2].iter().map(|f| (f.id, f.data["text"].clone())).collect::<Vec<_>>(),
        vec![(Some(1), json!("old")), (Some(3), json!("older still kept"))]
    );
    assert_eq!(replay[2..], frames[..]);
    let aside: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("events.jsonl.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(std::fs::read_to_string(&aside[0]).unwrap(), original, "the file as it was is kept");
    assert_eq!(s.stop().await, 0);
}
