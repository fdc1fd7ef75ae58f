//! The command line (docs/design.md §3): argument parsing, command dispatch and the only code that
//! knows about the terminal. Library errors become `anyhow` errors here and are printed once.

mod answer;
mod chat;
mod checkpoint;
mod cluster;
mod coordinate;
mod events;
mod exit;
mod group;
mod history;
mod inbox;
mod intents;
mod memory;
mod outbox;
mod print;
mod remote;
mod status;
mod todo;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use cicy::agent::{self, CreateOptions};
use cicy::gateway::ApiStyle;
use cicy::home::Home;
use cicy::registry::Registry;
use cicy::role::{self, ToolConfig};

#[derive(Debug, Parser)]
#[command(name = "cicy-agent", version, about = "A headless role-agent runtime", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create an agent from a role template and print its id.
    Create {
        /// Display title of the agent.
        title: String,
        /// Persona: a packaged or `$CICY_HOME/roles/<slug>` template.
        #[arg(long, default_value = "assistant")]
        role_template: String,
        /// Roster label (not prompt text); `worker` and `master` are topology markers.
        #[arg(long, default_value = "worker")]
        role: String,
        /// Model for this agent (overrides the role's and the config's).
        #[arg(long)]
        model: Option<String>,
        /// Id of this agent's master.
        #[arg(long)]
        master: Option<String>,
        /// Workspace folder (default `$CICY_HOME/workers/<id>`).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Wire style for this agent: anthropic or openai.
        #[arg(long, value_parser = parse_style)]
        api_style: Option<ApiStyle>,
    },
    /// List agents, one tab-separated line each: id, title, role template, role, workspace,
    /// master (`-`: none).
    Ls,
    /// List role templates.
    Roles,
    /// Show one agent.
    Show { id: String },
    /// Send one message (streams the answer), or with no text read messages from stdin, one
    /// turn per line.
    Chat {
        id: String,
        /// The message; omit it for a line-by-line session (`/exit` leaves).
        text: Option<String>,
        /// Send the whole file as one message (`-`: all of stdin), never as a command.
        #[arg(long, value_name = "FILE", conflicts_with = "text")]
        file: Option<PathBuf>,
        /// Print every event as one JSON object per line.
        #[arg(long)]
        json: bool,
        /// Run in this process even when a `cicy-agent serve` of this home is running.
        #[arg(long)]
        local: bool,
    },
    /// Re-run the last turn if it ended with an outcome marker (failed, cancelled, blocked).
    Retry {
        id: String,
        #[arg(long)]
        json: bool,
        /// Run in this process even when a `cicy-agent serve` of this home is running.
        #[arg(long)]
        local: bool,
    },
    /// Summarize the active conversation into one message (`/compact` in chat); refused while
    /// a turn is running. The state before is archived beside it; nothing is deleted.
    Compact {
        id: String,
        /// Keep this many of the newest messages after the summary (moved so no tool call is
        /// separated from its result).
        #[arg(long, default_value_t = 0)]
        keep: usize,
        #[arg(long)]
        json: bool,
        /// Run in this process even when a `cicy-agent serve` of this home is running.
        #[arg(long)]
        local: bool,
    },
    /// Start a new, empty conversation (`/clear` in chat); the old one stays on disk. Refused
    /// while a turn is running.
    Clear {
        id: String,
        #[arg(long)]
        json: bool,
        /// Run in this process even when a `cicy-agent serve` of this home is running.
        #[arg(long)]
        local: bool,
    },
    /// Host every agent in one resident process with an HTTP API on 127.0.0.1 (docs/design.md §9);
    /// runs until SIGTERM or Ctrl-C. `chat`, `retry`, `compact` and `clear` go through it
    /// while it runs.
    Serve {
        /// Port on 127.0.0.1 (0: any free port; `$CICY_HOME/serve.json` names it).
        #[arg(long, default_value_t = cicy::serve::DEFAULT_PORT)]
        port: u16,
        /// Only 127.0.0.1 is accepted: the API runs tools on this machine.
        #[arg(long, default_value = "127.0.0.1")]
        bind: String,
        /// Seconds an idle agent's session stays open before it is dropped (reopened on demand).
        #[arg(long, default_value_t = 600)]
        session_idle_secs: u64,
        /// Seconds a wake turn may run before it is cancelled (cryo: 3600).
        #[arg(long, default_value_t = 3600)]
        max_wake_secs: u64,
        /// Re-runs of a wake turn that failed before it sent anything, waiting 1, 2, 4 … s
        /// (cryo: 10).
        #[arg(long, default_value_t = 10)]
        wake_retries: u32,
        /// Sessions opened ahead of the first request after start (the first agents by id).
        #[arg(long, default_value_t = cicy::serve::DEFAULT_WARM_LIMIT)]
        warm_limit: usize,
        /// Poll every inbox every 2 s instead of watching it (a filesystem without inotify,
        /// e.g. some network mounts); also `CICY_WATCH_POLL=1` (or true/yes/on).
        #[arg(long, env = "CICY_WATCH_POLL", value_parser = clap::builder::BoolishValueParser::new(), num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
        poll_inboxes: bool,
        /// At most this many inboxes get an inotify watch; the others are polled every 2 s
        /// (headroom under the per-user inotify limit other programs share); also
        /// `CICY_WATCH_MAX`.
        #[arg(long, env = "CICY_WATCH_MAX")]
        max_inbox_watches: Option<usize>,
        /// Milliseconds a file written in place (an inbox message, an outbox command) must be
        /// unchanged before it is taken, unless the inbox watch saw its writer close it (2000);
        /// also `CICY_WRITE_GRACE_MS`. Raise it for writers that pause longer mid-file.
        #[arg(long, env = "CICY_WRITE_GRACE_MS", default_value_t = cicy::fsutil::DEFAULT_WRITE_GRACE.as_millis() as u64)]
        write_grace_ms: u64,
    },
    /// Long-term memory of an agent: ls, show <mem_id>, check, rebuild, flush, forget <mem_id>.
    Memory {
        id: String,
        #[command(subcommand)]
        action: memory::Action,
    },
    /// Checkpoints of an agent (docs/design.md §12): save [--label L], ls, load <c>, rm <c>.
    Checkpoint {
        id: String,
        #[command(subcommand)]
        action: checkpoint::Action,
    },
    /// Todos of an agent (docs/design.md §10): add "<text>" --at <time>, ls [--all], done <n>, rm <n>.
    Todo {
        id: String,
        #[command(subcommand)]
        action: todo::Action,
    },
    /// Print the local time now (`YYYY-MM-DDTHH:MM:SS`), or the minute a `--at` expression
    /// names (`YYYY-MM-DDTHH:MM`), e.g. `time +30 min`.
    Time {
        /// The expression; its words are joined by one space. None: now.
        #[arg(num_args = 0.., allow_hyphen_values = true)]
        expr: Vec<String>,
    },
    /// What an agent is doing, when it wakes next, what it owes (through serve when it runs).
    Status {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Write one message file into an agent's inbox (`.cicy/messages/inbox/`); a running serve
    /// wakes the agent.
    Send(inbox::SendArgs),
    /// Message an agent (docs/design.md §11 `msg`) and wait for its answer.
    Msg(coordinate::MsgArgs),
    /// The `msg` calls from or to an agent.
    Msgs(coordinate::MsgsArgs),
    /// Send one text to every worker of a master and wait for each answer.
    Broadcast {
        master: String,
        text: String,
        /// Milliseconds to wait for each worker (cicy: 300000).
        #[arg(long)]
        timeout: Option<u64>,
    },
    /// Copy an agent (template, model, AGENTS.md, memory, current conversation); prints the new id.
    Fork {
        src: String,
        #[arg(long)]
        title: Option<String>,
        #[arg(long)]
        master: Option<String>,
    },
    /// Groups of agents and people (docs/design.md §11): create, post, messages, tasks.
    Group {
        #[command(subcommand)]
        action: group::GroupAction,
    },
    /// Show an agent's pending inbox messages and its dialog; never claims or moves a file.
    Inbox {
        id: String,
        #[command(flatten)]
        dialog: inbox::DialogArgs,
        /// Print `{"pending": [...], "dialog": [...]}` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Queue one command in the outbox for the runtime (docs/design.md §11); what the shim
    /// `$CICY_SEND` runs. The outbox is `$CICY_OUTBOX_DIR` (absolute), else beside the shim,
    /// else `$CICY_WORKSPACE/.cicy/outbox`. Exit 2: not a JSON object with a `type`, nothing
    /// written; exit 1: `.seq` unreadable or a write failed.
    #[command(hide = true)]
    OutboxSend {
        /// The command, e.g. `{"type":"send","group":"ops","content":"done"}`.
        #[arg(allow_hyphen_values = true)]
        json: String,
    },
    /// Write an intent for an agent's idle time (docs/design.md §13), checked by the guardrails
    /// first; prints `<iid> pending`, or `<iid> refused: <class>: <reason>` and exits 1.
    Wish(intents::WishArgs),
    /// An agent's idle intents (docs/design.md §13): ls, status, approve <iid>, drop <iid>, off, on,
    /// rm, tick --dry-run.
    Intents {
        id: String,
        #[command(subcommand)]
        action: intents::Action,
    },
    /// Cluster mode's engine (docs/cluster.md): `check` the NATS servers of a cluster.
    Cluster {
        #[command(subcommand)]
        action: cluster::Action,
    },
    /// Print the active conversation: the window from the last compaction on.
    History {
        id: String,
        /// Also list the archived snapshots and every message before the last compaction.
        #[arg(long)]
        all: bool,
        /// Print current.json's messages as JSON (with --all: with the archives).
        #[arg(long)]
        json: bool,
    },
}

fn parse_style(s: &str) -> Result<ApiStyle, String> {
    ApiStyle::parse(s).ok_or_else(|| format!("`{s}` is not an API style (anthropic, openai)"))
}

/// Runs the CLI; errors are printed to stderr with their causes.
pub(crate) fn main() -> ExitCode {
    let cli = Cli::parse();
    // The shim's hot path: no logging, home or registry (target < 5 ms per call).
    if let Command::OutboxSend { json } = &cli.command {
        return outbox::send(json);
    }
    tracing_subscriber::fmt()
        .with_env_filter(log_filter(std::env::var("CICY_LOG").ok().as_deref()))
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: `2>file` must get plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match run(cli) {
        Ok(code) => code,
        // The reader of stdout went away (`| head`, `| true`): stop quietly like other Unix tools.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            ExitCode::from(2)
        }
    }
}

/// What is logged to stderr: `CICY_LOG` when set (e.g. `debug`, `cicy::serve=info`), else
/// warnings of cicy itself and errors of everything: a warning is what an operator must act
/// on (the inotify limit, a file set aside), so it is shown without asking. The libraries'
/// warnings stay hidden by default: they are about their internals, not about this home.
fn log_filter(env: Option<&str>) -> tracing_subscriber::EnvFilter {
    const DEFAULT: &str = "error,cicy=warn,cicy_agent=warn";
    let directives = env.map(str::trim).filter(|d| !d.is_empty()).unwrap_or(DEFAULT);
    tracing_subscriber::EnvFilter::builder().parse_lossy(directives)
}

/// Whether `e` is a write to stdout that failed because its reader closed. Listings write with
/// `writeln!(out, …)?`, so such an error is a bare `io::Error`; library errors wrap theirs.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

/// `e` and its causes joined by `: `, like `{e:#}`, but skipping a cause whose text is already
/// there: many library errors (`{path}: {source}`) include their source in their own message.
fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

fn run(cli: Cli) -> Result<ExitCode> {
    let home = Home::from_env()?;
    match cli.command {
        Command::Cluster { action } => cluster::run(action),
        Command::Create { title, role_template, role, model, master, workspace, api_style } => {
            let created = agent::create(&home, CreateOptions { title, role_template, role, model, master, workspace, api_style })?;
            if let Some(w) = &created.role_warning {
                eprintln!("warning: {w}");
            }
            if !created.wrote_agents_md {
                eprintln!("note: kept the existing {}", created.record.workspace.join("AGENTS.md").display());
            }
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", created.record.id)?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Ls => {
            if !home.db_path().exists() {
                eprintln!("no agents yet (create one with `cicy-agent create <title>`)");
                return Ok(ExitCode::SUCCESS);
            }
            let reg = open_registry(&home)?;
            let mut out = std::io::stdout().lock();
            for a in reg.list()? {
                let master = a.master_id.as_deref().unwrap_or("-");
                writeln!(out, "{}\t{}\t{}\t{}\t{}\t{master}", a.id, a.title, a.role_template, a.role, a.workspace.display())?;
            }
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Roles => {
            let tools = ToolConfig::load(&home, cicy::builtin_tools::names())?;
            for name in role::invalid_template_dirs(&home) {
                eprintln!(
                    "warning: roles/{name} is skipped: `{name}` is not a valid role template name (use letters, digits, `-` and `_`)"
                );
            }
            let mut out = std::io::stdout().lock();
            for slug in role::list_templates(&home) {
                match role::load_template(&home, &slug, &tools) {
                    Ok(t) => writeln!(
                        out,
                        "{slug}\t{}\ttools: [{}]\t{}",
                        t.meta.name,
                        t.tools.join(", "),
                        t.meta.description.unwrap_or_default()
                    )?,
                    Err(e) => writeln!(out, "{slug}\t(broken: {e})")?,
                }
            }
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Show { id } => {
            let a = open_registry(&home)?.get(&id)?;
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "id: {}\ntitle: {}\nagent_type: {}\nrole: {}\nrole_template: {}",
                a.id, a.title, a.agent_type, a.role, a.role_template
            )?;
            writeln!(out, "default_model: {}", a.default_model.as_deref().unwrap_or("(config)"))?;
            writeln!(out, "master_id: {}", a.master_id.as_deref().unwrap_or("-"))?;
            writeln!(out, "workspace: {}\nconfig: {}", a.workspace.display(), serde_json::to_string(&a.config)?)?;
            writeln!(out, "created_at: {}\nupdated_at: {}", a.created_at, a.updated_at)?;
            let store = cicy::conversation::history::HistoryStore::new(&a.workspace);
            writeln!(out, "conversation: {}", store.active_conversation().as_deref().unwrap_or("(none yet)"))?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Chat { id, text, file, json, local } => {
            let input = match (text, file) {
                (Some(text), _) => chat::Input::Text(text),
                (None, Some(path)) => chat::Input::File(path),
                (None, None) => chat::Input::Session,
            };
            match remote_unless(local, || remote::chat(&home, &id, &input, json))? {
                Some(code) => Ok(code),
                None => chat::chat(&home, &id, input, json),
            }
        }
        Command::Retry { id, json, local } => match remote_unless(local, || remote::retry(&home, &id, json))? {
            Some(code) => Ok(code),
            None => chat::retry(&home, &id, json),
        },
        Command::Compact { id, keep, json, local } => {
            let c = cicy::command::Command::Compact;
            match remote_unless(local, || remote::command(&home, &id, c, keep, json))? {
                Some(code) => Ok(code),
                None => chat::command(&home, &id, c, keep, json),
            }
        }
        Command::Clear { id, json, local } => {
            let c = cicy::command::Command::Clear;
            match remote_unless(local, || remote::command(&home, &id, c, 0, json))? {
                Some(code) => Ok(code),
                None => chat::command(&home, &id, c, 0, json),
            }
        }
        Command::History { id, all, json } => history::history(&home, &id, all, json),
        Command::Status { id, json } => status::run(&home, &id, json, &mut std::io::stdout().lock()),
        Command::Memory { id, action } => memory::run(&home, &id, action),
        Command::Checkpoint { id, action } => checkpoint::run(&home, &id, action, &mut std::io::stdout().lock()),
        Command::Serve {
            port,
            bind,
            session_idle_secs,
            max_wake_secs,
            wake_retries,
            warm_limit,
            poll_inboxes,
            max_inbox_watches,
            write_grace_ms,
        } => {
            cicy::fsutil::set_write_grace(std::time::Duration::from_millis(write_grace_ms));
            let wake = cicy::serve::WakeLimits {
                max_wake: std::time::Duration::from_secs(max_wake_secs),
                retries: wake_retries,
                ..cicy::serve::WakeLimits::default()
            };
            let opts = cicy::serve::ServeOptions {
                port,
                token: std::env::var("CICY_API_TOKEN").ok(),
                session_idle: std::time::Duration::from_secs(session_idle_secs),
                wake,
                watch: cicy::serve::watch::WatchOptions {
                    force_poll: poll_inboxes,
                    max_notify_watches: max_inbox_watches,
                    ..Default::default()
                },
                warm_limit,
            };
            serve(home, &bind, opts)
        }
        Command::Todo { id, action } => {
            let mut out = std::io::stdout().lock();
            todo::run(&home, &id, &action, &mut out)?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Time { expr } => {
            let mut out = std::io::stdout().lock();
            todo::time(&expr, &mut out)?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Send(args) => inbox::send(&home, args),
        Command::Msg(args) => coordinate::msg(&home, args, &mut std::io::stdout().lock()),
        Command::Msgs(args) => coordinate::msgs(&home, args, &mut std::io::stdout().lock()),
        Command::Broadcast { master, text, timeout } => {
            coordinate::broadcast(&home, &master, &text, timeout, &mut std::io::stdout().lock())
        }
        Command::Fork { src, title, master } => {
            coordinate::fork(&home, &src, title.as_deref(), master.as_deref(), &mut std::io::stdout().lock())
        }
        Command::Group { action } => group::run(&home, action, &mut std::io::stdout().lock()),
        Command::Inbox { id, dialog, json } => inbox::show(&home, &id, dialog, json),
        Command::OutboxSend { json } => Ok(outbox::send(&json)),
        Command::Wish(args) => intents::wish(&home, args, &mut std::io::stdout().lock()),
        Command::Intents { id, action } => intents::run(&home, &id, action, &mut std::io::stdout().lock()),
    }
}

/// Runs `remote` (a command through a live serve, docs/design.md §9) unless `--local` was given;
/// `None` means: run it in this process.
fn remote_unless(local: bool, remote: impl FnOnce() -> Result<Option<ExitCode>>) -> Result<Option<ExitCode>> {
    if local {
        Ok(None)
    } else {
        remote()
    }
}

/// `cicy-agent serve`: exits 2 for another `--bind` or when a serve of this home runs.
fn serve(home: Home, bind: &str, opts: cicy::serve::ServeOptions) -> Result<ExitCode> {
    if bind != "127.0.0.1" {
        anyhow::bail!("--bind {bind}: serve listens on 127.0.0.1 only (its API runs tools on this machine); put a proxy with its own authentication in front to reach it from elsewhere");
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let ready = |ready: &cicy::serve::Ready<'_>| {
        // The first line keeps its form for scripts that read it; the link follows it.
        eprintln!("cicy-agent serve: listening on http://127.0.0.1:{} (pid {})", ready.info.port, ready.info.pid);
        eprintln!("cicy-agent serve: dashboard: {} (open it in a browser on this machine)", ready.dashboard_url());
    };
    let stopping = |signal| eprintln!("cicy-agent serve: {signal} received: stopping (running turns are cancelled)");
    let served = rt.block_on(cicy::serve::run(home, opts, ready, stopping));
    match served {
        Ok(()) => {
            eprintln!("cicy-agent serve: stopped");
            Ok(ExitCode::SUCCESS)
        }
        // cryo: state that cannot be read stops the start with exit 1, naming the file; nothing
        // in it is discarded.
        Err(e @ (cicy::serve::ServeError::WakeDb(_) | cicy::serve::ServeError::Registry(_))) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(1))
        }
        Err(e) => Err(e.into()),
    }
}

/// The registry for a command that only reads it: opened read-only, so it works on a
/// read-only `CICY_HOME`.
fn open_registry(home: &Home) -> Result<Registry> {
    if !home.db_path().exists() {
        anyhow::bail!("no agents yet in {} (create one with `cicy-agent create <title>`)", home.root().display());
    }
    Ok(Registry::open_read_only(&home.db_path())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("/x: {source}")]
    struct Repeats {
        source: std::io::Error,
    }

    #[test]
    fn warnings_of_cicy_are_logged_by_default_and_cicy_log_overrides() {
        assert_eq!(log_filter(None).to_string(), "cicy_agent=warn,cicy=warn,error");
        assert_eq!(log_filter(Some(" ")).to_string(), "cicy_agent=warn,cicy=warn,error");
        assert_eq!(log_filter(Some("debug")).to_string(), "debug");
        assert_eq!(log_filter(Some("cicy::serve=info")).to_string(), "cicy::serve=info");
    }

    #[test]
    fn a_cause_already_in_the_message_is_printed_once() {
        let e = anyhow::Error::new(Repeats { source: std::io::Error::other("boom") });
        assert_eq!(error_text(&e), "/x: boom");
        let e = anyhow::Error::new(std::io::Error::other("inner")).context("outer");
        assert_eq!(error_text(&e), "outer: inner");
    }
}
