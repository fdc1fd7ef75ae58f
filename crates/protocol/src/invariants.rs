//! The history invariants every request obeys (docs/design.md §6.4).
//!
//! Owns [`heal`] / [`heal_window`], which repair a message list in place, and [`check`] /
//! [`check_history`], which report the first violation. Invariants: every `tool_use` has
//! exactly one `tool_result` in the next user message and every `tool_result` has its
//! `tool_use` (a missing result gets a synthetic one, an orphan result becomes plain text); no
//! empty text blocks or messages; roles alternate (same-role neighbours merge, a user message
//! keeps its `tool_result`s first). Whether the window starts with a user message is the prompt
//! assembler's concern, since only the wire copy may gain a placeholder.
//!
//! A persisted history is a chain of segments separated by compact summaries (*fences*, see
//! [`Message::is_summary`]): the wire window is the last fence and what follows it. Healing a
//! history works on each stretch between fences on its own and never merges a fence with a
//! neighbour, so a summary stays a message of its own and the window keeps starting at it; on
//! the wire ([`heal_window`]) the summary is an ordinary user message and merges as any other.

use std::collections::HashSet;

use crate::message::{Content, ContentBlock, Message, Role};

/// The text of a synthetic `tool_result` for a call whose result was lost.
pub const SYNTHETIC_RESULT: &str = "unavailable: the previous turn was interrupted";

/// What one healing pass changed.
#[derive(Debug, Default, Clone, Copy)]
struct Repairs {
    /// Messages merged into a neighbour or dropped as empty.
    removed: usize,
    synthetic: usize,
    orphans: usize,
}

impl Repairs {
    fn add(&mut self, other: Repairs) {
        self.removed += other.removed;
        self.synthetic += other.synthetic;
        self.orphans += other.orphans;
    }

    fn notes(self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.removed > 0 && self.synthetic == 0 {
            notes.push(format!("merged or dropped {} empty or same-role message(s)", self.removed));
        }
        if self.synthetic > 0 {
            notes.push(format!("added {} synthetic tool_result(s) for interrupted tool calls", self.synthetic));
        }
        if self.orphans > 0 {
            notes.push(format!("turned {} orphan tool_result(s) into text", self.orphans));
        }
        notes
    }
}

/// Repairs a persisted history so [`check_history`] passes: each stretch between compact
/// summaries is healed on its own; the summaries are kept as they are. Returns one note per
/// kind of repair made (empty when nothing changed).
pub fn heal(messages: &mut Vec<Message>) -> Vec<String> {
    if !messages.iter().any(Message::is_summary) {
        return heal_stretch(messages).notes();
    }
    let mut out = Vec::with_capacity(messages.len());
    let mut stretch = Vec::new();
    let mut repairs = Repairs::default();
    for m in messages.drain(..) {
        if m.is_summary() {
            repairs.add(heal_stretch(&mut stretch));
            out.append(&mut stretch);
            out.push(m);
        } else {
            stretch.push(m);
        }
    }
    repairs.add(heal_stretch(&mut stretch));
    out.append(&mut stretch);
    *messages = out;
    repairs.notes()
}

/// Repairs a wire window (the messages of one request) so [`check`] passes: the whole slice is
/// one conversation, a summary included. Returns one note per kind of repair made.
pub fn heal_window(messages: &mut Vec<Message>) -> Vec<String> {
    heal_stretch(messages).notes()
}

fn heal_stretch(messages: &mut Vec<Message>) -> Repairs {
    let before = messages.len();
    drop_empty(messages);
    merge_neighbours(messages);
    let (synthetic, orphans) = pair_tool_calls(messages);
    drop_empty(messages);
    merge_neighbours(messages);
    Repairs { removed: before.abs_diff(messages.len()), synthetic, orphans }
}

/// A broken invariant, with the index of the message at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    #[error("message {0} is empty or has an empty text block")]
    Empty(usize),
    #[error("message {0} has the same role as the next one")]
    SameRole(usize),
    #[error("message {0}: tool_use `{1}` has no tool_result in the next message")]
    MissingResult(usize, String),
    #[error("message {0}: tool_result `{1}` has no tool_use in the previous message")]
    OrphanResult(usize, String),
    #[error("message {0}: tool_result `{1}` appears more than once")]
    DuplicateResult(usize, String),
}

/// Checks a persisted history: every stretch between compact summaries must pass [`check`] on
/// its own, and each summary must be non-empty. Indexes in the error are of `messages`.
pub fn check_history(messages: &[Message]) -> Result<(), Violation> {
    let mut start = 0;
    for (i, m) in messages.iter().enumerate() {
        if m.is_summary() {
            check(&messages[start..i]).map_err(|v| v.shifted(start))?;
            start = i + 1;
        }
    }
    check(&messages[start..]).map_err(|v| v.shifted(start))
}

impl Violation {
    fn shifted(self, by: usize) -> Self {
        match self {
            Violation::Empty(i) => Violation::Empty(i + by),
            Violation::SameRole(i) => Violation::SameRole(i + by),
            Violation::MissingResult(i, id) => Violation::MissingResult(i + by, id),
            Violation::OrphanResult(i, id) => Violation::OrphanResult(i + by, id),
            Violation::DuplicateResult(i, id) => Violation::DuplicateResult(i + by, id),
        }
    }
}

/// Checks every invariant of one request's messages; `Ok` when `messages` may be sent.
pub fn check(messages: &[Message]) -> Result<(), Violation> {
    for (i, m) in messages.iter().enumerate() {
        let empty_block = matches!(&m.content, Content::Blocks(b) if b.iter().any(ContentBlock::is_empty));
        if m.content.is_empty() || empty_block {
            return Err(Violation::Empty(i));
        }
        if messages.get(i + 1).is_some_and(|n| n.role == m.role) {
            return Err(Violation::SameRole(i));
        }
        let uses: Vec<&str> = if i > 0 && messages[i - 1].role == Role::Assistant {
            messages[i - 1].tool_uses().map(|(id, _, _)| id).collect()
        } else {
            Vec::new()
        };
        let mut seen = HashSet::new();
        for b in blocks(m) {
            if let ContentBlock::ToolResult { tool_use_id, .. } = b {
                if m.role != Role::User || !uses.contains(&tool_use_id.as_str()) {
                    return Err(Violation::OrphanResult(i, tool_use_id.clone()));
                }
                if !seen.insert(tool_use_id.as_str()) {
                    return Err(Violation::DuplicateResult(i, tool_use_id.clone()));
                }
            }
        }
        if m.role == Role::Assistant {
            let next: HashSet<&str> = messages
                .get(i + 1)
                .map(|n| {
                    blocks(n)
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default();
            if let Some((id, _, _)) = m.tool_uses().find(|(id, _, _)| !next.contains(id)) {
                return Err(Violation::MissingResult(i, id.to_string()));
            }
        }
    }
    Ok(())
}

fn blocks(m: &Message) -> &[ContentBlock] {
    match &m.content {
        Content::Blocks(b) => b,
        Content::Text(_) => &[],
    }
}

fn drop_empty(messages: &mut Vec<Message>) {
    for m in messages.iter_mut() {
        if let Content::Blocks(b) = &mut m.content {
            b.retain(|blk| !blk.is_empty());
        }
    }
    messages.retain(|m| !m.content.is_empty());
}

/// Merges same-role neighbours into the first; in a user message `tool_result`s go first.
fn merge_neighbours(messages: &mut Vec<Message>) {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    for m in messages.drain(..) {
        match out.last_mut() {
            Some(prev) if prev.role == m.role => {
                let mut merged = prev.content.to_blocks();
                merged.extend(m.content.to_blocks());
                if prev.role == Role::User {
                    merged.sort_by_key(|b| !matches!(b, ContentBlock::ToolResult { .. }));
                }
                prev.content = Content::Blocks(merged);
            }
            _ => out.push(m),
        }
    }
    *messages = out;
}

/// Gives every `tool_use` exactly one result in the next user message and turns orphan or
/// duplicate results into text. Returns (synthetic results added, orphans converted).
fn pair_tool_calls(messages: &mut Vec<Message>) -> (usize, usize) {
    let (mut synthetic, mut orphans) = (0, 0);
    let mut i = 0;
    while i < messages.len() {
        let expected: Vec<String> = if messages[i].role == Role::Assistant {
            messages[i].tool_uses().map(|(id, _, _)| id.to_string()).collect()
        } else {
            Vec::new()
        };
        if !expected.is_empty() && messages.get(i + 1).is_none_or(|n| n.role != Role::User) {
            messages.insert(i + 1, Message::user_blocks(Vec::new()));
        }
        if messages[i].role == Role::User {
            let prev_uses: Vec<String> = if i > 0 && messages[i - 1].role == Role::Assistant {
                messages[i - 1].tool_uses().map(|(id, _, _)| id.to_string()).collect()
            } else {
                Vec::new()
            };
            orphans += fix_results(&mut messages[i], &prev_uses);
        } else {
            orphans += fix_results(&mut messages[i], &[]);
        }
        if !expected.is_empty() {
            let next = &mut messages[i + 1];
            let mut b = next.content.to_blocks();
            let present: HashSet<String> = b
                .iter()
                .filter_map(|x| match x {
                    ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.clone()),
                    _ => None,
                })
                .collect();
            let missing: Vec<ContentBlock> = expected
                .iter()
                .filter(|id| !present.contains(*id))
                .map(|id| ContentBlock::ToolResult { tool_use_id: id.clone(), content: SYNTHETIC_RESULT.to_string(), is_error: true })
                .collect();
            if !missing.is_empty() {
                synthetic += missing.len();
                let at = b.iter().take_while(|x| matches!(x, ContentBlock::ToolResult { .. })).count();
                b.splice(at..at, missing);
                next.content = Content::Blocks(b);
            }
        }
        i += 1;
    }
    (synthetic, orphans)
}

/// Turns results of `msg` not answering `uses` (or answering twice) into text; returns how many.
fn fix_results(msg: &mut Message, uses: &[String]) -> usize {
    let Content::Blocks(b) = &mut msg.content else { return 0 };
    let mut seen = HashSet::new();
    let mut converted = 0;
    for blk in b.iter_mut() {
        if let ContentBlock::ToolResult { tool_use_id, content, .. } = blk {
            if !uses.contains(tool_use_id) || !seen.insert(tool_use_id.clone()) {
                *blk = ContentBlock::text(format!("[tool result {tool_use_id}] {content}"));
                converted += 1;
            }
        }
    }
    if converted > 0 {
        b.sort_by_key(|x| !matches!(x, ContentBlock::ToolResult { .. }));
    }
    converted
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::message::fixtures::{result, tool_use};

    #[test]
    fn a_missing_result_is_synthesized_and_an_orphan_becomes_text() {
        let mut h = vec![
            Message::user_text("run it"),
            Message::assistant(vec![ContentBlock::text("sure"), tool_use("A")]),
            Message::user_blocks(vec![result("B"), ContentBlock::text("summarise")]),
        ];
        heal(&mut h);
        assert_eq!(check(&h), Ok(()));
        assert_eq!(
            h[2].content,
            Content::Blocks(vec![
                ContentBlock::ToolResult { tool_use_id: "A".into(), content: SYNTHETIC_RESULT.into(), is_error: true },
                ContentBlock::text("[tool result B] ok"),
                ContentBlock::text("summarise"),
            ])
        );
    }

    #[test]
    fn an_unanswered_call_at_the_end_gets_a_user_message() {
        let mut h = vec![Message::user_text("go"), Message::assistant(vec![tool_use("A"), tool_use("B")])];
        heal(&mut h);
        assert_eq!(check(&h), Ok(()));
        assert_eq!(h.len(), 3);
        assert_eq!(h[2].role, Role::User);
    }

    #[test]
    fn empties_are_dropped_and_neighbours_merged() {
        let mut h = vec![
            Message::user_text("a"),
            Message::assistant(vec![]),
            Message::user_blocks(vec![ContentBlock::text("  ")]),
            Message::user_text("b"),
            Message::assistant(vec![ContentBlock::text("x"), ContentBlock::text("")]),
        ];
        heal(&mut h);
        assert_eq!(check(&h), Ok(()));
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].content, Content::Blocks(vec![ContentBlock::text("a"), ContentBlock::text("b")]));
        assert_eq!(h[1].content, Content::Blocks(vec![ContentBlock::text("x")]));
    }

    fn summary(text: &str) -> Message {
        Message::user_text(format!("{}{text}", crate::message::SUMMARY_PREFIX))
    }

    #[test]
    fn a_summary_is_a_fence_in_the_history_and_an_ordinary_user_message_on_the_wire() {
        let mut h = vec![
            Message::user_text("old question"),
            summary("what happened"),
            Message::user_text("new question"),
            Message::assistant(vec![tool_use("A")]),
        ];
        let notes = heal(&mut h);
        assert_eq!(notes, vec!["added 1 synthetic tool_result(s) for interrupted tool calls".to_string()]);
        assert_eq!(check_history(&h), Ok(()));
        assert_eq!(check(&h), Err(Violation::SameRole(0)), "the history keeps the fence apart");
        assert_eq!(h.len(), 5);
        assert!(h[1].is_summary());
        let mut wire = h[1..].to_vec();
        heal_window(&mut wire);
        assert_eq!(check(&wire), Ok(()));
        assert_eq!(wire.len(), 3);
        assert!(wire[0].is_summary(), "the merged message still starts with the summary");
        assert_eq!(wire[0].plain_text(), format!("{}what happened\nnew question", crate::message::SUMMARY_PREFIX));
    }

    fn arb_block() -> impl Strategy<Value = ContentBlock> {
        let id = prop::sample::select(vec!["A", "B", "C"]);
        prop_oneof![
            prop::sample::select(vec!["", " ", "hi"]).prop_map(ContentBlock::text),
            id.clone().prop_map(tool_use),
            id.prop_map(result),
        ]
    }

    proptest! {
        #[test]
        fn heal_always_yields_a_valid_history(
            msgs in prop::collection::vec((any::<bool>(), prop::collection::vec(arb_block(), 0..4)), 0..12)
        ) {
            let mut h: Vec<Message> = msgs
                .into_iter()
                .map(|(user, b)| if user { Message::user_blocks(b) } else { Message::assistant(b) })
                .collect();
            heal(&mut h);
            prop_assert_eq!(check(&h), Ok(()));
            let mut again = h.clone();
            heal(&mut again);
            prop_assert_eq!(again, h);
        }

        #[test]
        fn heal_keeps_every_summary_and_every_window_is_valid(
            msgs in prop::collection::vec((0u8..3, prop::collection::vec(arb_block(), 0..4)), 0..14)
        ) {
            let mut h: Vec<Message> = msgs
                .into_iter()
                .map(|(kind, b)| match kind {
                    0 => Message::user_blocks(b),
                    1 => Message::assistant(b),
                    _ => summary("s"),
                })
                .collect();
            let summaries = h.iter().filter(|m| m.is_summary()).count();
            heal(&mut h);
            prop_assert_eq!(check_history(&h), Ok(()));
            prop_assert_eq!(h.iter().filter(|m| m.is_summary()).count(), summaries);
            let mut again = h.clone();
            heal(&mut again);
            prop_assert_eq!(&again, &h);
            let start = h.iter().rposition(Message::is_summary).unwrap_or(0);
            let mut wire = h[start..].to_vec();
            heal_window(&mut wire);
            prop_assert_eq!(check(&wire), Ok(()));
        }
    }
}
