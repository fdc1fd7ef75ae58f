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
use super::inbox::{conversation_key, select_claim, Mailbox, MessageFile};
use super::state::Claim;
use super::WakeError;

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
    let taken = select_claim(&pending);
    let Some(first) = taken.first() else { return Ok(out) };
    let conv = conversation_key(first);
    let names: Vec<String> = taken.iter().map(|m| m.name.clone()).collect();
    let ob = db.obligation_commit(agent, &conv, &names)?;
    mb.archive(&names)?;
    let claim = Claim {
        obligation_id: ob.id,
        from: first.from.clone(),
        conv,
        thread: first.meta.get("thread").cloned(),
        group: first.meta.get("group").cloned(),
        files: names,
        answered: false,
    };
    out.claim = Some((claim, taken));
    Ok(out)
}

/// Completes the moves of every unresolved obligation of `agent` (a crash between the commit
/// and the rename leaves claimed files in `inbox/`; they must never be claimed again).
pub fn finish_moves(db: &WakeDb, mb: &Mailbox, agent: &str) -> Result<(), WakeError> {
    for ob in db.obligation_unresolved(Some(agent))? {
        mb.archive(&ob.message_ids)?;
    }
    Ok(())
}
