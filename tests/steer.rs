//! Steering a running turn (docs/design.md §9 "Steer") against the scripted gateway: texts pushed
//! while a tool runs land after that round's tool results, an interrupt kills the running tool's
//! process group and skips the rest of its batch, and a turn without tool calls leaves the
//! texts queued for the caller. Tools and the test meet through FIFOs and event hooks, never
//! through timing.

use std::time::Duration;

use cicy::conversation::invariants;
use cicy::conversation::message::{Content, ContentBlock, Message};
use cicy::event::{EventKind, SteerStatus, TurnOutcome};
use cicy::turn::{self, SteerFull, Steering};
use cicy_test_support::fixture::{cached_prefix, collector, collector_with, kinds, TestHome};
use cicy_test_support::gateway::*;
use cicy_test_support::wait::Fifo;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

fn body(r: &RecordedRequest) -> Value {
    serde_json::from_slice(&r.body).expect("request body is JSON")
}

/// The last message of a request, serialized again (key order is kept).
fn last_message(r: &RecordedRequest) -> String {
    serde_json::to_string(body(r)["messages"].as_array().unwrap().last().unwrap()).unwrap()
}

fn blocks(m: &Message) -> Vec<ContentBlock> {
    match &m.content {
        Content::Blocks(b) => b.clone(),
        other => panic!("{other:?}"),
    }
}

fn steered(k: &[EventKind]) -> Vec<usize> {
    k.iter().enumerate().filter(|(_, e)| matches!(e, EventKind::Steered { .. })).map(|(i, _)| i).collect()
}

#[tokio::test]
async fn a_steer_pushed_while_a_tool_runs_lands_after_its_result_and_the_prefix_stays_stable() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_use("t1", "shell", r#"{"command":"echo up > started; read -r x < go; echo done"}"#)));
    gw.push(Reply::sse(anthropic_tool_use("t2", "shell", r#"{"command":"echo second"}"#)));
    gw.push(Reply::sse(anthropic_text("ok")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let (started, go) = (Fifo::new(t.workspace(&id).join("started")), Fifo::new(t.workspace(&id).join("go")));
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let steering = Steering::default();
    let for_turn = steering.clone();
    // Spawned: the turn's future must be `Send` for the server's actor.
    let turn = tokio::spawn(async move {
        let outcome = turn::run_turn_with(&mut s, "look at A", &em, &CancellationToken::new(), &for_turn).await;
        (s, outcome)
    });
    started.read().await;
    assert_eq!(steering.push("look at B instead".into()), Ok(1));
    go.write("go\n").await;
    let (_s, outcome) = tokio::time::timeout(Duration::from_secs(20), turn).await.unwrap().unwrap();
    assert_eq!(outcome.unwrap(), TurnOutcome::Completed);

    let reqs = gw.requests();
    assert_eq!(reqs.len(), 3);
    let expected = r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"done\nexit code: 0"},{"type":"text","text":"look at B instead","cache_control":{"type":"ephemeral"}}]}"#;
    assert_eq!(last_message(&reqs[1]), expected);
    assert!(reqs[1].body.windows(expected.len()).any(|w| w == expected.as_bytes()), "the bytes on the wire");
    // Delivered once: the next round's results carry no steering text.
    assert_eq!(
        last_message(&reqs[2]),
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"second\nexit code: 0","cache_control":{"type":"ephemeral"}}]}"#
    );
    assert!(reqs[2].body.starts_with(cached_prefix(&reqs[1].body)), "the steered round's prefix is repeated byte for byte");

    let hist: Vec<Message> = serde_json::from_value(t.current_json(&id)["messages"].clone()).unwrap();
    assert_eq!(invariants::check(&hist), Ok(()));
    assert_eq!(
        blocks(&hist[2]),
        [
            ContentBlock::ToolResult { tool_use_id: "t1".into(), content: "done\nexit code: 0".into(), is_error: false },
            ContentBlock::text("look at B instead")
        ]
    );
    let k = kinds(&ev);
    let at = steered(&k);
    assert_eq!(at.len(), 1, "{k:?}");
    assert_eq!(k[at[0]], EventKind::Steered { status: SteerStatus::Delivered });
    assert!(matches!(&k[at[0] - 1], EventKind::ToolFinished { id, .. } if id == "t1"), "{k:?}");
    assert_eq!(k[at[0] + 1], EventKind::RoundStarted { round: 1 });
    assert_eq!(steering.len(), 0);
}

#[tokio::test]
async fn an_interrupt_kills_the_running_tool_group_skips_the_rest_of_the_batch_and_the_turn_goes_on() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_uses(&[
        ("t1", "shell", r#"{"command":"echo $$ > started; exec sleep 100"}"#),
        ("t2", "shell", r#"{"command":"touch never-ran"}"#),
    ])));
    gw.push(Reply::sse(anthropic_text("stopped")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let started = Fifo::new(t.workspace(&id).join("started"));
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let steering = Steering::default();
    let steerer = steering.clone();
    let interrupter = tokio::spawn(async move {
        // bash leads the tool's group (`process_group(0)`), so its pid is the group id.
        let pgid: libc::pid_t = started.read().await.trim().parse().unwrap();
        assert_eq!(steerer.push("stop that, do C".into()), Ok(1));
        steerer.interrupt();
        pgid
    });
    let outcome =
        tokio::time::timeout(Duration::from_secs(20), turn::run_turn_with(&mut s, "wait", &em, &CancellationToken::new(), &steering))
            .await
            .unwrap()
            .unwrap();
    assert_eq!(outcome, TurnOutcome::Completed);
    let pgid = interrupter.await.unwrap();
    assert!(pgid > 1);
    // SAFETY: signal 0 only asks whether the group has a member; pgid > 1 names one group.
    let alive = unsafe { libc::kill(-pgid, 0) };
    assert_eq!((alive, std::io::Error::last_os_error().raw_os_error()), (-1, Some(libc::ESRCH)), "the tool's group is gone");
    assert!(!t.workspace(&id).join("never-ran").exists());

    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        last_message(&reqs[1]),
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"error: interrupted by steer","is_error":true},{"type":"tool_result","tool_use_id":"t2","content":"error: interrupted by steer","is_error":true},{"type":"text","text":"stop that, do C","cache_control":{"type":"ephemeral"}}]}"#
    );
    let k = kinds(&ev);
    let started: Vec<&str> = k
        .iter()
        .filter_map(|e| match e {
            EventKind::ToolStarted { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["t1"], "the second call never started");
    let finished = k.iter().find_map(|e| match e {
        EventKind::ToolFinished { id, result, is_error, .. } => Some((id.as_str(), result.as_str(), *is_error)),
        _ => None,
    });
    assert_eq!(finished, Some(("t1", turn::INTERRUPTED_RESULT, true)));
    assert_eq!(steered(&k).len(), 1);
    assert_eq!(k.last(), Some(&EventKind::TurnEnded { outcome: TurnOutcome::Completed }));
    let hist = s.conversation().current.messages.clone();
    assert_eq!(invariants::check(&hist), Ok(()));
    assert_eq!(hist[3].plain_text(), "stopped");
}

#[tokio::test]
async fn an_interrupt_while_the_model_answers_runs_the_tool_and_the_text_still_lands() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text_and_tool("Let me look.", "t1", "shell", r#"{"command":"echo hi"}"#)));
    gw.push(Reply::sse(anthropic_text("done")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let steering = Steering::default();
    let steerer = steering.clone();
    // At the first text delta the model is still answering: no tool runs yet.
    let (em, _ev) = collector_with(&id, move |e| {
        if matches!(e, EventKind::TextDelta { .. }) && steerer.is_empty() {
            steerer.push("also check C".into()).unwrap();
            steerer.interrupt();
        }
    });
    let outcome = turn::run_turn_with(&mut s, "look", &em, &CancellationToken::new(), &steering).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(
        last_message(&gw.requests()[1]),
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"hi\nexit code: 0"},{"type":"text","text":"also check C","cache_control":{"type":"ephemeral"}}]}"#
    );
}

#[tokio::test]
async fn a_turn_without_tool_calls_leaves_the_texts_queued_and_a_fourth_is_refused() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("just words")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let steering = Steering::default();
    let steerer = steering.clone();
    let (em, ev) = collector_with(&id, move |e| {
        if matches!(e, EventKind::TextDelta { .. }) && steerer.is_empty() {
            assert_eq!(steerer.push("a".into()), Ok(1));
            assert_eq!(steerer.push("b".into()), Ok(2));
            assert_eq!(steerer.push("c".into()), Ok(3));
            assert_eq!(steerer.push("d".into()), Err(SteerFull));
        }
    });
    let outcome = turn::run_turn_with(&mut s, "hello", &em, &CancellationToken::new(), &steering).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(gw.requests().len(), 1);
    assert_eq!(steered(&kinds(&ev)), Vec::<usize>::new());
    assert_eq!(s.conversation().current.messages.len(), 2);
    assert_eq!(s.conversation().current.messages[1].plain_text(), "just words");
    assert_eq!(steering.take_all(), ["a", "b", "c"]);
    assert_eq!(steering.len(), 0);
}
