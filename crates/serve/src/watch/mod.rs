//! The inbox watch of `serve` (docs/design.md §10 "Inbox", "Watch", "Fallbacks"): tells serve which
//! agents' inboxes may hold a new message, by agent id on a channel.
//!
//! One inotify watcher (a non-recursive watch per inbox folder) and, past the inotify limit
//! or without inotify, one `PollWatcher`; ONE task that drains their events, dedupes agent
//! ids within a 50 ms debounce window, re-adds lost watches and runs the full scans (at start,
//! after any error or overflow, every 30 s). Sending an id means "this inbox may have
//! something": the receiver scans and dedupes, so an extra send is harmless, a missed file not.
//! Owns no message: never reads, parses, moves or claims a file (that is `wake::inbox`).

mod scan;
mod watchers;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;
use tokio::time::{interval_at, sleep_until, Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use cicy_store::fsutil;
use scan::Signal;
use watchers::{Seen, Watchers};

/// **[chosen]** Full scans asked for by errors or lost watches run at most this often, so a
/// watcher that keeps failing cannot turn into a busy loop over every inbox.
const MIN_SCAN_GAP: Duration = Duration::from_secs(1);

/// How the inboxes are being watched (logged and shown in serve's health/status).
/// JSON: `"notify"`, `{"mixed": {"polled": 2}}`, `"poll"`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchMode {
    /// Every inbox has an inotify watch.
    Notify,
    /// inotify could not be used (or its watch limit was reached) for `polled` inboxes.
    Mixed { polled: usize },
    /// No inotify at all (`force_poll`, or the kernel refused an instance): every inbox is polled.
    Poll,
}

/// How to watch. Defaults: docs/design.md §10 (50 ms debounce, full scan every 30 s, poll 2 s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchOptions {
    /// Events within this window after the first are sent as one batch (one send per agent).
    pub debounce: Duration,
    /// A full scan of every inbox this often, for events no watcher delivered.
    pub rescan_every: Duration,
    /// How often the `PollWatcher` looks at the inboxes it holds.
    pub poll_interval: Duration,
    /// Poll every inbox, no inotify (serve: `CICY_WATCH_POLL=1`, for filesystems without inotify).
    pub force_poll: bool,
    /// At most this many inotify watches; later inboxes are polled (serve: `CICY_WATCH_MAX`).
    /// Lets users keep headroom under the per-user kernel limit shared with other programs.
    pub max_notify_watches: Option<usize>,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self {
            debounce: Duration::from_millis(50),
            rescan_every: Duration::from_secs(30),
            poll_interval: Duration::from_secs(2),
            force_poll: false,
            max_notify_watches: None,
        }
    }
}

/// Errors starting or extending the inbox watch.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("the inbox watch must be started inside a tokio runtime")]
    NoRuntime,
    #[error("cannot create the inbox folder {path}: {source}")]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("cannot read the inbox folder {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot watch the inbox folder {path}: {source}")]
    Watch { path: PathBuf, source: notify::Error },
    #[error("cannot start the polling watcher: {0}")]
    Poller(notify::Error),
}

/// The running watch; stops on [`InboxWatch::stop`] or drop.
pub struct InboxWatch {
    watchers: Arc<Mutex<Watchers>>,
    wake: UnboundedSender<String>,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl InboxWatch {
    /// Starts watching `inboxes` (agent id, `<ws>/.cicy/messages/inbox`; made if missing).
    /// Agent ids with a pending file are sent on `wake` before this returns (the start scan:
    /// files dropped while serve was down). Must be called inside a tokio runtime; spawns ONE
    /// task. Blocking (one mkdir, one watch and one readdir per inbox), moved off the async
    /// worker on a multi-threaded runtime. An inbox that cannot be made or watched is logged
    /// and watched by the first full scan that finds its folder, so one broken workspace does
    /// not stop serve.
    /// Errors: no runtime; the poller cannot be made.
    pub fn start(inboxes: Vec<(String, PathBuf)>, wake: UnboundedSender<String>, opts: WatchOptions) -> Result<Self, WatchError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| WatchError::NoRuntime)?;
        let (signals_tx, signals) = mpsc::unbounded_channel();
        let watchers = Arc::new(Mutex::new(Watchers::new(&opts, signals_tx)?));
        let pending = fsutil::blocking(|| {
            let mut w = lock(&watchers);
            for (agent, dir) in &inboxes {
                if let Err(e) = w.insert(agent, dir) {
                    tracing::warn!(agent = %agent, "inbox watch: {e}; watched once a full scan finds it");
                }
            }
            let seen = w.snapshot();
            drop(w);
            scan_all(&watchers, seen)
        });
        for agent in pending {
            // A receiver already gone means serve is stopping: nothing to wake.
            let _ = wake.send(agent);
        }
        let cancel = CancellationToken::new();
        let task = runtime.spawn(run(watchers.clone(), signals, wake.clone(), opts, cancel.clone()));
        Ok(Self { watchers, wake, cancel, task })
    }

    /// Watches one more inbox (an agent created while serve runs); sends `agent` at once if
    /// it already holds a pending file. Blocking like [`InboxWatch::start`], for one inbox.
    /// Errors: making, reading or watching the folder; the inbox stays registered and the
    /// first full scan that finds its folder watches it.
    pub fn add(&self, agent: &str, inbox: &Path) -> Result<(), WatchError> {
        let pending = fsutil::blocking(|| {
            lock(&self.watchers).insert(agent, inbox)?;
            scan::has_pending(inbox).map_err(|source| WatchError::Read { path: inbox.to_path_buf(), source })
        })?;
        if pending {
            let _ = self.wake.send(agent.to_string());
        }
        Ok(())
    }

    /// How the inboxes are watched right now.
    pub fn mode(&self) -> WatchMode {
        lock(&self.watchers).mode()
    }

    /// Stops the watchers and the task (serve shutdown); also done on drop.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for InboxWatch {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.task.abort();
        lock(&self.watchers).shut_down();
    }
}

/// A poisoned lock only means a panic elsewhere mid-update; the map is still usable.
fn lock(watchers: &Mutex<Watchers>) -> MutexGuard<'_, Watchers> {
    watchers.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the task gathered since the last send.
#[derive(Default)]
struct Batch {
    agents: BTreeSet<String>,
    /// Watched inbox folders reported removed or moved away.
    lost: BTreeSet<PathBuf>,
    full_scan: bool,
    /// Why events may have been missed (the first reason), and how many more reports came.
    missed: Option<(String, usize)>,
    /// When to send: set by the first signal of the batch.
    due: Option<Instant>,
}

impl Batch {
    fn take(&mut self, signal: Signal, watchers: &Mutex<Watchers>, debounce: Duration) {
        match signal {
            Signal::File(dir) => self.agents.extend(lock(watchers).agents_of(&dir).iter().cloned()),
            Signal::Gone(path) => {
                if !lock(watchers).is_inbox(&path) {
                    return;
                }
                self.lost.insert(path);
                self.full_scan = true;
            }
            Signal::Missed(why) => {
                match &mut self.missed {
                    Some((_, more)) => *more += 1,
                    None => self.missed = Some((why, 0)),
                }
                self.full_scan = true;
            }
        }
        self.due.get_or_insert_with(|| Instant::now() + debounce);
    }
}

/// The one task: drains signals into a batch, sends it when due, scans every `rescan_every`.
async fn run(
    watchers: Arc<Mutex<Watchers>>,
    mut signals: UnboundedReceiver<Signal>,
    wake: UnboundedSender<String>,
    opts: WatchOptions,
    cancel: CancellationToken,
) {
    let mut tick = interval_at(Instant::now() + opts.rescan_every, opts.rescan_every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last_full = Instant::now();
    let mut batch = Batch::default();
    loop {
        let due = batch.due;
        tokio::select! {
            () = cancel.cancelled() => return,
            signal = signals.recv() => {
                let Some(signal) = signal else { return };
                batch.take(signal, &watchers, opts.debounce);
                while let Ok(signal) = signals.try_recv() {
                    batch.take(signal, &watchers, opts.debounce);
                }
            }
            _ = tick.tick() => {
                batch.full_scan = true;
                batch.due.get_or_insert_with(Instant::now);
            }
            () = sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                let mut ready = std::mem::take(&mut batch);
                // Logged once per batch: a failing watcher can report many times a second.
                if let Some((why, more)) = ready.missed.take() {
                    tracing::warn!("inbox watch: {why} (and {more} more reports); scanning every inbox");
                }
                let full = ready.full_scan && last_full.elapsed() >= MIN_SCAN_GAP;
                if ready.full_scan && !full {
                    batch.full_scan = true;
                    batch.due = Some(last_full + MIN_SCAN_GAP);
                }
                if full {
                    last_full = Instant::now();
                }
                if full || !ready.lost.is_empty() {
                    let w = watchers.clone();
                    let lost = std::mem::take(&mut ready.lost);
                    match tokio::task::spawn_blocking(move || recover(&w, lost, full)).await {
                        Ok(found) => ready.agents.extend(found),
                        Err(e) => tracing::warn!("inbox watch: the scan failed: {e}"),
                    }
                }
                for agent in ready.agents {
                    if wake.send(agent).is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// Re-adds the watches of `lost` folders, then scans: every inbox when `full`, else the
/// `lost` ones. Returns the agents whose inbox holds a pending file.
fn recover(watchers: &Mutex<Watchers>, lost: BTreeSet<PathBuf>, full: bool) -> BTreeSet<String> {
    for dir in &lost {
        if let Err(e) = lock(watchers).rewatch(dir) {
            tracing::warn!("inbox watch: {e}; watched once a full scan finds it");
        }
    }
    let seen = if full {
        lock(watchers).snapshot()
    } else {
        let w = lock(watchers);
        lost.iter().filter_map(|dir| w.seen(dir)).collect()
    };
    scan_all(watchers, seen)
}

/// Scans `seen` inboxes for a pending file. A folder that is not the one watched (gone,
/// replaced, or there but unwatched) is re-watched first, so a full scan repairs lost watches.
fn scan_all(watchers: &Mutex<Watchers>, seen: Vec<Seen>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for inbox in seen {
        let now = scan::dir_id(&inbox.dir).ok();
        if now != inbox.id {
            if let Err(e) = lock(watchers).rewatch(&inbox.dir) {
                tracing::warn!("inbox watch: {e}; watched once a full scan finds it");
            }
        }
        match scan::has_pending(&inbox.dir) {
            Ok(true) => found.extend(inbox.agents),
            Ok(false) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("inbox watch: cannot read {}: {e}", inbox.dir.display()),
        }
    }
    found
}
