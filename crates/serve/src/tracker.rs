//! The agent's state as its events show it (docs/design.md §9 states, from CMDC).
//!
//! Owns the `state` of one resident agent and the `state` events that report each change: a
//! sink between the turn loop's [`Emitter`] and the agent's event log that sees `round_started`
//! (→ `running`), the first text or thinking chunk (→ `streaming`) and `tool_started`
//! (→ `executing_tools`), so the turn loop needs to know nothing of states. The actor sets
//! `running` when a job starts and `idle` when its run ends. Must not touch files or HTTP.

use std::sync::{Arc, Mutex};

use cicy_protocol::event::{AgentState, Emitter, EventKind, EventSink};
use cicy_store::eventlog::AgentEvents;

/// The state of one agent and its event log.
pub(super) struct Tracker {
    events: AgentEvents,
    state: Mutex<AgentState>,
}

impl Tracker {
    pub(super) fn new(events: AgentEvents) -> Arc<Self> {
        Arc::new(Self { events, state: Mutex::new(AgentState::Idle) })
    }

    /// The agent's event log.
    pub(super) fn events(&self) -> &AgentEvents {
        &self.events
    }

    /// An emitter for the turn loop that keeps the state.
    pub(super) fn emitter(self: &Arc<Self>) -> Emitter {
        Emitter::from_sink(self.clone())
    }

    pub(super) fn state(&self) -> AgentState {
        *self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves to `state`, emitting a `state` event when it changed.
    pub(super) fn set(&self, state: AgentState) {
        let mut current = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if *current != state {
            *current = state;
            // Emitted under the lock so two changes cannot be logged out of order.
            self.events.emit(EventKind::State { state });
        }
    }
}

impl EventSink for Tracker {
    fn emit(&self, kind: EventKind) {
        let next = match &kind {
            EventKind::RoundStarted { .. } => Some(AgentState::Running),
            EventKind::TextDelta { .. } | EventKind::ThinkingDelta { .. } => Some(AgentState::Streaming),
            EventKind::ToolStarted { .. } => Some(AgentState::ExecutingTools),
            _ => None,
        };
        if let Some(state) = next {
            self.set(state);
        }
        self.events.emit(kind);
    }
}
