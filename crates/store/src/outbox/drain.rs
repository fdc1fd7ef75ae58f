//! The consumer (Choruz B4; docs/design.md §11 "Consumer"): one pass over `new/` that claims each
//! command by a rename, parses it, hands it to the caller's handler and deletes it.
//!
//! Synchronous file I/O only: serve calls it through `spawn_blocking`. Several consumers may
//! drain one outbox at once; the claim rename decides which one runs a command.

use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::command::{OutboxCommand, Rejection};
use super::{new_id, Outbox};
use crate::fsutil::write_grace;

/// A `.processing` file at least this old belongs to a consumer that died; it is claimed
/// again as `….retry-<ulid>.processing` (Choruz B4 `PROCESSING_STALE_AFTER`).
pub const PROCESSING_STALE_AFTER: Duration = Duration::from_secs(60);

/// The reply to a command of a type nobody knows (Choruz B7 "Unknown types").
pub const UNKNOWN_TYPE_REPLY: &str = "outbox: unknown command type";

/// One claimed, parsed command handed to the handler.
#[derive(Debug)]
pub struct Claimed {
    /// The name it was queued under, e.g. `cmd-00000000000000000001-cmd-a1B2c3.json`.
    pub name: String,
    /// The claimed file, `new/<name>.<ulid>.processing` (deleted after the handler returns).
    pub path: PathBuf,
    /// The ULID of the command's first claim, kept by every later claim of the same file
    /// (`….<ulid>.processing.retry-<ulid2>.processing`): the key a handler makes its effect
    /// once with, so a retry after a kill finds the effect already there.
    pub id: String,
    /// The JSON object as written (after the `\"` repair, if that was needed).
    pub raw: serde_json::Map<String, Value>,
    pub command: OutboxCommand,
}

/// What one drain did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DrainStats {
    /// Files that parsed and had a `type` (unknown types and rejected commands included).
    pub processed: usize,
    /// `.processing` files claimed again after [`PROCESSING_STALE_AFTER`].
    pub reclaimed: usize,
    /// Files another consumer holds or took first.
    pub skipped: usize,
    /// Empty or whitespace-only files, and objects without `type`: deleted unrun.
    pub dropped: usize,
    /// Unparsable files, now in `bad/` (serve reports each as a `system` event).
    pub bad: Vec<PathBuf>,
    /// Result envelopes written for rejected task commands.
    pub results: Vec<PathBuf>,
    /// The non-empty replies (handler replies, rejection and unknown-type texts) in file
    /// order, joined by `"\n\n"` (B4 reply aggregation).
    pub reply: String,
}

impl DrainStats {
    fn add_reply(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if !self.reply.is_empty() {
            self.reply.push_str("\n\n");
        }
        self.reply.push_str(text);
    }
}

impl Outbox {
    /// Runs every queued command once, in byte order of the names in `new/` (a missing `new/`
    /// is an empty queue). `handler` runs a command and returns its reply text (`None` or
    /// `""`: nothing to say); task commands write their own envelope with
    /// [`Outbox::write_result`]. `stale_after` is [`PROCESSING_STALE_AFTER`] outside tests.
    ///
    /// The command file is deleted after the handler returns, whatever it did: a crash before
    /// that runs it again after `stale_after` with the same [`Claimed::id`], which the handler
    /// keys its effect on so the retry only finishes the bookkeeping. Errors on single files
    /// are logged and the pass goes on.
    pub fn drain(&self, stale_after: Duration, mut handler: impl FnMut(&Claimed) -> Option<String>) -> DrainStats {
        let mut stats = DrainStats::default();
        let new_dir = self.new_dir();
        let mut names: Vec<String> = match fs::read_dir(&new_dir) {
            Ok(entries) => entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return stats,
            Err(e) => {
                tracing::warn!(dir = %new_dir.display(), error = %e, "outbox: cannot list");
                return stats;
            }
        };
        names.retain(|n| n.ends_with(".json") || n.ends_with(".processing"));
        names.sort_unstable();
        for name in names {
            let Some((claimed, id)) = claim(&new_dir, &name, stale_after, &mut stats) else { continue };
            self.process(&name, &claimed, &id, &mut stats, &mut handler);
        }
        stats
    }

    /// Reads, parses and runs one claimed file, then deletes it.
    fn process(&self, name: &str, path: &Path, id: &str, stats: &mut DrainStats, handler: &mut impl FnMut(&Claimed) -> Option<String>) {
        let text = match fs::read_to_string(path) {
            Ok(text) if !text.trim().is_empty() => text,
            // Not UTF-8: garbage like unparsable JSON, kept for the user.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                self.move_to_bad(path, stats);
                return;
            }
            // B4: empty, whitespace-only and unreadable files are deleted and nothing runs.
            _ => {
                stats.dropped += 1;
                remove(path);
                return;
            }
        };
        let Some(value) = parse(&text) else {
            self.move_to_bad(path, stats);
            return;
        };
        let kind = value.get("type").and_then(Value::as_str).filter(|t| !t.trim().is_empty());
        let (Some(kind), Value::Object(raw)) = (kind.map(str::to_string), value) else {
            // B7: no type (or not an object at all) → dropped silently.
            stats.dropped += 1;
            remove(path);
            return;
        };
        stats.processed += 1;
        match OutboxCommand::parse(&kind, &raw) {
            Ok(Some(OutboxCommand::Unknown(kind))) => {
                tracing::warn!(file = name, kind, "{UNKNOWN_TYPE_REPLY}");
                stats.add_reply(UNKNOWN_TYPE_REPLY);
            }
            Ok(Some(command)) => {
                let claimed = Claimed { name: name.to_string(), path: path.to_path_buf(), id: id.to_string(), raw, command };
                if let Some(reply) = handler(&claimed) {
                    stats.add_reply(&reply);
                }
            }
            Ok(None) => {}
            Err(Rejection::Reply(text)) => stats.add_reply(&text),
            Err(Rejection::Task(envelope)) => match self.write_result(id, &envelope) {
                Ok(written) => stats.results.push(written),
                Err(e) => tracing::warn!(file = name, error = %e, "outbox: cannot write the result envelope"),
            },
        }
        remove(path);
    }

    /// Moves an unparsable claimed file to `bad/` under its claimed name (unique by its ulid).
    fn move_to_bad(&self, path: &Path, stats: &mut DrainStats) {
        let bad_dir = self.bad_dir();
        let target = bad_dir.join(path.file_name().unwrap_or_default());
        match fs::create_dir_all(&bad_dir).and_then(|()| fs::rename(path, &target)) {
            Ok(()) => stats.bad.push(target),
            Err(e) => {
                // Never leave it to be reclaimed and fail again every minute.
                tracing::warn!(file = %path.display(), error = %e, "outbox: cannot move an unparsable command to bad/; deleting it");
                remove(path);
            }
        }
    }
}

/// Claims `new/<name>` for this consumer and returns the claimed path and the command's
/// first-claim id, or `None` (counted in `stats.skipped`) when another consumer holds or took
/// it, or its writer may not be done.
fn claim(new_dir: &Path, name: &str, stale_after: Duration, stats: &mut DrainStats) -> Option<(PathBuf, String)> {
    let path = new_dir.join(name);
    let target = if name.ends_with(".json") {
        if is_unfinished(&path, SystemTime::now(), write_grace()) {
            stats.skipped += 1;
            return None;
        }
        let id = new_id();
        (new_dir.join(format!("{name}.{id}.processing")), id)
    } else {
        let age = fs::metadata(&path).and_then(|m| m.modified()).ok().map(|t| SystemTime::now().duration_since(t).unwrap_or_default());
        if age.is_none_or(|age| age < stale_after) {
            stats.skipped += 1;
            return None;
        }
        // A `.processing` file not made by a claim (no id in its name) gets a fresh one.
        let id = first_claim_id(name).unwrap_or_else(new_id);
        (new_dir.join(format!("{name}.retry-{}.processing", new_id())), id)
    };
    // The mtime is set *before* the rename: a rename keeps the old mtime, and a second consumer
    // listing between a rename and a later touch would take a long-queued file for a stale
    // claim and run it twice. Touching a file another consumer then wins is harmless.
    let (target, id) = target;
    let claimed = touch(&path).and_then(|()| fs::rename(&path, &target));
    match claimed {
        Ok(()) => {
            if name.ends_with(".processing") {
                stats.reclaimed += 1;
            }
            Some((target, id))
        }
        Err(e) => {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(file = %path.display(), error = %e, "outbox: cannot claim");
            }
            stats.skipped += 1;
            None
        }
    }
}

/// A file written in place a moment ago may still be getting its bytes (the producer
/// renames; a hand-written `printf … > x.json` does not): claimed now, an empty one would be
/// deleted as empty and a half one moved to `bad/` while its writer goes on. So a file younger
/// than `grace` that is empty or not yet a JSON value waits for a later pass; a whole command
/// runs at once, and one still broken after `grace` is judged as it is.
fn is_unfinished(path: &Path, now: SystemTime, grace: Duration) -> bool {
    let young = fs::metadata(path).is_ok_and(|m| m.modified().is_ok_and(|t| now.duration_since(t).unwrap_or_default() < grace));
    young && fs::read_to_string(path).map_or(true, |text| text.trim().is_empty() || parse(&text).is_none())
}

/// The ULID the first claim put after `.json.` in a claimed name, e.g. `A` in
/// `cmd-…-cmd-x.json.A.processing.retry-B.processing`.
pub fn first_claim_id(name: &str) -> Option<String> {
    let (_, rest) = name.split_once(".json.")?;
    let id = rest.split('.').next()?;
    id.parse::<ulid::Ulid>().is_ok().then(|| id.to_string())
}

/// Sets the mtime of `path` to now.
fn touch(path: &Path) -> io::Result<()> {
    OpenOptions::new().write(true).open(path)?.set_modified(SystemTime::now())
}

/// The JSON in `text`, retried with every `\"` replaced by `"` (double-escaped shell JSON, B4).
fn parse(text: &str) -> Option<Value> {
    serde_json::from_str(text).ok().or_else(|| serde_json::from_str(&text.replace("\\\"", "\"")).ok())
}

fn remove(path: &Path) {
    if let Err(e) = fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(file = %path.display(), error = %e, "outbox: cannot delete a processed command");
        }
    }
}

#[cfg(test)]
#[path = "drain_tests.rs"]
mod tests;
