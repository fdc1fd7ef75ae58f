//! The actor's side of idle autonomy (docs/design.md §13): the tick, preemption, the 0.5 s poll and
//! the recovery at start, as methods of the agent's actor. What a tick decides is
//! `cicy_runtime::autonomy::tick`; how a job runs is `crate`'s intent job. Must not touch HTTP.

use super::*;
use cicy_protocol::event::AutonomyStatus;

impl Actor {
    /// Nothing asks anything of the agent (docs/design.md §13 "idle only when …"; the files' part —
    /// inbox, todos, claims — is the tick's own check).
    fn idle_for_autonomy(&self) -> bool {
        // A memory flush is never cut short for autonomy (a job's start would cancel it).
        let flushing = self.flush.as_ref().is_some_and(|(_, h)| !h.is_finished());
        !(self.busy() || flushing || !self.pending.is_empty() || !self.steering.is_empty() || self.wake_due.is_some())
    }

    /// The idle tick's timer: when nothing waits, the tick thread decides.
    pub(super) fn tick(&mut self) {
        self.tick_at = None;
        if self.idle_for_autonomy() {
            self.tick_reply = self.shared.ticks.ask(&self.shared.home, &self.record, self.resting);
        }
    }

    /// The tick thread's answer: the promotions it wrote, then the job to start (unless the
    /// agent got busy meanwhile) or a rest (its line written by the thread).
    pub(super) fn tick_done(&mut self, out: Option<cicy_runtime::autonomy::tick::TickOut>) {
        let Some(out) = out else { return };
        self.tick_every = out.every;
        self.priorities = out.priorities;
        for i in out.promoted {
            let (job, detail) = (format!("intent:{}", i.id), format!("priority {} (starvation)", i.priority));
            self.emit(EventKind::Autonomy { job, status: AutonomyStatus::Promoted, detail: Some(detail) });
        }
        match out.tick {
            Tick::Run(job) => {
                if self.idle_for_autonomy() {
                    self.resting = false;
                    self.start(Work::Auto(job, Preemption::default()));
                }
            }
            Tick::NotIdle(_) => {}
            Tick::Error(e) => {
                if !self.resting {
                    self.emit(EventKind::Error { kind: ErrorKind::Autonomy, message: e });
                }
                self.resting = true;
            }
            Tick::Rest | Tick::Off(_) => self.resting = true,
        }
    }

    /// A request of class `by` arrived: the running autonomy job gives way if `by` has the
    /// smaller number *(idle)*, unless it is on the never-killed list (then `by` waits).
    pub(super) fn preempt(&mut self, by: Class) {
        let Some(a) = self.phase.auto() else { return };
        if self.priorities.of(by) >= a.job.priority {
            return;
        }
        self.stop_auto(by.as_str());
    }

    /// Stops the running autonomy job for `by` (a class, `drop`, `off`): a command's group gets
    /// SIGTERM, a model turn yields at its next round boundary. A never-killed job is left to
    /// finish, with a log line.
    fn stop_auto(&mut self, by: &str) {
        let Some(a) = self.phase.auto() else { return };
        if a.job.never_killed {
            cicy_runtime::autonomy::log::note(&self.record.workspace, &format!("{} is never killed; {by} waits for it", a.job.pick.job()));
            return;
        }
        a.preemption.set(by);
        if a.job.pick.run().is_some() {
            self.cancel.cancel();
        } else {
            self.steering.request_yield();
        }
    }

    /// The 0.5 s poll while an autonomy job runs: a drop, the switch, a message.
    pub(super) fn poll_preempt(&mut self) {
        let Some(a) = self.phase.auto() else { return };
        let (ws, job) = (self.record.workspace.clone(), a.job.clone());
        match fsutil::blocking(|| cicy_runtime::autonomy::tick::poll(&ws, &job)) {
            Some(by) if by == Class::Human.as_str() => self.preempt(Class::Human),
            Some(by) => self.stop_auto(by),
            None => {}
        }
    }

    /// `Op::RecoverAutonomy`: what a killed serve left of this agent's autonomy job.
    pub(super) fn recover_autonomy(&mut self) {
        let ws = self.record.workspace.clone();
        let notes = fsutil::blocking(|| cicy_runtime::autonomy::tick::recover(&ws));
        for text in notes.notes {
            self.emit(EventKind::System { text });
        }
        for id in notes.interrupted {
            let detail = Some("preempted by restart".to_string());
            self.emit(EventKind::Autonomy { job: format!("intent:{id}"), status: AutonomyStatus::Interrupted, detail });
        }
    }
}
