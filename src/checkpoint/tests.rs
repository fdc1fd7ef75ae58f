use super::*;
use crate::conversation::message::{ContentBlock, Message};
use serde_json::json;

/// A workspace with a 3-message conversation, a plan, AGENTS.md and two memory files plus a
/// lock (which is not state).
fn workspace() -> (tempfile::TempDir, CurrentFile) {
    let ws = tempfile::tempdir().unwrap();
    let store = HistoryStore::new(ws.path());
    let mut cur = CurrentFile::new("w-1", "m");
    cur.push(Message::user_text("hi"));
    cur.push(Message::assistant(vec![ContentBlock::text("héllo"), ContentBlock::ToolUse { id: "t1".into(), name: "shell".into(), input: json!({"command": "ls"}) }]));
    cur.push(Message::user_blocks(vec![ContentBlock::ToolResult { tool_use_id: "t1".into(), content: "a\nb".into(), is_error: false }]));
    cur.prompts = 1;
    store.start(&cur).unwrap();
    fs::write(ws.path().join("AGENTS.md"), "# Role\nAda\n").unwrap();
    fs::write(plan_path(ws.path()), "{\"todos\":[]}\n").unwrap();
    let mem = memory_dir(ws.path());
    fs::create_dir_all(mem.join("_archive")).unwrap();
    fs::write(mem.join("fact_a.md"), "A\n").unwrap();
    fs::write(mem.join("_archive/fact_old.md"), "old\n").unwrap();
    fs::write(mem.join(".lock"), "").unwrap();
    (ws, cur)
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap()
}

#[test]
fn a_save_holds_the_files_and_the_meta() {
    let (ws, cur) = workspace();
    let meta = save(ws.path(), &SaveOptions { label: Some("v1".into()), pending: 1, steering: 2 }).unwrap();
    let cp = dir(ws.path()).join(&meta.checkpoint_id);
    assert_eq!(meta.label.as_deref(), Some("v1"));
    assert_eq!((meta.schema_version, meta.message_count, meta.pending, meta.steering), (1, 3, 1, 2));
    assert_eq!(meta.conv_id.as_deref(), Some(cur.conversation_id.as_str()));
    assert!(parse_id(&meta.checkpoint_id).is_some_and(|u| u.abs_diff(fsutil::unix_now()) < 5));
    assert_eq!(meta.checkpoint_id.split_once('-').unwrap().1.len(), 6);
    let conv = HistoryStore::new(ws.path()).conversation_dir(&cur.conversation_id);
    assert_eq!(fs::read(cp.join("current.json")).unwrap(), fs::read(conv.join("current.json")).unwrap());
    assert_eq!(fs::read(cp.join("reply.json")).unwrap(), fs::read(conv.join("reply.json")).unwrap());
    assert_eq!(read(&cp.join("AGENTS.md")), "# Role\nAda\n");
    assert_eq!(read(&cp.join("plan.json")), "{\"todos\":[]}\n");
    assert_eq!(read(&cp.join("memory/fact_a.md")), "A\n");
    assert_eq!(read(&cp.join("memory/_archive/fact_old.md")), "old\n");
    assert!(!cp.join("memory/.lock").exists());
    let on_disk: serde_json::Value = serde_json::from_slice(&fs::read(cp.join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        on_disk,
        json!({"checkpoint_id": meta.checkpoint_id, "label": "v1", "saved_at": meta.saved_at, "schema_version": 1,
               "conv_id": cur.conversation_id, "message_count": 3, "pending": 1, "steering": 2})
    );
    let names: Vec<String> = fs::read_dir(dir(ws.path())).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, [meta.checkpoint_id]);
}

#[test]
fn load_restores_byte_identical_messages_as_a_new_conversation_after_a_before_load_save() {
    let (ws, cur) = workspace();
    let store = HistoryStore::new(ws.path());
    let saved = save(ws.path(), &SaveOptions::default()).unwrap();
    let cp_current = fs::read(dir(ws.path()).join(&saved.checkpoint_id).join("current.json")).unwrap();
    // Later changes: more messages, another plan, AGENTS.md, memory.
    let mut later = cur.clone();
    later.push(Message::user_text("more"));
    store.save_current(&mut later).unwrap();
    fs::write(ws.path().join("AGENTS.md"), "changed\n").unwrap();
    fs::remove_file(plan_path(ws.path())).unwrap();
    let mem = memory_dir(ws.path());
    fs::write(mem.join("fact_a.md"), "A2\n").unwrap();
    fs::write(mem.join("fact_new.md"), "new\n").unwrap();

    let loaded = load(ws.path(), "w-1", &saved.checkpoint_id).unwrap();
    assert_eq!(loaded.before.label.as_deref(), Some(BEFORE_LOAD));
    assert_eq!((loaded.before.message_count, loaded.message_count), (4, 3));
    assert_ne!(loaded.conv_id, cur.conversation_id);
    assert_eq!(store.active_conversation().as_deref(), Some(loaded.conv_id.as_str()));
    let now: serde_json::Value = serde_json::from_slice(&fs::read(ws.path().join(".cicy/history/current.json")).unwrap()).unwrap();
    let then: serde_json::Value = serde_json::from_slice(&cp_current).unwrap();
    assert_eq!(serde_json::to_vec(&now["messages"]).unwrap(), serde_json::to_vec(&then["messages"]).unwrap());
    assert_eq!((&now["max_history_id"], &now["prompts"], &now["conversation_id"]), (&json!(3), &json!(1), &json!(loaded.conv_id)));
    let reply: serde_json::Value = serde_json::from_slice(&fs::read(ws.path().join(".cicy/history/reply.json")).unwrap()).unwrap();
    assert_eq!(reply["conversation_id"], json!(loaded.conv_id));
    assert_eq!(read(&ws.path().join("AGENTS.md")), "# Role\nAda\n");
    assert_eq!(read(&plan_path(ws.path())), "{\"todos\":[]}\n");
    assert_eq!(read(&mem.join("fact_a.md")), "A\n");
    assert!(!mem.join("fact_new.md").exists());
    assert!(mem.join(".lock").exists());
    // The old conversation stays on disk, and before-load holds what was replaced.
    assert!(store.conversation_dir(&cur.conversation_id).join("current.json").exists());
    let before = dir(ws.path()).join(&loaded.before.checkpoint_id);
    assert_eq!(read(&before.join("AGENTS.md")), "changed\n");
    assert!(!before.join("plan.json").exists());
    assert_eq!(read(&before.join("memory/fact_new.md")), "new\n");
}

#[test]
fn stale_tmp_folders_are_not_listed_and_the_next_save_deletes_them() {
    let (ws, _) = workspace();
    let root = dir(ws.path());
    fs::create_dir_all(root.join(".tmp-1700000000-abcdef")).unwrap();
    fs::write(root.join(".tmp-1700000000-abcdef/current.json"), "{").unwrap();
    fs::create_dir_all(root.join(".tmp-rm-1700000000-abcdef")).unwrap();
    assert!(list(ws.path()).unwrap().is_empty());
    assert!(matches!(load(ws.path(), "w-1", ".tmp-1700000000-abcdef"), Err(CheckpointError::BadId(_))));
    let meta = save(ws.path(), &SaveOptions::default()).unwrap();
    let names: Vec<String> = fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, [meta.checkpoint_id]);
}

#[test]
fn listing_is_newest_first_and_rm_and_gc_remove_whole_checkpoints() {
    let (ws, _) = workspace();
    let root = dir(ws.path());
    let now = fsutil::unix_now();
    let mut made = Vec::new();
    for i in 0..52u64 {
        let m = save(ws.path(), &SaveOptions { label: Some(format!("l{i}")), ..SaveOptions::default() }).unwrap();
        // Spread them over the past: 51 s … 0 s ago, the first one 31 days old.
        let unix = if i == 0 { now - TTL_SECS - 86_400 } else { now - (51 - i) };
        let id = format!("{unix}-{:06x}", i);
        fs::rename(root.join(&m.checkpoint_id), root.join(&id)).unwrap();
        made.push(id);
    }
    let ids: Vec<String> = list(ws.path()).unwrap().into_iter().map(|l| l.id).collect();
    let newest_first: Vec<String> = made.iter().rev().cloned().collect();
    assert_eq!(ids, newest_first);
    let deleted = gc(ws.path(), now, &made[51]).unwrap();
    // 52 − 50 = 2 over the count (the two oldest), one of which is also over 30 days.
    assert_eq!(deleted, [made[1].clone(), made[0].clone()]);
    assert_eq!(list(ws.path()).unwrap().len(), 50);
    remove(ws.path(), &made[5]).unwrap();
    assert!(!root.join(&made[5]).exists());
    assert!(matches!(remove(ws.path(), &made[5]), Err(CheckpointError::NotFound(_))));
    assert!(matches!(remove(ws.path(), "../x"), Err(CheckpointError::BadId(_))));
    assert_eq!(list(ws.path()).unwrap().len(), 49);
}

#[test]
fn a_checkpoint_with_an_unknown_schema_is_not_loaded() {
    let (ws, _) = workspace();
    let m = save(ws.path(), &SaveOptions::default()).unwrap();
    let meta_path = dir(ws.path()).join(&m.checkpoint_id).join("meta.json");
    let text = read(&meta_path).replace("\"schema_version\": 1", "\"schema_version\": 2");
    fs::write(&meta_path, text).unwrap();
    let err = load(ws.path(), "w-1", &m.checkpoint_id).unwrap_err();
    assert_eq!(err.to_string(), format!("{}: schema_version 2 is not supported (this version reads 1); nothing was changed", meta_path.display()));
    assert_eq!(list(ws.path()).unwrap().len(), 1);
}
