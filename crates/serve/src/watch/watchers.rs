//! The (at most) two watchers and the map of watched inboxes: which folder is on inotify,
//! which on the poller, and the inotify limit that decides between them.
//!
//! Blocking: `new`, `insert` and `rewatch` may make a folder or wait on a watcher thread, so
//! callers run them off the async workers. Must not scan for messages or send wakes (the task
//! does).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use notify::{Config, PollWatcher, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc::UnboundedSender;

use super::scan::{dir_id, handler, Backend, DirId, Signal};
use super::{WatchError, WatchMode, WatchOptions};

/// Where the kernel keeps the per-user inotify watch limit (Linux `inotify(7)`).
const MAX_WATCHES_FILE: &str = "/proc/sys/fs/inotify/max_user_watches";
/// Where the kernel keeps the per-user inotify instance limit (Linux `inotify(7)`).
const MAX_INSTANCES_FILE: &str = "/proc/sys/fs/inotify/max_user_instances";

#[derive(Debug)]
struct Inbox {
    agents: Vec<String>,
    backend: Backend,
    /// Identity when the watch was added; `None` while unwatched.
    id: Option<DirId>,
}

/// One inbox as seen by a full scan: its folder, agents, and the identity it was watched with.
pub(super) struct Seen {
    pub dir: PathBuf,
    pub agents: Vec<String>,
    pub id: Option<DirId>,
}

/// The watchers and the inbox map.
pub(super) struct Watchers {
    notify: Option<RecommendedWatcher>,
    poll: Option<PollWatcher>,
    inboxes: HashMap<PathBuf, Inbox>,
    /// Watches held on `notify`, counted against `cap`.
    on_notify: usize,
    cap: Option<usize>,
    /// Set once the limit (kernel or `cap`) was hit: every later inbox goes to the poller.
    limit_reached: bool,
    poll_interval: std::time::Duration,
    signals: UnboundedSender<Signal>,
}

impl Watchers {
    /// Makes the inotify watcher (none with `force_poll`, or if the kernel refuses one: then
    /// the poller is made at once). Errors: the poller cannot be made.
    pub(super) fn new(opts: &WatchOptions, signals: UnboundedSender<Signal>) -> Result<Self, WatchError> {
        let notify = if opts.force_poll {
            None
        } else {
            match RecommendedWatcher::new(handler(signals.clone(), Backend::Notify), Config::default()) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(
                        "inbox watch: cannot use inotify ({e}); polling every inbox every {:?} \
                         (see {MAX_INSTANCES_FILE})",
                        opts.poll_interval
                    );
                    None
                }
            }
        };
        let mut watchers = Self {
            notify,
            poll: None,
            inboxes: HashMap::new(),
            on_notify: 0,
            cap: opts.max_notify_watches,
            limit_reached: false,
            poll_interval: opts.poll_interval,
            signals,
        };
        if watchers.notify.is_none() {
            watchers.poller()?;
        }
        Ok(watchers)
    }

    /// Watches `dir` (made with its parents if missing) for `agent`. A folder already watched
    /// just gains the agent. On error the inbox stays registered, unwatched, and the first full
    /// scan that finds its folder watches it. Errors: making or watching the folder.
    pub(super) fn insert(&mut self, agent: &str, dir: &Path) -> Result<(), WatchError> {
        if let Some(inbox) = self.inboxes.get_mut(dir) {
            if !inbox.agents.iter().any(|a| a == agent) {
                inbox.agents.push(agent.to_string());
            }
            return Ok(());
        }
        self.inboxes.insert(dir.to_path_buf(), Inbox { agents: vec![agent.to_string()], backend: Backend::Unwatched, id: None });
        fs::create_dir_all(dir).map_err(|source| WatchError::CreateDir { path: dir.to_path_buf(), source })?;
        self.attach(dir)
    }

    /// Drops the watch of `dir` and adds it again: after the folder was removed, moved away or
    /// replaced. A missing folder is made again only while its parent exists (so a deleted
    /// workspace is not brought back); otherwise it stays unwatched until a full scan finds it.
    pub(super) fn rewatch(&mut self, dir: &Path) -> Result<(), WatchError> {
        let Some(inbox) = self.inboxes.get_mut(dir) else {
            return Ok(());
        };
        let backend = inbox.backend;
        inbox.backend = Backend::Unwatched;
        inbox.id = None;
        // The old watch may already be gone (inotify drops it with the folder): not an error.
        match backend {
            Backend::Notify => {
                self.on_notify = self.on_notify.saturating_sub(1);
                if let Some(w) = self.notify.as_mut() {
                    let _ = w.unwatch(dir);
                }
            }
            Backend::Poll => {
                if let Some(w) = self.poll.as_mut() {
                    let _ = w.unwatch(dir);
                }
            }
            Backend::Unwatched => {}
        }
        if !dir.is_dir() {
            if !dir.parent().is_some_and(Path::is_dir) {
                return Ok(());
            }
            match fs::create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => return Err(WatchError::CreateDir { path: dir.to_path_buf(), source }),
            }
        }
        self.attach(dir)
    }

    /// Every inbox with the identity it was watched with (`None`: unwatched).
    pub(super) fn snapshot(&self) -> Vec<Seen> {
        self.inboxes.iter().map(|(dir, inbox)| Seen { dir: dir.clone(), agents: inbox.agents.clone(), id: inbox.id }).collect()
    }

    /// One inbox as [`Watchers::snapshot`] shows it; `None` if `dir` is not an inbox.
    pub(super) fn seen(&self, dir: &Path) -> Option<Seen> {
        self.inboxes.get(dir).map(|i| Seen { dir: dir.to_path_buf(), agents: i.agents.clone(), id: i.id })
    }

    /// The agents whose inbox is `dir` (empty if it is not a watched inbox).
    pub(super) fn agents_of(&self, dir: &Path) -> &[String] {
        self.inboxes.get(dir).map(|i| i.agents.as_slice()).unwrap_or(&[])
    }

    /// Whether `path` is one of the inbox folders.
    pub(super) fn is_inbox(&self, path: &Path) -> bool {
        self.inboxes.contains_key(path)
    }

    /// `Poll` without inotify; `Mixed` when some inboxes are on the poller; else `Notify`.
    pub(super) fn mode(&self) -> WatchMode {
        if self.notify.is_none() {
            return WatchMode::Poll;
        }
        match self.inboxes.values().filter(|i| i.backend == Backend::Poll).count() {
            0 => WatchMode::Notify,
            polled => WatchMode::Mixed { polled },
        }
    }

    /// The sender the watchers report on, to feed the task a made-up report.
    #[cfg(test)]
    pub(super) fn signals(&self) -> UnboundedSender<Signal> {
        self.signals.clone()
    }

    /// Drops both watchers (their threads end); later calls watch nothing.
    pub(super) fn shut_down(&mut self) {
        self.notify = None;
        self.poll = None;
        self.limit_reached = true;
    }

    /// Puts an existing `dir` on inotify, or on the poller past the limit.
    fn attach(&mut self, dir: &Path) -> Result<(), WatchError> {
        let id = dir_id(dir).map_err(|source| WatchError::Read { path: dir.to_path_buf(), source })?;
        let backend = self.watch_on_notify(dir)?;
        let backend = match backend {
            Some(b) => b,
            None => {
                self.poller()?
                    .watch(dir, RecursiveMode::NonRecursive)
                    .map_err(|source| WatchError::Watch { path: dir.to_path_buf(), source })?;
                Backend::Poll
            }
        };
        if let Some(inbox) = self.inboxes.get_mut(dir) {
            inbox.backend = backend;
            inbox.id = Some(id);
        }
        Ok(())
    }

    /// `Some(Notify)` if inotify took the watch; `None` if the inbox must be polled (no
    /// inotify, or the limit reached now or before).
    fn watch_on_notify(&mut self, dir: &Path) -> Result<Option<Backend>, WatchError> {
        if self.limit_reached {
            return Ok(None);
        }
        let Some(watcher) = self.notify.as_mut() else {
            return Ok(None);
        };
        if let Some(cap) = self.cap.filter(|cap| self.on_notify >= *cap) {
            self.limit_reached = true;
            tracing::warn!(
                "inbox watch: the cap of {cap} inotify watches (CICY_WATCH_MAX) is reached; {} and \
                 every later inbox are polled every {:?}",
                dir.display(),
                self.poll_interval
            );
            return Ok(None);
        }
        match watcher.watch(dir, RecursiveMode::NonRecursive) {
            Ok(()) => {
                self.on_notify += 1;
                Ok(Some(Backend::Notify))
            }
            Err(e) if is_limit(&e) => {
                self.limit_reached = true;
                tracing::warn!(
                    "inbox watch: the inotify watch limit is reached ({e}); {} and every later inbox \
                     are polled every {:?}; raise {MAX_WATCHES_FILE} to watch them all",
                    dir.display(),
                    self.poll_interval
                );
                Ok(None)
            }
            Err(source) => Err(WatchError::Watch { path: dir.to_path_buf(), source }),
        }
    }

    /// The poller, made on first need.
    fn poller(&mut self) -> Result<&mut PollWatcher, WatchError> {
        let poll = match self.poll.take() {
            Some(p) => p,
            // Not following symlinks: a dangling one would be reported as an error every poll.
            None => PollWatcher::new(
                handler(self.signals.clone(), Backend::Poll),
                Config::default().with_poll_interval(self.poll_interval).with_follow_symlinks(false),
            )
            .map_err(WatchError::Poller)?,
        };
        Ok(self.poll.insert(poll))
    }
}

/// Whether adding a watch failed on a kernel limit: notify's `MaxFilesWatch` (ENOSPC from
/// `inotify_add_watch`), or a raw ENOSPC/EMFILE.
pub(super) fn is_limit(e: &notify::Error) -> bool {
    match &e.kind {
        notify::ErrorKind::MaxFilesWatch => true,
        notify::ErrorKind::Io(io) => matches!(io.raw_os_error(), Some(libc::ENOSPC | libc::EMFILE)),
        notify::ErrorKind::Generic(_)
        | notify::ErrorKind::PathNotFound
        | notify::ErrorKind::WatchNotFound
        | notify::ErrorKind::InvalidConfig(_) => false,
    }
}
