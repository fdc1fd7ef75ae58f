//! `chat`, `retry`, `compact` and `clear`: run turns and conversation commands with Ctrl-C
//! wired to cancellation and the agent's turn lock held.
//!
//! One-shot: one turn (or `/compact`, `/clear` given as the text), exit code 0 (completed), 130
//! (cancelled) or 1 (failed/blocked/refused). `--file` sends a whole file (or all of stdin) as
//! one message. Session: one line at a time from stdin, one turn per line, until `/exit` or
//! EOF; `/compact` and `/clear` typed as a whole line run between turns, and a mistyped command
//! (`/compat`) is refused, neither sent nor run (see `cicy::command::Line`); while a turn's `ask_user`
//! question is open, the next stdin line is its answer (see `answer`), and a one-shot chat has
//! no user to ask; Ctrl-C
//! cancels the running turn, and at the prompt leaves. SIGTERM and SIGHUP cancel the running
//! turn like Ctrl-C and then leave (exit 143, 129). A session's exit code is the worst over
//! its lines (see `exit::Worst`): 1 if any line was refused or any turn or command failed or was
//! blocked, else 130 if Ctrl-C cancelled one, else 0. The lock is held for each line and
//! released between lines, and the history is re-read before each line, so `cicy-agent
//! compact|clear` from another terminal can run between two turns of a session; while a turn
//! runs, they are refused with a message that says they were NOT executed. What `/compact` and
//! `/clear` do and print is `cicy::command`'s (shared with `serve`); this file maps how they
//! ended to exit codes.
//!
//! Memory (docs/design.md §8): memory work never runs before a turn or holds the turn lock. A
//! one-shot process flushes a due buffer after its turn has ended (the answer printed),
//! having released the lock; a session flushes a due buffer after each line and at EOF, and
//! its memory timer flushes it while waiting for a line, also without the lock, so
//! `cicy-agent compact|clear|chat` from another terminal is not refused meanwhile. Piped lines
//! are always ready, so the timer alone would never fire between them. A line typed during a
//! flush waits for it (at most the recognizer timeout, config.yaml
//! `memory.recognizer_timeout_secs`). No flush follows a line that a signal cancelled: the
//! user asked to stop, not to start a network call.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use cicy::agent::{AgentError, Session};
use cicy::command::{self, Command, CommandEnd, Line, NotACommand};
use cicy::event::{Emitter, ErrorKind, EventKind, TurnOutcome};
use cicy::home::Home;
use cicy::lock::{LockError, TurnLock};
use cicy::memory::FlushReason;
use cicy::turn;

use super::answer;
use super::events::with_events;
use super::exit::{exit_code, Worst, CANCELLED};

pub(super) fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

/// What the signal watcher shares with the command it interrupts.
#[derive(Default)]
struct State {
    /// The token a signal cancels; `None` between turns (a signal then leaves at once).
    token: Option<CancellationToken>,
    /// Set by SIGTERM or SIGHUP: the exit code (143, 129) to leave with once the cancelled
    /// section has ended, so its cancel marker is written and its tools are killed first.
    exit: Option<u8>,
}

type Current = Arc<Mutex<State>>;

/// On SIGINT (Ctrl-C), SIGTERM and SIGHUP cancels whatever token is current; with none current,
/// exits the process at once (130, 143, 129). After SIGTERM or SIGHUP the process also exits
/// when the cancelled section ends (see [`unset`]); after SIGINT a session goes on.
fn watch_signals(current: Current) -> Result<()> {
    on_signal(move |code| {
        let token = current.lock().ok().and_then(|mut s| {
            if code != 130 {
                s.exit = Some(code);
            }
            s.token.clone()
        });
        match token {
            Some(t) => t.cancel(),
            None => std::process::exit(code.into()),
        }
    })
}

/// Calls `f` with the shell's exit code of each SIGINT (130), SIGTERM (143) and SIGHUP (129)
/// from now on; the in-process and the through-serve paths decide what a signal does.
pub(super) fn on_signal(mut f: impl FnMut(u8) + Send + 'static) -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        loop {
            let code: u8 = tokio::select! {
                Some(()) = int.recv() => 130,
                Some(()) = term.recv() => 143,
                Some(()) = hup.recv() => 129,
                else => break,
            };
            f(code);
        }
    });
    Ok(())
}

/// A fresh token that a signal cancels from now on.
fn arm(current: &Current) -> CancellationToken {
    let token = CancellationToken::new();
    if let Ok(mut s) = current.lock() {
        s.token = Some(token.clone());
    }
    token
}

/// Ends the section [`arm`] began. If SIGTERM or SIGHUP cancelled it, the process exits here
/// with that signal's code: the section has written what a cancel leaves (the marker), and the
/// turn lock is a `flock` the kernel releases.
fn unset(current: &Current) {
    let exit = current.lock().ok().and_then(|mut s| {
        s.token = None;
        s.exit
    });
    if let Some(code) = exit {
        std::process::exit(code.into());
    }
}

/// Refuses a mistyped command: nothing is sent or run.
fn unknown_command(e: &NotACommand, events: &Emitter) -> u8 {
    events.emit(not_a_command(e));
    1
}

/// The event that refuses a mistyped command.
pub(super) fn not_a_command(e: &NotACommand) -> EventKind {
    EventKind::Error { kind: ErrorKind::Command, message: e.to_string() }
}

/// Opens the agent holding its turn lock; `None` (after saying so) when another process holds it
/// or its role cannot be loaded.
fn open_locked(home: &Home, id: &str, what: &str, events: &Emitter) -> Result<Option<(Session, TurnLock)>> {
    match Session::open_locked(home, id) {
        Ok((session, lock)) => {
            notes(&session, events);
            Ok(Some((session, lock)))
        }
        Err(AgentError::Lock(e @ LockError::Busy { .. })) => {
            refused(what, &e, events);
            Ok(None)
        }
        // A role that cannot be loaded (a bad hook in meta.yaml): the line fails with the event
        // and the exit code (1) that serve gives for it, so `--local` answers alike.
        Err(e @ AgentError::Role(_)) => {
            events.emit(EventKind::Error { kind: ErrorKind::Open, message: e.to_string() });
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

fn refused(what: &str, e: &LockError, events: &Emitter) {
    events.emit(refusal(what, e));
}

/// The event that says `what` was refused because the turn lock is held.
pub(super) fn refusal(what: &str, e: &LockError) -> EventKind {
    EventKind::Error { kind: ErrorKind::Busy, message: format!("{what} was NOT executed: {e}") }
}

fn notes(session: &Session, events: &Emitter) {
    for reaped in &session.notes().reaped {
        events.emit(EventKind::System { text: reaped.to_string() });
    }
    for note in &session.notes().restored {
        events.emit(EventKind::System { text: format!("history restored: {note}") });
    }
}

/// Where `chat` takes its input from.
#[derive(Debug)]
pub(super) enum Input {
    /// The text argument: one line, which may be a command.
    Text(String),
    /// `--file F` (`-`: stdin): the whole content is one message, never a command.
    File(PathBuf),
    /// No text: a line-by-line session on stdin.
    Session,
}

/// Reads `--file`: the whole file (or all of stdin for `-`) as one message, exactly as written.
fn read_message_file(path: &Path) -> Result<String> {
    let (bytes, name) = if path == Path::new("-") {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes).context("reading the message from stdin")?;
        (bytes, "stdin".to_string())
    } else {
        (std::fs::read(path).with_context(|| format!("reading the message from {}", path.display()))?, path.display().to_string())
    };
    let text = String::from_utf8(bytes)
        .map_err(|e| anyhow::anyhow!("{name} is not valid UTF-8 (at byte {}); nothing was sent", e.utf8_error().valid_up_to()))?;
    if text.trim().is_empty() {
        anyhow::bail!("{name} is empty; nothing was sent");
    }
    Ok(text)
}

/// The one line of a one-shot `chat` (reading `--file`; a mistyped command is refused when the
/// events can be shown), or `None` for a stdin session.
/// Errors: an unreadable or empty file, an empty message.
pub(super) fn first_line(input: &Input) -> Result<Option<Result<Line, NotACommand>>> {
    let line = match input {
        Input::Text(text) => Some(Line::parse(text)),
        Input::File(path) => Some(Ok(Line::Message(read_message_file(path)?))),
        Input::Session => None,
    };
    // Model APIs reject empty content, and a stored empty message would be "healed" later.
    if matches!(&line, Some(Ok(Line::Message(t))) if t.trim().is_empty()) {
        anyhow::bail!("the message is empty: give some text, or leave it out to read messages from stdin");
    }
    Ok(line)
}

pub(super) fn chat(home: &Home, id: &str, input: Input, json: bool) -> Result<ExitCode> {
    let line = first_line(&input)?;
    let rt = runtime()?;
    rt.block_on(with_events(home, id, json, async |events: &Emitter| {
        let current: Current = Arc::default();
        watch_signals(current.clone())?;
        if let Some(line) = line {
            let line = match line {
                Ok(line) => line,
                Err(e) => return Ok(ExitCode::from(unknown_command(&e, events))),
            };
            if line == Line::Exit {
                events.emit(EventKind::System { text: "/exit leaves a chat session; there is none to leave".to_string() });
                return Ok(ExitCode::SUCCESS);
            }
            let Some((mut session, lock)) = open_locked(home, id, line.what(), events)? else {
                return Ok(ExitCode::from(1));
            };
            let overdue = overdue(&session);
            let code = run_line(&mut session, &line, events, &current).await?;
            drop(lock);
            if code != CANCELLED {
                flush_memory(&session, overdue, events, &current).await;
            }
            return Ok(ExitCode::from(code));
        }
        let Some((mut session, lock)) = open_locked(home, id, "chat", events)? else {
            return Ok(ExitCode::from(1));
        };
        drop(lock);
        // A session has a user at stdin: `ask_user` questions are answered there.
        let questions = Arc::new(cicy::ask::Questions::default());
        session.extensions_mut().insert(questions.clone());
        if session.conversation().current.messages.is_empty() {
            if let Some(g) = session.materials()?.template.meta.greeting.filter(|g| !g.trim().is_empty()) {
                events.emit(EventKind::System { text: g });
            }
        }
        let interactive = std::io::stdin().is_terminal();
        let mut stdin = BufReader::new(tokio::io::stdin());
        // Bytes up to `\n`, decoded lossily: one line that is not UTF-8 must not end the session.
        let mut buf = Vec::new();
        let mut worst = Worst::default();
        let memory = session.memory();
        // Set when a flush left the buffer due (another process is flushing it): the next
        // flush waits one recognizer timeout instead of firing again at once.
        let mut not_before: Option<SystemTime> = None;
        let session_flush = async |session: &Session, not_before: &mut Option<SystemTime>| {
            if not_before.is_some_and(|n| n > SystemTime::now()) {
                return;
            }
            flush_memory(session, None, events, &current).await;
            let now = SystemTime::now();
            *not_before = matches!(memory.due(now), Ok(Some(_))).then(|| now + memory.settings().recognizer_timeout);
        };
        loop {
            if interactive {
                eprint!("> ");
            }
            // `read_until` keeps what it read in `buf` when the timer wins, so no input is lost;
            // `buf` is cleared only once a whole line is taken.
            let next = tokio::select! {
                biased;
                () = sleep_until(memory.next_due().ok().flatten().map(|d| not_before.map_or(d, |n| d.max(n)))) => None,
                n = stdin.read_until(b'\n', &mut buf) => Some(n?),
            };
            if next.is_none() {
                session_flush(&session, &mut not_before).await;
                continue;
            }
            if buf.is_empty() {
                // EOF: a buffer due now (e.g. a keyword in the last line) is not left behind.
                session_flush(&session, &mut not_before).await;
                break;
            }
            let text = String::from_utf8_lossy(&buf).into_owned();
            buf.clear();
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            let line = match Line::parse(text) {
                Ok(Line::Exit) => break,
                Err(e) => {
                    worst.add(unknown_command(&e, events));
                    continue;
                }
                Ok(line @ (Line::Command(_) | Line::Message(_))) => line,
            };
            let lock = match TurnLock::try_acquire(&session.agent().record.workspace, id) {
                Ok(lock) => lock,
                Err(e @ LockError::Busy { .. }) => {
                    refused(line.what(), &e, events);
                    worst.add(1);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            session.reload()?;
            notes(&session, events);
            let run = run_line(&mut session, &line, events, &current);
            let code = answer::answering(run, questions.clone(), &mut stdin, &mut buf, events).await??;
            drop(lock);
            worst.add(code);
            // Piped lines are always ready, so the timer above never fires between them: a
            // buffer due now (keyword, full batch, oldest turn) is flushed before the next read.
            if code != CANCELLED {
                session_flush(&session, &mut not_before).await;
            }
        }
        Ok(ExitCode::from(worst.0))
    }))
}

/// Runs one chat line: `/compact`, `/clear` or a user turn. Holds no lock itself.
async fn run_line(session: &mut Session, line: &Line, events: &Emitter, current: &Current) -> Result<u8> {
    match line {
        Line::Command(c) => run_command(session, *c, 0, events, current).await,
        // Leaving is the caller's business (the session loop); nothing to do on a session.
        Line::Exit => Ok(0),
        Line::Message(text) => {
            let token = arm(current);
            let outcome = turn::run_turn(session, text, events, &token).await;
            unset(current);
            Ok(exit_code(outcome?))
        }
    }
}

/// Runs a conversation command on an open session.
async fn run_command(session: &mut Session, c: Command, keep: usize, events: &Emitter, current: &Current) -> Result<u8> {
    match c {
        Command::Compact => compact_now(session, keep, events, current).await,
        Command::Clear => clear_now(session, events, current).await,
    }
}

async fn compact_now(session: &mut Session, keep: usize, events: &Emitter, current: &Current) -> Result<u8> {
    let token = arm(current);
    let end = command::compact(session, keep, events, &token).await;
    unset(current);
    Ok(command_exit_code(end?))
}

async fn clear_now(session: &mut Session, events: &Emitter, current: &Current) -> Result<u8> {
    // The conversation ends: its `session_end` hooks run first (docs/design.md §12).
    let token = arm(current);
    cicy::turn::session_end(session, events, &token).await;
    unset(current);
    let (end, _old) = command::clear(session, events)?;
    Ok(command_exit_code(end))
}

/// A command's exit code: 0 done, 130 cancelled, 1 failed.
fn command_exit_code(end: CommandEnd) -> u8 {
    match end {
        CommandEnd::Done { .. } => 0,
        CommandEnd::Cancelled => CANCELLED,
        CommandEnd::Failed => 1,
    }
}

pub(super) fn retry(home: &Home, id: &str, json: bool) -> Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(with_events(home, id, json, async |events: &Emitter| {
        let current: Current = Arc::default();
        watch_signals(current.clone())?;
        let Some((mut session, lock)) = open_locked(home, id, "retry", events)? else {
            return Ok(ExitCode::from(1));
        };
        let overdue = overdue(&session);
        let token = arm(&current);
        let outcome = turn::retry_turn(&mut session, events, &token).await;
        unset(&current);
        let outcome = outcome?;
        drop(lock);
        if outcome != Some(TurnOutcome::Cancelled) {
            flush_memory(&session, overdue, events, &current).await;
        }
        match outcome {
            Some(outcome) => Ok(ExitCode::from(exit_code(outcome))),
            None => {
                eprintln!("{}", nothing_to_retry(id));
                Ok(ExitCode::from(1))
            }
        }
    }))
}

/// What `retry` says when the last turn has no outcome marker to re-run.
pub(super) fn nothing_to_retry(id: &str) -> String {
    format!("nothing to retry: the last turn of {id} did not end with a failure, cancel or block marker (or it began before the last compaction)")
}

/// `cicy-agent compact <id>` and `cicy-agent clear <id>`.
pub(super) fn command(home: &Home, id: &str, c: Command, keep: usize, json: bool) -> Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(with_events(home, id, json, async |events: &Emitter| {
        let current: Current = Arc::default();
        watch_signals(current.clone())?;
        let Some((mut session, _lock)) = open_locked(home, id, c.as_str(), events)? else {
            return Ok(ExitCode::from(1));
        };
        Ok(ExitCode::from(run_command(&mut session, c, keep, events, &current).await?))
    }))
}

/// Whether the memory buffer is due now, before this one-shot process's turn restarts its idle
/// period: only a file read, so the turn starts at once; the flush itself waits for the turn.
fn overdue(session: &Session) -> Option<FlushReason> {
    session.memory().due(SystemTime::now()).ok().flatten()
}

/// Flushes the memory buffer when it is due or was `overdue` (the backoff after failed
/// flushes honoured), with a signal cancelling the flush. Called with the turn lock released:
/// the flush touches only the memory folder, which has its own lock. Every problem is
/// reported as an event.
async fn flush_memory(session: &Session, overdue: Option<FlushReason>, events: &Emitter, current: &Current) {
    let memory = session.memory();
    match memory.due(SystemTime::now()) {
        Ok(Some(_)) => {}
        Ok(None) if overdue.is_some() => {}
        Ok(None) => return,
        Err(e) => {
            events.emit(EventKind::Error { kind: ErrorKind::Memory, message: format!("cannot read the memory buffer: {e}") });
            return;
        }
    }
    let model = match session.materials() {
        Ok(m) => m.model,
        Err(e) => {
            events.emit(EventKind::Error { kind: ErrorKind::Memory, message: format!("cannot flush memory: {e}") });
            return;
        }
    };
    let token = arm(current);
    memory.flush_if_due(&session.aux_target(&model), overdue, events, &token).await;
    unset(current);
}

/// Sleeps until `at` (not at all when it has passed), or forever when there is nothing to wait
/// for.
async fn sleep_until(at: Option<SystemTime>) {
    match at {
        Some(at) => tokio::time::sleep(at.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO)).await,
        None => std::future::pending().await,
    }
}
