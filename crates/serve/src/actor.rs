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
//!
//! Its parts: `op` (the requests and their replies), `handle` (the queue and the signals),
//! `inputs` (chat, steer, abort, retry, status), `ending` (what follows a job's end),
//! `phase` (idle, running, waiting for a lock) and `autonomy` (ticks and preemption).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::intent_job::Preemption;
use super::job::{self, JobCtx, Work};
use super::tracker::Tracker;
use cicy_protocol::event::{AgentState, ErrorKind, EventKind};
use cicy_runtime::agent::Session;
use cicy_runtime::autonomy::priority::Class;
use cicy_runtime::autonomy::tick::Tick;
use cicy_runtime::command::Command;
use cicy_runtime::turn::Steering;
use cicy_runtime::wake::message::Reason;
use cicy_runtime::wake::run::Trigger;
use cicy_store::eventlog::{AgentEvents, EventLogError};
use cicy_store::fsutil;
use cicy_store::home::Home;
use cicy_store::registry::AgentRecord;

mod autonomy;
mod ending;
mod handle;
mod inputs;
mod op;
mod phase;

pub(super) use handle::{AgentHandle, Refused, QUEUE_CAPACITY};
pub(super) use op::{Admit, Busy, CancelReply, ClearError, ClearReply, CompactReply, EventsFrom, Op, RetryReply, Status, SteerReply};
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
