//! Fixtures for the memory module's unit tests.

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::store::{MemoryType, Record};

/// A record with fixed tags (none) and `updated` time.
pub(super) fn rec(id: &str, kind: MemoryType, title: &str, salience: u8, content: &str) -> Record {
    Record {
        mem_id: id.into(),
        kind,
        title: title.into(),
        salience,
        tags: vec![],
        updated: "2026-01-01T00:00:00Z".into(),
        content: content.into(),
    }
}

/// Sets the modification time of `p` to `secs_ago` seconds before now.
pub(super) fn set_mtime(p: &Path, secs_ago: u64) {
    let f = std::fs::File::options().write(true).open(p).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(secs_ago)).unwrap();
}
