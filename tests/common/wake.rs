//! Fixtures of the hibernate-and-wake tests: a home with one agent whose role has the `wake`
//! tools, and a message as a person would drop it.

use std::collections::BTreeMap;

use cicy::wake::inbox::NewMessage;

use super::fixture::TestHome;
use super::gateway::ScriptedGateway;

/// A home against `gw` with one agent of the role `waker` (tools `[core, wake]`, 20 rounds).
pub fn waker(gw: &ScriptedGateway) -> (TestHome, String) {
    let t = TestHome::new(&gw.url(), 0);
    t.write_role("waker", "[core, wake]", 20);
    let id = t.create("waker", None);
    (t, id)
}

/// A message from `from` with the subject `note`, not a question.
pub fn note(from: &str, body: &str) -> NewMessage {
    NewMessage { from: from.into(), subject: Some("note".into()), body: body.into(), question: false, meta: BTreeMap::new() }
}
