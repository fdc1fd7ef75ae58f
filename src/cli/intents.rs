//! `cicy-agent wish <id> "<what>" …` and `cicy-agent intents <id> ls|status|approve|drop|off|on|
//! rm|tick --dry-run` (docs/design.md §13). They work on the agent's files directly (a serve need not
//! run: its tick reads the ledger each time); `status` also reads the lease from `cicy.db`.
//!
//! Must not touch: the ledger's format, the guardrails or the tick (`cicy::autonomy`).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

use cicy::agent::AgentMemory;
use cicy::autonomy::guard::Judge;
use cicy::autonomy::ledger::{By, Intent, Ledger, Needs, Status};
use cicy::autonomy::report;
use cicy::autonomy::settings;
use cicy::autonomy::wish::{self, WishInput};
use cicy::home::Home;

/// `cicy-agent wish`.
#[derive(Debug, Args)]
pub(super) struct WishArgs {
    /// The agent.
    id: String,
    /// What the agent should do when it is idle (at most 2000 characters).
    what: String,
    /// Why it is worth doing.
    #[arg(long)]
    why: Option<String>,
    /// A bash command that does it; without it the agent does it in a turn of its own.
    #[arg(long, allow_hyphen_values = true)]
    run: Option<String>,
    /// none: it runs on its own; human / external: only reported until `intents <id> approve`.
    #[arg(long, value_enum, default_value_t = NeedsArg::None)]
    needs: NeedsArg,
    /// 4 (first) to 7 (last); default the table's `intent` priority (5).
    #[arg(long)]
    priority: Option<u8>,
    /// Time after a start before it may start again: seconds, or `90s`, `10m`, `2h`.
    #[arg(long, value_parser = parse_gap, default_value = "0")]
    min_gap: Duration,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum NeedsArg {
    None,
    Human,
    External,
}

impl From<NeedsArg> for Needs {
    fn from(n: NeedsArg) -> Self {
        match n {
            NeedsArg::None => Needs::None,
            NeedsArg::Human => Needs::Human,
            NeedsArg::External => Needs::External,
        }
    }
}

/// `--min-gap`: plain seconds, or a duration `humantime` reads (`90s`, `10m`, `2h`, `1h 30m`).
fn parse_gap(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.trim().parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(s.trim()).map_err(|e| format!("`{s}` is not a duration ({e}); give seconds or e.g. 90s, 10m, 2h"))
}

/// `cicy-agent intents <id> <action>`.
#[derive(Debug, Subcommand)]
pub(super) enum Action {
    /// Every intent's latest state, in the order first wished.
    Ls {
        /// `{"ledger", "intents": [...], "skipped": [...]}`.
        #[arg(long)]
        json: bool,
    },
    /// The report: ⑩ the agent's own intents, ⑪ what runs or would run now, what waits for
    /// you, ⑫ what keeps being squeezed out.
    Status {
        /// The report as JSON, with every intent (as `GET /api/agents/{id}/autonomy`).
        #[arg(long)]
        json: bool,
    },
    /// Let an intent that needs a person (or an outside condition) run: needs → none.
    Approve { iid: String },
    /// Drop an intent for good (status dropped; the line stays in the ledger).
    Drop { iid: String },
    /// Switch the agent's autonomy off (nothing of the ledger runs; other scheduling goes on).
    Off,
    /// Switch it back on.
    On,
    /// Move the ledger aside (`intents.jsonl.removed-<unix>`); nothing is deleted.
    Rm,
    /// Say what a tick would do now, without doing it (serve runs the real ticks).
    Tick {
        #[arg(long)]
        dry_run: bool,
    },
}

/// Runs `wish`: prints `<iid> pending`, or `<iid> refused: <class>: <reason>` and exits 1.
///
/// Errors (exit 2, nothing written): an unknown agent, no gateway or model configured, a bad
/// field, an unreadable ledger.
pub(super) fn wish(home: &Home, args: WishArgs, out: &mut impl Write) -> Result<ExitCode> {
    // The judge runs on the agent's gateway and model, as a memory recognizer call does;
    // opening the conversation is not needed (and must not happen while a turn may run).
    let agent = AgentMemory::open(home, &args.id)?;
    let (client, model) = agent.aux_client()?;
    let judge = Judge { client: &client, model: &model, agent_id: &agent.record.id };
    let input = WishInput {
        what: args.what,
        why: args.why,
        run: args.run,
        priority: args.priority,
        min_gap: args.min_gap.as_secs(),
        needs: args.needs.into(),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let cancel = CancellationToken::new();
    let intent = rt.block_on(wish::wish(&agent.record.workspace, home.root(), By::Human, input, &judge, &cancel))?;
    if intent.status == Status::Refused {
        writeln!(out, "{} refused: {}", intent.id, intent.refused_reason.as_deref().unwrap_or("(no reason given)"))?;
        return Ok(ExitCode::from(1));
    }
    writeln!(out, "{} pending", intent.id)?;
    if intent.needs != Needs::None {
        eprintln!(
            "note: it needs {}: it is only reported until `cicy-agent intents {} approve {}`",
            intent.needs.as_str(),
            args.id,
            intent.id
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `intents <id> <action>`, writing its lines to `out`.
///
/// Errors (exit 2): an unknown agent or intent, a finished intent for approve/drop, `tick`
/// without `--dry-run`, files that cannot be read or written.
pub(super) fn run(home: &Home, id: &str, action: Action, out: &mut impl Write) -> Result<ExitCode> {
    let record = super::open_registry(home)?.get(id)?;
    let ws = &record.workspace;
    match action {
        Action::Ls { json } => {
            let ledger = Ledger::of_workspace(ws);
            let folded = ledger.read()?;
            if json {
                let v = serde_json::json!({"ledger": ledger.path(), "intents": folded.intents, "skipped": folded.skipped});
                writeln!(out, "{v}")?;
                return Ok(ExitCode::SUCCESS);
            }
            for s in &folded.skipped {
                eprintln!("warning: {}: line {} skipped: {}", ledger.path().display(), s.line, s.why);
            }
            if folded.intents.is_empty() {
                writeln!(out, "No intents. (Write one with `cicy-agent wish {id} \"…\"`.)")?;
            }
            for i in &folded.intents {
                writeln!(out, "{}", ls_line(i))?;
            }
        }
        Action::Status { json } => {
            let (r, folded) = report::of_agent(home, id, now())?;
            match json {
                true => writeln!(out, "{}", r.to_json(&folded.intents))?,
                false => write!(out, "{}", r.text())?,
            }
        }
        Action::Approve { iid } => {
            let i = wish::approve(ws, home.root(), &iid)?;
            writeln!(out, "{} approved: needs {}; it runs when {id} is idle", i.id, i.needs.as_str())?;
        }
        Action::Drop { iid } => {
            let i = wish::drop(ws, &iid)?;
            writeln!(out, "{} dropped", i.id)?;
        }
        Action::Off | Action::On => {
            let on = matches!(action, Action::On);
            settings::set_switch(ws, on)?;
            match on {
                true => writeln!(out, "autonomy on for {id}")?,
                false => writeln!(out, "autonomy off for {id} (its other scheduling goes on)")?,
            }
            if on && !report::role_config(home, &record)?.enabled() {
                eprintln!(
                    "note: role {} has `autonomy: {{enabled: false}}` in its meta.yaml; nothing runs until that is true",
                    record.role_template
                );
            }
        }
        Action::Rm => match Ledger::of_workspace(ws).remove()? {
            Some(moved) => writeln!(out, "moved the ledger to {}", moved.display())?,
            None => writeln!(out, "no ledger to remove ({})", Ledger::of_workspace(ws).path().display())?,
        },
        Action::Tick { dry_run: false } => {
            let every = report::role_config(home, &record).map_or(settings::DEFAULT_TICK_SECS, |c| c.tick().as_secs());
            anyhow::bail!(
                "tick: only `tick --dry-run` runs here; `cicy-agent serve` runs the ticks (every {every} s while the agent is idle)"
            )
        }
        Action::Tick { dry_run: true } => {
            let tick = cicy::autonomy::tick::tick_in(home, &record, cicy::autonomy::tick::Mode::DryRun);
            writeln!(out, "{}", tick.tick.dry_run_line())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn now() -> i64 {
    i64::try_from(cicy::fsutil::unix_now()).unwrap_or(i64::MAX)
}

/// `i1  pending  p5  by self  tidy the notes folder  run: ls notes` (tab-separated), with what
/// it waits for and how it ended when it did.
fn ls_line(i: &Intent) -> String {
    let by = match i.by {
        By::Agent => "self",
        By::Human => "human",
    };
    let mut fields = vec![i.id.clone(), i.status.as_str().to_string(), format!("p{}", i.priority), format!("by {by}"), i.what.clone()];
    if let Some(run) = &i.run {
        fields.push(format!("run: {run}"));
    }
    if i.needs != Needs::None {
        fields.push(format!("needs {}", i.needs.as_str()));
    }
    if let Some(reason) = &i.refused_reason {
        fields.push(format!("refused: {reason}"));
    }
    if let Some(result) = &i.result {
        fields.push(format!("result: {result}"));
    }
    if i.preempted_count > 0 {
        fields.push(format!("preempted {}× (last by {})", i.preempted_count, i.preempted_by.as_deref().unwrap_or("?")));
    }
    fields.join("\t")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_gap_takes_seconds_or_a_human_duration() {
        assert_eq!(parse_gap("600"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_gap("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_gap("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_gap("2h"), Ok(Duration::from_secs(7200)));
        let e = parse_gap("soon").unwrap_err();
        assert!(e.starts_with("`soon` is not a duration (") && e.ends_with("; give seconds or e.g. 90s, 10m, 2h"), "{e}");
    }
}
