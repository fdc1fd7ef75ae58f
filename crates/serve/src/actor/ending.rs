//! What an actor does when a job ends (`super`): the job's result reported as events and
//! replies, the replies a failed job leaves waiting answered, and then the run's follow-up (the
//! work an autonomy job gave way to, a deferred `/clear`, the queued inputs) or its end, with
//! the memory flush that may follow it.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use super::op::{ClearError, ClearReply, CompactReply};
use super::phase::{Ended, Phase};
use super::{Actor, FLUSH_TEXT, LOCK_RETRY};
use crate::intent_job::AutoEnd;
use crate::job::{FlushCtx, JobEnd, Work};
use crate::wake_job::WakeEnd;
use cicy_protocol::event::{AgentState, ErrorKind, EventKind};
use cicy_runtime::command::CommandEnd;
use cicy_runtime::wake::message::Reason;
use cicy_store::fsutil;

impl Actor {
    pub(super) async fn job_done(&mut self, ended: Option<Ended>) {
        let Some(Ended { work, auto, out }) = ended else { return };
        self.last_active = Instant::now();
        // What waited for an autonomy job to give way.
        let after = auto.and_then(|a| a.after);
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                self.emit(EventKind::Error { kind: ErrorKind::Internal, message: format!("the job of {} stopped: {e}", self.record.id) });
                self.fail_replies(ClearError::JobStopped);
                self.end_run();
                return;
            }
        };
        self.session = out.session;
        match out.end {
            JobEnd::LockBusy if matches!(work, Work::Auto(..)) => {
                // Another process works on the agent: it is not idle, and a later tick tries again.
                self.fail_replies(ClearError::BusyElsewhere);
                self.end_run();
                return;
            }
            JobEnd::LockBusy => {
                if !self.lock_notified {
                    self.lock_notified = true;
                    self.emit(EventKind::System {
                        text: format!("{} is busy in another process (its turn lock is held); waiting for it", self.record.id),
                    });
                }
                self.phase = Phase::WaitingLock { work, at: Instant::now() + LOCK_RETRY };
                return;
            }
            JobEnd::Open(e) => {
                self.emit(EventKind::Error { kind: ErrorKind::Open, message: e.to_string() });
                self.fail_replies(ClearError::Agent(Arc::new(e)));
                if let Work::Wake(p) = &work {
                    // No turn can answer this wake's claims: they are pending again.
                    let (home, id, ws) = (&self.shared.home, &self.record.id, &self.record.workspace);
                    if let Err(e) = fsutil::blocking(|| cicy_runtime::wake::run::abandon(home, id, ws, p)) {
                        self.emit(EventKind::Error {
                            kind: ErrorKind::Wake,
                            message: format!("releasing the claims of a wake that could not start: {e}"),
                        });
                    }
                }
            }
            JobEnd::Turn(Ok(_)) | JobEnd::Retry(Ok(Some(_))) => {}
            JobEnd::Turn(Err(e)) | JobEnd::Retry(Err(e)) => {
                self.emit(EventKind::Error { kind: ErrorKind::Turn, message: e.to_string() });
            }
            JobEnd::Wake(end) => {
                match end {
                    WakeEnd::Ran => {}
                    WakeEnd::TurnError(e) => self.emit(EventKind::Error { kind: ErrorKind::Turn, message: e.to_string() }),
                    WakeEnd::Finalize(e) => self.emit(EventKind::Error { kind: ErrorKind::Wake, message: format!("ending the wake: {e}") }),
                }
                // One conversation per wake: the next one wakes the agent again.
                let inbox = cicy_runtime::wake::inbox::Mailbox::of_workspace(&self.record.workspace);
                if fsutil::blocking(|| inbox.has_pending()) {
                    self.wake_due.get_or_insert(Reason::Inbox);
                }
            }
            JobEnd::Auto(end) => match end {
                AutoEnd::Ran(_) | AutoEnd::Refused | AutoEnd::Gone => {}
                AutoEnd::Failed(e) => self.emit(EventKind::Error { kind: ErrorKind::Autonomy, message: e }),
            },
            JobEnd::Retry(Ok(None)) => {
                self.emit(EventKind::Error { kind: ErrorKind::Retry, message: "no turn to retry".into() });
            }
            JobEnd::Compact(r) => {
                let reply = match r {
                    Ok(CommandEnd::Done { before, after }) => CompactReply { success: true, outcome: "done", before, after },
                    Ok(CommandEnd::Cancelled) => CompactReply { success: false, outcome: "cancelled", before: 0, after: 0 },
                    Ok(CommandEnd::Failed) => CompactReply { success: false, outcome: "failed", before: 0, after: 0 },
                    Err(e) => {
                        self.emit(EventKind::Error { kind: ErrorKind::Compact, message: e.to_string() });
                        CompactReply { success: false, outcome: "failed", before: 0, after: 0 }
                    }
                };
                if let Some(tx) = self.compact_reply.take() {
                    let _ = tx.send(Ok(reply));
                }
            }
            JobEnd::Clear(r) => {
                let r = r.map_err(|e| ClearError::Agent(Arc::new(e)));
                if let Err(e) = &r {
                    self.emit(EventKind::Error { kind: ErrorKind::Clear, message: e.to_string() });
                }
                for (canceled, tx) in self.deferred_clear.drain(..) {
                    let _ = tx.send(r.clone().map(|conv_id| ClearReply { success: true, canceled, conv_id }));
                }
            }
        }
        if let Some(work) = after {
            self.start(work);
            return;
        }
        if !self.deferred_clear.is_empty() {
            // The cancelled run ends as every run does (its streams close at `done`), then the
            // clear runs as its own.
            self.finish_run();
            self.start(Work::Clear);
            return;
        }
        let mut follow = self.steering.take_all();
        follow.append(&mut self.pending);
        if follow.is_empty() {
            self.end_run();
        } else {
            self.emit(EventKind::Flush { text: FLUSH_TEXT.into() });
            self.start(Work::Turn(follow.join("\n")));
        }
    }

    /// Answers replies a failed job leaves waiting.
    pub(super) fn fail_replies(&mut self, why: ClearError) {
        for (_, tx) in self.deferred_clear.drain(..) {
            let _ = tx.send(Err(why.clone()));
        }
        if let Some(tx) = self.compact_reply.take() {
            let _ = tx.send(Ok(CompactReply { success: false, outcome: "failed", before: 0, after: 0 }));
        }
    }

    /// The run is over: `state idle`, `done`, then a due memory flush (after `turn_ended`,
    /// without the turn lock, docs/design.md §9 "Shape").
    pub(super) fn end_run(&mut self) {
        self.finish_run();
        if let Some(reason) = self.wake_due.take() {
            self.wake(reason);
            if self.busy() {
                return;
            }
        }
        if let Some(flush) = self.session.as_ref().map(FlushCtx::of) {
            if flush.due() {
                self.spawn_flush(flush);
            }
        }
    }

    /// `state idle` and `done`.
    pub(super) fn finish_run(&mut self) {
        self.lock_notified = false;
        if let Some(t) = &self.tracker {
            t.set(AgentState::Idle);
        }
        self.emit(EventKind::Done);
    }

    pub(super) fn retry_waiting(&mut self) {
        if let Some(work) = self.phase.take_waiting() {
            self.start(work);
        }
    }

    /// When the memory timer fires: the buffer's next due time, not while a flush runs.
    pub(super) fn memory_due_at(&self) -> Option<SystemTime> {
        if self.flush.as_ref().is_some_and(|(_, h)| !h.is_finished()) {
            return None;
        }
        let memory = self.session.as_ref()?.memory();
        let due = fsutil::blocking(|| memory.next_due().ok().flatten())?;
        Some(self.flush_not_before.map_or(due, |n| due.max(n)))
    }

    /// The memory timer fired (docs/design.md §9: `sleep_until(next_due)`, only when idle).
    pub(super) fn flush_memory(&mut self) {
        if let Some(flush) = self.session.as_ref().map(FlushCtx::of) {
            self.spawn_flush(flush);
        }
    }

    pub(super) fn spawn_flush(&mut self, flush: FlushCtx) {
        let Ok(tracker) = self.tracker() else { return };
        let cancel = CancellationToken::new();
        self.flush_not_before = Some(SystemTime::now() + flush.memory.settings().recognizer_timeout);
        let events = tracker.emitter();
        self.flush = Some((cancel.clone(), tokio::spawn(flush.flush(events, cancel))));
    }
}
