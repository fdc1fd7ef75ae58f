//! `cicy-agent history <id> [--all] [--json]`: prints the active conversation.
//!
//! Without `--all`: the window the model sees, from the last compact summary on. With
//! `--all`: the archived snapshots a compaction left (`current.<unix>.json`), then every
//! message of current.json with each summary shown where it starts a new window. Read-only: it
//! takes no lock and heals nothing.

use std::io::{StdoutLock, Write};
use std::process::ExitCode;

use anyhow::{Context, Result};
use serde_json::json;

use cicy::conversation::history::{CurrentFile, HistoryStore};
use cicy::conversation::message::{Content, ContentBlock, Message, Role, SUMMARY_PREFIX};
use cicy::home::Home;
use cicy::prompt::window_start;

pub(super) fn history(home: &Home, id: &str, all: bool, json: bool) -> Result<ExitCode> {
    let a = super::open_registry(home)?.get(id)?;
    let store = HistoryStore::new(&a.workspace);
    let Some(conv) = store.active_conversation() else {
        eprintln!("{id} has no conversation yet");
        return Ok(ExitCode::SUCCESS);
    };
    let dir = store.conversation_dir(&conv);
    let current = match std::fs::symlink_metadata(dir.join("current.json")) {
        Ok(_) => read_current(&dir.join("current.json"))?,
        // No file yet, or an unreadable one was set aside: the conversation has no messages.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            note_set_aside(&dir, &conv);
            CurrentFile::new(id, "")
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.join("current.json").display())),
    };
    let archives = store.archives(&conv)?;
    let mut out = std::io::stdout().lock();
    if json && !all {
        writeln!(out, "{}", serde_json::to_string_pretty(&current.messages)?)?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    if json {
        let archives: Vec<serde_json::Value> = archives
            .iter()
            .map(|ar| {
                let messages = read_current(&ar.current).ok().map(|c| c.messages.len());
                json!({"file": file_name(&ar.current), "unix": ar.unix, "messages": messages})
            })
            .collect();
        let doc = json!({"conversation_id": conv, "archives": archives, "messages": current.messages});
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let msgs = &current.messages;
    let ws = window_start(msgs);
    let summaries = msgs.iter().filter(|m| m.is_summary()).count();
    if all {
        writeln!(out, "conversation {conv} ({} messages, {summaries} compaction(s))", msgs.len())?;
        if !archives.is_empty() {
            writeln!(out, "archived snapshots (chat/{conv}/):")?;
            for ar in &archives {
                let count = match read_current(&ar.current) {
                    Ok(c) => format!("{} messages", c.messages.len()),
                    Err(e) => format!("unreadable: {e:#}"),
                };
                writeln!(out, "  {}  {}  {count}", file_name(&ar.current), rfc3339(ar.unix))?;
            }
        }
        for m in msgs {
            if m.is_summary() {
                writeln!(out, "── compacted: the window starts here ──")?;
            }
            print_message(&mut out, m)?;
        }
    } else {
        if ws == 0 {
            writeln!(out, "conversation {conv} ({} messages)", msgs.len())?;
        } else {
            writeln!(
                out,
                "conversation {conv} ({} messages; showing the {} from the last compaction on — history --all shows all)",
                msgs.len(),
                msgs.len() - ws
            )?;
        }
        for m in &msgs[ws..] {
            print_message(&mut out, m)?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Says on stderr which unreadable `current.json` files were set aside in `dir` (by a command
/// that found them corrupt), so an empty conversation is not a mystery.
fn note_set_aside(dir: &std::path::Path, conv: &str) {
    let mut aside: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("current.json.corrupt-")).collect()
        })
        .unwrap_or_default();
    aside.sort();
    if let Some(last) = aside.last() {
        eprintln!(
            "note: conversation {conv} has no current.json: the unreadable one was set aside as chat/{conv}/{last} (kept as it was); the next chat starts this conversation afresh"
        );
    }
}

fn read_current(path: &std::path::Path) -> Result<CurrentFile> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("{} is not a valid history file", path.display()))
}

fn file_name(p: &std::path::Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn rfc3339(unix: u64) -> String {
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    i64::try_from(unix)
        .ok()
        .and_then(|u| time::OffsetDateTime::from_unix_timestamp(u).ok())
        .and_then(|t| t.format(&fmt).ok())
        .unwrap_or_else(|| unix.to_string())
}

fn print_message(out: &mut StdoutLock<'_>, m: &Message) -> std::io::Result<()> {
    let id = m.id.map(|i| i.to_string()).unwrap_or_default();
    if m.is_summary() {
        let text = m.plain_text();
        return writeln!(out, "[{id}] summary: {}", text.strip_prefix(SUMMARY_PREFIX).unwrap_or(&text));
    }
    let who = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    match &m.content {
        Content::Text(t) => writeln!(out, "[{id}] {who}: {t}")?,
        Content::Blocks(blocks) => {
            fn text(b: &ContentBlock) -> Option<&str> {
                match b {
                    ContentBlock::Text { text } => Some(text.trim_end()),
                    _ => None,
                }
            }
            // Text blocks in a row are one line: a cut answer is its partial text, the
            // `[cut off: …]` note and the outcome marker, one message and not three.
            for run in blocks.chunk_by(|a, b| text(a).is_some() && text(b).is_some()) {
                let [b] = run else {
                    writeln!(out, "[{id}] {who}: {}", run.iter().filter_map(text).collect::<Vec<_>>().join(" "))?;
                    continue;
                };
                match b {
                    ContentBlock::Text { text } => writeln!(out, "[{id}] {who}: {text}")?,
                    ContentBlock::ToolUse { name, input, .. } => writeln!(out, "[{id}] {who} → {name} {input}")?,
                    ContentBlock::ToolResult { content, is_error, .. } => {
                        let tag = if *is_error { "error" } else { "result" };
                        writeln!(out, "[{id}] {tag} ← {}", cicy::event::preview(content, 400))?;
                    }
                    ContentBlock::Thinking { thinking, .. } => writeln!(out, "[{id}] {who} (thinking): {thinking}")?,
                }
            }
        }
    }
    Ok(())
}
