//! `cicy-agent checkpoint <id> save [--label L] | ls | load <c> | rm <c>` (docs/design.md §12).
//!
//! `save` and `load` hold the agent's turn lock, so they are refused (exit 1) while a turn runs
//! (in this or another process, `serve` included: it takes the same lock per turn and re-reads
//! the history before the next one). `ls` and `rm` take no lock. Listings go to stdout, notes to
//! stderr.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Subcommand;

use cicy::checkpoint::{self, SaveOptions};
use cicy::home::Home;
use cicy::lock::{LockError, TurnLock};

#[derive(Debug, Subcommand)]
pub(super) enum Action {
    /// Save a checkpoint now; prints its id.
    Save {
        #[arg(long)]
        label: Option<String>,
    },
    /// List the checkpoints, newest first: id, label, saved_at, messages, conversation.
    Ls,
    /// Restore a checkpoint as a new conversation (with its AGENTS.md, plan and memory); the
    /// state before is saved first as a `before-load` checkpoint.
    Load { checkpoint: String },
    /// Delete one checkpoint.
    Rm { checkpoint: String },
}

pub(super) fn run(home: &Home, id: &str, action: Action, out: &mut impl Write) -> Result<ExitCode> {
    let ws = super::open_registry(home)?.get(id)?.workspace;
    // A busy agent is a refusal (exit 1, as `chat` gives), not a command that could not run.
    let lock = || match TurnLock::try_acquire(&ws, id) {
        Err(LockError::Busy { .. }) => {
            eprintln!("error: a turn is running for {id}; try again when it has ended");
            Ok(None)
        }
        other => other.map(Some).context("cannot take the turn lock"),
    };
    match action {
        Action::Save { label } => {
            let Some(_lock) = lock()? else { return Ok(ExitCode::from(1)) };
            let meta = checkpoint::save(&ws, &SaveOptions { label, ..SaveOptions::default() })?;
            writeln!(out, "{}", meta.checkpoint_id)?;
            let deleted = checkpoint::gc(&ws, cicy::fsutil::unix_now(), &meta.checkpoint_id)?;
            if !deleted.is_empty() {
                eprintln!("· deleted {} old checkpoint(s): {}", deleted.len(), deleted.join(", "));
            }
        }
        Action::Ls => {
            let listed = checkpoint::list(&ws)?;
            for l in &listed {
                match &l.meta {
                    Ok(m) => writeln!(
                        out,
                        "{}\t{}\t{}\t{} messages\t{}",
                        l.id,
                        m.label.as_deref().unwrap_or("-"),
                        m.saved_at,
                        m.message_count,
                        m.conv_id.as_deref().unwrap_or("-")
                    )?,
                    Err(e) => writeln!(out, "{}\t(broken: {e})", l.id)?,
                }
            }
            if listed.is_empty() {
                eprintln!("no checkpoints yet for {id} (`cicy-agent checkpoint {id} save` makes one)");
            }
        }
        Action::Load { checkpoint: cp } => {
            let Some(_lock) = lock()? else { return Ok(ExitCode::from(1)) };
            let loaded = checkpoint::load(&ws, id, &cp)?;
            writeln!(
                out,
                "loaded {} as conversation {} ({} messages); the state before is checkpoint {}",
                loaded.meta.checkpoint_id, loaded.conv_id, loaded.message_count, loaded.before.checkpoint_id
            )?;
        }
        Action::Rm { checkpoint: cp } => {
            checkpoint::remove(&ws, &cp)?;
            writeln!(out, "removed {cp}")?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
