//! The folders of one workspace's messages (`<ws>/.cicy/messages/`) and every file operation on
//! them: atomic writes, listing, archiving, moving aside, reading by name and paging (reference
//! cryo_choruz.md A6).
//!
//! Owns the file system side only; the format is `super::format`'s, the transcript
//! `super::dialog`'s.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use chrono::Local;

use super::format::{self, Unique, RESERVED_KEYS};
use super::settle::{self, FileStamp};
use super::{Folder, InboxError, MessageFile, NewMessage, Unparsed};
use crate::fsutil::{sync_dir, write_grace};

/// The largest page (reference A6: `limit` 1..100).
const MAX_PAGE: usize = 100;

/// The message folders of one workspace: root `<ws>/.cicy/messages`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mailbox {
    root: PathBuf,
}

/// What a claim may take from the inbox ([`Mailbox::claimable`]).
#[derive(Debug, Default)]
pub struct Claimable {
    /// Files whose writer has finished, parsed, with their stamps, oldest first.
    pub ready: Vec<(MessageFile, FileStamp)>,
    /// Finished files that could not be read or parsed.
    pub unparsed: Vec<Unparsed>,
    /// A file is still being written: look again after this long (the soonest it can be whole).
    pub wait: Option<Duration>,
}

/// One file read from a folder.
enum Loaded {
    Parsed(MessageFile),
    /// Gone between listing and reading (claimed or moved meanwhile).
    Gone,
    Bad {
        reason: String,
        mtime: Option<SystemTime>,
    },
}

impl Mailbox {
    /// The mailbox of the workspace `ws`.
    pub fn of_workspace(ws: &Path) -> Self {
        Mailbox { root: ws.join(".cicy").join("messages") }
    }

    /// `<ws>/.cicy/messages`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/inbox`: pending messages.
    pub fn inbox_dir(&self) -> PathBuf {
        self.root.join("inbox")
    }

    /// `<root>/inbox/archive`: claimed messages.
    pub fn archive_dir(&self) -> PathBuf {
        self.inbox_dir().join("archive")
    }

    /// `<root>/inbox/bad`: pending files that could not be parsed (kept, never deleted).
    pub fn bad_dir(&self) -> PathBuf {
        self.inbox_dir().join("bad")
    }

    /// `<root>/outbox`: messages the agent or serve sent.
    pub fn outbox_dir(&self) -> PathBuf {
        self.root.join("outbox")
    }

    /// `<root>/outbox/archive`: outbox messages a delivery moved on (cryo A1); read and paged,
    /// never written here.
    fn outbox_archive_dir(&self) -> PathBuf {
        self.outbox_dir().join("archive")
    }

    fn dir_of(&self, to: Folder) -> PathBuf {
        match to {
            Folder::Inbox => self.inbox_dir(),
            Folder::Outbox => self.outbox_dir(),
        }
    }

    /// Writes one message to `to`, stamped now (local time): `.<name>.tmp`, fsync, rename to
    /// `<name>`, fsync the folder (folders are created). Returns the file as parsed back.
    ///
    /// Errors: [`InboxError::EmptyBody`] for a blank body, [`InboxError::BadMetaKey`],
    /// [`InboxError::Io`] naming the file or folder.
    pub fn write(&self, to: Folder, msg: &NewMessage) -> Result<MessageFile, InboxError> {
        self.check(msg)?;
        self.write_rendered(to, &format::render(msg, Local::now().naive_local(), Unique::now()))
    }

    /// Writes `msg` to `to` once for the outbox command `key` (its first-claim ULID): the name
    /// and the stamp come from the key instead of the clock, so a retry of the command after a
    /// kill finds its file in the folder or its archive and writes nothing. Returns the file
    /// either way. Errors: those of [`Mailbox::write`].
    pub fn write_once(&self, to: Folder, msg: &NewMessage, key: ulid::Ulid) -> Result<MessageFile, InboxError> {
        self.check(msg)?;
        let millis = key.timestamp_ms();
        let at = chrono::DateTime::from_timestamp_millis(i64::try_from(millis).unwrap_or(i64::MAX)).unwrap_or_default();
        let random = key.random();
        // The key's 80 random bits spread over the parts a clock would fill.
        let unique =
            Unique { nanos: u128::from(millis) * 1_000_000 + random % 1_000_000, pid: (random >> 20) as u32, seq: (random >> 52) as u16 };
        let rendered = format::render(msg, at.with_timezone(&Local).naive_local(), unique);
        let archive = match to {
            Folder::Inbox => self.archive_dir(),
            Folder::Outbox => self.outbox_archive_dir(),
        };
        if [self.dir_of(to), archive].iter().any(|d| d.join(&rendered.name).exists()) {
            let path = self.dir_of(to).join(&rendered.name);
            return format::parse(&rendered.name, &rendered.content, None).map_err(|e| InboxError::Parse { path, reason: e.to_string() });
        }
        self.write_rendered(to, &rendered)
    }

    fn check(&self, msg: &NewMessage) -> Result<(), InboxError> {
        if msg.body.trim().is_empty() {
            return Err(InboxError::EmptyBody);
        }
        if format::sanitize_header(&msg.from).is_empty() {
            return Err(InboxError::EmptyFrom);
        }
        if let Some(key) = msg.meta.keys().find(|k| !is_meta_key(k)) {
            return Err(InboxError::BadMetaKey { key: key.clone() });
        }
        Ok(())
    }

    fn write_rendered(&self, to: Folder, rendered: &format::Rendered) -> Result<MessageFile, InboxError> {
        let dir = self.dir_of(to);
        fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        let tmp = dir.join(format!(".{}.tmp", rendered.name));
        let path = dir.join(&rendered.name);
        if let Err(e) = write_synced(&tmp, rendered.content.as_bytes()) {
            // Best effort: a dotfile left behind is ignored by every lister anyway.
            let _ = fs::remove_file(&tmp);
            return Err(io_err(&tmp, e));
        }
        fs::rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
        sync_dir(&dir).map_err(|e| io_err(&dir, e))?;
        format::parse(&rendered.name, &rendered.content, None).map_err(|e| InboxError::Parse { path, reason: e.to_string() })
    }

    /// Pending inbox files, oldest first ([`super::order_key`]; dotfiles, names not ending in
    /// `.md` and folders are ignored), and those that could not be read or parsed. A file gone between listing and
    /// reading is left out.
    pub fn pending(&self) -> Result<(Vec<MessageFile>, Vec<Unparsed>), InboxError> {
        let dir = self.inbox_dir();
        let (mut parsed, mut unparsed) = (Vec::new(), Vec::new());
        for name in list_messages(&dir)? {
            match load(&dir, &name) {
                Loaded::Parsed(m) => parsed.push(m),
                Loaded::Gone => {}
                Loaded::Bad { reason, mtime } => {
                    let young = is_young(mtime, SystemTime::now(), write_grace());
                    unparsed.push(Unparsed { name, error: reason, young });
                }
            }
        }
        parsed.sort_by(|a, b| super::order_key(a).cmp(&super::order_key(b)));
        Ok((parsed, unparsed))
    }

    /// The pending files a claim may take at `now` (docs/design.md §10): only those whose writer
    /// has finished ([`settle::settled`] with `grace`), each read once and kept only when its
    /// stamp did not change while it was read. A file still being written is left alone (not
    /// even read) and sets [`Claimable::wait`].
    ///
    /// Errors: [`InboxError::Io`] listing the folder.
    pub fn claimable(&self, now: SystemTime, grace: Duration) -> Result<Claimable, InboxError> {
        let dir = self.inbox_dir();
        let mut out = Claimable::default();
        let wait = |d: Duration, out: &mut Claimable| out.wait = Some(out.wait.map_or(d, |w| w.min(d)));
        for name in list_messages(&dir)? {
            let path = dir.join(&name);
            let meta = match fs::metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => {
                    out.unparsed.push(Unparsed { name, error: e.to_string(), young: false });
                    continue;
                }
            };
            if let Err(left) = settle::settled(&path, &meta, now, grace) {
                wait(left, &mut out);
                continue;
            }
            let stamp = FileStamp::of(&meta);
            match load(&dir, &name) {
                Loaded::Parsed(m) if fs::metadata(&path).is_ok_and(|after| FileStamp::of(&after) == stamp) => out.ready.push((m, stamp)),
                // Written again while it was read: whole only once that writer is done too.
                Loaded::Parsed(_) => wait(grace, &mut out),
                Loaded::Gone => {}
                Loaded::Bad { reason, mtime } => out.unparsed.push(Unparsed { name, error: reason, young: is_young(mtime, now, grace) }),
            }
        }
        out.ready.sort_by(|a, b| super::order_key(&a.0).cmp(&super::order_key(&b.0)));
        Ok(out)
    }

    /// Whether at least one pending `.md` file exists, without reading any (the 30 s rescan of
    /// every inbox). A folder that cannot be listed (other than missing) counts as pending, so
    /// the caller's full scan runs and reports the error.
    pub fn has_pending(&self) -> bool {
        let entries = match fs::read_dir(self.inbox_dir()) {
            Ok(entries) => entries,
            Err(e) => return e.kind() != io::ErrorKind::NotFound,
        };
        entries.into_iter().any(|entry| match entry {
            Ok(entry) => entry.file_name().to_str().is_some_and(is_listed_name) && !entry.file_type().is_ok_and(|t| t.is_dir()),
            Err(_) => true,
        })
    }

    /// The names `names` (pending, in claim order) get in `inbox/archive/`: each its own, unless
    /// the archive already holds that name (a reused name) or an earlier one of `names` takes
    /// it, then the first free `<stem>~<n>.md`. A claim records them before it moves anything,
    /// so the claimed file is always found under the name its obligation holds.
    pub fn archive_names(&self, names: &[String]) -> Vec<String> {
        let archive = self.archive_dir();
        let mut taken: Vec<String> = Vec::with_capacity(names.len());
        for name in names {
            let free = |n: &str| !taken.iter().any(|t| t == n) && !archive.join(n).exists();
            let target = if free(name) {
                name.clone()
            } else {
                let stem = name.strip_suffix(".md").unwrap_or(name);
                (1u32..).map(|n| format!("{stem}~{n}.md")).find(|n| free(n)).unwrap_or_else(|| name.clone())
            };
            taken.push(target);
        }
        taken
    }

    /// Moves inbox files to `inbox/archive/`, each `(inbox name, archive name)`, then fsyncs
    /// both folders. Idempotent: a name already moved (after a kill -9 the recovery runs it
    /// again) or in neither folder is skipped.
    ///
    /// Errors: [`InboxError::BadName`] before anything moves, [`InboxError::Io`].
    pub fn archive(&self, moves: &[(String, String)]) -> Result<(), InboxError> {
        self.move_between(&self.inbox_dir(), &self.archive_dir(), moves)
    }

    /// Moves claimed files back from `inbox/archive/` to `inbox/`, each `(inbox name, archive
    /// name)`: a claim released before its turn could start. A file saved meanwhile under the
    /// inbox name is not overwritten: the returning one takes the first free `<stem>~<n>.md`.
    ///
    /// Errors: [`InboxError::BadName`] before anything moves, [`InboxError::Io`].
    pub fn unarchive(&self, moves: &[(String, String)]) -> Result<(), InboxError> {
        let back: Vec<(String, String)> = moves.iter().map(|(inbox, archived)| (archived.clone(), inbox.clone())).collect();
        self.move_between(&self.archive_dir(), &self.inbox_dir(), &back)
    }

    fn move_between(&self, from_dir: &Path, to_dir: &Path, moves: &[(String, String)]) -> Result<(), InboxError> {
        if let Some(bad) = moves.iter().flat_map(|(a, b)| [a, b]).find(|n| !is_listed_name(n)) {
            return Err(InboxError::BadName { name: bad.clone() });
        }
        if moves.is_empty() {
            return Ok(());
        }
        fs::create_dir_all(to_dir).map_err(|e| io_err(to_dir, e))?;
        for (from, to) in moves {
            move_if_present(&from_dir.join(from), &free_target(from_dir, to_dir, from, to))?;
            settle::forget(&from_dir.join(from));
        }
        sync_dir(from_dir).map_err(|e| io_err(from_dir, e))?;
        sync_dir(to_dir).map_err(|e| io_err(to_dir, e))
    }

    /// Moves an unparsable inbox file to `inbox/bad/` (kept for the user, as `<stem>~<n>.md` when
    /// the name is taken there; fsyncs both folders). A file already gone is fine.
    pub fn move_to_bad(&self, name: &str) -> Result<(), InboxError> {
        if !is_listed_name(name) {
            return Err(InboxError::BadName { name: name.to_string() });
        }
        let (inbox, bad) = (self.inbox_dir(), self.bad_dir());
        fs::create_dir_all(&bad).map_err(|e| io_err(&bad, e))?;
        move_if_present(&inbox.join(name), &free_target(&inbox, &bad, name, name))?;
        settle::forget(&inbox.join(name));
        sync_dir(&inbox).map_err(|e| io_err(&inbox, e))?;
        sync_dir(&bad).map_err(|e| io_err(&bad, e))
    }

    /// Reads one message by name from `inbox/`, then `inbox/archive/` (where it lands when
    /// claimed meanwhile), `outbox/`, `outbox/archive/`.
    ///
    /// Errors: [`InboxError::BadName`], [`InboxError::Parse`], [`InboxError::NotFound`].
    pub fn read(&self, name: &str) -> Result<MessageFile, InboxError> {
        if !is_listed_name(name) {
            return Err(InboxError::BadName { name: name.to_string() });
        }
        for dir in [self.inbox_dir(), self.archive_dir(), self.outbox_dir(), self.outbox_archive_dir()] {
            match load(&dir, name) {
                Loaded::Parsed(m) => return Ok(m),
                Loaded::Gone => {}
                Loaded::Bad { reason, .. } => return Err(InboxError::Parse { path: dir.join(name), reason }),
            }
        }
        Err(InboxError::NotFound { name: name.to_string(), root: self.root.clone() })
    }

    /// Reads one claimed message by its name in `inbox/archive/`.
    ///
    /// Errors: [`InboxError::BadName`], [`InboxError::Parse`], [`InboxError::NotFound`].
    pub fn read_archived(&self, name: &str) -> Result<MessageFile, InboxError> {
        if !is_listed_name(name) {
            return Err(InboxError::BadName { name: name.to_string() });
        }
        let dir = self.archive_dir();
        match load(&dir, name) {
            Loaded::Parsed(m) => Ok(m),
            Loaded::Gone => Err(InboxError::NotFound { name: name.to_string(), root: self.root.clone() }),
            Loaded::Bad { reason, .. } => Err(InboxError::Parse { path: dir.join(name), reason }),
        }
    }

    /// One page of every message (`inbox/`, `inbox/archive/`, `outbox/`, `outbox/archive/`),
    /// ordered by file name then inbox before outbox (reference A6): the newest `limit` before
    /// the cursor `"<file name>|<inbox|outbox>"` (exclusive; `None`: the newest), returned
    /// oldest first. Unparsable files are left out (logged).
    ///
    /// Errors: [`InboxError::BadLimit`] outside 1..=100, [`InboxError::BadCursor`],
    /// [`InboxError::Io`].
    pub fn page(&self, before: Option<&str>, limit: usize) -> Result<Vec<(Folder, MessageFile)>, InboxError> {
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(InboxError::BadLimit { limit });
        }
        let cursor = before.map(parse_cursor).transpose()?;
        let mut all = self.list_all()?;
        if let Some(c) = &cursor {
            all.retain(|(folder, name, _)| (name.as_str(), *folder) < (c.1.as_str(), c.0));
        }
        // From the newest back, so unparsable files do not make the page short.
        let mut page = Vec::with_capacity(limit);
        for (folder, name, dir) in all.into_iter().rev() {
            if page.len() == limit {
                break;
            }
            if let Some(m) = self.load_entry(&name, &dir) {
                page.push((folder, m));
            }
        }
        page.reverse();
        Ok(page)
    }

    /// `(folder, name, dir)` of every message file, sorted by name then folder, each once.
    pub(super) fn list_all(&self) -> Result<Vec<(Folder, String, PathBuf)>, InboxError> {
        let mut all = Vec::new();
        // inbox/ before inbox/archive/: a file claimed between the two listings is seen twice
        // (deduplicated below) rather than missed.
        for (folder, dir) in [
            (Folder::Inbox, self.inbox_dir()),
            (Folder::Inbox, self.archive_dir()),
            (Folder::Outbox, self.outbox_dir()),
            (Folder::Outbox, self.outbox_archive_dir()),
        ] {
            all.extend(list_messages(&dir)?.into_iter().map(|n| (folder, n, dir.clone())));
        }
        all.sort_by(|a, b| (&a.1, a.0).cmp(&(&b.1, b.0)));
        all.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
        Ok(all)
    }

    /// Reads listed files, leaving out the unparsable (logged) and the gone.
    pub(super) fn load_listed(&self, listed: Vec<(Folder, String, PathBuf)>) -> Vec<(Folder, MessageFile)> {
        listed.into_iter().filter_map(|(folder, name, dir)| Some((folder, self.load_entry(&name, &dir)?))).collect()
    }

    /// Reads one listed file; one claimed since the listing is read from `inbox/archive/`.
    fn load_entry(&self, name: &str, dir: &Path) -> Option<MessageFile> {
        let mut loaded = load(dir, name);
        if matches!(loaded, Loaded::Gone) && dir == self.inbox_dir() {
            loaded = load(&self.archive_dir(), name);
        }
        match loaded {
            Loaded::Parsed(m) => Some(m),
            Loaded::Gone => None,
            Loaded::Bad { reason, .. } => {
                tracing::warn!("skipping {}: {reason}", dir.join(name).display());
                None
            }
        }
    }
}

/// A name the listers take: ends in `.md`, does not start with `.`, has no `/` or NUL.
fn is_listed_name(name: &str) -> bool {
    name.ends_with(".md") && !name.starts_with('.') && !name.contains(['/', '\0'])
}

/// A meta key that cannot forge or end the front matter and is not a field.
fn is_meta_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !RESERVED_KEYS.contains(&key)
}

/// `"<file name>|<inbox|outbox>"` (reference A6); the name is everything before the last `|`.
fn parse_cursor(cursor: &str) -> Result<(Folder, String), InboxError> {
    let bad = || InboxError::BadCursor { cursor: cursor.to_string() };
    let (name, folder) = cursor.rsplit_once('|').ok_or_else(bad)?;
    let folder = match folder {
        "inbox" => Folder::Inbox,
        "outbox" => Folder::Outbox,
        _ => return Err(bad()),
    };
    if name.is_empty() {
        return Err(bad());
    }
    Ok((folder, name.to_string()))
}

/// Listed names in `dir` (see [`is_listed_name`]; folders and names that are not UTF-8 are
/// skipped), sorted. A missing folder has none.
fn list_messages(dir: &Path) -> Result<Vec<String>, InboxError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_err(dir, e))?;
        let Ok(name) = entry.file_name().into_string() else {
            tracing::warn!("skipping a file name that is not UTF-8 in {}", dir.display());
            continue;
        };
        // A symlink counts by what it points to.
        if is_listed_name(&name) && !entry.path().is_dir() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

fn load(dir: &Path, name: &str) -> Loaded {
    let path = dir.join(name);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Loaded::Gone,
        Err(e) => return Loaded::Bad { reason: e.to_string(), mtime: mtime(&path) },
    };
    let mtime = mtime(&path);
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            return Loaded::Bad { reason: format!("not UTF-8 (invalid byte at offset {at})"), mtime };
        }
    };
    match format::parse(name, &text, mtime) {
        Ok(m) => Loaded::Parsed(m),
        Err(e) => Loaded::Bad { reason: e.to_string(), mtime },
    }
}

fn mtime(path: &Path) -> Option<SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Writes a new `.<name>.tmp`. One already there is a killed writer's of the same message
/// (the name is the message's own: its clock stamp and pid, or its outbox command's key), so
/// it is replaced: a retried command must not fail on what its first run left.
fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let create = || OpenOptions::new().write(true).create_new(true).open(path);
    let mut f = match create() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_file(path)?;
            create()?
        }
        other => other?,
    };
    f.write_all(bytes)?;
    f.sync_all()
}

/// Where `name` moves from `from_dir` into `to_dir` as `to`: `to_dir/to`, unless both that
/// and `from_dir/name` exist (a reused name, never a half-done move: a rename is atomic), then
/// the first free `<stem>~<n>.md` of `to`, so no file is overwritten.
fn free_target(from_dir: &Path, to_dir: &Path, name: &str, to: &str) -> PathBuf {
    let target = to_dir.join(to);
    if !target.exists() || !from_dir.join(name).exists() {
        return target;
    }
    let stem = to.strip_suffix(".md").unwrap_or(to);
    (1u32..).map(|n| to_dir.join(format!("{stem}~{n}.md"))).find(|p| !p.exists()).unwrap_or(target)
}

/// Changed less than `grace` before `now` (a future mtime counts as now; none: not young).
fn is_young(mtime: Option<SystemTime>, now: SystemTime, grace: Duration) -> bool {
    mtime.is_some_and(|t| now.duration_since(t).map_or(true, |age| age < grace))
}

/// Renames `from` to `to`; a missing `from` (moved already, or never there) is no error.
fn move_if_present(from: &Path, to: &Path) -> Result<(), InboxError> {
    match fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(from, e)),
    }
}

fn io_err(path: &Path, source: io::Error) -> InboxError {
    InboxError::Io { path: path.to_path_buf(), source }
}

#[cfg(test)]
#[path = "mailbox_tests.rs"]
mod tests;
