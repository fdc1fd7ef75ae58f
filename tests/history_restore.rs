//! Restoring an interrupted turn from the files a crash left behind (docs/design.md §6.3, §6.4).

use cicy::conversation::invariants;
use cicy::conversation::message::{Content, ContentBlock, Message, Role};
use cicy_test_support::fixture::TestHome;
use serde_json::json;

#[test]
fn an_interrupted_turn_is_merged_from_reply_json_healed_and_marked() {
    let t = TestHome::new("http://127.0.0.1:9", 0);
    let id = t.create("tester", None);
    let conv = t.open(&id).conversation().current.conversation_id.clone();
    let dir = t.workspace(&id).join(".cicy/history/chat").join(&conv);
    // current.json was written before round 1; the process died after the tools of round 0 ran
    // (reply.json has their results) but before round 1's write.
    let current = json!({
        "conversation_id": conv, "agent_id": id, "model": "test-model", "updated_at": "2026-01-01T00:00:00Z",
        "status": "running", "system": "", "tools": ["shell"], "max_history_id": 1, "prompts": 1,
        "messages": [{"id": 1, "role": "user", "content": "list files"}]
    });
    let reply = json!({
        "turn_id": "t", "conversation_id": conv, "history_id": 1, "status": "working",
        "started_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:01Z",
        "items": [
            {"id": 2, "role": "assistant", "content": [
                {"type": "tool_use", "id": "a", "name": "shell", "input": {"command": "ls"}},
                {"type": "tool_use", "id": "b", "name": "shell", "input": {"command": "pwd"}}]},
            {"id": 3, "role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "x.txt"}]}
        ],
        "model": "test-model", "input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0, "prefix_sha256": "", "last_stop_reason": "tool_use"
    });
    std::fs::write(dir.join("current.json"), serde_json::to_vec(&current).unwrap()).unwrap();
    std::fs::write(dir.join("reply.json"), serde_json::to_vec(&reply).unwrap()).unwrap();

    let s = t.open(&id);
    let m = &s.conversation().current.messages;
    assert_eq!(m.len(), 4, "{m:?}");
    assert_eq!(invariants::check(m), Ok(()));
    assert_eq!(
        m[2].content,
        Content::Blocks(vec![
            ContentBlock::ToolResult { tool_use_id: "a".into(), content: "x.txt".into(), is_error: false },
            ContentBlock::ToolResult { tool_use_id: "b".into(), content: invariants::SYNTHETIC_RESULT.into(), is_error: true },
        ])
    );
    assert_eq!(
        m[3],
        Message {
            id: Some(4),
            role: Role::Assistant,
            content: Content::Blocks(vec![ContentBlock::text("(no reply this turn · cancelled)")])
        }
    );
    assert_eq!(s.notes().restored.len(), 3, "{:?}", s.notes().restored);
    // The healed state is on disk: a second open finds nothing to repair.
    assert_eq!(t.current_json(&id)["status"], "idle");
    assert_eq!(t.reply_json(&id)["status"], "cancelled");
    let again = t.open(&id);
    assert_eq!(again.conversation().current.messages, s.conversation().current.messages);
    assert!(again.notes().restored.is_empty(), "{:?}", again.notes().restored);
}

#[test]
fn a_missing_symlink_starts_a_new_conversation_and_keeps_the_old_folder() {
    let t = TestHome::new("http://127.0.0.1:9", 0);
    let id = t.create("tester", None);
    let first = t.open(&id).conversation().current.conversation_id.clone();
    let hist = t.workspace(&id).join(".cicy/history");
    std::fs::remove_file(hist.join("current.json")).unwrap();
    let second = t.open(&id).conversation().current.conversation_id.clone();
    assert_ne!(first, second);
    assert!(hist.join("chat").join(&first).join("current.json").exists());
    assert_eq!(std::fs::read_link(hist.join("current.json")).unwrap(), std::path::Path::new("chat").join(&second).join("current.json"));
    assert_eq!(std::fs::read_link(hist.join("reply.json")).unwrap(), std::path::Path::new("chat").join(&second).join("reply.json"));
}

#[test]
fn an_unknown_status_string_is_read_as_an_interrupted_turn_not_a_corrupt_file() {
    let t = TestHome::new("http://127.0.0.1:9", 0);
    let id = t.create("tester", None);
    let conv = t.open(&id).conversation().current.conversation_id.clone();
    let dir = t.workspace(&id).join(".cicy/history/chat").join(&conv);
    let current = json!({
        "conversation_id": conv, "agent_id": id, "model": "test-model", "updated_at": "2026-01-01T00:00:00Z",
        "status": "paused", "system": "", "tools": [], "max_history_id": 1, "prompts": 1,
        "messages": [{"id": 1, "role": "user", "content": "hello"}]
    });
    std::fs::write(dir.join("current.json"), serde_json::to_vec(&current).unwrap()).unwrap();
    let s = t.open(&id);
    assert_eq!(s.conversation().current.status, cicy::conversation::history::CurrentStatus::Idle);
    assert_eq!(s.conversation().current.messages.len(), 2);
    assert_eq!(s.conversation().current.messages[0].plain_text(), "hello");
    assert_eq!(s.conversation().current.messages[1].plain_text(), "(no reply this turn · cancelled)");
    assert_eq!(t.current_json(&id)["status"], "idle");
    let names: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(names.iter().all(|n| !n.contains("corrupt") && !n.contains("aside")), "{names:?}");
}

#[test]
fn messages_healing_adds_get_display_ids() {
    let t = TestHome::new("http://127.0.0.1:9", 0);
    let id = t.create("tester", None);
    let conv = t.open(&id).conversation().current.conversation_id.clone();
    let dir = t.workspace(&id).join(".cicy/history/chat").join(&conv);
    // Killed while the only tool call ran: no result message exists, so healing adds one.
    let current = json!({
        "conversation_id": conv, "agent_id": id, "model": "test-model", "updated_at": "2026-01-01T00:00:00Z",
        "status": "running", "system": "", "tools": ["shell"], "max_history_id": 2, "prompts": 1,
        "messages": [{"id": 1, "role": "user", "content": "sleep"},
                     {"id": 2, "role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "shell", "input": {"command": "sleep 9"}}]}]
    });
    std::fs::write(dir.join("current.json"), serde_json::to_vec(&current).unwrap()).unwrap();
    let s = t.open(&id);
    let ids: Vec<Option<u64>> = s.conversation().current.messages.iter().map(|m| m.id).collect();
    assert_eq!(ids, [Some(1), Some(2), Some(3), Some(4)], "{:?}", s.conversation().current.messages);
    assert_eq!(
        s.conversation().current.messages[2].content,
        Content::Blocks(vec![ContentBlock::ToolResult {
            tool_use_id: "a".into(),
            content: invariants::SYNTHETIC_RESULT.into(),
            is_error: true
        }])
    );
    assert_eq!(s.conversation().current.max_history_id, 4);
}
