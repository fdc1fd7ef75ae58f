//! One thread that runs every agent's idle tick (docs/design.md §13): an actor asks, the thread
//! reads the agent's files (`cicy_runtime::autonomy::tick::tick`), writes the rest line that starts a
//! streak, and answers. Thousands of agents ticking cost one thread, never one blocked worker
//! each, and their file reads never run on the async workers.
//!
//! Owns the thread and its queue. Must not touch an actor's state: the actor decides what to
//! do with the answer (it may have become busy meanwhile).

use std::sync::mpsc;

use tokio::sync::oneshot;

use cicy_runtime::autonomy::tick::{tick, TickOut};
use cicy_store::home::Home;
use cicy_store::registry::AgentRecord;

/// A tick to run: the agent, and whether its last tick already started a rest streak (then no
/// rest line is written).
struct Request {
    home: Home,
    record: AgentRecord,
    resting: bool,
    reply: oneshot::Sender<TickOut>,
}

/// The address of the tick thread.
#[derive(Clone)]
pub(super) struct TickWorker {
    tx: mpsc::Sender<Request>,
}

impl TickWorker {
    /// Starts the thread; it ends when every address is dropped.
    ///
    /// Errors: the thread could not be spawned.
    pub(super) fn start() -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new().name("cicy-autonomy-ticks".into()).spawn(move || {
            while let Ok(req) = rx.recv() {
                let out = tick(&req.home, &req.record);
                if !req.resting {
                    if let Some(line) = out.tick.rest_line() {
                        cicy_runtime::autonomy::log::note(&req.record.workspace, &line);
                    }
                }
                // The actor may be gone (serve stopping): nothing waits for the answer then.
                let _ = req.reply.send(out);
            }
        })?;
        Ok(Self { tx })
    }

    /// Queues a tick of `record`; the answer comes on the receiver (`None`: the thread is gone).
    pub(super) fn ask(&self, home: &Home, record: &AgentRecord, resting: bool) -> Option<oneshot::Receiver<TickOut>> {
        let (reply, rx) = oneshot::channel();
        let req = Request { home: home.clone(), record: record.clone(), resting, reply };
        self.tx.send(req).ok().map(|()| rx)
    }
}
