//! The snapshots a compaction leaves (docs/design.md §7, issue 7 item 21): a long turn with many
//! automatic compactions keeps the first and the last `compaction.keep_snapshots`
//! `current.<unix>.json` / `reply.<unix>.json` pairs, never more, and never touches the live
//! files.

use cicy::compact;
use cicy::conversation::history::{Archive, CurrentFile, HistoryStore};
use cicy::conversation::message::{ContentBlock, Message};

/// Names of the files in a conversation's folder, sorted.
fn names(store: &HistoryStore, conv: &str) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(store.conversation_dir(conv)).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

fn file_name(p: &std::path::Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn twenty_five_compactions_keep_the_first_and_the_last_twenty_snapshot_pairs() {
    let ws = tempfile::tempdir().unwrap();
    let store = HistoryStore::new(ws.path());
    let mut current = store.restore("w-1", "test-model").unwrap().current;
    let conv = current.conversation_id.clone();
    let mut taken: Vec<Archive> = Vec::new();
    for i in 0..25 {
        current.push(Message::user_text(format!("question {i}")));
        current.push(Message::assistant(vec![ContentBlock::text(format!("answer {i}"))]));
        store.save_current(&mut current).unwrap();
        let cut = current.messages.len();
        let done = compact::apply(&store, &mut current, cut, &format!("summary {i}"), 20).unwrap();
        taken.push(done.archive.expect("an archive"));
    }
    // Most of these fall within one second: the names must still sort in the order taken.
    for w in taken.windows(2) {
        assert!((w[0].unix, w[0].seq) < (w[1].unix, w[1].seq), "{:?} then {:?}", w[0].current, w[1].current);
    }

    let want: Vec<Archive> = taken[..1].iter().chain(&taken[5..]).cloned().collect();
    assert_eq!(store.archives(&conv).unwrap(), want);
    let mut expected = vec!["current.json".to_string(), "reply.json".to_string()];
    for a in &want {
        expected.push(file_name(&a.current));
        expected.push(file_name(a.reply.as_ref().expect("a reply copy")));
    }
    expected.sort();
    assert_eq!(names(&store, &conv), expected);

    // The first snapshot is the state before any compaction; the newest, before the 25th.
    let first: CurrentFile = serde_json::from_slice(&std::fs::read(&want[0].current).unwrap()).unwrap();
    assert_eq!(first.messages.len(), 2);
    let last: CurrentFile = serde_json::from_slice(&std::fs::read(&want[20].current).unwrap()).unwrap();
    assert_eq!(last.messages.len(), 24 * 3 + 2);
    // The live files are intact: current.json is the state after the 25th compaction.
    let live: CurrentFile = serde_json::from_slice(&std::fs::read(store.dir().join("current.json")).unwrap()).unwrap();
    assert_eq!(live, current);
    assert_eq!(live.messages.len(), 25 * 3);
    assert!(store.dir().join("reply.json").exists());
}

#[test]
fn keep_zero_leaves_only_the_first_snapshot_and_the_live_files() {
    let ws = tempfile::tempdir().unwrap();
    let store = HistoryStore::new(ws.path());
    let mut current = store.restore("w-1", "test-model").unwrap().current;
    let conv = current.conversation_id.clone();
    let mut first = None;
    for i in 0..3 {
        current.push(Message::user_text(format!("question {i}")));
        current.push(Message::assistant(vec![ContentBlock::text("ok")]));
        store.save_current(&mut current).unwrap();
        let cut = current.messages.len();
        let a = compact::apply(&store, &mut current, cut, "summary", 0).unwrap().archive.unwrap();
        first.get_or_insert(a);
    }
    let first = first.unwrap();
    assert_eq!(store.archives(&conv).unwrap(), std::slice::from_ref(&first));
    let mut expected =
        vec!["current.json".to_string(), "reply.json".to_string(), file_name(&first.current), file_name(&first.reply.unwrap())];
    expected.sort();
    assert_eq!(names(&store, &conv), expected);
}
