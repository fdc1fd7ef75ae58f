//! The turn loop over the gateway's one retry layer (docs/design.md §4, §6.2): a rate limit costs one
//! attempt budget per round, a re-run after shown text is marked and waits, and a partial answer
//! cut for good stays in the history, marked, until `retry` replaces it. Waits run on tokio's
//! paused clock.

use cicy::conversation::invariants;
use cicy::conversation::message::{Content, ContentBlock, Message};
use cicy::event::{EventKind, TurnOutcome};
use cicy::turn;
use cicy_test_support::fixture::{collector, kinds, TestHome};
use cicy_test_support::gateway::*;
use tokio_util::sync::CancellationToken;

fn messages(id: &str, t: &TestHome) -> Vec<Message> {
    serde_json::from_value(t.current_json(id)["messages"].clone()).expect("messages parse")
}

/// The events a reader sees of the answer and the retries, in order.
fn answer_events(k: &[EventKind]) -> Vec<EventKind> {
    k.iter()
        .filter(|e| matches!(e, EventKind::TextDelta { .. } | EventKind::TextEnd | EventKind::System { .. } | EventKind::Retry { .. }))
        .cloned()
        .collect()
}

const RETRYING: &str = "[retrying] the answer above was cut off and is discarded; the round is sent again";

/// message_start, ping, the text block's start and its first delta — then the stream ends.
fn cut(text: &str) -> Reply {
    Reply::sse(anthropic_text(text)[..4].to_vec())
}

#[tokio::test(start_paused = true)]
async fn a_429_forever_costs_eleven_requests_per_round_each_after_retry_after() {
    let gw = ScriptedGateway::start().await;
    gw.fallback(|_| Reply::status(429, &[("retry-after", "1")], "rate limited"));
    let t = TestHome::new(&gw.url(), 10);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "hello?", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(gw.requests().len(), 11, "1 + max_retries attempts, not 33");
    assert_eq!(outcome, TurnOutcome::Failed, "a rate limit that outlasts the budget is a failure, not a refusal");
    let waits: Vec<(u32, u64)> = kinds(&ev)
        .into_iter()
        .filter_map(|k| match k {
            EventKind::Retry { attempt, delay_ms, .. } => Some((attempt, delay_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(waits.iter().map(|w| w.0).collect::<Vec<_>>(), (1..=10).collect::<Vec<u32>>());
    assert!(waits.iter().all(|w| w.1 >= 1000), "every wait honours retry-after: {waits:?}");
    assert_eq!(&waits[..2], &[(1, 1000), (2, 1000)]);
    let hist = messages(&id, &t);
    assert_eq!(hist.iter().map(Message::plain_text).collect::<Vec<_>>(), ["hello?", "(no reply this turn · generation failed)"]);
}

#[tokio::test(start_paused = true)]
async fn a_cut_answer_is_marked_retrying_and_the_round_is_sent_again_after_the_backoff() {
    let gw = ScriptedGateway::start().await;
    gw.push(cut("half an answer"));
    gw.push(Reply::sse(anthropic_text("the whole answer")));
    let t = TestHome::new(&gw.url(), 10);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "talk", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Completed);
    let seen = answer_events(&kinds(&ev));
    let delay = match &seen[3] {
        EventKind::Retry { attempt: 1, delay_ms, reason } => {
            assert!(reason.starts_with("the gateway stream ended before the response was complete"), "{reason}");
            *delay_ms
        }
        other => panic!("expected the re-run's retry, got {other:?}: {seen:?}"),
    };
    assert!((375..=500).contains(&delay), "a re-run waits the first backoff: {delay} ms");
    let delta = |t: &str| EventKind::TextDelta { text: t.to_string() };
    let whole = pieces("the whole answer", 3);
    assert_eq!(
        seen,
        vec![
            delta(&pieces("half an answer", 3)[0]),
            EventKind::TextEnd,
            EventKind::System { text: RETRYING.to_string() },
            seen[3].clone(),
            delta(&whole[0]),
            delta(&whole[1]),
            delta(&whole[2]),
            EventKind::TextEnd,
        ]
    );
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body, reqs[1].body);
    assert_eq!(messages(&id, &t).iter().map(Message::plain_text).collect::<Vec<_>>(), ["talk", "the whole answer"]);
}

#[tokio::test(start_paused = true)]
async fn a_partial_answer_cut_for_good_is_kept_marked_and_retry_replaces_it() {
    let gw = ScriptedGateway::start().await;
    for _ in 0..3 {
        gw.push(cut("so far so good"));
    }
    let t = TestHome::new(&gw.url(), 10);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "tell me", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Failed);
    assert_eq!(gw.requests().len(), 3, "a send and two re-runs");
    let k = kinds(&ev);
    let error = k.iter().find_map(|e| match e {
        EventKind::Error { message, .. } => Some(message.clone()),
        _ => None,
    });
    let error = error.expect("an error event");
    let hist = messages(&id, &t);
    assert_eq!(hist.len(), 2);
    assert_eq!(
        hist[1].content,
        Content::Blocks(vec![
            ContentBlock::text(pieces("so far so good", 3)[0].clone()),
            ContentBlock::text(format!("[cut off: {error}]")),
            ContentBlock::text("(no reply this turn · generation failed)"),
        ])
    );
    assert_eq!(invariants::check_history(&hist), Ok(()));
    assert_eq!(t.reply_json(&id)["items"].as_array().unwrap().len(), 1, "the kept answer and its marker are one item");
    let mut s = t.open(&id);
    assert!(s.notes().restored.is_empty(), "{:?}", s.notes().restored);

    gw.push(Reply::sse(anthropic_text("now in full")));
    let (em, _ev) = collector(&id);
    assert_eq!(turn::retry_turn(&mut s, &em, &CancellationToken::new()).await.unwrap(), Some(TurnOutcome::Completed));
    let reqs = gw.requests();
    assert_eq!(reqs[3].body, reqs[0].body, "the kept partial answer is never sent");
    assert_eq!(messages(&id, &t).iter().map(Message::plain_text).collect::<Vec<_>>(), ["tell me", "now in full"]);
}
