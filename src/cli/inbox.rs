//! `cicy-agent send <id> …` and `cicy-agent inbox <id> …` (docs/design.md §10 "CLI"): drop one
//! message file into an agent's inbox, and show its pending messages and dialog.
//!
//! Works on the files alone (`cicy::wake::inbox`), so it needs no running serve: serve's watch
//! wakes the agent. `inbox` never claims and never moves a file.

use std::io::{Read, Write};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;

use cicy::home::Home;
use cicy::wake::inbox::{self, DialogFilter, Folder, Mailbox, MessageFile, NewMessage};

/// `send` arguments.
#[derive(Debug, Args)]
pub(super) struct SendArgs {
    /// The agent to write to.
    id: String,
    /// The message body.
    #[arg(required_unless_present = "stdin", conflicts_with = "stdin")]
    text: Option<String>,
    /// Sender name in the front matter.
    #[arg(long, default_value = "human")]
    from: String,
    /// Subject (default: the first line of the body, cut to 60 characters).
    #[arg(long)]
    subject: Option<String>,
    /// Mark the message as a question (`question: true`).
    #[arg(long)]
    question: bool,
    /// Thread this message belongs to (meta `thread`).
    #[arg(long)]
    thread: Option<String>,
    /// Read the body from stdin, exactly (a trailing newline is kept).
    #[arg(long)]
    stdin: bool,
}

/// Which dialog messages `inbox` shows (mutually exclusive; default `--last 20`).
#[derive(Debug, Args)]
#[group(multiple = false)]
pub(super) struct DialogArgs {
    /// The last N dialog messages.
    #[arg(long, value_name = "N")]
    last: Option<usize>,
    /// Every dialog message.
    #[arg(long)]
    all: bool,
    /// Dialog messages stamped at or after this local time (YYYY-MM-DD[THH:MM[:SS]]).
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
}

impl DialogArgs {
    fn filter(self) -> DialogFilter {
        match (self.last, self.all, self.since) {
            (_, true, _) => DialogFilter::All,
            (_, _, Some(since)) => DialogFilter::Since(since),
            (Some(n), _, _) => DialogFilter::Last(n),
            (None, false, None) => DialogFilter::default(),
        }
    }
}

/// `cicy-agent send`: prints `Sent to <id>: <file name>`.
pub(super) fn send(home: &Home, args: SendArgs) -> Result<ExitCode> {
    if args.from.trim() == cicy::wake::deliver::SERVE_SENDER {
        anyhow::bail!("`--from cicy` is the runtime's own name (its notices are never answered); choose another sender");
    }
    let agent = super::open_registry(home)?.get(&args.id)?;
    // Writing would create the folders: a moved or deleted workspace must not be recreated empty.
    if !agent.workspace.is_dir() {
        anyhow::bail!("the workspace of {} ({}) does not exist", agent.id, agent.workspace.display());
    }
    let body = match args.text {
        Some(text) => text,
        None => {
            let mut bytes = Vec::new();
            std::io::stdin().lock().read_to_end(&mut bytes).context("reading stdin")?;
            String::from_utf8(bytes).context("the message on stdin is not UTF-8")?
        }
    };
    let msg = NewMessage {
        from: args.from,
        subject: args.subject,
        body,
        question: args.question,
        meta: args.thread.map(|t| ("thread".to_string(), t)).into_iter().collect(),
    };
    let written = Mailbox::of_workspace(&agent.workspace).write(Folder::Inbox, &msg)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "Sent to {}: {}", agent.id, written.name)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// One dialog message in `--json`: its box, then the message's fields.
#[derive(Serialize)]
struct DialogEntry {
    #[serde(rename = "box")]
    folder: Folder,
    #[serde(flatten)]
    message: MessageFile,
}

/// `cicy-agent inbox`: the pending messages (reference A6 receive format), then the dialog.
pub(super) fn show(home: &Home, id: &str, dialog: DialogArgs, json: bool) -> Result<ExitCode> {
    let agent = super::open_registry(home)?.get(id)?;
    let mb = Mailbox::of_workspace(&agent.workspace);
    let filter = dialog.filter();
    let (pending, unparsed) = mb.pending()?;
    for u in &unparsed {
        eprintln!("warning: {} cannot be read: {} (left in place)", mb.inbox_dir().join(&u.name).display(), u.error);
    }
    let mut out = std::io::stdout().lock();
    if json {
        let dialog: Vec<DialogEntry> =
            inbox::dialog_messages(&mb, &filter)?.into_iter().map(|(folder, message)| DialogEntry { folder, message }).collect();
        let doc = serde_json::json!({"pending": pending, "dialog": dialog});
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        if pending.is_empty() {
            write!(out, "No pending messages.\n\n")?;
        } else {
            write!(out, "Pending ({}):\n{}", pending.len(), inbox::format_receive(&pending))?;
        }
        write!(out, "Dialog:\n{}", inbox::dialog(&mb, &filter, &[])?)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
