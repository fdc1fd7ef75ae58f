//! The address of an actor: its bounded [`Op`] queue, and the signals serve raises beside it.
//!
//! What reaches an actor takes one of three paths, so that a full queue refuses only what a
//! client can send again:
//! - Requests (every route's [`Op`]) go into a queue of [`QUEUE_CAPACITY`]; a full one refuses
//!   the request at once ([`Refused::Full`], a 503), it never grows or makes a route wait.
//! - serve's own asks that are not requests (a wake from the scheduler or the inbox watch, the
//!   idle outbox drain, the recoveries at start) are flags in [`Signals`]: raising one again
//!   before the actor took it changes nothing, so they need no room, take no more memory however
//!   often they come, and a full queue can neither refuse nor delay them.
//! - What the actor's own work hands back never comes this way: a job's end is its
//!   `JoinHandle`, a tick's answer a oneshot, a memory flush its `JoinHandle`, each awaited in
//!   the actor's own loop, so no queue stands between a finished job and the actor.

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use super::Op;
use cicy_runtime::wake::message::Reason;

/// **[chosen]** How many requests may wait for one actor. Each route sends one [`Op`] and waits
/// for its answer, so the queue holds one per request in flight to this agent: a dashboard and
/// a CLI have a few at a time, and the actor takes each within microseconds to milliseconds.
/// 64 leaves room for a script's burst while bounding what a runaway client can pile up (a
/// queued chat holds its text, up to the 1 MiB body limit).
pub(crate) const QUEUE_CAPACITY: usize = 64;

/// Why a request was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// [`QUEUE_CAPACITY`] requests wait already.
    Full,
    /// The actor has ended (serve is shutting down).
    Gone,
}

/// The address of a running actor.
#[derive(Clone)]
pub(crate) struct AgentHandle {
    pub id: String,
    tx: mpsc::Sender<Op>,
    signals: Arc<Signals>,
}

impl AgentHandle {
    /// A handle and the two ends its actor reads: the queue and the signals.
    pub(crate) fn new(id: String) -> (Self, mpsc::Receiver<Op>, Signalled) {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let (bell, rung) = mpsc::channel(1);
        let signals = Arc::new(Signals { raised: Mutex::default(), bell });
        (Self { id, tx, signals: signals.clone() }, rx, Signalled { signals, rung })
    }

    /// Queues a client's request, or refuses it at once.
    pub(crate) fn request(&self, op: Op) -> Result<(), Refused> {
        self.tx.try_send(op).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Refused::Full,
            mpsc::error::TrySendError::Closed(_) => Refused::Gone,
        })
    }

    /// Sends one of serve's own ops (warming, a todo's note, the shutdown), waiting for room:
    /// the actor keeps taking ops, so the wait is for one op at most. False when the actor
    /// has ended.
    pub(crate) async fn send(&self, op: Op) -> bool {
        self.tx.send(op).await.is_ok()
    }

    /// A todo came due or the inbox may hold a message (docs/design.md §10): the actor wakes now if
    /// idle, else after the current run.
    pub(crate) fn wake(&self, reason: Reason) {
        self.signals.raise(|r| {
            if !r.wakes.contains(&reason) {
                r.wakes.push(reason);
            }
        });
    }

    /// The outbox's `new/` is not empty (docs/design.md §11 "Consumer").
    pub(crate) fn drain(&self) {
        self.signals.raise(|r| r.drain = true);
    }

    /// At serve's start: finish what a killed serve left of this agent's last wake.
    pub(crate) fn recover(&self) {
        self.signals.raise(|r| r.recover = true);
    }

    /// At serve's start, for an agent whose autonomy lease a killed serve left (docs/design.md §13).
    pub(crate) fn recover_autonomy(&self) {
        self.signals.raise(|r| r.recover_autonomy = true);
    }
}

/// What serve asked of an actor since it last looked.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Raised {
    pub recover_autonomy: bool,
    pub recover: bool,
    /// Each reason once, in the order they first came.
    pub wakes: Vec<Reason>,
    pub drain: bool,
}

/// The flags and a doorbell: the bell (room for one ring) tells the actor to look; a ring while
/// one is pending is not needed, since the actor takes every flag when it answers.
struct Signals {
    raised: Mutex<Raised>,
    bell: mpsc::Sender<()>,
}

impl Signals {
    fn raise(&self, set: impl FnOnce(&mut Raised)) {
        set(&mut self.raised.lock().unwrap_or_else(|p| p.into_inner()));
        // Full: a ring is pending and the actor will see this flag when it answers it.
        let _ = self.bell.try_send(());
    }
}

/// The actor's end of the signals.
pub(crate) struct Signalled {
    signals: Arc<Signals>,
    rung: mpsc::Receiver<()>,
}

impl Signalled {
    /// Waits for a ring, then takes every flag raised so far. Cancel-safe (it sits in the
    /// actor's `select!`): a ring is taken only by a call that then takes the flags.
    pub(super) async fn next(&mut self) -> Raised {
        if self.rung.recv().await.is_none() {
            // `self.signals` holds the bell's sender, so the bell cannot close while this runs.
            std::future::pending::<()>().await;
        }
        std::mem::take(&mut *self.signals.raised.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    #[tokio::test]
    async fn a_full_queue_refuses_a_request_but_never_a_signal() {
        let (handle, mut rx, mut signals) = AgentHandle::new("w-1".into());
        let mut replies = Vec::new();
        for _ in 0..QUEUE_CAPACITY {
            let (reply, answer) = oneshot::channel();
            assert_eq!(handle.request(Op::Warm { reply }), Ok(()));
            replies.push(answer);
        }
        let (reply, _answer) = oneshot::channel();
        assert_eq!(handle.request(Op::Warm { reply }), Err(Refused::Full));
        handle.wake(Reason::Inbox);
        handle.drain();
        handle.wake(Reason::Todo);
        handle.wake(Reason::Inbox);
        handle.recover();
        let raised = signals.next().await;
        assert_eq!(raised, Raised { recover_autonomy: false, recover: true, wakes: vec![Reason::Inbox, Reason::Todo], drain: true });
        // Taken: nothing is raised twice.
        handle.recover_autonomy();
        assert_eq!(signals.next().await, Raised { recover_autonomy: true, ..Raised::default() });
        // One request taken makes room for one more.
        assert!(rx.recv().await.is_some());
        let (reply, _answer) = oneshot::channel();
        assert_eq!(handle.request(Op::Warm { reply }), Ok(()));
        drop(rx);
        let (reply, _answer) = oneshot::channel();
        assert_eq!(handle.request(Op::Warm { reply }), Err(Refused::Gone));
    }
}
