//! The writer lease of an agent's log: `events/writer`, an `flock(2)` held by the one process
//! numbering and appending events right now, and a one-line marker in that file saying where
//! the last holder stopped.
//!
//! Owns `events/writer` only; the numbering decision built on it is in `super::EventLog::lease`.
//! The marker is plain text of fixed width, `<state> <boot id> <pid> <last seq>\n` (`state`
//! `held` or `free`), overwritten in place and never fsynced: a `kill -9` leaves the page
//! cache, so `held` tells the next holder that its predecessor died holding the lease, and a
//! power loss changes the boot id, which makes the marker stale. Either way the next holder
//! starts above `hwm`, the durable reservation.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

/// What the last holder left in the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Marker {
    /// Let go cleanly in this boot, after every seq up to `last` was appended.
    Free { pid: u32, last: u64 },
    /// Absent, unreadable, `held` (its holder died holding it) or from an earlier boot: seqs up
    /// to `hwm` may have been handed out.
    Unknown,
}

/// The kernel's id of this boot; empty when `/proc` does not say (every marker is then
/// [`Marker::Unknown`], which only costs a jump).
fn boot_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default())
}

pub(super) fn read(file: &File) -> io::Result<Marker> {
    let mut buf = [0u8; 128];
    let n = file.read_at(&mut buf, 0)?;
    let text = String::from_utf8_lossy(&buf[..n]);
    let fields: Vec<&str> = text.lines().next().unwrap_or_default().split(' ').collect();
    Ok(match fields[..] {
        ["free", boot, pid, last] if !boot_id().is_empty() && boot == boot_id() => match (pid.parse(), last.parse()) {
            (Ok(pid), Ok(last)) => Marker::Free { pid, last },
            _ => Marker::Unknown,
        },
        _ => Marker::Unknown,
    })
}

/// Writes `held` (when `free` is `None`) or `free` with the last seq handed out.
pub(super) fn write(file: &File, free: Option<u64>) -> io::Result<()> {
    let (state, last) = free.map_or(("held", 0), |last| ("free", last));
    // Fixed width (boot ids are 36 characters), so an overwrite never leaves a longer tail.
    let line = format!("{state} {:<36} {:010} {:020}\n", boot_id(), std::process::id(), last);
    file.write_all_at(line.as_bytes(), 0)
}
