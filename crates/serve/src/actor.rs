//! One actor task per agent (docs/design.md §9 "Agents", "Dispatch", "Steer"; codex-rs
//! `submit(Op)`): it alone owns the agent's [`Session`], state, pending queue, steering queue,
//! cancel token and memory timer, and takes [`Op`]s from a bounded queue and serve's signals
//! beside it (`handle`).
//!
//! A turn, retry, `/compact` or `/clear` runs as a job in its own task (`super::job`), which
//! takes the session and gives it back, so the actor keeps answering (queueing, steering,
//! cancelling) while it runs. A run is the job an input started plus the follow-ups the queued
//! inputs start; it ends with `state idle` and `done`. When the agent is truly idle, a tick
//! every `autonomy.tick_secs` (30 s) may start an idle-autonomy job (docs/design.md §13,
//! `cicy_runtime::autonomy::tick`); anything of a higher priority that arrives preempts it at once (a
//! command's group gets SIGTERM, a model turn yields at its next round boundary), except a job
//! on the never-killed list, which the newcomer waits for. Must not touch HTTP: routes turn
//! requests into `Op`s and stream the agent's events.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::intent_job::{AutoEnd, Preemption};
use super::job::{self, FlushCtx, JobCtx, JobEnd, Work};
use super::tracker::Tracker;
use super::wake_job::WakeEnd;
use cicy_protocol::event::{AgentState, ErrorKind, EventKind, SteerStatus};
use cicy_runtime::agent::{AgentError, Session};
use cicy_runtime::autonomy::priority::Class;
use cicy_runtime::autonomy::tick::Tick;
use cicy_runtime::command::{Command, CommandEnd, Posted};
use cicy_runtime::conversation::outcome::marker_of;
use cicy_runtime::turn::Steering;
use cicy_runtime::wake::message::Reason;
use cicy_runtime::wake::run::Trigger;
use cicy_store::eventlog::{AgentEvents, EventLogError, Subscription};
use cicy_store::fsutil;
use cicy_store::home::Home;
use cicy_store::registry::AgentRecord;

mod autonomy;
mod handle;
mod phase;

pub(super) use handle::{AgentHandle, Refused, QUEUE_CAPACITY};
use phase::{Ended, Phase};

/// cicy: what a queued input's stream is told.
pub const QUEUED_TEXT: &str = "Queued — will be handled after the current reply completes.";
/// cicy: the `flush` event's text when queued inputs start their follow-up turn.
pub const FLUSH_TEXT: &str = "Processing queued input…";
/// **[chosen]** How often a run waits for a turn lock a CLI process holds.
const LOCK_RETRY: Duration = Duration::from_secs(1);
/// **[chosen]** The first idle tick after serve's start, plus up to [`FIRST_TICK_SPREAD`].
const FIRST_TICK: Duration = Duration::from_secs(1);
const FIRST_TICK_SPREAD: Duration = Duration::from_secs(2);
/// idle: while an autonomy job runs, what must preempt it is also looked for every 0.5 s.
const PREEMPT_POLL: Duration = Duration::from_millis(500);
/// **[chosen]** At shutdown a never-killed autonomy job gets this long to finish before it is
/// stopped like any other.
const NEVER_KILLED_GRACE: Duration = Duration::from_secs(10);

/// A request to an agent's actor; each carries where its answer goes.
pub(super) enum Op {
    /// `POST /api/cicy/chat`: start a run (the stream follows it) or queue the text.
    Chat {
        text: String,
        reply: oneshot::Sender<Admit>,
    },
    /// `POST /api/agents/{id}/prompt`: like chat without a stream; answers whether it queued.
    Prompt {
        text: String,
        reply: oneshot::Sender<bool>,
    },
    Steer {
        text: String,
        interrupt: bool,
        reply: oneshot::Sender<SteerReply>,
    },
    /// Answers whether a job was running.
    Cancel {
        reply: oneshot::Sender<CancelReply>,
    },
    Retry {
        reply: oneshot::Sender<RetryReply>,
    },
    Clear {
        reply: oneshot::Sender<Result<ClearReply, ClearError>>,
    },
    Compact {
        keep: usize,
        reply: oneshot::Sender<Result<CompactReply, Busy>>,
    },
    Status {
        reply: oneshot::Sender<Status>,
    },
    /// A subscription to the agent's events.
    Subscribe {
        from: EventsFrom,
        reply: oneshot::Sender<Result<Subscription, EventLogError>>,
    },
    /// Opens the session ahead of the first request (serve's boot, one agent at a time).
    Warm {
        reply: oneshot::Sender<()>,
    },
    /// Cancels any job, waits for it (its marker written), closes the event log.
    Shutdown {
        reply: oneshot::Sender<()>,
    },
    /// A todo changed through a route: its event goes on the agent's stream.
    Note {
        note: cicy_runtime::wake::state::WakeNote,
    },
    /// `POST /api/agents/{id}/respond` (docs/design.md §12): answers the open `ask_user` question
    /// `reference`.
    Respond {
        reference: String,
        response: String,
        reply: oneshot::Sender<Result<(), cicy_tools::ask::UnknownRef>>,
    },
}

/// How a chat was taken.
pub(super) enum Admit {
    /// A run started; the subscription begins just before its first event.
    Started(Subscription),
    /// The agent is busy: the text waits in `pending`.
    Queued,
    /// A command that cannot run now (e.g. `/compact` while busy), with the reason.
    Refused(String),
    /// The event log could not be opened.
    Failed(String),
}

/// The answer to a steer: its `steered` status (`queued`, `prompted` or `rejected_full`).
pub(super) struct SteerReply {
    pub status: SteerStatus,
}

/// `POST /api/cicy/retry` *(cicy)*.
#[derive(Debug, Serialize)]
pub(super) struct RetryReply {
    pub success: bool,
    pub started: bool,
    pub reason: Option<String>,
}

/// `POST /api/cicy/clear` *(cicy)*.
#[derive(Debug, Serialize)]
pub(super) struct ClearReply {
    pub success: bool,
    pub canceled: bool,
    pub conv_id: String,
}

/// Why `POST /api/cicy/clear` did not clear (500).
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum ClearError {
    #[error("the job stopped")]
    JobStopped,
    #[error("the agent is busy in another process")]
    BusyElsewhere,
    #[error("serve is shutting down")]
    ShuttingDown,
    /// The session could not be opened or the new conversation not written; shared by every
    /// reply waiting for the same clear.
    #[error(transparent)]
    Agent(Arc<AgentError>),
}

/// `POST /api/cicy/compact` **[chosen]**: message counts of the window before and after;
/// `outcome` is `done`, `cancelled` or `failed` (then `after` = `before`).
#[derive(Debug, Serialize)]
pub(super) struct CompactReply {
    pub success: bool,
    pub outcome: &'static str,
    pub before: usize,
    pub after: usize,
}

/// `/compact` refused because the agent is busy (409).
#[derive(Debug)]
pub(super) struct Busy;

/// What `POST /api/cicy/cancel` did: whether a job was running, and how many inputs the
/// cancel dropped with it, queued prompts and waiting steers both (docs/design.md §9 abort clears
/// the pending queue and the steering queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CancelReply {
    pub canceled: bool,
    pub dropped: usize,
}

/// A row of `GET /api/agents` (docs/design.md §9). `wake_at` (the earliest pending todo, local
/// minute) and `unanswered` (unresolved reply obligations) are filled in by the route from
/// `cicy.db`.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Status {
    pub id: String,
    pub title: String,
    pub role: String,
    pub master_id: Option<String>,
    pub state: AgentState,
    pub busy: bool,
    pub pending: usize,
    pub steering: usize,
    pub wake_at: Option<String>,
    pub last_seq: u64,
    pub unanswered: usize,
}

/// Where a subscription of `GET /api/agents/{id}/events` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EventsFrom {
    /// Live, from now.
    Now,
    /// Every event with a seq above this (`Last-Event-ID`).
    After(u64),
    /// The newest this many logged events (`?last=`).
    Last(usize),
}

/// What an actor needs from the server.
#[derive(Clone)]
pub(super) struct Shared {
    pub home: Home,
    pub http: reqwest::Client,
    pub global: Arc<cicy_store::eventlog::GlobalFeed>,
    /// **[chosen]** A session idle this long is dropped and reopened on demand (600 s).
    pub session_idle: Duration,
    pub scheduler: super::scheduler::Scheduler,
    pub wake_limits: super::wake_job::WakeLimits,
    /// What a drain changed goes there (`super::drain`).
    pub drained: super::drain::DrainTargets,
    /// Runs the idle ticks of every agent (docs/design.md §13).
    pub ticks: super::tick_worker::TickWorker,
}

/// Starts the actor of `record`.
pub(super) fn spawn(record: AgentRecord, shared: Shared) -> AgentHandle {
    let (handle, rx, signalled) = AgentHandle::new(record.id.clone());
    let actor = Actor {
        record,
        shared,
        tracker: None,
        session: None,
        pending: Vec::new(),
        steering: Steering::default(),
        cancel: CancellationToken::new(),
        phase: Phase::Idle,
        deferred_clear: Vec::new(),
        compact_reply: None,
        last_active: Instant::now(),
        flush: None,
        flush_not_before: None,
        lock_notified: false,
        wake_due: None,
        wake_retry_at: None,
        questions: Arc::default(),
        tick_at: None,
        tick_every: Duration::from_secs(cicy_runtime::autonomy::settings::DEFAULT_TICK_SECS),
        priorities: cicy_runtime::autonomy::priority::Priorities::default(),
        resting: false,
        tick_reply: None,
    };
    tokio::spawn(actor.run(rx, signalled));
    handle
}

struct Actor {
    record: AgentRecord,
    shared: Shared,
    tracker: Option<Arc<Tracker>>,
    session: Option<Session>,
    pending: Vec<String>,
    steering: Steering,
    cancel: CancellationToken,
    /// Idle, running a job, or waiting (retried every [`LOCK_RETRY`]) for a turn lock another
    /// process holds.
    phase: Phase,
    /// `POST /api/cicy/clear` replies waiting for the cancelled job to end.
    deferred_clear: Vec<(bool, oneshot::Sender<Result<ClearReply, ClearError>>)>,
    compact_reply: Option<oneshot::Sender<Result<CompactReply, Busy>>>,
    last_active: Instant,
    /// The memory flush running beside the agent, if any.
    flush: Option<(CancellationToken, JoinHandle<()>)>,
    /// No timer flush before this: a flush that left the buffer due (another process is
    /// flushing it, or the backoff) is not fired again at once.
    flush_not_before: Option<SystemTime>,
    /// The "waiting for the turn lock" line was shown for this run.
    lock_notified: bool,
    /// A wake asked for while a run was going; it runs when the run ends.
    wake_due: Option<Reason>,
    /// An inbox file that did not parse yet is looked at again then.
    wake_retry_at: Option<Instant>,
    /// The agent's open `ask_user` questions: its turns ask, `Op::Respond` answers.
    questions: Arc<cicy_tools::ask::Questions>,
    /// The next idle tick (docs/design.md §13); armed whenever the actor is idle.
    tick_at: Option<Instant>,
    /// The role's `autonomy.tick_secs`, as the last tick read it.
    tick_every: Duration,
    /// The priority table, as the last tick read it.
    priorities: cicy_runtime::autonomy::priority::Priorities,
    /// The last tick rested: the next rest writes no line (one line per streak).
    resting: bool,
    /// The answer of a tick the tick thread runs now.
    tick_reply: Option<oneshot::Receiver<cicy_runtime::autonomy::tick::TickOut>>,
}

impl Actor {
    async fn run(mut self, mut rx: mpsc::Receiver<Op>, mut signalled: handle::Signalled) {
        // The first tick comes 1–3 s after the start, spread so that thousands of agents do
        // not all read their files at the same instant; it reads the role's period.
        self.tick_at = Some(Instant::now() + FIRST_TICK + FIRST_TICK_SPREAD.mul_f64(rand::random::<f64>()));
        loop {
            let idle = matches!(self.phase, Phase::Idle);
            let memory_at = if idle { self.memory_due_at() } else { None };
            let drop_at = (idle && self.session.is_some()).then(|| self.last_active + self.shared.session_idle);
            let tick_at = if idle && self.tick_reply.is_none() {
                Some(*self.tick_at.get_or_insert_with(|| Instant::now() + self.tick_every))
            } else {
                None
            };
            let poll_at = self.phase.auto_mut().map(|a| *a.poll_at.get_or_insert_with(|| Instant::now() + PREEMPT_POLL));
            let retry_at = self.phase.retry_at();
            tokio::select! {
                op = rx.recv() => match op {
                    Some(Op::Shutdown { reply }) => {
                        self.shutdown().await;
                        let _ = reply.send(());
                        return;
                    }
                    Some(op) => self.handle(op).await,
                    None => {
                        self.shutdown().await;
                        return;
                    }
                },
                raised = signalled.next() => self.signalled(raised),
                ended = phase::join(&mut self.phase) => self.job_done(ended).await,
                () = sleep(retry_at) => self.retry_waiting(),
                () = sleep(self.wake_retry_at) => {
                    self.wake_retry_at = None;
                    self.wake(Reason::Inbox);
                }
                () = sleep_system(memory_at) => self.flush_memory(),
                () = sleep(tick_at) => self.tick(),
                out = answer(&mut self.tick_reply) => self.tick_done(out),
                () = sleep(poll_at) => {
                    if let Some(a) = self.phase.auto_mut() {
                        a.poll_at = None;
                    }
                    self.poll_preempt();
                }
                () = sleep(drop_at) => {
                    // Dropped after a long idle period and reopened on demand **[chosen]**.
                    self.session = None;
                }
            }
        }
    }

    /// The event log, opened on first use.
    fn tracker(&mut self) -> Result<Arc<Tracker>, EventLogError> {
        if let Some(t) = &self.tracker {
            return Ok(t.clone());
        }
        let global = Some(self.shared.global.clone());
        let events = fsutil::blocking(|| AgentEvents::open(&self.record.workspace, &self.record.id, global))?;
        let t = Tracker::new(events);
        self.tracker = Some(t.clone());
        Ok(t)
    }

    fn emit(&mut self, kind: EventKind) {
        match self.tracker() {
            Ok(t) => {
                t.events().emit(kind);
            }
            Err(e) => tracing::error!(agent = %self.record.id, error = %e, "cannot log an event"),
        }
    }

    fn busy(&self) -> bool {
        !matches!(self.phase, Phase::Idle)
    }

    async fn handle(&mut self, op: Op) {
        self.last_active = Instant::now();
        match op {
            Op::Chat { text, reply } => {
                let admit = self.chat(text).await;
                let _ = reply.send(admit);
            }
            Op::Prompt { text, reply } => {
                self.preempt(Class::Human);
                let queued = self.busy();
                if queued {
                    self.pending.push(text);
                } else {
                    self.start(Work::Turn(text));
                }
                let _ = reply.send(queued);
            }
            Op::Steer { text, interrupt, reply } => {
                let status = self.steer(text, interrupt);
                self.emit(EventKind::Steered { status });
                let _ = reply.send(SteerReply { status });
            }
            Op::Cancel { reply } => {
                let dropped = self.pending.len() + self.steering.len();
                let canceled = self.abort();
                let _ = reply.send(CancelReply { canceled, dropped });
            }
            Op::Retry { reply } => {
                let r = self.retry();
                let _ = reply.send(r);
            }
            Op::Clear { reply } => {
                let canceled = self.abort();
                self.deferred_clear.push((canceled, reply));
                // Otherwise the clear runs when the cancelled job has ended (`job_done`).
                if !matches!(self.phase, Phase::Running(_)) {
                    self.start(Work::Clear);
                }
            }
            Op::Compact { keep, reply } => {
                if self.phase.auto_free() {
                    self.preempt(Class::Human);
                    self.compact_reply = Some(reply);
                    self.run_after_auto(Work::Compact { keep });
                } else if self.busy() {
                    let _ = reply.send(Err(Busy));
                } else {
                    self.compact_reply = Some(reply);
                    self.start(Work::Compact { keep });
                }
            }
            Op::Status { reply } => {
                let _ = reply.send(self.status());
            }
            Op::Subscribe { from, reply } => {
                let sub = match self.tracker() {
                    Ok(t) => Ok(match from {
                        EventsFrom::Now => t.events().subscribe(None).await,
                        EventsFrom::After(n) => t.events().subscribe(Some(n)).await,
                        EventsFrom::Last(n) => t.events().subscribe_last(n).await,
                    }),
                    Err(e) => Err(e),
                };
                let _ = reply.send(sub);
            }
            Op::Warm { reply } => {
                self.warm();
                let _ = reply.send(());
            }
            Op::Note { note } => {
                let kind = super::wake_job::note_event(note);
                self.emit(kind);
            }
            Op::Respond { reference, response, reply } => {
                let _ = reply.send(self.questions.respond(&reference, &response));
            }
            Op::Shutdown { .. } => {}
        }
    }

    /// What serve raised since the last look, the recoveries at start first, as they were sent.
    fn signalled(&mut self, raised: handle::Raised) {
        self.last_active = Instant::now();
        if raised.recover_autonomy {
            self.recover_autonomy();
        }
        if raised.recover {
            self.recover();
        }
        for reason in raised.wakes {
            // A wake with nothing to claim runs nothing.
            self.preempt(cicy_runtime::autonomy::tick::class_of_wake(reason));
            self.wake(reason);
        }
        if raised.drain {
            // Not while a job runs (a turn drains after each tool batch; the next poll comes
            // within 2 s).
            self.drain_outbox();
        }
    }

    /// Drains the outbox outside a turn: no claim, so a reply is shown as a `system` event.
    fn drain_outbox(&mut self) {
        // Beside an autonomy command the drain runs (it never touches the session); a
        // command's `cicy-agent send` must not wait for the command's end.
        let beside_command = self.phase.auto().is_some_and(|a| a.job.pick.run().is_some());
        if self.busy() && !beside_command {
            return;
        }
        let tracker = match self.tracker() {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(agent = %self.record.id, error = %e, "cannot open the event log; the outbox waits");
                return;
            }
        };
        let (home, id, ws) = (&self.shared.home, &self.record.id, &self.record.workspace);
        let notify = super::wake_job::notifier(id, tracker.emitter(), self.shared.scheduler.clone());
        let w = cicy_runtime::wake::state::WakeTurn::in_serve(home, id, ws, notify);
        fsutil::blocking(|| super::drain::drain_and_report(&w, &tracker.emitter(), &self.shared.drained));
    }

    /// docs/design.md §10: claims what is due and starts the wake turn, or, while a run goes on,
    /// keeps the wake for its end.
    fn wake(&mut self, reason: Reason) {
        if self.busy() {
            self.wake_due = Some(self.wake_due.unwrap_or(reason));
            return;
        }
        let (home, id, ws) = (self.shared.home.clone(), self.record.id.clone(), self.record.workspace.clone());
        let looked = fsutil::blocking(|| cicy_runtime::wake::run::prepare(&home, &id, &ws, Trigger { reason }));
        for note in looked.aside {
            self.emit(super::wake_job::note_event(note));
        }
        if let Some(wait) = looked.retry_in {
            let at = Instant::now() + wait;
            self.wake_retry_at = Some(self.wake_retry_at.map_or(at, |t| t.min(at)));
        }
        match looked.wake {
            Ok(Some(p)) => self.start(Work::Wake(Box::new(p))),
            Ok(None) => {}
            Err(e) => self.emit(EventKind::Error {
                kind: ErrorKind::Wake,
                message: format!("the wake cannot run (its messages and todos stay pending): {e}"),
            }),
        }
    }

    /// Serve's start after a kill: the interruption notices, the claimed todos rescheduled.
    fn recover(&mut self) {
        let (home, id, ws) = (self.shared.home.clone(), self.record.id.clone(), self.record.workspace.clone());
        match fsutil::blocking(|| cicy_runtime::wake::run::recover(&home, &id, &ws)) {
            Ok(notes) => {
                for n in notes {
                    self.emit(super::wake_job::note_event(n));
                }
                self.shared.scheduler.changed(&id);
            }
            Err(e) => self.emit(EventKind::Error { kind: ErrorKind::Wake, message: format!("recovering the last wake: {e}") }),
        }
    }

    /// §9 dispatch: a command when idle, queued text when busy, else a new run.
    async fn chat(&mut self, text: String) -> Admit {
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

    fn steer(&mut self, text: String, interrupt: bool) -> SteerStatus {
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
    fn abort(&mut self) -> bool {
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
    fn run_after_auto(&mut self, work: Work) {
        if let Some(a) = self.phase.auto_mut() {
            a.after = Some(work);
        }
    }

    fn retry(&mut self) -> RetryReply {
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

    fn status(&self) -> Status {
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

    /// Opens the session without a job (boot warming, retry's check); quietly leaves it closed
    /// when the agent cannot be opened or another process holds its lock.
    fn warm(&mut self) {
        if self.session.is_some() {
            return;
        }
        let (home, id, http) = (self.shared.home.clone(), self.record.id.clone(), self.shared.http.clone());
        let (ws, record) = (self.record.workspace.clone(), self.record.clone());
        let opened = fsutil::blocking(|| {
            let _lock = cicy_store::lock::TurnLock::try_acquire(&ws, &id).ok()?;
            let mut s = Session::open_resident(&home, record, &http).ok()?;
            // Tool groups a killed serve left running are stopped now, not at the next chat.
            s.reap();
            Some(s)
        });
        if let Some(s) = &opened {
            for reaped in &s.notes().reaped {
                self.emit(EventKind::System { text: reaped.to_string() });
            }
        }
        self.session = opened;
    }

    /// Starts `work` as a job (state `running`).
    fn start(&mut self, work: Work) {
        let tracker = match self.tracker() {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(agent = %self.record.id, error = %e, "cannot open the event log; nothing was run");
                return;
            }
        };
        if let Some((c, _)) = self.flush.take() {
            // A turn wins over a memory flush still talking to the gateway: the buffer stays
            // and is flushed after this run.
            c.cancel();
        }
        tracker.set(AgentState::Running);
        self.cancel = CancellationToken::new();
        self.tick_at = None;
        self.steering.clear_yield();
        let ctx = JobCtx {
            home: self.shared.home.clone(),
            id: self.record.id.clone(),
            record: self.record.clone(),
            workspace: self.record.workspace.clone(),
            http: self.shared.http.clone(),
            tracker,
            scheduler: self.shared.scheduler.clone(),
            wake_limits: self.shared.wake_limits,
            drained: self.shared.drained.clone(),
            questions: self.questions.clone(),
        };
        let handle = tokio::spawn(job::run(ctx, self.session.take(), work.clone(), self.cancel.clone(), self.steering.clone()));
        self.phase = Phase::running(work, handle);
    }

    async fn job_done(&mut self, ended: Option<Ended>) {
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
    fn fail_replies(&mut self, why: ClearError) {
        for (_, tx) in self.deferred_clear.drain(..) {
            let _ = tx.send(Err(why.clone()));
        }
        if let Some(tx) = self.compact_reply.take() {
            let _ = tx.send(Ok(CompactReply { success: false, outcome: "failed", before: 0, after: 0 }));
        }
    }

    /// The run is over: `state idle`, `done`, then a due memory flush (after `turn_ended`,
    /// without the turn lock, docs/design.md §9 "Shape").
    fn end_run(&mut self) {
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
    fn finish_run(&mut self) {
        self.lock_notified = false;
        if let Some(t) = &self.tracker {
            t.set(AgentState::Idle);
        }
        self.emit(EventKind::Done);
    }

    fn retry_waiting(&mut self) {
        if let Some(work) = self.phase.take_waiting() {
            self.start(work);
        }
    }

    /// When the memory timer fires: the buffer's next due time, not while a flush runs.
    fn memory_due_at(&self) -> Option<SystemTime> {
        if self.flush.as_ref().is_some_and(|(_, h)| !h.is_finished()) {
            return None;
        }
        let memory = self.session.as_ref()?.memory();
        let due = fsutil::blocking(|| memory.next_due().ok().flatten())?;
        Some(self.flush_not_before.map_or(due, |n| due.max(n)))
    }

    /// The memory timer fired (docs/design.md §9: `sleep_until(next_due)`, only when idle).
    fn flush_memory(&mut self) {
        if let Some(flush) = self.session.as_ref().map(FlushCtx::of) {
            self.spawn_flush(flush);
        }
    }

    fn spawn_flush(&mut self, flush: FlushCtx) {
        let Ok(tracker) = self.tracker() else { return };
        let cancel = CancellationToken::new();
        self.flush_not_before = Some(SystemTime::now() + flush.memory.settings().recognizer_timeout);
        let events = tracker.emitter();
        self.flush = Some((cancel.clone(), tokio::spawn(flush.flush(events, cancel))));
    }

    async fn shutdown(&mut self) {
        self.pending.clear();
        self.steering.clear();
        self.phase.take_waiting();
        if let Some((c, h)) = self.flush.take() {
            c.cancel();
            let _ = h.await;
        }
        if let Some((never_killed, preemption)) = self.phase.auto().map(|a| (a.job.never_killed, a.preemption.clone())) {
            if never_killed {
                let finished = tokio::time::timeout(NEVER_KILLED_GRACE, phase::join(&mut self.phase)).await;
                if let Ok(Some(Ended { out: Ok(out), .. })) = finished {
                    self.session = out.session;
                }
            }
            preemption.set("shutdown");
        }
        if matches!(self.phase, Phase::Running(_)) {
            self.cancel.cancel();
            let ended = phase::join(&mut self.phase).await;
            if let Some(Ended { out: Ok(out), .. }) = ended {
                self.session = out.session;
            }
            self.fail_replies(ClearError::ShuttingDown);
            if let Some(t) = &self.tracker {
                t.set(AgentState::Idle);
            }
            self.emit(EventKind::Done);
        }
        if let Some(t) = &self.tracker {
            if let Err(e) = t.events().close().await {
                tracing::error!(agent = %self.record.id, error = %e, "cannot close the event log");
            }
        }
    }
}

/// The job of a command posted as chat text; a posted `/compact` keeps no message.
fn command_work(c: Command) -> Work {
    match c {
        Command::Clear => Work::Clear,
        Command::Compact => Work::Compact { keep: 0 },
    }
}

/// The agent's last logged seq without opening its log (which would reserve seqs).
fn last_logged(record: &AgentRecord) -> u64 {
    fsutil::blocking(|| cicy_store::eventlog::last_logged(&record.workspace).unwrap_or(0))
}

/// The answer of a running tick; never resolves when there is none.
async fn answer<T>(reply: &mut Option<oneshot::Receiver<T>>) -> Option<T> {
    match reply {
        Some(rx) => {
            let out = rx.await.ok();
            *reply = None;
            out
        }
        None => std::future::pending().await,
    }
}

async fn sleep(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

async fn sleep_system(at: Option<SystemTime>) {
    match at {
        Some(at) => tokio::time::sleep(at.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO)).await,
        None => std::future::pending().await,
    }
}
