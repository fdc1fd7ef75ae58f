//! Fixtures of the hibernate-and-wake tests: a home with one agent whose role has the `wake`
//! tools, and a message as a person would drop it.

use std::collections::BTreeMap;

use cicy::wake::inbox::NewMessage;

use crate::fixture::TestHome;
use crate::gateway::{RecordedRequest, ScriptedGateway};
use crate::history::wire_messages;

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

/// The last text block of the last user message of a recorded request (the first user
/// message also carries the `<role>` block).
pub fn last_user_text(r: &RecordedRequest) -> String {
    let blocks = wire_messages(r).last().unwrap().content.to_blocks();
    match blocks.last().unwrap() {
        cicy::conversation::message::ContentBlock::Text { text, .. } => text.clone(),
        other => panic!("not text: {other:?}"),
    }
}

/// `[cicy-wake] … now:<time>` with the time replaced by `NOW`.
pub fn mask_now(text: &str) -> String {
    let (head, rest) = text.split_once(" now:").unwrap();
    let rest = rest.split_once('\n').map_or(String::new(), |(_, r)| format!("\n{r}"));
    format!("{head} now:NOW{rest}")
}
