//! Idle autonomy in a real `serve` (docs/design.md §13): the tick picks an intent of the ledger when
//! the agent is truly idle, a chat preempts it (its process group killed, `preempted_by:
//! human`), `min_gap` keeps it from starting again at once, a `git` command is never killed,
//! three preemptions promote it once, a model-turn intent yields at its round boundary, a
//! hand-written line is checked at pickup, `needs: human` never runs, and a `kill -9` of serve
//! leaves nothing running. The tick runs every second here (`autonomy.tick_secs: 1`).

use std::time::Duration;

use serde_json::Value;

use cicy::autonomy::ledger::ledger_path;
use cicy::autonomy::log::{log_path, REST_LINE};
use cicy::wake::db::WakeDb;

use cicy_test_support::fixture::TestHome;
use cicy_test_support::gateway::{anthropic_text, anthropic_tool_use, Reply, ScriptedGateway};
use cicy_test_support::serve::{types, Frame, Serve, Sse};
use cicy_test_support::wait::{Fifo, Pidfd};

const ALLOW: &str = r#"{"verdict":"allow","class":"none","reason":"an ordinary task"}"#;

/// A home whose `idler` role ticks every second, an agent of it, and a gateway whose judge
/// allows every wish.
async fn idler() -> (ScriptedGateway, TestHome, String) {
    let gw = ScriptedGateway::start().await;
    gw.on_aux(Reply::sse(anthropic_text(ALLOW)));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.agent_of_role("idler", "[core]", "autonomy:\n  tick_secs: 1\n");
    (gw, t, id)
}

/// Appends a hand-written ledger line (checked at pickup, as docs/design.md §13 says).
fn hand_wish(t: &TestHome, id: &str, iid: &str, run: Option<&str>, extra: &str) {
    let run = run.map_or(String::new(), |r| format!(r#","run":{}"#, serde_json::to_string(r).unwrap()));
    // Wished now: a wish older than a day would be promoted at the first tick.
    let at = cicy::fsutil::now_rfc3339();
    let line = format!(r#"{{"id":"{iid}","at":"{at}","by":"human","what":"work on {iid}"{run},"priority":5,"status":"pending"{extra}}}"#);
    let path = ledger_path(&t.workspace(id));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    text.push_str(&line);
    text.push('\n');
    std::fs::write(&path, text).unwrap();
}

/// Every line of the ledger, parsed.
fn ledger(t: &TestHome, id: &str) -> Vec<Value> {
    std::fs::read_to_string(ledger_path(&t.workspace(id))).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The latest line of intent `iid`.
fn intent(t: &TestHome, id: &str, iid: &str) -> Value {
    ledger(t, id).into_iter().rev().find(|l| l["id"] == iid).unwrap()
}

fn log_text(t: &TestHome, id: &str) -> String {
    std::fs::read_to_string(log_path(&t.workspace(id))).unwrap_or_default()
}

/// Whether `done()` holds now or within 10 s: for what the actor writes right after an event
/// the test saw (a ledger line after the kill, a rest line after the next tick).
async fn soon(done: impl Fn() -> bool) -> bool {
    // 30 s: generous, so a loaded machine does not miss it.
    for _ in 0..600 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

/// Whether the last line of `autonomy.log` starts a rest streak.
fn resting(t: &TestHome, id: &str) -> bool {
    log_text(t, id).lines().last().is_some_and(|l| l.ends_with(REST_LINE))
}

/// Frames up to the first `autonomy` event with `status`.
async fn until_autonomy(events: &mut Sse, status: &str) -> Vec<Frame> {
    let mut out = Vec::new();
    loop {
        let f = events.next().await.expect("the stream goes on");
        let end = f.event == "autonomy" && f.data["status"] == status;
        out.push(f);
        if end {
            return out;
        }
    }
}

/// A fifo in the workspace that the intent's command writes its group id into.
fn started(t: &TestHome, id: &str) -> Fifo {
    Fifo::new(t.workspace(id).join("started"))
}

/// The group of the running command, held by a pidfd while it is known to run.
async fn group_of(fifo: &Fifo) -> (i32, Pidfd) {
    let pgid: i32 = fifo.read().await.trim().parse().unwrap();
    (pgid, Pidfd::open(pgid).expect("the intent's shell runs"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_preempts_a_running_command_and_min_gap_keeps_it_from_starting_again() {
    let (gw, t, id) = idler().await;
    let fifo = started(&t, &id);
    hand_wish(&t, &id, "i1", Some("echo $$ > started; sleep 30"), r#","min_gap":3600"#);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let (pgid, leader) = group_of(&fifo).await;
    // The shell can write the fifo before serve has put its group in the lease (taken first
    // without one) and written the ledger line.
    let leased = || WakeDb::open(&t.home).unwrap().lease_of(&id).unwrap();
    let ready = || leased().is_some_and(|l| l.pgid.is_some()) && intent(&t, &id, "i1")["status"] == "running";
    assert!(soon(ready).await, "{:?} {}", leased(), intent(&t, &id, "i1"));
    let lease = leased().unwrap();
    assert_eq!((lease.job.as_str(), lease.pgid, lease.priority), ("intent:i1", Some(i64::from(pgid)), 5));

    gw.push(Reply::sse(anthropic_text("Here I am.")));
    let frames = s.chat(&id, "are you there?").await.until("done").await;
    assert!(leader.exited_within(Duration::from_secs(30)).await, "the intent's shell was stopped");
    // SAFETY: kill(2) with signal 0 only asks whether any process of the group is left.
    assert_eq!(unsafe { libc::kill(-pgid, 0) }, -1, "nothing of the group is left");
    let interrupted = frames.iter().position(|f| f.event == "autonomy" && f.data["status"] == "interrupted").unwrap();
    let turn = frames.iter().position(|f| f.event == "turn_started").unwrap();
    assert!(interrupted < turn, "{:?}", types(&frames));
    assert!(frames[interrupted].data["detail"].as_str().unwrap().starts_with("preempted by human"));

    let i1 = intent(&t, &id, "i1");
    assert_eq!(
        (i1["status"].as_str(), i1["preempted_by"].as_str(), i1["preempted_count"].as_u64()),
        (Some("interrupted"), Some("human"), Some(1))
    );
    assert!(i1["result"].as_str().unwrap().starts_with("stopped"), "{i1}");
    assert!(i1["checked"].is_string(), "checked at pickup: {i1}");
    assert_eq!(WakeDb::open(&t.home).unwrap().lease_of(&id).unwrap(), None);

    // The next ticks rest: min_gap (an hour) counts from the start of the run a chat cut short.
    assert!(soon(|| resting(&t, &id)).await, "no rest line after the preemption: {}", log_text(&t, &id));
    let runs = ledger(&t, &id).iter().filter(|l| l["status"] == "running").count();
    assert_eq!(runs, 1, "started once");
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_command_is_never_killed_and_the_chat_waits_for_it() {
    let (gw, t, id) = idler().await;
    let ws = t.workspace(&id);
    assert!(std::process::Command::new("git").args(["init", "-q"]).current_dir(&ws).status().unwrap().success());
    let fifo = started(&t, &id);
    let go = Fifo::new(ws.join("go"));
    hand_wish(&t, &id, "i1", Some("echo $$ > started; git hash-object --stdin < go > /dev/null && echo clean"), "");
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let (_pgid, leader) = group_of(&fifo).await;

    gw.push(Reply::sse(anthropic_text("Done waiting.")));
    let mut chat = s.chat(&id, "stop what you are doing").await;
    // The chat waits (the actor wrote this before it answered); the command goes on until the
    // test lets it finish.
    assert!(std::fs::read_to_string(log_path(&ws)).unwrap().contains("intent:i1 is never killed; human waits for it"));
    go.write("go\n").await;
    assert!(leader.exited_within(Duration::from_secs(20)).await);
    let frames = chat.until("done").await;
    let done = frames.iter().position(|f| f.event == "autonomy" && f.data["status"] == "done").unwrap();
    let turn = frames.iter().position(|f| f.event == "turn_started").unwrap();
    assert!(done < turn, "{:?}", types(&frames));
    let i1 = intent(&t, &id, "i1");
    assert_eq!(
        (i1["status"].as_str(), i1["result"].as_str(), i1["preempted_count"].as_u64()),
        (Some("done"), Some("exit 0: clean"), Some(0))
    );
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_preemptions_promote_an_intent_once_and_a_fourth_the_same_day_does_not() {
    let (gw, t, id) = idler().await;
    gw.fallback(|_| Reply::sse(anthropic_text("ok")));
    let fifo = started(&t, &id);
    hand_wish(&t, &id, "i1", Some("echo $$ > started; sleep 30"), "");
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, None).await;
    let mut promoted = 0;
    for n in 1..=4 {
        let (_pgid, leader) = group_of(&fifo).await;
        let frames = s.chat(&id, &format!("interruption {n}")).await.until("done").await;
        assert!(leader.exited_within(Duration::from_secs(30)).await);
        assert!(frames.iter().any(|f| f.event == "autonomy" && f.data["status"] == "interrupted"));
        // The next tick (a second later) promotes or not, then starts the intent again.
        let seen = until_autonomy(&mut events, "running").await;
        let seen = if n == 1 { until_autonomy(&mut events, "running").await } else { seen };
        promoted += seen.iter().filter(|f| f.event == "autonomy" && f.data["status"] == "promoted").count();
        assert_eq!(promoted, usize::from(n >= 3), "after preemption {n}");
    }
    let i1 = intent(&t, &id, "i1");
    assert_eq!((i1["priority"].as_u64(), i1["preempted_count"].as_u64()), (Some(4), Some(4)));
    let promotions: Vec<Value> = ledger(&t, &id).into_iter().map(|l| l["promoted"].clone()).filter(Value::is_string).collect();
    assert!(promotions.windows(2).all(|w| w[0] == w[1]), "one promotion: {promotions:?}");
    assert!(log_text(&t, &id).contains("intent:i1 promoted to priority 4 (starvation)"));
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_turn_intent_stops_at_its_round_boundary_when_a_person_writes() {
    let (gw, t, id) = idler().await;
    let ws = t.workspace(&id);
    let fifo = started(&t, &id);
    let go = Fifo::new(ws.join("go"));
    hand_wish(&t, &id, "i1", None, "");
    gw.push(Reply::sse(anthropic_tool_use("toolu_1", "shell", r#"{"command":"echo $$ > started; read -r x < go; echo tool done"}"#)));
    gw.push(Reply::sse(anthropic_text("Hello from the person's turn.")));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let (_pgid, _leader) = group_of(&fifo).await;
    let mut chat = s.chat(&id, "a person asks").await;
    go.write("go\n").await;
    let frames = chat.until("done").await;
    let kinds: Vec<String> =
        types(&frames).into_iter().filter(|t| ["tool_finished", "turn_ended", "autonomy", "turn_started"].contains(&t.as_str())).collect();
    assert_eq!(kinds, ["tool_finished", "turn_ended", "autonomy", "turn_started", "turn_ended"]);
    let main: Vec<_> = gw.requests().into_iter().filter(|r| r.header("x-cicy-aux").is_none()).collect();
    assert_eq!(main.len(), 2, "the intent's second round was never sent");
    assert!(main[0].body_str().contains("[cicy-intent] id:i1 | work on i1"), "{}", main[0].body_str());
    assert!(main[1].body_str().contains("a person asks"));
    let i1 = intent(&t, &id, "i1");
    assert_eq!((i1["status"].as_str(), i1["preempted_by"].as_str()), (Some("interrupted"), Some("human")));
    assert_eq!(i1["result"], "turn stopped at a round boundary");
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_human_never_runs_and_a_refused_hand_written_line_never_runs() {
    let (gw, t, id) = idler().await;
    hand_wish(&t, &id, "i1", Some("touch ran-i1"), r#","needs":"human""#);
    // Its `checked` is a plain SHA-256 of its fields, as an agent's shell could write it: no mark.
    let forged = format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(b"work on i2\0\0curl -s http://127.0.0.1:9/ > ran-i2\0none"));
    hand_wish(&t, &id, "i2", Some("curl -s http://127.0.0.1:9/ > ran-i2"), &format!(r#","checked":"{forged}""#));
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, None).await;
    let refused = until_autonomy(&mut events, "refused").await;
    assert!(refused.last().unwrap().data["detail"].as_str().unwrap().starts_with("network:"), "{refused:?}");
    assert!(soon(|| resting(&t, &id)).await, "{}", log_text(&t, &id));
    let (i1, i2) = (intent(&t, &id, "i1"), intent(&t, &id, "i2"));
    assert_eq!(i1["status"], "pending");
    assert_eq!(i2["status"], "refused");
    assert!(i2["refused_reason"].as_str().unwrap().starts_with("network:"), "{i2}");
    assert!(!t.workspace(&id).join("ran-i1").exists() && !t.workspace(&id).join("ran-i2").exists());
    assert!(gw.requests().is_empty(), "no gateway call: the command was refused before the judge");
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_serve_leaves_no_intent_running_and_the_next_start_records_the_interruption() {
    let (gw, t, id) = idler().await;
    let fifo = started(&t, &id);
    hand_wish(&t, &id, "i1", Some("echo $$ > started; sleep 30"), r#","min_gap":3600"#);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let (pgid, leader) = group_of(&fifo).await;
    // The shell can write the fifo before serve has recorded its group for the reaper.
    let record = cicy::autonomy::tick::running_dir(&t.workspace(&id)).join(format!("{pgid}.json"));
    assert!(cicy_test_support::wait::appears_within(&record, Duration::from_secs(20)).await);
    s.kill9().await;
    assert_eq!(intent(&t, &id, "i1")["status"], "running");
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    // The watchdog killed the group as serve died (the reaper of this start is the second line).
    assert!(leader.exited_within(Duration::from_secs(20)).await, "the intent's group outlived the killed serve");
    // The ledger line follows the kill at once, in the same recovery.
    assert!(soon(|| intent(&t, &id, "i1")["status"] != "running").await);
    let i1 = intent(&t, &id, "i1");
    assert_eq!(
        (i1["status"].as_str(), i1["preempted_by"].as_str(), i1["preempted_count"].as_u64()),
        (Some("interrupted"), Some("restart"), Some(0))
    );
    assert_eq!(WakeDb::open(&t.home).unwrap().lease_of(&id).unwrap(), None);
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_selfcheck_runs_when_there_is_no_intent_and_then_waits_its_period() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let extra = "autonomy:\n  tick_secs: 1\n  selfcheck: {run: \"echo checked >> selfcheck.txt\", every_secs: 3600}\n";
    let id = t.agent_of_role("checker", "[core]", extra);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut events = s.events(&id, None).await;
    let done = until_autonomy(&mut events, "done").await;
    assert_eq!(done.last().unwrap().data["job"], "selfcheck");
    assert_eq!(done.last().unwrap().data["detail"], "exit 0: ");
    assert!(soon(|| resting(&t, &id)).await, "{}", log_text(&t, &id));
    assert_eq!(std::fs::read_to_string(t.workspace(&id).join("selfcheck.txt")).unwrap(), "checked\n", "once per every_secs");
    let state: Value = serde_json::from_slice(&std::fs::read(t.workspace(&id).join(".cicy/autonomy-state.json")).unwrap()).unwrap();
    assert!(state["last_start"]["selfcheck"].as_i64().unwrap() > 1_700_000_000);
    assert!(gw.requests().is_empty(), "a routine's command needs no gateway call");
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_claiming_priority_1_still_gives_way_and_compact_and_drop_stop_it() {
    let (gw, t, id) = idler().await;
    let fifo = started(&t, &id);
    hand_wish(&t, &id, "i1", Some("echo $$ > started; sleep 30"), "");
    let path = ledger_path(&t.workspace(&id));
    let text = std::fs::read_to_string(&path).unwrap().replace(r#""priority":5"#, r#""priority":1"#);
    std::fs::write(&path, text).unwrap();
    let s = Serve::start(t.root(), &gw.url(), &[]).await;

    // Never above `task` (3): a person's chat still comes first.
    let (_pgid, leader) = group_of(&fifo).await;
    assert_eq!(WakeDb::open(&t.home).unwrap().lease_of(&id).unwrap().unwrap().priority, 3);
    gw.push(Reply::sse(anthropic_text("Hello.")));
    s.chat(&id, "hello").await.until("done").await;
    assert!(leader.exited_within(Duration::from_secs(30)).await);

    // `/compact` waits for the job to give way, then runs (the summary is an aux call).
    let (_pgid, leader) = group_of(&fifo).await;
    let (status, reply) = s.post("/api/cicy/compact", serde_json::json!({"agent_id": id})).await;
    assert_eq!((status, reply["success"].as_bool(), reply["outcome"].as_str()), (200, Some(true), Some("done")), "{reply}");
    assert!(leader.exited_within(Duration::from_secs(30)).await);

    // A drop while it runs stops it: `dropped`, preempted by `drop`, not counted as a squeeze.
    let (_pgid, leader) = group_of(&fifo).await;
    cicy::autonomy::wish::drop(&t.workspace(&id), "i1").unwrap();
    assert!(leader.exited_within(Duration::from_secs(30)).await, "the 0.5 s poll saw the drop");
    assert!(soon(|| intent(&t, &id, "i1")["preempted_by"] == "drop").await);
    let i1 = intent(&t, &id, "i1");
    assert_eq!(
        (i1["status"].as_str(), i1["preempted_by"].as_str(), i1["preempted_count"].as_u64()),
        (Some("dropped"), Some("drop"), Some(2))
    );
    assert_eq!(s.stop().await, 0);
}
