//! Writing a message on an agent's behalf (docs/design.md §10 `reply`, `send`, serve's fallbacks).
//!
//! Owns where a message goes: a copy in the sender's `outbox/` always (the record of what it
//! said, which `inbox` and the dashboard page through) and, when the recipient is an agent of
//! this home, the message in that agent's inbox, which wakes it. People (`human`, any other
//! name) read the outbox. Must not touch claims or obligations (`super::claim`).

use std::collections::BTreeMap;
use std::path::Path;

use super::inbox::{self, Mailbox, MessageFile, NewMessage};
use super::WakeError;
use crate::home::Home;
use crate::messages::coordinate;
use crate::messages::route;
use crate::messages::store::MessageStore;
use crate::registry::Registry;

/// The sender name of every message serve writes itself (fallbacks, notices) *(cryo: a
/// daemon-originated sender)*.
pub const SERVE_SENDER: &str = "cicy";

/// One message to write.
#[derive(Debug, Clone, Default)]
pub struct Outgoing {
    /// `human`, an agent id (`w-<n>`) or any other name.
    pub to: String,
    pub text: String,
    pub question: bool,
    /// Front-matter keys carried along (`conv`, `thread`, `group`).
    pub meta: BTreeMap<String, String>,
}

/// Whether `name` has the shape of an agent id (`w-<n>`, docs/design.md §1).
pub fn is_agent_id(name: &str) -> bool {
    name.strip_prefix("w-").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// [`deliver`] for what serve writes itself (fallbacks, notices): a recipient that names no
/// agent of this home (a deleted agent, a forged sender) still gets the outbox copy, so the
/// wake is never silent for want of an address; serve's own text to an agent is that copy
/// alone.
///
/// In a conversation of the message store, serve's text is posted as `agent`'s and wakes no
/// agent: it is for the people there (a fallback that woke the other agents of a group would
/// get their fallbacks in return).
pub fn deliver_fallback(home: &Home, from_ws: &Path, agent: &str, from: &str, msg: &Outgoing) -> Result<MessageFile, WakeError> {
    if let Some(conv) = route::stored_conversation(home, &msg.meta)? {
        return post_stored(home, from_ws, agent, from, &conv.id, msg, false);
    }
    if from == SERVE_SENDER && is_agent_id(msg.to.trim()) {
        // An agent that sent a plain message gets serve's fallback as a record, not as mail:
        // waking it would cost a turn to answer a notice (and `msg` calls carry their answers).
        return outbox_only(from_ws, from, msg);
    }
    match deliver(home, from_ws, from, msg) {
        Err(WakeError::NoRecipient { .. } | WakeError::BadRecipient { .. }) => outbox_only(from_ws, from, msg),
        other => other,
    }
}

/// The outbox copy of `msg` alone: what serve said, for a recipient it does not deliver to.
fn outbox_only(from_ws: &Path, from: &str, msg: &Outgoing) -> Result<MessageFile, WakeError> {
    let mut meta = msg.meta.clone();
    meta.insert("to".into(), msg.to.trim().chars().filter(|c| !c.is_control()).collect());
    let copy = NewMessage { from: from.to_string(), subject: None, body: msg.text.clone(), question: msg.question, meta };
    Ok(Mailbox::of_workspace(from_ws).write(inbox::Folder::Outbox, &copy)?)
}

/// Writes `msg` from `from` (an agent id or [`SERVE_SENDER`]) whose workspace is `from_ws`;
/// returns the outbox copy. An agent id that is not in the registry is an error and nothing is
/// written.
///
/// Errors: [`WakeError::NoRecipient`], the registry's, and the inbox's I/O errors.
///
/// When `msg.meta` names a conversation of the message store (`conv`: a reply in a group or
/// a stored direct chat), the message is posted there instead, with one more hop than what it
/// answers, and every other agent member gets it in its inbox (`crate::messages::route`).
pub fn deliver(home: &Home, from_ws: &Path, from: &str, msg: &Outgoing) -> Result<MessageFile, WakeError> {
    if let Some(conv) = route::stored_conversation(home, &msg.meta)? {
        return post_stored(home, from_ws, from, from, &conv.id, msg, true);
    }
    let to = msg.to.trim();
    if to.is_empty() || to.chars().any(char::is_control) {
        return Err(WakeError::BadRecipient { to: msg.to.clone() });
    }
    let recipient_ws = if is_agent_id(to) {
        let reg = Registry::open(&home.db_path())?;
        match reg.get(to) {
            Ok(r) => Some(r.workspace),
            Err(crate::registry::RegistryError::NotFound(_)) => return Err(WakeError::NoRecipient { to: to.to_string() }),
            Err(e) => return Err(e.into()),
        }
    } else {
        None
    };
    // An agent's message to an agent is one hop more than what its turn answers (the caller
    // put those hops in `meta`); past the limit it is recorded but wakes nobody (§11).
    let hops = route::meta_hops(&msg.meta).saturating_add(1);
    let wakes = hops <= route::MAX_HOPS;
    let to_agent = recipient_ws.is_some();
    if let Some(ws) = recipient_ws.filter(|_| wakes) {
        let mut meta = msg.meta.clone();
        meta.remove("to");
        meta.remove("conv");
        meta.insert(route::META_HOPS.into(), hops.to_string());
        let incoming = NewMessage { from: from.to_string(), subject: None, body: msg.text.clone(), question: msg.question, meta };
        write(&Mailbox::of_workspace(&ws), inbox::Folder::Inbox, &incoming)?;
    }
    let mut meta = msg.meta.clone();
    meta.insert("to".into(), to.to_string());
    meta.insert(route::META_HOPS.into(), hops.to_string());
    if to_agent && !wakes {
        meta.insert("undelivered".into(), format!("more than {} hops", route::MAX_HOPS));
    }
    let copy = NewMessage { from: from.to_string(), subject: None, body: msg.text.clone(), question: msg.question, meta };
    Ok(write(&Mailbox::of_workspace(from_ws), inbox::Folder::Outbox, &copy)?)
}

/// Writes `m` to `folder` of `mb`, once per outbox command when its meta names one
/// ([`route::META_OUTBOX_CMD`]): the retry of a killed drain finds the file of its first run.
fn write(mb: &Mailbox, folder: inbox::Folder, m: &NewMessage) -> Result<MessageFile, inbox::InboxError> {
    match m.meta.get(route::META_OUTBOX_CMD).and_then(|k| k.parse::<ulid::Ulid>().ok()) {
        Some(key) => mb.write_once(folder, m, key),
        None => mb.write(folder, m),
    }
}

/// Posts `msg` in the stored conversation `conv` as `agent` and keeps the outbox copy (from
/// `from`, with the message's id) that the dialog and the never-silent count read.
fn post_stored(
    home: &Home,
    from_ws: &Path,
    agent: &str,
    from: &str,
    conv: &str,
    msg: &Outgoing,
    wake_agents: bool,
) -> Result<MessageFile, WakeError> {
    let hops = route::meta_hops(&msg.meta);
    let calls: Vec<i64> =
        msg.meta.get(super::tools::MSG_CALLS).map(|c| c.split(',').filter_map(|id| id.parse().ok()).collect()).unwrap_or_default();
    // The answer to a `msg` goes back through its call (a waiting tool, or a 🔔), not as a
    // message the caller would be woken by and answer again.
    let wake_agents = wake_agents && calls.is_empty();
    let mut store = MessageStore::open(home).map_err(route::RouteError::from)?;
    let posted = route::post(
        home,
        &mut store,
        &route::Post {
            conv_id: conv,
            sender: agent,
            content: &msg.text,
            thread: msg.meta.get(route::META_THREAD).map(String::as_str),
            hops: hops.saturating_add(1),
            wake_agents,
            metadata: serde_json::Map::new(),
        },
    )?;
    drop(store);
    coordinate::answer(home, agent, &calls, &msg.text, route::hops_of(&posted.message)).map_err(|e| WakeError::Coordinate(Box::new(e)))?;
    let mut meta = msg.meta.clone();
    meta.insert("to".into(), msg.to.trim().to_string());
    meta.insert(route::META_MESSAGE.into(), posted.message.id.clone());
    meta.insert(route::META_HOPS.into(), route::hops_of(&posted.message).to_string());
    let copy = NewMessage { from: from.to_string(), subject: None, body: msg.text.clone(), question: msg.question, meta };
    Ok(Mailbox::of_workspace(from_ws).write(inbox::Folder::Outbox, &copy)?)
}
