//! The conversation lifecycle around compaction (docs/design.md §6.4, §7): compactions in a row,
//! the hard cap when no summary can be had, `/clear`, and retry after a compaction.

use cicy::compact::{self, CompactError};
use cicy::conversation::history::HistoryStore;
use cicy::conversation::invariants;
use cicy::conversation::message::{ContentBlock, Message, SUMMARY_PREFIX};
use cicy::event::{EventKind, TurnOutcome};
use cicy::registry::Registry;
use cicy::turn;
use cicy_test_support::fixture::{collector, kinds, TestHome};
use cicy_test_support::gateway::*;
use cicy_test_support::history::*;
use tokio_util::sync::CancellationToken;

fn messages(id: &str, t: &TestHome) -> Vec<Message> {
    serde_json::from_value(t.current_json(id)["messages"].clone()).expect("messages parse")
}

fn aux_text(r: &RecordedRequest) -> String {
    body(r)["messages"][0]["content"][0]["text"].as_str().expect("aux text").to_string()
}

#[tokio::test]
async fn two_automatic_compactions_in_one_turn_keep_every_request_valid() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("S1")));
    for i in 0..4 {
        gw.push(Reply::sse(anthropic_tool_use(&format!("r{i}"), "shell", &format!(r#"{{"command":"echo {i}"}}"#))));
    }
    gw.push(Reply::sse(anthropic_text("S2")));
    gw.push(Reply::sse(anthropic_text("all done")));
    let t = TestHome::new(&gw.url(), 0);
    add_config(&t, "compaction:\n  max_messages: 12\n  keep_recent: 4\n");
    let id = t.create("tester", None);
    seed(&t, &id, tool_turns(3));
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "go", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);

    let reqs = gw.requests();
    let aux: Vec<usize> = reqs.iter().enumerate().filter(|(_, r)| r.header("x-cicy-aux").is_some()).map(|(i, _)| i).collect();
    assert_eq!(aux, vec![0, 5], "compacted before round 0 and before round 4");
    assert!(
        aux_text(&reqs[5]).contains("<transcript>\nSummary of the earlier conversation: S1\nAssistant: Looking 2.\n"),
        "{}",
        aux_text(&reqs[5])
    );
    for (i, r) in reqs.iter().enumerate().filter(|(i, _)| !aux.contains(i)) {
        assert_valid_request(r);
        assert!(wire_messages(r).len() <= 12, "request {i}");
    }
    let compacted: Vec<EventKind> = kinds(&ev).into_iter().filter(|k| matches!(k, EventKind::Compacted { .. })).collect();
    assert_eq!(compacted, vec![EventKind::Compacted { before: 13, after: 5 }, EventKind::Compacted { before: 13, after: 5 }]);
    let last = wire_messages(reqs.last().unwrap());
    assert_eq!(last.len(), 5);
    assert!(last[0].plain_text().contains(&format!("{SUMMARY_PREFIX}S2")));
    // The second cut passes the turn's own question: the summary carries it verbatim.
    assert!(last[0].plain_text().contains(&format!("S2\n\n{}\ngo\n{}", compact::CARRIED_PREFIX, compact::CARRIED_END)));
    let stored = messages(&id, &t);
    assert_eq!(invariants::check_history(&stored), Ok(()));
    assert_eq!(stored.iter().filter(|m| m.is_summary()).count(), 2);
    assert_eq!(stored.len(), 12 + 1 + 8 + 2 + 1, "seeded, go, four tool rounds, two summaries, the answer");
}

#[tokio::test]
async fn compact_twice_in_a_row_and_again_after_a_turn() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("S1")));
    gw.push(Reply::sse(anthropic_text("answer")));
    gw.push(Reply::sse(anthropic_text("S2")));
    gw.push(Reply::sse(anthropic_text("final")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    seed(&t, &id, tool_turns(2));
    let mut s = t.open(&id);
    let (em, _ev) = collector(&id);
    let cancel = CancellationToken::new();
    compact::compact_session(&mut s, 0, &em, &cancel).await.unwrap();
    let again = compact::compact_session(&mut s, 0, &em, &cancel).await.unwrap_err();
    assert!(matches!(again, CompactError::Nothing), "{again:?}");
    assert_eq!(gw.requests().len(), 1, "nothing new to summarize: no call");
    turn::run_turn(&mut s, "more", &em, &cancel).await.unwrap();
    let done = compact::compact_session(&mut s, 0, &em, &cancel).await.unwrap();
    assert_eq!((done.before, done.after), (3, 1));
    let reqs = gw.requests();
    assert_eq!(
        aux_text(&reqs[2]),
        format!(
            "{}\n\n<transcript>\nSummary of the earlier conversation: S1\nUser: more\nAssistant: answer\n</transcript>",
            cicy::compact::summary::WHOLE_INTRO
        )
    );
    turn::run_turn(&mut s, "last", &em, &cancel).await.unwrap();
    let reqs = gw.requests();
    for r in [&reqs[1], &reqs[3]] {
        assert_valid_request(r);
    }
    let wire = wire_messages(&reqs[3]);
    assert_eq!(wire.len(), 1);
    assert_eq!(
        wire[0].plain_text(),
        format!("<role>\n{}\n</role>\n{SUMMARY_PREFIX}S2\nlast", cicy_test_support::fixture::TEST_AGENTS_MD.trim())
    );
    let stored = messages(&id, &t);
    assert_eq!(invariants::check_history(&stored), Ok(()));
    let restored = t.open(&id);
    assert_eq!(restored.conversation().current.messages, stored, "restore keeps the summaries apart from the user messages after them");
}

#[tokio::test]
async fn over_the_hard_cap_without_a_summary_the_oldest_messages_are_set_aside() {
    for auto in [true, false] {
        let gw = ScriptedGateway::start().await;
        if auto {
            gw.push(Reply::status(500, &[("x-should-retry", "false")], "boom"));
        }
        gw.push(Reply::sse(anthropic_tool_use("r0", "shell", r#"{"command":"true"}"#)));
        gw.push(Reply::sse(anthropic_text("done")));
        let t = TestHome::new(&gw.url(), 0);
        add_config(&t, &format!("compaction:\n  auto: {auto}\n  max_messages: 20\n  keep_recent: 8\n  hard_cap: 24\n"));
        let id = t.create("tester", None);
        seed(&t, &id, tool_turns(7)); // 28 messages
        let mut s = t.open(&id);
        let (em, ev) = collector(&id);
        assert_eq!(turn::run_turn(&mut s, "go", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
        let reqs = gw.requests();
        let (aux, main) = split_aux(&reqs);
        assert_eq!(aux.len(), usize::from(auto), "a failed summary is not tried again in the same turn");
        assert_eq!(main.len(), 2);
        let why = if auto { "the summary call failed: gateway answered HTTP 500: boom" } else { "automatic compaction is off" };
        let notice = format!("{SUMMARY_PREFIX}(21 earlier messages could not be summarized ({why}). They are kept in the history files but are no longer sent.)");
        for r in &main {
            assert_valid_request(r);
        }
        let first = wire_messages(&main[0]);
        assert_eq!(first.len(), 9);
        match &first[0].content {
            cicy::conversation::message::Content::Blocks(b) => assert_eq!(b[1], ContentBlock::text(notice.clone())),
            other => panic!("{other:?}"),
        }
        let k = kinds(&ev);
        assert!(k.contains(&EventKind::Compacted { before: 29, after: 9 }), "{k:?}");
        let system: Vec<String> = k
            .iter()
            .filter_map(|e| match e {
                EventKind::System { text } => Some(text.clone()),
                _ => None,
            })
            .collect();
        assert!(
            system.iter().any(|t| t.starts_with("the window was over the hard cap (29 messages, ~")
                && t.ends_with("set 21 earlier messages aside without a summary")),
            "{system:?}"
        );
        assert_eq!(system.iter().any(|t| t == &format!("automatic compaction failed: {why}; nothing was changed")), auto);
        let stored = messages(&id, &t);
        assert_eq!(stored.len(), 28 + 1 + 1 + 2 + 1);
        assert_eq!(stored[21].plain_text(), notice);
        assert_eq!(invariants::check_history(&stored), Ok(()));
    }
}

#[tokio::test]
async fn clear_starts_an_empty_conversation_and_leaves_identity_memory_and_registry_alone() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("fresh")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    seed(&t, &id, tool_turns(2));
    let ws = t.workspace(&id);
    std::fs::create_dir_all(ws.join(".cicy/memory")).unwrap();
    // MEMORY.md is built from the memory files when the session reads its materials.
    std::fs::write(ws.join(".cicy/memory/fact_tea.md"), "---\ntype: fact\ntitle: tea\nsalience: 3\n---\n\nthe user likes tea\n").unwrap();
    let agents_md = std::fs::read(ws.join("AGENTS.md")).unwrap();
    let row = Registry::open(&t.home.db_path()).unwrap().get(&id).unwrap();
    let mut s = t.open(&id);
    let old = s.conversation().current.conversation_id.clone();
    let old_dir = HistoryStore::new(&ws).conversation_dir(&old);
    let old_current = std::fs::read(old_dir.join("current.json")).unwrap();

    assert_eq!(s.clear().unwrap(), old);
    let new = s.conversation().current.conversation_id.clone();
    assert_ne!(new, old);
    assert_eq!(uuid::Uuid::parse_str(&new).unwrap().get_version_num(), 4);
    let hist = ws.join(".cicy/history");
    assert_eq!(std::fs::read_link(hist.join("current.json")).unwrap(), std::path::Path::new("chat").join(&new).join("current.json"));
    assert_eq!(std::fs::read_link(hist.join("reply.json")).unwrap(), std::path::Path::new("chat").join(&new).join("reply.json"));
    let current = t.current_json(&id);
    assert_eq!((current["conversation_id"].as_str(), current["messages"].as_array().map(Vec::len)), (Some(new.as_str()), Some(0)));
    let reply = t.reply_json(&id);
    assert_eq!((reply["conversation_id"].as_str(), reply["status"].as_str()), (Some(new.as_str()), Some("completed")));
    assert_eq!(std::fs::read(old_dir.join("current.json")).unwrap(), old_current, "the old conversation stays as it was");
    assert_eq!(std::fs::read(ws.join("AGENTS.md")).unwrap(), agents_md);
    assert_eq!(std::fs::read_to_string(ws.join(".cicy/memory/MEMORY.md")).unwrap(), "- [fact★3] the user likes tea\n");
    assert_eq!(Registry::open(&t.home.db_path()).unwrap().get(&id).unwrap(), row);

    let (em, _ev) = collector(&id);
    turn::run_turn(&mut s, "hello", &em, &CancellationToken::new()).await.unwrap();
    let r = &gw.requests()[0];
    assert_eq!(r.header("x-cicy-session-id"), Some(new.as_str()));
    let wire = wire_messages(r);
    assert_eq!(wire.len(), 1);
    assert!(wire[0].plain_text().contains("hello") && !wire[0].plain_text().contains("q1"));
    assert!(r.body_str().contains("<memories>"), "memory is still injected after /clear");
    assert_eq!(t.open(&id).conversation().current.conversation_id, new);
}

#[tokio::test]
async fn a_failed_turn_after_a_compaction_is_retried_without_losing_the_summary() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("S1")));
    gw.push(Reply::status(400, &[], "bad"));
    gw.push(Reply::sse(anthropic_text("second time")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    seed(&t, &id, tool_turns(1));
    let mut s = t.open(&id);
    let (em, _ev) = collector(&id);
    let cancel = CancellationToken::new();
    compact::compact_session(&mut s, 0, &em, &cancel).await.unwrap();
    assert_eq!(turn::run_turn(&mut s, "question", &em, &cancel).await.unwrap(), TurnOutcome::Blocked);
    assert_eq!(turn::retry_turn(&mut s, &em, &cancel).await.unwrap(), Some(TurnOutcome::Completed));
    let stored = messages(&id, &t);
    assert_eq!(stored.len(), 4 + 1 + 2);
    assert_eq!(stored[4].plain_text(), format!("{SUMMARY_PREFIX}S1"));
    assert_eq!(stored[5].plain_text(), "question");
    assert_eq!(stored[6].plain_text(), "second time");
    let reqs = gw.requests();
    assert_eq!(reqs[1].body, reqs[2].body, "the retry sends the same request again");
}
