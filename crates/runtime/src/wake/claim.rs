//! Claiming one conversation of an agent's inbox (docs/design.md §10 "Obligations"; cryo A9, A10).
//!
//! Owns the order that makes a claimed message impossible to lose or replay: commit the
//! obligation (with each claimed file's inbox name, archive name and stamp), then move the
//! files to `inbox/archive/`, then (the caller) start the turn. A crash between the commit and
//! the moves is finished by [`finish_moves`] at the next start; a claim that cannot lead to a
//! turn is undone by [`release`]. Only files whose writer has finished are claimed
//! (`super::inbox::settle`), and a file is the claimed one only if its stamp is, so a new
//! message saved under a claimed name is a new message. Also owns what happens to a file that
//! does not parse: a young one is left for a retry, an old one goes to `inbox/bad/`, each move
//! logged and reported. Must not touch the todo table or the turn.

use std::time::{Duration, SystemTime};

use super::db::WakeDb;
use super::deliver::SERVE_SENDER;
use super::inbox::settle::FileStamp;
use super::inbox::{conversation_key, select_claim, Mailbox, MessageFile};
use super::obligation::{ClaimedFile, Obligation, ResolvedBy};
use super::state::{Claim, WakeNote};
use super::WakeError;
use crate::messages::coordinate;
use crate::messages::route::{self, file_hops};
use crate::messages::store::{DeliveryState, MessageStore};

/// **[chosen]** A file that does not parse while it is young (changed less than the write
/// grace ago) is probably still being written by a writer that does not rename; it is looked
/// at again after this long.
pub const UNPARSED_RETRY: Duration = Duration::from_millis(200);

/// What a look at the inbox found.
#[derive(Debug, Default)]
pub struct Claimed {
    /// The conversation claimed, with its messages (oldest first, named as in `inbox/archive/`).
    pub claim: Option<(Claim, Vec<MessageFile>)>,
    /// A file is still being written, or a young one did not parse: look again after this long.
    pub retry_in: Option<Duration>,
    /// What left `inbox/` without being claimed now, with why ([`WakeNote::InboxAside`]; each
    /// also logged).
    pub aside: Vec<WakeNote>,
}

/// Claims the next conversation of `agent`'s inbox (`select_claim`: the oldest message's
/// conversation, or its thread) among the files whose writer has finished at `now` (`grace`:
/// `crate::fsutil::write_grace`): obligation committed, then the files archived.
///
/// Errors: the database's (nothing moved) and the inbox's I/O errors (the obligation stands;
/// [`finish_moves`] completes the moves at the next start).
pub fn claim_next(db: &mut WakeDb, mb: &Mailbox, agent: &str, now: SystemTime, grace: Duration) -> Result<Claimed, WakeError> {
    let found = mb.claimable(now, grace)?;
    let mut out = Claimed { retry_in: found.wait, ..Claimed::default() };
    for u in found.unparsed {
        if u.young {
            out.retry_in = Some(out.retry_in.map_or(UNPARSED_RETRY, |r| r.min(UNPARSED_RETRY)));
        } else {
            mb.move_to_bad(&u.name)?;
            tracing::warn!(agent, file = %u.name, error = %u.error, "unparsable inbox file moved to inbox/bad/");
            out.aside.push(WakeNote::InboxAside { file: u.name, why: format!("does not parse ({}); moved to inbox/bad/", u.error) });
        }
    }
    let pending = unclaimed(db, mb, agent, found.ready, &mut out.aside)?;
    let msgs: Vec<MessageFile> = pending.iter().map(|(m, _)| m.clone()).collect();
    let mut taken = select_claim(&msgs);
    let Some(first) = taken.first() else { return Ok(out) };
    let conv = conversation_key(first);
    let names: Vec<String> = taken.iter().map(|m| m.name.clone()).collect();
    let archived = mb.archive_names(&names);
    let files: Vec<ClaimedFile> = names
        .iter()
        .zip(&archived)
        .filter_map(|(name, to)| {
            let stamp = pending.iter().find(|(m, _)| &m.name == name)?.1;
            Some(ClaimedFile { name: name.clone(), archived: to.clone(), stamp })
        })
        .collect();
    let ob = db.obligation_commit(agent, &conv, &files)?;
    mark_claimed(db, agent, &taken, ob.id);
    let moves: Vec<(String, String)> = names.into_iter().zip(archived.iter().cloned()).collect();
    if let Err(e) = mb.archive(&moves) {
        // The claim stands (its obligation holds the files' stamps, so they are never claimed
        // again): the turn answers them; the move is tried again at each look and at the next
        // start.
        tracing::error!(agent, error = %e, "claimed inbox files could not be moved to inbox/archive/");
    }
    // From here on a claimed message is known by the name it has in the archive.
    for (m, to) in taken.iter_mut().zip(&archived) {
        m.name = to.clone();
    }
    let mut claim = claim_of(ob.id, conv, &taken, archived);
    if taken.iter().all(|m| m.meta.contains_key(coordinate::CALLBACK_OF) || m.from == SERVE_SENDER) {
        // A 🔔 callback is never answered back (docs/design.md §11), nor a notice of serve's:
        // nobody waits for a reply.
        db.obligation_resolve(claim.obligation_id, ResolvedBy::Notice)?;
        claim.answered = true;
    }
    out.claim = Some((claim, taken));
    Ok(out)
}

/// Undoes the claim of obligation `obligation_id` before its turn started (the wake could not
/// run): its files go back to `inbox/` (under a free `<stem>~<n>.md` if a new file took the
/// name meanwhile), then the obligation is deleted, so the messages are pending again.
///
/// Errors: the inbox's (the obligation stands, the claim is answered as interrupted at the
/// next start) and the database's.
pub fn release(db: &mut WakeDb, mb: &Mailbox, obligation_id: i64) -> Result<(), WakeError> {
    let ob = db.obligation_get(obligation_id)?;
    let moves: Vec<(String, String)> = if ob.files.is_empty() {
        ob.message_ids.iter().map(|n| (n.clone(), n.clone())).collect()
    } else {
        ob.files.iter().map(|f| (f.name.clone(), f.archived.clone())).collect()
    };
    mb.unarchive(&moves)?;
    db.obligation_release(obligation_id)?;
    Ok(())
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

/// `pending` without the files an obligation already claimed (same name and stamp: a claim
/// whose move out of `inbox/` failed); their move is tried again, and reported in `aside`.
///
/// Errors: the database's.
fn unclaimed(
    db: &WakeDb,
    mb: &Mailbox,
    agent: &str,
    pending: Vec<(MessageFile, FileStamp)>,
    aside: &mut Vec<WakeNote>,
) -> Result<Vec<(MessageFile, FileStamp)>, WakeError> {
    let mut out = Vec::with_capacity(pending.len());
    for (m, stamp) in pending {
        let Some(archived) = db.obligation_claimed_as(agent, &m.name, &stamp)? else {
            out.push((m, stamp));
            continue;
        };
        match mb.archive(&[(m.name.clone(), archived.clone())]) {
            Ok(()) => {
                tracing::warn!(agent, file = %m.name, archived = %archived, "a claimed inbox file whose move had failed is now in inbox/archive/");
                aside.push(WakeNote::InboxAside {
                    file: m.name,
                    why: format!("was claimed already; moved to inbox/archive/ as {archived}"),
                });
            }
            Err(e) => tracing::warn!(agent, file = %m.name, error = %e, "a claimed inbox file still cannot be moved to inbox/archive/"),
        }
    }
    Ok(out)
}

/// Whether `agent`'s inbox holds a finished message no claim took yet (`sleep_until`'s gate).
/// A file that does not parse counts, as the agent cannot sleep it away; one still being
/// written does not (it wakes the agent once whole).
///
/// Errors: the database's and the inbox's.
pub fn has_unclaimed(db: &WakeDb, mb: &Mailbox, agent: &str) -> Result<bool, WakeError> {
    if !mb.has_pending() {
        return Ok(false);
    }
    let found = mb.claimable(SystemTime::now(), crate::fsutil::write_grace())?;
    if !found.unparsed.is_empty() {
        return Ok(true);
    }
    for (m, stamp) in &found.ready {
        if db.obligation_claimed_as(agent, &m.name, stamp)?.is_none() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Completes the moves of every unresolved obligation of `agent` (a crash between the commit
/// and the rename leaves claimed files in `inbox/`; they must never be claimed again). Only a
/// file with the claimed stamp moves: one saved under that name since is a new message.
pub fn finish_moves(db: &WakeDb, mb: &Mailbox, agent: &str) -> Result<(), WakeError> {
    for ob in db.obligation_unresolved(Some(agent))? {
        if ob.files.is_empty() {
            let moves: Vec<(String, String)> = ob.message_ids.iter().map(|n| (n.clone(), n.clone())).collect();
            mb.archive(&moves)?;
            continue;
        }
        let inbox = mb.inbox_dir();
        let moves: Vec<(String, String)> = ob
            .files
            .iter()
            .filter(|f| std::fs::metadata(inbox.join(&f.name)).is_ok_and(|m| FileStamp::of(&m) == f.stamp))
            .map(|f| (f.name.clone(), f.archived.clone()))
            .collect();
        mb.archive(&moves)?;
    }
    Ok(())
}

/// The messages obligation `ob` claimed that can still be read, oldest first, each named as
/// in `inbox/archive/`: from the archive, or from `inbox/` while its move is pending and the
/// file there is still the claimed one.
pub fn claimed_messages(mb: &Mailbox, ob: &Obligation) -> Vec<MessageFile> {
    if ob.files.is_empty() {
        return ob.message_ids.iter().filter_map(|n| mb.read(n).ok()).collect();
    }
    let inbox = mb.inbox_dir();
    ob.files
        .iter()
        .filter_map(|f| {
            let unmoved = || std::fs::metadata(inbox.join(&f.name)).is_ok_and(|m| FileStamp::of(&m) == f.stamp);
            let mut m = mb.read_archived(&f.archived).ok().or_else(|| unmoved().then(|| mb.read(&f.name).ok()).flatten())?;
            m.name = f.archived.clone();
            Some(m)
        })
        .collect()
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
    use crate::wake::inbox::{settle, Folder, NewMessage};
    use std::io::Write;

    const GRACE: Duration = Duration::from_secs(2);

    fn setup() -> (tempfile::TempDir, Home, Mailbox) {
        let d = tempfile::tempdir().unwrap();
        let home = Home::at(d.path().join("home"));
        home.ensure().unwrap();
        let mb = Mailbox::of_workspace(&d.path().join("ws"));
        std::fs::create_dir_all(mb.inbox_dir()).unwrap();
        (d, home, mb)
    }

    /// A message renamed into the inbox, as the watch reports it.
    fn written(mb: &Mailbox, body: &str) -> MessageFile {
        let msg =
            NewMessage { from: "human".into(), subject: Some("s".into()), body: body.into(), question: false, meta: Default::default() };
        let m = mb.write(Folder::Inbox, &msg).unwrap();
        settle::note_finished(&mb.inbox_dir().join(&m.name));
        m
    }

    fn look(db: &mut WakeDb, mb: &Mailbox) -> Claimed {
        claim_next(db, mb, "w-1", SystemTime::now(), GRACE).unwrap()
    }

    fn set_mtime(path: &std::path::Path, t: SystemTime) {
        std::fs::File::options().write(true).open(path).unwrap().set_modified(t).unwrap();
    }

    #[test]
    fn an_unparsable_file_waits_while_young_then_goes_to_bad_with_a_note_and_the_claim_is_committed_then_archived() {
        let (_d, home, mb) = setup();
        let mut db = WakeDb::open(&home).unwrap();
        let young = mb.inbox_dir().join("a_young.md");
        std::fs::write(&young, "---\nfrom: hu").unwrap();
        settle::note_finished(&young);
        let first = look(&mut db, &mb);
        assert!(first.claim.is_none() && first.aside.is_empty());
        assert_eq!(first.retry_in, Some(UNPARSED_RETRY));
        assert!(young.exists(), "a young file is left to finish");

        set_mtime(&young, SystemTime::now() - Duration::from_secs(60));
        let written = written(&mb, "b");
        let second = look(&mut db, &mb);
        assert_eq!(
            second.aside,
            [WakeNote::InboxAside {
                file: "a_young.md".into(),
                why: "does not parse (its front matter is not closed by a `---` line); moved to inbox/bad/".into()
            }]
        );
        assert!(mb.bad_dir().join("a_young.md").exists());
        let (claim, msgs) = second.claim.unwrap();
        assert_eq!((claim.from.as_str(), claim.conv.as_str(), claim.files.clone()), ("human", "direct:human", vec![written.name.clone()]));
        assert_eq!(msgs.len(), 1);
        assert!(mb.archive_dir().join(&written.name).exists() && !mb.inbox_dir().join(&written.name).exists());
        let open = db.obligation_unresolved(Some("w-1")).unwrap();
        assert_eq!((open.len(), open[0].message_ids.clone()), (1, vec![written.name]));
        assert!(look(&mut db, &mb).claim.is_none(), "nothing is claimed twice");
    }

    #[test]
    fn a_claim_whose_move_failed_stands_and_its_file_is_never_claimed_again() {
        let (_d, home, mb) = setup();
        let mut db = WakeDb::open(&home).unwrap();
        std::fs::write(mb.archive_dir(), "not a folder").unwrap();
        let written = written(&mb, "b");
        let (claim, _) = look(&mut db, &mb).claim.unwrap();
        assert_eq!(claim.files, std::slice::from_ref(&written.name));
        assert!(mb.inbox_dir().join(&written.name).exists(), "the move failed");
        assert!(!has_unclaimed(&db, &mb, "w-1").unwrap(), "sleep_until is not refused for a claimed file");
        assert!(look(&mut db, &mb).claim.is_none());
        std::fs::remove_file(mb.archive_dir()).unwrap();
        let third = look(&mut db, &mb);
        assert!(third.claim.is_none());
        assert_eq!(
            third.aside,
            [WakeNote::InboxAside {
                file: written.name.clone(),
                why: format!("was claimed already; moved to inbox/archive/ as {}", written.name)
            }]
        );
        assert!(mb.archive_dir().join(&written.name).exists(), "moved at the next look");
    }

    #[test]
    fn a_new_message_under_an_answered_name_is_claimed_and_archived_beside_the_first() {
        let (_d, home, mb) = setup();
        let mut db = WakeDb::open(&home).unwrap();
        let path = mb.inbox_dir().join("x.md");
        std::fs::write(&path, "---\nfrom: human\n---\nfirst").unwrap();
        settle::note_finished(&path);
        let (first, _) = look(&mut db, &mb).claim.unwrap();
        db.obligation_resolve(first.obligation_id, ResolvedBy::Agent).unwrap();
        // An editor's save by rename: a new file under the old name.
        std::fs::write(mb.inbox_dir().join(".x.md.swp"), "---\nfrom: human\n---\nsecond").unwrap();
        std::fs::rename(mb.inbox_dir().join(".x.md.swp"), &path).unwrap();
        settle::note_finished(&path);
        assert!(has_unclaimed(&db, &mb, "w-1").unwrap());
        let (claim, msgs) = look(&mut db, &mb).claim.unwrap();
        assert_eq!((claim.files.clone(), msgs[0].name.as_str(), msgs[0].body.as_str()), (vec!["x~1.md".to_string()], "x~1.md", "second"));
        assert_eq!(std::fs::read_to_string(mb.archive_dir().join("x.md")).unwrap(), "---\nfrom: human\n---\nfirst");
        assert_eq!(std::fs::read_to_string(mb.archive_dir().join("x~1.md")).unwrap(), "---\nfrom: human\n---\nsecond");
        let ob = db.obligation_get(claim.obligation_id).unwrap();
        assert_eq!(claimed_messages(&mb, &ob).iter().map(|m| m.body.as_str()).collect::<Vec<_>>(), ["second"]);
    }

    #[test]
    fn the_moves_a_kill_cut_short_take_only_the_claimed_file_not_a_new_one_under_its_name() {
        let (_d, home, mb) = setup();
        let mut db = WakeDb::open(&home).unwrap();
        let path = mb.inbox_dir().join("x.md");
        std::fs::write(&path, "---\nfrom: human\n---\nclaimed").unwrap();
        // What a kill -9 right after the commit leaves: the obligation, the file still in inbox/.
        let stamp = FileStamp::of(&std::fs::metadata(&path).unwrap());
        let file = ClaimedFile { name: "x.md".into(), archived: "x.md".into(), stamp };
        let ob = db.obligation_commit("w-1", "direct:human", &[file]).unwrap();
        finish_moves(&db, &mb, "w-1").unwrap();
        assert!(!path.exists() && mb.archive_dir().join("x.md").exists());
        std::fs::write(&path, "---\nfrom: human\n---\nnew").unwrap();
        settle::note_finished(&path);
        finish_moves(&db, &mb, "w-1").unwrap();
        assert!(path.exists(), "a new message under the claimed name is not moved as the claimed one");
        let ob = db.obligation_get(ob.id).unwrap();
        assert_eq!(claimed_messages(&mb, &ob).iter().map(|m| m.body.as_str()).collect::<Vec<_>>(), ["claimed"]);
        let (claim, msgs) = look(&mut db, &mb).claim.unwrap();
        assert_eq!((claim.files, msgs[0].body.as_str()), (vec!["x~1.md".to_string()], "new"));
        assert!(look(&mut db, &mb).claim.is_none());
    }

    #[test]
    fn a_file_still_being_written_is_left_out_of_another_claim_and_taken_whole_once_closed() {
        let (_d, home, mb) = setup();
        let mut db = WakeDb::open(&home).unwrap();
        let path = mb.inbox_dir().join("m.md");
        let mut writer = std::fs::File::create(&path).unwrap();
        writer.write_all(b"---\nfrom: ann\n---\nPART-").unwrap();
        let t0 = std::fs::metadata(&path).unwrap().modified().unwrap();
        let other = written(&mb, "other");
        let during = claim_next(&mut db, &mb, "w-1", t0 + Duration::from_millis(500), GRACE).unwrap();
        let (claim, _) = during.claim.unwrap();
        assert_eq!(claim.files, [other.name]);
        assert_eq!(during.retry_in, Some(Duration::from_millis(1500)), "looked at again when the grace is over");
        assert!(path.exists());

        writer.write_all(b"REST").unwrap();
        drop(writer);
        settle::note_finished(&path);
        let (claim, msgs) = look(&mut db, &mb).claim.unwrap();
        assert_eq!((claim.files, msgs[0].body.as_str()), (vec!["m.md".to_string()], "PART-REST"));
    }

    #[test]
    fn a_released_claim_puts_its_files_back_and_they_are_claimed_again() {
        let (_d, home, mb) = setup();
        let mut db = WakeDb::open(&home).unwrap();
        let m = written(&mb, "again");
        let (claim, _) = look(&mut db, &mb).claim.unwrap();
        release(&mut db, &mb, claim.obligation_id).unwrap();
        assert!(mb.inbox_dir().join(&m.name).exists() && !mb.archive_dir().join(&m.name).exists());
        assert!(db.obligation_unresolved(Some("w-1")).unwrap().is_empty());
        let (again, msgs) = claim_next(&mut db, &mb, "w-1", SystemTime::now() + GRACE, GRACE).unwrap().claim.unwrap();
        assert_eq!((again.files, msgs[0].body.as_str()), (vec![m.name], "again"));
    }
}
