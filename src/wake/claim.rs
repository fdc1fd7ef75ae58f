//! Claiming one conversation of an agent's inbox (DESIGN.md §10 "Obligations"; cryo A9, A10).
//!
//! Owns the order that makes a claimed message impossible to lose or replay: commit the
//! obligation (with the claimed file names), then move the files to `inbox/archive/`, then
//! (the caller) start the turn. A crash between the commit and the moves is finished by
//! [`finish_moves`] at the next start. Also owns what happens to a file that does not parse:
//! a young one is left for a retry, an old one goes to `inbox/bad/`. Must not touch the todo
//! table or the turn.

use std::time::Duration;

use super::db::WakeDb;
use super::deliver::SERVE_SENDER;
use super::inbox::{conversation_key, select_claim, Mailbox, MessageFile};
use super::state::Claim;
use super::WakeError;
use super::obligation::ResolvedBy;
use crate::messages::coordinate;
use crate::messages::route::{self, file_hops};
use crate::messages::store::{DeliveryState, MessageStore};

/// **[chosen]** A file that does not parse while younger than 2 s is probably still being
/// written by a writer that does not rename; it is looked at again after this long.
pub const UNPARSED_RETRY: Duration = Duration::from_millis(200);

/// What a look at the inbox found.
#[derive(Debug, Default)]
pub struct Claimed {
    /// The conversation claimed, with its messages (oldest first).
    pub claim: Option<(Claim, Vec<MessageFile>)>,
    /// A young file did not parse: look again after [`UNPARSED_RETRY`].
    pub retry_soon: bool,
    /// Files moved to `inbox/bad/`, with why.
    pub bad: Vec<(String, String)>,
}

/// Claims the next conversation of `agent`'s inbox (`select_claim`: the oldest message's
/// conversation, or its thread): obligation committed, then the files archived.
///
/// Errors: the database's (nothing moved) and the inbox's I/O errors (the obligation stands;
/// [`finish_moves`] completes the moves at the next start).
pub fn claim_next(db: &mut WakeDb, mb: &Mailbox, agent: &str) -> Result<Claimed, WakeError> {
    let (pending, unparsed) = mb.pending()?;
    let mut out = Claimed::default();
    for u in unparsed {
        if u.young {
            out.retry_soon = true;
        } else {
            mb.move_to_bad(&u.name)?;
            tracing::warn!(agent, file = %u.name, error = %u.error, "unparsable inbox file moved to inbox/bad/");
            out.bad.push((u.name, u.error));
        }
    }
    let pending = unclaimed(db, mb, agent, pending)?;
    let taken = select_claim(&pending);
    let Some(first) = taken.first() else { return Ok(out) };
    let conv = conversation_key(first);
    let names: Vec<String> = taken.iter().map(|m| m.name.clone()).collect();
    let ob = db.obligation_commit(agent, &conv, &names)?;
    mark_claimed(db, agent, &taken, ob.id);
    if let Err(e) = mb.archive(&names) {
        // The claim stands (its obligation names the files, so they are never claimed again):
        // the turn answers them; the move is tried again at each look and at the next start.
        tracing::error!(agent, error = %e, "claimed inbox files could not be moved to inbox/archive/");
    }
    let mut claim = claim_of(ob.id, conv, &taken, names);
    if taken.iter().all(|m| m.meta.contains_key(coordinate::CALLBACK_OF) || m.from == SERVE_SENDER) {
        // A 🔔 callback is never answered back (DESIGN.md §11), nor a notice of serve's:
        // nobody waits for a reply.
        db.obligation_resolve(claim.obligation_id, ResolvedBy::Notice)?;
        claim.answered = true;
    }
    out.claim = Some((claim, taken));
    Ok(out)
}

/// Marks the stored deliveries of `msgs` claimed by obligation `ob` (files written by
/// `crate::messages::route` carry their `message_id`). The obligation is what guarantees the
/// answer, so a failure here is logged, not fatal.
fn mark_claimed(db: &WakeDb, agent: &str, msgs: &[MessageFile], ob: i64) {
    let ids: Vec<&str> = msgs.iter().filter_map(|m| m.meta.get(route::META_MESSAGE).map(String::as_str)).collect();
    if ids.is_empty() {
        return;
    }
    let marked = crate::registry::Registry::open(db.path())
        .map_err(Into::into)
        .and_then(MessageStore::from_registry)
        .and_then(|mut s| s.mark_deliveries(agent, &ids, DeliveryState::Claimed, Some(ob)));
    if let Err(e) = marked {
        tracing::warn!(agent, error = %e, "cannot mark the claimed deliveries");
    }
}

/// `pending` without the files an obligation already holds (a claim whose move out of
/// `inbox/` failed); their move is tried again.
///
/// Errors: the database's.
pub fn unclaimed(db: &WakeDb, mb: &Mailbox, agent: &str, pending: Vec<MessageFile>) -> Result<Vec<MessageFile>, WakeError> {
    let mut out = Vec::with_capacity(pending.len());
    for m in pending {
        if db.obligation_has_file(agent, &m.name)? {
            if let Err(e) = mb.archive(std::slice::from_ref(&m.name)) {
                tracing::warn!(agent, file = %m.name, error = %e, "a claimed inbox file still cannot be moved to inbox/archive/");
            }
        } else {
            out.push(m);
        }
    }
    Ok(out)
}

/// Whether `agent`'s inbox holds a message no claim took yet (`sleep_until`'s gate). A file
/// that does not parse counts, as the agent cannot sleep it away.
///
/// Errors: the database's and the inbox's.
pub fn has_unclaimed(db: &WakeDb, mb: &Mailbox, agent: &str) -> Result<bool, WakeError> {
    if !mb.has_pending() {
        return Ok(false);
    }
    let (pending, unparsed) = mb.pending()?;
    Ok(!unparsed.is_empty() || !unclaimed(db, mb, agent, pending)?.is_empty())
}

/// Completes the moves of every unresolved obligation of `agent` (a crash between the commit
/// and the rename leaves claimed files in `inbox/`; they must never be claimed again).
pub fn finish_moves(db: &WakeDb, mb: &Mailbox, agent: &str) -> Result<(), WakeError> {
    for ob in db.obligation_unresolved(Some(agent))? {
        mb.archive(&ob.message_ids)?;
    }
    Ok(())
}

/// The claim of obligation `obligation_id` on `msgs` (oldest first, not empty) of conversation
/// `conv`, whose files are `files`: the first message's sender, thread and group, the most hops
/// and every `msg` call among them, not answered yet.
pub fn claim_of(obligation_id: i64, conv: String, msgs: &[MessageFile], files: Vec<String>) -> Claim {
    let first = msgs.first();
    let meta = |key: &str| first.and_then(|m| m.meta.get(key).cloned());
    Claim {
        obligation_id,
        from: first.map(|m| m.from.clone()).unwrap_or_default(),
        conv,
        thread: meta("thread"),
        group: meta("group"),
        hops: msgs.iter().map(file_hops).max().unwrap_or(0),
        msg_calls: msg_calls(msgs),
        files,
        answered: false,
    }
}

/// The `msg` calls a claim's messages carry, in order.
pub fn msg_calls(msgs: &[MessageFile]) -> Vec<i64> {
    msgs.iter().filter_map(|m| m.meta.get(coordinate::MSG_CALL).and_then(|c| c.parse().ok())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::home::Home;
    use crate::wake::inbox::{Folder, NewMessage};

    fn setup() -> (tempfile::TempDir, Home, Mailbox) {
        let d = tempfile::tempdir().unwrap();
        let home = Home::at(d.path().join("home"));
        home.ensure().unwrap();
        let mb = Mailbox::of_workspace(&d.path().join("ws"));
        std::fs::create_dir_all(mb.inbox_dir()).unwrap();
        (d, home, mb)
    }

    #[test]
    fn a_young_unparsable_file_waits_an_old_one_goes_to_bad_and_the_claim_is_committed_then_archived() {
        let (_d, home, mb) = setup();
        let mut db = WakeDb::open(&home).unwrap();
        std::fs::write(mb.inbox_dir().join("a_young.md"), "---\nfrom: hu").unwrap();
        let first = claim_next(&mut db, &mb, "w-1").unwrap();
        assert!(first.claim.is_none() && first.retry_soon && first.bad.is_empty());
        assert!(mb.inbox_dir().join("a_young.md").exists(), "a young file is left to finish");

        let old = mb.inbox_dir().join("a_young.md");
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        std::fs::File::options().write(true).open(&old).unwrap().set_modified(past).unwrap();
        let msg = NewMessage { from: "human".into(), subject: Some("s".into()), body: "b".into(), question: false, meta: Default::default() };
        let written = mb.write(Folder::Inbox, &msg).unwrap();
        let second = claim_next(&mut db, &mb, "w-1").unwrap();
        assert_eq!(second.bad.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["a_young.md"]);
        assert!(mb.bad_dir().join("a_young.md").exists());
        let (claim, msgs) = second.claim.unwrap();
        assert_eq!((claim.from.as_str(), claim.conv.as_str(), claim.files.clone()), ("human", "direct:human", vec![written.name.clone()]));
        assert_eq!(msgs.len(), 1);
        assert!(mb.archive_dir().join(&written.name).exists() && !mb.inbox_dir().join(&written.name).exists());
        let open = db.obligation_unresolved(Some("w-1")).unwrap();
        assert_eq!((open.len(), open[0].message_ids.clone()), (1, vec![written.name]));
        assert!(claim_next(&mut db, &mb, "w-1").unwrap().claim.is_none(), "nothing is claimed twice");
    }

    #[test]
    fn a_claim_whose_move_failed_stands_and_its_file_is_never_claimed_again() {
        let (_d, home, mb) = setup();
        let mut db = WakeDb::open(&home).unwrap();
        std::fs::write(mb.archive_dir(), "not a folder").unwrap();
        let msg = NewMessage { from: "human".into(), subject: Some("s".into()), body: "b".into(), question: false, meta: Default::default() };
        let written = mb.write(Folder::Inbox, &msg).unwrap();
        let (claim, _) = claim_next(&mut db, &mb, "w-1").unwrap().claim.unwrap();
        assert_eq!(claim.files, std::slice::from_ref(&written.name));
        assert!(mb.inbox_dir().join(&written.name).exists(), "the move failed");
        assert!(!has_unclaimed(&db, &mb, "w-1").unwrap(), "sleep_until is not refused for a claimed file");
        assert!(claim_next(&mut db, &mb, "w-1").unwrap().claim.is_none());
        std::fs::remove_file(mb.archive_dir()).unwrap();
        assert!(claim_next(&mut db, &mb, "w-1").unwrap().claim.is_none());
        assert!(mb.archive_dir().join(&written.name).exists(), "moved at the next look");
    }
}
