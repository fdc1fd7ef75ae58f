//! One idle tick without serve (docs/design.md §13 "Tick"): it runs an intent only when the agent is
//! truly idle — an unread message, a due todo or a message it owes an answer keeps it from
//! starting anything —, the role's `autonomy.enabled: false` and the agent's switch stop it, a
//! dry run writes nothing, and an empty tick reads no database and calls no gateway.

use cicy::autonomy::ledger::{ledger_path, Ledger, Status};
use cicy::autonomy::settings::set_switch;
use cicy::autonomy::tick::{tick, tick_in, Mode, Tick};
use cicy::registry::{AgentRecord, Registry};
use cicy::wake::at::at_of_unix;
use cicy::wake::db::WakeDb;
use cicy::wake::inbox::settle::FileStamp;
use cicy::wake::inbox::{Folder, Mailbox};
use cicy::wake::obligation::ClaimedFile;

use cicy_test_support::fixture::TestHome;
use cicy_test_support::wake::note;

/// A home with no gateway listening (port 9: nothing answers) and one agent of `tester`.
fn home() -> (TestHome, AgentRecord) {
    let t = TestHome::new("http://127.0.0.1:9", 0);
    let id = t.create("tester", None);
    let record = Registry::open(&t.home.db_path()).unwrap().get(&id).unwrap();
    (t, record)
}

fn wish(record: &AgentRecord, line: &str) {
    let path = ledger_path(&record.workspace);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    text.push_str(line);
    text.push('\n');
    std::fs::write(path, text).unwrap();
}

/// A runnable intent wished now (one older than a day would be promoted).
fn tidy() -> String {
    let at = cicy::fsutil::now_rfc3339();
    format!(r#"{{"id":"i1","at":"{at}","by":"self","what":"tidy the notes","run":"ls","priority":5,"status":"pending"}}"#)
}

fn line(t: &TestHome, record: &AgentRecord) -> String {
    tick_in(&t.home, record, Mode::DryRun).tick.dry_run_line()
}

#[test]
fn an_empty_tick_rests_and_an_intent_is_picked_when_the_agent_is_idle() {
    let (t, record) = home();
    assert_eq!(line(&t, &record), "[dry-run] rest (nothing wanted and runnable)");
    wish(&record, &tidy());
    assert_eq!(line(&t, &record), "[dry-run] run intent i1 (priority 5): tidy the notes — `ls`");
    let out = tick(&t.home, &record);
    let Tick::Run(job) = out.tick else { panic!("{:?}", out.tick) };
    assert_eq!((job.priority, job.never_killed, job.rounds, job.run_timeout.as_secs()), (5, false, 20, 3600));
}

#[test]
fn an_unread_message_a_due_todo_or_an_owed_answer_keeps_intents_from_running() {
    let (t, record) = home();
    wish(&record, &tidy());
    let mb = Mailbox::of_workspace(&record.workspace);
    let msg = mb.write(Folder::Inbox, &note("human", "are you there?")).unwrap();
    assert_eq!(line(&t, &record), "[dry-run] not idle: an unread message waits in the inbox");
    mb.archive(&[(msg.name.clone(), msg.name.clone())]).unwrap();
    let mut db = WakeDb::open(&t.home).unwrap();
    db.todo_add(&record.id, "call back", &at_of_unix(1)).unwrap();
    assert_eq!(line(&t, &record), "[dry-run] not idle: a todo is due");
    db.todo_done(&record.id, 1).unwrap();
    let claimed = ClaimedFile { name: "m-1.md".into(), archived: "m-1.md".into(), stamp: FileStamp { ino: 1, size: 1, mtime_ns: 1 } };
    db.obligation_commit(&record.id, "c-1", &[claimed]).unwrap();
    assert_eq!(line(&t, &record), "[dry-run] not idle: a message awaits its answer");
}

#[test]
fn the_switches_stop_autonomy_and_a_dry_run_writes_nothing() {
    let (t, record) = home();
    let promotable = r#"{"id":"i1","at":"2026-11-01T10:00:00Z","by":"self","what":"old wish","run":"ls","priority":5,"status":"pending"}"#;
    wish(&record, promotable);
    let before = std::fs::read(ledger_path(&record.workspace)).unwrap();
    // A month undone: the dry run shows the promoted priority but writes no line.
    assert_eq!(line(&t, &record), "[dry-run] run intent i1 (priority 4): old wish — `ls`");
    assert_eq!(std::fs::read(ledger_path(&record.workspace)).unwrap(), before);
    let out = tick(&t.home, &record);
    assert_eq!(out.promoted.len(), 1);
    let after = Ledger::of_workspace(&record.workspace).read().unwrap();
    assert_eq!((after.intents[0].priority, after.intents[0].status), (4, Status::Pending));

    set_switch(&record.workspace, false).unwrap();
    assert_eq!(line(&t, &record), "[dry-run] off (switched off with `intents <id> off`)");
    set_switch(&record.workspace, true).unwrap();
    let meta = t.home.roles_dir().join("tester/meta.yaml");
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(&meta, format!("{text}autonomy:\n  enabled: false\n")).unwrap();
    assert_eq!(line(&t, &record), "[dry-run] off (autonomy.enabled: false in the role's meta.yaml)");
    std::fs::write(&meta, format!("{text}autonomy:\n  tick_secs: 0\n")).unwrap();
    let err = line(&t, &record);
    assert!(err.starts_with("[dry-run] waiting: ") && err.contains("autonomy.tick_secs: 0 is out of range"), "{err}");
}

#[test]
fn a_bad_priority_table_stops_autonomy_and_is_left_as_it_is() {
    let (t, record) = home();
    wish(&record, &tidy());
    let table = record.workspace.join(".cicy/sched-priority.json");
    std::fs::write(&table, "{\"intnet\": 4}").unwrap();
    let got = line(&t, &record);
    assert_eq!(got, format!("[dry-run] waiting: {}: unknown class \"intnet\" (expected an object like {{\"alarm\":1,\"human\":1,\"daemon\":2,\"task\":3,\"intent\":5,\"selfcheck\":8,\"recall\":9,\"web\":10}})", table.display()));
    assert_eq!(std::fs::read_to_string(&table).unwrap(), "{\"intnet\": 4}");
}

#[test]
fn a_running_line_at_a_tick_is_what_a_killed_serve_left_and_becomes_interrupted() {
    let (t, record) = home();
    wish(&record, &tidy().replace(r#""status":"pending""#, r#""status":"running""#));
    assert_eq!(line(&t, &record), "[dry-run] rest (nothing wanted and runnable)", "a dry run writes nothing");
    let out = tick(&t.home, &record);
    assert!(matches!(out.tick, Tick::Run(_)), "{:?}", out.tick);
    let i1 = Ledger::of_workspace(&record.workspace).read().unwrap().intents.remove(0);
    assert_eq!((i1.status, i1.preempted_by.as_deref(), i1.preempted_count), (Status::Interrupted, Some("restart"), 0));
    let log = std::fs::read_to_string(cicy::autonomy::log::log_path(&record.workspace)).unwrap();
    assert!(log.ends_with(" intent:i1 interrupted (preempted by restart)\n"), "{log}");
}
