//! The context window against the scripted gateway (issue 7 items 15–16): a message that cannot
//! fit is refused before anything is sent and kept; the running turn's message is never set
//! aside or summarized away; a summary request the gateway refuses is made again in smaller
//! parts; a gateway's "over the context window" refusal teaches the window, compacts and sends
//! once more; warnings for AGENTS.md or a message over half the window.

use cicy::compact::{self, summary, window};
use cicy::conversation::message::{Message, SUMMARY_PREFIX};
use cicy::event::{EventKind, TurnOutcome};
use cicy::turn;
use cicy_test_support::fixture::{collector, kinds, TestHome};
use cicy_test_support::gateway::*;
use cicy_test_support::history::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const SUMMARY: &str = "1. User goals and requests: count files.\n8. Next step: none";

/// llama.cpp's refusal of a request over its context (HTTP 400), stating `n_ctx`.
const LLAMA_OVERFLOW: &str = r#"{"error":{"code":400,"message":"request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#;

fn messages(id: &str, t: &TestHome) -> Vec<Message> {
    serde_json::from_value(t.current_json(id)["messages"].clone()).expect("messages parse")
}

/// A `small` role whose meta.yaml gives `context_window`.
fn small_role(t: &TestHome, context_window: u64) {
    let d = t.home.roles_dir().join("small");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("system.md"), "You are a test agent.\n").unwrap();
    std::fs::write(d.join("role.md"), "You are {{TITLE}}.\n").unwrap();
    std::fs::write(
        d.join("meta.yaml"),
        format!("name: Small\ntools: [core]\nmax_tool_rounds: 10\nmax_tokens: 512\ncontext_window: {context_window}\n"),
    )
    .unwrap();
}

fn system_texts(ev: &std::sync::Arc<std::sync::Mutex<Vec<cicy::event::Event>>>) -> Vec<String> {
    kinds(ev).into_iter().filter_map(|k| if let EventKind::System { text } = k { Some(text) } else { None }).collect()
}

#[tokio::test]
async fn a_message_larger_than_the_window_is_refused_before_sending_and_kept_as_written() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    small_role(&t, 8192);
    let id = t.create("small", None);
    seed(&t, &id, tool_turns(2));
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let huge = "x".repeat(1 << 20);
    let outcome = turn::run_turn(&mut s, &huge, &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Blocked);
    assert_eq!(gw.requests().len(), 0, "no summary and no main request was sent");
    let error =
        kinds(&ev)
            .into_iter()
            .find_map(|k| if let EventKind::Error { kind, message } = k { Some((kind.to_string(), message)) } else { None });
    let (kind, message) = error.expect("an error event");
    assert_eq!(kind, "too_large");
    assert!(
        message.starts_with(
            "the message is too large to send: 1048576 bytes, ~262148 tokens; the context window of model test-model is 8192 tokens"
        ),
        "{message}"
    );
    assert!(message.contains("Nothing was sent; the message is kept in the history."), "{message}");
    let hist = messages(&id, &t);
    assert_eq!(hist.len(), 10, "the earlier turns stay as they were, nothing set aside");
    assert!(!hist.iter().any(Message::is_summary));
    assert_eq!(hist[8].plain_text(), huge);
    assert_eq!(hist[9].plain_text(), "(no reply this turn · blocked)");
    assert_eq!(t.reply_json(&id)["status"], "failed");
    assert_eq!(kinds(&ev).last(), Some(&EventKind::TurnEnded { outcome: TurnOutcome::Blocked }));
}

#[tokio::test]
async fn the_running_turns_message_is_never_set_aside_when_the_summary_fails() {
    let gw = ScriptedGateway::start().await;
    // The summary request is refused; the hard cap then sets the earlier turns aside.
    gw.push(Reply::status(500, &[("x-should-retry", "false")], "summarizer down"));
    gw.push(Reply::sse(anthropic_text("Here is my answer.")));
    let t = TestHome::new(&gw.url(), 0);
    small_role(&t, 8192);
    let id = t.create("small", None);
    let result = "r".repeat(4000);
    seed(&t, &id, (0..10).flat_map(|i| tool_turn(i, &format!("q{i}"), &result)).collect());
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let question = format!("Please read this and answer: {}", "word ".repeat(4000));
    let outcome = turn::run_turn(&mut s, &question, &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Completed);
    let reqs = gw.requests();
    let (aux, main) = split_aux(&reqs);
    assert_eq!((aux.len(), main.len()), (1, 1));
    let wire = wire_messages(&main[0]);
    assert_eq!(wire.len(), 1, "the notice and the question, merged on the wire");
    assert_eq!(wire[0].plain_text().matches(&question).count(), 1, "the question is sent as the user wrote it");
    let hist = messages(&id, &t);
    assert_eq!(hist.len(), 43);
    assert_eq!(hist[40].plain_text(), question, "the question stays where the user wrote it");
    assert_eq!(
        hist[41].plain_text(),
        format!(
            "{SUMMARY_PREFIX}(40 earlier messages could not be summarized (the summary call failed: gateway answered HTTP 500: summarizer down). They are kept in the history files but are no longer sent.)\n\n{}\n{question}\n{}",
            compact::CARRIED_PREFIX,
            compact::CARRIED_END
        ),
        "the notice carries the question verbatim"
    );
    let sys = system_texts(&ev);
    assert!(
        sys.contains(&"this message takes ~5012 tokens, more than half of the model's context window (8192 tokens)".to_string()),
        "{sys:?}"
    );
}

#[tokio::test]
async fn a_summary_request_the_gateway_refuses_is_made_again_in_smaller_parts() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    small_role(&t, 20_000);
    let id = t.create("small", None);
    let filler = "lorem ipsum dolor sit amet ".repeat(100);
    let all = seed(&t, &id, (0..8).flat_map(|i| tool_turn(i, &format!("q{i} {filler}"), "ok")).collect());
    let settings = compact::Settings::new(&cicy::config::CompactionConfig::default(), Some(20_000));
    assert_eq!((settings.chunk_tokens(), settings.summary_max_tokens()), (10_000, 4096));
    let lines = summary::transcript(&all);
    assert_eq!(summary::chunks(&lines, 10_000).len(), 1);
    let k = summary::chunks(&lines, 5_000).len();
    assert_eq!(k, 2);
    gw.push(Reply::status(400, &[], LLAMA_OVERFLOW));
    for i in 0..k {
        gw.push(Reply::sse(anthropic_text(&format!("part {i}"))));
    }
    gw.push(Reply::sse(anthropic_text(SUMMARY)));
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let done = compact::compact_session(&mut s, 0, &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(done.requests, k + 1);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 1 + k + 1);
    assert!(reqs.iter().all(|r| r.header("x-cicy-aux") == Some("compact")));
    for r in &reqs[1..=k] {
        let text = body(r)["messages"][0]["content"][0]["text"].as_str().unwrap().to_string();
        assert!(cicy::compact::cut::estimate_tokens(&text) <= 5_000 + 100, "each part fits the smaller size");
    }
    assert!(
        system_texts(&ev).contains(&"the summary request was over the context window; trying again in parts of ~5000 tokens".to_string())
    );
    let hist = messages(&id, &t);
    assert_eq!(hist.last().unwrap().plain_text(), format!("{SUMMARY_PREFIX}{SUMMARY}"));
}

#[tokio::test]
async fn a_gateway_overflow_teaches_the_window_compacts_and_sends_once_more() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(400, &[], LLAMA_OVERFLOW));
    gw.push(Reply::sse(anthropic_text(SUMMARY)));
    gw.push(Reply::sse(anthropic_text("Done.")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    seed(&t, &id, tool_turns(6));
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "and now?", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Completed);
    let reqs = gw.requests();
    assert_eq!(reqs.iter().map(|r| r.header("x-cicy-aux")).collect::<Vec<_>>(), [None, Some("compact"), None]);
    // The summary request is sized for the learned window: a quarter of it for the answer.
    assert_eq!(body(&reqs[1])["max_tokens"], 2048);
    let resent = wire_messages(&reqs[2]);
    assert!(resent[0].plain_text().contains(SUMMARY), "the re-sent window starts at the summary");
    assert!(resent.last().unwrap().plain_text().contains("and now?"));
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.workspace(&id).join(".cicy").join(window::FILE_NAME)).unwrap()).unwrap();
    assert_eq!(file["test-model"]["tokens"], 8192);
    assert_eq!(file["test-model"]["reason"], "the gateway stated a context window of 8192 tokens");
    let sys = system_texts(&ev);
    assert!(
        sys.iter().any(|t| t.starts_with("the gateway refused the request as over the context window (gateway answered HTTP 400: ")
            && t.ends_with("the gateway stated a context window of 8192 tokens: model test-model now has a window of 8192 tokens (recorded in .cicy/context_windows.json); compacting and sending once more")),
        "{sys:?}"
    );
    // The next session of this agent assumes the learned window.
    let s = t.open(&id);
    let m = s.materials().unwrap();
    assert_eq!(compact::settings(&s, &m).context_window, 8192);
}

#[tokio::test]
async fn a_message_the_learned_window_cannot_hold_is_refused_without_a_summary_request() {
    // Tried on the local llama.cpp server: a 60 KB message with the default 200000-token window
    // is refused by the gateway; once the window is learned, the message alone cannot fit, so no
    // summary request may be spent on it.
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(400, &[], LLAMA_OVERFLOW));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let big = "word ".repeat(12_000);
    let outcome = turn::run_turn(&mut s, &big, &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Blocked);
    assert_eq!(gw.requests().len(), 1, "the refused request only: no summary, no re-send");
    let errors: Vec<String> =
        kinds(&ev).into_iter().filter_map(|k| if let EventKind::Error { kind, .. } = k { Some(kind.to_string()) } else { None }).collect();
    assert_eq!(errors, ["too_large"]);
    assert!(!kinds(&ev).iter().any(|k| matches!(k, EventKind::Compacted { .. })), "nothing was compacted");
    let hist = messages(&id, &t);
    assert_eq!(hist[0].plain_text(), big, "the message is kept as written");
    assert_eq!(hist.last().unwrap().plain_text(), "(no reply this turn · blocked)");
}

#[tokio::test]
async fn a_second_overflow_after_the_resend_blocks_the_turn() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(400, &[], LLAMA_OVERFLOW));
    gw.push(Reply::sse(anthropic_text(SUMMARY)));
    gw.push(Reply::status(400, &[], LLAMA_OVERFLOW));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    seed(&t, &id, tool_turns(3));
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "again", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Blocked);
    assert_eq!(gw.requests().len(), 3, "sent once more, not again and again");
    let errors: Vec<String> =
        kinds(&ev).into_iter().filter_map(|k| if let EventKind::Error { kind, .. } = k { Some(kind.to_string()) } else { None }).collect();
    assert_eq!(errors, ["http_status"]);
    assert_eq!(messages(&id, &t).last().unwrap().plain_text(), "(no reply this turn · blocked)");
}

#[tokio::test]
async fn an_agents_md_over_half_the_window_is_warned_about() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("hi")));
    let t = TestHome::new(&gw.url(), 0);
    small_role(&t, 8192);
    let id = t.create("small", None);
    std::fs::write(t.workspace(&id).join("AGENTS.md"), "a".repeat(20_000)).unwrap();
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "hello", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert_eq!(
        system_texts(&ev),
        ["AGENTS.md takes ~5000 tokens, more than half of the model's context window (8192 tokens); every request carries it"]
    );
    assert_eq!(
        body(&gw.requests()[0])["messages"][0]["content"][0],
        json!({"type": "text", "text": format!("<role>\n{}\n</role>", "a".repeat(20_000))})
    );
}

#[tokio::test]
async fn the_cli_refuses_a_message_over_the_configured_window_with_exit_1() {
    let gw = ScriptedGateway::start().await;
    let h = tempfile::tempdir().unwrap();
    let url = gw.url();
    assert_eq!(cicy_test_support::cli::cicy(h.path(), &url, &["create", "Ada"], None).await.stdout, "w-1\n");
    let text = "y".repeat(120_000);
    let out = cicy_test_support::cli::command(h.path(), &url, &["chat", "w-1", &text])
        .env("CICY_CONTEXT_WINDOW", "8192")
        .output()
        .await
        .expect("run chat");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("error (too_large): the message is too large to send: 120000 bytes, ~30004 tokens; the context window of model test-model is 8192 tokens"), "{stderr}");
    assert!(stderr.contains("· turn ended: \"blocked\"") || stderr.contains("· turn ended: blocked"), "{stderr}");
    assert_eq!(gw.requests().len(), 0);
}

#[tokio::test]
async fn an_agents_md_larger_than_the_window_is_named_and_nothing_is_sent() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    small_role(&t, 8192);
    let id = t.create("small", None);
    std::fs::write(t.workspace(&id).join("AGENTS.md"), "a".repeat(200_000)).unwrap();
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "hello", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Blocked);
    assert_eq!(gw.requests().len(), 0);
    let error =
        kinds(&ev)
            .into_iter()
            .find_map(|k| if let EventKind::Error { kind, message } = k { Some((kind.to_string(), message)) } else { None });
    let (kind, message) = error.expect("an error event");
    assert_eq!(kind, "too_large");
    assert_eq!(
        message,
        "AGENTS.md takes ~50000 tokens: with the system prompt and 512 tokens for the answer, requests need ~50816 tokens before any message, over the context window of model test-model (8192 tokens). Nothing was sent; the message is kept in the history. Shorten AGENTS.md in the workspace"
    );
    assert_eq!(messages(&id, &t)[0].plain_text(), "hello");
}

#[tokio::test]
async fn a_window_too_small_for_any_request_names_the_setting_not_agents_md() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    small_role(&t, 100);
    let id = t.create("small", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "hello", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Blocked);
    assert_eq!(gw.requests().len(), 0);
    let error =
        kinds(&ev)
            .into_iter()
            .find_map(|k| if let EventKind::Error { kind, message } = k { Some((kind.to_string(), message)) } else { None });
    let (kind, message) = error.expect("an error event");
    assert_eq!(kind, "too_large");
    assert_eq!(
        message,
        "requests need ~339 tokens before any message (25 tokens reserved for the answer, AGENTS.md ~10, the system prompt and tools), over the context window of model test-model (100 tokens). Nothing was sent; the message is kept in the history. Check the context window (CICY_CONTEXT_WINDOW, compaction.context_window or the role's context_window) or lower max_tokens in the role's meta.yaml"
    );
}

#[tokio::test]
async fn a_small_window_takes_a_quarter_of_itself_for_the_answer() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("ok")));
    let t = TestHome::new(&gw.url(), 0);
    small_role(&t, 1500);
    let id = t.create("small", None);
    let mut s = t.open(&id);
    let (em, _ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "Say ok.", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(body(&reqs[0])["max_tokens"], 375, "min(meta.yaml's 512, 1500 / 4)");
}

#[tokio::test]
async fn tool_results_over_half_the_window_are_warned_about() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_use("t1", "shell", r#"{"command":"head -c 10000 /dev/zero | tr '\\0' 'z'"}"#)));
    gw.push(Reply::sse(anthropic_text("long")));
    let t = TestHome::new(&gw.url(), 0);
    small_role(&t, 4500);
    let id = t.create("small", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "print", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let sys = system_texts(&ev);
    assert_eq!(sys, ["the tool results of this round take ~2509 tokens, more than half of the model's context window (4500 tokens)"]);
}

/// llama.cpp's refusal of a request of `prompt_tokens` tokens (as its tokenizer counts them) over
/// its 8192-token context.
fn llama_overflow(prompt_tokens: u64) -> String {
    format!(
        r#"{{"error":{{"code":400,"message":"request ({prompt_tokens} tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":{prompt_tokens},"n_ctx":8192}}}}"#
    )
}

/// `bytes` bytes of random-looking 8-digit hex words: ~4 bytes a token by cicy's estimate, about
/// one by llama.cpp's tokenizer (the new user's message that the estimate put at a quarter).
fn hex_words(bytes: usize) -> String {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut s = String::new();
    while s.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!("{:08x} ", x & 0xffff_ffff));
    }
    s
}

fn error_events(ev: &std::sync::Arc<std::sync::Mutex<Vec<cicy::event::Event>>>) -> Vec<(String, String)> {
    kinds(ev)
        .into_iter()
        .filter_map(|k| if let EventKind::Error { kind, message } = k { Some((kind.to_string(), message)) } else { None })
        .collect()
}

#[tokio::test]
async fn a_message_the_gateway_counts_far_over_the_estimate_is_refused_at_once_and_the_next_question_is_sent() {
    // Tried on the local llama.cpp server (8192 tokens): 21 KB of hex words, ~5300 tokens by the
    // estimate, 23085 as the server counts them. It fits the learned window by the estimate, but
    // not at the ratio the gateway stated: no summary request may be spent on it.
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::status(400, &[], &llama_overflow(23_085)));
    gw.push(Reply::sse(anthropic_text("Fine.")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    seed(&t, &id, tool_turns(1));
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let huge = hex_words(21_000);
    assert_eq!(cicy::compact::cut::estimate_tokens(&huge), 5252);
    let outcome = turn::run_turn(&mut s, &huge, &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Blocked);
    assert_eq!(gw.requests().len(), 1, "the refused request only: no summary, no re-send");
    let errors = error_events(&ev);
    assert_eq!(errors.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(), ["too_large"]);
    assert_eq!(
        errors[0].1,
        "the message is too large to send: 21006 bytes, ~21601 tokens as the gateway counts (the gateway counted 23085 tokens for the refused request, estimated at ~5617); the context window of model test-model is 8192 tokens, and with the system prompt, AGENTS.md and 512 tokens for the answer at most ~7366 tokens of message fit. Nothing more is sent; the message is kept in the history. Send it in smaller parts, or save it as a file in the workspace and ask about the file"
    );
    assert!(!kinds(&ev).iter().any(|k| matches!(k, EventKind::Compacted { .. })), "nothing was compacted");
    let hist = messages(&id, &t);
    assert_eq!(hist.len(), 6, "the 4 earlier messages stay, nothing set aside");
    assert!(!hist.iter().any(Message::is_summary));
    assert_eq!(hist[4].plain_text(), huge, "the message is kept as written");
    assert_eq!(hist[5].plain_text(), "(no reply this turn · blocked)");

    assert_eq!(turn::run_turn(&mut s, "what now?", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert!(!reqs[1].body_str().contains(&huge[..200]), "the refused message is not sent again");
    let wire = wire_messages(&reqs[1]);
    assert_eq!(wire.len(), 5, "the 4 earlier messages and the question");
    assert_eq!(wire[4].plain_text(), "what now?");
}

#[tokio::test]
async fn an_overflow_after_the_forced_compaction_undoes_it_and_the_next_question_is_sent_without_the_refused_text() {
    // The earlier turns make most of the refused request, so the gateway's count (9000 tokens)
    // gives no reason to doubt the estimate of the message (~4230 tokens, over half the learned
    // window): the forced compaction summarizes everything and carries the message verbatim; the
    // re-send is refused all the same.
    let gw = ScriptedGateway::start().await;
    gw.on_aux(Reply::sse(anthropic_text(SUMMARY)));
    gw.push(Reply::status(400, &[], LLAMA_OVERFLOW));
    gw.push(Reply::status(400, &[], LLAMA_OVERFLOW));
    gw.push(Reply::sse(anthropic_text("Done.")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let result = "r".repeat(4000);
    let seeded = seed(&t, &id, (0..10).flat_map(|i| tool_turn(i, &format!("q{i}"), &result)).collect());
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    let refused = "refused-text ".repeat(1300);
    let outcome = turn::run_turn(&mut s, &refused, &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Blocked);
    let reqs = gw.requests();
    let (aux, main) = split_aux(&reqs);
    assert_eq!(main.len(), 2, "sent once more after the compaction, not again");
    assert!(!aux.is_empty(), "a summary was made");
    assert!(main[1].body_str().contains(compact::CARRIED_PREFIX), "the re-send carried the message in the summary");
    let errors = error_events(&ev);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].0, "http_status");
    assert!(
        errors[0].1.ends_with("; the request was still over the context window after compacting, so the compaction was undone; the next question will not carry this message. Send a shorter message, or use /compact or /clear"),
        "{}",
        errors[0].1
    );
    assert!(system_texts(&ev).contains(&"the compaction made for this turn was undone: the history is as it was before it".to_string()));
    let hist = messages(&id, &t);
    assert!(!hist.iter().any(Message::is_summary), "no summary holds the refused text");
    assert_eq!(hist.len(), 42);
    assert_eq!(hist[..40], seeded[..]);
    assert_eq!(hist[40].plain_text(), refused);
    assert_eq!(hist[41].plain_text(), "(no reply this turn · blocked)");

    assert_eq!(turn::run_turn(&mut s, "next question", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let (_, main) = split_aux(&gw.requests());
    assert_eq!(main.len(), 3);
    assert!(!main[2].body_str().contains("refused-text"), "the next question does not inherit the refused text");
    assert!(wire_messages(&main[2]).last().unwrap().plain_text().ends_with("next question"));
}

/// llama.cpp's `GET /props`, cut to what cicy reads and a little around it.
fn llama_props(n_ctx: u64) -> serde_json::Value {
    json!({"default_generation_settings": {"params": {"n_predict": -1}, "n_ctx": n_ctx}, "total_slots": 1, "model_alias": "smollm2"})
}

fn windows_file(t: &TestHome, id: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(t.workspace(id).join(".cicy").join(window::FILE_NAME)).unwrap()).unwrap()
}

#[tokio::test]
async fn a_gateway_that_reports_its_window_is_asked_once_before_the_first_request() {
    let gw = ScriptedGateway::start().await;
    gw.serve_props(llama_props(1600));
    gw.push(Reply::sse(anthropic_text("ok")));
    gw.push(Reply::sse(anthropic_text("ok again")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "Say ok.", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    let props = gw.props_requests();
    assert_eq!(props.iter().map(|r| (r.method.as_str(), r.path.as_str())).collect::<Vec<_>>(), [("GET", "/props")]);
    assert_eq!(props[0].body, b"");
    // The first request is already sized for the reported window: a quarter of it for the answer.
    assert_eq!(body(&gw.requests()[0])["max_tokens"], 400, "min(meta.yaml's 512, 1600 / 4)");
    let reason = format!("the gateway at {} reports a context window of 1600 tokens (GET /props)", gw.url());
    assert_eq!(
        system_texts(&ev),
        [format!("{reason}; recorded in .cicy/context_windows.json: model test-model now has a window of 1600 tokens")]
    );
    let file = windows_file(&t, &id);
    assert_eq!(file["test-model"]["tokens"], 1600);
    assert_eq!(file["test-model"]["reason"], reason.as_str());
    assert_eq!(file["test-model"]["asked"], json!([gw.url()]));

    // Another session of the agent, another turn: the answer is on disk, nothing is asked.
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "Once more.", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert_eq!(gw.props_requests().len(), 1);
    assert_eq!(body(&gw.requests()[1])["max_tokens"], 400);
    assert_eq!(system_texts(&ev), Vec::<String>::new());
}

#[tokio::test]
async fn compact_on_a_fresh_agent_asks_the_window_and_sizes_its_summary_for_it() {
    // The new user's case: llama.cpp with 8192 tokens, no CICY_CONTEXT_WINDOW. Sized for the
    // assumed 200000 tokens the summary asked for 4096 output tokens and ran into the 90 s limit.
    let gw = ScriptedGateway::start().await;
    gw.serve_props(llama_props(8192));
    gw.push(Reply::sse(anthropic_text(SUMMARY)));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    seed(&t, &id, tool_turns(3));
    let mut s = t.open(&id);
    let (em, _ev) = collector(&id);
    let done = compact::compact_session(&mut s, 0, &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(done.requests, 1);
    assert_eq!(gw.props_requests().len(), 1);
    let reqs = gw.requests();
    assert_eq!(reqs.iter().map(|r| r.header("x-cicy-aux")).collect::<Vec<_>>(), [Some("compact")]);
    assert_eq!(body(&reqs[0])["max_tokens"], 2048, "a quarter of 8192, not the 4096 of a large window");
    assert_eq!(windows_file(&t, &id)["test-model"]["tokens"], 8192);
    assert_eq!(messages(&id, &t).last().unwrap().plain_text(), format!("{SUMMARY_PREFIX}{SUMMARY}"));
}

#[tokio::test]
async fn a_gateway_without_props_costs_one_request_once_and_the_turns_go_on() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("first")));
    gw.push(Reply::sse(anthropic_text("second")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    for (text, answer) in [("one", "first"), ("two", "second")] {
        let mut s = t.open(&id);
        let (em, ev) = collector(&id);
        assert_eq!(turn::run_turn(&mut s, text, &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
        assert_eq!(messages(&id, &t).last().unwrap().plain_text(), answer);
        assert_eq!(system_texts(&ev), Vec::<String>::new(), "a 404 is not worth a line");
    }
    assert_eq!(gw.props_requests().len(), 1, "asked once, by the first turn");
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs.iter().all(|r| body(r)["max_tokens"] == 512), "the configured window stays");
    let raw = std::fs::read_to_string(t.workspace(&id).join(".cicy").join(window::FILE_NAME)).unwrap();
    assert_eq!(raw, format!("{{\n  \"test-model\": {{\n    \"asked\": [\n      \"{}\"\n    ]\n  }}\n}}\n", gw.url()));
    let s = t.open(&id);
    let m = s.materials().unwrap();
    assert_eq!(compact::settings(&s, &m).context_window, 200_000);
}

#[tokio::test]
async fn a_reported_window_never_raises_one_learned_from_a_refusal() {
    let gw = ScriptedGateway::start().await;
    gw.serve_props(llama_props(8192));
    gw.push(Reply::sse(anthropic_text("ok")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let reason = "the gateway stated a context window of 1024 tokens";
    window::record(&t.workspace(&id), "test-model", 1024, reason).unwrap();
    let mut s = t.open(&id);
    let (em, ev) = collector(&id);
    assert_eq!(turn::run_turn(&mut s, "Say ok.", &em, &CancellationToken::new()).await.unwrap(), TurnOutcome::Completed);
    assert_eq!(body(&gw.requests()[0])["max_tokens"], 256, "a quarter of the 1024 learned before");
    assert_eq!(
        system_texts(&ev),
        [format!(
            "the gateway at {} reports a context window of 8192 tokens (GET /props); recorded in .cicy/context_windows.json: model test-model now has a window of 1024 tokens",
            gw.url()
        )]
    );
    let file = windows_file(&t, &id);
    assert_eq!((&file["test-model"]["tokens"], &file["test-model"]["reason"]), (&json!(1024), &json!(reason)));
    assert_eq!(file["test-model"]["asked"], json!([gw.url()]));
}
