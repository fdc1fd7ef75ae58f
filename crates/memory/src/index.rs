//! MEMORY.md, the index that is injected as the `<memories>` block (docs/design.md §8 "Index + read").
//!
//! Owns rendering the index (one line per memory, `- [<type>★<salience>] <title>: <content>`,
//! strongest and most recent first), deciding when it is stale (a memory file newer than it,
//! or a different number of memory files than lines — hand edits, deletions and restores from
//! `_archive/` count), and rewriting or deleting it. Must not touch the memory files
//! themselves (`store.rs`) or cut the text for the wire (`prompt.rs` caps it at 6000 bytes).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::store::{self, BadFile, Record, Stored, INDEX_FILE};
use super::MemoryError;
use cicy_store::fsutil;

/// What [`rebuild`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuilt {
    /// The index text now on disk (empty when MEMORY.md was deleted or never existed).
    pub text: String,
    /// Memories in the index.
    pub entries: usize,
    /// Memory files that were skipped because they do not read.
    pub bad: Vec<BadFile>,
}

/// `<dir>/MEMORY.md`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(INDEX_FILE)
}

/// The index line of one memory. The title is left out when it is empty or the content
/// already contains it (ignoring case); runs of white space (line breaks too) become one
/// space so each memory stays on one line.
pub fn line(r: &Record) -> String {
    let title = one_line(&r.title);
    let content = one_line(&r.content);
    let head = format!("- [{}★{}]", r.kind.as_str(), r.salience);
    if title.is_empty() || content.to_lowercase().contains(&title.to_lowercase()) {
        format!("{head} {content}")
    } else {
        format!("{head} {title}: {content}")
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Memories in index order: salience descending, then most recently modified, then mem_id (so
/// the same files always give the same bytes).
pub fn sorted(memories: &[Stored]) -> Vec<&Stored> {
    let mut order: Vec<&Stored> = memories.iter().collect();
    order.sort_by(|a, b| {
        b.record.salience.cmp(&a.record.salience).then(b.modified.cmp(&a.modified)).then(a.record.mem_id.cmp(&b.record.mem_id))
    });
    order
}

/// The index text: one line per memory in [`sorted`] order. Empty for no memories.
pub fn render(memories: &[Stored]) -> String {
    sorted(memories).iter().map(|m| line(&m.record) + "\n").collect()
}

/// Rebuilds MEMORY.md from the memory files: rewritten when its text changes, its time
/// refreshed when not (so it is no longer older than the files), deleted when there are no
/// memories. Bad files are skipped and returned.
pub fn rebuild(dir: &Path) -> Result<Rebuilt, MemoryError> {
    let scan = store::scan(dir)?;
    let text = render(&scan.memories);
    let p = path(dir);
    let existing = match std::fs::read(&p) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(MemoryError::io(&p, e)),
    };
    match (&existing, text.is_empty()) {
        (None, true) => {}
        (Some(_), true) => {
            std::fs::remove_file(&p).map_err(|e| MemoryError::io(&p, e))?;
            fsutil::sync_dir(dir).map_err(|e| MemoryError::io(dir, e))?;
        }
        (Some(old), false) if old.as_slice() == text.as_bytes() => {
            let f = std::fs::File::options().write(true).open(&p).map_err(|e| MemoryError::io(&p, e))?;
            f.set_modified(SystemTime::now()).map_err(|e| MemoryError::io(&p, e))?;
        }
        (_, false) => fsutil::write_atomic(&p, text.as_bytes()).map_err(|e| MemoryError::io(&p, e))?,
    }
    Ok(Rebuilt { entries: scan.memories.len(), text, bad: scan.bad })
}

/// The current index text, rebuilt first when it is stale: a memory file is newer than
/// MEMORY.md, or the number of memory files differs from its number of lines, or it is missing
/// while memory files exist (or present while none do). Only file times are read when it is
/// fresh. A MEMORY.md that is not UTF-8 is read lossily (it is rebuilt on the next change).
pub fn current(dir: &Path) -> Result<String, MemoryError> {
    let files = store::memory_paths(dir)?;
    let p = path(dir);
    let (text, index_time) = match std::fs::read(&p) {
        Ok(b) => {
            let t = std::fs::metadata(&p).and_then(|m| m.modified()).map_err(|e| MemoryError::io(&p, e))?;
            (String::from_utf8_lossy(&b).into_owned(), Some(t))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), None),
        Err(e) => return Err(MemoryError::io(&p, e)),
    };
    let stale = match index_time {
        None => !files.is_empty(),
        Some(t) => {
            let lines = text.lines().filter(|l| l.starts_with("- [")).count();
            lines != files.len() || newest(&files).is_some_and(|n| n > t)
        }
    };
    if stale {
        return Ok(rebuild(dir)?.text);
    }
    Ok(text)
}

/// The latest modification time among `files` (files that vanished meanwhile are ignored).
fn newest(files: &[PathBuf]) -> Option<SystemTime> {
    files.iter().filter_map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok()).max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{write, MemoryType};

    use crate::test_support::{rec, set_mtime};

    #[test]
    fn lines_leave_out_a_title_the_content_already_contains() {
        let r = rec("preference_colour", MemoryType::Preference, "Favourite colour", 4, "The user's favourite colour is teal.");
        assert_eq!(line(&r), "- [preference★4] The user's favourite colour is teal.");
        let r = rec("fact_os", MemoryType::Fact, "OS", 3, "Runs Debian 12\non a laptop.");
        assert_eq!(line(&r), "- [fact★3] OS: Runs Debian 12 on a laptop.");
        let r = rec("fact_x", MemoryType::Fact, "", 2, "untitled");
        assert_eq!(line(&r), "- [fact★2] untitled");
    }

    #[test]
    fn rebuild_sorts_by_salience_then_recency_and_deletes_an_empty_index() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, &rec("fact_old", MemoryType::Fact, "", 3, "old three")).unwrap();
        write(d, &rec("fact_new", MemoryType::Fact, "", 3, "new three")).unwrap();
        write(d, &rec("lesson_top", MemoryType::Lesson, "", 5, "five")).unwrap();
        set_mtime(&d.join("fact_old.md"), 100);
        set_mtime(&d.join("fact_new.md"), 10);
        let r = rebuild(d).unwrap();
        assert_eq!(r.text, "- [lesson★5] five\n- [fact★3] new three\n- [fact★3] old three\n");
        assert_eq!(std::fs::read_to_string(path(d)).unwrap(), r.text);
        for f in ["fact_old.md", "fact_new.md", "lesson_top.md"] {
            std::fs::remove_file(d.join(f)).unwrap();
        }
        let r = rebuild(d).unwrap();
        assert_eq!((r.text.as_str(), r.entries), ("", 0));
        assert!(!path(d).exists(), "an empty index is deleted");
    }

    #[test]
    fn a_hand_edit_a_deletion_and_a_restore_all_make_the_index_stale() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, &rec("fact_a", MemoryType::Fact, "", 3, "alpha")).unwrap();
        write(d, &rec("fact_b", MemoryType::Fact, "", 3, "beta")).unwrap();
        set_mtime(&d.join("fact_a.md"), 300);
        set_mtime(&d.join("fact_b.md"), 200);
        assert_eq!(current(d).unwrap(), "- [fact★3] beta\n- [fact★3] alpha\n");
        // A hand edit: the file is now newer than MEMORY.md.
        set_mtime(&path(d), 60);
        let text = std::fs::read_to_string(d.join("fact_a.md")).unwrap().replace("alpha", "alpha, edited by hand");
        std::fs::write(d.join("fact_a.md"), text).unwrap();
        assert!(current(d).unwrap().contains("- [fact★3] alpha, edited by hand\n"));
        // A deletion changes no file time but the count.
        std::fs::remove_file(d.join("fact_b.md")).unwrap();
        assert_eq!(current(d).unwrap(), "- [fact★3] alpha, edited by hand\n");
        // A restore with an old time (as `mv` keeps it) changes the count too.
        write(d, &rec("fact_c", MemoryType::Fact, "", 3, "gamma")).unwrap();
        set_mtime(&d.join("fact_c.md"), 3600);
        assert!(current(d).unwrap().contains("gamma"));
    }

    #[test]
    fn a_fresh_index_is_returned_as_is_and_a_missing_folder_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(current(&d.join("nope")).unwrap(), "");
        write(d, &rec("fact_a", MemoryType::Fact, "", 3, "alpha")).unwrap();
        rebuild(d).unwrap();
        // Same number of lines, nothing newer: the text on disk is what is used.
        std::fs::write(path(d), "- [fact★3] as on disk\n").unwrap();
        assert_eq!(current(d).unwrap(), "- [fact★3] as on disk\n");
    }
}
