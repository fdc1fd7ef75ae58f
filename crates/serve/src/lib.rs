//! `cicy-agent serve` (docs/design.md §9): one resident process per home hosting every agent.
//!
//! Owns the process's life: taking the home's `serve.lock`, the API token, binding
//! 127.0.0.1, `serve.json`, one actor per registry row (`actor`), the router (`routes`,
//! guarded by `http`), warming sessions after bind, and the clean stop on SIGTERM/SIGINT
//! (every running turn cancelled with its marker, every event log flushed and fsynced, exit 0).
//! One `reqwest::Client` serves every agent (one connection pool). Must not touch the turn
//! loop or the files of a conversation: actors run jobs that do.

mod actor;
mod dashboard;
mod drain;
mod group_routes;
mod http;
pub use cicy_store::instance;
mod intent_job;
mod job;
#[cfg(test)]
mod router_tests;
mod routes;
mod scheduler;
mod sse;
mod tick_worker;
mod tracker;
mod wake_job;
mod wake_routes;
pub mod watch;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::Router;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use actor::{AgentHandle, Op, Shared};
pub use actor::{FLUSH_TEXT, QUEUED_TEXT};
pub use http::proof_matches;
pub use instance::{read_info, ServeInfo};
pub use wake_job::WakeLimits;

use cicy_config::config::{Config, ConfigError};
use cicy_store::home::{Home, HomeError};
use cicy_store::registry::{AgentRecord, RegistryError};

/// cicy: `serve` listens on 8008 unless told otherwise.
pub const DEFAULT_PORT: u16 = 8008;

/// Errors starting or running `serve`.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Instance(#[from] instance::InstanceError),
    #[error(transparent)]
    Home(#[from] HomeError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Bind { port: u16, source: std::io::Error },
    #[error("serving HTTP: {0}")]
    Http(std::io::Error),
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
    #[error("cannot watch for SIGTERM/SIGINT: {0}")]
    Signals(std::io::Error),
    /// cryo: an unreadable wake table aborts the start, naming the file.
    #[error(transparent)]
    WakeDb(#[from] cicy_runtime::wake::db::WakeDbError),
    #[error("cannot start the autonomy tick thread: {0}")]
    Ticks(std::io::Error),
    #[error("cannot watch the inboxes: {0}")]
    Watch(#[from] watch::WatchError),
}

/// How to run `serve`.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// 0 picks a free port (tests); `serve.json` names the one bound.
    pub port: u16,
    /// `CICY_API_TOKEN`, if set.
    pub token: Option<String>,
    /// **[chosen]** A session idle this long is dropped, reopened on demand (default 600 s).
    pub session_idle: Duration,
    /// A wake's cap and in-wake retries (cryo: 3600 s; 10 re-runs from 1 s).
    pub wake: WakeLimits,
    /// The inbox watch (docs/design.md §10: notify, 50 ms debounce, a full scan every 30 s).
    pub watch: watch::WatchOptions,
    /// **[chosen]** At most this many sessions are warmed after bind (the first agents in id
    /// order); the others open at their first turn. Ten thousand warmed sessions would cost
    /// half a gigabyte for agents that mostly sleep.
    pub warm_limit: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            port: DEFAULT_PORT,
            token: None,
            session_idle: Duration::from_secs(600),
            wake: WakeLimits::default(),
            watch: watch::WatchOptions::default(),
            warm_limit: DEFAULT_WARM_LIMIT,
        }
    }
}

/// **[chosen]** Sessions warmed after bind unless `--warm-limit` says otherwise.
pub const DEFAULT_WARM_LIMIT: usize = 200;

/// What every route shares: the agents' actors and the server's identity.
#[derive(Clone)]
pub struct Hub {
    port: u16,
    token: Arc<str>,
    instance_id: Arc<str>,
    agents: Agents,
    shared: Shared,
    shutdown: CancellationToken,
    /// Set once every actor runs (`run`), so that an agent created later is watched too.
    watch: Arc<std::sync::OnceLock<watch::InboxWatch>>,
}

/// Every agent's actor and workspace, by id.
type Agents = Arc<RwLock<BTreeMap<String, (AgentHandle, PathBuf)>>>;

/// The inbox folder of a workspace (docs/design.md §10).
fn inbox_of(ws: &std::path::Path) -> PathBuf {
    cicy_runtime::wake::inbox::Mailbox::of_workspace(ws).inbox_dir()
}

/// How often serve looks in the registry for agents another process created since it started
/// (`cicy-agent create` while serve runs) **[chosen]**: the same period as the inbox rescan.
const ADOPT_EVERY: Duration = Duration::from_secs(30);

impl Hub {
    /// Agent `id`'s actor. An id serve has no actor for is looked up in the registry first:
    /// another process may have created it since serve started.
    fn agent(&self, id: &str) -> Option<AgentHandle> {
        self.known(id).or_else(|| {
            self.adopt_new();
            self.known(id)
        })
    }

    fn known(&self, id: &str) -> Option<AgentHandle> {
        self.agents.read().ok()?.get(id).map(|(h, _)| h.clone())
    }

    fn workspace(&self, id: &str) -> Option<PathBuf> {
        self.agent(id)?;
        self.agents.read().ok()?.get(id).map(|(_, w)| w.clone())
    }

    /// Starts an actor (and an inbox watch) for every registry row serve has none for.
    fn adopt_new(&self) {
        match cicy_store::fsutil::blocking(|| routes::boot_agents(&self.shared.home)) {
            Ok(records) => {
                for r in records {
                    if self.known(&r.id).is_none() {
                        tracing::info!(agent = %r.id, "adopting an agent created since serve started");
                        self.add(r);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the registry for new agents"),
        }
    }

    /// Asks agent `id`'s actor for a wake; an id with no agent (a deleted one) is ignored.
    fn wake(&self, id: &str, reason: cicy_runtime::wake::message::Reason) {
        if let Some(h) = self.agent(id) {
            h.wake(reason);
        }
    }

    fn handles(&self) -> Vec<AgentHandle> {
        self.agents.read().map(|a| a.values().map(|(h, _)| h.clone()).collect()).unwrap_or_default()
    }

    /// Starts the actor of a new agent (once: an id that has one already is left alone).
    fn add(&self, record: AgentRecord) {
        let (id, ws) = (record.id.clone(), record.workspace.clone());
        {
            let Ok(mut agents) = self.agents.write() else { return };
            if agents.contains_key(&id) {
                return;
            }
            let handle = actor::spawn(record, self.shared.clone());
            agents.insert(id.clone(), (handle, ws.clone()));
        }
        if let Some(w) = self.watch.get() {
            if let Err(e) = w.add(&id, &inbox_of(&ws)) {
                tracing::error!(agent = %id, error = %e, "cannot watch the new agent's inbox; the 30 s scan covers it");
            }
        }
    }
}

/// What serve tells its caller once it listens: what `serve.json` says, and the API token.
#[derive(Debug)]
pub struct Ready<'a> {
    pub info: &'a ServeInfo,
    pub token: &'a str,
}

impl Ready<'_> {
    /// `http://127.0.0.1:<port>/?token=<token>`, the token encoded as a query value (one of
    /// your own may hold `+`, `&`, `#` or `%`): the link that logs the dashboard in.
    pub fn dashboard_url(&self) -> String {
        let mut url = format!("http://127.0.0.1:{}/?token=", self.info.port);
        for b in self.token.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                url.push(char::from(b));
            } else {
                url.push_str(&format!("%{b:02X}"));
            }
        }
        url
    }
}

/// The signal that stopped serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    Term,
    Int,
}

impl std::fmt::Display for StopSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopSignal::Term => "SIGTERM",
            StopSignal::Int => "SIGINT",
        })
    }
}

/// Runs `serve` until SIGTERM or SIGINT; `ready` is called once `serve.json` is written, and
/// `stopping` when the signal came, before the running turns are cancelled and awaited (which
/// may take a moment). Returns once everything stopped and `serve.json` is removed.
///
/// Errors: another serve of this home ([`instance::InstanceError::AlreadyRunning`]), the port
/// taken, an unreadable registry or config.
pub async fn run(
    home: Home,
    opts: ServeOptions,
    ready: impl FnOnce(&Ready<'_>),
    stopping: impl FnOnce(StopSignal),
) -> Result<(), ServeError> {
    home.ensure()?;
    let lock = instance::ServeLock::acquire(&home)?;
    let token = instance::api_token(&home, opts.token.clone())?;
    let config = Config::load(&home.config_path())?;
    raise_fd_limit();
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], opts.port)))
        .await
        .map_err(|source| ServeError::Bind { port: opts.port, source })?;
    let port = listener.local_addr().map_err(|source| ServeError::Bind { port: opts.port, source })?.port();
    let http = reqwest::Client::builder().connect_timeout(config.connect_timeout).build().map_err(|e| ServeError::Client(e.to_string()))?;
    let global = cicy_store::eventlog::GlobalFeed::starting_now();
    let wake_db = cicy_store::fsutil::blocking(|| cicy_runtime::wake::db::WakeDb::open(&home))?;
    // Autonomy leases a killed serve left (docs/design.md §13): those agents' actors recover their
    // intents (kill the recorded groups, write `interrupted`); the others have nothing to do.
    let leased =
        cicy_store::fsutil::blocking(|| wake_db.lease_agents().and_then(|a| wake_db.lease_clear_all().map(|_| a))).unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot read or clear the autonomy leases of the last serve");
            Vec::new()
        });
    let (scheduler, unstarted) = scheduler::channel();
    let (new_agents, mut provisioned) = tokio::sync::mpsc::unbounded_channel::<AgentRecord>();
    let hub = Hub {
        port,
        token: token.into(),
        instance_id: uuid::Uuid::new_v4().to_string().into(),
        agents: Arc::default(),
        shared: Shared {
            home: home.clone(),
            http,
            global,
            session_idle: opts.session_idle,
            scheduler,
            wake_limits: opts.wake,
            drained: drain::DrainTargets { cron: Arc::default(), new_agents },
            ticks: tick_worker::TickWorker::start().map_err(ServeError::Ticks)?,
        },
        shutdown: CancellationToken::new(),
        watch: Arc::default(),
    };
    let records = routes::boot_agents(&home)?;
    for record in &records {
        hub.add(record.clone());
    }
    for id in &leased {
        if let Some(h) = hub.agent(id) {
            h.recover_autonomy();
        }
    }
    start_waking(&hub, &records, wake_db, unstarted, &opts)?;
    let adding = hub.clone();
    tokio::spawn(async move {
        // An agent a `provision_agent` command created runs at once, as one made through the API.
        while let Some(record) = provisioned.recv().await {
            adding.add(record);
        }
    });
    // Installed before `serve.json` names this process: a SIGTERM sent as soon as it appears
    // must stop serve cleanly, not kill it by the default action.
    let signals = Signals::install()?;
    let info = ServeInfo {
        pid: std::process::id(),
        port,
        instance_id: hub.instance_id.to_string(),
        started_at: cicy_store::fsutil::now_rfc3339(),
    };
    lock.publish(&info)?;
    ready(&Ready { info: &info, token: &hub.token });
    tokio::spawn(warm(hub.handles().into_iter().take(opts.warm_limit).collect()));

    let stop = hub.shutdown.clone();
    // Small SSE frames must leave at once: with Nagle's algorithm a frame waits for the ACK of
    // the one before, which the client delays by up to 40 ms.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    let server = axum::serve(listener, router(hub.clone())).with_graceful_shutdown(stop.cancelled_owned());
    let signals = signals.wait_then_stop(hub.clone(), stopping);
    let (served, ()) = tokio::join!(server, signals);
    lock.withdraw();
    served.map_err(ServeError::Http)
}

/// docs/design.md §10 at start: the recovery of agents a killed serve left mid-wake (before any
/// wake), then the scheduler (overdue todos wake at once) and the inbox watch (mail that came
/// while serve was down wakes at once).
fn start_waking(
    hub: &Hub,
    records: &[AgentRecord],
    db: cicy_runtime::wake::db::WakeDb,
    unstarted: scheduler::Unstarted,
    opts: &ServeOptions,
) -> Result<(), ServeError> {
    // The tools that waited for `msg` answers died with the serve before: their answers go back
    // as 🔔 messages instead.
    match cicy_store::fsutil::blocking(|| cicy_runtime::messages::store::MessageStore::open(&hub.shared.home)?.calls_release_waiting()) {
        Ok(0) => {}
        Ok(n) => tracing::info!(calls = n, "msg calls whose waiting tool died with the last serve will call back"),
        Err(e) => tracing::error!(error = %e, "cannot release the msg calls of the last serve"),
    }
    // A post whose inbox files a kill cut short: written before the first scan sees the inboxes.
    match cicy_store::fsutil::blocking(|| cicy_runtime::messages::route::redeliver(&hub.shared.home)) {
        Ok(0) => {}
        Ok(n) => tracing::info!(files = n, "wrote the inbox files of messages posted before a crash"),
        Err(e) => tracing::error!(error = %e, "cannot re-deliver posted messages; they stay pending in cicy.db"),
    }
    let mut to_recover: Vec<String> = cicy_store::fsutil::blocking(|| -> Result<Vec<String>, cicy_runtime::wake::db::WakeDbError> {
        let mut ids: Vec<String> = db.obligation_unresolved(None)?.into_iter().map(|o| o.agent_id).collect();
        ids.extend(db.todo_claimed_agents()?);
        Ok(ids)
    })?;
    to_recover.sort();
    to_recover.dedup();
    for id in &to_recover {
        if let Some(h) = hub.agent(id) {
            h.recover();
        }
    }
    let waker = hub.clone();
    let wake: scheduler::WakeFn = Arc::new(move |id, reason| waker.wake(id, reason));
    scheduler::start(unstarted, db, wake, hub.shutdown.clone())?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let inboxes = records.iter().map(|r| (r.id.clone(), inbox_of(&r.workspace))).collect();
    let watch = watch::InboxWatch::start(inboxes, tx, opts.watch.clone())?;
    if watch.mode() != watch::WatchMode::Notify {
        // info: the watcher warned already when a limit made it poll; `--poll-inboxes` is chosen.
        tracing::info!(mode = ?watch.mode(), "some inboxes are polled (every 2 s), not watched");
    }
    let _ = hub.watch.set(watch);
    let (listed, drained) = (hub.agents.clone(), hub.agents.clone());
    drain::start_idle_drain(
        move || listed.read().map(|a| a.iter().map(|(id, (_, ws))| (id.clone(), ws.clone())).collect()).unwrap_or_default(),
        move |id| {
            if let Some((h, _)) = drained.read().ok().and_then(|a| a.get(id).cloned()) {
                h.drain();
            }
        },
        hub.shutdown.clone(),
    );
    drain::start_cron(hub.shared.home.clone(), hub.shared.drained.cron.clone(), hub.shutdown.clone());
    let waker = hub.clone();
    tokio::spawn(async move {
        while let Some(id) = rx.recv().await {
            waker.wake(&id, cicy_runtime::wake::message::Reason::Inbox);
        }
    });
    let adopter = hub.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(ADOPT_EVERY);
        every.tick().await;
        loop {
            tokio::select! {
                _ = every.tick() => {
                    adopter.adopt_new();
                    let home = adopter.shared.home.clone();
                    if let Err(e) = cicy_store::fsutil::blocking(|| cicy_runtime::messages::route::redeliver(&home)) {
                        tracing::warn!(error = %e, "cannot re-deliver posted messages");
                    }
                }
                () = adopter.shutdown.cancelled() => return,
            }
        }
    });
    Ok(())
}

fn router(hub: Hub) -> Router {
    Router::new()
        .route("/", get(dashboard::index))
        .route("/app.js", get(dashboard::script))
        .route("/app.css", get(dashboard::style))
        .route("/favicon.svg", get(dashboard::icon))
        .route("/favicon.ico", get(dashboard::icon))
        .route("/api/health", get(routes::health))
        .route("/api/cicy/chat", post(routes::chat))
        .route("/api/cicy/cancel", post(routes::cancel))
        .route("/api/cicy/retry", post(routes::retry))
        .route("/api/cicy/clear", post(routes::clear))
        .route("/api/cicy/compact", post(routes::compact))
        .route("/api/cicy/history", get(routes::history))
        .route("/api/memory/templates/agent/{id}", get(routes::agents_md).put(routes::put_agents_md))
        .route("/api/agents", get(routes::list_agents).post(routes::create_agent))
        .route("/api/agents/{id}", get(routes::get_agent))
        .route("/api/agents/{id}/prompt", post(routes::prompt))
        .route("/api/agents/{id}/steer", post(routes::steer))
        .route("/api/agents/{id}/respond", post(routes::respond))
        .route("/api/agents/{id}/events", get(routes::agent_events))
        .route("/api/agents/{id}/autonomy", get(routes::autonomy))
        .route("/api/events", get(routes::all_events))
        .route("/api/agents/{id}/todos", get(wake_routes::todos).post(wake_routes::add_todo))
        .route("/api/agents/{id}/todos/{n}", axum::routing::delete(wake_routes::remove_todo))
        .route("/api/agents/{id}/todos/{n}/done", post(wake_routes::done_todo))
        .route("/api/agents/{id}/messages", get(wake_routes::messages).post(wake_routes::send_message))
        .route("/api/groups", post(group_routes::create))
        .route("/api/groups/{name}/messages", get(group_routes::messages).post(group_routes::post))
        .route("/api/groups/{name}/tasks", get(group_routes::tasks))
        .fallback(http::not_found)
        .layer(axum::middleware::from_fn_with_state(hub.clone(), http::guard))
        .layer(DefaultBodyLimit::max(http::BODY_LIMIT))
        .with_state(hub)
}

/// Opens the agents' sessions one at a time after bind *(cicy: warmed at boot)*, so the first
/// chat of each finds it ready and start-up is not slowed by it.
async fn warm(handles: Vec<AgentHandle>) {
    for h in handles {
        let (reply, done) = oneshot::channel();
        if !h.send(Op::Warm { reply }).await {
            return;
        }
        let _ = done.await;
    }
}

/// serve's SIGTERM and SIGINT handlers.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Self, ServeError> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            term: signal(SignalKind::terminate()).map_err(ServeError::Signals)?,
            int: signal(SignalKind::interrupt()).map_err(ServeError::Signals)?,
        })
    }

    /// Waits for SIGTERM or SIGINT, tells `stopping`, then stops every actor (their running
    /// jobs cancelled and awaited, their logs closed) and the HTTP server.
    async fn wait_then_stop(mut self, hub: Hub, stopping: impl FnOnce(StopSignal)) {
        let signal = tokio::select! {
            _ = self.term.recv() => StopSignal::Term,
            _ = self.int.recv() => StopSignal::Int,
        };
        stopping(signal);
        let stops = hub.handles().into_iter().map(|h| async move {
            let (reply, done) = oneshot::channel();
            if h.send(Op::Shutdown { reply }).await {
                let _ = done.await;
            }
        });
        futures_util::future::join_all(stops).await;
        hub.shutdown.cancel();
    }
}

/// Each agent's event log and session hold files open; with a thousand agents the usual soft
/// limit of 1024 descriptors would run out, so it is raised to the hard limit.
fn raise_fd_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dashboard_link_carries_the_token_encoded_as_a_query_value() {
        let info = ServeInfo { pid: 1, port: 8008, instance_id: String::new(), started_at: String::new() };
        let link = |token: &str| Ready { info: &info, token }.dashboard_url();
        assert_eq!(link("0123abcdef"), "http://127.0.0.1:8008/?token=0123abcdef");
        assert_eq!(link("a+b&c#d%e/f=g~h.i_j-k"), "http://127.0.0.1:8008/?token=a%2Bb%26c%23d%25e%2Ff%3Dg~h.i_j-k");
    }
}
