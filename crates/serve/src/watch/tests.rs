//! Tests of the inbox watch on real folders and real inotify/poll events. Waits are on the
//! wake channel with a generous timeout; "nothing else was sent" is shown with a sentinel
//! file in a second inbox (one inotify queue, one task: an earlier wake would arrive first).

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use notify::event::{EventKind, Flag};
use tempfile::TempDir;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::time::timeout;

use super::scan::{classify, handler, is_pending_name, Backend};
use super::watchers::is_limit;
use super::*;

const WAIT: Duration = Duration::from_secs(10);

fn quiet() -> WatchOptions {
    WatchOptions { rescan_every: Duration::from_secs(3600), ..WatchOptions::default() }
}

fn inbox(tmp: &TempDir, n: usize) -> PathBuf {
    tmp.path().join(format!("ws{n}/.cicy/messages/inbox"))
}

/// Starts a watch over `n` inboxes `w-1` … `w-n` (folders not made beforehand).
fn start(tmp: &TempDir, n: usize, opts: WatchOptions) -> (Vec<PathBuf>, InboxWatch, UnboundedReceiver<String>) {
    let dirs: Vec<PathBuf> = (1..=n).map(|i| inbox(tmp, i)).collect();
    let list = dirs.iter().enumerate().map(|(i, d)| (format!("w-{}", i + 1), d.clone())).collect();
    let (tx, rx) = unbounded_channel();
    let watch = InboxWatch::start(list, tx, opts).unwrap();
    (dirs, watch, rx)
}

async fn next(rx: &mut UnboundedReceiver<String>) -> String {
    timeout(WAIT, rx.recv()).await.expect("a wake within the wait").expect("the channel is open")
}

fn drain(rx: &mut UnboundedReceiver<String>) -> Vec<String> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

#[tokio::test]
async fn tmp_then_rename_wakes_the_agent() {
    let tmp = TempDir::new().unwrap();
    let (dirs, _watch, mut rx) = start(&tmp, 1, quiet());
    fs::write(dirs[0].join(".m1.md.tmp"), "---\nfrom: w-9\n---\nhi\n").unwrap();
    fs::rename(dirs[0].join(".m1.md.tmp"), dirs[0].join("m1.md")).unwrap();
    assert_eq!(next(&mut rx).await, "w-1");
}

#[tokio::test]
async fn plain_write_wakes_once() {
    let tmp = TempDir::new().unwrap();
    let (dirs, _watch, mut rx) = start(&tmp, 2, quiet());
    // Create, Modify and Close(Write): one wake.
    fs::write(dirs[0].join("m1.md"), "hi\n").unwrap();
    assert_eq!(next(&mut rx).await, "w-1");
    fs::write(dirs[1].join("sentinel.md"), "hi\n").unwrap();
    assert_eq!(next(&mut rx).await, "w-2");
}

#[tokio::test]
async fn a_file_written_in_chunks_wakes_only_when_its_writer_closes_it() {
    use std::io::Write;
    let tmp = TempDir::new().unwrap();
    let (dirs, _watch, mut rx) = start(&tmp, 2, quiet());
    let mut f = fs::File::create(dirs[0].join("slow.md")).unwrap();
    f.write_all(b"---\nfrom: slowpoke\n---\n\npart one").unwrap();
    f.sync_all().unwrap();
    // Longer than the debounce: a wake now would claim "part one" alone.
    fs::write(dirs[1].join("sentinel.md"), "hi\n").unwrap();
    assert_eq!(next(&mut rx).await, "w-2");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(drain(&mut rx), Vec::<String>::new());
    f.write_all(b" part two").unwrap();
    drop(f);
    assert_eq!(next(&mut rx).await, "w-1");
}

#[tokio::test]
async fn temp_hidden_non_md_and_folder_names_do_not_wake() {
    let tmp = TempDir::new().unwrap();
    let (dirs, _watch, mut rx) = start(&tmp, 2, quiet());
    fs::write(dirs[0].join(".m1.md.tmp"), "hi\n").unwrap();
    fs::write(dirs[0].join(".hidden.md"), "hi\n").unwrap();
    fs::write(dirs[0].join("m1.txt"), "hi\n").unwrap();
    fs::create_dir(dirs[0].join("folder.md")).unwrap();
    fs::write(dirs[1].join("sentinel.md"), "hi\n").unwrap();
    assert_eq!(next(&mut rx).await, "w-2");
}

#[tokio::test]
async fn two_files_in_a_burst_wake_once() {
    let tmp = TempDir::new().unwrap();
    // A wide window so a slow machine cannot split the burst; the gap is the scenario's
    // (docs/design.md §10: two files 10 ms apart), it waits for nothing.
    let opts = WatchOptions { debounce: Duration::from_millis(500), ..quiet() };
    let (dirs, _watch, mut rx) = start(&tmp, 2, opts);
    fs::write(dirs[0].join("a.md"), "a\n").unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    fs::write(dirs[0].join("b.md"), "b\n").unwrap();
    assert_eq!(next(&mut rx).await, "w-1");
    fs::write(dirs[1].join("sentinel.md"), "hi\n").unwrap();
    assert_eq!(next(&mut rx).await, "w-2");
}

#[tokio::test]
async fn start_scan_sends_agents_with_files_dropped_while_down() {
    let tmp = TempDir::new().unwrap();
    for (n, name) in [(1, "m1.md"), (3, ".m3.md.tmp"), (4, "m4.md")] {
        fs::create_dir_all(inbox(&tmp, n)).unwrap();
        fs::write(inbox(&tmp, n).join(name), "hi\n").unwrap();
    }
    let (dirs, _watch, mut rx) = start(&tmp, 4, quiet());
    // Sent before `start` returned; ws2 had no inbox and now has one.
    assert_eq!(drain(&mut rx), ["w-1", "w-4"]);
    assert!(dirs[1].is_dir());
}

#[tokio::test]
async fn one_inbox_shared_by_two_agents_wakes_both() {
    let tmp = TempDir::new().unwrap();
    let dir = inbox(&tmp, 1);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("m1.md"), "hi\n").unwrap();
    let (tx, mut rx) = unbounded_channel();
    let _watch = InboxWatch::start(vec![("w-1".into(), dir.clone()), ("w-2".into(), dir.clone())], tx, quiet()).unwrap();
    assert_eq!(drain(&mut rx), ["w-1", "w-2"]);
}

#[tokio::test]
async fn removed_and_recreated_inbox_is_watched_again() {
    let tmp = TempDir::new().unwrap();
    let (dirs, watch, mut rx) = start(&tmp, 1, quiet());
    fs::remove_dir_all(&dirs[0]).unwrap();
    fs::create_dir_all(&dirs[0]).unwrap();
    fs::write(dirs[0].join("m1.md"), "hi\n").unwrap();
    assert_eq!(next(&mut rx).await, "w-1");
    assert_eq!(watch.mode(), WatchMode::Notify);
}

#[tokio::test]
async fn inbox_moved_away_and_replaced_is_watched_again() {
    let tmp = TempDir::new().unwrap();
    let (dirs, _watch, mut rx) = start(&tmp, 1, quiet());
    fs::rename(&dirs[0], dirs[0].with_file_name("inbox.old")).unwrap();
    fs::create_dir(&dirs[0]).unwrap();
    fs::write(dirs[0].join("m1.md"), "hi\n").unwrap();
    assert_eq!(next(&mut rx).await, "w-1");
}

#[tokio::test]
async fn a_deleted_workspace_is_not_brought_back() {
    let tmp = TempDir::new().unwrap();
    let (dirs, _watch, mut rx) = start(&tmp, 2, quiet());
    fs::remove_dir_all(tmp.path().join("ws1")).unwrap();
    // The removal is reported (and handled) before the sentinel's file: one queue, one task.
    fs::write(dirs[1].join("sentinel.md"), "hi\n").unwrap();
    assert_eq!(next(&mut rx).await, "w-2");
    assert!(!tmp.path().join("ws1").exists());
    assert!(!dirs[0].exists());
}

/// A symlink `m1.md` to a file that does not exist yet is not a message when its Create event
/// comes; making its target (outside the inbox) makes it one without any event in the inbox.
/// Only the periodic full scan can find it.
#[tokio::test]
async fn periodic_scan_finds_a_file_no_event_announced() {
    let tmp = TempDir::new().unwrap();
    let opts = WatchOptions { rescan_every: Duration::from_millis(200), ..WatchOptions::default() };
    let (dirs, _watch, mut rx) = start(&tmp, 2, opts);
    let target = tmp.path().join("elsewhere.md");
    std::os::unix::fs::symlink(&target, dirs[0].join("m1.md")).unwrap();
    fs::write(dirs[1].join("sentinel.md"), "hi\n").unwrap();
    assert_eq!(next(&mut rx).await, "w-2");
    fs::write(&target, "hi\n").unwrap();
    assert_eq!(next(&mut rx).await, "w-1");
}

#[tokio::test]
async fn watcher_error_overflow_and_lost_watch_trigger_a_full_scan() {
    let tmp = TempDir::new().unwrap();
    fs::create_dir_all(inbox(&tmp, 1)).unwrap();
    fs::write(inbox(&tmp, 1).join("m1.md"), "hi\n").unwrap();
    let (dirs, watch, mut rx) = start(&tmp, 2, quiet());
    assert_eq!(drain(&mut rx), ["w-1"]);
    let mut report = handler(lock(&watch.watchers).signals(), Backend::Notify);
    report(Err(notify::Error::generic("injected")));
    assert_eq!(next(&mut rx).await, "w-1");
    report(Ok(notify::Event::new(EventKind::Other).set_flag(Flag::Rescan)));
    assert_eq!(next(&mut rx).await, "w-1");
    let io = std::io::Error::other("injected");
    report(Err(notify::Error::io(io).add_path(dirs[1].clone())));
    assert_eq!(next(&mut rx).await, "w-1");
    // The re-added watch of ws2 works.
    fs::write(dirs[1].join("m2.md"), "hi\n").unwrap();
    assert_eq!(next(&mut rx).await, "w-2");
}

#[tokio::test]
async fn force_poll_wakes_through_the_poller() {
    let tmp = TempDir::new().unwrap();
    let opts = WatchOptions { force_poll: true, poll_interval: Duration::from_millis(100), ..quiet() };
    let (dirs, watch, mut rx) = start(&tmp, 1, opts);
    assert_eq!(watch.mode(), WatchMode::Poll);
    fs::write(dirs[0].join(".m1.md.tmp"), "hi\n").unwrap();
    fs::rename(dirs[0].join(".m1.md.tmp"), dirs[0].join("m1.md")).unwrap();
    assert_eq!(next(&mut rx).await, "w-1");
}

#[tokio::test]
async fn watch_cap_puts_later_inboxes_on_the_poller() {
    let tmp = TempDir::new().unwrap();
    let opts = WatchOptions { max_notify_watches: Some(1), poll_interval: Duration::from_millis(100), ..quiet() };
    let (dirs, watch, mut rx) = start(&tmp, 3, opts);
    assert_eq!(watch.mode(), WatchMode::Mixed { polled: 2 });
    fs::write(dirs[2].join("m3.md"), "hi\n").unwrap();
    assert_eq!(next(&mut rx).await, "w-3");
    fs::write(dirs[0].join("m1.md"), "hi\n").unwrap();
    assert_eq!(next(&mut rx).await, "w-1");
    watch.add("w-4", &inbox(&tmp, 4)).unwrap();
    assert_eq!(watch.mode(), WatchMode::Mixed { polled: 3 });
}

#[tokio::test]
async fn add_watches_a_new_inbox_and_reports_a_waiting_file() {
    let tmp = TempDir::new().unwrap();
    let (_dirs, watch, mut rx) = start(&tmp, 1, quiet());
    let two = inbox(&tmp, 2);
    watch.add("w-2", &two).unwrap();
    assert_eq!(drain(&mut rx), Vec::<String>::new());
    fs::write(two.join("m2.md"), "hi\n").unwrap();
    assert_eq!(next(&mut rx).await, "w-2");
    let three = inbox(&tmp, 3);
    fs::create_dir_all(&three).unwrap();
    fs::write(three.join("m3.md"), "hi\n").unwrap();
    watch.add("w-3", &three).unwrap();
    assert_eq!(drain(&mut rx), ["w-3"]);
    assert_eq!(watch.mode(), WatchMode::Notify);
}

#[tokio::test]
async fn stop_ends_the_task_and_closes_the_channel() {
    let tmp = TempDir::new().unwrap();
    let (_dirs, watch, mut rx) = start(&tmp, 1, quiet());
    watch.stop();
    assert_eq!(timeout(WAIT, rx.recv()).await.unwrap(), None);
}

#[test]
fn start_outside_a_runtime_is_an_error() {
    let (tx, _rx) = unbounded_channel();
    assert!(matches!(InboxWatch::start(Vec::new(), tx, quiet()), Err(WatchError::NoRuntime)));
}

#[test]
fn pending_names_follow_the_inbox_rule() {
    let yes = ["20261201T0930_hi_1_2_3.md", "a.md"];
    let no = [".a.md.tmp", ".a.md", "a.md.tmp", "a.txt", "a.MD", ".md", "md"];
    assert!(yes.iter().all(|n| is_pending_name(n.as_ref())));
    assert_eq!(no.iter().filter(|n| is_pending_name(n.as_ref())).count(), 0);
}

#[test]
fn limit_errors_are_recognised() {
    let io = |code| notify::Error::io(std::io::Error::from_raw_os_error(code));
    assert!(is_limit(&notify::Error::new(notify::ErrorKind::MaxFilesWatch)));
    assert!(is_limit(&io(libc::ENOSPC)));
    assert!(is_limit(&io(libc::EMFILE)));
    assert!(!is_limit(&io(libc::EACCES)));
    assert!(!is_limit(&notify::Error::path_not_found()));
}

#[test]
fn classify_keeps_close_write_symlinks_rename_into_and_removal_only() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().to_path_buf();
    fs::write(dir.join("m.md"), "hi\n").unwrap();
    let run = |event: notify::Event| {
        let mut out = Vec::new();
        classify(Ok(event), |s| out.push(s));
        out
    };
    use notify::event::{AccessKind, CreateKind, DataChange, ModifyKind, RemoveKind, RenameMode};
    let at = |kind| notify::Event::new(kind).add_path(dir.join("m.md"));
    // A regular file counts when its writer closes it; a symlink when it is made.
    assert_eq!(run(at(EventKind::Create(CreateKind::File))), []);
    assert_eq!(run(at(EventKind::Access(AccessKind::Close(notify::event::AccessMode::Write)))), [Signal::File(dir.clone())]);
    assert_eq!(run(at(EventKind::Create(CreateKind::Any))), [Signal::File(dir.clone())]);
    std::os::unix::fs::symlink(dir.join("m.md"), dir.join("l.md")).unwrap();
    let link = notify::Event::new(EventKind::Create(CreateKind::File)).add_path(dir.join("l.md"));
    assert_eq!(run(link), [Signal::File(dir.clone())]);
    assert_eq!(run(at(EventKind::Modify(ModifyKind::Name(RenameMode::To)))), [Signal::File(dir.clone())]);
    assert_eq!(run(at(EventKind::Modify(ModifyKind::Data(DataChange::Any)))), []);
    assert_eq!(run(at(EventKind::Access(AccessKind::Any))), []);
    assert_eq!(run(at(EventKind::Remove(RemoveKind::Folder))), [Signal::Gone(dir.join("m.md"))]);
}

#[test]
fn mode_serializes_in_snake_case() {
    let json = |m: WatchMode| serde_json::to_string(&m).unwrap();
    assert_eq!(json(WatchMode::Notify), r#""notify""#);
    assert_eq!(json(WatchMode::Mixed { polled: 2 }), r#"{"mixed":{"polled":2}}"#);
    assert_eq!(json(WatchMode::Poll), r#""poll""#);
}
