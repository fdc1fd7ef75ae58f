//! The write loop's buffer: `.cicy/memory/.pending.jsonl` (docs/design.md §8 "Write").
//!
//! Owns recording finished turns (`{user, answer, tools}`, each cut to 2000 bytes on a character
//! boundary), the explicit keywords, when a flush is due, and removing the turns a flush
//! consumed. The file is one JSON object per line, rewritten atomically under an advisory lock
//! (`.lock`, flock) so a one-shot process and a resident one never lose each other's turns. A
//! line that does not parse (a torn tail, a hand edit) is set aside on its own; every other
//! line is kept. The backoff after failed flushes is `backoff.rs`'s. Must not touch memory
//! files or MEMORY.md, and never calls the gateway.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{cut_at_char_boundary, MemoryError, MemorySettings};
use cicy_store::fsutil;

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
    /// The user text contained a keyword: flush at once.
    #[serde(default)]
    pub explicit: bool,
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
/// oldest turn + `max_wait` and the newest + `idle`. `None` for an empty buffer. The backoff
/// after failed flushes is applied on top by `Memory::next_due`.
pub fn next_due(turns: &[PendingTurn], s: &MemorySettings) -> Option<SystemTime> {
    let (first, last) = (turns.first()?, turns.last()?);
    if turns.iter().any(|t| t.explicit) || turns.len() >= s.batch_turns {
        return Some(first.at());
    }
    Some((first.at() + s.max_wait).min(last.at() + s.idle))
}

/// The buffer as read: its turns, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    pub turns: Vec<PendingTurn>,
    /// Lines that did not parse; they stay in the file until the next write sets them aside.
    pub unparsed_lines: usize,
}

/// What [`append`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Appended {
    /// The buffer after the append, oldest first.
    pub turns: Vec<PendingTurn>,
    /// Oldest turns dropped to stay within [`MAX_PENDING`].
    pub dropped: usize,
    /// Where lines of the buffer that did not parse were set aside.
    pub moved_aside: Option<PathBuf>,
}

/// Reads the buffer in `dir`, changing nothing: lines that do not parse are skipped (and
/// counted). Without a buffer file nothing is created (listing an agent's memory must not make
/// its folder); the file only ever appears by an atomic rename, so checking for it before
/// taking the lock is safe.
pub fn load(dir: &Path) -> Result<Loaded, MemoryError> {
    if !dir.join(FILE).exists() {
        return Ok(Loaded::default());
    }
    with_lock(dir, || {
        let (turns, bad) = read_unlocked(dir)?;
        Ok(Loaded { turns, unparsed_lines: bad.split_inclusive(|b| *b == b'\n').count() })
    })
}

/// Adds `turn` to the buffer in `dir`. Lines that do not parse (a torn last line, a hand
/// edit, bytes that are not UTF-8) are set aside as they were to
/// `.pending.jsonl.corrupt-<unix>` (never overwritten); every line that parses is kept.
pub fn append(dir: &Path, turn: PendingTurn) -> Result<Appended, MemoryError> {
    with_lock(dir, || {
        let (mut turns, bad) = read_unlocked(dir)?;
        turns.push(turn);
        let dropped = turns.len().saturating_sub(MAX_PENDING);
        turns.drain(..dropped);
        let moved_aside = set_aside_unlocked(dir, &bad)?;
        write_unlocked(dir, &turns)?;
        Ok(Appended { turns, dropped, moved_aside })
    })
}

/// Removes the turns with these ids (those a flush consumed); turns added meanwhile stay. The
/// file is deleted when nothing is left. Lines that do not parse are set aside as [`append`]
/// does; returns where.
pub fn remove(dir: &Path, ids: &[String]) -> Result<Option<PathBuf>, MemoryError> {
    with_lock(dir, || {
        let (turns, bad) = read_unlocked(dir)?;
        let rest: Vec<PendingTurn> = turns.into_iter().filter(|t| !ids.contains(&t.id)).collect();
        let moved_aside = set_aside_unlocked(dir, &bad)?;
        write_unlocked(dir, &rest)?;
        Ok(moved_aside)
    })
}

/// The turns that parse, and the bytes of the lines that do not (with their newlines).
fn read_unlocked(dir: &Path) -> Result<(Vec<PendingTurn>, Vec<u8>), MemoryError> {
    let p = dir.join(FILE);
    let bytes = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(MemoryError::io(&p, e)),
    };
    let mut turns = Vec::new();
    let mut bad = Vec::new();
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        if body.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<PendingTurn>(body) {
            Ok(t) => turns.push(t),
            Err(_) => bad.extend_from_slice(line),
        }
    }
    Ok((turns, bad))
}

/// Saves `bad` (lines that did not parse) beside the buffer, before the caller rewrites the
/// buffer without them: a crash in between leaves them in both places, never in neither.
fn set_aside_unlocked(dir: &Path, bad: &[u8]) -> Result<Option<PathBuf>, MemoryError> {
    if bad.is_empty() {
        return Ok(None);
    }
    let aside = aside_path(&dir.join(FILE));
    fsutil::write_atomic(&aside, bad).map_err(|e| MemoryError::io(&aside, e))?;
    tracing::warn!(aside = %aside.display(), "memory buffer lines did not parse; set them aside");
    Ok(Some(aside))
}

/// `<file>.corrupt-<unix>`, with `.<n>` added when that exists (as `fsutil::move_aside` names).
fn aside_path(p: &Path) -> PathBuf {
    let base = format!("{FILE}.corrupt-{}", fsutil::unix_now());
    let mut target = p.with_file_name(&base);
    let mut n = 1;
    while target.exists() {
        target = p.with_file_name(format!("{base}.{n}"));
        n += 1;
    }
    target
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
pub(super) fn with_lock<T>(dir: &Path, f: impl FnOnce() -> Result<T, MemoryError>) -> Result<T, MemoryError> {
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

pub(super) fn from_millis(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

pub(super) fn millis(t: SystemTime) -> u64 {
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
        for yes in [
            "Remember that I use vim",
            "please DON'T FORGET the port",
            "don’t forget",
            "记住我的生日",
            "别忘了带伞",
            "帮我记下来",
            "记一下",
        ] {
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
        remove(d, &[left[0].id.clone()]).unwrap();
        assert!(!d.join(FILE).exists(), "an empty buffer has no file");
    }

    #[test]
    fn the_buffer_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for i in 0..MAX_PENDING {
            append(d, turn_at(&format!("t{i}"), SystemTime::now())).unwrap();
        }
        let a = append(d, turn_at("newest", SystemTime::now())).unwrap();
        assert_eq!((a.turns.len(), a.dropped), (MAX_PENDING, 1));
        assert_eq!(a.turns[0].user, "t1");
    }

    const ONE: &str = r#"{"id":"a1","at_ms":1000,"user":"my editor is helix","answer":"Noted.","tools":[],"explicit":false}"#;
    /// Written by an older version, which marked failed flushes per turn: the field is dropped.
    const TWO: &str =
        r#"{"id":"b2","at_ms":2000,"user":"remember: tabs","answer":"OK.","tools":["shell"],"explicit":true,"failed_at_ms":1500}"#;
    const TWO_NOW: &str = r#"{"id":"b2","at_ms":2000,"user":"remember: tabs","answer":"OK.","tools":["shell"],"explicit":true}"#;

    fn aside_files(d: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(".pending.jsonl.corrupt-"))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_torn_last_line_is_set_aside_alone_and_the_complete_lines_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let torn = r#"{"id":"c3","at_ms":3000,"user":"half a li"#;
        let file = format!("{ONE}\n{TWO}\n{torn}");
        std::fs::write(d.join(FILE), &file).unwrap();
        // Reading changes nothing.
        let loaded = load(d).unwrap();
        assert_eq!(loaded.turns.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["a1", "b2"]);
        assert_eq!(loaded.unparsed_lines, 1);
        assert_eq!(std::fs::read_to_string(d.join(FILE)).unwrap(), file);
        assert!(aside_files(d).is_empty());
        // The next write sets the torn tail aside, alone.
        let ids = ["a1".to_string()];
        let aside = remove(d, &ids).unwrap().expect("set aside");
        assert_eq!(aside_files(d), std::slice::from_ref(&aside));
        let name = aside.file_name().unwrap().to_string_lossy().into_owned();
        let unix: u64 = name.strip_prefix(".pending.jsonl.corrupt-").unwrap().parse().unwrap();
        assert!(unix.abs_diff(fsutil::unix_now()) < 60, "{name}");
        assert_eq!(std::fs::read_to_string(&aside).unwrap(), torn);
        assert_eq!(std::fs::read_to_string(d.join(FILE)).unwrap(), format!("{TWO_NOW}\n"));
        assert_eq!(load(d).unwrap(), Loaded { turns: load(d).unwrap().turns, unparsed_lines: 0 });
        assert_eq!(remove(d, &ids).unwrap(), None, "nothing more to set aside");
        assert_eq!(aside_files(d).len(), 1);
    }

    #[test]
    fn bad_lines_anywhere_are_set_aside_as_they_were_and_an_append_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mut bytes = format!("{{not json\n{ONE}\n\n").into_bytes();
        bytes.extend_from_slice(b"caf\xe9\n");
        bytes.extend_from_slice(format!("{TWO}\n").as_bytes());
        std::fs::write(d.join(FILE), &bytes).unwrap();
        assert_eq!(load(d).unwrap().unparsed_lines, 2);
        let a = append(
            d,
            PendingTurn { id: "d4".into(), at_ms: 4000, user: "hi".into(), answer: "hello".into(), tools: vec![], explicit: false },
        )
        .unwrap();
        assert_eq!(a.turns.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["a1", "b2", "d4"]);
        assert_eq!(std::fs::read(a.moved_aside.expect("set aside")).unwrap(), b"{not json\ncaf\xe9\n");
        let d4 = r#"{"id":"d4","at_ms":4000,"user":"hi","answer":"hello","tools":[],"explicit":false}"#;
        assert_eq!(std::fs::read_to_string(d.join(FILE)).unwrap(), format!("{ONE}\n{TWO_NOW}\n{d4}\n"));
    }
}
