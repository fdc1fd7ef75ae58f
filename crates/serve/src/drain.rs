//! Where serve drains the agents' Maildir outboxes and fires their cron jobs (docs/design.md §11
//! "Consumer", `set_cron`).
//!
//! Owns the drain points: after every tool batch of a turn (the [`AfterBatch`] hook a job puts
//! on the turn's [`WakeTurn`], so the turn loop knows nothing of the outbox) and while no turn
//! runs (one task for all agents: a `notify` watch of every `new/` folder, and a look at them
//! every [`IDLE_POLL`]; each asks the agent's actor for an `Op::Drain`), and the reporting of a
//! drain on the agent's stream. Also the one cron task: it sleeps until
//! the earliest `next_run` of all jobs and writes each due job's `[choruz-cron]` message into
//! its agent's inbox, which wakes the agent like any message. Must not touch the commands
//! themselves (`cicy_runtime::messages::commands`) or the turn loop.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use cicy_protocol::event::{Emitter, EventKind};
use cicy_runtime::messages::commands::{self, Drained};
use cicy_runtime::messages::envelope;
use cicy_runtime::messages::store::MessageStore;
use cicy_runtime::wake::deliver::SERVE_SENDER;
use cicy_runtime::wake::inbox::{Folder, Mailbox, NewMessage};
use cicy_runtime::wake::state::{AfterBatch, WakeTurn};
use cicy_store::home::Home;
use cicy_store::outbox::{Outbox, PROCESSING_STALE_AFTER};
use cicy_store::registry::{AgentRecord, Registry};

/// How often the outboxes of agents without a running turn are looked at (docs/design.md §11
/// "every 2 s").
pub(super) const IDLE_POLL: Duration = Duration::from_secs(2);

/// The cron task never sleeps longer than this, so a job another process stored is seen.
const CRON_SLICE: Duration = Duration::from_secs(60);

/// Where serve takes what a drain changed.
#[derive(Clone)]
pub(super) struct DrainTargets {
    /// Notified when a `set_cron` stored a job ([`start_cron`]).
    pub cron: Arc<Notify>,
    /// Agents a `provision_agent` created, for serve to start their actors.
    pub new_agents: mpsc::UnboundedSender<AgentRecord>,
}

/// Drains `w`'s outbox and reports it on `events`; a stored cron job wakes the cron task, a
/// provisioned agent goes to serve.
pub(super) fn drain_and_report(w: &WakeTurn, events: &Emitter, to: &DrainTargets) {
    let drained = commands::drain(w, PROCESSING_STALE_AFTER);
    if drained.cron_changed {
        to.cron.notify_one();
    }
    for record in &drained.provisioned {
        let _ = to.new_agents.send(record.clone());
    }
    report(&drained, events);
}

/// The hook a job's turns run after each tool batch.
pub(super) fn after_batch(events: Emitter, to: DrainTargets) -> AfterBatch {
    Arc::new(move |w: &WakeTurn| drain_and_report(w, &events, &to))
}

/// A `system` event for each file moved to `bad/`, and one with the joined reply when it was
/// not the reply of a claim.
fn report(d: &Drained, events: &Emitter) {
    for bad in &d.stats.bad {
        let name = bad.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        events.emit(EventKind::System { text: format!("outbox: {name} is not a JSON command; moved to .cicy/outbox/bad/") });
    }
    if !d.replied && !d.stats.reply.is_empty() {
        events.emit(EventKind::System { text: d.stats.reply.clone() });
    }
}

/// Whether `ws`'s outbox has anything in `new/`.
fn has_commands(ws: &std::path::Path) -> bool {
    std::fs::read_dir(Outbox::of_workspace(ws).new_dir()).is_ok_and(|mut d| d.next().is_some())
}

/// Starts the idle drain: ONE `notify` watcher with a watch on the `new/` folder of each agent
/// of `agents()` at start (made if missing), and every [`IDLE_POLL`] a look at every agent's
/// `new/` (agents created later, events the watcher missed or could not watch). Each
/// non-empty or changed `new/` gives `drain(id)`; the actor drains it unless a turn runs,
/// which drains it itself.
pub(super) fn start_idle_drain(
    agents: impl Fn() -> Vec<(String, PathBuf)> + Send + 'static,
    drain: impl Fn(&str) + Send + 'static,
    stop: CancellationToken,
) {
    let (tx, mut changed) = mpsc::unbounded_channel::<String>();
    let watcher = watch_new_dirs(&agents(), tx);
    tokio::spawn(async move {
        // Held by the task: dropping the watcher ends its watches.
        let _watcher = watcher;
        loop {
            let ids: Vec<String> = tokio::select! {
                () = tokio::time::sleep(IDLE_POLL) => {
                    let list = agents();
                    tokio::task::spawn_blocking(move || list.into_iter().filter(|(_, ws)| has_commands(ws)).map(|(id, _)| id).collect()).await.unwrap_or_default()
                }
                Some(id) = changed.recv() => {
                    // A burst of commands is one drain per agent.
                    let mut ids = std::collections::BTreeSet::from([id]);
                    while let Ok(more) = changed.try_recv() {
                        ids.insert(more);
                    }
                    ids.into_iter().collect()
                }
                () = stop.cancelled() => return,
            };
            for id in ids {
                drain(&id);
            }
        }
    });
}

/// The watcher of the agents' `new/` folders: an event in one sends its agent's id. `None`
/// when inotify cannot be used; the poll covers everything then.
fn watch_new_dirs(agents: &[(String, PathBuf)], tx: mpsc::UnboundedSender<String>) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    let dirs: BTreeMap<PathBuf, String> = agents.iter().map(|(id, ws)| (Outbox::of_workspace(ws).new_dir(), id.clone())).collect();
    let by_dir = dirs.clone();
    let handler = move |res: notify::Result<notify::Event>| {
        let Ok(event) = res else { return };
        // A command is there once renamed in (the producer) or closed after writing: a
        // creation alone may be a file still empty, which the drain would drop (Choruz B4).
        use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};
        if !matches!(event.kind, EventKind::Modify(ModifyKind::Name(_)) | EventKind::Access(AccessKind::Close(AccessMode::Write))) {
            return;
        }
        for path in &event.paths {
            if let Some(id) = path.parent().and_then(|p| by_dir.get(p)) {
                let _ = tx.send(id.clone());
            }
        }
    };
    let mut watcher = notify::recommended_watcher(handler)
        .map_err(|e| tracing::warn!(error = %e, "outbox watch: no watcher; new/ folders are polled every 2 s"))
        .ok()?;
    cicy_store::fsutil::blocking(|| {
        for dir in dirs.keys() {
            if let Err(e) = std::fs::create_dir_all(dir)
                .map_err(notify::Error::io)
                .and_then(|()| watcher.watch(dir, notify::RecursiveMode::NonRecursive))
            {
                tracing::warn!(dir = %dir.display(), error = %e, "outbox watch: polled every 2 s instead");
            }
        }
    });
    Some(watcher)
}

/// Starts the cron task; `changed` is notified when a job is stored.
pub(super) fn start_cron(home: Home, changed: Arc<Notify>, stop: CancellationToken) {
    tokio::spawn(async move {
        loop {
            let h = home.clone();
            let next = tokio::task::spawn_blocking(move || fire_due(&h)).await.ok().flatten();
            let now = chrono::Utc::now().timestamp();
            // At least 200 ms: a job that could not be moved on must not spin the task.
            let wait = next.map_or(CRON_SLICE, |at| {
                Duration::from_secs(u64::try_from(at - now).unwrap_or(0)).clamp(Duration::from_millis(200), CRON_SLICE)
            });
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = changed.notified() => {}
                () = stop.cancelled() => return,
            }
        }
    });
}

/// Writes the message of every due job into its agent's inbox (from `cicy`, body
/// `[choruz-cron] job:<name> schedule:<value> | <message>`, Choruz B1) and moves the job to its
/// next run; returns the earliest next run. Errors are logged: a job that cannot be written
/// now is tried again at the next pass.
fn fire_due(home: &Home) -> Option<i64> {
    let now = chrono::Utc::now().timestamp();
    let mut store = MessageStore::open(home).map_err(|e| tracing::error!(error = %e, "cron: cannot open cicy.db")).ok()?;
    let reg = Registry::open(&home.db_path()).map_err(|e| tracing::error!(error = %e, "cron: cannot open the registry")).ok()?;
    for job in store.cron_due(now).unwrap_or_else(|e| {
        tracing::error!(error = %e, "cron: cannot read the due jobs");
        Vec::new()
    }) {
        let Ok(rec) = reg.get(&job.agent_id) else {
            // A deleted agent's job: moved on, so it is not due again at once.
            let _ = store.cron_advance(&job, now);
            continue;
        };
        let mut meta = BTreeMap::new();
        meta.insert("cron".to_string(), job.name.clone());
        let msg = NewMessage {
            from: SERVE_SENDER.to_string(),
            subject: Some(format!("cron {}", job.name)),
            body: envelope::cron(&job.name, &job.schedule, &job.message),
            question: false,
            meta,
        };
        if let Err(e) = Mailbox::of_workspace(&rec.workspace).write(Folder::Inbox, &msg) {
            tracing::error!(agent = %job.agent_id, job = %job.name, error = %e, "cron: cannot write the message");
            continue;
        }
        if let Err(e) = store.cron_advance(&job, now) {
            tracing::error!(agent = %job.agent_id, job = %job.name, error = %e, "cron: cannot schedule the next run");
        }
    }
    store.cron_next_at().ok().flatten()
}
