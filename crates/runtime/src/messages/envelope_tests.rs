//! Golden texts of `envelope.rs` (docs/design.md §11 "Tests": group+thread+tasks, direct, `|` and
//! newlines in names, 21 tasks → 20, roster order, `[]`, batch of 3, cron, attachments).

use super::*;

const CONV: &str = "0c5e2b1a-9f3d-4e7a-8b6c-1d2e3f405162";

fn agent(id: &str, name: &str) -> RosterEntry {
    RosterEntry { id: id.into(), name: name.into(), kind: "agent".into(), host: None }
}

fn task(key: &str, title: &str, status: TaskStatus) -> TaskSummary {
    TaskSummary { task_key: key.into(), title: title.into(), status }
}

fn incoming<'a>(sender: &'a str, place: Place<'a>, roster: Option<&'a [RosterEntry]>, body: &'a str) -> Incoming<'a> {
    Incoming { sender, place, conv_id: CONV, thread: None, roster, your_tasks: &[], body, attachments: &[], earlier: &[] }
}

#[test]
fn a_group_thread_reply_with_tasks_has_every_field_in_order() {
    let roster = [agent("w-2", "Bob"), agent("w-1", "Ada")];
    let tasks = [task("T-1", "write the plan", TaskStatus::InProgress), task("T-3", "review", TaskStatus::Blocked)];
    let m = Incoming {
        thread: Some("9a8b7c6d-root"),
        your_tasks: &tasks,
        ..incoming("Ada", Place::Group("ops team"), Some(&roster), "line 1\nline | 2")
    };
    assert_eq!(
        envelope(&m),
        "[choruz-incoming] from:@Ada group:ops team conv:0c5e2b1a-9f3d thread:9a8b7c6d-root \
         roster:[{\"id\":\"w-1\",\"name\":\"Ada\",\"type\":\"agent\"},{\"id\":\"w-2\",\"name\":\"Bob\",\"type\":\"agent\"}] \
         your_tasks:[{\"task_key\":\"T-1\",\"title\":\"write the plan\",\"status\":\"in_progress\"},\
         {\"task_key\":\"T-3\",\"title\":\"review\",\"status\":\"blocked\"}] | line 1\nline | 2"
    );
}

#[test]
fn a_direct_message_says_direct_chat_and_omits_empty_tasks() {
    let roster = [agent("w-1", "Ada")];
    let m = incoming("ann", Place::Direct, Some(&roster), "hi");
    assert_eq!(
        envelope(&m),
        "[choruz-incoming] from:@ann direct-chat conv:0c5e2b1a-9f3d roster:[{\"id\":\"w-1\",\"name\":\"Ada\",\"type\":\"agent\"}] | hi"
    );
}

#[test]
fn pipes_and_control_characters_leave_names_and_titles_and_names_stop_at_120_chars() {
    let long = "é".repeat(130);
    let roster = [RosterEntry { host: Some("box|1\t".into()), ..agent("w-1", "Ad|a\nL") }];
    let tasks = [task("T-1", "fix | this\r\nnow", TaskStatus::Todo)];
    let m = Incoming {
        your_tasks: &tasks,
        thread: Some("r|1"),
        ..incoming("an|n\nx", Place::Group("ops\n| team"), Some(&roster), "body | kept\n")
    };
    assert_eq!(
        envelope(&m),
        "[choruz-incoming] from:@annx group:ops team conv:0c5e2b1a-9f3d thread:r1 \
         roster:[{\"id\":\"w-1\",\"name\":\"AdaL\",\"type\":\"agent\",\"host\":\"box1\"}] \
         your_tasks:[{\"task_key\":\"T-1\",\"title\":\"fix  thisnow\",\"status\":\"todo\"}] | body | kept\n"
    );
    let cut = clean_name(&long);
    assert_eq!((cut.chars().count(), cut.len()), (120, 240));
    let e = envelope(&incoming(&long, Place::Group(&long), None, ""));
    assert_eq!(e, format!("[choruz-incoming] from:@{cut} group:{cut} conv:0c5e2b1a-9f3d roster:[] | "));
}

#[test]
fn twenty_one_open_tasks_show_the_first_twenty() {
    let tasks: Vec<TaskSummary> = (1..=21).map(|i| task(&format!("T-{i}"), &format!("t{i}"), TaskStatus::Todo)).collect();
    let m = Incoming { your_tasks: &tasks, ..incoming("ann", Place::Direct, None, "x") };
    let e = envelope(&m);
    let json = e.split(" your_tasks:").nth(1).unwrap().split(" | ").next().unwrap();
    let shown: Vec<serde_json::Value> = serde_json::from_str(json).unwrap();
    assert_eq!(shown.len(), 20);
    assert_eq!(shown[19]["task_key"], "T-20");
    assert!(!e.contains("T-21"), "{e}");
}

#[test]
fn the_roster_is_sorted_by_lowercase_name_then_id() {
    let roster = [agent("w-3", "bob"), agent("w-9", "alice"), agent("w-2", "Alice"), agent("w-1", "Alice"), agent("w-4", "Zed")];
    let e = envelope(&incoming("ann", Place::Direct, Some(&roster), "x"));
    assert_eq!(
        e,
        "[choruz-incoming] from:@ann direct-chat conv:0c5e2b1a-9f3d roster:[\
         {\"id\":\"w-1\",\"name\":\"Alice\",\"type\":\"agent\"},{\"id\":\"w-2\",\"name\":\"Alice\",\"type\":\"agent\"},\
         {\"id\":\"w-9\",\"name\":\"alice\",\"type\":\"agent\"},{\"id\":\"w-3\",\"name\":\"bob\",\"type\":\"agent\"},\
         {\"id\":\"w-4\",\"name\":\"Zed\",\"type\":\"agent\"}] | x"
    );
}

#[test]
fn a_failed_roster_lookup_and_an_empty_roster_both_read_empty_brackets() {
    let failed = envelope(&incoming("ann", Place::Group("g"), None, "x"));
    let empty = envelope(&incoming("ann", Place::Group("g"), Some(&[]), "x"));
    assert_eq!(failed, "[choruz-incoming] from:@ann group:g conv:0c5e2b1a-9f3d roster:[] | x");
    assert_eq!(empty, failed);
    let short = Incoming { conv_id: "c1", ..incoming("ann", Place::Group("g"), None, "x") };
    assert_eq!(envelope(&short), "[choruz-incoming] from:@ann group:g conv:c1 roster:[] | x");
}

#[test]
fn three_pending_messages_make_a_batch_oldest_first_and_one_is_its_envelope() {
    let msgs = [
        incoming("ann", Place::Group("g"), None, "first"),
        incoming("bob", Place::Group("g"), None, "second\nline"),
        incoming("ann", Place::Direct, None, "third"),
    ];
    assert_eq!(
        batch(&msgs),
        "[choruz-batch] You have 3 pending messages waiting for you. Read all of them before you reply. A later message \
         supersedes an earlier one on the same topic. Never reopen work that was already marked complete. Reply once per \
         unresolved topic, merging the senders who asked about the same topic into one reply.\n\n\
         [1/3] [choruz-incoming] from:@ann group:g conv:0c5e2b1a-9f3d roster:[] | first\n\n\
         [2/3] [choruz-incoming] from:@bob group:g conv:0c5e2b1a-9f3d roster:[] | second\nline\n\n\
         [3/3] [choruz-incoming] from:@ann direct-chat conv:0c5e2b1a-9f3d roster:[] | third"
    );
    assert_eq!(batch(&msgs[..1]), envelope(&msgs[0]));
    assert_eq!(batch(&[]), "");
}

#[test]
fn a_cron_firing_names_job_and_schedule() {
    assert_eq!(
        cron("daily|report", "0 9 * * 1-5", "post the report | now"),
        "[choruz-cron] job:dailyreport schedule:0 9 * * 1-5 | post the report | now"
    );
    assert_eq!(cron("unnamed", "30m", "ping"), "[choruz-cron] job:unnamed schedule:30m | ping");
}

#[test]
fn attachments_follow_the_body_one_path_per_line() {
    let files = ["ws/.cicy/inbox-files/m1/report.pdf".to_string(), "ws/.cicy/inbox-files/m1/a b.png".to_string()];
    let m = Incoming { attachments: &files, ..incoming("ann", Place::Direct, None, "see attached") };
    assert_eq!(
        envelope(&m),
        "[choruz-incoming] from:@ann direct-chat conv:0c5e2b1a-9f3d roster:[] | see attached\n\
         [attached files available locally — read them as needed]\n\
         ws/.cicy/inbox-files/m1/report.pdf\nws/.cicy/inbox-files/m1/a b.png"
    );
}

#[test]
fn a_thread_follow_up_comes_after_its_root_and_earlier_replies() {
    let earlier = [ThreadItem { sender: "Ada", body: "root?" }, ThreadItem { sender: "b|ob", body: "yes | no" }];
    let m = Incoming { thread: Some("r-1"), earlier: &earlier, ..incoming("ann", Place::Group("g"), None, "so?") };
    assert_eq!(
        prompt(&m),
        "[cicy-thread] thread:r-1 earlier:2 (the root and earlier replies of this thread, oldest first; already delivered, \
         for context only)\n[1/2] from:@Ada | root?\n[2/2] from:@bob | yes | no\n\n\
         [choruz-incoming] from:@ann group:g conv:0c5e2b1a-9f3d thread:r-1 roster:[] | so?"
    );
    let not_a_thread = Incoming { earlier: &earlier, ..incoming("ann", Place::Group("g"), None, "so?") };
    assert_eq!(prompt(&not_a_thread), envelope(&not_a_thread));
}

#[test]
fn a_long_thread_keeps_its_root_and_the_latest_nineteen_replies() {
    let bodies: Vec<String> = (0..30).map(|i| format!("b{i}")).collect();
    let earlier: Vec<ThreadItem<'_>> = bodies.iter().map(|b| ThreadItem { sender: "Ada", body: b }).collect();
    let m = Incoming { thread: Some("r"), earlier: &earlier, ..incoming("ann", Place::Direct, None, "x") };
    let p = prompt(&m);
    assert!(p.starts_with("[cicy-thread] thread:r earlier:20 "), "{p}");
    assert!(p.contains("\n[1/20] from:@Ada | b0\n[2/20] from:@Ada | b11\n"), "{p}");
    assert!(p.contains("\n[20/20] from:@Ada | b29\n\n[choruz-incoming]"), "{p}");
    assert!(!p.contains("| b10\n"), "{p}");
}
