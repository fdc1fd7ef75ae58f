//! The in-memory side of an agent's event log: numbering, the ring, live subscribers and the
//! writer task (docs/design.md §9).
//!
//! Owns no file itself: it drives one [`EventLog`] from a tokio task. `emit` is synchronous;
//! it does I/O only to take the writer lease (the first event after the writer went idle) or
//! when the reserved range runs out before the writer reserved the next one. The writer writes
//! each batch it finds queued as soon as it wakes, so events reach the file well within
//! docs/design.md's "flushed 100 ms" without a timer; it fsyncs after `turn_ended`, and lets the
//! lease go whenever every event numbered so far is written.
//!
//! So another process logging the same agent (a CLI run with `--local`) waits at most for the
//! batch being written, then numbers above everything this process handed out: seqs increase
//! strictly in file order. Its events are in the files, so a replay from the files has them,
//! but they are never sent live nor kept in the ring.

use std::collections::VecDeque;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::{broadcast, mpsc, oneshot};

use super::global::GlobalFeed;
use super::{events_dir, files::log_file, read_after, seq_before_last, EventLog, EventLogError, Published, RESERVE_CHUNK, ROTATE_BYTES};
use cicy_protocol::event::{Emitter, Event, EventKind, EventSink};

/// docs/design.md §9: ring of 2048 (CMDC suggests 50–200; one answer exceeds it).
pub(super) const RING: usize = 2048;
/// Slots of the live channel; a subscriber further behind lags and is refilled.
const LIVE_CAPACITY: usize = 2048;
/// Queue entries the writer takes at once.
const BATCH: usize = 1024;
/// Events a catching-up subscriber reads from the files per step.
const PAGE: usize = 4096;

type Reply = oneshot::Sender<Result<(), EventLogError>>;

enum Msg {
    Event(Event),
    Flush(Reply),
    /// Reserve the next range ahead of the one ending at this seq (half of it is used); only
    /// sent under the lease, which the writer lets go only after handling it.
    Reserve {
        end: u64,
    },
    Close {
        reply: Reply,
    },
}

struct State {
    /// The next seq to hand out and the end of the current reserved range.
    next: u64,
    end: u64,
    spare: Option<RangeInclusive<u64>>,
    spare_requested: bool,
    last_seq: u64,
    ring: VecDeque<Published>,
    /// Every own event with a seq above this is in the ring.
    ring_floor: u64,
    live: Option<broadcast::Sender<Published>>,
    closed: bool,
    /// This process holds the writer lease; `next..=end` is only valid while it does.
    leased: bool,
    /// This process let the lease go cleanly, so `next..=end` is still good if nobody else
    /// took it since.
    resumable: bool,
}

/// The log with the range the writer reserved and not yet handed to the numbering state; an
/// `emit` that runs out takes it from here rather than reserving past it.
struct Slot {
    log: EventLog,
    spare: Option<RangeInclusive<u64>>,
}

/// Lock order: `state` before `slot`, never the other way.
struct Shared {
    agent_id: String,
    workspace: PathBuf,
    state: Mutex<State>,
    slot: Arc<Mutex<Slot>>,
    writer: mpsc::UnboundedSender<Msg>,
    global: Option<Arc<GlobalFeed>>,
}

/// An agent's event bus and persistent log; cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct AgentEvents(Arc<Shared>);

/// A mutex whose holder panicked still guards consistent data here (every update is a few
/// plain assignments), so poisoning is ignored.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl AgentEvents {
    /// Opens the log at `<workspace>/.cicy/events/` ([`EventLog::open`]) and spawns the writer
    /// task (the lease and a range are taken at the first `emit`), so it must be called inside a tokio runtime (blocking
    /// file I/O: call it through `crate::fsutil::blocking`). Every event is also sent on
    /// `global` when given (a server-wide stream).
    pub fn open(workspace: &Path, agent_id: &str, global: Option<Arc<GlobalFeed>>) -> Result<AgentEvents, EventLogError> {
        Self::open_with(workspace, agent_id, global, ROTATE_BYTES)
    }

    /// [`AgentEvents::open`] with another rotation size (tests use small files).
    pub fn open_with(
        workspace: &Path,
        agent_id: &str,
        global: Option<Arc<GlobalFeed>>,
        rotate_bytes: u64,
    ) -> Result<AgentEvents, EventLogError> {
        let log = EventLog::open_with(workspace, agent_id, rotate_bytes)?;
        let last = log.last_logged();
        let (live, _) = broadcast::channel(LIVE_CAPACITY);
        let (writer, queue) = mpsc::unbounded_channel();
        let slot = Arc::new(Mutex::new(Slot { log, spare: None }));
        let shared = Arc::new(Shared {
            agent_id: agent_id.to_string(),
            workspace: workspace.to_path_buf(),
            state: Mutex::new(State {
                next: last + 1,
                end: last,
                spare: None,
                spare_requested: false,
                last_seq: last,
                ring: VecDeque::with_capacity(RING),
                ring_floor: last,
                live: Some(live),
                closed: false,
                leased: false,
                resumable: false,
            }),
            slot: Arc::clone(&slot),
            writer,
            global,
        });
        tokio::spawn(write_loop(slot, Arc::downgrade(&shared), queue, log_file(&events_dir(workspace), 0)));
        Ok(AgentEvents(shared))
    }

    /// Numbers `kind` with the next seq, keeps it in the ring, sends it to subscribers (and
    /// `global`) and queues it for the writer; returns the seq. Synchronous; it blocks on I/O
    /// only to take the writer lease (waiting while another process writes a batch) or when
    /// the reserved range is used up before the writer reserved the next one. After
    /// [`AgentEvents::close`] it does nothing and returns 0 (no event has seq 0).
    pub fn emit(&self, kind: EventKind) -> u64 {
        self.0.push(kind)
    }

    /// An [`Emitter`] that emits here (for the turn loop).
    pub fn emitter(&self) -> Emitter {
        Emitter::from_sink(self.0.clone())
    }

    /// The seq of the newest event: emitted by this process, else the last logged when it
    /// opened; 0 when none.
    pub fn last_seq(&self) -> u64 {
        lock(&self.0.state).last_seq
    }

    /// A stream of events. `None`: live only, from now on. `Some(n)`: every event with
    /// seq > n once and in order — from the ring when it reaches back that far, else from the
    /// files, else a `gap {from: n+1, to}` event (seq = `to`) followed by what is kept — then
    /// live. A subscriber that falls behind the live channel is refilled the same way.
    pub async fn subscribe(&self, after: Option<u64>) -> Subscription {
        let st = lock(&self.0.state);
        // Subscribed before the ring is looked at (in `next`), so nothing falls between.
        let rx = st.live.as_ref().map(|l| l.subscribe());
        let (last, catching_up) = match after {
            None => (st.last_seq, false),
            Some(n) => (n, true),
        };
        drop(st);
        Subscription { shared: self.0.clone(), rx, last, catching_up, backlog: VecDeque::new(), last_n: None }
    }

    /// A stream that starts with the `n` newest logged events (of any process; fewer when
    /// fewer exist), then goes on as [`AgentEvents::subscribe`] does. A count, not a seq
    /// range, because seqs jump after a crash. The files are read at the first `next`, not
    /// here (so an actor handing out subscriptions does not wait on them).
    pub async fn subscribe_last(&self, n: usize) -> Subscription {
        let mut sub = self.subscribe(Some(0)).await;
        // The count is of the events there now: ones emitted before the first `next` reads the
        // files come after the `n`, not among them.
        sub.last_n = Some((n, self.last_seq()));
        sub
    }

    /// Waits until every event emitted so far is written to `events.jsonl` (not fsynced).
    /// Errors: [`EventLogError::Writer`] when a write failed since the last flush.
    pub async fn flush(&self) -> Result<(), EventLogError> {
        self.0.flush().await
    }

    /// Flushes, fsyncs and lets the lease go ([`EventLog::unlease`]: the next holder goes on
    /// from the last seq handed out); the writer task ends and subscribers get `None` after the
    /// events they have not read yet. Later `emit`s are a no-op returning 0; later
    /// `close`/`flush` calls return `Ok`. There is no reopening: open a new `AgentEvents`.
    pub async fn close(&self) -> Result<(), EventLogError> {
        let rx = {
            let mut st = lock(&self.0.state);
            if st.closed {
                return Ok(());
            }
            st.closed = true;
            st.live = None;
            let (reply, rx) = oneshot::channel();
            if self.0.writer.send(Msg::Close { reply }).is_err() {
                return Ok(());
            }
            rx
        };
        rx.await.unwrap_or(Ok(()))
    }
}

impl Shared {
    fn push(&self, kind: EventKind) -> u64 {
        let mut st = lock(&self.state);
        if st.closed {
            return 0;
        }
        let seq = self.next_seq(&mut st);
        let event = Event { seq, agent_id: self.agent_id.clone(), kind };
        let ev = Published::from(event.clone());
        st.last_seq = seq;
        if st.ring.len() == RING {
            if let Some(old) = st.ring.pop_front() {
                st.ring_floor = old.seq;
            }
        }
        st.ring.push_back(ev.clone());
        // A send error only means nobody listens right now. One shared value per event for
        // every subscriber: nothing here is done per subscriber but the wake-up of those
        // waiting right now.
        if let Some(live) = &st.live {
            let _ = live.send(ev.clone());
        }
        if let Some(global) = &self.global {
            global.publish(&ev);
        }
        // Sent under the state lock so the writer's queue is in seq order; an error means the
        // writer is gone (runtime shut down), and the event stays in the ring only.
        let _ = self.writer.send(Msg::Event(event));
        if !st.spare_requested && st.spare.is_none() && st.end.saturating_sub(seq) < RESERVE_CHUNK / 2 {
            st.spare_requested = true;
            let _ = self.writer.send(Msg::Reserve { end: st.end });
        }
        seq
    }

    fn next_seq(&self, st: &mut State) -> u64 {
        if !st.leased {
            let mine = st.resumable.then_some((st.next - 1, st.end));
            let leased = crate::fsutil::blocking(|| {
                let mut slot = lock(&self.slot);
                let r = slot.log.lease(mine);
                if r.as_ref().is_ok_and(|r| *r != (st.next..=st.end)) {
                    // Another holder numbered in between: a range reserved before is below it.
                    slot.spare = None;
                }
                r
            });
            match leased {
                Ok(r) => {
                    if r != (st.next..=st.end) {
                        st.spare = None;
                    }
                    (st.next, st.end, st.leased) = (*r.start(), *r.end(), true);
                }
                // Numbered on in memory below (and retried at the next event): only another
                // writer at the same moment could repeat such a seq.
                Err(e) => tracing::error!(agent_id = %self.agent_id, "event log: {e}"),
            }
        }
        if st.next > st.end {
            if let Some(r) = st.spare.take() {
                (st.next, st.end, st.spare_requested) = (*r.start(), *r.end(), false);
            } else {
                let after = st.end;
                let reserved = crate::fsutil::blocking(|| {
                    let mut slot = lock(&self.slot);
                    slot.spare.take().map_or_else(|| slot.log.reserve(after), Ok)
                });
                match reserved {
                    Ok(r) => (st.next, st.end) = (*r.start(), *r.end()),
                    Err(e) => {
                        // `emit` has no error path: number on in memory and retry at the next
                        // event; only a crash before a reservation succeeds could reuse this seq.
                        tracing::error!(agent_id = %self.agent_id, "event log: {e}");
                        st.end = st.next;
                    }
                }
            }
        }
        let seq = st.next;
        st.next += 1;
        seq
    }

    async fn flush(&self) -> Result<(), EventLogError> {
        let (reply, rx) = oneshot::channel();
        if self.writer.send(Msg::Flush(reply)).is_err() {
            return Ok(());
        }
        rx.await.unwrap_or(Ok(()))
    }

    fn gap(&self, from: u64, to: u64) -> Published {
        Event { seq: to, agent_id: self.agent_id.clone(), kind: EventKind::Gap { from, to } }.into()
    }
}

impl EventSink for Shared {
    fn emit(&self, kind: EventKind) {
        self.push(kind);
    }
}

/// One subscriber's stream (see [`AgentEvents::subscribe`]).
pub struct Subscription {
    shared: Arc<Shared>,
    rx: Option<broadcast::Receiver<Published>>,
    /// The highest seq yielded (or the starting point).
    last: u64,
    catching_up: bool,
    backlog: VecDeque<Published>,
    /// [`AgentEvents::subscribe_last`]'s count and the newest seq when it was asked, until the
    /// first `next` turns them into `last`.
    last_n: Option<(usize, u64)>,
}

impl Subscription {
    /// The next event; `None` once the bus is closed and every event before the close was
    /// yielded.
    pub async fn next(&mut self) -> Option<Published> {
        if let Some((n, upto)) = self.last_n {
            self.last = self.seq_before_last(n, upto).await;
            self.last_n = None;
        }
        loop {
            if let Some(ev) = self.try_next() {
                return Some(ev);
            }
            if self.catching_up {
                self.catch_up().await;
                continue;
            }
            let rx = self.rx.as_mut()?;
            match rx.recv().await {
                Ok(ev) if ev.seq > self.last => {
                    self.last = ev.seq;
                    return Some(ev);
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => self.catching_up = true,
                Err(broadcast::error::RecvError::Closed) => {
                    self.rx = None;
                    return None;
                }
            }
        }
    }

    /// The next event if one is ready without waiting or reading the files (`None`: wait
    /// with [`Self::next`]).
    pub fn try_next(&mut self) -> Option<Published> {
        loop {
            if let Some(ev) = self.backlog.pop_front() {
                self.last = ev.seq;
                return Some(ev);
            }
            if self.catching_up || self.last_n.is_some() {
                return None;
            }
            match self.rx.as_mut()?.try_recv() {
                Ok(ev) if ev.seq > self.last => {
                    self.last = ev.seq;
                    return Some(ev);
                }
                Ok(_) => {}
                Err(broadcast::error::TryRecvError::Lagged(_)) => self.catching_up = true,
                Err(_) => return None,
            }
        }
    }

    /// Fills the backlog with events after `last`: from the ring if it reaches back, else one
    /// page from the files (a gap first when they no longer reach back).
    async fn catch_up(&mut self) {
        if let Some(events) = self.ring_after_last() {
            self.backlog = events;
            self.catching_up = false;
            return;
        }
        if let Err(e) = self.shared.flush().await {
            tracing::warn!(agent_id = %self.shared.agent_id, "event log replay: {e}");
        }
        let (workspace, after) = (self.shared.workspace.clone(), self.last);
        match tokio::task::spawn_blocking(move || read_after(&workspace, after, PAGE)).await {
            Ok(Ok(replay)) => {
                if let Some((from, to)) = replay.gap(after) {
                    self.backlog.push_back(self.shared.gap(from, to));
                }
                self.catching_up = replay.events.len() == PAGE;
                self.backlog.extend(replay.events.into_iter().map(Published::from));
            }
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => e.to_string(),
                    Ok(Ok(_)) => String::new(),
                };
                tracing::warn!(agent_id = %self.shared.agent_id, "event log replay: {why}");
                // The files cannot be read: say what is lost, then go on from the ring.
                let st = lock(&self.shared.state);
                if st.ring_floor > after {
                    self.backlog.push_back(self.shared.gap(after + 1, st.ring_floor));
                }
                let from = after.max(st.ring_floor);
                self.backlog.extend(st.ring.iter().filter(|e| e.seq > from).cloned());
                self.catching_up = false;
            }
        }
    }

    /// The seq below the `n` newest logged events up to seq `upto`, from the files once this
    /// process's events are written there; when they cannot be read, from the ring (own
    /// events only).
    async fn seq_before_last(&self, n: usize, upto: u64) -> u64 {
        if let Err(e) = self.shared.flush().await {
            tracing::warn!(agent_id = %self.shared.agent_id, "event log replay: {e}");
        }
        let workspace = self.shared.workspace.clone();
        let why = match tokio::task::spawn_blocking(move || seq_before_last(&workspace, n, upto)).await {
            Ok(Ok(seq)) => return seq,
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        tracing::warn!(agent_id = %self.shared.agent_id, "event log replay: {why}");
        let st = lock(&self.shared.state);
        match n.checked_sub(1).and_then(|i| st.ring.iter().rev().filter(|e| e.seq <= upto).nth(i)) {
            Some(ev) => ev.seq - 1,
            None => st.ring_floor,
        }
    }

    /// The ring's events after `last`, if the ring still holds all of them.
    fn ring_after_last(&self) -> Option<VecDeque<Published>> {
        let st = lock(&self.shared.state);
        (self.last >= st.ring_floor).then(|| st.ring.iter().filter(|e| e.seq > self.last).cloned().collect())
    }
}

/// The writer task: writes queued events in batches off the async workers, fsyncs after
/// `turn_ended`, reserves ranges ahead and lets the lease go when it has written everything.
async fn write_loop(slot: Arc<Mutex<Slot>>, shared: Weak<Shared>, mut queue: mpsc::UnboundedReceiver<Msg>, path: PathBuf) {
    let mut msgs = Vec::with_capacity(BATCH);
    let mut failed: Option<String> = None;
    // The highest seq taken off the queue (written, or lost to a failed write).
    let mut taken = 0;
    loop {
        if queue.recv_many(&mut msgs, BATCH).await == 0 {
            // Every handle is gone without a close: make what was written durable.
            if let Err(e) = crate::fsutil::blocking(|| {
                let mut slot = lock(&slot);
                slot.log.sync().and(slot.log.unlease(taken))
            }) {
                tracing::error!("event log: {e}");
            }
            return;
        }
        let (mut batch, mut fsync, mut reserve, mut waiters, mut closing) = (Vec::new(), false, None, Vec::new(), false);
        for msg in msgs.drain(..) {
            match msg {
                Msg::Event(ev) => {
                    fsync |= matches!(ev.kind, EventKind::TurnEnded { .. });
                    taken = taken.max(ev.seq);
                    batch.push(ev);
                }
                Msg::Flush(reply) => waiters.push(reply),
                Msg::Reserve { end } => reserve = Some(end),
                Msg::Close { reply } => {
                    (fsync, closing) = (true, true);
                    waiters.push(reply);
                }
            }
        }
        let written = crate::fsutil::blocking(|| {
            let mut slot = lock(&slot);
            let Slot { log, spare } = &mut *slot;
            let mut res = if batch.is_empty() { Ok(()) } else { log.append(&batch) };
            if res.is_ok() && fsync {
                res = log.sync();
            }
            // A request that arrives after the lease was let go is stale: the next lease
            // decides the range. So is one whose range ran out first: the emitter reserved
            // the next one itself (a slow writer), and this one would be a block too many.
            if reserve.is_some_and(|end| log.is_leased() && log.reserved_to() == end) {
                match log.reserve(0) {
                    Ok(r) => *spare = Some(r),
                    Err(e) => tracing::error!("event log: {e}"),
                }
            }
            res
        });
        if let Err(e) = written {
            tracing::error!("event log: {e}");
            failed = Some(e.to_string());
        }
        if let Some(shared) = shared.upgrade() {
            if let Err(e) = crate::fsutil::blocking(|| settle(&shared, reserve.is_some(), taken)) {
                tracing::error!("event log: {e}");
                failed.get_or_insert_with(|| e.to_string());
            }
        }
        if !waiters.is_empty() {
            let outcome = failed.take();
            for reply in waiters {
                let _ = reply.send(match &outcome {
                    Some(message) => Err(EventLogError::Writer { path: path.clone(), message: message.clone() }),
                    None => Ok(()),
                });
            }
        }
        if closing {
            return;
        }
    }
}

/// After a batch: moves the spare the writer reserved into the numbering state (it waits for
/// the current range to run out), and lets the lease go when every seq handed out is off the
/// queue (`taken`), so another process waits for no more than one batch.
fn settle(shared: &Shared, requested: bool, taken: u64) -> Result<(), EventLogError> {
    let mut st = lock(&shared.state);
    let mut slot = lock(&shared.slot);
    if requested {
        st.spare_requested = false;
    }
    if let Some(r) = slot.spare.take() {
        if st.spare.is_none() && *r.start() > st.end {
            st.spare = Some(r);
        }
    }
    if st.leased && st.last_seq <= taken {
        (st.leased, st.resumable) = (false, true);
        slot.log.unlease(st.last_seq)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
