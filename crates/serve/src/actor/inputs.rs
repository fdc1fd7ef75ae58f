//! What a person's input does to an actor (`super`): a chat text starts a run, runs a command
//! or is queued (docs/design.md §9 "Dispatch"), a steer joins the running turn (§9 "Steer"), an
//! abort cancels it, a retry reruns the failed turn, and the status says where the agent is.

use super::op::{Admit, RetryReply, Status};
use super::phase::Phase;
use super::{command_work, last_logged, Actor};
use crate::job::Work;
use cicy_protocol::event::{AgentState, SteerStatus};
use cicy_runtime::autonomy::priority::Class;
use cicy_runtime::command::Posted;
use cicy_runtime::conversation::outcome::marker_of;

impl Actor {
    /// §9 dispatch: a command when idle, queued text when busy, else a new run.
    pub(super) async fn chat(&mut self, text: String) -> Admit {
        let posted = Posted::parse(text);
        if self.busy() {
            let text = match posted {
                Posted::Command(c) if self.phase.auto_free() => {
                    // Like the routes' `/compact` and `/clear`: the autonomy job gives way first.
                    self.preempt(Class::Human);
                    let tracker = match self.tracker() {
                        Ok(t) => t,
                        Err(e) => return Admit::Failed(e.to_string()),
                    };
                    let sub = tracker.events().subscribe(Some(tracker.events().last_seq())).await;
                    self.run_after_auto(command_work(c));
                    return Admit::Started(sub);
                }
                Posted::Command(c) => {
                    return Admit::Refused(format!(
                        "{} can only run when the agent is idle — it was NOT executed; resend after the current reply finishes",
                        c.as_str()
                    ));
                }
                Posted::Message(text) => text,
            };
            if self.phase.auto().is_some() {
                // The autonomy job gives way; the stream follows its end and then this turn,
                // which starts as the job's follow-up (no `done` between them).
                self.preempt(Class::Human);
                let tracker = match self.tracker() {
                    Ok(t) => t,
                    Err(e) => return Admit::Failed(e.to_string()),
                };
                let sub = tracker.events().subscribe(Some(tracker.events().last_seq())).await;
                self.pending.push(text);
                return Admit::Started(sub);
            }
            self.pending.push(text);
            return Admit::Queued;
        }
        let tracker = match self.tracker() {
            Ok(t) => t,
            Err(e) => return Admit::Failed(e.to_string()),
        };
        let sub = tracker.events().subscribe(Some(tracker.events().last_seq())).await;
        self.start(match posted {
            Posted::Command(c) => command_work(c),
            Posted::Message(text) => Work::Turn(text),
        });
        Admit::Started(sub)
    }

    pub(super) fn steer(&mut self, text: String, interrupt: bool) -> SteerStatus {
        if !self.busy() {
            self.start(Work::Turn(text));
            return SteerStatus::Prompted;
        }
        if self.phase.auto().is_some() {
            // Not into the autonomy job's turn: a person's text starts its own turn after it.
            self.preempt(Class::Human);
            self.pending.push(text);
            return SteerStatus::Queued;
        }
        if self.steering.push(text).is_err() {
            return SteerStatus::RejectedFull;
        }
        if interrupt && self.tracker.as_ref().is_some_and(|t| t.state() == AgentState::ExecutingTools) {
            self.steering.interrupt();
        }
        SteerStatus::Queued
    }

    /// §9 abort: cancel the job, clear `pending` and `steering`; whether a job was running.
    pub(super) fn abort(&mut self) -> bool {
        self.pending.clear();
        self.steering.clear();
        if self.phase.take_waiting().is_some() {
            self.end_run();
            return true;
        }
        let Phase::Running(running) = &self.phase else { return false };
        if let Some(a) = &running.auto {
            if a.job.never_killed {
                return false;
            }
            a.preemption.set(Class::Human.as_str());
        }
        self.cancel.cancel();
        true
    }

    /// `/compact` or `/clear` (`work`) waits for the running autonomy job to give way.
    pub(super) fn run_after_auto(&mut self, work: Work) {
        if let Some(a) = self.phase.auto_mut() {
            a.after = Some(work);
        }
    }

    pub(super) fn retry(&mut self) -> RetryReply {
        if self.busy() {
            return RetryReply { success: false, started: false, reason: Some("still generating, please wait".into()) };
        }
        self.warm();
        let has_marker = self.session.as_ref().and_then(|s| s.conversation().current.messages.last().and_then(marker_of)).is_some();
        if !has_marker {
            return RetryReply { success: false, started: false, reason: Some("no turn to retry".into()) };
        }
        self.start(Work::Retry);
        RetryReply { success: true, started: true, reason: None }
    }

    pub(super) fn status(&self) -> Status {
        Status {
            id: self.record.id.clone(),
            title: self.record.title.clone(),
            role: self.record.role.clone(),
            master_id: self.record.master_id.clone(),
            state: self.tracker.as_ref().map_or(AgentState::Idle, |t| t.state()),
            busy: self.busy(),
            pending: self.pending.len(),
            steering: self.steering.len(),
            wake_at: None,
            last_seq: self.tracker.as_ref().map_or_else(|| last_logged(&self.record), |t| t.events().last_seq()),
            unanswered: 0,
        }
    }
}
