//! `/compact` and `/clear` as library calls (`cicy::command`, docs/design.md §7): what each returns
//! and the exact events the CLI and `serve` report them with.

use cicy::command::{self, CommandEnd};
use cicy::event::{ErrorKind, EventKind};
use cicy_test_support::fixture::{collector, kinds, TestHome};
use cicy_test_support::gateway::*;
use cicy_test_support::history::*;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn compact_returns_the_window_sizes_and_reports_usage_and_the_archive() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("1. User goals and requests: q0, q1")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    seed(&t, &id, tool_turns(2));
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let end = command::compact(&mut s, 0, &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(end, CommandEnd::Done { before: 8, after: 1 });
    let k = kinds(&ev);
    let compacted = k.iter().position(|e| *e == EventKind::Compacted { before: 8, after: 1 }).expect("compacted");
    let EventKind::System { text } = &k[compacted + 1] else { panic!("{k:?}") };
    let head =
        "/compact done: 1 summary call(s), input 25, output 15, cache write 10, cache read 100; the state before is archived as current.";
    assert!(text.starts_with(head) && text.ends_with(".json"), "{text}");
    assert_eq!(k.len(), compacted + 2, "{k:?}");
}

#[tokio::test]
async fn compact_with_nothing_to_do_or_cancelled_fails_saying_nothing_changed() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(command::compact(&mut s, 0, &em, &CancellationToken::new()).await.unwrap(), CommandEnd::Failed);
    seed(&t, &id, tool_turns(1));
    let mut s = t.open(&id);
    assert_eq!(command::compact(&mut s, 4, &em, &CancellationToken::new()).await.unwrap(), CommandEnd::Failed);
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    assert_eq!(command::compact(&mut s, 0, &em, &cancelled).await.unwrap(), CommandEnd::Cancelled);
    let error = |message: &str| EventKind::Error { kind: ErrorKind::Compact, message: message.into() };
    assert_eq!(
        kinds(&ev),
        [
            error("/compact: nothing to compact: the conversation is empty; nothing was changed"),
            error("/compact: nothing to compact: --keep 4 keeps all 4 message(s) of the window (the cut moves to a turn boundary); nothing was changed"),
            error("/compact was cancelled; nothing was changed"),
        ]
    );
    assert_eq!(gw.requests().len(), 0);
    assert_eq!(s.conversation().current.messages.len(), 4);
}

#[tokio::test]
async fn clear_returns_the_old_conversation_and_its_size() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    seed(&t, &id, tool_turns(2));
    let mut s = t.open(&id);
    let old_id = s.conversation().current.conversation_id.clone();
    let (em, ev) = collector(&id);
    let (end, old) = command::clear(&mut s, &em).unwrap();
    assert_eq!((end, old.as_str()), (CommandEnd::Done { before: 8, after: 0 }, old_id.as_str()));
    assert_ne!(s.conversation().current.conversation_id, old_id);
    assert_eq!(s.conversation().current.messages.len(), 0);
    assert_eq!(
        kinds(&ev),
        [EventKind::System {
            text: format!(
                "/clear: new conversation {}; the previous one ({old_id}) is kept on disk",
                s.conversation().current.conversation_id
            )
        }]
    );
}
