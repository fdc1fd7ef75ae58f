//! The write loop's buffer: `.cicy/memory/.pending.jsonl` (DESIGN.md §8 "Write").
//!
//! Owns recording finished turns (`{user, answer, tools}`, each cut to 2000 bytes on a character
//! boundary), the explicit keywords, when a flush is due, marking turns whose flush failed (so
//! every process backs off for one idle period instead of calling a failing recognizer in a
//! loop), and removing the turns a flush consumed. The file is one JSON object per line, rewritten atomically under an advisory lock
//! (`.lock`, flock) so a one-shot process and a resident one never lose each other's turns.
//! Must not touch memory files or MEMORY.md, and never calls the gateway.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{cut_at_char_boundary, MemoryError, MemorySettings};
use crate::fsutil;

/// The buffer file inside the memory folder.
pub const FILE: &str = ".pending.jsonl";
/// The lock file guarding read-modify-write of the buffer.
pub const LOCK_FILE: &str = ".lock";
/// cicy: user text, answer text and tool names are each cut to 2000 bytes.
pub const FIELD_CAP_BYTES: usize = 2000;
/// Turns kept at most while flushes keep failing (ours; cicy has no bound): the oldest go first,
/// so a recognizer that never answers cannot grow the buffer or its input without limit.
pub const MAX_PENDING: usize = 24;
/// cicy: a user text containing one of these (case-insensitive) flushes at once.
pub const KEYWORDS: [&str; 6] = ["记住", "别忘了", "记下来", "记一下", "remember", "don't forget"];

/// One buffered turn, as stored on its own line of `.pending.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingTurn {
    /// UUIDv4; a flush removes exactly the turns it read.
    pub id: String,
    /// When the turn ended, milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub user: String,
    pub answer: String,
    pub tools: Vec<String>,
    /// The user text contained a keyword: flush at once (and again after a failed flush).
    #[serde(default)]
    pub explicit: bool,
    /// When a flush that read this turn last failed (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at_ms: Option<u64>,
}

impl PendingTurn {
    /// A turn ended at `at`, with the 2000-byte caps applied.
    pub fn new(user: &str, answer: &str, tools: &[String], at: SystemTime) -> Self {
        let mut kept = Vec::new();
        let mut used = 0;
        for t in tools {
            // The names share one 2000-byte budget, counted as joined by ", ".
            let cost = t.len() + if kept.is_empty() { 0 } else { 2 };
            if used + cost > FIELD_CAP_BYTES {
                break;
            }
            used += cost;
            kept.push(t.clone());
        }
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            at_ms: millis(at),
            user: cut_at_char_boundary(user, FIELD_CAP_BYTES).to_string(),
            answer: cut_at_char_boundary(answer, FIELD_CAP_BYTES).to_string(),
            tools: kept,
            explicit: is_explicit(user),
            failed_at_ms: None,
        }
    }

    pub fn at(&self) -> SystemTime {
        from_millis(self.at_ms)
    }
}

/// True when `text` asks to remember something: contains 记住, 别忘了, 记下来, 记一下,
/// `remember` or `don't forget` (also with a typographic apostrophe), ignoring case.
pub fn is_explicit(text: &str) -> bool {
    let lower = text.to_lowercase().replace('\u{2019}', "'");
    KEYWORDS.iter().any(|k| lower.contains(k))
}

/// Why a flush is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushReason {
    /// A buffered user text contains a keyword.
    Explicit,
    /// The buffer holds `batch_turns` turns (cicy: 6).
    Batch,
    /// The oldest buffered turn waited `max_wait` (cicy: 20 min).
    Oldest,
    /// No new turn for `idle` (cicy: 5 min).
    Idle,
    /// Asked for (`cicy-agent memory <id> flush`).
    Forced,
}

impl FlushReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FlushReason::Explicit => "explicit",
            FlushReason::Batch => "batch",
            FlushReason::Oldest => "oldest",
            FlushReason::Idle => "idle",
            FlushReason::Forced => "forced",
        }
    }
}

/// Whether `turns` must be flushed at `now`, and why (first matching reason).
pub fn due(turns: &[PendingTurn], s: &MemorySettings, now: SystemTime) -> Option<FlushReason> {
    if next_due(turns, s)? > now {
        return None;
    }
    Some(if turns.iter().any(|t| t.explicit) {
        FlushReason::Explicit
    } else if turns.len() >= s.batch_turns {
        FlushReason::Batch
    } else if turns.first().is_some_and(|t| t.at() + s.max_wait <= now) {
        FlushReason::Oldest
    } else {
        FlushReason::Idle
    })
}

/// When `turns` become due: at once for a keyword or a full batch, else the earlier of the
/// oldest turn + `max_wait` and the newest + `idle`. After a failed flush, not before one idle
/// period has passed — unless a new keyword turn asks again. `None` for an empty buffer.
pub fn next_due(turns: &[PendingTurn], s: &MemorySettings) -> Option<SystemTime> {
    let (first, last) = (turns.first()?, turns.last()?);
    if turns.iter().any(|t| t.explicit && t.failed_at_ms.is_none()) {
        return Some(first.at());
    }
    let due = if turns.iter().any(|t| t.explicit) || turns.len() >= s.batch_turns {
        first.at()
    } else {
        (first.at() + s.max_wait).min(last.at() + s.idle)
    };
    let backoff = turns.iter().filter_map(|t| t.failed_at_ms).max().map(|f| from_millis(f) + s.idle);
    Some(backoff.map_or(due, |b| due.max(b)))
}

/// The buffer as read: its turns, oldest first, and where an unreadable file was moved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    pub turns: Vec<PendingTurn>,
    pub moved_aside: Option<PathBuf>,
}

/// What [`append`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Appended {
    /// The buffer after the append, oldest first.
    pub turns: Vec<PendingTurn>,
    /// Oldest turns dropped to stay within [`MAX_PENDING`].
    pub dropped: usize,
    pub moved_aside: Option<PathBuf>,
}

/// Reads the buffer in `dir`. A file that does not parse is moved aside (never overwritten)
/// and the buffer starts empty. Without a buffer file nothing is created (listing an agent's
/// memory must not make its folder); the file only ever appears by an atomic rename, so
/// checking for it before taking the lock is safe.
pub fn load(dir: &Path) -> Result<Loaded, MemoryError> {
    if !dir.join(FILE).exists() {
        return Ok(Loaded::default());
    }
    with_lock(dir, || read_unlocked(dir))
}

/// Adds `turn` to the buffer in `dir`.
pub fn append(dir: &Path, turn: PendingTurn) -> Result<Appended, MemoryError> {
    with_lock(dir, || {
        let Loaded { mut turns, moved_aside } = read_unlocked(dir)?;
        turns.push(turn);
        let dropped = turns.len().saturating_sub(MAX_PENDING);
        turns.drain(..dropped);
        write_unlocked(dir, &turns)?;
        Ok(Appended { turns, dropped, moved_aside })
    })
}

/// Removes the turns with these ids (those a flush consumed); turns added meanwhile stay. The
/// file is deleted when nothing is left.
pub fn remove(dir: &Path, ids: &[String]) -> Result<(), MemoryError> {
    with_lock(dir, || {
        let Loaded { turns, .. } = read_unlocked(dir)?;
        let rest: Vec<PendingTurn> = turns.into_iter().filter(|t| !ids.contains(&t.id)).collect();
        write_unlocked(dir, &rest)
    })
}

/// Marks the turns with these ids as read by a flush that failed at `at`.
pub fn mark_failed(dir: &Path, ids: &[String], at: SystemTime) -> Result<(), MemoryError> {
    with_lock(dir, || {
        let Loaded { mut turns, .. } = read_unlocked(dir)?;
        for t in turns.iter_mut().filter(|t| ids.contains(&t.id)) {
            t.failed_at_ms = Some(millis(at));
        }
        write_unlocked(dir, &turns)
    })
}

fn read_unlocked(dir: &Path) -> Result<Loaded, MemoryError> {
    let p = dir.join(FILE);
    let bytes = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::default()),
        Err(e) => return Err(MemoryError::io(&p, e)),
    };
    let parsed: Result<Vec<PendingTurn>, String> = std::str::from_utf8(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|text| {
            text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).map_err(|e| e.to_string())).collect()
        });
    match parsed {
        Ok(turns) => Ok(Loaded { turns, moved_aside: None }),
        Err(message) => {
            tracing::warn!(path = %p.display(), %message, "memory buffer does not parse; moving it aside");
            let moved = fsutil::move_aside(&p).map_err(|e| MemoryError::io(&p, e))?;
            Ok(Loaded { turns: Vec::new(), moved_aside: Some(moved) })
        }
    }
}

fn write_unlocked(dir: &Path, turns: &[PendingTurn]) -> Result<(), MemoryError> {
    let p = dir.join(FILE);
    if turns.is_empty() {
        return match std::fs::remove_file(&p) {
            Ok(()) => fsutil::sync_dir(dir).map_err(|e| MemoryError::io(dir, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(MemoryError::io(&p, e)),
        };
    }
    let mut out = Vec::new();
    for t in turns {
        serde_json::to_writer(&mut out, t).map_err(|e| MemoryError::io(&p, e.into()))?;
        out.push(b'\n');
    }
    fsutil::write_atomic(&p, &out).map_err(|e| MemoryError::io(&p, e))
}

/// Runs `f` holding an exclusive flock on `<dir>/.lock` (created with the folder if missing).
/// The lock is released when the file closes, also if `f` fails.
fn with_lock<T>(dir: &Path, f: impl FnOnce() -> Result<T, MemoryError>) -> Result<T, MemoryError> {
    std::fs::create_dir_all(dir).map_err(|e| MemoryError::io(dir, e))?;
    let p = dir.join(LOCK_FILE);
    let file = std::fs::File::options().create(true).truncate(false).write(true).open(&p).map_err(|e| MemoryError::io(&p, e))?;
    // SAFETY: flock on a descriptor we own for the duration of the call; no memory is shared.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    if rc != 0 {
        return Err(MemoryError::io(&p, std::io::Error::last_os_error()));
    }
    let result = f();
    drop(file);
    result
}

fn from_millis(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> MemorySettings {
        MemorySettings::default()
    }

    fn turn_at(user: &str, at: SystemTime) -> PendingTurn {
        PendingTurn::new(user, "ok", &[], at)
    }

    #[test]
    fn keywords_match_in_any_case_and_both_languages() {
        for yes in ["Remember that I use vim", "please DON'T FORGET the port", "don’t forget", "记住我的生日", "别忘了带伞", "帮我记下来", "记一下"] {
            assert!(is_explicit(yes), "{yes}");
        }
        for no in ["what is my favourite colour?", "forget it", "记得吗"] {
            assert!(!is_explicit(no), "{no}");
        }
    }

    #[test]
    fn fields_are_cut_to_2000_bytes_on_character_boundaries() {
        let long = "中".repeat(1000); // 3000 bytes
        let tools: Vec<String> = (0..500).map(|i| format!("tool{i:03}")).collect();
        let t = PendingTurn::new(&long, &format!("a{long}"), &tools, SystemTime::now());
        assert_eq!(t.user.len(), 1998);
        assert_eq!(t.answer.len(), 1999);
        assert!(t.user.chars().all(|c| c == '中'));
        assert_eq!(t.tools.len(), 222, "7 bytes each plus 2 for the separator: 222 fit in 2000");
        assert!(t.tools.join(", ").len() <= FIELD_CAP_BYTES);
    }

    #[test]
    fn due_reasons_follow_the_cicy_numbers() {
        let s = settings();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let min = |m: u64| Duration::from_secs(60 * m);
        assert_eq!(due(&[], &s, t0), None);
        let one = vec![turn_at("hi", t0)];
        assert_eq!(due(&one, &s, t0 + min(4)), None);
        assert_eq!(due(&one, &s, t0 + min(5)), Some(FlushReason::Idle));
        // A turn every 4 minutes keeps it from idling; the oldest waits at most 20 minutes.
        let steady: Vec<PendingTurn> = (0..5).map(|i| turn_at("hi", t0 + min(4 * i))).collect();
        assert_eq!(due(&steady, &s, t0 + min(19)), None);
        assert_eq!(next_due(&steady, &s), Some(t0 + min(20)));
        assert_eq!(due(&steady, &s, t0 + min(20)), Some(FlushReason::Oldest));
        let six: Vec<PendingTurn> = (0..6).map(|_| turn_at("hi", t0)).collect();
        assert_eq!(due(&six[..5], &s, t0), None);
        assert_eq!(due(&six, &s, t0), Some(FlushReason::Batch));
        let explicit = vec![turn_at("hi", t0), turn_at("remember: tabs, not spaces", t0)];
        assert_eq!(due(&explicit, &s, t0), Some(FlushReason::Explicit));
        assert_eq!(next_due(&explicit, &s), Some(t0));
    }

    #[test]
    fn after_a_failed_flush_the_buffer_waits_one_idle_period_unless_asked_again() {
        let s = settings();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let min = |m: u64| Duration::from_secs(60 * m);
        let mut turns = vec![turn_at("remember: port 8080", t0)];
        turns[0].failed_at_ms = Some(millis(t0 + min(1)));
        assert_eq!(due(&turns, &s, t0 + min(5)), None);
        assert_eq!(next_due(&turns, &s), Some(t0 + min(6)));
        assert_eq!(due(&turns, &s, t0 + min(6)), Some(FlushReason::Explicit));
        // A full batch waits too …
        let mut six: Vec<PendingTurn> = (0..6).map(|_| turn_at("hi", t0)).collect();
        six[0].failed_at_ms = Some(millis(t0));
        assert_eq!(due(&six, &s, t0 + min(4)), None);
        // … but a new keyword turn is tried at once.
        turns.push(turn_at("记住: port 8080", t0 + min(2)));
        assert_eq!(due(&turns, &s, t0 + min(2)), Some(FlushReason::Explicit));
    }

    #[test]
    fn append_load_and_remove_keep_turns_added_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(load(&d.join("none")).unwrap(), Loaded::default());
        assert!(!d.join("none").exists(), "reading an empty buffer creates nothing");
        let a = append(d, turn_at("one", SystemTime::now())).unwrap();
        assert_eq!((a.turns.len(), a.dropped), (1, 0));
        let b = append(d, turn_at("two", SystemTime::now())).unwrap();
        let flushed: Vec<String> = b.turns.iter().map(|t| t.id.clone()).collect();
        append(d, turn_at("three, during the flush", SystemTime::now())).unwrap();
        remove(d, &flushed).unwrap();
        let left = load(d).unwrap().turns;
        assert_eq!(left.iter().map(|t| t.user.as_str()).collect::<Vec<_>>(), ["three, during the flush"]);
        mark_failed(d, &[left[0].id.clone()], UNIX_EPOCH + Duration::from_secs(7)).unwrap();
        assert_eq!(load(d).unwrap().turns[0].failed_at_ms, Some(7000));
        remove(d, &[left[0].id.clone()]).unwrap();
        assert!(!d.join(FILE).exists(), "an empty buffer has no file");
    }

    #[test]
    fn the_buffer_is_bounded_and_a_corrupt_one_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for i in 0..MAX_PENDING {
            append(d, turn_at(&format!("t{i}"), SystemTime::now())).unwrap();
        }
        let a = append(d, turn_at("newest", SystemTime::now())).unwrap();
        assert_eq!((a.turns.len(), a.dropped), (MAX_PENDING, 1));
        assert_eq!(a.turns[0].user, "t1");
        std::fs::write(d.join(FILE), "{not json\n").unwrap();
        let a = append(d, turn_at("after", SystemTime::now())).unwrap();
        let moved = a.moved_aside.expect("moved aside");
        assert_eq!(std::fs::read_to_string(&moved).unwrap(), "{not json\n");
        assert_eq!(a.turns.len(), 1);
    }
}
