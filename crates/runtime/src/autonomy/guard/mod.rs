//! Guardrails at write time (docs/design.md §13): whether a wish may be written, and which running
//! intents are never killed.
//!
//! A wish's `run` line is parsed as bash and every simple command it would run is classified by
//! program and target ([`check_run`], pure); its `what`/`why` prose goes to an aux call, the
//! judge ([`judge`]), whose failure refuses. [`check`] does both, the parse first so a refused
//! command costs no gateway call. Owns the refused classes and the never-killed test of a `run`
//! line ([`never_killed`]). Must not touch the ledger, the scheduler or any file: callers write
//! the `refused` line with [`Refusal`]'s text.
//!
//! Classes (the `class` of a [`Refusal`]): `memory`, `kernel`, `model`, `migrate`, `handoff`,
//! `gates`, `limits`, `network`, `install`, `push`, `config` (docs/design.md §13); `unparsed` for a
//! `run` line the guard cannot follow safely (a syntax error, `eval`, a program or a written
//! path that is only known when it runs, a program that runs others out of sight, a git config
//! override, a path through `/proc` or `/dev/fd`); `judge` when the judge call failed or its answer could
//! not be read. `model`, `migrate`, `handoff` and `limits` have no command of their own: only the
//! judge names them.

mod classify;
mod git;
mod judge;
mod opts;
mod paths;
mod programs;
mod shell;
mod writers;

use std::path::Path;

use tokio_util::sync::CancellationToken;

use crate::gateway::GatewayClient;
use classify::{Effect, Places};
use shell::Item;

pub use judge::{MAX_TOKENS as JUDGE_MAX_TOKENS, SYSTEM_TEXT as JUDGE_SYSTEM_TEXT, TIMEOUT as JUDGE_TIMEOUT};

/// A refusal: `class` is one of the classes of the module doc; `reason` is one sentence for
/// the ledger's `refused_reason` and the writer of the wish. Displayed as `<class>: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{class}: {reason}")]
pub struct Refusal {
    pub class: String,
    pub reason: String,
}

/// Where the agent lives. Both paths absolute; they are normalised lexically, never resolved.
#[derive(Debug, Clone, Copy)]
pub struct GuardCtx<'a> {
    /// The agent's workspace: relative paths of a `run` line start here.
    pub workspace: &'a Path,
    /// `$CICY_HOME`.
    pub home: &'a Path,
}

/// Whom the judge asks: the agent's gateway client and model; the call's session id is
/// `guard-<agent_id>`.
#[derive(Debug, Clone, Copy)]
pub struct Judge<'a> {
    pub client: &'a GatewayClient,
    pub model: &'a str,
    pub agent_id: &'a str,
}

/// Classifies a wish's `run` command line (bash syntax) by program and target; the first
/// refused simple command, in the order bash would run them, gives the refusal. Pure: no file
/// is read and no process started.
///
/// Walked: lists (`;`, `&&`, `||`, `&`), pipelines, subshells, `{ }`, `if`/`for`/`while`/`case`,
/// function bodies, `$(…)`/backticks, `<(…)`, unquoted here-documents, the text of
/// `bash|sh|… -c '…'`, a here-document or here-string fed to a shell or to `. /dev/stdin`, and
/// `trap` actions (recursively). Wrappers (`env`, `nice`, `timeout`, `nohup`, `command`, `exec`,
/// `sudo`, `doas`, `stdbuf`, `time`, `setsid`, `ionice`, `builtin`, `busybox`, `xargs`) are
/// looked through; programs that run others out of sight (`chrt`, `flock`, `su`, `tmux`, `at`,
/// … in `programs::RUNS_OTHERS`) are unparsed. Paths are taken relative to the workspace (and
/// to every directory a `cd` may have entered), globs are matched as if `dotglob` were set,
/// `~`/`$HOME` stand for any directory, and a path through `/proc` or `/dev/fd` is unparsed.
pub fn check_run(run: &str, ctx: &GuardCtx) -> Result<(), Refusal> {
    let places = Places::new(ctx.workspace, ctx.home);
    let items = shell::walk(run, &[places.start_cwd()], &places.home.to_string_lossy(), 0);
    check_items(&items, &places, 0)
}

fn check_items(items: &[Item], places: &Places, depth: usize) -> Result<(), Refusal> {
    for item in items {
        match item {
            Item::Unparsed(reason) => return Err(classify::refusal("unparsed", reason.clone())),
            Item::Run(sc) => {
                for effect in classify::effects(sc, places, depth) {
                    match effect {
                        Effect::Refuse(r) => return Err(r),
                        Effect::Program(_) => {}
                        Effect::Target { how, arg, cwds, what } => classify::check_target(how, &arg, &cwds, &what, places)?,
                        Effect::Nested(inner) => check_items(&inner, places, depth + 1)?,
                    }
                }
            }
        }
    }
    Ok(())
}

/// The aux call `X-Cicy-Aux: guard` on `what`/`why` ([`JUDGE_SYSTEM_TEXT`], [`JUDGE_TIMEOUT`],
/// one attempt). Any failure — HTTP error, timeout, cancel, an answer that is not a JSON object,
/// a verdict other than allow/refuse — is a refusal of class `judge`.
pub async fn judge(target: &Judge<'_>, what: &str, why: Option<&str>, cancel: &CancellationToken) -> Result<(), Refusal> {
    judge::judge(target, what, why, cancel).await
}

/// [`check_run`] on `run` first (no gateway call when it refuses), then [`judge`] on the prose.
pub async fn check(
    what: &str,
    why: Option<&str>,
    run: Option<&str>,
    ctx: &GuardCtx<'_>,
    judge: &Judge<'_>,
    cancel: &CancellationToken,
) -> Result<(), Refusal> {
    if let Some(run) = run {
        check_run(run, ctx)?;
    }
    judge::judge(judge, what, why, cancel).await
}

/// The seed's never-killed list for a `run` line (docs/design.md §13 "Never killed"): true when
/// the line writes (redirects or a known writer such as `cp`, `mv`, `tee`, `rm`) under the
/// workspace's `.cicy/history`, `.cicy/checkpoints` or `.cicy/memory`, or when every command it
/// may run is `git` (any subcommand; argv[0]'s basename after the wrappers of [`check_run`]) or
/// one of the harmless builtins [`HARMLESS`], at least one being `git`. A shell whose `-c` text
/// is followed counts as what that text runs. So `cd repo && git pull` is protected and
/// `false && git status; sleep 8` is not: its `sleep` could hold the agent for good. A line that
/// does not parse is not protected.
pub fn never_killed(run: &str, ctx: &GuardCtx) -> bool {
    let places = Places::new(ctx.workspace, ctx.home);
    let items = shell::walk(run, &[places.start_cwd()], &places.home.to_string_lossy(), 0);
    let protected = ["history", "checkpoints", "memory"].map(|d| places.cicy.join(d));
    let mut seen = Seen::default();
    survey(&items, &places, &protected, 0, &mut seen);
    !seen.unparsed && (seen.protected_write || (seen.git && !seen.other))
}

/// The builtins that may stand beside `git` in a never-killed line: they return at once.
pub const HARMLESS: &[&str] = &["cd", "true", ":", "echo", "printf", "test", "["];

/// What [`never_killed`] learns of a line.
#[derive(Default)]
struct Seen {
    unparsed: bool,
    protected_write: bool,
    git: bool,
    /// A program other than `git` and [`HARMLESS`].
    other: bool,
}

fn survey(items: &[Item], places: &Places, protected: &[std::path::PathBuf], depth: usize, seen: &mut Seen) {
    for item in items {
        let sc = match item {
            Item::Unparsed(_) => {
                seen.unparsed = true;
                continue;
            }
            Item::Run(sc) => sc,
        };
        let effects = classify::effects(sc, places, depth);
        let follows_text = effects.iter().any(|e| matches!(e, Effect::Nested(_)));
        for effect in effects {
            match effect {
                Effect::Program(p) if p == "git" => seen.git = true,
                Effect::Program(p) if HARMLESS.contains(&p.as_str()) || (follows_text && classify::SHELLS.contains(&p.as_str())) => {}
                Effect::Program(_) => seen.other = true,
                Effect::Target { arg, cwds, .. } => {
                    let hit = cwds
                        .iter()
                        .filter_map(|c| arg.pattern(c))
                        .filter_map(|p| paths::Target::new(&p).ok())
                        .any(|t| protected.iter().any(|d| t.at_or_inside(d)));
                    seen.protected_write |= hit;
                }
                Effect::Nested(inner) => survey(&inner, places, protected, depth + 1, seen),
                Effect::Refuse(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
