//! The events of one in-process CLI run, numbered by the agent's persistent event log
//! (docs/design.md §9 "Event log"), so `--json` shows the same `seq` a serve would and a later
//! subscriber can replay what this run did.
//!
//! Owns opening the agent's log for the run, printing each event as it is numbered, and
//! closing the log (written, fsynced, the unused seq range given back). Must not touch the
//! turn loop or the terminal's layout: printing is `print`'s.

use std::sync::Arc;

use cicy::event::{Emitter, Event, EventKind, EventSink};
use cicy::eventlog::AgentEvents;
use cicy::home::Home;
use cicy::registry::Registry;

use super::print;

/// The emitter of a run and the log behind it.
pub(super) struct RunEvents {
    pub emitter: Emitter,
    log: Option<AgentEvents>,
}

struct Printed {
    log: AgentEvents,
    agent_id: String,
    print: Box<dyn Fn(&Event) + Send + Sync>,
}

impl EventSink for Printed {
    fn emit(&self, kind: EventKind) {
        let seq = self.log.emit(kind.clone());
        (self.print)(&Event { seq, agent_id: self.agent_id.clone(), kind });
    }
}

fn printer(json: bool) -> Box<dyn Fn(&Event) + Send + Sync> {
    if json {
        Box::new(print::json)
    } else {
        let human = print::Human::default();
        Box::new(move |ev| human.print(ev))
    }
}

impl RunEvents {
    /// Opens agent `id`'s log; call inside the runtime. An unknown agent or a log that cannot
    /// be opened (a read-only home) numbers this run's events 1, 2, 3, … instead: the command
    /// then reports its own error, and a run that cannot write its log still prints.
    pub(super) fn open(home: &Home, id: &str, json: bool) -> Self {
        let log = Registry::open_read_only(&home.db_path()).ok().and_then(|r| r.get(id).ok()).and_then(|record| {
            match AgentEvents::open(&record.workspace, id, None) {
                Ok(log) => Some(log),
                Err(e) => {
                    // info, not warn: the command then fails with its own error (a read-only home).
                    tracing::info!(agent = id, error = %e, "cannot open the event log; numbering this run's events from 1");
                    None
                }
            }
        });
        let print = printer(json);
        let emitter = match &log {
            Some(log) => Emitter::from_sink(Arc::new(Printed { log: log.clone(), agent_id: id.to_string(), print })),
            None => Emitter::new(id, print),
        };
        Self { emitter, log }
    }

    /// Writes and fsyncs what the run logged.
    pub(super) async fn close(self) {
        if let Some(log) = self.log {
            if let Err(e) = log.close().await {
                tracing::warn!(error = %e, "cannot finish writing the event log");
            }
        }
    }
}

/// Runs `f` with the events of a run of agent `id`, closing its log afterwards.
pub(super) async fn with_events<T>(home: &Home, id: &str, json: bool, f: impl AsyncFnOnce(&Emitter) -> T) -> T {
    let run = RunEvents::open(home, id, json);
    let out = f(&run.emitter).await;
    run.close().await;
    out
}
