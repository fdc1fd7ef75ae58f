//! `cicy-agent msg|msgs|broadcast|fork` (docs/design.md §11, cicy's master/worker commands): message
//! an agent and wait for its answer, list the calls of an agent, ask every worker of a master,
//! fork an agent.
//!
//! Works on `cicy.db` and the inbox files (`cicy::messages::coordinate`): the worker answers in
//! a wake of the running serve; without one the message waits in its inbox and `msg` times out.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use tokio_util::sync::CancellationToken;

use cicy::home::Home;
use cicy::messages::coordinate::{self, Waited, BROADCAST_TIMEOUT};
use cicy::messages::groups::principal;
use cicy::messages::store::{CallState, MessageStore};

/// `msg` arguments.
#[derive(Debug, Args)]
pub(super) struct MsgArgs {
    /// The agent to message (w-<n>).
    to: String,
    text: String,
    /// Who asks: an agent id or a person's name.
    #[arg(long, default_value = "human")]
    from: String,
    /// Print the call's id and return at once.
    #[arg(long)]
    no_wait: bool,
    /// Seconds to wait for the answer (cicy: 600).
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// No 🔔 message with the answer when nobody waits for it any more.
    #[arg(long)]
    no_callback: bool,
}

/// `msgs` arguments: the calls from or to `id`, newest first.
#[derive(Debug, Args)]
pub(super) struct MsgsArgs {
    id: String,
    /// Only calls from this principal.
    #[arg(long)]
    from: Option<String>,
    /// Only calls to this agent.
    #[arg(long)]
    to: Option<String>,
    /// Only calls in this state: waiting, queued or done.
    #[arg(long)]
    status: Option<String>,
    /// Only calls not answered yet.
    #[arg(long)]
    open: bool,
    #[arg(long)]
    json: bool,
}

/// `msg`: exit 0 with the answer, 1 when the wait timed out (the call stays queued).
pub(super) fn msg(home: &Home, a: MsgArgs, out: &mut impl Write) -> Result<ExitCode> {
    let from = principal(&a.from)?;
    let id = coordinate::send(home, &from, &a.to, &a.text, !a.no_wait, !a.no_callback, 0)?;
    if a.no_wait {
        writeln!(out, "msg {id} queued")?;
        return Ok(ExitCode::SUCCESS);
    }
    let cancel = CancellationToken::new();
    let rt = super::chat::runtime()?;
    let waited = rt.block_on(async {
        let c = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                c.cancel();
            }
        });
        coordinate::wait(home, id, Duration::from_secs(a.timeout), &cancel).await
    })?;
    match waited {
        Waited::Answered(answer) => {
            writeln!(out, "{answer}")?;
            Ok(ExitCode::SUCCESS)
        }
        Waited::TimedOut => {
            writeln!(out, "msg {id} queued: no answer within {} s", a.timeout)?;
            Ok(ExitCode::from(1))
        }
        // Ctrl-C, as for `chat`: the call stays queued and calls back unless --no-callback.
        Waited::Cancelled => {
            writeln!(out, "msg {id} queued: stopped waiting")?;
            Ok(ExitCode::from(130))
        }
    }
}

/// `msgs`: one line per call, `#<id> <from> → <to> [<state>] <text>` and the answer below it.
pub(super) fn msgs(home: &Home, a: MsgsArgs, out: &mut impl Write) -> Result<ExitCode> {
    if let Some(s) = a.status.as_deref().filter(|s| !matches!(*s, "waiting" | "queued" | "done")) {
        anyhow::bail!("--status `{s}` is not a call state: use waiting, queued or done");
    }
    let store = MessageStore::open(home)?;
    let want_from = a.from.as_deref().map(principal).transpose()?;
    let calls: Vec<_> = store
        .calls_of(&principal(&a.id)?, 1000)?
        .into_iter()
        .filter(|c| want_from.as_deref().is_none_or(|f| c.from == f))
        .filter(|c| a.to.as_deref().is_none_or(|t| c.to == t))
        .filter(|c| a.status.as_deref().is_none_or(|s| c.state.as_str() == s))
        .filter(|c| !a.open || c.state != CallState::Done)
        .collect();
    if a.json {
        writeln!(out, "{}", serde_json::to_string(&calls)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if calls.is_empty() {
        writeln!(out, "No msgs.")?;
    }
    for c in &calls {
        writeln!(out, "#{} {} → {} [{}] {}", c.id, c.from, c.to, c.state.as_str(), c.text)?;
        if let Some(r) = &c.reply {
            writeln!(out, "    ↳ {r}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `broadcast <master> <text> [--timeout ms]`.
pub(super) fn broadcast(home: &Home, master: &str, text: &str, timeout_ms: Option<u64>, out: &mut impl Write) -> Result<ExitCode> {
    super::open_registry(home)?.get(master)?;
    let timeout = timeout_ms.map_or(BROADCAST_TIMEOUT, Duration::from_millis);
    let rt = super::chat::runtime()?;
    let lines = rt.block_on(coordinate::broadcast(home, master, text, timeout, &CancellationToken::new(), 1))?;
    writeln!(out, "{lines}")?;
    Ok(ExitCode::SUCCESS)
}

/// `fork <src> [--title T] [--master M]`: prints the new id.
pub(super) fn fork(home: &Home, src: &str, title: Option<&str>, master: Option<&str>, out: &mut impl Write) -> Result<ExitCode> {
    let rec = coordinate::fork(home, src, title, master)?;
    writeln!(out, "{}", rec.id)?;
    Ok(ExitCode::SUCCESS)
}
