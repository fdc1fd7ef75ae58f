use super::*;
use cicy_protocol::event::TurnOutcome;

fn text(s: &str) -> EventKind {
    EventKind::TextDelta { text: s.into() }
}

fn seqs(events: &[Event]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

async fn take(sub: &mut Subscription, n: usize) -> Vec<Event> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        out.push(Event::clone(&sub.next().await.unwrap()));
    }
    out
}

fn hwm(ws: &Path) -> String {
    std::fs::read_to_string(events_dir(ws).join("hwm")).unwrap()
}

#[test]
fn after_kill_9_a_restart_numbers_above_every_reserved_seq() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let events = AgentEvents::open(ws, "w-1", None).unwrap();
        assert_eq!(events.emit(text("a")), 1);
        events.flush().await.unwrap();
        // Queued but never written: the writer task does not run again before the runtime goes.
        assert_eq!(events.emit(text("b")), 2);
    });
    drop(rt);
    assert_eq!(hwm(ws), "1024");
    assert_eq!(seqs(&read_after(ws, 0, 10).unwrap().events), vec![1]);

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    rt.block_on(async {
        let events = AgentEvents::open(ws, "w-1", None).unwrap();
        assert_eq!(events.last_seq(), 1);
        assert_eq!(events.emit(text("c")), 1025);
        events.close().await.unwrap();
    });
    assert_eq!(seqs(&read_after(ws, 0, 10).unwrap().events), vec![1, 1025]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_clean_close_numbering_goes_on_without_a_jump_and_later_emits_are_no_ops() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let events = AgentEvents::open(ws, "w-1", None).unwrap();
    let mut sub = events.subscribe(None).await;
    assert_eq!(events.emit(text("a")), 1);
    events.emitter().emit(EventKind::TurnEnded { outcome: TurnOutcome::Completed });
    assert_eq!(events.last_seq(), 2);
    events.close().await.unwrap();
    assert_eq!(events.emit(text("late")), 0);
    events.close().await.unwrap();
    events.flush().await.unwrap();
    assert_eq!(seqs(&take(&mut sub, 2).await), vec![1, 2]);
    assert_eq!(sub.next().await, None);
    assert_eq!(hwm(ws), "1024");

    let events = AgentEvents::open(ws, "w-1", None).unwrap();
    assert_eq!(events.last_seq(), 2);
    assert_eq!(events.emit(text("b")), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_the_ring_still_holds_comes_from_the_ring_then_goes_live() {
    let dir = tempfile::tempdir().unwrap();
    let events = AgentEvents::open(dir.path(), "w-1", None).unwrap();
    for i in 1..=10 {
        events.emit(text(&i.to_string()));
    }
    let mut sub = events.subscribe(Some(4)).await;
    let got = take(&mut sub, 6).await;
    assert_eq!(seqs(&got), vec![5, 6, 7, 8, 9, 10]);
    assert_eq!(got[0], Event { seq: 5, agent_id: "w-1".into(), kind: text("5") });
    events.emit(text("11"));
    assert_eq!(sub.next().await.map(|e| e.seq), Some(11));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_older_than_the_ring_comes_from_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let events = AgentEvents::open(dir.path(), "w-1", None).unwrap();
    for _ in 0..3000 {
        events.emit(text("x"));
    }
    let mut sub = events.subscribe(Some(100)).await;
    assert_eq!(seqs(&take(&mut sub, 2900).await), (101..=3000).collect::<Vec<_>>());
    events.emit(text("y"));
    assert_eq!(sub.next().await.map(|e| e.seq), Some(3001));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_older_than_the_kept_files_starts_with_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    // Every line the same length (seq digits + padding = 5), 100 lines a file.
    let pad = |seq: u64| "x".repeat(5 - seq.to_string().len());
    let line_len = serde_json::to_string(&Event { seq: 1, agent_id: "w-1".into(), kind: text(&pad(1)) }).unwrap().len();
    let events = AgentEvents::open_with(dir.path(), "w-1", None, 100 * (line_len as u64 + 1)).unwrap();
    for seq in 1..=3000 {
        assert_eq!(events.emit(text(&pad(seq))), seq);
    }
    // Files keep 2501–3000 (five of 100); the ring 953–3000.
    let mut sub = events.subscribe(Some(0)).await;
    let got = take(&mut sub, 501).await;
    assert_eq!(got[0], Event { seq: 2500, agent_id: "w-1".into(), kind: EventKind::Gap { from: 1, to: 2500 } });
    assert_eq!(seqs(&got[1..]), (2501..=3000).collect::<Vec<_>>());
    events.emit(text("y"));
    assert_eq!(sub.next().await.map(|e| e.seq), Some(3001));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_subscriber_is_refilled_without_a_hole() {
    let dir = tempfile::tempdir().unwrap();
    let events = AgentEvents::open(dir.path(), "w-1", None).unwrap();
    let mut sub = events.subscribe(None).await;
    // More than the live channel holds, before the subscriber reads one.
    for _ in 0..5000 {
        events.emit(text("x"));
    }
    let got = take(&mut sub, 5000).await;
    assert_eq!(seqs(&got), (1..=5000).collect::<Vec<_>>());
    assert!(got.iter().all(|e| e.kind == text("x")));
    events.emit(text("y"));
    assert_eq!(sub.next().await.map(|e| e.seq), Some(5001));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_subscribers_see_the_same_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let global = crate::eventlog::GlobalFeed::new(1);
    let mut all = global.subscribe(None);
    let events = AgentEvents::open(dir.path(), "w-1", Some(global)).unwrap();
    let mut live = events.subscribe(None).await;
    let mut replayed = events.subscribe(Some(0)).await;
    let emitter = events.clone();
    let producer = tokio::spawn(async move {
        for i in 0..300 {
            emitter.emit(text(&i.to_string()));
            tokio::task::yield_now().await;
        }
    });
    let a = take(&mut live, 300).await;
    let b = take(&mut replayed, 300).await;
    producer.await.unwrap();
    assert_eq!(seqs(&a), (1..=300).collect::<Vec<_>>());
    assert_eq!(a, b);
    assert_eq!(all.next().await, Some(crate::eventlog::global::Item::Event(1, a[0].clone().into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_writer_in_between_makes_the_bus_number_above_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let events = AgentEvents::open(ws, "w-1", None).unwrap();
    events.emit(text("a"));
    events.emit(text("a"));
    // Written, so the writer let the lease go.
    events.flush().await.unwrap();

    let mut cli = EventLog::open(ws, "w-1").unwrap();
    assert_eq!(cli.lease(None).unwrap(), 3..=1024);
    cli.append(&[Event { seq: 3, agent_id: "w-1".into(), kind: text("cli") }]).unwrap();
    cli.unlease(3).unwrap();

    assert_eq!(events.emit(text("a")), 4);
    events.flush().await.unwrap();
    assert_eq!(seqs(&read_after(ws, 0, 10).unwrap().events), vec![1, 2, 3, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbering_runs_on_through_reserved_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let events = AgentEvents::open(ws, "w-1", None).unwrap();
    for seq in 1..=2500 {
        assert_eq!(events.emit(text("x")), seq);
    }
    events.close().await.unwrap();
    // 3072 is the block 2500 falls in, however far the writer task lags behind the emits: a
    // request for the next block that reaches it after the emits reserved that block
    // themselves reserves nothing (it used to reserve 4096 under load).
    assert_eq!(hwm(ws), "3072");
    let replay = read_after(ws, 0, 3000).unwrap();
    assert_eq!(seqs(&replay.events), (1..=2500).collect::<Vec<_>>());
}

#[test]
fn subscriptions_can_move_between_threads() {
    fn is_send<T: Send>(_: &T) {}
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let events = AgentEvents::open(dir.path(), "w-1", None).unwrap();
        let mut sub = events.subscribe(Some(0)).await;
        is_send(&sub.next());
        is_send(&events.subscribe(None));
        is_send(&events.close());
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_n_are_the_newest_when_asked_and_events_emitted_before_the_first_read_follow_them() {
    let dir = tempfile::tempdir().unwrap();
    let events = AgentEvents::open(dir.path(), "w-1", None).unwrap();
    for t in ["a", "b", "c", "d"] {
        events.emit(text(t));
    }
    let mut sub = events.subscribe_last(2).await;
    // Logged before the stream is first read, as when the server task that reads it is slow
    // to be polled: they follow the two asked for, they are not counted among them.
    for t in ["e", "f", "g"] {
        events.emit(text(t));
    }
    events.flush().await.unwrap();
    let got = tokio::time::timeout(std::time::Duration::from_secs(30), take(&mut sub, 5)).await.expect("five events, not fewer");
    assert_eq!(seqs(&got), vec![3, 4, 5, 6, 7]);
    events.close().await.unwrap();
}
