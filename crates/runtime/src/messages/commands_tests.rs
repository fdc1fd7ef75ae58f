use std::fs;

use super::*;
use crate::outbox::PROCESSING_STALE_AFTER;
use crate::wake::inbox::Mailbox;

/// A home with agents `w-1`… titled `A1`…, of the packaged `assistant` role.
fn home_with(n: usize) -> (tempfile::TempDir, Home, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path());
    let ids = (1..=n)
        .map(|i| {
            let opts = CreateOptions {
                title: format!("A{i}"),
                role_template: "assistant".into(),
                role: "worker".into(),
                model: None,
                master: None,
                workspace: None,
                api_style: None,
            };
            agent::create(&home, opts).unwrap().record.id
        })
        .collect();
    (dir, home, ids)
}

fn turn(home: &Home, id: &str) -> WakeTurn {
    let ws = Registry::open(&home.db_path()).unwrap().get(id).unwrap().workspace;
    WakeTurn::plain(home, id, &ws)
}

/// Queues `commands` (JSON texts) in the outbox of `w` in this order and drains it.
fn drain_these(w: &WakeTurn, commands: &[&str]) -> Drained {
    let new = Outbox::of_workspace(&w.workspace).new_dir();
    fs::create_dir_all(&new).unwrap();
    for (i, c) in commands.iter().enumerate() {
        fs::write(new.join(format!("cmd-{:020}-cmd-test.json", i + 1)), c).unwrap();
    }
    drain(w, PROCESSING_STALE_AFTER)
}

#[test]
fn group_sends_post_in_the_group_and_every_failure_has_the_choruz_text() {
    let (_dir, home, ids) = home_with(3);
    MessageStore::open(&home).unwrap().create_group("human:ada", "ops", "", &[&ids[0], &ids[1]]).unwrap();
    MessageStore::open(&home).unwrap().create_group("human:ada", "others", "", &[&ids[2]]).unwrap();
    let w = turn(&home, &ids[0]);
    let d = drain_these(
        &w,
        &[
            r#"{"type":"send","group":"ops","content":"hi"}"#,
            r#"{"type":"send","group":"nope","content":"x"}"#,
            r#"{"type":"send","group":"others","content":"x"}"#,
            r#"{"type":"send","group":"ops","content":"x","thread":"m-404"}"#,
            r#"{"type":"send","group":"ops","content":"x","broadcast":"false"}"#,
            r#"{"type":"send","group":"ops","content":"x","metadata":[1]}"#,
            r#"{"type":"send","group":"ops","content":"x","thread":""}"#,
        ],
    );
    assert_eq!(
        d.stats.reply,
        "Failed to send to group 'nope': group 'nope' was not found in this workspace, or this agent is not a member\n\n\
         Failed to send to group 'others': group 'others' was not found in this workspace, or this agent is not a member\n\n\
         Failed to send to group 'ops': thread target 'm-404' was not found in group 'ops'\n\n\
         Failed to send to group 'ops': broadcast must be a JSON boolean.\n\n\
         Failed to send to group 'ops': metadata must be a JSON object.\n\n\
         Failed to send to group 'ops': thread must be a non-empty message id string."
    );
    assert!(!d.replied, "no claim: the caller shows the reply");
    assert_eq!(w.state().sent, 1);
    let (conv, page) = crate::messages::groups::page(&home, "ada", "ops", None, 10).unwrap();
    let m = &page.messages[0];
    assert_eq!(
        (page.messages.len(), m.sender.as_str(), m.content.as_str(), m.metadata["hops"].as_u64(), m.metadata["broadcast"].as_bool()),
        (1, ids[0].as_str(), "hi", Some(1), Some(true))
    );
    let ws2 = Registry::open(&home.db_path()).unwrap().get(&ids[1]).unwrap().workspace;
    let (pending, _) = Mailbox::of_workspace(&ws2).pending().unwrap();
    assert_eq!((pending.len(), pending[0].meta.get("conv")), (1, Some(&conv.id)));
    assert_eq!(fs::read_dir(Outbox::of_workspace(&w.workspace).new_dir()).unwrap().count(), 0, "every command file is deleted");
}

#[test]
fn a_send_without_group_or_claim_is_the_drains_reply() {
    let (_dir, home, ids) = home_with(1);
    let w = turn(&home, &ids[0]);
    let d = drain_these(&w, &[r#"{"type":"send","content":"all done"}"#, r#"{"type":"dance"}"#]);
    assert_eq!(d.stats.reply, "all done\n\noutbox: unknown command type");
}

fn results(w: &WakeTurn) -> Vec<String> {
    let dir = Outbox::of_workspace(&w.workspace).results_dir();
    let mut files: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files.iter().map(|p| fs::read_to_string(p).unwrap()).collect()
}

/// Masks the uuid of `task_id` and the time of `emitted_at`.
fn mask(receipt: &str) -> String {
    let mut v: Value = serde_json::from_str(receipt).unwrap();
    if v["task_id"].as_str().is_some_and(|id| id.len() == 36) {
        v["task_id"] = Value::from("ID");
    }
    assert_eq!(v["emitted_at"].as_str().unwrap().len(), 24, "RFC 3339 ms Z: {receipt}");
    v["emitted_at"] = Value::from("AT");
    serde_json::to_string(&v).unwrap()
}

#[test]
fn task_commands_write_exact_receipts_and_a_repeated_key_gives_the_same_ids() {
    let (_dir, home, ids) = home_with(2);
    MessageStore::open(&home).unwrap().create_group("human:ada", "ops", "", &[&ids[0], &ids[1]]).unwrap();
    let w = turn(&home, &ids[0]);
    let create = r#"{"type":"task_create","group":"ops","title":"ship","idempotency_key":"k1","assignee":"A2"}"#;
    let d = drain_these(&w, &[create]);
    assert_eq!(d.stats.reply, "");
    let first = results(&w);
    assert_eq!(
        mask(&first[0]),
        r#"{"command_type":"task_create","ok":true,"task_key":"T-1","task_id":"ID","idempotency_key":"k1","emitted_at":"AT"}"#
    );
    // Result files are named by fresh ulids: wait a millisecond so the next sorts after.
    std::thread::sleep(Duration::from_millis(2));
    drain_these(&w, &[create]);
    std::thread::sleep(Duration::from_millis(2));
    drain_these(&w, &[r#"{"type":"task_create","group":"ops","title":"other","idempotency_key":"k1"}"#]);
    std::thread::sleep(Duration::from_millis(2));
    drain_these(&w, &[r#"{"type":"task_update","group":"ops","task_key":"T-1","status":"done"}"#]);
    std::thread::sleep(Duration::from_millis(2));
    drain_these(&w, &[r#"{"type":"task_transfer","group":"ops","task_key":"T-1","assignee":"@nobody"}"#]);
    let all = results(&w);
    let id = |r: &str| serde_json::from_str::<Value>(r).unwrap()["task_id"].clone();
    assert_eq!(all.len(), 5);
    assert_eq!(mask(&all[1]), mask(&first[0]));
    assert_eq!(id(&all[1]), id(&first[0]), "the same key and title: the same ids");
    let conflict: Value = serde_json::from_str(&all[2]).unwrap();
    assert_eq!((conflict["ok"].as_bool(), conflict["error_code"].as_str()), (Some(false), Some("idempotency_conflict")));
    assert_eq!(
        mask(&all[3]),
        r#"{"command_type":"task_update","ok":true,"task_key":"T-1","task_id":"ID","idempotency_key":"k1","emitted_at":"AT"}"#
    );
    let bad: Value = serde_json::from_str(&all[4]).unwrap();
    assert_eq!((bad["error_code"].as_str(), bad["task_key"].as_str()), (Some("invalid_assignee"), Some("T-1")));
}

#[test]
fn create_group_is_silent_and_the_group_takes_sends() {
    let (_dir, home, ids) = home_with(2);
    let w = turn(&home, &ids[0]);
    let d = drain_these(
        &w,
        &[
            r#"{"type":"create_group","name":"crew","members":["A2"]}"#,
            r#"{"type":"send","group":"crew","content":"welcome"}"#,
            r#"{"type":"create_group","name":"bad","members":["Zed"]}"#,
        ],
    );
    assert_eq!(d.stats.reply, "Failed to create group 'bad': member 'Zed' is not an agent's name or id");
    let (conv, page) = crate::messages::groups::page(&home, &ids[1], "crew", None, 10).unwrap();
    assert_eq!((conv.created_by.as_str(), page.messages[0].content.as_str()), (ids[0].as_str(), "welcome"));
}

#[test]
fn set_cron_stores_a_job_and_a_bad_schedule_is_the_reply() {
    let (_dir, home, ids) = home_with(1);
    let w = turn(&home, &ids[0]);
    let d = drain_these(
        &w,
        &[
            r#"{"type":"set_cron","name":"tick","schedule":"30s","message":"ping"}"#,
            r#"{"type":"set_cron","schedule":"1 2 3","message":"m"}"#,
        ],
    );
    assert_eq!(
        d.stats.reply,
        "Failed to set cron 'unnamed': schedule '1 2 3' has 3 fields; a cron expression has 5 (minute hour day month weekday)"
    );
    assert!(d.cron_changed);
    let due = MessageStore::open(&home).unwrap().cron_due(i64::MAX).unwrap();
    assert_eq!((due.len(), due[0].name.as_str(), due[0].schedule.as_str(), due[0].message.as_str()), (1, "tick", "30s", "ping"));
}

#[test]
fn share_file_inlines_text_and_ignores_escapes() {
    let (_dir, home, ids) = home_with(1);
    let w = turn(&home, &ids[0]);
    fs::write(w.workspace.join("notes.md"), "hello\n").unwrap();
    std::os::unix::fs::symlink("/etc", w.workspace.join("link")).unwrap();
    let d = drain_these(
        &w,
        &[
            r#"{"type":"share_file","path":"../x"}"#,
            r#"{"type":"share_file","path":"/etc/passwd"}"#,
            r#"{"type":"share_file","path":"link/passwd"}"#,
            r#"{"type":"share_file","path":"notes.md"}"#,
        ],
    );
    assert_eq!(d.stats.reply, "**notes.md**\n```\nhello\n```");
}

#[test]
fn a_binary_share_is_posted_and_copied_to_the_other_agents() {
    let (_dir, home, ids) = home_with(2);
    MessageStore::open(&home).unwrap().create_group("human:ada", "ops", "", &[&ids[0], &ids[1]]).unwrap();
    let w = turn(&home, &ids[0]);
    fs::write(w.workspace.join("logo.png"), b"\x89PNG\0data").unwrap();
    let d = drain_these(&w, &[r#"{"type":"share_file","path":"logo.png","group":"ops"}"#]);
    assert_eq!(d.stats.reply, "");
    let (_, page) = crate::messages::groups::page(&home, "ada", "ops", None, 10).unwrap();
    let m = &page.messages[0];
    assert_eq!(m.content, "📎 logo.png (9 bytes)");
    let ws2 = Registry::open(&home.db_path()).unwrap().get(&ids[1]).unwrap().workspace;
    assert_eq!(fs::read(ws2.join(".cicy/inbox-files").join(&m.id).join("logo.png")).unwrap(), b"\x89PNG\0data");
    // The recipient reads the local path after the envelope (Choruz B1 attachments).
    let (inbox, _) = crate::wake::inbox::Mailbox::of_workspace(&ws2).pending().unwrap();
    let prompt = crate::messages::route::prompt_for(&home, &ids[1], &inbox);
    let path = ws2.join(".cicy/inbox-files").join(&m.id).join("logo.png");
    assert!(
        prompt.ends_with(&format!("| 📎 logo.png (9 bytes)\n[attached files available locally — read them as needed]\n{}", path.display())),
        "{prompt}"
    );
}

#[test]
fn provision_agent_creates_a_worker_with_the_instructions() {
    let (_dir, home, ids) = home_with(1);
    let w = turn(&home, &ids[0]);
    let d = drain_these(
        &w,
        &[
            r#"{"type":"provision_agent","name":"Scout","instructions":"Watch the logs."}"#,
            r#"{"type":"provision_agent","name":"bad\u0001name"}"#,
        ],
    );
    let reply = d.stats.reply;
    assert!(reply.starts_with("Agent 'Scout' created successfully.\n\nFailed to create agent 'bad\u{1}name': "), "{reply}");
    let rec = Registry::open(&home.db_path()).unwrap().list().unwrap().into_iter().find(|a| a.title == "Scout").unwrap();
    assert_eq!((rec.id.as_str(), rec.role_template.as_str()), ("w-2", "assistant"));
    assert!(fs::read_to_string(rec.workspace.join("AGENTS.md")).unwrap().ends_with("\nWatch the logs.\n"));
}

/// Runs the queued `commands` of `w` as a serve killed right after each command's effect would:
/// the effect happens, the `.processing` claim stays behind (put back after the drain deleted it).
fn drain_killed_after_each_effect(w: &WakeTurn, commands: &[&str]) {
    let new = Outbox::of_workspace(&w.workspace).new_dir();
    fs::create_dir_all(&new).unwrap();
    for (i, c) in commands.iter().enumerate() {
        fs::write(new.join(format!("cmd-{:020}-cmd-kill{i:02}.json", i + 1)), c).unwrap();
    }
    let outbox = Outbox::of_workspace(&w.workspace);
    let (mut fx, mut claims) = (Effects::default(), Vec::new());
    outbox.drain(PROCESSING_STALE_AFTER, |c| {
        let reply = run(w, &outbox, c, &mut fx);
        claims.push((c.path.clone(), fs::read(&c.path).unwrap()));
        reply
    });
    assert_eq!(claims.len(), commands.len());
    for (path, bytes) in claims {
        fs::write(path, bytes).unwrap();
    }
}

/// The `.md` files of `dir` and its `archive/`.
fn messages_in(dir: &std::path::Path) -> Vec<String> {
    let mut names = Vec::new();
    for d in [dir.to_path_buf(), dir.join("archive")] {
        for e in fs::read_dir(&d).into_iter().flatten() {
            let name = e.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".md") {
                names.push(name);
            }
        }
    }
    names
}

#[test]
fn a_command_retried_after_a_kill_between_its_effect_and_the_claims_deletion_runs_once() {
    let (_dir, home, ids) = home_with(2);
    MessageStore::open(&home).unwrap().create_group("human:ada", "ops", "", &[&ids[0], &ids[1]]).unwrap();
    let w = turn(&home, &ids[0]);
    fs::write(w.workspace.join("logo.png"), b"\x89PNG\0\x01").unwrap();
    drain_killed_after_each_effect(
        &w,
        &[
            &format!(r#"{{"type":"send","to":"{}","content":"direct once"}}"#, ids[1]),
            r#"{"type":"send","group":"ops","content":"group once"}"#,
            r#"{"type":"share_file","path":"logo.png","group":"ops"}"#,
            r#"{"type":"task_create","group":"ops","title":"t","idempotency_key":"k1"}"#,
            &format!(r#"{{"type":"create_group","name":"pair","members":["{}"]}}"#, ids[1]),
            r#"{"type":"provision_agent","name":"Helper","instructions":"help"}"#,
        ],
    );
    let (ws1, ws2) = (w.workspace.clone(), Registry::open(&home.db_path()).unwrap().get(&ids[1]).unwrap().workspace);
    let mb2 = Mailbox::of_workspace(&ws2);
    // The recipient read the direct message and the group posts before serve came back.
    let (pending, _) = mb2.pending().unwrap();
    assert_eq!(pending.len(), 3);
    mb2.archive(&pending.iter().map(|m| (m.name.clone(), m.name.clone())).collect::<Vec<_>>()).unwrap();
    let results = Outbox::of_workspace(&ws1).results_dir();
    let before =
        (messages_in(&mb2.inbox_dir()), messages_in(&Mailbox::of_workspace(&ws1).outbox_dir()), fs::read_dir(&results).unwrap().count());

    // A restarted serve: the claims are not stale yet, then they are (stale_after 0).
    let fresh = drain(&w, PROCESSING_STALE_AFTER);
    assert_eq!((fresh.stats.reclaimed, fresh.stats.skipped), (0, 6));
    let retried = drain(&w, Duration::ZERO);
    assert_eq!((retried.stats.reclaimed, retried.stats.processed), (6, 6));
    let inbox2 = messages_in(&mb2.inbox_dir());
    assert_eq!(inbox2.len(), 3, "one file per message in the recipient's inbox and archive: {inbox2:?}");
    assert_eq!(retried.stats.reply, "Agent 'Helper' created successfully.");
    assert!(retried.provisioned.is_empty(), "no second agent to start");
    assert_eq!(fs::read_dir(Outbox::of_workspace(&ws1).new_dir()).unwrap().count(), 0, "the retry deletes the claims");
    assert_eq!((inbox2.clone(), messages_in(&Mailbox::of_workspace(&ws1).outbox_dir()), fs::read_dir(&results).unwrap().count()), before);
    assert_eq!(fs::read_dir(&results).unwrap().count(), 1, "one result envelope");
    let (_, page) = crate::messages::groups::page(&home, "ada", "ops", None, 10).unwrap();
    let contents: Vec<&str> = page.messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(contents, ["group once", "📎 logo.png (6 bytes)"]);
    let shared = ws2.join(".cicy/inbox-files").join(&page.messages[1].id);
    assert_eq!(fs::read_dir(ws2.join(".cicy/inbox-files")).unwrap().count(), 1);
    assert_eq!(fs::read(shared.join("logo.png")).unwrap(), b"\x89PNG\0\x01");
    let store = MessageStore::open(&home).unwrap();
    assert_eq!(store.resolve_group(&ids[0], "pair").unwrap().created_by, ids[0]);
    let titles: Vec<String> = Registry::open(&home.db_path()).unwrap().list().unwrap().into_iter().map(|a| a.title).collect();
    assert_eq!(titles, ["A1", "A2", "Helper"]);
}
