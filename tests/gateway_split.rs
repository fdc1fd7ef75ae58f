//! Split invariance (docs/design.md §4): the same byte stream split at any point yields the same
//! events. A full Anthropic stream (text + tool_use + usage) and a full OpenAI stream, cut at
//! every byte offset and at random points — offline through `client::replay`, and over real
//! HTTP through the scripted gateway — always give the same `Response`.

use std::time::Duration;

use cicy::conversation::message::{ContentBlock, Role};
use cicy::gateway::client::replay;
use cicy::gateway::{ApiStyle, CallOptions, GatewayClient, GatewaySettings, Prompt, PromptBlock, PromptMessage};
use cicy_test_support::gateway::*;
use proptest::prelude::*;
use tokio_util::sync::CancellationToken;

fn anthropic_full() -> Vec<u8> {
    anthropic_text_and_tool("Héllo 世界 🎉", "toolu_7", "shell", r#"{"cmd": "echo 中文", "n": [1, 2]}"#).concat()
}

fn openai_full() -> Vec<u8> {
    let mut text = openai_text("Héllo 世界 🎉");
    let tool = openai_tool_call("call_7", "shell", r#"{"cmd": "echo 中文", "n": [1, 2]}"#);
    // Text chunks without their finish/usage/[DONE], then the tool call's chunks.
    text.truncate(text.len() - 3);
    [text, tool].concat().concat()
}

fn split(bytes: &[u8], mut cuts: Vec<usize>) -> Vec<Vec<u8>> {
    cuts.retain(|&c| c > 0 && c < bytes.len());
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut start = 0;
    for c in cuts {
        out.push(bytes[start..c].to_vec());
        start = c;
    }
    out.push(bytes[start..].to_vec());
    out
}

#[test]
fn every_byte_offset_gives_the_same_response() {
    for (style, bytes) in [(ApiStyle::Anthropic, anthropic_full()), (ApiStyle::Openai, openai_full())] {
        let whole = replay(style, [&bytes]).expect("whole stream");
        assert_eq!(whole.0.content.len(), 2, "{style:?}: {:?}", whole.0.content);
        for cut in 0..=bytes.len() {
            let got = replay(style, split(&bytes, vec![cut])).expect("split stream");
            // Deltas may only be cut differently at the SSE level, never inside an event.
            assert_eq!(got, whole, "{style:?} split at {cut}");
        }
        let bytewise: Vec<Vec<u8>> = bytes.iter().map(|b| vec![*b]).collect();
        assert_eq!(replay(style, bytewise).expect("byte by byte"), whole);
    }
}

proptest! {
    #[test]
    fn random_splits_give_the_same_response(cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..40)) {
        for (style, bytes) in [(ApiStyle::Anthropic, anthropic_full()), (ApiStyle::Openai, openai_full())] {
            let whole = replay(style, [&bytes]).expect("whole");
            let cuts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            prop_assert_eq!(replay(style, split(&bytes, cuts)).expect("split"), whole);
        }
    }
}

/// The same, over real HTTP: the scripted gateway writes the pieces with a pause between them so
/// the client reads them separately.
#[test]
fn random_splits_over_http_give_the_same_response() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let gw = rt.block_on(ScriptedGateway::start());
    let config = ProptestConfig { cases: 12, ..ProptestConfig::default() };
    proptest!(config, |(cuts in proptest::collection::vec(any::<prop::sample::Index>(), 1..12))| {
        for (style, bytes) in [(ApiStyle::Anthropic, anthropic_full()), (ApiStyle::Openai, openai_full())] {
            let (whole, _) = replay(style, [&bytes]).expect("whole");
            let cuts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            gw.push(Reply::Sse { chunks: split(&bytes, cuts), delay: Duration::from_millis(2) });
            let settings = GatewaySettings { max_retries: 0, ..GatewaySettings::new(gw.url(), style) };
            let c = GatewayClient::new(settings).expect("client");
            let prompt = Prompt {
                messages: vec![PromptMessage { role: Role::User, blocks: vec![PromptBlock { block: ContentBlock::text("hi"), cache: true }] }],
                ..Prompt::default()
            };
            let opts = CallOptions { model: "m".into(), max_tokens: 64, session_id: "s".into(), aux: None, timeout: None };
            let mut r = rt.block_on(c.send(&prompt, &opts, &mut |_| {}, &CancellationToken::new())).expect("response");
            r.prefix_sha256.clear();
            prop_assert_eq!(r, whole);
        }
    });
}
