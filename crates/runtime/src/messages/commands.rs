//! Running the commands of an agent's Maildir outbox (docs/design.md §11 "Commands", "Results";
//! Choruz B4, B7, B8): the handler [`crate::outbox::Outbox::drain`] calls for each command a
//! shell script queued through `$CICY_SEND`, in the context of the turn that drains it.
//!
//! It lives in `messages` rather than `outbox` because every command but `provision_agent` is
//! an operation on the message store (a post, a task, a group, a cron job), and `outbox` must
//! stay free of the store so the producer runs without opening `cicy.db`. The outbox reads
//! and validates a command; this module executes it.
//!
//! Owns what each command does and its reply texts; the claim a drain answers is the turn's
//! ([`WakeTurn`]). Must not touch the turn loop or serve: it is synchronous (serve runs it on
//! a blocking thread) and reports through its return value and the turn's notes.

use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value};

use super::route::{self, Post, RouteError};
use super::store::{self, MessageStore, NewTask, StoreError, TaskError, TaskErrorCode, TaskStatus, TaskUpdate};
use crate::agent::{self, CreateOptions};
use crate::home::Home;
use crate::outbox::command::{OutboxCommand, TaskRef, TaskTarget};
use crate::outbox::{share, Claimed, DrainStats, ErrorCode, Outbox, ResultEnvelope};
use crate::registry::{AgentRecord, Registry};
use crate::wake::deliver::{deliver, is_agent_id, Outgoing};
use crate::wake::state::{WakeNote, WakeTurn};
use crate::wake::tools::answer;

/// The person a `set_cron` outside any stored conversation belongs to: its job is kept in the
/// agent's direct conversation with `human:human` **[chosen]** (`cron_job.conv_id` is required;
/// Choruz takes the conversation of the turn and fails without one).
pub const CRON_OWNER: &str = "human:human";

/// What one drain did beyond the outbox's [`DrainStats`].
#[derive(Debug, Default)]
pub struct Drained {
    pub stats: DrainStats,
    /// A `set_cron` stored a job: the cron task must look at its next time again.
    pub cron_changed: bool,
    /// Agents `provision_agent` created (serve starts their actors).
    pub provisioned: Vec<AgentRecord>,
    /// The joined reply (`stats.reply`) was sent as the reply of the turn's claim; when false
    /// and the reply is not empty, the caller shows it (serve: a `system` event).
    pub replied: bool,
}

/// Drains `w`'s outbox once, running each command for `w.agent_id` (`stale_after`: see
/// [`crate::outbox::PROCESSING_STALE_AFTER`]). With a claim, the joined reply texts (error
/// texts, shared text files) are sent as its reply (Choruz B4: the reply of the turn).
pub fn drain(w: &WakeTurn, stale_after: Duration) -> Drained {
    let outbox = Outbox::of_workspace(&w.workspace);
    let mut fx = Effects::default();
    let stats = outbox.drain(stale_after, |c| run(w, &outbox, c, &mut fx));
    let mut replied = false;
    if !stats.reply.is_empty() {
        let claim = w.state().claim.clone();
        if let Some(c) = claim {
            match answer(w, &c, &stats.reply, false) {
                Ok(_) => replied = true,
                Err(e) => tracing::warn!(agent = %w.agent_id, error = %e, "outbox: cannot send the reply to the claimed conversation"),
            }
        }
    }
    Drained { stats, cron_changed: fx.cron_changed, provisioned: fx.provisioned, replied }
}

/// What the commands of one drain changed beyond their replies.
#[derive(Default)]
struct Effects {
    cron_changed: bool,
    provisioned: Vec<AgentRecord>,
}

/// Runs one command; its reply text, if it has one.
fn run(w: &WakeTurn, outbox: &Outbox, c: &Claimed, fx: &mut Effects) -> Option<String> {
    match &c.command {
        OutboxCommand::Send { content, group: Some(g), thread, broadcast, metadata, .. } => {
            group_send(w, g, content, thread.as_deref(), *broadcast, once(metadata.clone().unwrap_or_default(), c))
        }
        OutboxCommand::Send { content, group: None, to, .. } => direct_send(w, content, to.as_deref(), c),
        OutboxCommand::ShareFile { path, group } => share_file(w, path, group.as_deref(), c),
        OutboxCommand::TaskCreate { .. } | OutboxCommand::TaskUpdate { .. } | OutboxCommand::TaskTransfer { .. } => {
            task(w, outbox, c);
            None
        }
        OutboxCommand::CreateGroup { name, description, members } => {
            create_group(&w.home, &w.agent_id, name, description.as_deref(), members)
                .or_else(|e| retried_group(&w.home, &w.agent_id, name, c).ok_or(e))
                .err()
                .map(|e| format!("Failed to create group '{name}': {e}"))
        }
        OutboxCommand::SetCron { name, schedule, message } => match set_cron(w, name, schedule, message) {
            Ok(()) => {
                fx.cron_changed = true;
                None
            }
            Err(e) => Some(format!("Failed to set cron '{name}': {e}")),
        },
        OutboxCommand::ProvisionAgent { name, instructions, model } => Some(match provisioned_by(&w.home, name, c) {
            // The retry of a killed drain: its first run created the agent, which serve's
            // restart started with the others.
            Some(_) => format!("Agent '{name}' created successfully."),
            None => match provision(&w.home, &w.agent_id, name, instructions, model.clone()) {
                Ok(record) => {
                    fx.provisioned.push(record);
                    format!("Agent '{name}' created successfully.")
                }
                Err(e) => format!("Failed to create agent '{name}': {e}"),
            },
        }),
        // The drain answers unknown types itself.
        OutboxCommand::Unknown(_) => None,
    }
}

/// `metadata` with the command's first-claim id ([`route::META_OUTBOX_CMD`]): the post and the
/// files it makes are written once for it (`route::post`, `crate::wake::deliver`).
fn once(mut metadata: Map<String, Value>, c: &Claimed) -> Map<String, Value> {
    metadata.insert(route::META_OUTBOX_CMD.into(), Value::from(c.id.as_str()));
    metadata
}

/// Whether `c` is a retry: a claim of a `.processing` file a killed consumer left.
fn is_retry(c: &Claimed) -> bool {
    c.name.ends_with(".processing")
}

/// When `c` was first claimed, in the registry's and the store's `created_at` format (to the
/// second, rounded down): what a retry's first run created is no older.
fn first_claimed_at(c: &Claimed) -> Option<String> {
    let millis = c.id.parse::<ulid::Ulid>().ok()?.timestamp_ms();
    let at = time::OffsetDateTime::from_unix_timestamp(i64::try_from(millis / 1000).ok()?).ok()?;
    at.format(&time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z")).ok()
}

/// On a retry, the agent titled `name` that the first run of `c` created: one created since
/// `c` was first claimed (the registry keeps no command id, so the title and the time are the key).
fn provisioned_by(home: &Home, name: &str, c: &Claimed) -> Option<AgentRecord> {
    if !is_retry(c) {
        return None;
    }
    let since = first_claimed_at(c)?;
    let agents = Registry::open(&home.db_path()).ok()?.list().ok()?;
    agents.into_iter().find(|a| a.title == name && a.created_at >= since)
}

/// On a retry whose `create_group` failed, `Some(())` when the group `name` is one `requester`
/// created since `c` was first claimed: the first run made it.
fn retried_group(home: &Home, requester: &str, name: &str, c: &Claimed) -> Option<()> {
    if !is_retry(c) {
        return None;
    }
    let since = first_claimed_at(c)?;
    let conv = MessageStore::open(home).ok()?.resolve_group(requester, name).ok()?;
    (conv.created_by == requester && conv.created_at >= since).then_some(())
}

/// The hops of what the turn answers (0 outside a claim).
fn claim_hops(w: &WakeTurn) -> u32 {
    w.state().claim.as_ref().map_or(0, |c| c.hops)
}

/// `send` with a group (Choruz B7): posted in the group as the agent, one hop more than what
/// the turn answers; every failure is `Failed to send to group '<g>': <reason>`.
fn group_send(
    w: &WakeTurn,
    group: &str,
    content: &str,
    thread: Option<&str>,
    broadcast: bool,
    mut metadata: Map<String, Value>,
) -> Option<String> {
    if let Some(t) = thread {
        metadata.insert("reply_to_id".into(), Value::from(t));
        metadata.insert("thread".into(), Value::Bool(true));
    }
    metadata.insert("broadcast".into(), Value::Bool(broadcast));
    let posted = (|| -> Result<route::Posted, RouteError> {
        let mut store = MessageStore::open(&w.home)?;
        let conv = store.resolve_group(&w.agent_id, group)?;
        let post = Post {
            conv_id: &conv.id,
            sender: &w.agent_id,
            content,
            thread,
            hops: claim_hops(w).saturating_add(1),
            wake_agents: true,
            metadata,
        };
        route::post(&w.home, &mut store, &post)
    })();
    match posted {
        Ok(p) => {
            w.state().sent += 1;
            w.note(WakeNote::MessageOut { from: w.agent_id.clone(), to: group.to_string(), text: content.to_string(), file: p.message.id });
            None
        }
        Err(e) => Some(format!("Failed to send to group '{group}': {e}")),
    }
}

/// `send` without a group: the reply of the claimed conversation (as the `reply` tool), a
/// message to `to` (cicy [chosen]: as the `send` tool), or, with neither, the drain's reply.
fn direct_send(w: &WakeTurn, content: &str, to: Option<&str>, cmd: &Claimed) -> Option<String> {
    let claim = w.state().claim.clone();
    let to = to.map(str::trim);
    match (claim, to) {
        (Some(c), None) => answer(w, &c, content, false).err().map(|e| format!("Failed to send the reply: {e}")),
        (Some(c), Some(to)) if to == c.from => answer(w, &c, content, false).err().map(|e| format!("Failed to send to '{to}': {e}")),
        (_, Some(to)) => {
            let meta = [(route::META_OUTBOX_CMD.to_string(), cmd.id.clone())].into();
            let msg = Outgoing { to: to.to_string(), text: content.to_string(), question: false, meta };
            match deliver(&w.home, &w.workspace, &w.agent_id, &msg) {
                Ok(file) => {
                    w.state().sent += 1;
                    w.note(WakeNote::MessageOut {
                        from: w.agent_id.clone(),
                        to: to.to_string(),
                        text: content.to_string(),
                        file: file.name,
                    });
                    None
                }
                Err(e) => Some(format!("Failed to send to '{to}': {e}")),
            }
        }
        (None, None) => Some(content.to_string()),
    }
}

/// `share_file` (Choruz B7): a text file is the reply `**<name>**` + fence; a binary one is
/// posted in `group` (or the claimed stored conversation) as `📎 <name> (<size> bytes)` and
/// copied to each other agent member's `<ws>/.cicy/inbox-files/<msg_id>/<name>` **[chosen]**.
/// A refused path, a missing file or a failed copy is ignored with a warning (B9).
fn share_file(w: &WakeTurn, rel: &str, group: Option<&str>, c: &Claimed) -> Option<String> {
    let real = match share::resolve(&w.workspace, rel) {
        Ok(real) => real,
        Err(e) => {
            tracing::warn!(agent = %w.agent_id, error = %e, "outbox: share_file ignored");
            return None;
        }
    };
    let name = real.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if !share::is_binary(&real) {
        return match std::fs::read_to_string(&real) {
            Ok(text) => Some(share::text_reply(&name, &text)),
            Err(e) => {
                tracing::warn!(agent = %w.agent_id, file = %real.display(), error = %e, "outbox: share_file cannot read the file");
                None
            }
        };
    }
    let size = std::fs::metadata(&real).map(|m| m.len()).unwrap_or(0);
    let text = share::binary_reply(&name, size);
    let stored_claim = w.state().claim.as_ref().filter(|c| !c.conv.starts_with("direct:")).map(|c| c.conv.clone());
    let shared = (|| -> Result<Option<(String, Vec<String>)>, RouteError> {
        let mut store = MessageStore::open(&w.home)?;
        let conv = match (group, stored_claim) {
            (Some(g), _) => store.resolve_group(&w.agent_id, g)?.id,
            (None, Some(conv)) => conv,
            (None, None) => return Ok(None),
        };
        let mut metadata = once(Map::new(), c);
        metadata.insert("filename".into(), Value::from(name.as_str()));
        metadata.insert("size_bytes".into(), Value::from(size));
        let post = Post {
            conv_id: &conv,
            sender: &w.agent_id,
            content: &text,
            thread: None,
            hops: claim_hops(w).saturating_add(1),
            wake_agents: true,
            metadata,
        };
        let posted = route::post(&w.home, &mut store, &post)?;
        let agents = store.members(&conv)?.into_iter().filter(|m| m.active && is_agent_id(&m.principal) && m.principal != w.agent_id);
        Ok(Some((posted.message.id, agents.map(|m| m.principal).collect())))
    })();
    match shared {
        Ok(Some((msg_id, agents))) => {
            copy_to_recipients(&w.home, &real, &name, &msg_id, &agents);
            w.state().sent += 1;
            None
        }
        // Nowhere to post: the drain's reply says what was shared.
        Ok(None) => Some(text),
        Err(e) => {
            tracing::warn!(agent = %w.agent_id, error = %e, "outbox: share_file ignored");
            None
        }
    }
}

/// Copies `real` to `<ws>/.cicy/inbox-files/<msg_id>/<name>` of each agent in `agents`.
fn copy_to_recipients(home: &Home, real: &Path, name: &str, msg_id: &str, agents: &[String]) {
    let Ok(reg) = Registry::open(&home.db_path()) else { return };
    for a in agents {
        let Ok(rec) = reg.get(a) else { continue };
        let dir = rec.workspace.join(".cicy").join("inbox-files").join(msg_id);
        if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::copy(real, dir.join(name))) {
            tracing::warn!(agent = %a, dir = %dir.display(), error = %e, "outbox: cannot copy a shared file");
        }
    }
}

/// The task commands (Choruz B7): run on the store, their result envelope written to
/// `results/` whatever the outcome (B8).
fn task(w: &WakeTurn, outbox: &Outbox, c: &Claimed) {
    let command = &c.command;
    let (kind, task_ref, idempotency_key) = match command {
        OutboxCommand::TaskCreate { task_key, idempotency_key, .. } => {
            ("task_create", TaskRef { task_id: None, task_key: task_key.clone() }, idempotency_key.clone())
        }
        OutboxCommand::TaskUpdate { task, .. } => ("task_update", task.clone(), None),
        OutboxCommand::TaskTransfer { task, .. } => ("task_transfer", task.clone(), None),
        _ => return,
    };
    let envelope = match run_task(w, command) {
        Ok(t) => {
            ResultEnvelope::ok(kind, Some(t.task_key), Some(t.id), Some(t.idempotency_key).filter(|k| !k.is_empty()).or(idempotency_key))
        }
        Err(e) => {
            let mut envelope = ResultEnvelope::ok(kind, task_ref.task_key, task_ref.task_id, idempotency_key);
            envelope.fail(result_code(e.code), &e.message);
            envelope
        }
    };
    if let Err(e) = outbox.write_result(&c.id, &envelope) {
        tracing::warn!(agent = %w.agent_id, error = %e, "outbox: cannot write the result envelope");
    }
}

fn run_task(w: &WakeTurn, command: &OutboxCommand) -> Result<store::Task, TaskError> {
    let mut store = MessageStore::open(&w.home).map_err(TaskError::from)?;
    let target = match command {
        OutboxCommand::TaskCreate { target, .. }
        | OutboxCommand::TaskUpdate { target, .. }
        | OutboxCommand::TaskTransfer { target, .. } => target,
        _ => return Err(TaskError::new(TaskErrorCode::UnsupportedCommand, "not a task command")),
    };
    let conv = match target {
        TaskTarget::Conversation(id) => id.clone(),
        TaskTarget::Group(g) => store.resolve_group(&w.agent_id, g)?.id,
    };
    let status = |s: &Option<String>| s.as_deref().map(TaskStatus::parse).transpose();
    let requester = w.agent_id.as_str();
    match command {
        OutboxCommand::TaskCreate { title, idempotency_key, task_key, status: s, context_label, assignee, .. } => {
            let t = NewTask {
                conv_id: &conv,
                requester,
                title,
                idempotency_key: idempotency_key.as_deref().unwrap_or(""),
                task_key: task_key.as_deref(),
                status: status(s)?,
                context_label: context_label.as_deref(),
                assignee: assignee.as_deref(),
            };
            Ok(store.task_create(&t)?.task)
        }
        OutboxCommand::TaskUpdate { task, status: s, blocked_reason, context_label, .. } => {
            let u = update(&conv, requester, task, status(s)?, blocked_reason, context_label);
            store.task_update(&u)
        }
        OutboxCommand::TaskTransfer { task, assignee, status: s, blocked_reason, context_label, .. } => {
            let u = update(&conv, requester, task, status(s)?, blocked_reason, context_label);
            store.task_transfer(&u, Some(assignee))
        }
        _ => Err(TaskError::new(TaskErrorCode::UnsupportedCommand, "not a task command")),
    }
}

fn update<'a>(
    conv: &'a str,
    requester: &'a str,
    task: &'a TaskRef,
    status: Option<TaskStatus>,
    blocked: &'a Option<String>,
    label: &'a Option<String>,
) -> TaskUpdate<'a> {
    TaskUpdate {
        conv_id: conv,
        requester,
        task: store::TaskRef { task_id: task.task_id.as_deref(), task_key: task.task_key.as_deref() },
        status,
        blocked_reason: blocked.as_deref(),
        context_label: label.as_deref(),
    }
}

/// The B8 code of a store refusal.
fn result_code(code: TaskErrorCode) -> ErrorCode {
    match code {
        TaskErrorCode::MissingTarget => ErrorCode::MissingTarget,
        TaskErrorCode::GroupNotFound => ErrorCode::GroupNotFound,
        TaskErrorCode::NotFound => ErrorCode::NotFound,
        TaskErrorCode::Forbidden => ErrorCode::Forbidden,
        TaskErrorCode::MissingTitle => ErrorCode::MissingTitle,
        TaskErrorCode::ValidationFailed => ErrorCode::ValidationFailed,
        TaskErrorCode::InvalidAssignee => ErrorCode::InvalidAssignee,
        TaskErrorCode::MissingAssignee => ErrorCode::MissingAssignee,
        TaskErrorCode::MissingTask => ErrorCode::MissingTask,
        TaskErrorCode::TaskNotFound => ErrorCode::TaskNotFound,
        TaskErrorCode::IdempotencyConflict => ErrorCode::IdempotencyConflict,
        TaskErrorCode::EventStoreUnavailable => ErrorCode::EventStoreUnavailable,
        TaskErrorCode::UnsupportedCommand => ErrorCode::UnsupportedCommand,
    }
}

/// Why a `create_group` or `provision_agent` failed; the text follows the command's name.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Registry(#[from] crate::registry::RegistryError),
    #[error(transparent)]
    Agent(#[from] Box<crate::agent::AgentError>),
    /// A `create_group` member that is no agent's title or id, nor `human:<name>`.
    #[error("member '{member}' is not an agent's name or id")]
    UnknownMember { member: String },
    /// The new agent's AGENTS.md could not take the instructions.
    #[error("{path}: {source}")]
    Io { path: std::path::PathBuf, source: std::io::Error },
}

/// `create_group` (Choruz B7): each member is an agent's title, else an agent id, else a
/// `human:<name>` principal; the requester is added by the store.
fn create_group(home: &Home, requester: &str, name: &str, description: Option<&str>, members: &[String]) -> Result<(), CommandError> {
    let agents = Registry::open(&home.db_path())?.list()?;
    let mut principals = Vec::with_capacity(members.len());
    for m in members {
        let m = m.trim().trim_start_matches('@');
        let principal = match agents.iter().find(|a| a.title == m).or_else(|| agents.iter().find(|a| a.id == m)) {
            Some(a) => a.id.clone(),
            None if m.starts_with("human:") => m.to_string(),
            None => return Err(CommandError::UnknownMember { member: m.to_string() }),
        };
        principals.push(principal);
    }
    let refs: Vec<&str> = principals.iter().map(String::as_str).collect();
    MessageStore::open(home)?.create_group(requester, name, description.unwrap_or(""), &refs)?;
    Ok(())
}

/// `set_cron` (Choruz B7): the job belongs to the claimed stored conversation, else to the
/// agent's direct conversation with [`CRON_OWNER`].
fn set_cron(w: &WakeTurn, name: &str, schedule: &str, message: &str) -> Result<(), StoreError> {
    let mut store = MessageStore::open(&w.home)?;
    let claimed = w.state().claim.as_ref().filter(|c| !c.conv.starts_with("direct:")).map(|c| c.conv.clone());
    let conv = match claimed {
        Some(conv) => conv,
        None => store.direct(&w.agent_id, CRON_OWNER)?.id,
    };
    store.cron_set(&w.agent_id, &conv, name, schedule, message, chrono::Utc::now().timestamp())?;
    Ok(())
}

/// `provision_agent` (docs/design.md §3 create **[chosen]** for Choruz's web route): a worker of
/// the requester's role template titled `name`, `instructions` appended to its AGENTS.md.
fn provision(home: &Home, requester: &str, name: &str, instructions: &str, model: Option<String>) -> Result<AgentRecord, CommandError> {
    let template = Registry::open(&home.db_path())?.get(requester)?.role_template;
    let opts = CreateOptions {
        title: name.to_string(),
        role_template: template,
        role: "worker".into(),
        model,
        master: None,
        workspace: None,
        api_style: None,
    };
    let created = agent::create(home, opts).map_err(Box::new)?;
    if !instructions.trim().is_empty() {
        let path = created.record.workspace.join("AGENTS.md");
        let io = |source| CommandError::Io { path: path.clone(), source };
        let mut text = std::fs::read_to_string(&path)
            .or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(String::new()) } else { Err(e) })
            .map_err(io)?;
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("\n{}\n", instructions.trim_end()));
        std::fs::write(&path, text).map_err(io)?;
    }
    Ok(created.record)
}

#[cfg(test)]
#[path = "commands_tests.rs"]
mod tests;
