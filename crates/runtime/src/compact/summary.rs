//! The summary of a compaction (docs/design.md §7): transcript, the eight-section prompt, chunking
//! and the `X-Cicy-Aux: compact` calls.
//!
//! Owns turning messages into a transcript (one line per block; tool inputs cut to 300
//! characters, results to 400; outcome markers and thinking left out), splitting a transcript
//! that does not fit one request into chunks and summarizing their summaries, and the aux
//! requests themselves. Must not touch: the history or its files — it returns text, and
//! `super` decides where it goes; nothing of these requests or answers is persisted.

use std::collections::HashMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::cut::estimate_tokens;
use super::CompactError;
use crate::conversation::message::{Content, ContentBlock, Message, Role, Usage, SUMMARY_PREFIX};
use crate::event::preview;
use crate::gateway::{overflow, AuxKind, CallOptions, GatewayClient, GatewayEvent, Prompt, PromptBlock, PromptMessage, SystemBlock};

/// cicy: a compact summary may be 4096 tokens long.
pub const MAX_TOKENS: u32 = 4096;

/// cicy: each summary call (retries included) gives up after 90 s.
pub const TIMEOUT: Duration = Duration::from_secs(90);

/// cicy: a `tool_use` input is cut to 300 characters in the transcript.
pub const TOOL_INPUT_CHARS: usize = 300;

/// cicy: a `tool_result` is cut to 400 characters in the transcript.
pub const TOOL_RESULT_CHARS: usize = 400;

/// The system prompt of every summary call: the eight sections of docs/design.md §7.
pub const SYSTEM_PROMPT: &str = "You are the conversation compactor of an agent runtime. You do not answer, continue or comment on the conversation: you write the summary that replaces its earlier messages, so the agent can carry on the work without them.

Write in the language the user writes in. Be specific: keep names, paths, commands, numbers, identifiers and error messages exactly as they appear. Leave out small talk and anything later superseded.

Use exactly these eight sections, in this order, each under its heading:
1. User goals and requests: everything the user asked for, including requests that changed later (say how they changed).
2. Key decisions and conclusions: what was decided or found out, and why.
3. Tasks and status: each task and whether it is done, in progress or not started.
4. Files and code: files read, created or changed, and what matters about each.
5. Errors and fixes: errors met and how they were fixed; the user's corrections above all.
6. Constraints and prohibitions: every rule, limit and prohibition the user gave, with the key wording quoted verbatim.
7. Current work: what was being done right before this summary.
8. Next step: the next action, matching the user's latest request; \"none\" when the work is complete.

Write \"none\" under a section with nothing to report.";

/// Opens the request when the whole transcript fits one.
pub const WHOLE_INTRO: &str =
    "Summarize the conversation in this transcript (oldest first; one line per message block; long tool inputs and results are cut).";

/// Opens a request that merges the summaries of parts.
pub const MERGE_INTRO: &str = "These are summaries of consecutive parts of one conversation, oldest first. Merge them into one summary of all of it; where they disagree, the later part wins.";

/// Opens the request for part `i` of `k` of a transcript too large for one.
pub fn part_intro(i: usize, k: usize) -> String {
    format!("This transcript is part {i} of {k} of one long conversation (oldest first; one line per message block; long tool inputs and results are cut). Summarize this part; the other parts are summarized separately.")
}

/// How many levels of summaries-of-summaries are tried before giving up.
const MAX_MERGE_LEVELS: usize = 4;

/// The transcript of `messages`: one entry per content block, oldest first.
///
/// `User: …` / `Assistant: …` for text (kept whole: the user's wording matters), `Assistant
/// called <tool>: <input JSON, ≤ 300 chars>`, `Result of <tool>: …` / `Error from <tool>: …`
/// (≤ 400 chars, line breaks shown as ⏎), `Summary of the earlier conversation: …` for an
/// earlier summary. Outcome markers and thinking blocks are left out.
pub fn transcript(messages: &[Message]) -> Vec<String> {
    let mut names: HashMap<&str, &str> = HashMap::new();
    let mut lines = Vec::new();
    for m in messages {
        if crate::conversation::outcome::marker_of(m).is_some() {
            continue;
        }
        if m.is_summary() {
            let text = m.plain_text();
            lines.push(format!("Summary of the earlier conversation: {}", text.strip_prefix(SUMMARY_PREFIX).unwrap_or(&text).trim()));
            continue;
        }
        let who = match m.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
        };
        let blocks: &[ContentBlock] = match &m.content {
            Content::Text(t) => {
                if !t.trim().is_empty() {
                    lines.push(format!("{who}: {}", t.trim()));
                }
                continue;
            }
            Content::Blocks(b) => b,
        };
        for b in blocks {
            match b {
                ContentBlock::Text { text } if text.trim().is_empty() => {}
                ContentBlock::Text { text } => lines.push(format!("{who}: {}", text.trim())),
                ContentBlock::ToolUse { id, name, input } => {
                    names.insert(id, name);
                    lines.push(format!("{who} called {name}: {}", preview(&input.to_string(), TOOL_INPUT_CHARS)));
                }
                ContentBlock::ToolResult { tool_use_id, content, is_error } => {
                    let tool = names.get(tool_use_id.as_str()).copied().unwrap_or("a tool");
                    let tag = if *is_error { "Error from" } else { "Result of" };
                    lines.push(format!("{tag} {tool}: {}", one_line(&preview(content, TOOL_RESULT_CHARS))));
                }
                ContentBlock::Thinking { .. } => {}
            }
        }
    }
    lines
}

fn one_line(s: &str) -> String {
    s.replace("\r\n", "\n").replace('\r', "\n").trim_end().replace('\n', " ⏎ ")
}

/// Joins `entries` into chunks of at most `budget` estimated tokens each (an entry is followed
/// by a line break); an entry larger than the budget is split on character boundaries.
pub fn chunks(entries: &[String], budget: u64) -> Vec<String> {
    let budget = budget.max(16);
    let mut out = Vec::new();
    let (mut cur, mut cur_tokens) = (String::new(), 0u64);
    for entry in entries {
        for piece in split_to_budget(entry, budget - 1) {
            // Estimating pieces apart never undercounts their concatenation.
            let t = estimate_tokens(piece) + 1;
            if cur_tokens + t > budget && !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
                cur_tokens = 0;
            }
            cur.push_str(piece);
            cur.push('\n');
            cur_tokens += t;
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// `s` in consecutive pieces of at most `budget` estimated tokens each.
fn split_to_budget(s: &str, budget: u64) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut ascii, mut other) = (0usize, 0u64, 0u64);
    for (i, c) in s.char_indices() {
        let (a, o) = if c.is_ascii() { (ascii + 1, other) } else { (ascii, other + 1) };
        if a.div_ceil(4) + o > budget && i > start {
            out.push(&s[start..i]);
            start = i;
            (ascii, other) = if c.is_ascii() { (1, 0) } else { (0, 1) };
        } else {
            (ascii, other) = (a, o);
        }
    }
    out.push(&s[start..]);
    out
}

/// The gateway, model and sizes a summary is made with.
pub struct Call<'a> {
    pub client: &'a GatewayClient,
    pub model: &'a str,
    /// Sent as `X-Cicy-Session-Id` (the conversation id).
    pub session_id: &'a str,
    /// Estimated tokens of transcript one request may carry (see `super::Settings`).
    pub chunk_tokens: u64,
    /// Output tokens of each summary request (see `super::Settings::summary_max_tokens`).
    pub max_tokens: u32,
}

/// A finished summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The summary text, trimmed (without [`SUMMARY_PREFIX`]).
    pub text: String,
    /// Summed over every aux request (counted, never written to the conversation).
    pub usage: Usage,
    /// How many aux requests it took.
    pub requests: usize,
}

/// cicy: a summary request the gateway refuses as over the context window is tried again in
/// parts of half the size, down to this many estimated tokens.
pub const MIN_CHUNK_TOKENS: u64 = 256;

/// Summarizes `messages`: in one request when the transcript fits `call.chunk_tokens`,
/// otherwise part by part, then the summaries of the parts (again in parts if need be). When
/// the gateway refuses a request as over the context window (see
/// `crate::gateway::overflow`), the whole summary starts again with parts half the size, down
/// to [`MIN_CHUNK_TOKENS`]. `progress` hears one line per extra request, per gateway retry and
/// per such restart.
///
/// Errors: [`CompactError::Nothing`] for an empty transcript, [`CompactError::Gateway`] when a
/// request fails (including [`crate::gateway::GatewayError::Cancelled`]),
/// [`CompactError::Empty`] for an answer without text, [`CompactError::TooLarge`] when the
/// summaries stop getting shorter.
pub async fn summarize(
    call: &Call<'_>,
    messages: &[Message],
    progress: &mut (dyn FnMut(String) + Send),
    cancel: &CancellationToken,
) -> Result<Summary, CompactError> {
    let entries = transcript(messages);
    let mut chunk_tokens = call.chunk_tokens;
    let (mut usage, mut requests) = (Usage::default(), 0);
    loop {
        let sized = Call { chunk_tokens, ..*call };
        let mut acc = Summary { text: String::new(), usage, requests };
        let result = summarize_in_chunks(&sized, &entries, &mut acc, progress, cancel).await;
        match result {
            Err(CompactError::Gateway(e)) if chunk_tokens > MIN_CHUNK_TOKENS && overflow::detect(&e).is_some() => {
                chunk_tokens = (chunk_tokens / 2).max(MIN_CHUNK_TOKENS);
                progress(format!("the summary request was over the context window; trying again in parts of ~{chunk_tokens} tokens"));
                (usage, requests) = (acc.usage, acc.requests);
            }
            Err(e) => return Err(e),
            Ok(()) => return Ok(acc),
        }
    }
}

async fn summarize_in_chunks(
    call: &Call<'_>,
    entries: &[String],
    acc: &mut Summary,
    progress: &mut (dyn FnMut(String) + Send),
    cancel: &CancellationToken,
) -> Result<(), CompactError> {
    let parts = chunks(entries, call.chunk_tokens);
    match parts.len() {
        0 => return Err(CompactError::Nothing),
        1 => {
            acc.text = request(call, WHOLE_INTRO, "transcript", &parts[0], acc, progress, cancel).await?;
            return Ok(());
        }
        _ => {}
    }
    let k = parts.len();
    let mut texts = Vec::with_capacity(k);
    for (i, part) in parts.iter().enumerate() {
        progress(format!("summarizing part {} of {k}", i + 1));
        texts.push(request(call, &part_intro(i + 1, k), "transcript", part, acc, progress, cancel).await?);
    }
    for _ in 0..MAX_MERGE_LEVELS {
        let n = texts.len();
        let entries: Vec<String> = texts.iter().enumerate().map(|(i, t)| format!("[Summary of part {} of {n}]\n{t}", i + 1)).collect();
        let groups = chunks(&entries, call.chunk_tokens);
        if groups.len() == 1 {
            progress(format!("merging {n} partial summaries"));
            acc.text = request(call, MERGE_INTRO, "summaries", &groups[0], acc, progress, cancel).await?;
            return Ok(());
        }
        if groups.len() >= n {
            break;
        }
        let mut next = Vec::with_capacity(groups.len());
        for (i, g) in groups.iter().enumerate() {
            progress(format!("merging partial summaries, group {} of {}", i + 1, groups.len()));
            next.push(request(call, MERGE_INTRO, "summaries", g, acc, progress, cancel).await?);
        }
        texts = next;
    }
    Err(CompactError::TooLarge { chunk_tokens: call.chunk_tokens, levels: MAX_MERGE_LEVELS })
}

/// The aux request for one piece: the system prompt, one user message with `intro` and `body`
/// inside `<tag>`.
pub fn request_prompt(intro: &str, tag: &str, body: &str) -> Prompt {
    let text = format!("{intro}\n\n<{tag}>\n{body}</{tag}>");
    Prompt {
        system: vec![SystemBlock { text: SYSTEM_PROMPT.to_string(), cache: false }],
        tools: Vec::new(),
        tools_cache: false,
        messages: vec![PromptMessage { role: Role::User, blocks: vec![PromptBlock { block: ContentBlock::text(text), cache: false }] }],
    }
}

async fn request(
    call: &Call<'_>,
    intro: &str,
    tag: &str,
    body: &str,
    acc: &mut Summary,
    progress: &mut (dyn FnMut(String) + Send),
    cancel: &CancellationToken,
) -> Result<String, CompactError> {
    let opts = CallOptions {
        model: call.model.to_string(),
        max_tokens: call.max_tokens,
        session_id: call.session_id.to_string(),
        aux: Some(AuxKind::Compact),
        timeout: Some(TIMEOUT),
    };
    let mut on_event = |ev: GatewayEvent| match ev {
        GatewayEvent::Retry { attempt, delay_ms, reason } => progress(format!("summary call: retry {attempt} in {delay_ms} ms: {reason}")),
        GatewayEvent::TextDelta(_) | GatewayEvent::ThinkingDelta(_) => {}
    };
    let resp = call.client.send(&request_prompt(intro, tag, body), &opts, &mut on_event, cancel).await?;
    acc.usage.add(&resp.usage);
    acc.requests += 1;
    let text = resp.text().trim().to_string();
    if text.is_empty() {
        return Err(CompactError::Empty);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_transcript_has_one_line_per_block_cuts_tool_io_and_skips_markers() {
        let long_cmd = "x".repeat(400);
        let h = vec![
            Message::user_text(format!("{SUMMARY_PREFIX}Earlier: built the parser.")),
            Message::user_text("Never touch prod.\nUse staging."),
            Message::assistant(vec![
                ContentBlock::Thinking { thinking: "hmm".into(), signature: String::new() },
                ContentBlock::text("Checking."),
                ContentBlock::ToolUse { id: "t1".into(), name: "shell".into(), input: json!({"command": long_cmd}) },
            ]),
            Message::user_blocks(vec![ContentBlock::ToolResult {
                tool_use_id: "t1".into(),
                content: format!("line1\n{}", "y".repeat(500)),
                is_error: true,
            }]),
            Message::assistant(vec![ContentBlock::text(crate::conversation::outcome::Outcome::Cancelled.marker())]),
        ];
        let t = transcript(&h);
        assert_eq!(t.len(), 5);
        assert_eq!(t[0], "Summary of the earlier conversation: Earlier: built the parser.");
        assert_eq!(t[1], "User: Never touch prod.\nUse staging.");
        assert_eq!(t[2], "Assistant: Checking.");
        let call = &t[3];
        assert!(call.starts_with("Assistant called shell: {\"command\":\"xxx"), "{call}");
        assert_eq!(call.chars().count(), "Assistant called shell: ".len() + TOOL_INPUT_CHARS + 1);
        assert!(call.ends_with('…'));
        let result = &t[4];
        assert!(result.starts_with("Error from shell: line1 ⏎ yyy"), "{result}");
        assert_eq!(result.chars().count(), "Error from shell: ".len() + TOOL_RESULT_CHARS + " ⏎ ".chars().count() - 1 + 1);
    }

    #[test]
    fn chunks_respect_the_budget_and_split_oversized_entries() {
        let entries: Vec<String> = (0..50).map(|i| format!("User: message {i} {}", "word ".repeat(40))).collect();
        let cs = chunks(&entries, 200);
        assert!(cs.len() > 1);
        for c in &cs {
            assert!(estimate_tokens(c) <= 200, "{}", estimate_tokens(c));
        }
        assert_eq!(cs.concat(), entries.iter().map(|e| format!("{e}\n")).collect::<String>());
        let huge = vec!["中".repeat(1000)];
        let cs = chunks(&huge, 300);
        assert_eq!(cs.len(), 4);
        assert!(cs.iter().all(|c| estimate_tokens(c) <= 300));
        assert_eq!(cs.concat().replace('\n', ""), huge[0]);
    }

    #[test]
    fn the_system_prompt_names_the_eight_sections() {
        for s in [
            "1. User goals and requests",
            "2. Key decisions and conclusions",
            "3. Tasks and status",
            "4. Files and code",
            "5. Errors and fixes",
            "6. Constraints and prohibitions",
            "7. Current work",
            "8. Next step",
        ] {
            assert!(SYSTEM_PROMPT.contains(s), "{s}");
        }
        assert!(SYSTEM_PROMPT.contains("quoted verbatim"));
        assert!(SYSTEM_PROMPT.contains("language the user writes in"));
    }
}
