use std::collections::BTreeSet;
use std::io::Write;
use std::sync::{Arc, Mutex};

use super::*;
use crate::outbox::results::ErrorCode;

fn outbox() -> (tempfile::TempDir, Outbox) {
    let dir = tempfile::tempdir().unwrap();
    let ob = Outbox::at(dir.path().join("outbox"));
    fs::create_dir_all(ob.new_dir()).unwrap();
    (dir, ob)
}

fn put(ob: &Outbox, name: &str, text: &str) -> PathBuf {
    let p = ob.new_dir().join(name);
    fs::write(&p, text).unwrap();
    p
}

fn age(path: &Path, secs: u64) {
    let f = OpenOptions::new().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(secs)).unwrap();
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.unwrap().file_name().into_string().unwrap()).collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

/// A handler that records the content of every `send` and answers with it.
fn echo(seen: &mut Vec<String>) -> impl FnMut(&Claimed) -> Option<String> + '_ {
    |c: &Claimed| match &c.command {
        OutboxCommand::Send { content, .. } => {
            seen.push(content.clone());
            Some(content.clone())
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn commands_run_in_name_order_and_replies_join_with_a_blank_line() {
    let (_d, ob) = outbox();
    put(&ob, "cmd-00000000000000000002-cmd-bbbbbb.json", r#"{"type":"send","content":"two"}"#);
    put(&ob, "cmd-00000000000000000001-cmd-zzzzzz.json", "{\"type\":\"send\",\"content\":\"one\"}\n");
    put(&ob, "cmd-00000000000000000003-cmd-aaaaaa.json", r#"{"type":"dance"}"#);
    put(&ob, "notes.txt", "left alone");
    let mut seen = Vec::new();
    let stats = ob.drain(PROCESSING_STALE_AFTER, echo(&mut seen));
    assert_eq!(seen, ["one", "two"]);
    assert_eq!(stats.reply, "one\n\ntwo\n\noutbox: unknown command type");
    assert_eq!(stats.processed, 3);
    assert_eq!(listing(&ob.new_dir()), ["notes.txt"]);
}

#[test]
fn double_escaped_json_parses_and_garbage_goes_to_bad() {
    let (_d, ob) = outbox();
    put(&ob, "a.json", r#"{\"type\":\"send\",\"content\":\"hi\"}"#);
    age(&put(&ob, "b.json", "not json at all"), 3);
    fs::write(ob.new_dir().join("c.json"), b"{\"type\":\"send\",\"content\":\"\xff\"}").unwrap();
    age(&ob.new_dir().join("c.json"), 3);
    let mut seen = Vec::new();
    let stats = ob.drain(PROCESSING_STALE_AFTER, echo(&mut seen));
    assert_eq!(seen, ["hi"]);
    assert_eq!(stats.bad.len(), 2);
    let bad = listing(&ob.bad_dir());
    assert_eq!(bad.len(), 2);
    assert!(bad[0].starts_with("b.json.") && bad[0].ends_with(".processing"), "{bad:?}");
    assert!(bad[1].starts_with("c.json."), "{bad:?}");
    assert_eq!(stats.bad[0], ob.bad_dir().join(&bad[0]));
    assert_eq!(fs::read_to_string(&stats.bad[0]).unwrap(), "not json at all");
    assert!(listing(&ob.new_dir()).is_empty());
}

#[test]
fn empty_and_typeless_files_are_deleted_unrun() {
    let (_d, ob) = outbox();
    let young = put(&ob, "0.json", "");
    let stats = ob.drain(PROCESSING_STALE_AFTER, |c| panic!("ran {c:?}"));
    assert_eq!(stats, DrainStats { skipped: 1, ..DrainStats::default() }, "an empty file just written may still be filling");
    assert!(young.exists());
    age(&young, 3);
    put(&ob, "a.json", "");
    age(&ob.new_dir().join("a.json"), 3);
    age(&put(&ob, "b.json", " \n\t"), 3);
    put(&ob, "c.json", r#"{"content":"no type"}"#);
    put(&ob, "d.json", r#"{"type":""}"#);
    put(&ob, "e.json", "[1,2]");
    let stats = ob.drain(PROCESSING_STALE_AFTER, |c| panic!("ran {c:?}"));
    assert_eq!(stats, DrainStats { dropped: 6, ..DrainStats::default() });
    assert!(listing(&ob.new_dir()).is_empty());
    assert!(!ob.bad_dir().exists());
}

#[test]
fn a_command_written_in_place_in_two_parts_waits_for_its_writer_and_then_runs() {
    let (_d, ob) = outbox();
    let path = ob.new_dir().join("0.json");
    let mut writer = fs::File::create(&path).unwrap();
    writer.write_all(br#"{"type":"send","#).unwrap();
    // Young however slow this machine is (a future mtime counts as now); the next write
    // stamps it with the real time again.
    writer.set_modified(SystemTime::now() + Duration::from_secs(3600)).unwrap();
    put(&ob, "1.json", r#"{"type":"send","content":"beside"}"#);
    let mut seen = Vec::new();
    let stats = ob.drain(PROCESSING_STALE_AFTER, echo(&mut seen));
    assert_eq!(
        (seen.as_slice(), stats.skipped, stats.bad.len()),
        (["beside".to_string()].as_slice(), 1, 0),
        "the half command is not judged yet"
    );
    assert_eq!(listing(&ob.new_dir()), ["0.json"]);
    writer.write_all(br#""content":"whole"}"#).unwrap();
    drop(writer);
    let stats = ob.drain(PROCESSING_STALE_AFTER, echo(&mut seen));
    assert_eq!((seen.as_slice(), stats.processed), (["beside".to_string(), "whole".to_string()].as_slice(), 1));
    assert!(listing(&ob.new_dir()).is_empty() && !ob.bad_dir().exists());
}

#[test]
fn a_stale_processing_file_is_reclaimed_and_a_fresh_one_left() {
    let (_d, ob) = outbox();
    let stale = put(&ob, "cmd-1.json.01AAAAAAAAAAAAAAAAAAAAAAAA.processing", r#"{"type":"send","content":"stale"}"#);
    age(&stale, 61);
    let fresh = put(&ob, "cmd-2.json.01BBBBBBBBBBBBBBBBBBBBBBBB.processing", r#"{"type":"send","content":"fresh"}"#);
    age(&fresh, 10);
    let mut names = Vec::new();
    let stats = ob.drain(PROCESSING_STALE_AFTER, |c| {
        names.push((c.name.clone(), c.path.file_name().unwrap().to_str().unwrap().to_string()));
        None
    });
    assert_eq!(stats, DrainStats { processed: 1, reclaimed: 1, skipped: 1, ..DrainStats::default() });
    let (name, claimed) = &names[0];
    assert_eq!(name, "cmd-1.json.01AAAAAAAAAAAAAAAAAAAAAAAA.processing");
    let prefix = format!("{name}.retry-");
    assert!(claimed.starts_with(&prefix) && claimed.ends_with(".processing"), "{claimed}");
    assert_eq!(claimed.len(), prefix.len() + 26 + ".processing".len());
    assert_eq!(listing(&ob.new_dir()), ["cmd-2.json.01BBBBBBBBBBBBBBBBBBBBBBBB.processing"]);
}

#[test]
fn a_claim_is_renamed_with_a_ulid_and_a_fresh_mtime() {
    let (_d, ob) = outbox();
    let queued = put(&ob, "cmd-1.json", r#"{"type":"send","content":"x"}"#);
    // Queued long ago: the claim must not look stale to a second consumer.
    age(&queued, 3600);
    let stats = ob.drain(PROCESSING_STALE_AFTER, |c| {
        let name = c.path.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("cmd-1.json.") && name.ends_with(".processing"), "{name}");
        assert_eq!(name.len(), "cmd-1.json.".len() + 26 + ".processing".len());
        let mtime = fs::metadata(&c.path).unwrap().modified().unwrap();
        assert!(SystemTime::now().duration_since(mtime).unwrap_or_default() < Duration::from_secs(5));
        // A second consumer meanwhile leaves it alone.
        let other = ob.drain(PROCESSING_STALE_AFTER, |_| panic!("run twice"));
        assert_eq!(other.skipped, 1);
        assert_eq!(c.raw.get("content").and_then(Value::as_str), Some("x"));
        None
    });
    assert_eq!(stats.processed, 1);
}

#[test]
fn two_consumers_run_each_of_200_commands_once() {
    let (_d, ob) = outbox();
    for i in 0..200 {
        put(&ob, &format!("cmd-{i:020}-cmd-xxxxxx.json"), &format!(r#"{{"type":"send","content":"{i}"}}"#));
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let (ob, seen) = (ob.clone(), seen.clone());
            std::thread::spawn(move || {
                ob.drain(PROCESSING_STALE_AFTER, |c| {
                    if let OutboxCommand::Send { content, .. } = &c.command {
                        seen.lock().unwrap().push(content.clone());
                    }
                    None
                })
            })
        })
        .collect();
    let processed: usize = consumers.into_iter().map(|c| c.join().unwrap().processed).sum();
    let seen = seen.lock().unwrap();
    assert_eq!(processed, 200);
    assert_eq!(seen.len(), 200);
    let unique: BTreeSet<u32> = seen.iter().map(|s| s.parse().unwrap()).collect();
    assert_eq!(unique, (0..200).collect());
    assert!(listing(&ob.new_dir()).is_empty());
}

#[test]
fn rejections_become_replies_or_result_envelopes() {
    let (_d, ob) = outbox();
    put(&ob, "a.json", r#"{"type":"send","group":"ops","content":"hi","broadcast":"false"}"#);
    put(&ob, "b.json", r#"{"type":"task_update","group":"ops","idempotency_key":"i-1"}"#);
    put(&ob, "c.json", r#"{"type":"send","content":""}"#);
    let stats = ob.drain(PROCESSING_STALE_AFTER, |c| panic!("ran {c:?}"));
    assert_eq!(stats.reply, "Failed to send to group 'ops': broadcast must be a JSON boolean.");
    assert_eq!(stats.processed, 3);
    assert_eq!(stats.results.len(), 1);
    let envelope: Value = serde_json::from_str(&fs::read_to_string(&stats.results[0]).unwrap()).unwrap();
    assert_eq!(envelope["command_type"], "task_update");
    assert_eq!(envelope["ok"], false);
    assert_eq!(envelope["idempotency_key"], "i-1");
    assert_eq!(envelope["error_code"], serde_json::to_value(ErrorCode::MissingTask).unwrap());
    assert_eq!(envelope["message"], "task_id or task_key is required.");
    assert!(listing(&ob.new_dir()).is_empty());
}

#[test]
fn a_missing_new_folder_is_an_empty_queue() {
    let dir = tempfile::tempdir().unwrap();
    let ob = Outbox::at(dir.path().join("none"));
    assert_eq!(ob.drain(PROCESSING_STALE_AFTER, |_| None), DrainStats::default());
}
