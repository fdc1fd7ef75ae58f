//! The texts an agent reads for its messages (docs/design.md §11 "Envelope", Choruz B1): the
//! `[choruz-incoming]` envelope, the `[choruz-batch]` prompt, the `[choruz-cron]` line, the
//! attachments suffix, and cicy's thread context before a thread follow-up.
//!
//! Owns the exact bytes. Pure: the caller reads the store (roster, tasks, thread) and passes
//! what it found; nothing here reads a table or a file.

use serde::Serialize;

use super::store::TaskStatus;

/// Longest name in envelope metadata, in characters (Choruz B1 roster names).
pub const NAME_MAX_CHARS: usize = 120;

/// Most `your_tasks` entries an envelope lists (Choruz B1: the first 20).
pub const YOUR_TASKS_MAX: usize = 20;

/// Most messages of a thread shown before a follow-up: the root and the latest earlier replies
/// (docs/design.md §11).
pub const THREAD_CONTEXT_MAX: usize = 20;

/// The line that introduces attachments, followed by one local path per line (Choruz B1).
pub const ATTACHMENTS_LINE: &str = "[attached files available locally — read them as needed]";

/// Where a message was posted: `group:<name>` or `direct-chat` in the envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place<'a> {
    /// A group conversation, by its name: the only handle an agent may address a send with.
    Group(&'a str),
    /// A direct conversation between two principals.
    Direct,
}

/// One roster entry: an active, visible agent member of the conversation. Serialized compact
/// with the key order `id,name,type[,host]` (docs/design.md §11; Choruz's docs order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RosterEntry {
    /// `w-<n>`.
    pub id: String,
    /// Display name (`agent_config.title`).
    pub name: String,
    /// `agent` (the roster never lists humans).
    #[serde(rename = "type")]
    pub kind: String,
    /// The machine the agent runs on, when it is not this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// One open task of the receiving agent: `{"task_key","title","status"}` (Choruz B1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskSummary {
    pub task_key: String,
    pub title: String,
    pub status: TaskStatus,
}

/// An earlier message of a thread, shown before a follow-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadItem<'a> {
    /// Display name of the sender.
    pub sender: &'a str,
    pub body: &'a str,
}

/// Everything one envelope shows.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    /// Display name of the sender (cleaned here).
    pub sender: &'a str,
    pub place: Place<'a>,
    /// The whole conversation id; the envelope shows its first 13 characters.
    pub conv_id: &'a str,
    /// The canonical thread root, only for a thread reply.
    pub thread: Option<&'a str>,
    /// `None` when the roster lookup failed: the envelope then says `roster:[]` (Choruz B1).
    pub roster: Option<&'a [RosterEntry]>,
    /// The receiver's open tasks in this conversation; empty (or a failed lookup) omits the
    /// field.
    pub your_tasks: &'a [TaskSummary],
    /// Passed verbatim: newlines and `|` included.
    pub body: &'a str,
    /// Local paths of the message's attached files, in order.
    pub attachments: &'a [String],
    /// For a thread follow-up: the root and the earlier replies, oldest first. More than
    /// [`THREAD_CONTEXT_MAX`] keep the root and the latest ones.
    pub earlier: &'a [ThreadItem<'a>],
}

/// A name in envelope metadata: control characters and `|` removed, then cut to
/// [`NAME_MAX_CHARS`] characters (Choruz does this to roster names and task titles; docs/design.md
/// §11 extends it to senders and groups so `" | "` always ends the metadata).
pub fn clean_name(s: &str) -> String {
    s.chars().filter(|c| !c.is_control() && *c != '|').take(NAME_MAX_CHARS).collect()
}

/// Sorts a roster as the envelope lists it: by lowercase (cleaned) name, then by id (Choruz B1).
pub fn sort_roster(roster: &mut [RosterEntry]) {
    roster.sort_by_cached_key(|r| (clean_name(&r.name).to_lowercase(), r.id.clone()));
}

/// The envelope of one message (Choruz B1, docs/design.md §11), one line up to the body:
/// `[choruz-incoming] from:@<sender> group:<name> conv:<id13>[ thread:<root>] roster:<json>[
/// your_tasks:<json>] | <body>`, or `direct-chat` in place of `group:<name>`; then, with
/// attachments, `\n` [`ATTACHMENTS_LINE`] and one path per line. The thread context is not
/// part of it: see [`prompt`].
pub fn envelope(m: &Incoming<'_>) -> String {
    let place = match m.place {
        Place::Group(name) => format!("group:{}", clean_name(name)),
        Place::Direct => "direct-chat".to_string(),
    };
    let conv: String = m.conv_id.chars().take(13).collect();
    let thread = m.thread.map(|t| format!(" thread:{}", clean_name(t))).unwrap_or_default();
    let tasks = your_tasks_json(m.your_tasks).map(|j| format!(" your_tasks:{j}")).unwrap_or_default();
    let mut out = format!(
        "[choruz-incoming] from:@{} {place} conv:{conv}{thread} roster:{}{tasks} | {}",
        clean_name(m.sender),
        roster_json(m.roster),
        m.body
    );
    if !m.attachments.is_empty() {
        out.push('\n');
        out.push_str(ATTACHMENTS_LINE);
        for p in m.attachments {
            out.push('\n');
            out.push_str(p);
        }
    }
    out
}

/// One message as the agent reads it: for a thread follow-up the thread context first (cicy's
/// form, below), a blank line, then the [`envelope`]; otherwise the envelope alone.
///
/// Thread context **[chosen]**: `[cicy-thread] thread:<root> earlier:<k> (the root and earlier
/// replies of this thread, oldest first; already delivered, for context only)` then one
/// `[j/k] from:@<sender> | <body>` line (or lines, for a body that spans them) per message.
pub fn prompt(m: &Incoming<'_>) -> String {
    let Some(root) = m.thread.filter(|_| !m.earlier.is_empty()) else {
        return envelope(m);
    };
    let shown: Vec<&ThreadItem<'_>> = match m.earlier {
        [first, rest @ ..] if m.earlier.len() > THREAD_CONTEXT_MAX => {
            std::iter::once(first).chain(&rest[rest.len() - (THREAD_CONTEXT_MAX - 1)..]).collect()
        }
        all => all.iter().collect(),
    };
    let k = shown.len();
    let mut out = format!(
        "[cicy-thread] thread:{} earlier:{k} (the root and earlier replies of this thread, oldest first; already delivered, for context only)",
        clean_name(root)
    );
    for (j, item) in shown.iter().enumerate() {
        out.push_str(&format!("\n[{}/{k}] from:@{} | {}", j + 1, clean_name(item.sender), item.body));
    }
    out.push_str("\n\n");
    out.push_str(&envelope(m));
    out
}

/// The prompt for an agent's pending messages, oldest first: one message → [`prompt`]
/// unchanged; N ≥ 2 → `[choruz-batch] You have N pending messages waiting for you.` and its
/// paragraph, then one `[i/N] <prompt>` block each, separated by blank lines (Choruz B1
/// `build_batched_prompt`). Empty → empty.
pub fn batch(msgs: &[Incoming<'_>]) -> String {
    if let [one] = msgs {
        return prompt(one);
    }
    if msgs.is_empty() {
        return String::new();
    }
    let n = msgs.len();
    let mut out = format!(
        "[choruz-batch] You have {n} pending messages waiting for you. Read all of them before you reply. A later \
         message supersedes an earlier one on the same topic. Never reopen work that was already marked complete. \
         Reply once per unresolved topic, merging the senders who asked about the same topic into one reply."
    );
    for (i, m) in msgs.iter().enumerate() {
        out.push_str(&format!("\n\n[{}/{n}] {}", i + 1, prompt(m)));
    }
    out
}

/// A cron job's firing (Choruz B1 [D]): `[choruz-cron] job:<name> schedule:<value> | <message>`,
/// name and schedule cleaned like names, the message verbatim.
pub fn cron(name: &str, schedule: &str, message: &str) -> String {
    format!("[choruz-cron] job:{} schedule:{} | {message}", clean_name(name), clean_name(schedule))
}

/// The roster as compact JSON, names and hosts cleaned, in [`sort_roster`] order; `[]` when the
/// lookup failed or serialization does (Choruz B1).
fn roster_json(roster: Option<&[RosterEntry]>) -> String {
    let Some(roster) = roster else {
        return "[]".to_string();
    };
    let mut clean: Vec<RosterEntry> = roster
        .iter()
        .map(|r| RosterEntry { id: r.id.clone(), name: clean_name(&r.name), kind: r.kind.clone(), host: r.host.as_deref().map(clean_name) })
        .collect();
    sort_roster(&mut clean);
    serde_json::to_string(&clean).unwrap_or_else(|_| "[]".to_string())
}

/// The first [`YOUR_TASKS_MAX`] tasks as compact JSON with cleaned titles; `None` for none (the
/// field is then omitted) or when serialization fails (Choruz omits it on a failed lookup).
fn your_tasks_json(tasks: &[TaskSummary]) -> Option<String> {
    if tasks.is_empty() {
        return None;
    }
    let clean: Vec<TaskSummary> = tasks
        .iter()
        .take(YOUR_TASKS_MAX)
        .map(|t| TaskSummary { task_key: clean_name(&t.task_key), title: clean_name(&t.title), status: t.status })
        .collect();
    serde_json::to_string(&clean).ok()
}

#[cfg(test)]
#[path = "envelope_tests.rs"]
mod tests;
