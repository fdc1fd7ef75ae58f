//! Where a compaction cuts the history, and the token estimate that sizes windows and chunks.
//!
//! Owns two pure computations: [`estimate_tokens`] / [`message_tokens`] (no tokenizer is
//! available offline for every model a gateway may route to, so sizes are estimated) and
//! [`choose`], the cut point that keeps the newest messages and never separates a `tool_use`
//! from its `tool_result`. It reads and writes nothing.

use crate::conversation::message::{Content, ContentBlock, Message, Role};

/// Estimated tokens of `text`: one per 4 ASCII bytes (rounded up) plus one per non-ASCII
/// character.
///
/// Where the numbers come from: Anthropic and OpenAI both document roughly 4 characters of
/// English text per token, and CJK text runs about one token per character in their
/// tokenizers (3 UTF-8 bytes each, so bytes/4 alone would undercount it by ~4×). The estimate is
/// only used against generous margins: compaction triggers at 85 % of the context window and a
/// summary request carries at most half of it.
pub fn estimate_tokens(text: &str) -> u64 {
    let (mut ascii, mut other) = (0u64, 0u64);
    for c in text.chars() {
        if c.is_ascii() {
            ascii += 1;
        } else {
            other += 1;
        }
    }
    ascii.div_ceil(4) + other
}

/// Per-block framing the wire adds around the content (type tags, ids, quotes).
const BLOCK_OVERHEAD_TOKENS: u64 = 4;

/// Estimated tokens of one message as sent: its blocks' text, tool names and inputs, results.
pub fn message_tokens(m: &Message) -> u64 {
    match &m.content {
        Content::Text(t) => estimate_tokens(t) + BLOCK_OVERHEAD_TOKENS,
        Content::Blocks(blocks) => blocks.iter().map(block_tokens).sum(),
    }
}

/// Estimated tokens of one content block as sent, framing included.
pub fn block_tokens(b: &ContentBlock) -> u64 {
    BLOCK_OVERHEAD_TOKENS
        + match b {
            ContentBlock::Text { text } => estimate_tokens(text),
            ContentBlock::ToolUse { id, name, input } => estimate_tokens(id) + estimate_tokens(name) + estimate_tokens(&input.to_string()),
            ContentBlock::ToolResult { tool_use_id, content, .. } => estimate_tokens(tool_use_id) + estimate_tokens(content),
            ContentBlock::Thinking { thinking, signature } => estimate_tokens(thinking) + estimate_tokens(signature),
        }
}

/// Index of the last message the user wrote: the last user message that is neither only tool
/// results nor a compact summary, before or after the last summary.
pub fn last_user_text(messages: &[Message]) -> Option<usize> {
    messages.iter().rposition(|m| {
        m.role == Role::User
            && !m.is_summary()
            && match &m.content {
                Content::Text(_) => true,
                Content::Blocks(b) => b.iter().any(|x| !matches!(x, ContentBlock::ToolResult { .. })),
            }
    })
}

/// Index of the user message that started the last turn ([`last_user_text`]). `None` when that
/// turn began before the last summary: compaction folded its start into the summary, so the
/// turn cannot be cut out of the history.
pub fn turn_start(messages: &[Message]) -> Option<usize> {
    let start = last_user_text(messages)?;
    let fence = messages.iter().rposition(Message::is_summary);
    fence.is_none_or(|f| start > f).then_some(start)
}

/// Where to cut `messages` so that `messages[window_start..cut]` is summarized and
/// `messages[cut..]` stays in the window after the summary.
///
/// The kept tail is the longest one that has at most `keep` messages and at most
/// `max_tail_tokens` estimated tokens, and is either empty (`cut == messages.len()`) or starts
/// with an assistant message whose predecessor has no `tool_use`. A `tool_use` and its result
/// sit in an assistant message and the user message right after it, so such a cut can never
/// fall between them. `None` when the summarized part would hold nothing but an earlier summary
/// (there is nothing new to compact).
pub fn choose(messages: &[Message], window_start: usize, keep: usize, max_tail_tokens: u64) -> Option<usize> {
    let len = messages.len();
    let first = len.saturating_sub(keep).max(window_start + 1);
    if first > len {
        return None;
    }
    // Estimated tokens of messages[c..] for every c, built from the end.
    let mut tail_tokens = vec![0u64; len + 1];
    for i in (first..len).rev() {
        tail_tokens[i] = tail_tokens[i + 1] + message_tokens(&messages[i]);
    }
    let cut = (first..=len).find(|&c| {
        let boundary = c == len || (messages[c].role == Role::Assistant && messages[c - 1].tool_uses().next().is_none());
        boundary && tail_tokens[c] <= max_tail_tokens
    })?;
    messages[window_start..cut].iter().any(|m| !m.is_summary()).then_some(cut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::invariants;
    use crate::conversation::message::SUMMARY_PREFIX;
    use proptest::prelude::*;

    use crate::conversation::message::fixtures::{result, tool_use};

    #[test]
    fn the_estimate_counts_ascii_by_four_and_other_characters_by_one() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("记住这个"), 4);
        assert_eq!(estimate_tokens("ok 好"), 2);
        assert_eq!(message_tokens(&Message::user_text("abcdefgh")), 2 + BLOCK_OVERHEAD_TOKENS);
    }

    #[test]
    fn the_cut_moves_off_a_tool_result_and_keeps_at_most_keep() {
        let h = vec![
            Message::user_text("q1"),
            Message::assistant(vec![tool_use("A")]),
            Message::user_blocks(vec![result("A")]),
            Message::assistant(vec![ContentBlock::text("a1")]),
            Message::user_text("q2"),
            Message::assistant(vec![ContentBlock::text("a2")]),
        ];
        // keep 4 would start at the tool_result (index 2): the tail shrinks to start at index 3.
        assert_eq!(choose(&h, 0, 4, u64::MAX), Some(3));
        assert_eq!(choose(&h, 0, 5, u64::MAX), Some(1));
        assert_eq!(choose(&h, 0, 0, u64::MAX), Some(6));
        // A token budget shrinks the tail further.
        assert_eq!(choose(&h, 0, 5, message_tokens(&h[5])), Some(5));
        // A keep as long as the window still summarizes its first message (the token budget
        // may need the room).
        assert_eq!(choose(&h, 0, 6, u64::MAX), Some(1));
        let only_summary = vec![Message::user_text(format!("{SUMMARY_PREFIX}s")), Message::assistant(vec![ContentBlock::text("a")])];
        assert_eq!(choose(&only_summary, 0, 1, u64::MAX), None);
    }

    #[test]
    fn an_unanswered_call_before_the_cut_point_is_not_split_from_its_turn() {
        // Unhealed: the assistant's tool_use A has no result, the next user message is text.
        let h = vec![
            Message::user_text("run it"),
            Message::assistant(vec![ContentBlock::text("sure"), tool_use("A")]),
            Message::user_text("summarise"),
        ];
        assert_eq!(choose(&h, 0, 2, u64::MAX), Some(1));
        // Two assistant messages in a row (unhealed): never cut right after the tool_use.
        let h = vec![
            Message::user_text("q"),
            Message::assistant(vec![tool_use("A")]),
            Message::assistant(vec![ContentBlock::text("x")]),
            Message::user_blocks(vec![result("A")]),
        ];
        assert_eq!(choose(&h, 0, 2, u64::MAX), Some(4));
    }

    fn arb_history() -> impl Strategy<Value = Vec<Message>> {
        // Turns of: user text, then 0..3 tool rounds, then maybe a final text answer.
        prop::collection::vec((0usize..3, any::<bool>()), 1..25).prop_map(|turns| {
            let mut h = Vec::new();
            let mut n = 0;
            for (rounds, answer) in turns {
                h.push(Message::user_text("q"));
                for _ in 0..rounds {
                    n += 1;
                    let id = format!("t{n}");
                    h.push(Message::assistant(vec![ContentBlock::text("let me see"), tool_use(&id)]));
                    h.push(Message::user_blocks(vec![result(&id)]));
                }
                if answer || rounds == 0 {
                    h.push(Message::assistant(vec![ContentBlock::text("done")]));
                }
            }
            invariants::heal(&mut h);
            h
        })
    }

    proptest! {
        #[test]
        fn no_cut_ever_separates_a_tool_pair(h in arb_history(), keep in 0usize..30, budget in 0u64..400) {
            if let Some(cut) = choose(&h, 0, keep, budget) {
                prop_assert!(cut >= 1 && cut <= h.len());
                prop_assert!(h.len() - cut <= keep);
                let mut window = vec![Message::user_text(format!("{SUMMARY_PREFIX}summary"))];
                window.extend_from_slice(&h[cut..]);
                let mut healed = window.clone();
                let notes = invariants::heal_window(&mut healed);
                // Only the summary may merge with a user message; no result is synthesized
                // and none is orphaned.
                prop_assert!(notes.iter().all(|n| n.starts_with("merged")), "{:?}", notes);
                prop_assert_eq!(invariants::check(&healed), Ok(()));
            }
        }
    }
}
