//! Unit and property tests of `sse.rs`, including the checks of what `eventsource-stream` does
//! on its own (the findings documented at the top of `sse.rs`).

use std::convert::Infallible;
use std::time::Duration;

use eventsource_stream::EventStream;
use futures_util::{stream, FutureExt, StreamExt};
use proptest::prelude::*;

use super::*;

fn ev(event: &str, data: &str) -> SseEvent {
    SseEvent { event: event.into(), data: data.into() }
}

/// Splits `bytes` at the given offsets (sorted, deduplicated, clamped).
fn split_at(bytes: &[u8], mut cuts: Vec<usize>) -> Vec<Vec<u8>> {
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

/// The crate without our byte stage, for the findings tests.
fn raw_decode(chunks: Vec<Vec<u8>>) -> Vec<SseEvent> {
    let items: Vec<Result<Vec<u8>, Infallible>> = chunks.into_iter().map(Ok).collect();
    let fut = EventStream::new(stream::iter(items)).map(|e| e.map(|e| SseEvent { event: e.event, data: e.data })).collect::<Vec<_>>();
    match fut.now_or_never() {
        Some(v) => v.into_iter().filter_map(Result::ok).collect(),
        None => panic!("raw decoder did not finish"),
    }
}

const TRICKY: &str = "event: message_start\r\ndata: {\"a\":\"中文🎉\"}\r\n\r\n: ping comment\r\revent: content_block_delta\rdata: é\rdata: 二行\r\rdata: no name\n\n";

fn tricky_expected() -> Vec<SseEvent> {
    vec![ev("message_start", "{\"a\":\"中文🎉\"}"), ev("content_block_delta", "é\n二行"), ev("message", "no name")]
}

#[test]
fn whole_stream_decodes_all_line_endings() {
    let got = decode_chunks([TRICKY.as_bytes()]).expect("decodes");
    assert_eq!(got, tricky_expected());
}

#[test]
fn every_single_split_point_gives_the_same_events() {
    let bytes = TRICKY.as_bytes();
    for cut in 0..=bytes.len() {
        let got = decode_chunks(split_at(bytes, vec![cut])).expect("decodes");
        assert_eq!(got, tricky_expected(), "split at byte {cut}");
    }
}

#[test]
fn byte_by_byte_gives_the_same_events() {
    let chunks: Vec<Vec<u8>> = TRICKY.bytes().map(|b| vec![b]).collect();
    assert_eq!(decode_chunks(chunks).expect("decodes"), tricky_expected());
}

#[test]
fn event_without_blank_line_never_fires() {
    assert_eq!(decode_chunks([b"data: a\n\ndata: b\n".as_slice()]).expect("ok"), vec![ev("message", "a")]);
}

#[test]
fn data_without_space_and_empty_data() {
    let got = decode_chunks([b"data:x\n\ndata:\n\nevent: ping\n\n".as_slice()]).expect("ok");
    // `data:` alone is an event with empty data; an event with no data line does not fire.
    assert_eq!(got, vec![ev("message", "x"), ev("message", "")]);
}

#[test]
fn leading_bom_is_dropped() {
    let got = decode_chunks([&[0xEF, 0xBB][..], &b"\xBFdata: a\n\n"[..]]).expect("ok");
    assert_eq!(got, vec![ev("message", "a")]);
}

#[test]
fn only_one_leading_bom_is_dropped_and_none_panics() {
    // The second BOM is part of the first field name (`\u{feff}data`), which is ignored.
    let got = decode_chunks(["\u{feff}\u{feff}data: a\n\ndata: b\n\n".as_bytes()]).expect("ok");
    assert_eq!(got, vec![ev("message", "b")]);
    let got = decode_chunks(["\u{feff}".as_bytes(), "\u{feff}".as_bytes(), b"\n\ndata: c\n\n"]).expect("ok");
    assert_eq!(got, vec![ev("message", "c")]);
    // A BOM later in the stream is just text.
    let got = decode_chunks(["data: \u{feff}x\n\n".as_bytes()]).expect("ok");
    assert_eq!(got, vec![ev("message", "\u{feff}x")]);
}

#[test]
fn invalid_utf8_is_an_error_at_once() {
    let err = decode_chunks([&b"data: a\n\ndata: \xFF\xFE\n\n"[..]]).expect_err("invalid");
    assert!(matches!(err, SseError::Utf8 { offset: 15 }), "{err:?}");
}

#[test]
fn character_cut_off_by_eof_is_an_error() {
    let err = decode_chunks([&b"data: a\n\ndata: \xE4\xB8"[..]]).expect_err("truncated");
    assert!(matches!(err, SseError::TruncatedUtf8), "{err:?}");
}

// ---- Findings about eventsource-stream 0.2.3 on its own -------------------------------------

#[test]
fn finding_raw_crate_handles_utf8_split_inside_a_character() {
    let bytes = "data: 中🎉\n\n".as_bytes();
    for cut in 1..bytes.len() {
        assert_eq!(raw_decode(split_at(bytes, vec![cut])), vec![ev("message", "中🎉")], "cut {cut}");
    }
}

#[test]
fn finding_raw_crate_panics_on_a_leading_bom() {
    let raw = std::panic::catch_unwind(|| raw_decode(vec!["\u{feff}data: a\n\n".as_bytes().to_vec()]));
    assert!(raw.is_err(), "eventsource-stream 0.2.3 slices the 3-byte BOM at byte 1");
    assert_eq!(decode_chunks(["\u{feff}data: a\n\n".as_bytes()]).expect("ok"), vec![ev("message", "a")]);
}

#[test]
fn finding_raw_crate_loses_an_event_ending_in_cr_at_eof() {
    assert_eq!(raw_decode(vec![b"data: x\r\r".to_vec()]), Vec::<SseEvent>::new());
    assert_eq!(decode_chunks([b"data: x\r\r".as_slice()]).expect("ok"), vec![ev("message", "x")]);
}

/// A read ending in the CR that completes an event, then silence: the event must fire now.
async fn first_event_after_cr_read(raw: bool) -> Option<SseEvent> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Result<Vec<u8>, Infallible>>();
    let bytes = stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
    tx.send(Ok(b"data: x\r\r".to_vec())).expect("send");
    let next = async {
        if raw {
            let mut s = std::pin::pin!(EventStream::new(bytes));
            s.next().await.and_then(Result::ok).map(|e| SseEvent { event: e.event, data: e.data })
        } else {
            let mut s = std::pin::pin!(decode(bytes));
            s.next().await.and_then(Result::ok)
        }
    };
    let got = tokio::time::timeout(Duration::from_millis(300), next).await.ok().flatten();
    drop(tx);
    got
}

#[tokio::test]
async fn finding_raw_crate_holds_back_a_cr_terminated_event() {
    assert_eq!(first_event_after_cr_read(true).await, None);
    assert_eq!(first_event_after_cr_read(false).await, Some(ev("message", "x")));
}

// ---- Property tests --------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct GenEvent {
    name: Option<String>,
    lines: Vec<String>,
    comment: bool,
    ending: &'static str,
}

fn gen_event() -> impl Strategy<Value = GenEvent> {
    (
        proptest::option::of("[a-z_]{1,12}"),
        proptest::collection::vec("[a-zA-Z0-9 {}\":,é中文🎉😀]{0,12}", 1..4),
        any::<bool>(),
        prop_oneof![Just("\n"), Just("\r"), Just("\r\n")],
    )
        .prop_map(|(name, lines, comment, ending)| GenEvent { name, lines, comment, ending })
}

fn render(events: &[GenEvent]) -> (Vec<u8>, Vec<SseEvent>) {
    let mut bytes = String::new();
    let mut expected = Vec::new();
    for e in events {
        // One ending per event: a lone CR followed by an LF-only blank line would read as CRLF.
        let nl = e.ending;
        if e.comment {
            bytes.push_str(&format!(": keep-alive 中{nl}"));
        }
        if let Some(name) = &e.name {
            bytes.push_str(&format!("event: {name}{nl}"));
        }
        for line in &e.lines {
            bytes.push_str(&format!("data: {line}{nl}"));
        }
        bytes.push_str(nl);
        expected.push(ev(e.name.as_deref().unwrap_or("message"), &e.lines.join("\n")));
    }
    (bytes.into_bytes(), expected)
}

proptest! {
    #[test]
    fn any_split_gives_the_same_events(
        events in proptest::collection::vec(gen_event(), 1..8),
        bom in any::<bool>(),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let (mut bytes, expected) = render(&events);
        if bom {
            bytes.splice(0..0, "\u{feff}".bytes());
        }
        let cuts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        let got = decode_chunks(split_at(&bytes, cuts)).expect("decodes");
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn raw_crate_survives_utf8_splits_with_lf_endings(
        lines in proptest::collection::vec("[a-z中文🎉😀é]{1,10}", 1..6),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let text: String = lines.iter().map(|l| format!("data: {l}\n\n")).collect();
        let bytes = text.into_bytes();
        let cuts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        let expected: Vec<SseEvent> = lines.iter().map(|l| ev("message", l)).collect();
        prop_assert_eq!(raw_decode(split_at(&bytes, cuts)), expected);
    }
}
