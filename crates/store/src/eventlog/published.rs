//! [`Published`]: an event as live subscribers receive it, shared by all of them.
//!
//! Owns no file and no state beyond one event: its JSON and `type` are encoded at most once,
//! by the first subscriber that asks, so a hundred SSE clients cost one encoding per event and
//! the agent that emits it does none.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use cicy_protocol::event::Event;

struct Inner {
    event: Event,
    /// `(type, JSON of the whole event)`.
    encoded: OnceLock<(String, String)>,
}

/// An event shared by reference (cheap to clone); derefs to the [`Event`].
#[derive(Clone)]
pub struct Published(Arc<Inner>);

impl Published {
    /// The event's `type` tag (`text_delta`, `done`, …), as its JSON carries it.
    pub fn type_name(&self) -> &str {
        &self.encoded().0
    }

    /// The event as `serde_json::to_string` writes it (what `events.jsonl` holds).
    pub fn json(&self) -> &str {
        &self.encoded().1
    }

    fn encoded(&self) -> &(String, String) {
        self.0.encoded.get_or_init(|| {
            let ev = &self.0.event;
            // Encoding an `Event` cannot fail (string keys, no maps of other keys); empty
            // text is what a failure would show.
            let name = serde_json::to_value(&ev.kind)
                .ok()
                .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
                .unwrap_or_default();
            (name, serde_json::to_string(ev).unwrap_or_default())
        })
    }
}

impl From<Event> for Published {
    fn from(event: Event) -> Self {
        Published(Arc::new(Inner { event, encoded: OnceLock::new() }))
    }
}

impl Deref for Published {
    type Target = Event;
    fn deref(&self) -> &Event {
        &self.0.event
    }
}

impl PartialEq for Published {
    fn eq(&self, other: &Self) -> bool {
        self.0.event == other.0.event
    }
}

impl PartialEq<Event> for Published {
    fn eq(&self, other: &Event) -> bool {
        self.0.event == *other
    }
}

impl fmt::Debug for Published {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.event.fmt(f)
    }
}
