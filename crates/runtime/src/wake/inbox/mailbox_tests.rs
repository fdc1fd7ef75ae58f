use std::fs::File;
use std::time::UNIX_EPOCH;

use super::*;

fn mailbox() -> (tempfile::TempDir, Mailbox) {
    let dir = tempfile::tempdir().unwrap();
    let mb = Mailbox::of_workspace(dir.path());
    (dir, mb)
}

fn put(dir: &Path, name: &str, content: &str) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join(name), content).unwrap();
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

fn msg(ts: &str, from: &str, body: &str) -> String {
    format!("---\nfrom: {from}\nsubject: s\ntimestamp: {ts}\n---\n\n{body}\n")
}

fn body(text: &str) -> NewMessage {
    NewMessage { from: "human".into(), body: text.into(), ..Default::default() }
}

/// `<YYYY-MM-DDTHH-MM-SS>_<base>_<32 hex>_<8 hex>_<4 hex>.md` (cryo A6).
fn assert_name_shape(name: &str, base: &str) {
    let stem = name.strip_suffix(".md").unwrap();
    let parts: Vec<&str> = stem.rsplitn(4, '_').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase());
    assert!(hex(parts[0], 4) && hex(parts[1], 8) && hex(parts[2], 32), "{name}");
    assert_eq!(parts[1], format!("{:08x}", std::process::id()));
    let (ts, b) = parts[3].split_once('_').unwrap();
    assert!(chrono::NaiveDateTime::parse_from_str(ts, "%Y-%m-%dT%H-%M-%S").is_ok(), "{name}");
    assert_eq!(b, base);
}

#[test]
fn write_is_atomic_and_parses_back_as_written() {
    let (_d, mb) = mailbox();
    let mut m = body("line one\nline two\n");
    m.meta.insert("thread".into(), "t1".into());
    let written = mb.write(Folder::Inbox, &m).unwrap();
    assert_name_shape(&written.name, "line-one");
    assert_eq!(names_in(&mb.inbox_dir()), [written.name.as_str()]);
    let on_disk = fs::read_to_string(mb.inbox_dir().join(&written.name)).unwrap();
    let expect = format!("---\nfrom: human\nsubject: line one\ntimestamp: {}\nthread: t1\n---\n\nline one\nline two\n", written.timestamp);
    assert_eq!(on_disk, expect);
    assert_eq!(mb.read(&written.name).unwrap(), written);
    let second = mb.write(Folder::Outbox, &body("again")).unwrap();
    assert_ne!(second.name, written.name);
    assert_eq!(names_in(&mb.outbox_dir()), [second.name.as_str()]);
}

#[test]
fn write_refuses_a_blank_body_and_bad_meta_keys_and_writes_nothing() {
    let (_d, mb) = mailbox();
    assert!(matches!(mb.write(Folder::Inbox, &body(" \n")), Err(InboxError::EmptyBody)));
    for key in ["from", "a:b", "a b", "---x", "", "x\ny"] {
        let mut m = body("b");
        m.meta.insert(key.into(), "v".into());
        match mb.write(Folder::Inbox, &m) {
            Err(InboxError::BadMetaKey { key: k }) => assert_eq!(k, key),
            other => panic!("{key:?}: {other:?}"),
        }
    }
    assert!(!mb.inbox_dir().exists());
}

#[test]
fn pending_ignores_temp_files_other_names_and_folders() {
    let (_d, mb) = mailbox();
    let inbox = mb.inbox_dir();
    put(&inbox, "b.md", &msg("2026-12-01T09:00:01", "bob", "two"));
    put(&inbox, "a.md", &msg("2026-12-01T09:00:00", "ann", "one"));
    put(&inbox, ".x.md.tmp", "---\nhalf");
    put(&inbox, ".hidden.md", &msg("2026-12-01T09:00:00", "x", "x"));
    put(&inbox, "x.txt", &msg("2026-12-01T09:00:00", "x", "x"));
    fs::create_dir_all(inbox.join("dir.md")).unwrap();
    put(&mb.archive_dir(), "old.md", &msg("2026-12-01T08:00:00", "x", "x"));
    let (parsed, unparsed) = mb.pending().unwrap();
    let names: Vec<&str> = parsed.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["a.md", "b.md"]);
    assert_eq!((parsed[0].from.as_str(), parsed[0].body.as_str()), ("ann", "one"));
    assert!(unparsed.is_empty());
    assert!(mb.has_pending());
}

#[test]
fn has_pending_without_parsing() {
    let (_d, mb) = mailbox();
    assert!(!mb.has_pending(), "no folder yet");
    put(&mb.inbox_dir(), ".a.md.tmp", "");
    put(&mb.inbox_dir(), "a.txt", "");
    fs::create_dir_all(mb.archive_dir()).unwrap();
    assert!(!mb.has_pending());
    put(&mb.inbox_dir(), "broken.md", "not a message");
    assert!(mb.has_pending());
}

#[test]
fn unparsable_files_are_reported_young_or_old() {
    let (_d, mb) = mailbox();
    let inbox = mb.inbox_dir();
    put(&inbox, "fresh.md", "---\nfrom: half");
    put(&inbox, "old.md", "plain text");
    fs::write(inbox.join("bytes.md"), b"---\nfrom: caf\xe9\n---\nx").unwrap();
    for name in ["old.md", "bytes.md"] {
        File::options().write(true).open(inbox.join(name)).unwrap().set_modified(UNIX_EPOCH).unwrap();
    }
    let (parsed, unparsed) = mb.pending().unwrap();
    assert!(parsed.is_empty());
    assert_eq!(
        unparsed,
        [
            Unparsed { name: "bytes.md".into(), error: "not UTF-8 (invalid byte at offset 13)".into(), young: false },
            Unparsed { name: "fresh.md".into(), error: "its front matter is not closed by a `---` line".into(), young: true },
            Unparsed { name: "old.md".into(), error: "it does not start with a `---` front matter line".into(), young: false },
        ]
    );
    mb.move_to_bad("old.md").unwrap();
    mb.move_to_bad("old.md").unwrap();
    assert_eq!(names_in(&mb.bad_dir()), ["old.md"]);
    assert_eq!(fs::read_to_string(mb.bad_dir().join("old.md")).unwrap(), "plain text");
    match mb.read("fresh.md") {
        Err(InboxError::Parse { path, reason }) => {
            assert_eq!(path, inbox.join("fresh.md"));
            assert_eq!(reason, "its front matter is not closed by a `---` line");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_timestamp_is_the_file_mtime() {
    let (_d, mb) = mailbox();
    put(&mb.inbox_dir(), "a.md", "---\nfrom: ann\n---\nhi");
    let t = UNIX_EPOCH + std::time::Duration::from_secs(1_780_000_000);
    File::options().write(true).open(mb.inbox_dir().join("a.md")).unwrap().set_modified(t).unwrap();
    let expect = DateTimeLocal::from(t).naive_local().format(format::TIMESTAMP_FORMAT).to_string();
    assert_eq!(mb.read("a.md").unwrap().timestamp, expect);
}

type DateTimeLocal = chrono::DateTime<chrono::Local>;

#[test]
fn archive_is_idempotent_and_read_follows_the_file() {
    let (_d, mb) = mailbox();
    put(&mb.inbox_dir(), "a.md", &msg("2026-12-01T09:00:00", "ann", "one"));
    put(&mb.inbox_dir(), "b.md", &msg("2026-12-01T09:00:01", "ann", "two"));
    let moves = [("a.md".to_string(), "a.md".to_string()), ("gone.md".to_string(), "gone.md".to_string())];
    mb.archive(&moves).unwrap();
    mb.archive(&moves).unwrap();
    assert_eq!(names_in(&mb.inbox_dir()), ["archive", "b.md"]);
    assert_eq!(names_in(&mb.archive_dir()), ["a.md"]);
    assert_eq!(mb.read("a.md").unwrap().body, "one");
    assert!(matches!(mb.archive(&[("../b.md".to_string(), "b.md".to_string())]), Err(InboxError::BadName { .. })));
    assert!(matches!(mb.read(".a.md"), Err(InboxError::BadName { .. })));
    match mb.read("nope.md") {
        Err(e @ InboxError::NotFound { .. }) => assert_eq!(
            e.to_string(),
            format!("no message `nope.md` in inbox/, inbox/archive/, outbox/ or outbox/archive/ of {}", mb.root().display())
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn page_walks_every_box_newest_first_by_cursor() {
    let (_d, mb) = mailbox();
    put(&mb.archive_dir(), "1.md", &msg("2026-12-01T09:00:00", "ann", "a1"));
    put(&mb.outbox_dir(), "2.md", &msg("2026-12-01T09:00:00", "agent", "o2"));
    put(&mb.inbox_dir(), "2.md", &msg("2026-12-01T09:00:00", "ann", "i2"));
    put(&mb.outbox_dir().join("archive"), "3.md", &msg("2026-12-01T09:00:00", "agent", "o3"));
    put(&mb.inbox_dir(), "4.md", &msg("2026-12-01T09:00:00", "bob", "i4"));
    put(&mb.inbox_dir(), "5.md", "broken");
    let page = |before: Option<&str>, limit| -> Vec<String> {
        mb.page(before, limit).unwrap().into_iter().map(|(f, m)| format!("{}|{}", m.name, f.as_str())).collect()
    };
    assert_eq!(page(None, 100), ["1.md|inbox", "2.md|inbox", "2.md|outbox", "3.md|outbox", "4.md|inbox"]);
    assert_eq!(page(None, 2), ["3.md|outbox", "4.md|inbox"]);
    assert_eq!(page(Some("3.md|outbox"), 2), ["2.md|inbox", "2.md|outbox"]);
    assert_eq!(page(Some("2.md|outbox"), 2), ["1.md|inbox", "2.md|inbox"]);
    assert_eq!(page(Some("2.md|inbox"), 2), ["1.md|inbox"]);
    assert_eq!(page(Some("1.md|inbox"), 2), Vec::<String>::new());
    assert!(matches!(mb.page(None, 0), Err(InboxError::BadLimit { limit: 0 })));
    assert!(matches!(mb.page(None, 101), Err(InboxError::BadLimit { limit: 101 })));
    for bad in ["2.md", "2.md|archive", "|inbox"] {
        assert!(matches!(mb.page(Some(bad), 5), Err(InboxError::BadCursor { .. })), "{bad}");
    }
}

#[test]
fn a_reused_name_never_overwrites_an_archived_or_bad_file() {
    let (_d, mb) = mailbox();
    let names = vec!["note.md".to_string()];
    for body in ["first", "second", "third"] {
        put(&mb.inbox_dir(), "note.md", &msg("2026-12-01T09:00:00", "ann", body));
        let to = mb.archive_names(&names);
        mb.archive(&[(names[0].clone(), to[0].clone())]).unwrap();
    }
    assert_eq!(names_in(&mb.archive_dir()), ["note.md", "note~1.md", "note~2.md"]);
    assert!(fs::read_to_string(mb.archive_dir().join("note~2.md")).unwrap().ends_with("third\n"));
    // Two pending names of one claim never get the same archive name.
    assert_eq!(mb.archive_names(&["note.md".to_string(), "note~3.md".to_string()]), ["note~3.md", "note~3~1.md"]);
    // Released: back under its inbox name, or beside a new file that took it meanwhile.
    put(&mb.inbox_dir(), "note.md", &msg("2026-12-01T09:00:00", "ann", "fourth"));
    mb.unarchive(&[("note.md".to_string(), "note~2.md".to_string())]).unwrap();
    assert_eq!(names_in(&mb.inbox_dir()), ["archive", "note.md", "note~1.md"]);
    assert!(fs::read_to_string(mb.inbox_dir().join("note~1.md")).unwrap().ends_with("third\n"));
    assert!(fs::read_to_string(mb.inbox_dir().join("note.md")).unwrap().ends_with("fourth\n"));
    for body in ["bad one", "bad two"] {
        put(&mb.inbox_dir(), "x.md", body);
        mb.move_to_bad("x.md").unwrap();
    }
    assert_eq!(names_in(&mb.bad_dir()), ["x.md", "x~1.md"]);
    assert_eq!(fs::read_to_string(mb.bad_dir().join("x~1.md")).unwrap(), "bad two");
}

#[test]
fn write_once_retried_after_a_kill_between_its_tmp_file_and_the_rename_writes_the_message_whole() {
    let (_d, mb) = mailbox();
    let key = ulid::Ulid::generate();
    let m = body("out:1: a note from w-3");
    let first = mb.write_once(Folder::Inbox, &m, key).unwrap();
    let path = mb.inbox_dir().join(&first.name);
    let whole = fs::read_to_string(&path).unwrap();
    // What a kill after part of the tmp file's write, before its rename, leaves.
    fs::remove_file(&path).unwrap();
    let tmp = mb.inbox_dir().join(format!(".{}.tmp", first.name));
    fs::write(&tmp, &whole[..whole.len() / 2]).unwrap();

    let again = mb.write_once(Folder::Inbox, &m, key).unwrap();
    assert_eq!(again, first);
    assert_eq!(names_in(&mb.inbox_dir()), [first.name.as_str()]);
    assert_eq!(fs::read_to_string(&path).unwrap(), whole);
    // Once there, a third try writes nothing.
    assert_eq!(mb.write_once(Folder::Inbox, &m, key).unwrap(), first);
    assert_eq!(names_in(&mb.inbox_dir()), [first.name.as_str()]);
}
