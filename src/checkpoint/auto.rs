//! Automatic checkpoints (CMDC AutoCheckpoint `every_n_turns`: 10, counted after each turn).
//!
//! Owns the completed-turns counter `.cicy/checkpoints/.turns` (a decimal number; dot-named so
//! listings skip it) and the save + GC every [`EVERY_N_TURNS`]th completed turn. Called once
//! from the turn loop's end, holding the turn lock. A failure here never fails the turn: it
//! is reported as a `system` event and the turn goes on (CMDC: "failures only log").

use std::path::{Path, PathBuf};

use super::{gc, save, SaveOptions};
use crate::event::{Emitter, EventKind};
use crate::fsutil;

/// CMDC AutoCheckpoint `every_n_turns`.
pub const EVERY_N_TURNS: u64 = 10;
/// The label of an automatic checkpoint.
pub const LABEL: &str = "auto";

fn counter_path(workspace: &Path) -> PathBuf {
    super::dir(workspace).join(".turns")
}

/// Counts one completed turn of the agent in `workspace`; on every [`EVERY_N_TURNS`]th saves a
/// checkpoint labelled `auto` (with `steering` texts still queued) and applies the limits.
/// Emits `system` events: `checkpoint <id> saved (auto, every 10 turns)`, each GC deletion, and
/// any failure (`automatic checkpoint failed: …`).
pub fn after_turn(workspace: &Path, steering: usize, events: &Emitter) {
    if let Err(e) = fsutil::blocking(|| count_and_save(workspace, steering, events)) {
        events.emit(EventKind::System { text: format!("automatic checkpoint failed: {e}") });
    }
}

fn count_and_save(workspace: &Path, steering: usize, events: &Emitter) -> Result<(), super::CheckpointError> {
    let path = counter_path(workspace);
    // An unreadable counter starts again from 0: losing a count only delays one checkpoint.
    let turns = std::fs::read_to_string(&path).ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(0) + 1;
    fsutil::write_atomic(&path, turns.to_string().as_bytes()).map_err(|source| super::CheckpointError::Io { path: path.clone(), source })?;
    if !turns.is_multiple_of(EVERY_N_TURNS) {
        return Ok(());
    }
    let meta = save(workspace, &SaveOptions { label: Some(LABEL.to_string()), pending: 0, steering })?;
    events.emit(EventKind::System { text: format!("checkpoint {} saved ({LABEL}, every {EVERY_N_TURNS} turns)", meta.checkpoint_id) });
    for id in gc(workspace, fsutil::unix_now(), &meta.checkpoint_id)? {
        events.emit(EventKind::System { text: format!("checkpoint {id} deleted (over {} checkpoints or older than 30 days)", super::MAX_CHECKPOINTS) });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;
    use std::sync::{Arc, Mutex};

    fn collector() -> (Emitter, Arc<Mutex<Vec<Event>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        (Emitter::new("w-1", move |e: &Event| sink.lock().unwrap().push(e.clone())), seen)
    }

    #[test]
    fn every_tenth_completed_turn_saves_an_auto_checkpoint() {
        let ws = tempfile::tempdir().unwrap();
        let (events, seen) = collector();
        for _ in 0..9 {
            after_turn(ws.path(), 0, &events);
        }
        assert!(super::super::list(ws.path()).unwrap().is_empty());
        assert!(seen.lock().unwrap().is_empty());
        after_turn(ws.path(), 2, &events);
        let listed = super::super::list(ws.path()).unwrap();
        assert_eq!(listed.len(), 1);
        let meta = listed[0].meta.clone().unwrap();
        assert_eq!((meta.label.as_deref(), meta.steering, meta.pending, meta.conv_id), (Some("auto"), 2, 0, None));
        let texts: Vec<EventKind> = seen.lock().unwrap().iter().map(|e| e.kind.clone()).collect();
        assert_eq!(texts, [EventKind::System { text: format!("checkpoint {} saved (auto, every 10 turns)", meta.checkpoint_id) }]);
        assert_eq!(std::fs::read_to_string(counter_path(ws.path())).unwrap(), "10");
    }

    #[test]
    fn a_failed_save_is_a_system_event_not_an_error() {
        let ws = tempfile::tempdir().unwrap();
        // `.cicy/checkpoints` cannot be created: `.cicy` is a file.
        std::fs::write(ws.path().join(".cicy"), "x").unwrap();
        let (events, seen) = collector();
        after_turn(ws.path(), 0, &events);
        let kinds: Vec<EventKind> = seen.lock().unwrap().iter().map(|e| e.kind.clone()).collect();
        let path = counter_path(ws.path());
        assert_eq!(kinds.len(), 1);
        let EventKind::System { text } = &kinds[0] else { panic!("{kinds:?}") };
        assert!(text.starts_with(&format!("automatic checkpoint failed: {}: {}", path.display(), path.parent().unwrap().display())), "{text}");
    }
}
