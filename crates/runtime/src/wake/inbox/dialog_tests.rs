use std::fs;
use std::path::Path;

use super::*;

fn put(dir: &Path, name: &str, ts: &str, from: &str, body: &str) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join(name), format!("---\nfrom: {from}\ntimestamp: {ts}\n---\n\n{body}\n")).unwrap();
}

fn fixture() -> (tempfile::TempDir, Mailbox) {
    let dir = tempfile::tempdir().unwrap();
    let mb = Mailbox::of_workspace(dir.path());
    put(&mb.archive_dir(), "b.md", "2026-12-01T09:00:00", "ann", "  Is the build green?  ");
    // Same minute as b.md: inbox before outbox, whatever the names.
    put(&mb.outbox_dir(), "a.md", "2026-12-01T09:00:00", "agent", "Yes.");
    put(&mb.archive_dir(), "c.md", "2026-12-01T10:15:00", "ann", "Deploy it.");
    put(&mb.outbox_dir(), "d.md", "2026-12-01T10:16:30", "agent", "Deployed.");
    put(&mb.inbox_dir(), "e.md", "2026-12-01T11:00:00", "ann", "pending, not dialog yet");
    (dir, mb)
}

#[test]
fn transcript_with_the_new_marker() {
    let (_d, mb) = fixture();
    let text = dialog(&mb, &DialogFilter::default(), &["c.md".to_string()]).unwrap();
    assert_eq!(
        text,
        "[2026-12-01 09:00] from: ann\nIs the build green?\n\n\
         [2026-12-01 09:00] from: agent\nYes.\n\n\
         ────────── new since last session ──────────\n\
         [2026-12-01 10:15] from: ann\nDeploy it.\n\n\
         [2026-12-01 10:16] from: agent\nDeployed.\n\n"
    );
}

#[test]
fn filters_and_the_omitted_tail() {
    let (_d, mb) = fixture();
    assert_eq!(
        dialog(&mb, &DialogFilter::Last(1), &["b.md".to_string()]).unwrap(),
        "[2026-12-01 10:16] from: agent\nDeployed.\n\n\
         ────────── new since last session ──────────\n(1 new messages omitted by --last)\n"
    );
    assert_eq!(dialog(&mb, &DialogFilter::Since("2026-12-01T10:16".into()), &[]).unwrap(), "[2026-12-01 10:16] from: agent\nDeployed.\n\n");
    assert_eq!(dialog(&mb, &DialogFilter::Since("2026-12-02".into()), &[]).unwrap(), "(no messages shown by --since 2026-12-02)\n");
    let all: Vec<String> =
        dialog_messages(&mb, &DialogFilter::All).unwrap().into_iter().map(|(f, m)| format!("{}:{}", f.as_str(), m.name)).collect();
    assert_eq!(all, ["inbox:b.md", "outbox:a.md", "inbox:c.md", "outbox:d.md"]);
    let since: Vec<String> =
        dialog_messages(&mb, &DialogFilter::Since("2026-12-01 10:15:00".into())).unwrap().into_iter().map(|(_, m)| m.name).collect();
    assert_eq!(since, ["c.md", "d.md"]);
    match dialog(&mb, &DialogFilter::Since("tomorrow".into()), &[]) {
        Err(e @ InboxError::BadSince { .. }) => {
            assert_eq!(e.to_string(), "--since `tomorrow` is not a time: use YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS] or YYYY-MM-DD HH:MM[:SS]")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn empty_history() {
    let dir = tempfile::tempdir().unwrap();
    let mb = Mailbox::of_workspace(dir.path());
    put(&mb.inbox_dir(), "e.md", "2026-12-01T11:00:00", "ann", "pending only");
    assert_eq!(dialog(&mb, &DialogFilter::All, &[]).unwrap(), "(no dialog history yet)\n");
    assert!(matches!(dialog(&mb, &DialogFilter::Since("soon".into()), &[]), Err(InboxError::BadSince { .. })));
}
