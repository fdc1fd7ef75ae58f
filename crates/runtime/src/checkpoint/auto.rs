//! Automatic checkpoints (CMDC AutoCheckpoint `every_n_turns`: 10, counted after each turn).
//!
//! Owns the rule "every [`EVERY_N_TURNS`]th completed turn": at the end of a turn that
//! completed, when the conversation's prompt count (`current.json` `prompts`, one per user
//! message; a retry continues its prompt) is a multiple of 10, it saves a checkpoint labelled
//! `auto` and applies the limits. Counting the conversation's own prompts keeps no extra state:
//! a turn writes nothing more, a new conversation (`/clear`, a `load`) counts from its own
//! number, and a 10th prompt whose turn failed is checkpointed when a retry completes it
//! **[chosen]**. Called once from the turn loop's end, holding the turn lock. A failure here
//! never fails the turn: it is a `system` event and the turn goes on (CMDC: "failures only
//! log").

use std::path::Path;

use super::{gc, save, SaveOptions};
use crate::event::{Emitter, EventKind};
use crate::fsutil;

/// CMDC AutoCheckpoint `every_n_turns`.
pub const EVERY_N_TURNS: u64 = 10;
/// The label of an automatic checkpoint.
pub const LABEL: &str = "auto";

/// After a completed turn of the agent in `workspace` whose conversation has had `prompts`
/// user prompts: on every [`EVERY_N_TURNS`]th saves a checkpoint labelled `auto` (recording
/// `steering` texts still queued) and applies the limits. Emits `system` events:
/// `checkpoint <id> saved (auto, every 10 turns)`, each GC deletion, and any failure
/// (`automatic checkpoint failed: …`).
pub fn after_turn(workspace: &Path, prompts: u64, steering: usize, events: &Emitter) {
    if prompts == 0 || !prompts.is_multiple_of(EVERY_N_TURNS) {
        return;
    }
    if let Err(e) = fsutil::blocking(|| save_and_gc(workspace, steering, events)) {
        events.emit(EventKind::System { text: format!("automatic checkpoint failed: {e}") });
    }
}

fn save_and_gc(workspace: &Path, steering: usize, events: &Emitter) -> Result<(), super::CheckpointError> {
    let meta = save(workspace, &SaveOptions { label: Some(LABEL.to_string()), pending: 0, steering })?;
    events.emit(EventKind::System { text: format!("checkpoint {} saved ({LABEL}, every {EVERY_N_TURNS} turns)", meta.checkpoint_id) });
    for id in gc(workspace, fsutil::unix_now(), &meta.checkpoint_id)? {
        events.emit(EventKind::System {
            text: format!("checkpoint {id} deleted (over {} checkpoints or older than 30 days)", super::MAX_CHECKPOINTS),
        });
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
    fn every_tenth_prompt_saves_an_auto_checkpoint() {
        let ws = tempfile::tempdir().unwrap();
        let (events, seen) = collector();
        for prompts in 0..10 {
            after_turn(ws.path(), prompts, 0, &events);
        }
        assert!(super::super::list(ws.path()).unwrap().is_empty());
        assert!(seen.lock().unwrap().is_empty());
        after_turn(ws.path(), 20, 2, &events);
        let listed = super::super::list(ws.path()).unwrap();
        assert_eq!(listed.len(), 1);
        let meta = listed[0].meta.as_ref().unwrap().clone();
        assert_eq!((meta.label.as_deref(), meta.steering, meta.pending, meta.conv_id), (Some("auto"), 2, 0, None));
        let texts: Vec<EventKind> = seen.lock().unwrap().iter().map(|e| e.kind.clone()).collect();
        assert_eq!(texts, [EventKind::System { text: format!("checkpoint {} saved (auto, every 10 turns)", meta.checkpoint_id) }]);
    }

    #[test]
    fn a_failed_save_is_a_system_event_not_an_error() {
        let ws = tempfile::tempdir().unwrap();
        // `.cicy/checkpoints` cannot be created: `.cicy` is a file.
        std::fs::write(ws.path().join(".cicy"), "x").unwrap();
        let (events, seen) = collector();
        after_turn(ws.path(), 10, 0, &events);
        let kinds: Vec<EventKind> = seen.lock().unwrap().iter().map(|e| e.kind.clone()).collect();
        let path = ws.path().join(".cicy/checkpoints");
        assert_eq!(
            kinds,
            [EventKind::System { text: format!("automatic checkpoint failed: {}: Not a directory (os error 20)", path.display()) }]
        );
    }
}
