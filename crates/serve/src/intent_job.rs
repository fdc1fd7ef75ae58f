//! An idle-autonomy job inside a job (docs/design.md §13): an intent of the ledger or a routine the
//! tick picked, run holding the turn lock like every other job.
//!
//! Owns the job's life in the files: the guardrail check of a hand-written line at pickup, the
//! `running` line and the lease, the command (`bash -lc`, its own process group, output to
//! `.cicy/intents/<id>/<unix>.log`, recorded under `.cicy/intents/running/` for the reaper) or
//! the model turn `[cicy-intent] id:<id> | <what>`, then the final line (`done`, `failed`, or
//! `interrupted` with `preempted_by`), the lease released, the log line and the `autonomy`
//! event. Must not touch the actor's queues: the actor preempts by cancelling the job's token
//! (a command) or asking its turn to yield (a model turn), after naming the preempting class in
//! [`Preemption`].

use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::job::JobCtx;
use cicy_protocol::event::{AutonomyStatus, Emitter, EventKind, TurnOutcome};
use cicy_runtime::agent::Session;
use cicy_runtime::autonomy::key::GuardKey;
use cicy_runtime::autonomy::lease::Lease;
use cicy_runtime::autonomy::ledger::{Intent, Ledger, LedgerError, Status};
use cicy_runtime::autonomy::log::note;
use cicy_runtime::autonomy::plan::{Pick, RoutineRuns};
use cicy_runtime::autonomy::priority::Class;
use cicy_runtime::autonomy::tick::{running_dir, AutoJob};
use cicy_runtime::autonomy::{guard, wish};
use cicy_runtime::turn::{self, Steering};
use cicy_store::fsutil;
use cicy_tools::process::{self, Ending};

/// Who stopped the running job, set by the actor before it stops it (the first setter wins):
/// a class (`human`, `alarm`, …: a preemption) or `drop`, `off`, `rm`, `shutdown`. `None`: it
/// ran to its end. Setting it also ends a guardrail check that has not finished, so a job
/// still being checked at pickup gives way at once.
#[derive(Debug, Clone, Default)]
pub(super) struct Preemption {
    by: Arc<Mutex<Option<String>>>,
    stopped: CancellationToken,
}

impl Preemption {
    pub(super) fn set(&self, by: &str) {
        let mut slot = self.by.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert_with(|| by.to_string());
        self.stopped.cancel();
    }

    fn get(&self) -> Option<String> {
        self.by.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// **[chosen]** What `<last line>` of a result keeps.
const RESULT_MAX_CHARS: usize = 200;

/// How the job ended, for the actor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum AutoEnd {
    /// It ran; the status written.
    Ran(Status),
    /// The guardrails refused a hand-written line at pickup.
    Refused,
    /// Nothing ran: the intent was no longer open when the job started (dropped meanwhile), or
    /// the job was stopped before it started (it stays as it was and runs at a later tick).
    Gone,
    /// The ledger or the lease could not be written; the text says which.
    Failed(String),
}

/// Runs `job` in `session`; `cancel` stops a command (a preemption or a person's cancel).
pub(super) async fn run(
    ctx: &JobCtx,
    session: &mut Session,
    job: &AutoJob,
    preemption: &Preemption,
    events: &Emitter,
    cancel: &CancellationToken,
    steering: &Steering,
) -> AutoEnd {
    let ws = ctx.workspace.clone();
    let name = job.pick.job();
    if let Pick::Intent(intent) = &job.pick {
        let key = match fsutil::blocking(|| GuardKey::load_or_create(ctx.home.root())) {
            Ok(key) => key,
            Err(e) => return AutoEnd::Failed(e.to_string()),
        };
        if !wish::is_checked(&key, intent) {
            let checked = tokio::select! {
                checked = pickup_check(ctx, session, &key, intent, cancel) => checked,
                () = preemption.stopped.cancelled() => return AutoEnd::Gone,
            };
            match checked {
                // A refusal because the check was cut short is not the guardrails' verdict.
                Err(_) if cancel.is_cancelled() || preemption.get().is_some() => return AutoEnd::Gone,
                Err(refusal) => return refuse(&ws, intent, &refusal.to_string(), events),
                Ok(checked) => {
                    if let Err(e) = fsutil::blocking(|| Ledger::of_workspace(&ws).append(vec![checked])) {
                        return AutoEnd::Failed(e.to_string());
                    }
                }
            }
        }
    }
    if preemption.get().is_some() || cancel.is_cancelled() {
        return AutoEnd::Gone;
    }
    let started = match fsutil::blocking(|| start(ctx, job)) {
        Ok(Some(started)) => started,
        Ok(None) => return AutoEnd::Gone,
        Err(e) => return AutoEnd::Failed(e),
    };
    events.emit(EventKind::Autonomy { job: name.clone(), status: AutonomyStatus::Running, detail: Some(describe(&job.pick)) });
    let (ending, result) = match job.pick.run() {
        Some(command) => run_command(ctx, session, job, command, started, cancel).await,
        None => run_turn(session, job, events, cancel, steering).await,
    };
    let (status, shown) = match ending {
        Ran::Done => (Status::Done, AutonomyStatus::Done),
        Ran::Failed => (Status::Failed, AutonomyStatus::Failed),
        Ran::Stopped => (Status::Interrupted, AutonomyStatus::Interrupted),
    };
    let by = (status == Status::Interrupted).then(|| preemption.get().unwrap_or_else(|| "human".to_string()));
    let end = fsutil::blocking(|| finish(ctx, job, status, &result, by.as_deref()));
    let detail = match &by {
        Some(by) => format!("preempted by {by}; {result}"),
        None => result,
    };
    events.emit(EventKind::Autonomy { job: name, status: shown, detail: Some(detail) });
    match end {
        Ok(()) => AutoEnd::Ran(status),
        Err(e) => AutoEnd::Failed(e),
    }
}

async fn pickup_check(
    ctx: &JobCtx,
    session: &Session,
    key: &GuardKey,
    intent: &Intent,
    cancel: &CancellationToken,
) -> Result<Intent, guard::Refusal> {
    let model = super::job::FlushCtx::of(session).model;
    let judge = guard::Judge { client: session.client(), model: &model, agent_id: &ctx.id };
    let gctx = guard::GuardCtx { workspace: &ctx.workspace, home: ctx.home.root() };
    wish::check_at_pickup(key, intent, &gctx, &judge, cancel).await
}

fn refuse(ws: &Path, intent: &Intent, reason: &str, events: &Emitter) -> AutoEnd {
    let line = Intent { status: Status::Refused, refused_reason: Some(reason.to_string()), ..intent.clone() };
    let written = fsutil::blocking(|| Ledger::of_workspace(ws).append(vec![line]));
    note(ws, &format!("intent:{} refused at pickup: {reason}", intent.id));
    events.emit(EventKind::Autonomy {
        job: format!("intent:{}", intent.id),
        status: AutonomyStatus::Refused,
        detail: Some(reason.to_string()),
    });
    match written {
        Ok(()) => AutoEnd::Refused,
        Err(e) => AutoEnd::Failed(e.to_string()),
    }
}

/// The `running` line (an intent still open) or the routine's start, and the lease. `None`
/// when the intent was dropped or finished meanwhile.
fn start(ctx: &JobCtx, job: &AutoJob) -> Result<Option<String>, String> {
    let now = fsutil::now_rfc3339();
    if let Pick::Intent(intent) = &job.pick {
        let ledger = Ledger::of_workspace(&ctx.workspace);
        let open = ledger
            .update(|f| {
                let Some(cur) = f.get(&intent.id).filter(|i| i.is_open()) else {
                    return Ok::<_, LedgerError>((vec![], false));
                };
                Ok((vec![Intent { status: Status::Running, started_at: Some(now.clone()), ..cur.clone() }], true))
            })
            .map_err(|e| e.to_string())?;
        if !open {
            return Ok(None);
        }
    }
    if let Pick::Routine { class, .. } = &job.pick {
        RoutineRuns::record(&ctx.workspace, *class, fsutil::unix_now() as i64).map_err(|e| e.to_string())?;
    }
    take_lease(ctx, job, None, &now)?;
    note(&ctx.workspace, &format!("{} running: {}", job.pick.job(), describe(&job.pick)));
    Ok(Some(now))
}

fn take_lease(ctx: &JobCtx, job: &AutoJob, pgid: Option<i32>, started_at: &str) -> Result<(), String> {
    let lease = Lease {
        agent_id: ctx.id.clone(),
        job: job.pick.job(),
        pid: pgid.map(i64::from),
        pgid: pgid.map(i64::from),
        priority: job.priority,
        started_at: started_at.to_string(),
    };
    cicy_runtime::wake::db::WakeDb::open(&ctx.home).and_then(|db| db.lease_take(&lease)).map_err(|e| e.to_string())
}

/// The final line (kept `dropped` if a person dropped it meanwhile), the lease released.
fn finish(ctx: &JobCtx, job: &AutoJob, status: Status, result: &str, preempted_by: Option<&str>) -> Result<(), String> {
    let mut problems = Vec::new();
    if let Pick::Intent(intent) = &job.pick {
        let now = fsutil::now_rfc3339();
        let written = Ledger::of_workspace(&ctx.workspace).update(|f| {
            // `intents rm` renamed the ledger meanwhile: no line starts a new one.
            let Some(cur) = f.get(&intent.id).cloned() else {
                return Ok::<_, LedgerError>((vec![], ()));
            };
            let mut next = Intent { result: Some(result.to_string()), ..cur };
            match (next.status, preempted_by) {
                (Status::Dropped, by) => next.preempted_by = by.map(str::to_string),
                (_, Some(by)) => {
                    next.status = Status::Interrupted;
                    next.preempted_by = Some(by.to_string());
                    // Only work of a higher class counts for starvation; `off`, `drop`, `rm`
                    // and `shutdown` are not a squeeze.
                    if Class::ALL.iter().any(|c| c.as_str() == by) {
                        next.preempted_count += 1;
                    }
                }
                (_, None) => {
                    next.status = status;
                    next.done_at = Some(now.clone());
                    next.preempted_count = 0;
                }
            }
            Ok((vec![next], ()))
        });
        if let Err(e) = written {
            problems.push(e.to_string());
        }
    }
    if let Err(e) = cicy_runtime::wake::db::WakeDb::open(&ctx.home).and_then(|db| db.lease_release(&ctx.id)) {
        problems.push(e.to_string());
    }
    let how = match preempted_by {
        Some(by) => format!("interrupted (preempted by {by})"),
        None => status.as_str().to_string(),
    };
    note(&ctx.workspace, &format!("{} {how}: {result}", job.pick.job()));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

enum Ran {
    Done,
    Failed,
    Stopped,
}

async fn run_command(
    ctx: &JobCtx,
    session: &Session,
    job: &AutoJob,
    command: &str,
    started_at: String,
    cancel: &CancellationToken,
) -> (Ran, String) {
    let m = match session.materials() {
        Ok(m) => m,
        Err(e) => return (Ran::Failed, format!("cannot start: {e}")),
    };
    let events = ctx.tracker.emitter();
    let mut tctx = cicy_runtime::turn::tool_context(session, &m, cancel, &events);
    tctx.running_dir = Some(running_dir(&ctx.workspace));
    let folder = ctx.workspace.join(".cicy").join("intents").join(folder_of(&job.pick));
    let log_path = folder.join(format!("{}.log", fsutil::unix_now()));
    let label = format!("{}: {command}", job.pick.job());
    let spawned = fsutil::blocking(|| -> Result<_, String> {
        std::fs::create_dir_all(&folder).map_err(|e| format!("{}: {e}", folder.display()))?;
        let log = std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let spec = process::Job { command, cwd: &ctx.workspace, env: &[], timeout: job.run_timeout, label: &label, output_limit: 0 };
        process::spawn_logged(&spec, &tctx, log).map_err(|e| e.to_string())
    });
    let running = match spawned {
        Ok(r) => r,
        Err(e) => return (Ran::Failed, e),
    };
    if let Err(e) = fsutil::blocking(|| take_lease(ctx, job, Some(running.pgid()), &started_at)) {
        tracing::warn!(agent = %ctx.id, error = %e, "cannot record the intent's process group in its lease");
    }
    let ending = running.wait(job.run_timeout, cancel).await;
    let last = fsutil::blocking(|| last_line(&log_path));
    match ending {
        Ending::Exited(Ok(status)) => {
            use std::os::unix::process::ExitStatusExt;
            match (status.code(), status.signal()) {
                (Some(0), _) => (Ran::Done, format!("exit 0: {last}")),
                (Some(code), _) => (Ran::Failed, format!("exit {code}: {last}")),
                (None, Some(signal)) => (Ran::Failed, format!("killed by signal {signal}: {last}")),
                (None, None) => (Ran::Failed, format!("ended with {status}: {last}")),
            }
        }
        Ending::Exited(Err(e)) => (Ran::Failed, format!("could not wait for the command: {e}")),
        Ending::TimedOut => (Ran::Failed, format!("timed out after {} s: {last}", job.run_timeout.as_secs())),
        Ending::Cancelled => (Ran::Stopped, format!("stopped: {last}")),
    }
}

async fn run_turn(
    session: &mut Session,
    job: &AutoJob,
    events: &Emitter,
    cancel: &CancellationToken,
    steering: &Steering,
) -> (Ran, String) {
    let text = match &job.pick {
        Pick::Intent(i) => format!("[cicy-intent] id:{} | {}", i.id, i.what),
        Pick::Routine { class, routine } => {
            format!("[cicy-intent] id:{} | {}", class.as_str(), routine.prompt.as_deref().unwrap_or_default())
        }
    };
    match turn::run_intent_turn(session, &text, job.rounds, events, cancel, steering).await {
        Ok(TurnOutcome::Completed) => {
            let answer = session.conversation().current.messages.last().map(|m| m.plain_text()).unwrap_or_default();
            (Ran::Done, format!("turn completed: {}", cut(answer.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(""))))
        }
        Ok(TurnOutcome::Cancelled) => (Ran::Stopped, "turn stopped at a round boundary".into()),
        Ok(TurnOutcome::Failed) => (Ran::Failed, "turn failed (see the conversation's marker)".into()),
        Ok(TurnOutcome::Blocked) => (Ran::Failed, "turn blocked by a hook".into()),
        Err(e) => (Ran::Failed, format!("turn could not run: {e}")),
    }
}

fn folder_of(pick: &Pick) -> String {
    match pick {
        Pick::Intent(i) => i.id.clone(),
        Pick::Routine { class, .. } => class.as_str().to_string(),
    }
}

fn describe(pick: &Pick) -> String {
    match pick {
        Pick::Intent(i) => i.run.as_deref().map_or_else(|| i.what.clone(), |r| format!("{} — `{r}`", i.what)),
        Pick::Routine { routine, .. } => routine.run.clone().or_else(|| routine.prompt.clone()).unwrap_or_default(),
    }
}

/// The last non-blank line of the log, cut to [`RESULT_MAX_CHARS`]; reads at most its last 8 KiB.
fn last_line(path: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else { return String::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(8192)));
    let mut tail = Vec::new();
    let _ = f.read_to_end(&mut tail);
    let text = String::from_utf8_lossy(&tail);
    cut(text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(""))
}

/// One line of at most [`RESULT_MAX_CHARS`] characters, control characters (a NUL, an escape
/// sequence) shown as `�` so the ledger, the log and `ls` stay readable text.
fn cut(line: &str) -> String {
    let line: String = line.trim().chars().map(|c| if c.is_control() { '\u{FFFD}' } else { c }).collect();
    let line = line.as_str();
    match line.char_indices().nth(RESULT_MAX_CHARS) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_line_is_one_readable_line_of_at_most_200_characters() {
        assert_eq!(cut("  a\0b\u{1b}[31m  "), "a\u{FFFD}b\u{FFFD}[31m");
        let long = "x".repeat(250);
        assert_eq!(cut(&long), format!("{}…", "x".repeat(200)));
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("1.log");
        std::fs::write(&log, "first\nlast one\n\n").unwrap();
        assert_eq!(last_line(&log), "last one");
        assert_eq!(last_line(&dir.path().join("missing.log")), "");
    }
}
