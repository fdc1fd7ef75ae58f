//! Histories for the compaction tests: seeding an agent's files with prepared messages, and
//! reading a recorded request back as canonical messages. Test fixtures only.

use cicy::conversation::history::{CurrentFile, HistoryStore};
use cicy::conversation::invariants;
use cicy::conversation::message::{ContentBlock, Message, Role};
use serde_json::{json, Value};

use crate::fixture::TestHome;
use crate::gateway::RecordedRequest;

/// One finished tool turn: user text, assistant text + `tool_use toolu_<i>`, its result, the
/// assistant's answer.
pub fn tool_turn(i: usize, user_text: &str, result: &str) -> Vec<Message> {
    let id = format!("toolu_{i}");
    vec![
        Message::user_text(user_text),
        Message::assistant(vec![
            ContentBlock::text(format!("Looking {i}.")),
            ContentBlock::ToolUse { id: id.clone(), name: "shell".into(), input: json!({"command": format!("echo {i}")}) },
        ]),
        Message::user_blocks(vec![ContentBlock::ToolResult { tool_use_id: id, content: result.into(), is_error: false }]),
        Message::assistant(vec![ContentBlock::text(format!("Answer {i}."))]),
    ]
}

/// `n` tool turns `q<i>` → `Answer <i>.` (4·n messages).
pub fn tool_turns(n: usize) -> Vec<Message> {
    (0..n).flat_map(|i| tool_turn(i, &format!("q{i}"), &format!("out {i}"))).collect()
}

/// Makes `msgs` (given display ids 1..) the active conversation of agent `id`, as written by
/// an earlier process, without healing them. Returns them with their ids.
pub fn seed(t: &TestHome, id: &str, msgs: Vec<Message>) -> Vec<Message> {
    let store = HistoryStore::new(&t.workspace(id));
    let mut cur = CurrentFile::new(id, "test-model");
    for m in msgs {
        cur.push(m);
    }
    store.start(&cur).expect("seed the history");
    cur.messages
}

/// Appends `yaml` (e.g. a `compaction:` section) to the home's config.yaml.
pub fn add_config(t: &TestHome, yaml: &str) {
    let p = t.home.config_path();
    let mut text = std::fs::read_to_string(&p).expect("config.yaml");
    text.push_str(yaml);
    std::fs::write(&p, text).expect("config.yaml");
}

pub fn body(r: &RecordedRequest) -> Value {
    serde_json::from_slice(&r.body).expect("request body is JSON")
}

/// The messages of an Anthropic-style request body as canonical messages (cache markers
/// removed).
pub fn wire_messages(r: &RecordedRequest) -> Vec<Message> {
    let b = body(r);
    b["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if let Some(blocks) = m["content"].as_array_mut() {
                for blk in blocks {
                    blk.as_object_mut().expect("block").remove("cache_control");
                }
            }
            serde_json::from_value(m).expect("a canonical message")
        })
        .collect()
}

/// Every invariant of §6.4 on a main request (the rules a real API enforces are checked on every
/// request by the gateway's referee, `referee.rs`): pairing, nothing empty, alternating roles, and a
/// first message from the user that carries the `<role>` block.
pub fn assert_valid_request(r: &RecordedRequest) {
    let msgs = wire_messages(r);
    assert_eq!(invariants::check(&msgs), Ok(()), "request violates an invariant: {}", r.body_str());
    assert_eq!(msgs[0].role, Role::User);
    match &msgs[0].content {
        cicy::conversation::message::Content::Blocks(b) => match &b[0] {
            ContentBlock::Text { text } => assert!(text.starts_with("<role>\n"), "{text}"),
            other => panic!("first block is not the <role> block: {other:?}"),
        },
        other => panic!("first message is not in block form: {other:?}"),
    }
}

/// The requests that were aux calls, and the main ones.
pub fn split_aux(reqs: &[RecordedRequest]) -> (Vec<RecordedRequest>, Vec<RecordedRequest>) {
    reqs.iter().cloned().partition(|r| r.header("x-cicy-aux").is_some())
}
