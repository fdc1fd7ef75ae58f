//! `/compact` and automatic compaction against the scripted gateway (docs/design.md §6.4, §7): the
//! aux request, the archive, where the summary goes, what the next request carries, chunked
//! summaries of a history too big to send, the hard cap, and the issue's concrete inputs.

use cicy::compact::{self, cut, summary, CompactError, Settings};
use cicy::config::CompactionConfig;
use cicy::conversation::invariants::{self, SYNTHETIC_RESULT};
use cicy::conversation::message::{Content, ContentBlock, Message, Role, SUMMARY_PREFIX};
use cicy::event::{EventKind, TurnOutcome};
use cicy::gateway::{anthropic, GatewayError};
use cicy::turn;
use cicy_test_support::fixture::{collector, kinds, TestHome};
use cicy_test_support::gateway::*;
use cicy_test_support::history::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const SUMMARY: &str = "1. User goals and requests: deploy the site; \"Never push to main.\"\n8. Next step: none";

fn messages(id: &str, t: &TestHome) -> Vec<Message> {
    serde_json::from_value(t.current_json(id)["messages"].clone()).expect("messages parse")
}

fn history_file(t: &TestHome, id: &str, name: &str) -> Vec<u8> {
    std::fs::read(t.workspace(id).join(".cicy/history").join(name)).expect("history file")
}

/// Names of the files in the active conversation's folder, sorted.
fn conversation_files(t: &TestHome, id: &str) -> Vec<String> {
    let link = t.workspace(id).join(".cicy/history/current.json");
    let dir = link.parent().unwrap().join(std::fs::read_link(&link).unwrap()).parent().unwrap().to_path_buf();
    let mut names: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

fn text_blocks(m: &Message) -> Vec<String> {
    match &m.content {
        Content::Text(t) => vec![t.clone()],
        Content::Blocks(b) => b
            .iter()
            .map(|x| match x {
                ContentBlock::Text { text } => text.clone(),
                other => format!("{other:?}"),
            })
            .collect(),
    }
}

fn role_block() -> String {
    format!("<role>\n{}\n</role>", cicy_test_support::fixture::TEST_AGENTS_MD.trim())
}

#[tokio::test]
async fn compact_archives_summarizes_and_the_window_starts_at_the_summary() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text(SUMMARY)));
    gw.push(Reply::sse(anthropic_text("Carrying on.")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut msgs = tool_turn(0, "Deploy the site. Never push to main.", "deployed\nok");
    msgs.extend(tool_turn(1, "q1", "out 1"));
    msgs.push(Message::user_text("and now?"));
    msgs.push(Message::assistant(vec![ContentBlock::text(turn::Outcome::Cancelled.marker())]));
    let seeded = seed(&t, &id, msgs);
    let mut s = t.open(&id);
    let (current_before, reply_before) = (history_file(&t, &id, "current.json"), history_file(&t, &id, "reply.json"));
    let (em, ev) = collector(&id);

    let done = compact::compact_session(&mut s, 0, &em, &CancellationToken::new()).await.unwrap();
    assert_eq!((done.before, done.after, done.requests), (10, 1, 1));
    assert_eq!((done.usage.input_tokens, done.usage.output_tokens), (25, 15));
    assert!(kinds(&ev).contains(&EventKind::Compacted { before: 10, after: 1 }));

    let reqs = gw.requests();
    assert_eq!(reqs.len(), 1);
    let aux = &reqs[0];
    assert_eq!(aux.header("x-cicy-aux"), Some("compact"));
    assert_eq!(aux.header("x-cicy-session-id"), Some(s.conversation().current.conversation_id.as_str()));
    let transcript = "User: Deploy the site. Never push to main.\nAssistant: Looking 0.\nAssistant called shell: {\"command\":\"echo 0\"}\nResult of shell: deployed ⏎ ok\nAssistant: Answer 0.\nUser: q1\nAssistant: Looking 1.\nAssistant called shell: {\"command\":\"echo 1\"}\nResult of shell: out 1\nAssistant: Answer 1.\nUser: and now?\n";
    let b = body(aux);
    assert_eq!(b["max_tokens"], 4096);
    assert_eq!(b["model"], "test-model");
    assert!(b.get("tools").is_none());
    assert_eq!(b["system"][0]["text"], summary::SYSTEM_PROMPT);
    assert_eq!(b["messages"].as_array().unwrap().len(), 1);
    assert_eq!(b["messages"][0]["content"][0]["text"], format!("{}\n\n<transcript>\n{transcript}</transcript>", summary::WHOLE_INTRO));
    let expected = anthropic::encode(&summary::request_prompt(summary::WHOLE_INTRO, "transcript", transcript), "test-model", 4096);
    assert_eq!(aux.body_str(), String::from_utf8(expected.body).unwrap(), "the exact aux request bytes");

    // Archived first, byte for byte; nothing deleted; the summary appended with the next id.
    let files = conversation_files(&t, &id);
    assert_eq!(files.len(), 4, "{files:?}");
    let archived: Vec<&String> = files.iter().filter(|n| n.starts_with("current.") && n.as_str() != "current.json").collect();
    let stamp = archived[0].trim_start_matches("current.").trim_end_matches(".json");
    let dir = t.workspace(&id).join(".cicy/history/chat").join(&s.conversation().current.conversation_id);
    assert_eq!(std::fs::read(dir.join(archived[0])).unwrap(), current_before);
    assert_eq!(std::fs::read(dir.join(format!("reply.{stamp}.json"))).unwrap(), reply_before);
    assert_eq!(history_file(&t, &id, "reply.json"), reply_before, "compaction leaves reply.json alone");
    let after = messages(&id, &t);
    assert_eq!(after.len(), 11);
    assert_eq!(&after[..10], &seeded[..]);
    assert_eq!(after[10].id, Some(11));
    assert_eq!(after[10].content, Content::Text(format!("{SUMMARY_PREFIX}{SUMMARY}")));
    assert_eq!(invariants::check_history(&after), Ok(()));

    // The next request starts at the summary, which carries the <role> block.
    let (em, _ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "Continue.", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let main = &gw.requests()[1];
    assert_eq!(main.header("x-cicy-aux"), None);
    let wire = wire_messages(main);
    assert_eq!(wire.len(), 1);
    assert_eq!(text_blocks(&wire[0]), vec![role_block(), format!("{SUMMARY_PREFIX}{SUMMARY}"), "Continue.".to_string()]);
    assert_valid_request(main);
    for name in ["current.json", "reply.json"] {
        let text = String::from_utf8(history_file(&t, &id, name)).unwrap();
        assert!(!text.contains("conversation compactor") && !text.contains("<transcript>"), "{name} holds aux traffic");
    }
    let reply = t.reply_json(&id);
    assert_eq!(reply["items"].as_array().unwrap().len(), 1, "the turn's items are its answer only");
}

#[tokio::test]
async fn a_failed_or_empty_summary_changes_nothing() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(500, &[("x-should-retry", "false")], "boom"));
    gw.push(Reply::sse(anthropic_text("   ")));
    gw.push(Reply::sse(anthropic_empty()));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    seed(&t, &id, tool_turns(2));
    let mut s = t.open(&id);
    let before = (history_file(&t, &id, "current.json"), history_file(&t, &id, "reply.json"), conversation_files(&t, &id));
    let in_memory = s.conversation().current.clone();
    let (em, ev) = collector(&id);
    let e = compact::compact_session(&mut s, 0, &em, &CancellationToken::new()).await.unwrap_err();
    assert!(matches!(&e, CompactError::Gateway(GatewayError::Status { status: 500, .. })), "{e:?}");
    assert_eq!(e.to_string(), "the summary call failed: gateway answered HTTP 500: boom");
    for _ in 0..2 {
        let e = compact::compact_session(&mut s, 0, &em, &CancellationToken::new()).await.unwrap_err();
        assert!(matches!(e, CompactError::Empty), "{e:?}");
    }
    assert_eq!(gw.requests().len(), 3);
    assert_eq!(s.conversation().current, in_memory);
    let after = (history_file(&t, &id, "current.json"), history_file(&t, &id, "reply.json"), conversation_files(&t, &id));
    assert_eq!(after, before, "no file changed and no archive was written");
    assert!(!kinds(&ev).iter().any(|k| matches!(k, EventKind::Compacted { .. })));
}

#[tokio::test]
async fn a_dangling_tool_use_is_never_sent_without_its_result_after_a_keep_2_compaction() {
    for heal_on_restore in [false, true] {
        let gw = ScriptedGateway::start().await;
        gw.push(Reply::sse(anthropic_text("They asked to run it.")));
        gw.push(Reply::sse(anthropic_text("Done.")));
        let t = TestHome::new(&gw.url(), 0);
        let id = t.create("tester", None);
        let dangling = vec![
            Message::user_text("run it"),
            Message::assistant(vec![
                ContentBlock::text("Running."),
                ContentBlock::ToolUse { id: "A".into(), name: "shell".into(), input: json!({"command": "make"}) },
            ]),
            Message::user_text("summarise"),
        ];
        let seeded = seed(&t, &id, dangling);
        let mut s = t.open(&id);
        if !heal_on_restore {
            s.conversation_mut().current.messages = seeded.clone();
        }
        let (em, _ev) = collector(&id);
        let done = compact::compact_session(&mut s, 2, &em, &CancellationToken::new()).await.unwrap();
        assert_eq!((done.before, done.after), (3, 3));
        let stored = messages(&id, &t);
        assert_eq!(invariants::check_history(&stored), Ok(()));
        assert!(stored[1].is_summary());
        turn::run_turn(&mut s, "go on", &em, &CancellationToken::new()).await.unwrap();

        let reqs = gw.requests();
        assert_eq!(reqs.len(), 2);
        assert!(!reqs[0].body_str().contains("\"tool_use\""), "the aux request carries no tool blocks");
        assert_eq!(
            body(&reqs[0])["messages"][0]["content"][0]["text"],
            format!("{}\n\n<transcript>\nUser: run it\n</transcript>", summary::WHOLE_INTRO)
        );
        assert_valid_request(&reqs[1]);
        let wire = wire_messages(&reqs[1]);
        assert_eq!(wire.len(), 3);
        assert!(wire[1].tool_uses().any(|(id, _, _)| id == "A"));
        match &wire[2].content {
            Content::Blocks(b) => {
                assert_eq!(b[0], ContentBlock::ToolResult { tool_use_id: "A".into(), content: SYNTHETIC_RESULT.into(), is_error: true });
                assert_eq!(&b[1..], &[ContentBlock::text("summarise"), ContentBlock::text("go on")]);
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn when_the_window_would_start_with_an_assistant_the_request_starts_with_the_role_block() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text(SUMMARY)));
    gw.push(Reply::sse(anthropic_text("next answer")));
    gw.push(Reply::sse(anthropic_text("hello again")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    seed(&t, &id, tool_turns(3));
    let mut s = t.open(&id);
    let (em, _ev) = collector(&id);
    // keep 3 lands on the assistant that called a tool: the tail is [tool_use, result, answer].
    let done = compact::compact_session(&mut s, 3, &em, &CancellationToken::new()).await.unwrap();
    assert_eq!((done.before, done.after), (12, 4));
    turn::run_turn(&mut s, "next", &em, &CancellationToken::new()).await.unwrap();
    let main = &gw.requests()[1];
    assert_valid_request(main);
    let wire = wire_messages(main);
    assert_eq!(wire.len(), 5);
    assert_eq!(text_blocks(&wire[0]), vec![role_block(), format!("{SUMMARY_PREFIX}{SUMMARY}")]);
    assert_eq!(wire[1].role, Role::Assistant);
    assert!(wire[1].tool_uses().any(|(id, _, _)| id == "toolu_2"));

    // A hand-edited history that starts with an assistant message: a placeholder user message
    // carries the <role> block on the wire, and is never stored.
    let id2 = t.create("tester", None);
    seed(&t, &id2, vec![Message::assistant(vec![ContentBlock::text("Hello, I was here first.")]), Message::user_text("hi")]);
    let mut s2 = t.open(&id2);
    let (em, _ev) = collector(&id2);
    turn::run_turn(&mut s2, "anyone?", &em, &CancellationToken::new()).await.unwrap();
    let main = &gw.requests()[2];
    assert_valid_request(main);
    assert_eq!(text_blocks(&wire_messages(main)[0]), vec![role_block(), cicy::prompt::WINDOW_START_PLACEHOLDER.to_string()]);
    assert!(!messages(&id2, &t).iter().any(|m| m.plain_text() == cicy::prompt::WINDOW_START_PLACEHOLDER));
}

#[tokio::test]
async fn an_answer_without_content_blocks_stores_and_sends_nothing_empty() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_empty()));
    gw.push(Reply::sse(anthropic_text("Now I answer.")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "first", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert!(kinds(&ev).contains(&EventKind::NoAnswerText));
    let stored = messages(&id, &t);
    assert_eq!(stored, vec![Message { id: Some(1), ..Message::user_text("first") }]);
    let reply = t.reply_json(&id);
    assert_eq!(reply["status"], "completed");
    assert_eq!(reply["items"], json!([]));

    turn::run_turn(&mut s, "second", &em, &CancellationToken::new()).await.unwrap();
    let main = &gw.requests()[1];
    assert_valid_request(main);
    let wire = wire_messages(main);
    assert_eq!(wire.len(), 1);
    assert_eq!(text_blocks(&wire[0]), vec![role_block(), "first".to_string(), "second".to_string()]);
    assert!(!main.body_str().contains("\"text\":\"\""));
    let stored = messages(&id, &t);
    assert_eq!(stored.len(), 3);
    assert!(stored.iter().all(|m| !m.content.is_empty()));
}

#[tokio::test]
async fn over_300_messages_the_turn_first_summarizes_all_but_the_last_160() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text(SUMMARY)));
    gw.push(Reply::sse(anthropic_text("fine")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    seed(&t, &id, tool_turns(76)); // 304 messages
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "next", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let k = kinds(&ev);
    assert!(k.contains(&EventKind::Compacted { before: 305, after: 161 }), "{k:?}");
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].header("x-cicy-aux"), Some("compact"));
    let transcript = body(&reqs[0])["messages"][0]["content"][0]["text"].as_str().unwrap().to_string();
    // 305 messages, cut at 145 (the assistant that opens turn 36): the summary covers 0..145.
    assert!(transcript.contains("\nUser: q0\n") && transcript.ends_with("\nUser: q36\n</transcript>"), "{transcript}");
    let wire = wire_messages(&reqs[1]);
    assert_eq!(wire.len(), 161);
    assert_valid_request(&reqs[1]);
    assert_eq!(text_blocks(&wire[0]), vec![role_block(), format!("{SUMMARY_PREFIX}{SUMMARY}")]);
    let stored = messages(&id, &t);
    assert_eq!(stored.len(), 307, "all 305 originals, the summary and the answer");
    assert!(stored[145].is_summary());
    assert_eq!(stored[145].id, Some(306));
    assert_eq!(invariants::check_history(&stored), Ok(()));
    let reply = t.reply_json(&id);
    assert_eq!(reply["input_tokens"], 50, "the aux call's usage is counted with the turn's");
    assert_eq!(reply["items"].as_array().unwrap().len(), 1);
}

fn write_small_context_role(t: &TestHome, context_window: u64) {
    let d = t.home.roles_dir().join("small");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("system.md"), "You are a test agent.\n").unwrap();
    std::fs::write(d.join("role.md"), "You are {{TITLE}}.\n").unwrap();
    std::fs::write(
        d.join("meta.yaml"),
        format!("name: Small\ntools: [core]\nmax_tool_rounds: 10\nmax_tokens: 512\ncontext_window: {context_window}\n"),
    )
    .unwrap();
}

#[tokio::test]
async fn a_history_too_big_to_send_is_summarized_in_chunks_then_the_summaries_are_merged() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    write_small_context_role(&t, 20_000);
    let id = t.create("small", None);
    let filler = "lorem ipsum dolor sit amet ".repeat(150);
    let msgs: Vec<Message> = (0..30).flat_map(|i| tool_turn(i, &format!("q{i} {filler}"), &"r".repeat(2000))).collect();
    let mut all = seed(&t, &id, msgs);
    all.push(Message::user_text("next"));
    let settings = Settings::new(&CompactionConfig::default(), Some(20_000));
    assert_eq!((settings.trigger_tokens(), settings.chunk_tokens(), settings.tail_tokens()), (17_000, 10_000, 10_000));
    let tools = t.open(&id).materials().unwrap().tools.specs();
    let before_tokens = compact::window_tokens("You are a test agent.", &tools, &all);
    assert!(before_tokens > 20_000, "the window cannot be sent in one request: ~{before_tokens} tokens");
    let cut_at = cut::choose(&all, 0, 160, settings.tail_tokens()).unwrap();
    let lines = summary::transcript(&all[..cut_at]);
    let parts = summary::chunks(&lines, settings.chunk_tokens());
    let k = parts.len();
    assert!(k >= 3, "{k} parts");
    for i in 0..k {
        gw.push(Reply::sse(anthropic_text(&format!("partial {i}"))));
    }
    gw.push(Reply::sse(anthropic_text(SUMMARY)));
    gw.push(Reply::sse(anthropic_text("fine")));

    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "next", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let reqs = gw.requests();
    let (aux, main) = split_aux(&reqs);
    assert_eq!((aux.len(), main.len()), (k + 1, 1));
    let mut sent_transcript = String::new();
    for (i, r) in aux[..k].iter().enumerate() {
        let text = body(r)["messages"][0]["content"][0]["text"].as_str().unwrap().to_string();
        let inner = text
            .strip_prefix(&format!("{}\n\n<transcript>\n", summary::part_intro(i + 1, k)))
            .and_then(|x| x.strip_suffix("</transcript>"))
            .expect("a part request");
        assert!(cut::estimate_tokens(inner) <= settings.chunk_tokens());
        assert!(r.body.len() < 4 * 20_000, "each part request fits the context window");
        sent_transcript.push_str(inner);
    }
    assert_eq!(sent_transcript, lines.iter().map(|l| format!("{l}\n")).collect::<String>(), "every line is summarized exactly once");
    let merge = body(&aux[k])["messages"][0]["content"][0]["text"].as_str().unwrap().to_string();
    let entries: Vec<String> = (0..k).map(|i| format!("[Summary of part {} of {k}]\npartial {i}\n", i + 1)).collect();
    assert_eq!(merge, format!("{}\n\n<summaries>\n{}</summaries>", summary::MERGE_INTRO, entries.concat()));
    assert!(kinds(&ev).contains(&EventKind::System { text: format!("summarizing part {k} of {k}") }));
    assert_valid_request(&main[0]);
    let wire = wire_messages(&main[0]);
    assert_eq!(wire.len(), 1 + all.len() - cut_at);
    assert_eq!(text_blocks(&wire[0])[1], format!("{SUMMARY_PREFIX}{SUMMARY}"));
    let after_tokens = compact::window_tokens("You are a test agent.", &tools, &messages(&id, &t)[cut_at..]);
    assert!(after_tokens < settings.trigger_tokens(), "~{after_tokens} tokens after");
}
