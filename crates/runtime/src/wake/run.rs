//! The start and the end of a wake (docs/design.md §10), as blocking steps serve runs around the
//! turn: [`prepare`] reads what the wake needs, claims the due todos and one conversation and
//! writes the wake message (a claim it cannot run on is released, never kept);
//! [`finalize`] makes the wake never silent (the direct-chat answer, the fallbacks with the
//! last error lines), ends the claimed todos (done, or a retry `(attempt k)`), and records a
//! crash for the next wake; [`recover`] handles what a killed serve left.
//!
//! Owns `<ws>/.cicy/wake.json` (`{"wakes": n, "previous_crash": bool}`). Must not touch the
//! turn loop, HTTP or the scheduler.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::claim::{claim_next, claim_of, claimed_messages, finish_moves, release};
use super::db::WakeDb;
use super::deliver::{deliver_fallback, Outgoing, SERVE_SENDER};
use super::inbox::{Mailbox, MessageFile};
use super::message::{wake_message, Reason, WakeInputs};
use super::obligation::ResolvedBy;
use super::state::{Claim, WakeNote};
use super::todo::{todo_line, Todo};
use super::tools::claim_meta;
use super::WakeError;
use crate::event::TodoAction;
use crate::fsutil;
use crate::home::Home;
use crate::messages::route;

/// The message to `human` after a killed wake that had claimed todos and no message; the
/// todos follow in parentheses **[chosen]**.
pub const TODO_INTERRUPTED_NOTICE: &str = "(cicy: the agent was interrupted during a wake for its todos, which are rescheduled as \"(attempt k)\". Some of the work may have partly happened.)";

/// cryo: the notice for a conversation claimed by a wake that a killed serve never finished.
pub const INTERRUPTED_NOTICE: &str =
    "(cicy: the agent was interrupted before replying. Some external actions may have partly happened; check before resending.)";
/// cryo: how many error lines a crash fallback quotes, and how long each may be.
pub const ERROR_LINES: usize = 10;
pub const ERROR_LINE_CHARS: usize = 200;

/// What the agent's runner knows when a wake is asked for.
#[derive(Debug, Clone, Copy)]
pub struct Trigger {
    pub reason: Reason,
}

/// A wake about to run: its message and what it claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    pub reason: Reason,
    pub n: u64,
    pub message: String,
    pub todos: Vec<Todo>,
    pub claim: Option<Claim>,
    pub messages: Vec<MessageFile>,
}

/// What [`prepare`] found.
#[derive(Debug)]
pub struct Looked {
    /// The wake to run; `None` when nothing is due and the inbox has nothing to claim (a wake
    /// with nothing to do runs no turn *(cryo)*); an error when it cannot run (nothing stays
    /// claimed: what was claimed was released).
    pub wake: Result<Option<Prepared>, WakeError>,
    /// An inbox file is still being written, or did not parse yet: look again after this long.
    pub retry_in: Option<Duration>,
    /// Inbox files that left `inbox/` without a claim, for the agent's events.
    pub aside: Vec<WakeNote>,
}

/// `<ws>/.cicy/wake.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct WakeCount {
    wakes: u64,
    previous_crash: bool,
}

fn count_path(ws: &Path) -> PathBuf {
    ws.join(".cicy").join("wake.json")
}

fn read_count(ws: &Path) -> Result<WakeCount, WakeError> {
    let path = count_path(ws);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| WakeError::State { path, message: e.to_string() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(WakeCount::default()),
        Err(e) => Err(WakeError::State { path, message: e.to_string() }),
    }
}

fn write_count(ws: &Path, c: &WakeCount) -> Result<(), WakeError> {
    let path = count_path(ws);
    let bytes = serde_json::to_vec(c).map_err(|e| WakeError::State { path: path.clone(), message: e.to_string() })?;
    fsutil::write_atomic(&path, &bytes).map_err(|e| WakeError::State { path, message: e.to_string() })
}

/// Claims the due todos (one transaction) and the next inbox conversation (obligation, then
/// archive), and writes the wake message. What can refuse the wake (`wake.json`, the database)
/// is read before anything is claimed; a step that fails after the claims releases them
/// (messages back to `inbox/`, todos pending), so a wake that cannot run swallows nothing.
pub fn prepare(home: &Home, agent: &str, ws: &Path, trigger: Trigger) -> Looked {
    let mut looked = Looked { wake: Ok(None), retry_in: None, aside: Vec::new() };
    looked.wake = claim_and_build(home, agent, ws, trigger, &mut looked);
    looked
}

fn claim_and_build(home: &Home, agent: &str, ws: &Path, trigger: Trigger, looked: &mut Looked) -> Result<Option<Prepared>, WakeError> {
    let mut db = WakeDb::open(home)?;
    let mut count = read_count(ws)?;
    let mb = Mailbox::of_workspace(ws);
    let now = chrono::Local::now();
    let due = db.todo_claim_due(agent, now.timestamp())?;
    let claimed = match claim_next(&mut db, &mb, agent, SystemTime::now(), fsutil::write_grace()) {
        Ok(c) => c,
        Err(e) => {
            release_all(&mut db, &mb, agent, &due, None);
            return Err(e);
        }
    };
    looked.retry_in = claimed.retry_in;
    looked.aside = claimed.aside;
    let (claim, messages) = match claimed.claim {
        Some((c, m)) => (Some(c), m),
        None => (None, Vec::new()),
    };
    if due.is_empty() && claim.is_none() {
        return Ok(None);
    }
    let reason = match trigger.reason {
        Reason::Recovery | Reason::Heartbeat => trigger.reason,
        Reason::Todo | Reason::Inbox if due.is_empty() => Reason::Inbox,
        Reason::Todo | Reason::Inbox => Reason::Todo,
    };
    count.wakes += 1;
    let previous_crash = std::mem::take(&mut count.previous_crash);
    let built = db.todo_list(agent, true).map(|todos| {
        let now_local = now.format("%Y-%m-%dT%H:%M:%S").to_string();
        wake_message(&WakeInputs {
            reason,
            n: count.wakes,
            now_local: &now_local,
            now_unix: now.timestamp(),
            previous_crash,
            due: &due,
            todos: &todos,
            envelopes: &route::prompt_for(home, agent, &messages),
        })
    });
    match built.map_err(WakeError::from).and_then(|message| write_count(ws, &count).map(|()| message)) {
        Ok(message) => Ok(Some(Prepared { reason, n: count.wakes, message, todos: due, claim, messages })),
        Err(e) => {
            release_all(&mut db, &mb, agent, &due, claim.as_ref());
            Err(e)
        }
    }
}

/// Releases what the wake `p` claimed when its turn could not start (the session or the turn
/// lock could not be opened): its messages are pending again, its todos too.
///
/// Errors: opening the database (nothing released; the next start answers the claim).
pub fn abandon(home: &Home, agent: &str, ws: &Path, p: &Prepared) -> Result<(), WakeError> {
    let mut db = WakeDb::open(home)?;
    release_all(&mut db, &Mailbox::of_workspace(ws), agent, &p.todos, p.claim.as_ref());
    Ok(())
}

/// Releases what a wake that cannot run claimed; a release that fails is logged (the claims
/// then stand, and the next start answers them as interrupted).
fn release_all(db: &mut WakeDb, mb: &Mailbox, agent: &str, due: &[Todo], claim: Option<&Claim>) {
    let ids: Vec<u32> = due.iter().map(|t| t.id).collect();
    if let Err(e) = db.todo_release(agent, &ids) {
        tracing::error!(agent, error = %e, "cannot release the todos of a wake that cannot run");
    }
    if let Some(c) = claim {
        if let Err(e) = release(db, mb, c.obligation_id) {
            tracing::error!(agent, error = %e, "cannot release the messages of a wake that cannot run");
        }
    }
}

/// How a wake turn ended, for [`finalize`].
#[derive(Debug, Clone)]
pub enum Ending {
    /// The turn completed.
    Completed { final_answer: Option<String> },
    /// It failed (the gateway, after every retry), was cancelled, timed out or crashed;
    /// `errors` are its error lines, oldest first.
    Crashed { errors: Vec<String> },
}

/// What the turn left in its wake state.
#[derive(Debug, Clone, Default)]
pub struct Left {
    pub claim: Option<Claim>,
    pub sent: u32,
    /// The agent had no tool to answer with (`reply`, `send`: a pure-chat role such as the
    /// packaged `concierge`): its final answer is its reply in a group too **[chosen]**.
    pub tool_less: bool,
}

/// Ends a wake: the direct-chat answer as the reply, the fallbacks, the claimed todos, the
/// crash flag. Returns what to report.
pub fn finalize(home: &Home, agent: &str, ws: &Path, todos: &[u32], left: &Left, ending: &Ending) -> Result<Vec<WakeNote>, WakeError> {
    let mut notes = Vec::new();
    let mut db = WakeDb::open(home)?;
    let mut sent = left.sent;
    let crashed = matches!(ending, Ending::Crashed { .. });
    if let Some(c) = left.claim.as_ref().filter(|c| !c.answered) {
        // Choruz: in a direct chat the final answer is the reply when no reply/send ran.
        let answer = match ending {
            // Not for an agent's plain message: two agents answering each other's answers
            // would never stop. An agent's `msg` asks for exactly this answer.
            Ending::Completed { final_answer: Some(a) }
                if (c.group.is_none() || left.tool_less)
                    && left.sent == 0
                    && !a.trim().is_empty()
                    && (!super::deliver::is_agent_id(&c.from) || !c.msg_calls.is_empty()) =>
            {
                Some(a.trim().to_string())
            }
            _ => None,
        };
        let (from, text, by) = match answer {
            Some(a) => (agent, a, ResolvedBy::Agent),
            None => {
                let base = if crashed { "(cicy: agent crashed before replying)" } else { "(cicy: agent hibernated before replying)" };
                (SERVE_SENDER, with_errors(base, ending), ResolvedBy::Fallback)
            }
        };
        let msg = Outgoing { to: c.from.clone(), text: text.clone(), question: false, meta: claim_meta(c) };
        let file = deliver_fallback(home, ws, agent, from, &msg)?;
        db.obligation_resolve(c.obligation_id, by)?;
        notes.push(WakeNote::MessageOut { from: from.to_string(), to: c.from.clone(), text, file: file.name });
        sent += 1;
    }
    // A claim answered with nothing sent is one of 🔔 callbacks only (`claim_next`): the agent
    // was told an answer it asked for, and nobody waits to hear back (docs/design.md §11).
    let told = left.claim.as_ref().is_some_and(|c| c.answered);
    if sent == 0 && !told {
        let base = if crashed { "(cicy: agent crashed before sending)" } else { "(cicy: agent hibernated without sending anything)" };
        let text = with_errors(base, ending);
        let msg = Outgoing { to: "human".into(), text: text.clone(), ..Outgoing::default() };
        let file = deliver_fallback(home, ws, agent, SERVE_SENDER, &msg)?;
        notes.push(WakeNote::MessageOut { from: SERVE_SENDER.to_string(), to: "human".into(), text, file: file.name });
    }
    for t in db.todo_finish(agent, todos, !crashed, chrono::Local::now().timestamp())? {
        notes.push(WakeNote::Todo { action: TodoAction::Retry, id: t.id, line: todo_line(&t) });
    }
    if crashed {
        let mut count = read_count(ws)?;
        count.previous_crash = true;
        write_count(ws, &count)?;
    }
    Ok(notes)
}

/// A crash fallback's text: the base line and the last [`ERROR_LINES`] error lines, each cut to
/// [`ERROR_LINE_CHARS`] with `…`, in a 4-backtick fence *(cryo)*.
fn with_errors(base: &str, ending: &Ending) -> String {
    let Ending::Crashed { errors } = ending else { return base.to_string() };
    let lines: Vec<String> = errors
        .iter()
        .flat_map(|e| e.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let clean: String = l.chars().filter(|c| !c.is_control()).collect();
            match clean.char_indices().nth(ERROR_LINE_CHARS) {
                Some((i, _)) => format!("{}…", &clean[..i]),
                None => clean,
            }
        })
        .collect();
    if lines.is_empty() {
        return base.to_string();
    }
    let tail = &lines[lines.len().saturating_sub(ERROR_LINES)..];
    format!("{base}\n\n````\n{}\n````", tail.join("\n"))
}

/// At serve's start, for one agent: finishes the file moves of unresolved obligations, answers
/// each with the interruption notice *(cryo: claimed messages are never replayed)*, and ends the
/// todos a killed wake had claimed as failed (retries `(attempt k)`), flagging the crash for the
/// next wake message. Returns what to report.
pub fn recover(home: &Home, agent: &str, ws: &Path) -> Result<Vec<WakeNote>, WakeError> {
    let mut db = WakeDb::open(home)?;
    let mb = Mailbox::of_workspace(ws);
    finish_moves(&db, &mb, agent)?;
    let mut notes = Vec::new();
    let unresolved = db.obligation_unresolved(Some(agent))?;
    for ob in &unresolved {
        let claimed = claimed_messages(&mb, ob);
        // The claim is known by its first file: without it there is no sender to notify.
        if claimed.first().map(|m| &m.name) != ob.message_ids.first() {
            db.obligation_resolve(ob.id, ResolvedBy::Notice)?;
            continue;
        }
        let claim = claim_of(ob.id, ob.conv_id.clone(), &claimed, ob.message_ids.clone());
        let msg = Outgoing { to: claim.from.clone(), text: INTERRUPTED_NOTICE.into(), question: false, meta: claim_meta(&claim) };
        let file = deliver_fallback(home, ws, agent, SERVE_SENDER, &msg)?;
        db.obligation_resolve(ob.id, ResolvedBy::Notice)?;
        notes.push(WakeNote::MessageOut {
            from: SERVE_SENDER.to_string(),
            to: claim.from,
            text: INTERRUPTED_NOTICE.into(),
            file: file.name,
        });
    }
    let claimed_todos = db.todo_claimed(agent)?;
    let claimed: Vec<u32> = claimed_todos.iter().map(|t| t.id).collect();
    if !claimed.is_empty() || !unresolved.is_empty() {
        for t in db.todo_finish(agent, &claimed, false, chrono::Local::now().timestamp())? {
            notes.push(WakeNote::Todo { action: TodoAction::Retry, id: t.id, line: todo_line(&t) });
        }
        if unresolved.is_empty() {
            // A wake for todos alone had no sender to notify: its people hear of it (never silent).
            let list: Vec<String> = claimed_todos.iter().map(|t| format!("#{} {}", t.id, t.text)).collect();
            let text = format!("{TODO_INTERRUPTED_NOTICE} ({})", list.join("; "));
            let msg = Outgoing { to: "human".into(), text: text.clone(), ..Outgoing::default() };
            let file = deliver_fallback(home, ws, agent, SERVE_SENDER, &msg)?;
            notes.push(WakeNote::MessageOut { from: SERVE_SENDER.to_string(), to: "human".into(), text, file: file.name });
        }
        let mut count = read_count(ws)?;
        count.previous_crash = true;
        write_count(ws, &count)?;
    }
    Ok(notes)
}
