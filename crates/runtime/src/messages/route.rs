//! Posting into a conversation and handing each agent member its copy (docs/design.md §11 over the
//! §10 inbox): a message is a row of the store (its `seq`, thread root and deliveries) and, for
//! every agent member but the sender, a message file in that agent's inbox, which is what
//! wakes it in serve. Also the prompt an agent reads for the files a wake claimed: the Choruz
//! envelope with the conversation's roster, the agent's open tasks and the thread so far.
//!
//! Owns the front matter that ties a file to its row (`conv`, `message_id`, `group`, `thread`,
//! `hops`), the hop limit, and re-delivery after a crash between a post and its files. Must not
//! touch claims, obligations or the wake turn (`crate::wake`).

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::envelope::{self, Incoming, Place, RosterEntry, TaskSummary, ThreadItem};
use super::store::{ConvKind, Conversation, DeliveryState, Message, MessageStore, NewMessage, StoreError};
use crate::home::Home;
use crate::registry::{Registry, RegistryError};
use crate::wake::inbox::{self, Folder, InboxError, Mailbox, MessageFile};

/// Front-matter key: the conversation id of the store.
pub const META_CONV: &str = "conv";
/// Front-matter key: the message's id in the store.
pub const META_MESSAGE: &str = "message_id";
/// Front-matter key: the group's name (absent in a direct conversation).
pub const META_GROUP: &str = "group";
/// Front-matter key: the thread root, for a thread reply.
pub const META_THREAD: &str = "thread";
/// Front-matter key and metadata field: the first-claim ULID of the outbox command that sent
/// the message (`crate::outbox::Claimed::id`); the message and its files are written once per key.
pub const META_OUTBOX_CMD: &str = "outbox_cmd";
/// Front-matter key and metadata field: how many agent answers led to this message.
pub const META_HOPS: &str = "hops";

/// A message that took more than this many agent-to-agent hops is stored but delivered to no
/// agent (docs/design.md §11: "> 8 hops not delivered"), so two agents that answer each other's
/// answers stop.
pub const MAX_HOPS: u32 = 8;

/// Errors of a post or a prompt: the store's, the registry's (an agent's workspace) or a file's.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Inbox(#[from] InboxError),
}

/// What to post.
#[derive(Debug, Clone)]
pub struct Post<'a> {
    pub conv_id: &'a str,
    /// An active member: `w-<n>` or `human:<name>`.
    pub sender: &'a str,
    pub content: &'a str,
    /// A message of the conversation to answer in the thread of.
    pub thread: Option<&'a str>,
    /// 0 for a person's message; an agent's answer carries the hops of what it answers + 1.
    pub hops: u32,
    /// `false`: a notice for the people of the conversation; no agent is woken by it.
    pub wake_agents: bool,
    /// More metadata: the keys of [`CARRIED`] also go into the inbox files' front matter.
    pub metadata: Map<String, Value>,
}

/// Metadata keys a message's inbox files carry in their front matter: the `msg` call it
/// asks (`crate::messages::coordinate`), the call a 🔔 message answers.
pub const CARRIED: &[&str] = &["msg_call", "callback_of"];

/// A posted message and the inbox files that carry it: `(agent, file name)`.
#[derive(Debug, Clone)]
pub struct Posted {
    pub message: Message,
    pub files: Vec<(String, String)>,
}

/// Posts `p` and writes its inbox files. A message past [`MAX_HOPS`] is stored without
/// deliveries. The row is committed before any file is written; [`redeliver`] writes the files
/// a crash left unwritten.
///
/// Errors: the store's (not a member, unknown thread: Choruz's texts), the registry's, a file's.
pub fn post(home: &Home, store: &mut MessageStore, p: &Post<'_>) -> Result<Posted, RouteError> {
    if p.content.trim().is_empty() {
        return Err(RouteError::Inbox(InboxError::EmptyBody));
    }
    let mut metadata = p.metadata.clone();
    metadata.insert(META_HOPS.to_string(), Value::from(p.hops));
    let new = NewMessage {
        conv_id: p.conv_id,
        sender: p.sender,
        content: p.content,
        content_type: None,
        metadata,
        thread: p.thread,
        deliver: p.wake_agents && p.hops <= MAX_HOPS,
    };
    let reg = Registry::open(&home.db_path())?;
    let message = match once_id(&p.metadata) {
        None => store.post(&new)?,
        Some(id) => match store.post_once(&id, &new)? {
            (message, true) => message,
            // A retried outbox command: its first run posted the message and was killed
            // before or while writing the files; only the missing ones are written.
            (message, false) => {
                for d in store.deliveries(&message.id)? {
                    if d.state == DeliveryState::Pending && d.file.is_none() {
                        redeliver_one(&reg, store, &message.id, &d.agent_id)?;
                    }
                }
                let files = store.deliveries(&message.id)?.into_iter().filter_map(|d| Some((d.agent_id, d.file?))).collect();
                return Ok(Posted { message, files });
            }
        },
    };
    let conv = store.conversation(&message.conv_id)?;
    let mut files = Vec::new();
    for d in store.deliveries(&message.id)? {
        if d.state != DeliveryState::Pending || d.file.is_some() {
            continue;
        }
        // The message is stored: one member's unwritable inbox must not fail the post for the
        // others. Its delivery stays pending without a file, for `redeliver`.
        match hand_out(&reg, store, &conv, &message, &d.agent_id) {
            Ok(Some(name)) => files.push((d.agent_id, name)),
            Ok(None) => {}
            Err(e) => {
                tracing::error!(agent = %d.agent_id, message = %message.id, error = %e, "cannot write the inbox file; serve writes it later")
            }
        }
    }
    Ok(Posted { message, files })
}

/// Writes the inbox files of pending deliveries that have none (a crash after a post's commit,
/// an inbox that could not be written), unless the agent's inbox already holds the message
/// (the crash came after the file). Returns how many were written; one delivery's failure is
/// logged and the others go on. Serve runs it at start, before the first scan of the inboxes,
/// and every 30 s.
///
/// Errors: the store's and the registry's (opening them, listing the deliveries).
pub fn redeliver(home: &Home) -> Result<usize, RouteError> {
    let mut store = MessageStore::open(home)?;
    let reg = Registry::open(&home.db_path())?;
    let mut written = 0;
    for d in store.unfiled()? {
        match redeliver_one(&reg, &mut store, &d.message_id, &d.agent_id) {
            Ok(true) => written += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::error!(agent = %d.agent_id, message = %d.message_id, error = %e, "cannot write the inbox file of a posted message")
            }
        }
    }
    Ok(written)
}

/// The message id an outbox command's post gets: its first-claim ULID ([`META_OUTBOX_CMD`] in
/// the metadata) as a UUID, so the retry of a killed drain finds the row its first run stored.
fn once_id(metadata: &Map<String, Value>) -> Option<String> {
    let key: ulid::Ulid = metadata.get(META_OUTBOX_CMD)?.as_str()?.parse().ok()?;
    Some(uuid::Uuid::from_u128(u128::from(key)).to_string())
}

fn redeliver_one(reg: &Registry, store: &mut MessageStore, message_id: &str, agent: &str) -> Result<bool, RouteError> {
    let message = store.message(message_id)?;
    let Ok(rec) = reg.get(agent) else { return Ok(false) };
    if let Some(name) = already_filed(&Mailbox::of_workspace(&rec.workspace), &message.id)? {
        store.set_delivery_file(&message.id, agent, &name)?;
        return Ok(false);
    }
    let conv = store.conversation(&message.conv_id)?;
    Ok(hand_out(reg, store, &conv, &message, agent)?.is_some())
}

/// The inbox file of `message` for `agent` (none for an agent no longer in the registry).
fn hand_out(
    reg: &Registry,
    store: &mut MessageStore,
    conv: &Conversation,
    message: &Message,
    agent: &str,
) -> Result<Option<String>, RouteError> {
    let rec = match reg.get(agent) {
        Ok(rec) => rec,
        Err(RegistryError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut meta = BTreeMap::new();
    meta.insert(META_CONV.to_string(), conv.id.clone());
    meta.insert(META_MESSAGE.to_string(), message.id.clone());
    meta.insert(META_HOPS.to_string(), hops_of(message).to_string());
    if conv.kind == ConvKind::Group {
        meta.insert(META_GROUP.to_string(), conv.name.clone());
    }
    if let Some(root) = &message.thread_root {
        meta.insert(META_THREAD.to_string(), root.clone());
    }
    for key in CARRIED {
        match message.metadata.get(*key) {
            Some(Value::String(v)) => meta.insert((*key).to_string(), v.clone()),
            Some(Value::Number(n)) => meta.insert((*key).to_string(), n.to_string()),
            _ => None,
        };
    }
    let from = message.sender.strip_prefix("human:").unwrap_or(&message.sender).to_string();
    let file = inbox::NewMessage { from, subject: None, body: message.content.clone(), question: false, meta };
    let written = Mailbox::of_workspace(&rec.workspace).write(Folder::Inbox, &file)?;
    store.set_delivery_file(&message.id, agent, &written.name)?;
    Ok(Some(written.name))
}

fn already_filed(mb: &Mailbox, message_id: &str) -> Result<Option<String>, RouteError> {
    let (pending, _) = mb.pending()?;
    Ok(pending.into_iter().find(|m| m.meta.get(META_MESSAGE).map(String::as_str) == Some(message_id)).map(|m| m.name))
}

/// The hops a stored message carries (0 when its metadata has none).
pub fn hops_of(message: &Message) -> u32 {
    message.metadata.get(META_HOPS).and_then(Value::as_u64).map_or(0, |h| u32::try_from(h).unwrap_or(u32::MAX))
}

/// The hops of a message file (0 when its front matter has none or a bad value).
pub fn file_hops(m: &MessageFile) -> u32 {
    meta_hops(&m.meta)
}

/// The hops a front matter (or a reply's meta) carries: 0 when none or a bad value.
pub fn meta_hops(meta: &BTreeMap<String, String>) -> u32 {
    meta.get(META_HOPS).and_then(|h| h.parse().ok()).unwrap_or(0)
}

/// What one envelope shows, owned, before it is borrowed as an [`Incoming`].
struct Parts {
    sender: String,
    group: Option<String>,
    conv_id: String,
    thread: Option<String>,
    roster: Option<Vec<RosterEntry>>,
    tasks: Vec<TaskSummary>,
    body: String,
    earlier: Vec<(String, String)>,
    attachments: Vec<String>,
}

/// The prompt `agent` reads for the files of one claim, oldest first (Choruz B1: one envelope,
/// or the `[choruz-batch]` of N). A file whose `message_id` is in the store shows the
/// conversation's roster, the agent's open tasks there and, for a thread reply, the thread so
/// far; any other file (dropped by hand, `cicy-agent send`) shows what its front matter says,
/// with `roster:[]`. A store that cannot be opened degrades every file to that form.
pub fn prompt_for(home: &Home, agent: &str, files: &[MessageFile]) -> String {
    let store = MessageStore::open(home).ok();
    let workspace = Registry::open(&home.db_path()).and_then(|r| r.get(agent)).ok().map(|r| r.workspace);
    let claimed: Vec<&str> = files.iter().filter_map(|f| f.meta.get(META_MESSAGE).map(String::as_str)).collect();
    let parts: Vec<Parts> = files
        .iter()
        .map(|f| {
            let mut p = store.as_ref().and_then(|s| stored_parts(s, agent, f, &claimed)).unwrap_or_else(|| file_parts(f));
            if let (Some(ws), Some(id)) = (&workspace, f.meta.get(META_MESSAGE)) {
                p.attachments = attachments(ws, id);
            }
            p
        })
        .collect();
    let earlier: Vec<Vec<ThreadItem<'_>>> =
        parts.iter().map(|p| p.earlier.iter().map(|(sender, body)| ThreadItem { sender, body }).collect()).collect();
    let incoming: Vec<Incoming<'_>> = parts
        .iter()
        .zip(&earlier)
        .map(|(p, earlier)| Incoming {
            sender: &p.sender,
            place: p.group.as_deref().map_or(Place::Direct, Place::Group),
            conv_id: &p.conv_id,
            thread: p.thread.as_deref(),
            roster: p.roster.as_deref(),
            your_tasks: &p.tasks,
            body: &p.body,
            attachments: &p.attachments,
            earlier,
        })
        .collect();
    envelope::batch(&incoming)
}

fn stored_parts(store: &MessageStore, agent: &str, f: &MessageFile, claimed: &[&str]) -> Option<Parts> {
    let m = store.message(f.meta.get(META_MESSAGE)?).ok()?;
    let conv = store.conversation(&m.conv_id).ok()?;
    let name = |p: &str| store.display_name(p).unwrap_or_else(|_| p.to_string());
    let earlier = match &m.thread_root {
        Some(root) => store
            .thread(root, Some(m.seq))
            .unwrap_or_default()
            .into_iter()
            .filter(|e| !claimed.contains(&e.id.as_str()))
            .map(|e| (name(&e.sender), e.content))
            .collect(),
        None => Vec::new(),
    };
    Some(Parts {
        sender: name(&m.sender),
        group: (conv.kind == ConvKind::Group).then(|| conv.name.clone()),
        conv_id: conv.id.clone(),
        thread: m.thread_root.clone(),
        roster: store.roster(&conv.id).ok(),
        tasks: store.open_tasks_of(agent, &conv.id).unwrap_or_default(),
        body: m.content,
        earlier,
        attachments: Vec::new(),
    })
}

/// The local paths of the files shared with message `message_id` into the reader's workspace
/// (`<ws>/.cicy/inbox-files/<message_id>/`, written by `share_file`), by name; none when the
/// folder is missing.
fn attachments(ws: &std::path::Path, message_id: &str) -> Vec<String> {
    let dir = ws.join(".cicy").join("inbox-files").join(message_id);
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut paths: Vec<String> = entries.filter_map(Result::ok).map(|e| e.path().to_string_lossy().into_owned()).collect();
    paths.sort();
    paths
}

/// A file without a row: `conv:` is its `conv`, or the first hex digits of the SHA-256 of its
/// conversation key (a direct chat with its sender), never an address *(Choruz)*.
fn file_parts(f: &MessageFile) -> Parts {
    let conv_id = match f.meta.get(META_CONV) {
        Some(c) => envelope::clean_name(c),
        None => Sha256::digest(inbox::conversation_key(f).as_bytes()).iter().map(|b| format!("{b:02x}")).collect(),
    };
    Parts {
        sender: f.from.clone(),
        group: f.meta.get(META_GROUP).cloned(),
        conv_id,
        thread: f.meta.get(META_THREAD).cloned(),
        roster: None,
        tasks: Vec::new(),
        body: f.body.clone(),
        earlier: Vec::new(),
        attachments: Vec::new(),
    }
}

/// The conversation a message written from an agent's claim goes to: the store's conversation
/// named by its `conv`, if there is one.
pub fn stored_conversation(home: &Home, meta: &BTreeMap<String, String>) -> Result<Option<Conversation>, RouteError> {
    let Some(conv) = meta.get(META_CONV) else { return Ok(None) };
    if !home.db_path().exists() {
        return Ok(None);
    }
    match MessageStore::open(home)?.conversation(conv) {
        Ok(c) => Ok(Some(c)),
        Err(StoreError::NoConversation { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::messages::store::testutil::store_with;
    use crate::messages::store::NewTask;

    fn file(from: &str, body: &str, meta: &[(&str, &str)]) -> MessageFile {
        MessageFile {
            name: format!("{from}.md"),
            from: from.into(),
            subject: "s".into(),
            timestamp: "2026-12-01T09:00:00".into(),
            question: false,
            meta: meta.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
            body: body.into(),
        }
    }

    fn text<'a>(conv: &'a str, sender: &'a str, content: &'a str, thread: Option<&'a str>) -> NewMessage<'a> {
        NewMessage { conv_id: conv, sender, content, content_type: None, metadata: Map::new(), thread, deliver: true }
    }

    #[test]
    fn a_stored_thread_reply_shows_the_thread_the_roster_and_the_readers_tasks() {
        let (dir, mut store) = store_with(&["Ann", "bob"]);
        let g = store.create_group("human:ada", "ops", "", &["w-1", "w-2"]).unwrap();
        let root = store.post(&text(&g.id, "human:ada", "ship it?", None)).unwrap();
        let reply = store.post(&text(&g.id, "w-2", "tests first", Some(&root.id))).unwrap();
        let task = NewTask {
            conv_id: &g.id,
            requester: "w-2",
            title: "run | tests",
            idempotency_key: "k1",
            task_key: Some("T-9"),
            status: None,
            context_label: None,
            assignee: Some("w-1"),
        };
        store.task_create(&task).unwrap();
        let f = file("w-2", "ignored: the row wins", &[("message_id", &reply.id), ("conv", &g.id)]);
        let roster = r#"[{"id":"w-1","name":"Ann","type":"agent"},{"id":"w-2","name":"bob","type":"agent"}]"#;
        assert_eq!(
            prompt_for(&Home::at(dir.path()), "w-1", &[f]),
            format!(
                "[cicy-thread] thread:{root} earlier:1 (the root and earlier replies of this thread, oldest first; already \
                 delivered, for context only)\n[1/1] from:@ada | ship it?\n\n[choruz-incoming] from:@bob group:ops conv:{conv} \
                 thread:{root} roster:{roster} your_tasks:[{{\"task_key\":\"T-9\",\"title\":\"run  tests\",\"status\":\"todo\"}}] \
                 | tests first",
                root = root.id,
                conv = &g.id[..13],
            )
        );
    }

    #[test]
    fn a_file_without_a_row_shows_its_front_matter_and_an_empty_roster() {
        let (dir, _store) = store_with(&[]);
        let home = Home::at(dir.path());
        let group = file("ann|a\nb", "line 1\nline | 2", &[("group", "ops team"), ("conv", "abcdefghijklmnopq"), ("thread", "r-1")]);
        assert_eq!(
            prompt_for(&home, "w-1", std::slice::from_ref(&group)),
            "[choruz-incoming] from:@annab group:ops team conv:abcdefghijklm thread:r-1 roster:[] | line 1\nline | 2"
        );
        let direct = file("human", "hi", &[]);
        let conv = &format!("{:x}", Sha256::digest(b"direct:human"))[..13];
        let one = format!("[choruz-incoming] from:@human direct-chat conv:{conv} roster:[] | hi");
        assert_eq!(prompt_for(&home, "w-1", std::slice::from_ref(&direct)), one);
        let batch = prompt_for(&home, "w-1", &[direct.clone(), file("human", "again", &[])]);
        assert!(batch.starts_with("[choruz-batch] You have 2 pending messages waiting for you. "), "{batch}");
        assert!(
            batch.ends_with(&format!("\n\n[1/2] {one}\n\n[2/2] [choruz-incoming] from:@human direct-chat conv:{conv} roster:[] | again"))
        );
    }

    #[test]
    fn hops_read_from_rows_and_files_default_to_zero() {
        let f = file("a", "b", &[("hops", "3")]);
        assert_eq!((file_hops(&f), file_hops(&file("a", "b", &[("hops", "x")]))), (3, 0));
    }
}
