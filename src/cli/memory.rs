//! `cicy-agent memory <id> ls|show|check|rebuild|flush|forget` (docs/design.md §8 "CLI").
//!
//! Reads and manages one agent's memory folder without opening its conversation (a turn may be
//! running in another process). Listings go to stdout, notes to stderr.

use std::io::Write;
use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::{Context, Result};
use clap::Subcommand;
use tokio_util::sync::CancellationToken;

use cicy::agent::AgentMemory;
use cicy::home::Home;
use cicy::memory::{buffer, index, store, AuxTarget, FlushReason};

#[derive(Debug, Subcommand)]
pub(super) enum Action {
    /// List the memories, strongest first: mem_id, type, salience, title.
    Ls,
    /// Print one memory file as it is on disk.
    Show { mem_id: String },
    /// List memory files that cannot be read, each with the reason (exit 1 if any).
    Check,
    /// Rebuild MEMORY.md from the memory files.
    Rebuild,
    /// Send the buffered turns to the memory recognizer now.
    Flush {
        /// Print every event as one JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Move a memory to `_archive/` (it is never deleted) and rebuild MEMORY.md.
    Forget { mem_id: String },
}

pub(super) fn run(home: &Home, id: &str, action: Action) -> Result<ExitCode> {
    let agent = AgentMemory::open(home, id)?;
    let memory = &agent.memory;
    let dir = memory.dir();
    match action {
        Action::Ls => {
            let scan = store::scan(dir)?;
            let mut out = std::io::stdout().lock();
            for m in index::sorted(&scan.memories) {
                let r = &m.record;
                writeln!(out, "{}\t{}\t{}\t{}", r.mem_id, r.kind.as_str(), r.salience, r.title)?;
            }
            out.flush()?;
            if scan.memories.is_empty() && scan.bad.is_empty() {
                eprintln!("no memories yet for {id}");
            }
            // The buffer count is a side note: a buffer that cannot be read (its lock needs a
            // writable folder) must not hide the listing.
            match buffer::load(dir).map(|b| b.turns.len()) {
                Ok(0) => {}
                Ok(pending) => {
                    eprintln!("· {pending} turn(s) buffered, not yet recognized (`cicy-agent memory {id} flush` sends them now)")
                }
                Err(e) => eprintln!("· cannot count the buffered turns: {e}"),
            }
            note_bad(id, scan.bad.len());
            Ok(ExitCode::SUCCESS)
        }
        Action::Show { mem_id } => {
            let slug = store::slug(&mem_id).ok_or_else(|| cicy::memory::MemoryError::InvalidId(mem_id.clone()))?;
            let path = dir.join(format!("{slug}.md"));
            let bytes = std::fs::read(&path).with_context(|| format!("no memory `{mem_id}` ({})", path.display()))?;
            let mut out = std::io::stdout().lock();
            out.write_all(&bytes)?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Action::Check => {
            let scan = store::scan(dir)?;
            let mut out = std::io::stdout().lock();
            for b in &scan.bad {
                let name = b.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                writeln!(out, "{name}: {}", b.reason)?;
            }
            if scan.bad.is_empty() {
                writeln!(out, "ok: {} memories, all readable", scan.memories.len())?;
                out.flush()?;
                Ok(ExitCode::SUCCESS)
            } else {
                out.flush()?;
                eprintln!(
                    "{} of {} memory files cannot be read; they are skipped (never deleted) until fixed",
                    scan.bad.len(),
                    scan.bad.len() + scan.memories.len()
                );
                Ok(ExitCode::from(1))
            }
        }
        Action::Rebuild => {
            let r = index::rebuild(dir)?;
            let mut out = std::io::stdout().lock();
            if r.entries == 0 {
                writeln!(out, "MEMORY.md: no memories (no index)")?;
            } else {
                writeln!(out, "MEMORY.md: {} memories, {} bytes", r.entries, r.text.len())?;
            }
            out.flush()?;
            note_bad(id, r.bad.len());
            Ok(ExitCode::SUCCESS)
        }
        Action::Flush { json } => {
            if buffer::load(dir)?.turns.is_empty() {
                eprintln!("nothing buffered for {id}");
                return Ok(ExitCode::SUCCESS);
            }
            let (client, model) = agent.aux_client()?;
            let rt = super::chat::runtime()?;
            let reason = memory.due(SystemTime::now())?.unwrap_or(FlushReason::Forced);
            let aux = AuxTarget { client: &client, model: &model, agent_id: id };
            let ok = rt.block_on(super::events::with_events(home, id, json, async |events: &cicy::event::Emitter| {
                memory.flush_and_report(&aux, reason, events, &CancellationToken::new()).await
            }));
            Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Action::Forget { mem_id } => {
            let to = store::archive(dir, &mem_id)?;
            index::rebuild(dir)?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "moved to {}", to.display())?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn note_bad(id: &str, n: usize) {
    if n > 0 {
        eprintln!("· {n} memory file(s) cannot be read and are skipped: `cicy-agent memory {id} check` lists them");
    }
}
