use super::*;
use crate::conversation::history::CurrentFile;
use crate::conversation::message::{ContentBlock, Message};
use serde_json::json;

/// A workspace with a 3-message conversation, a plan, AGENTS.md and two memory files plus a
/// lock (which is not state).
fn workspace() -> (tempfile::TempDir, CurrentFile) {
    let ws = tempfile::tempdir().unwrap();
    let store = HistoryStore::new(ws.path());
    let mut cur = CurrentFile::new("w-1", "m");
    cur.push(Message::user_text("hi"));
    cur.push(Message::assistant(vec![
        ContentBlock::text("héllo"),
        ContentBlock::ToolUse { id: "t1".into(), name: "shell".into(), input: json!({"command": "ls"}) },
    ]));
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
    assert_eq!(
        err.to_string(),
        format!("{}: schema_version 2 is not supported (this version reads 1); nothing was changed", meta_path.display())
    );
    assert_eq!(list(ws.path()).unwrap().len(), 1);
}

/// The active conversation id and AGENTS.md, to show a refused load changed nothing.
fn live_state(ws: &Path) -> (Option<String>, String) {
    (HistoryStore::new(ws).active_conversation(), read(&ws.join("AGENTS.md")))
}

#[test]
fn a_corrupt_or_incomplete_checkpoint_is_refused_before_anything_changes() {
    type Break = fn(&Path);
    let cases: [(&str, Break, &str); 6] = [
        (
            "memory",
            |cp| {
                fs::remove_dir_all(cp.join("memory")).unwrap();
                fs::write(cp.join("memory"), "x").unwrap();
            },
            "not a folder; the checkpoint was not loaded and nothing was changed",
        ),
        (
            "current.json",
            |cp| fs::remove_file(cp.join("current.json")).unwrap(),
            "missing, but meta.json says the conversation had 3 messages; the checkpoint was not loaded and nothing was changed",
        ),
        (
            "current.json",
            |cp| {
                let mut c: serde_json::Value = serde_json::from_slice(&fs::read(cp.join("current.json")).unwrap()).unwrap();
                c["messages"].as_array_mut().unwrap().pop();
                fs::write(cp.join("current.json"), serde_json::to_vec(&c).unwrap()).unwrap();
            },
            "holds 2 messages, but meta.json says 3; the checkpoint was not loaded and nothing was changed",
        ),
        (
            "reply.json",
            |cp| fs::write(cp.join("reply.json"), "{").unwrap(),
            "could not be parsed (EOF while parsing an object at line 1 column 1); nothing was changed",
        ),
        (
            "AGENTS.md",
            |cp| {
                fs::remove_file(cp.join("AGENTS.md")).unwrap();
                fs::create_dir(cp.join("AGENTS.md")).unwrap();
            },
            "not a regular file; the checkpoint was not loaded and nothing was changed",
        ),
        (
            "memory/fact_a.md",
            |cp| {
                fs::remove_file(cp.join("memory/fact_a.md")).unwrap();
                std::os::unix::fs::symlink("/etc/passwd", cp.join("memory/fact_a.md")).unwrap();
            },
            "not a regular file; the checkpoint was not loaded and nothing was changed",
        ),
    ];
    for (file, break_it, problem) in cases {
        let (ws, _) = workspace();
        let m = save(ws.path(), &SaveOptions::default()).unwrap();
        let cp = dir(ws.path()).join(&m.checkpoint_id);
        fs::write(ws.path().join("AGENTS.md"), "changed\n").unwrap();
        let before = live_state(ws.path());
        break_it(&cp);
        let err = load(ws.path(), "w-1", &m.checkpoint_id).unwrap_err();
        let sep = if problem.starts_with("could not") { " " } else { ": " };
        assert_eq!(err.to_string(), format!("{}{sep}{problem}", cp.join(file).display()));
        assert_eq!(live_state(ws.path()), before);
        // No before-load checkpoint either.
        assert_eq!(list(ws.path()).unwrap().len(), 1, "{file}");
    }
}

#[test]
fn a_load_that_fails_midway_says_what_changed_and_names_the_before_load_checkpoint() {
    let (ws, cur) = workspace();
    let m = save(ws.path(), &SaveOptions::default()).unwrap();
    fs::write(ws.path().join("AGENTS.md"), "changed\n").unwrap();
    // A folder now stands where the checkpoint's memory file goes back.
    let live = memory_dir(ws.path()).join("fact_a.md");
    fs::remove_file(&live).unwrap();
    fs::create_dir(&live).unwrap();
    let err = load(ws.path(), "w-1", &m.checkpoint_id).unwrap_err();
    let listed = list(ws.path()).unwrap();
    assert_eq!(listed.len(), 2);
    let before = &listed.iter().find(|l| l.id != m.checkpoint_id).unwrap().id;
    let CheckpointError::PartlyLoaded { source, .. } = &err else { panic!("{err}") };
    assert_eq!(
        err.to_string(),
        format!(
            "{source}; loading checkpoint {} stopped there: the active conversation, AGENTS.md and plan.json were changed and the memory files may be partly changed; load checkpoint {before} (before-load) to go back",
            m.checkpoint_id
        )
    );
    assert!(source.to_string().starts_with(&format!("{}: ", live.display())), "{source}");
    assert_ne!(HistoryStore::new(ws.path()).active_conversation(), Some(cur.conversation_id));
    assert_eq!(read(&ws.path().join("AGENTS.md")), "# Role\nAda\n");
}

#[test]
fn checkpoint_folders_are_private_and_copies_keep_their_modes() {
    use std::os::unix::fs::PermissionsExt;
    let (ws, cur) = workspace();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    fs::set_permissions(ws.path().join("AGENTS.md"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(memory_dir(ws.path()).join("fact_a.md"), fs::Permissions::from_mode(0o640)).unwrap();
    let m = save(ws.path(), &SaveOptions::default()).unwrap();
    let cp = dir(ws.path()).join(&m.checkpoint_id);
    let conv = HistoryStore::new(ws.path()).conversation_dir(&cur.conversation_id);
    assert_eq!(mode(&conv.join("current.json")), 0o600);
    let modes: Vec<u32> = ["", "memory", "memory/_archive", "current.json", "reply.json", "AGENTS.md", "meta.json", "memory/fact_a.md"]
        .iter()
        .map(|p| mode(&cp.join(p)))
        .collect();
    assert_eq!(modes, [0o700, 0o700, 0o700, 0o600, 0o600, 0o600, 0o600, 0o640]);
    assert_eq!(mode(&dir(ws.path())), 0o700);
}

#[test]
fn a_label_with_a_control_character_is_refused_before_anything_is_written() {
    let (ws, _) = workspace();
    for label in ["a\tb\nc", "", "  "] {
        let err = save(ws.path(), &SaveOptions { label: Some(label.into()), ..SaveOptions::default() }).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("bad label {label:?}: it must not be empty or contain control characters (tab, newline), which break `checkpoint ls`")
        );
    }
    assert!(!dir(ws.path()).exists());
}
