use std::fs;

use super::*;
use cicy_protocol::event::EventKind;

fn ev(seq: u64, text: &str) -> Event {
    Event { seq, agent_id: "w-1".into(), kind: EventKind::TextDelta { text: text.into() } }
}

fn seqs(events: &[Event]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

fn hwm(ws: &Path) -> String {
    fs::read_to_string(events_dir(ws).join("hwm")).unwrap()
}

fn line(e: &Event) -> String {
    format!("{}\n", serde_json::to_string(e).unwrap())
}

#[test]
fn numbering_goes_on_after_a_clean_release_and_above_hwm_after_a_holder_died() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    assert_eq!(read_after(ws, 0, 10).unwrap(), Replay { events: vec![], oldest_kept: None, dropped: false });
    let mut log = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(log.lease(None).unwrap(), 1..=1024);
    assert_eq!(hwm(ws), "1024");
    log.append(&[ev(1, "a"), ev(2, "b")]).unwrap();
    log.sync().unwrap();
    log.unlease(2).unwrap();
    drop(log);
    assert_eq!(
        fs::read_to_string(events_dir(ws).join("events.jsonl")).unwrap(),
        "{\"seq\":1,\"agent_id\":\"w-1\",\"type\":\"text_delta\",\"text\":\"a\"}\n\
         {\"seq\":2,\"agent_id\":\"w-1\",\"type\":\"text_delta\",\"text\":\"b\"}\n"
    );
    fs::remove_file(events_dir(ws).join("hwm")).unwrap();
    fs::write(events_dir(ws).join("hwm"), "1024").unwrap();
    let before = fs::metadata(events_dir(ws).join("hwm")).unwrap().modified().unwrap();

    // After a clean release the next holder goes on within the reservation, writing no hwm.
    let mut log = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(log.lease(None).unwrap(), 3..=1024);
    assert_eq!(fs::metadata(events_dir(ws).join("hwm")).unwrap().modified().unwrap(), before);
    log.append(&[ev(3, "c")]).unwrap();
    // As after kill -9: the holder is gone with the lease held, so the rest of its range
    // (which it may have handed out) is never used again.
    drop(log);
    let mut log = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(log.last_logged(), 3);
    assert_eq!(log.lease(None).unwrap(), 1025..=2048);
    assert_eq!(hwm(ws), "2048");
    assert_eq!(seqs(&read_after(ws, 0, 10).unwrap().events), vec![1, 2, 3]);
}

#[test]
fn a_torn_last_line_is_cut_and_a_missing_hwm_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let path = events_dir(ws).join("events.jsonl");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let good = format!("{}{}", line(&ev(1, "a")), line(&ev(2, "b")));

    fs::write(&path, format!("{good}{{\"seq\":3,\"ag")).unwrap();
    let mut log = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), good);
    assert_eq!(log.last_logged(), 2);
    assert_eq!(log.lease(None).unwrap(), 3..=1026);
    assert_eq!(hwm(ws), "1026");
    drop(log);

    fs::write(&path, format!("{good}not an event\n")).unwrap();
    let log = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), good);
    assert_eq!(log.last_logged(), 2);
    assert_eq!(hwm(ws), "1026");
}

#[test]
fn a_torn_line_left_by_another_writer_while_this_log_is_open_is_cut_before_the_next_append() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let path = events_dir(ws).join("events.jsonl");
    let mut log = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(log.lease(None).unwrap(), 1..=1024);
    log.append(&[ev(1, "a")]).unwrap();
    // Another process (an earlier lease's holder killed mid-line) leaves a line without its end.
    let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut f, b"{\"seq\":77,\"agen").unwrap();
    drop(f);
    log.append(&[ev(2, "b")]).unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), format!("{}{}", line(&ev(1, "a")), line(&ev(2, "b"))));
    assert_eq!(seqs(&read_after(ws, 0, 10).unwrap().events), vec![1, 2]);
}

#[test]
fn two_lines_that_are_not_events_at_the_end_are_set_aside_at_open_and_numbering_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let d = events_dir(ws);
    fs::create_dir_all(&d).unwrap();
    let good = format!("{}{}", line(&ev(1, "a")), line(&ev(2, "b")));
    fs::write(d.join("events.jsonl"), format!("{good}junk1\njunk2\n")).unwrap();
    fs::write(d.join("hwm"), "1024").unwrap();
    let mut log = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(log.last_logged(), 2);
    assert_eq!(fs::read_to_string(d.join("events.jsonl")).unwrap(), good);
    let kept: Vec<String> = fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("events.jsonl.corrupt-"))
        .collect();
    assert_eq!(kept.len(), 1, "the file as it was is kept");
    assert_eq!(fs::read_to_string(d.join(&kept[0])).unwrap(), format!("{good}junk1\n"));
    assert_eq!(log.lease(None).unwrap(), 1025..=2048);
    log.append(&[ev(1025, "c")]).unwrap();
    assert_eq!(seqs(&read_after(ws, 0, 10).unwrap().events), vec![1, 2, 1025]);
}

#[test]
fn a_bad_line_with_hwm_missing_is_set_aside_and_numbering_goes_on_above_the_good_ones() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let d = events_dir(ws);
    fs::create_dir_all(&d).unwrap();
    let original =
        format!("{}{{\"seq\":2,\"agent_id\":\"w-1\",\"type\":\"nonsense\"}}\nnot json\n{}", line(&ev(1, "a")), line(&ev(3, "c")));
    fs::write(d.join("events.jsonl"), &original).unwrap();

    // A reader skips the bad lines and keeps the good ones.
    assert_eq!(seqs(&read_after(ws, 0, 10).unwrap().events), vec![1, 3]);
    let mut log = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(log.lease(None).unwrap(), 4..=1027);
    assert_eq!(hwm(ws), "1027");
    assert_eq!(fs::read_to_string(d.join("events.jsonl")).unwrap(), format!("{}{}", line(&ev(1, "a")), line(&ev(3, "c"))));
    let aside: Vec<_> = fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("events.jsonl.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(fs::read_to_string(&aside[0]).unwrap(), original);
    log.append(&[ev(4, "d")]).unwrap();
    assert_eq!(seqs(&read_after(ws, 0, 10).unwrap().events), vec![1, 3, 4]);
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
fn the_lease_passes_between_writers_and_seqs_increase_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let mut a = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(a.lease(None).unwrap(), 1..=1024);
    a.append(&[ev(1, "a"), ev(2, "a")]).unwrap();
    a.unlease(2).unwrap();
    assert!(!a.is_leased());

    // Another writer (a CLI run) takes over where `a` stopped, within the same reservation.
    let mut b = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(b.lease(None).unwrap(), 3..=1024);
    b.append(&[ev(3, "b")]).unwrap();
    b.unlease(3).unwrap();

    // `a`'s old range is no longer its own: it goes on above `b`.
    assert_eq!(a.lease(Some((2, 1024))).unwrap(), 4..=1024);
    a.append(&[ev(4, "a")]).unwrap();
    a.unlease(4).unwrap();
    // Nobody else held it since: `a` resumes without reading hwm.
    assert_eq!(a.lease(Some((4, 1024))).unwrap(), 5..=1024);
    assert_eq!(hwm(ws), "1024");
    let text = fs::read_to_string(events_dir(ws).join("events.jsonl")).unwrap();
    let in_file: Vec<u64> = text.lines().map(|l| serde_json::from_str::<Event>(l).unwrap().seq).collect();
    assert_eq!(in_file, vec![1, 2, 3, 4]);
}

#[test]
fn an_unreadable_hwm_is_moved_aside_and_rebuilt_from_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let mut log = EventLog::open(ws, "w-1").unwrap();
    log.append(&[ev(7, "a"), ev(5, "b")]).unwrap();
    drop(log);
    fs::write(events_dir(ws).join("hwm"), "garbage").unwrap();
    let mut log = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(log.lease(None).unwrap(), 8..=1031);
    let aside = fs::read_dir(events_dir(ws))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("hwm.corrupt-"))
        .count();
    assert_eq!(aside, 1);
}
