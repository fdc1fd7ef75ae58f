//! `cicy-agent group …` (docs/design.md §11 "CLI"): create a group of agents and people, post in it
//! as a person, read its messages a page at a time, list its tasks.
//!
//! Works on `cicy.db` and the agents' inbox files (`cicy::messages::groups`), so it needs no
//! running serve: serve's inbox watch wakes the agents a post reached.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;

use cicy::home::Home;
use cicy::messages::groups;

/// `group` actions.
#[derive(Debug, Subcommand)]
pub(super) enum GroupAction {
    /// Create a group; prints its conversation id.
    Create {
        name: String,
        /// Members: agent ids (w-<n>) and person names, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        members: Vec<String>,
        #[arg(long, default_value = "")]
        description: String,
        /// The person creating it (a member too).
        #[arg(long, default_value = "human")]
        from: String,
    },
    /// Post a message in a group as a person; every agent member gets it in its inbox.
    Post {
        name: String,
        text: String,
        #[arg(long, default_value = "human")]
        from: String,
        /// A message id of the group to answer in the thread of.
        #[arg(long)]
        thread: Option<String>,
    },
    /// A page of the group's messages, oldest first (`--before` the cursor a page printed).
    Messages {
        name: String,
        #[arg(long, default_value = "human")]
        from: String,
        #[arg(long)]
        before: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[arg(long)]
        json: bool,
    },
    /// The group's tasks.
    Tasks {
        name: String,
        #[arg(long, default_value = "human")]
        from: String,
        #[arg(long)]
        json: bool,
    },
}

/// Runs one `group` action.
pub(super) fn run(home: &Home, action: GroupAction, out: &mut impl Write) -> Result<ExitCode> {
    // A person runs these: `--from` names a person, never an agent.
    let from = match &action {
        GroupAction::Create { from, .. }
        | GroupAction::Post { from, .. }
        | GroupAction::Messages { from, .. }
        | GroupAction::Tasks { from, .. } => from,
    };
    groups::person(from)?;
    match action {
        GroupAction::Create { name, members, description, from } => {
            let conv = groups::create(home, &from, &name, &description, &members)?;
            writeln!(out, "{}", conv.id)?;
        }
        GroupAction::Post { name, text, from, thread } => {
            let posted = groups::post(home, &from, &name, &text, thread.as_deref())?;
            let to: Vec<&str> = posted.files.iter().map(|(agent, _)| agent.as_str()).collect();
            let to = if to.is_empty() { "no agent".to_string() } else { to.join(", ") };
            writeln!(out, "{} #{} (delivered to {to})", posted.message.id, posted.message.seq)?;
        }
        GroupAction::Messages { name, from, before, limit, json } => {
            let (_, page) = groups::page(home, &from, &name, before.as_deref(), limit)?;
            if json {
                writeln!(out, "{}", serde_json::to_string(&page)?)?;
                return Ok(ExitCode::SUCCESS);
            }
            if page.messages.is_empty() {
                writeln!(out, "No messages.")?;
            }
            for m in &page.messages {
                let thread = m.thread_root.as_deref().map(|r| format!(" (thread {r})")).unwrap_or_default();
                writeln!(out, "#{} {} {}{thread}: {}", m.seq, m.id, m.sender, m.content)?;
            }
            if let Some(c) = page.before {
                writeln!(out, "older: --before {c}")?;
            }
        }
        GroupAction::Tasks { name, from, json } => {
            let (_, tasks) = groups::tasks(home, &from, &name)?;
            if json {
                writeln!(out, "{}", serde_json::to_string(&tasks)?)?;
                return Ok(ExitCode::SUCCESS);
            }
            if tasks.is_empty() {
                writeln!(out, "No tasks.")?;
            }
            for t in &tasks {
                let who = t.assignee.as_deref().unwrap_or("unassigned");
                writeln!(out, "{} [{}] {} ({who})", t.task_key, t.status.as_str(), t.title)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
