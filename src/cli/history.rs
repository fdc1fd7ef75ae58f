//! `cicy-agent history <id> [--all] [--json]`: prints the active conversation.
//!
//! Without `--all`: the window the model sees, from the last compact summary on. With
//! `--all`: the archived snapshots a compaction left (`current.<unix>.json`), then every
//! message of current.json with each summary shown where it starts a new window. Read-only: it
//! takes no lock and heals nothing.

use std::process::ExitCode;

use anyhow::{Context, Result};
use serde_json::json;

use cicy::conversation::history::{CurrentFile, HistoryStore};
use cicy::conversation::message::{Content, ContentBlock, Message, Role, SUMMARY_PREFIX};
use cicy::home::Home;
use cicy::prompt::window_start;

pub fn history(home: &Home, id: &str, all: bool, json: bool) -> Result<ExitCode> {
    let a = super::open_registry(home)?.get(id)?;
    let store = HistoryStore::new(&a.workspace);
    let Some(conv) = store.active_conversation() else {
        eprintln!("{id} has no conversation yet");
        return Ok(ExitCode::SUCCESS);
    };
    let current = read_current(&store.conversation_dir(&conv).join("current.json"))?;
    let archives = store.archives(&conv)?;
    if json && !all {
        println!("{}", serde_json::to_string_pretty(&current.messages)?);
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
        let out = json!({"conversation_id": conv, "archives": archives, "messages": current.messages});
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    let msgs = &current.messages;
    let ws = window_start(msgs);
    let summaries = msgs.iter().filter(|m| m.is_summary()).count();
    if all {
        println!("conversation {conv} ({} messages, {summaries} compaction(s))", msgs.len());
        if !archives.is_empty() {
            println!("archived snapshots (chat/{conv}/):");
            for ar in &archives {
                let count = match read_current(&ar.current) {
                    Ok(c) => format!("{} messages", c.messages.len()),
                    Err(e) => format!("unreadable: {e:#}"),
                };
                println!("  {}  {}  {count}", file_name(&ar.current), rfc3339(ar.unix));
            }
        }
        for m in msgs {
            if m.is_summary() {
                println!("── compacted: the window starts here ──");
            }
            print_message(m);
        }
    } else {
        if ws == 0 {
            println!("conversation {conv} ({} messages)", msgs.len());
        } else {
            println!(
                "conversation {conv} ({} messages; showing the {} from the last compaction on — history --all shows all)",
                msgs.len(),
                msgs.len() - ws
            );
        }
        msgs[ws..].iter().for_each(print_message);
    }
    Ok(ExitCode::SUCCESS)
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

fn print_message(m: &Message) {
    let id = m.id.map(|i| i.to_string()).unwrap_or_default();
    if m.is_summary() {
        let text = m.plain_text();
        println!("[{id}] summary: {}", text.strip_prefix(SUMMARY_PREFIX).unwrap_or(&text));
        return;
    }
    let who = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    match &m.content {
        Content::Text(t) => println!("[{id}] {who}: {t}"),
        Content::Blocks(blocks) => {
            for b in blocks {
                match b {
                    ContentBlock::Text { text } => println!("[{id}] {who}: {text}"),
                    ContentBlock::ToolUse { name, input, .. } => println!("[{id}] {who} → {name} {input}"),
                    ContentBlock::ToolResult { content, is_error, .. } => {
                        let tag = if *is_error { "error" } else { "result" };
                        println!("[{id}] {tag} ← {}", cicy::event::preview(content, 400));
                    }
                    ContentBlock::Thinking { thinking, .. } => println!("[{id}] {who} (thinking): {thinking}"),
                }
            }
        }
    }
}
