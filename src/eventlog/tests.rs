use std::fs;

use super::*;
use crate::event::EventKind;

fn ev(seq: u64, text: &str) -> Event {
    Event { seq, agent_id: "w-1".into(), kind: EventKind::TextDelta { text: text.into() } }
}

fn seqs(events: &[Event]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

fn hwm(ws: &Path) -> String {
    fs::read_to_string(events_dir(ws).join("hwm")).unwrap()
}

#[test]
fn numbering_continues_above_the_reservation_after_reopen_and_from_the_last_used_after_release() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    assert_eq!(read_after(ws, 0, 10).unwrap(), Replay { events: vec![], oldest_kept: None, dropped: false });
    let mut log = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(log.reserve(0).unwrap(), 1..=1024);
    assert_eq!(hwm(ws), "1024");
    log.append(&[ev(1, "a"), ev(2, "b")]).unwrap();
    log.sync().unwrap();
    drop(log);
    assert_eq!(
        fs::read_to_string(events_dir(ws).join("events.jsonl")).unwrap(),
        "{\"seq\":1,\"agent_id\":\"w-1\",\"type\":\"text_delta\",\"text\":\"a\"}\n\
         {\"seq\":2,\"agent_id\":\"w-1\",\"type\":\"text_delta\",\"text\":\"b\"}\n"
    );

    // As after kill -9: the rest of the first range is never handed out again.
    let mut log = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(log.last_logged(), 2);
    assert_eq!(log.reserve(0).unwrap(), 1025..=2048);
    log.append(&[ev(1025, "c")]).unwrap();
    log.release(1025).unwrap();
    assert_eq!(hwm(ws), "1025");
    drop(log);

    let mut log = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(log.reserve(0).unwrap(), 1026..=2049);
    assert_eq!(seqs(&read_after(ws, 0, 10).unwrap().events), vec![1, 2, 1025]);
}

#[test]
fn a_torn_last_line_is_cut_and_a_missing_hwm_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let path = events_dir(ws).join("events.jsonl");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let good = format!("{}\n{}\n", serde_json::to_string(&ev(1, "a")).unwrap(), serde_json::to_string(&ev(2, "b")).unwrap());

    fs::write(&path, format!("{good}{{\"seq\":3,\"ag")).unwrap();
    let mut log = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), good);
    assert_eq!(log.last_logged(), 2);
    assert_eq!(hwm(ws), "2");
    assert_eq!(log.reserve(0).unwrap(), 3..=1026);
    drop(log);

    fs::write(&path, format!("{good}not an event\n")).unwrap();
    let log = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), good);
    assert_eq!(log.last_logged(), 2);
    assert_eq!(hwm(ws), "1026");
}

#[test]
fn rotation_keeps_four_files_and_read_after_spans_them() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let line_len = serde_json::to_string(&ev(101, "x")).unwrap().len() as u64 + 1;
    // Three lines a file: 101–120 make seven files, of which the two oldest are dropped.
    let mut log = EventLog::open_with(ws, "w-1", 3 * line_len).unwrap();
    let events: Vec<Event> = (101..=120).map(|s| ev(s, "x")).collect();
    log.append(&events[..10]).unwrap();
    for e in &events[10..] {
        log.append(std::slice::from_ref(e)).unwrap();
    }
    let d = events_dir(ws);
    let first_seqs = |name: &str| seqs(&read_file(&d.join(name)));
    assert_eq!(first_seqs("events.jsonl"), vec![119, 120]);
    assert_eq!(first_seqs("events.1.jsonl"), vec![116, 117, 118]);
    assert_eq!(first_seqs("events.4.jsonl"), vec![107, 108, 109]);
    assert!(!d.join("events.5.jsonl").exists());

    let all = read_after(ws, 0, 100).unwrap();
    assert_eq!(seqs(&all.events), (107..=120).collect::<Vec<_>>());
    assert_eq!((all.oldest_kept, all.dropped), (Some(107), true));
    assert_eq!(all.gap(0), Some((1, 106)));
    assert_eq!(all.gap(106), None);
    assert_eq!(all.events[0], ev(107, "x"));

    let page = read_after(ws, 108, 5).unwrap();
    assert_eq!(seqs(&page.events), vec![109, 110, 111, 112, 113]);
    assert_eq!(read_after(ws, 120, 10).unwrap().events, vec![]);
}

fn read_file(path: &Path) -> Vec<Event> {
    fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn a_second_writer_appending_makes_the_first_jump_above_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let mut a = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(a.reserve(0).unwrap(), 1..=1024);
    a.append(&[ev(1, "a"), ev(2, "a")]).unwrap();
    assert_eq!(a.take_foreign(), None);

    // Another process (a CLI run) reserves above and appends.
    let mut b = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(b.reserve(0).unwrap(), 1025..=2048);
    b.append(&[ev(1025, "b")]).unwrap();

    a.append(&[ev(3, "a")]).unwrap();
    assert_eq!(a.take_foreign(), Some(1025));
    assert_eq!(a.take_foreign(), None);
    assert_eq!(a.reserve(1025).unwrap(), 2049..=3072);
    a.append(&[ev(2049, "a")]).unwrap();

    // b sees a's line and a's reservation the same way.
    b.append(&[ev(1026, "b")]).unwrap();
    assert_eq!(b.take_foreign(), Some(2049));
    assert_eq!(seqs(&read_after(ws, 0, 10).unwrap().events), vec![1, 2, 3, 1025, 1026, 2049]);
}

#[test]
fn an_unreadable_hwm_is_moved_aside_and_rebuilt_from_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let mut log = EventLog::open(ws, "w-1").unwrap();
    log.reserve(0).unwrap();
    log.append(&[ev(7, "a"), ev(5, "b")]).unwrap();
    drop(log);
    fs::write(events_dir(ws).join("hwm"), "garbage").unwrap();
    let mut log = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(log.reserve(0).unwrap(), 8..=1031);
    let aside = fs::read_dir(events_dir(ws))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("hwm.corrupt-"))
        .count();
    assert_eq!(aside, 1);
}
