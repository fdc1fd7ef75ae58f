//! One idle tick (docs/design.md §13) as serve's actor runs it and `intents <id> tick --dry-run`
//! shows it: what to run, whether the agent is truly idle, which class of work a wake is, what
//! the 0.5 s poll looks for while a job runs, and the recovery of what a killed serve left.
//!
//! Owns reading the tick's inputs (the role's `autonomy:` block, the switch, the ledger, the
//! priority table, the routines' last starts) and appending the starvation promotions. An
//! empty tick (no open intent, no routine) reads the role's meta.yaml, the switch and the
//! ledger, and nothing else: no database, no gateway. Must not touch processes or queues: the
//! actor starts the [`AutoJob`] a tick returns (`cicy-serve`'s intent job).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::guard;
use super::ledger::{Intent, Ledger, LedgerError, Status};
use super::plan::{self, Decision, Inputs, Pick, RoutineRuns};
use super::priority::{Class, Priorities};
use super::settings::{self, AutonomyConfig};
use crate::fsutil;
use crate::home::Home;
use crate::registry::AgentRecord;
use crate::wake::message::Reason;

/// What the tick asked to run.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoJob {
    pub pick: Pick,
    pub priority: u8,
    /// On the never-killed list (docs/design.md §13): a preemption waits for it instead.
    pub never_killed: bool,
    /// Rounds of a model turn (`autonomy.intent_rounds`, 20).
    pub rounds: u32,
    /// A command's time limit (`autonomy.run_timeout_secs`, 3600 s).
    pub run_timeout: Duration,
}

/// `<workspace>/.cicy/intents/running`: the intents' process groups, apart from the tools'
/// (`.cicy/running`), which every session open reaps while an intent may still run.
pub fn running_dir(workspace: &Path) -> PathBuf {
    workspace.join(".cicy").join("intents").join("running")
}

/// What a tick decided.
#[derive(Debug)]
pub enum Tick {
    Run(Box<AutoJob>),
    Rest,
    Off(String),
    /// Something else needs the agent (an unread message, a due todo, an open claim).
    NotIdle(&'static str),
    /// An input could not be read; autonomy waits until it is fixed.
    Error(String),
}

/// A tick's outcome, with the period until the next and the promotions it wrote.
#[derive(Debug)]
pub struct TickOut {
    pub tick: Tick,
    pub every: Duration,
    pub priorities: Priorities,
    pub promoted: Vec<Intent>,
}

impl Tick {
    /// The line `intents <id> tick --dry-run` prints.
    pub fn dry_run_line(&self) -> String {
        match self {
            Tick::Run(job) => Decision::Run(job.pick.clone()).dry_run_line(),
            Tick::Rest => Decision::Rest.dry_run_line(),
            Tick::Off(why) => Decision::Off { why: why.clone() }.dry_run_line(),
            Tick::NotIdle(why) => format!("[dry-run] not idle: {why}"),
            Tick::Error(e) => format!("[dry-run] waiting: {e}"),
        }
    }
}

impl Tick {
    /// The `autonomy.log` line that starts a streak of ticks that run nothing; `None` for a
    /// job or a tick that found the agent busy.
    pub fn rest_line(&self) -> Option<String> {
        match self {
            Tick::Rest => Some(super::log::REST_LINE.to_string()),
            Tick::Off(why) => Some(format!("off ({why})")),
            Tick::Error(e) => Some(format!("waiting: {e}")),
            Tick::Run(_) | Tick::NotIdle(_) => None,
        }
    }
}

/// Whether a tick writes what it decides (the promotions) or only says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Write,
    DryRun,
}

/// Runs one tick's decision for `record` (blocking file and database reads; call through
/// `fsutil::blocking`). In [`Mode::DryRun`] nothing is written: the promotions it would make
/// are applied to what it reads and returned.
pub fn tick(home: &Home, record: &AgentRecord) -> TickOut {
    tick_in(home, record, Mode::Write)
}

/// [`tick`] in either [`Mode`].
pub fn tick_in(home: &Home, record: &AgentRecord, mode: Mode) -> TickOut {
    let mut out = TickOut {
        tick: Tick::Rest,
        every: Duration::from_secs(settings::DEFAULT_TICK_SECS),
        priorities: Priorities::default(),
        promoted: vec![],
    };
    let config = match crate::role::load_meta(home, &record.role_template) {
        Ok(meta) => meta.autonomy,
        Err(e) => {
            out.tick = Tick::Error(e.to_string());
            return out;
        }
    };
    out.every = config.tick();
    out.tick = decide(home, record, &config, mode, &mut out);
    out
}

fn decide(home: &Home, record: &AgentRecord, config: &AutonomyConfig, mode: Mode, out: &mut TickOut) -> Tick {
    let ws = &record.workspace;
    if !config.enabled() {
        return Tick::Off("autonomy.enabled: false in the role's meta.yaml".into());
    }
    let switch_on = match settings::switch_on(ws) {
        Ok(on) => on,
        Err(e) => return Tick::Error(e.to_string()),
    };
    let ledger = Ledger::of_workspace(ws);
    let mut folded = match ledger.read() {
        Ok(f) => f,
        Err(e) => return Tick::Error(e.to_string()),
    };
    if mode == Mode::Write && folded.intents.iter().any(|i| i.status == Status::Running) {
        // A tick runs only while no job does: a `running` line is what a killed serve left
        // (its lease was never taken, or the agent's recovery was missed).
        recover(ws);
        folded = match ledger.read() {
            Ok(f) => f,
            Err(e) => return Tick::Error(e.to_string()),
        };
    }
    if switch_on && config.routines().next().is_none() && !folded.intents.iter().any(Intent::is_open) {
        return Tick::Rest;
    }
    out.priorities = match Priorities::load(ws) {
        Ok(p) => p,
        Err(e) => return Tick::Error(e.to_string()),
    };
    let now = fsutil::unix_now() as i64;
    let now_text = fsutil::now_rfc3339();
    let table = out.priorities.clone();
    let promoted = match mode {
        Mode::Write => ledger.update(|f| {
            let lines = plan::promotions(f, &table, now, &now_text);
            Ok::<_, LedgerError>((lines.clone(), lines))
        }),
        Mode::DryRun => Ok(plan::promotions(&folded, &table, now, &now_text)),
    };
    match promoted {
        Ok(p) => out.promoted = p,
        Err(e) => return Tick::Error(e.to_string()),
    }
    if mode == Mode::Write {
        for p in &out.promoted {
            super::log::note(ws, &format!("intent:{} promoted to priority {} (starvation)", p.id, p.priority));
        }
    }
    for p in &out.promoted {
        if let Some(i) = folded.intents.iter_mut().find(|i| i.id == p.id) {
            *i = p.clone();
        }
    }
    let routines = RoutineRuns::load(ws);
    let inputs = Inputs { folded: &folded, priorities: &out.priorities, config, switch_on, routines: &routines, now };
    let pick = match plan::decide(&inputs) {
        Decision::Off { why } => return Tick::Off(why),
        Decision::Rest => return Tick::Rest,
        Decision::Run(pick) => pick,
    };
    if let Some(why) = busy_elsewhere(home, record, now) {
        return Tick::NotIdle(why);
    }
    let gctx = guard::GuardCtx { workspace: ws, home: home.root() };
    let never_killed = pick.run().is_some_and(|r| guard::never_killed(r, &gctx));
    // A line edited by hand may say 0 or 1: never above `task`, so a person always comes first.
    let priority = pick.priority(&out.priorities).max(out.priorities.promotion_floor());
    Tick::Run(Box::new(AutoJob { pick, priority, never_killed, rounds: config.intent_rounds(), run_timeout: config.run_timeout() }))
}

/// Why the agent is not truly idle *(idle: "only when nothing is in progress")*: an unread
/// inbox, a due todo, todos a wake claimed, a message it owes an answer. `None`: idle.
pub fn busy_elsewhere(home: &Home, record: &AgentRecord, now: i64) -> Option<&'static str> {
    if crate::wake::inbox::Mailbox::of_workspace(&record.workspace).has_pending() {
        return Some("an unread message waits in the inbox");
    }
    let db = match crate::wake::db::WakeDb::open(home) {
        Ok(db) => db,
        Err(e) => {
            tracing::warn!(agent = %record.id, error = %e, "cannot read cicy.db; autonomy waits");
            return Some("cicy.db cannot be read");
        }
    };
    let id = &record.id;
    if db.todo_next_due(id).ok().flatten().is_some_and(|t| t.at_unix <= now) {
        return Some("a todo is due");
    }
    if db.todo_claimed(id).is_ok_and(|c| !c.is_empty()) {
        return Some("a wake's todos are claimed");
    }
    if db.obligation_count_unresolved(id).is_ok_and(|n| n > 0) {
        return Some("a message awaits its answer");
    }
    None
}

/// The class of work a wake is *(idle: alarm 1)*. A message in the inbox counts as a person
/// **[chosen]**: the sender is not known before the wake reads it.
pub fn class_of_wake(reason: Reason) -> Class {
    match reason {
        Reason::Todo | Reason::Recovery | Reason::Heartbeat => Class::Alarm,
        Reason::Inbox => Class::Human,
    }
}

/// While an autonomy job runs, what the 0.5 s poll finds that must stop it: the intent was
/// dropped or its ledger removed (`rm`), the switch turned off, or a message came (the watch
/// also says so, within 50 ms).
pub fn poll(ws: &Path, job: &AutoJob) -> Option<&'static str> {
    if let Pick::Intent(i) = &job.pick {
        if let Ok(f) = Ledger::of_workspace(ws).read() {
            match f.get(&i.id).map(|c| c.status) {
                None => return Some("rm"),
                Some(Status::Dropped) => return Some("drop"),
                Some(_) => {}
            }
        }
    }
    if settings::switch_on(ws).is_ok_and(|on| !on) {
        return Some("off");
    }
    if crate::wake::inbox::Mailbox::of_workspace(ws).has_pending() {
        return Some(Class::Human.as_str());
    }
    None
}

/// What [`recover`] did: notes to show, and the intents it found running.
#[derive(Debug, Default)]
pub struct Recovered {
    pub notes: Vec<String>,
    pub interrupted: Vec<String>,
}

/// At the actor's start: intents a killed serve left `running` become `interrupted` (preempted
/// by `restart`, not counted for starvation, a line in `autonomy.log`), and their process
/// groups are killed.
pub fn recover(ws: &Path) -> Recovered {
    use crate::tools::reaper::Reaped;
    let mut notes: Vec<String> = crate::tools::reaper::reap(&running_dir(ws))
        .into_iter()
        .map(|r| match r {
            Reaped::Killed { pgid, label } => {
                format!("killed the process group {pgid} of an intent a stopped serve left running ({label})")
            }
            failed @ Reaped::Failed { .. } => failed.to_string(),
        })
        .collect();
    let ledger = Ledger::of_workspace(ws);
    if !ledger.path().exists() {
        return Recovered { notes, interrupted: vec![] };
    }
    let fixed = ledger.update(|f| {
        let lines: Vec<Intent> = f
            .intents
            .iter()
            .filter(|i| i.status == Status::Running)
            .map(|i| Intent { status: Status::Interrupted, preempted_by: Some("restart".into()), ..i.clone() })
            .collect();
        let ids = lines.iter().map(|i| i.id.clone()).collect::<Vec<_>>();
        Ok::<_, LedgerError>((lines, ids))
    });
    let interrupted = match fixed {
        Ok(ids) => ids,
        Err(e) => {
            notes.push(format!("cannot recover the intents: {e}"));
            vec![]
        }
    };
    for id in &interrupted {
        notes.push(format!("intent {id} was running when serve stopped; it is interrupted and runs again later"));
        super::log::note(ws, &format!("intent:{id} interrupted (preempted by restart)"));
    }
    Recovered { notes, interrupted }
}
