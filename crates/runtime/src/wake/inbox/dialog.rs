//! The dialog transcript (reference cryo_choruz.md A9 "Transcript rendering"): claimed inbox
//! messages and sent ones, oldest first, with the "new since last session" marker and the
//! `--last N | --all | --since <time>` filters.
//!
//! Owns the rendering only: it reads through [`Mailbox`] and never moves a file.

use chrono::NaiveDateTime;

use super::format::TIMESTAMP_FORMAT;
use super::{Folder, InboxError, Mailbox, MessageFile};

/// The line before the first message that is new this session (cryo A9).
pub(super) const NEW_MARKER: &str = "────────── new since last session ──────────";

/// Which part of the transcript to show (cryo A9; the CLI flags are mutually exclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DialogFilter {
    /// The last N messages (cryo default 20).
    Last(usize),
    All,
    /// Messages stamped at or after this local time: `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS]` or
    /// `YYYY-MM-DD HH:MM[:SS]`.
    Since(String),
}

impl Default for DialogFilter {
    fn default() -> Self {
        DialogFilter::Last(20)
    }
}

impl DialogFilter {
    /// The flag that selects this filter, for the "omitted by" line.
    fn flag(&self) -> &'static str {
        match self {
            DialogFilter::Last(_) => "--last",
            DialogFilter::All => "--all",
            DialogFilter::Since(_) => "--since",
        }
    }
}

/// Every dialog message: `inbox/archive/`, `outbox/` and `outbox/archive/` (pending inbox files
/// are not dialog yet), ordered by timestamp and the name's nanoseconds, then inbox before
/// outbox, then file name (cryo A9).
fn history(mb: &Mailbox) -> Result<Vec<(Folder, MessageFile)>, InboxError> {
    let inbox = mb.inbox_dir();
    let listed = mb.list_all()?.into_iter().filter(|(_, _, dir)| *dir != inbox).collect();
    let mut all = mb.load_listed(listed);
    all.sort_by(|(fa, a), (fb, b)| {
        let (ka, kb) = (super::order_key(a), super::order_key(b));
        (ka.0, ka.1, fa, ka.2).cmp(&(kb.0, kb.1, fb, kb.2))
    });
    Ok(all)
}

/// Where the shown messages start in `history`: every filter keeps a suffix of it.
fn start_of(filter: &DialogFilter, history: &[(Folder, MessageFile)]) -> Result<usize, InboxError> {
    match filter {
        DialogFilter::Last(n) => Ok(history.len().saturating_sub(*n)),
        DialogFilter::All => Ok(0),
        DialogFilter::Since(value) => {
            let cutoff = parse_since(value)?.format(TIMESTAMP_FORMAT).to_string();
            // Timestamps are all in TIMESTAMP_FORMAT, so text order is time order.
            Ok(history.iter().position(|(_, m)| m.timestamp >= cutoff).unwrap_or(history.len()))
        }
    }
}

fn parse_since(value: &str) -> Result<NaiveDateTime, InboxError> {
    let v = value.trim();
    ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(v, f).ok())
        .or_else(|| chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d").ok().and_then(|d| d.and_hms_opt(0, 0, 0)))
        .ok_or_else(|| InboxError::BadSince { value: value.to_string() })
}

/// The dialog messages `filter` shows, oldest first, with their box.
///
/// Errors: [`InboxError::BadSince`], [`InboxError::Io`].
pub fn dialog_messages(mb: &Mailbox, filter: &DialogFilter) -> Result<Vec<(Folder, MessageFile)>, InboxError> {
    let mut all = history(mb)?;
    let start = start_of(filter, &all)?;
    Ok(all.split_off(start))
}

/// The transcript (cryo A9): per message `[YYYY-MM-DD HH:MM] from: <from>\n<body>\n\n`; the
/// [`NEW_MARKER`] line before the first shown message whose name is in `new`; when the filter
/// hid every new message, the marker and `(N new messages omitted by --last|--all|--since)` at
/// the end; `(no dialog history yet)` when there is no message at all; `(no messages shown by
/// <flag …>)` when the filter hides them all and none is new.
///
/// Errors: [`InboxError::BadSince`], [`InboxError::Io`].
pub fn dialog(mb: &Mailbox, filter: &DialogFilter, new: &[String]) -> Result<String, InboxError> {
    let all = history(mb)?;
    // Before the empty check, so a bad --since is refused even with no history.
    let shown = &all[start_of(filter, &all)?..];
    if all.is_empty() {
        return Ok("(no dialog history yet)\n".to_string());
    }
    let is_new = |m: &MessageFile| new.contains(&m.name);
    let mut out = String::new();
    let mut marked = false;
    for (_, m) in shown {
        if !marked && is_new(m) {
            out.push_str(NEW_MARKER);
            out.push('\n');
            marked = true;
        }
        out.push_str(&format!("[{}] from: {}\n{}\n\n", minute(&m.timestamp), m.from, m.body));
    }
    let new_total = all.iter().filter(|(_, m)| is_new(m)).count();
    if new_total > 0 && !marked {
        out.push_str(&format!("{NEW_MARKER}\n({new_total} new messages omitted by {})\n", filter.flag()));
    } else if shown.is_empty() {
        let how = match filter {
            DialogFilter::Last(n) => format!("--last {n}"),
            DialogFilter::All => "--all".to_string(),
            DialogFilter::Since(v) => format!("--since {v}"),
        };
        out.push_str(&format!("(no messages shown by {how})\n"));
    }
    Ok(out)
}

/// `YYYY-MM-DD HH:MM` of a front matter timestamp.
fn minute(timestamp: &str) -> String {
    match NaiveDateTime::parse_from_str(timestamp, TIMESTAMP_FORMAT) {
        Ok(t) => t.format("%Y-%m-%d %H:%M").to_string(),
        Err(_) => timestamp.to_string(),
    }
}

#[cfg(test)]
#[path = "dialog_tests.rs"]
mod tests;
