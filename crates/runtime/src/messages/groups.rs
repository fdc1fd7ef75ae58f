//! What a person does with a group (docs/design.md §11 "CLI and serve routes"): create it, post in
//! it, read its messages a page at a time, list its tasks. The CLI and serve's routes both call
//! these, so the two answer alike.
//!
//! Owns the person's principal (`human:<name>`) and the membership check a person's reading
//! goes through. Must not touch the wake: a post reaches the agents as inbox files
//! (`super::route`), which wake them like any other.

use super::route::{self, Post, Posted, RouteError};
use super::store::{Conversation, MessageStore, Page, StoreError, Task};
use crate::home::Home;

/// The principal of `name`: an agent id as it is, else the person `human:<name>` (a leading
/// `human:` is kept). `cicy` is refused: it is the runtime's own name on every notice it writes,
/// and a person of that name would be taken for one.
///
/// Errors: [`StoreError::BadPerson`] for an empty name, one with `|` or control characters
/// (an envelope shows it), or `cicy`.
pub fn principal(name: &str) -> Result<String, StoreError> {
    let name = name.trim();
    if crate::wake::deliver::is_agent_id(name) {
        return Ok(name.to_string());
    }
    person(name)
}

/// The principal of the person `name` (`human:<name>`), never an agent's: what the `group`
/// commands and routes post and read as.
///
/// Errors: [`StoreError::BadPerson`] (see [`principal`]), also for an agent id.
pub fn person(name: &str) -> Result<String, StoreError> {
    let bare = name.trim().strip_prefix("human:").unwrap_or(name.trim()).trim();
    let bad = |why: &'static str| Err(StoreError::BadPerson { value: name.to_string(), why });
    if bare.is_empty() {
        return bad("it is empty");
    }
    if bare.chars().any(|c| c.is_control() || c == '|') {
        return bad("it has `|` or a control character");
    }
    if bare == crate::wake::deliver::SERVE_SENDER {
        return bad("`cicy` is the runtime's own name");
    }
    if crate::wake::deliver::is_agent_id(bare) {
        return bad("it is an agent id; a person posts and reads here");
    }
    Ok(format!("human:{bare}"))
}

/// Creates the group `name` with `members` (agent ids or person names) and `requester`.
///
/// Errors: the store's (bad name, a member's clash of names, a bad principal).
pub fn create(home: &Home, requester: &str, name: &str, description: &str, members: &[String]) -> Result<Conversation, StoreError> {
    let reg = crate::registry::Registry::open(&home.db_path())?;
    let mut principals = Vec::with_capacity(members.len());
    for m in members {
        let p = principal(m)?;
        if crate::wake::deliver::is_agent_id(&p) {
            // An agent that does not exist would silently never get a message.
            reg.get(&p)?;
        }
        principals.push(p);
    }
    let refs: Vec<&str> = principals.iter().map(String::as_str).collect();
    MessageStore::open(home)?.create_group(&principal(requester)?, name, description, &refs)
}

/// Posts `text` from `from` in the group `group` (a member of it), in the thread of `thread`
/// when given; every agent member gets it in its inbox.
///
/// Errors: the store's (Choruz's texts for an unknown or ambiguous group and an unknown
/// thread target), a file's.
pub fn post(home: &Home, from: &str, group: &str, text: &str, thread: Option<&str>) -> Result<Posted, RouteError> {
    let from = principal(from)?;
    let mut store = MessageStore::open(home)?;
    let conv = member_group(&store, &from, group.trim())?;
    let post =
        Post { conv_id: &conv.id, sender: &from, content: text, thread, hops: 0, wake_agents: true, metadata: serde_json::Map::new() };
    route::post(home, &mut store, &post)
}

/// One page of the group's messages as member `from` reads them: up to `limit` (1 to 100)
/// older than the cursor `before`, oldest first, and the cursor of the page before it.
///
/// Errors: the store's (group, cursor, limit).
pub fn page(home: &Home, from: &str, group: &str, before: Option<&str>, limit: u32) -> Result<(Conversation, Page), StoreError> {
    let store = MessageStore::open(home)?;
    let conv = member_group(&store, &principal(from)?, group.trim())?;
    let page = store.messages(&conv.id, before, limit)?;
    Ok((conv, page))
}

/// The group's tasks as member `from` sees them.
///
/// Errors: the store's.
pub fn tasks(home: &Home, from: &str, group: &str) -> Result<(Conversation, Vec<Task>), StoreError> {
    let store = MessageStore::open(home)?;
    let conv = member_group(&store, &principal(from)?, group.trim())?;
    let tasks = store.tasks(&conv.id)?;
    Ok((conv, tasks))
}

/// The group `name` that `principal` is an active member of. A person is told which of the two
/// is wrong: the group does not exist, or they are not in it; an agent gets Choruz's text
/// ([`StoreError::GroupNotFound`]), which its tools are written against.
///
/// Errors: those of [`MessageStore::resolve_group`], [`StoreError::NoGroup`],
/// [`StoreError::NotGroupMember`].
fn member_group(store: &MessageStore, principal: &str, name: &str) -> Result<Conversation, StoreError> {
    match store.resolve_group(principal, name) {
        Err(StoreError::GroupNotFound { group }) if principal.starts_with("human:") => {
            if store.group_exists(&group)? {
                Err(StoreError::NotGroupMember { group, person: principal.to_string() })
            } else {
                Err(StoreError::NoGroup { group })
            }
        }
        other => other,
    }
}
