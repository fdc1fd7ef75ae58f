use super::*;
use cicy::event::AgentState;

fn ev(seq: u64, kind: EventKind) -> Event {
    Event { seq, agent_id: "w-1".to_string(), kind }
}

#[test]
fn frames_parse_into_events_and_unknown_ones_are_skipped() {
    let bytes = concat!(
        ": ping\n\n",
        "id: 7\nevent: text_delta\ndata: {\"seq\":7,\"agent_id\":\"w-1\",\"type\":\"text_delta\",\"text\":\"Hi\"}\n\n",
        "id: 8\nevent: wake\ndata: {\"seq\":8,\"agent_id\":\"w-1\",\"type\":\"wake\"}\n\n",
        "id: 9\nevent: state\ndata: {\"seq\":9,\"agent_id\":\"w-1\",\"type\":\"state\",\"state\":\"idle\"}\n\n",
        "event: done\ndata: {\"seq\":0,\"agent_id\":\"w-1\",\"type\":\"done\"}\n\n",
    );
    // Split inside a frame: the decoder buffers across reads.
    let frames = sse::decode_chunks([&bytes.as_bytes()[..30], &bytes.as_bytes()[30..]]).unwrap();
    let events: Vec<Event> = frames.iter().filter_map(parse_frame).collect();
    assert_eq!(
        events,
        vec![
            ev(7, EventKind::TextDelta { text: "Hi".into() }),
            ev(9, EventKind::State { state: AgentState::Idle }),
            ev(0, EventKind::Done),
        ]
    );
}

#[test]
fn a_clear_or_compact_message_is_sent_escaped() {
    assert_eq!(wire_text("/clear"), "//clear");
    assert_eq!(wire_text(" /compact\n"), "//compact\n");
    assert_eq!(wire_text("/usr/bin"), "/usr/bin");
    assert_eq!(wire_text("hello"), "hello");
}

fn home_with(serve_json: Option<&str>) -> (tempfile::TempDir, Home) {
    let dir = tempfile::tempdir().unwrap();
    if let Some(text) = serve_json {
        std::fs::write(dir.path().join("serve.json"), text).unwrap();
    }
    let home = Home::at(dir.path());
    (dir, home)
}

fn serve_json(pid: u32, port: u16, instance: &str) -> String {
    json!({"pid": pid, "port": port, "instance_id": instance, "started_at": "2026-01-01T00:00:00Z"}).to_string()
}

/// A port nobody listens on: bound, then released.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test]
async fn no_live_serve_without_a_readable_serve_json() {
    let (_d, home) = home_with(None);
    assert!(live_serve(&home).await.unwrap().is_none());
    let (_d, home) = home_with(Some("{\"pid\": 1, \"port\""));
    assert!(live_serve(&home).await.unwrap().is_none());
}

#[tokio::test]
async fn no_live_serve_with_a_dead_pid() {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let (_d, home) = home_with(Some(&serve_json(pid, free_port(), "i-1")));
    assert!(!pid_alive(pid.into()));
    assert!(live_serve(&home).await.unwrap().is_none());
    for pid in [0, -1] {
        assert!(!pid_alive(pid), "{pid}");
    }
}

#[tokio::test]
async fn no_live_serve_when_nobody_answers_on_the_port() {
    let (_d, home) = home_with(Some(&serve_json(std::process::id(), free_port(), "i-1")));
    assert!(pid_alive(std::process::id().into()));
    assert!(live_serve(&home).await.unwrap().is_none());
}

/// A server on 127.0.0.1:0 that answers `/api/health` for `instance`, with the proof of the
/// nonce it is asked for computed with `token` (none when `token` is `None`).
async fn health_server(instance: &'static str, token: Option<&'static str>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().route(
        "/api/health",
        axum::routing::get(move |q: axum::extract::Query<std::collections::HashMap<String, String>>| async move {
            let mut answer = json!({"ok": true, "instance_id": instance, "pid": std::process::id(), "agents": 0});
            if let (Some(token), Some(nonce)) = (token, q.get("proof")) {
                answer["proof"] = json!(cicy_test_proof(token, port, nonce));
            }
            axum::Json(answer)
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// The proof as serve computes it, on its own here: hex HMAC-SHA256 of the prefixed nonce.
fn cicy_test_proof(token: &str, port: u16, nonce: &str) -> String {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(token.as_bytes()).unwrap();
    mac.update(format!("cicy-health-proof:{port}:{nonce}").as_bytes());
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn a_live_serve_is_the_one_whose_health_names_its_instance_and_proves_the_token() {
    if std::env::var_os("CICY_API_TOKEN").is_some() {
        return;
    }
    let port = health_server("i-1", Some("tok")).await;
    let (dir, home) = home_with(Some(&serve_json(std::process::id(), port, "i-1")));
    std::fs::write(dir.path().join("api_token"), "tok\n").unwrap();
    let serve = live_serve(&home).await.unwrap().expect("live");
    assert_eq!(serve.base.as_str(), format!("http://127.0.0.1:{port}/"));
    assert_eq!(serve.url(&["api", "agents", "w 1"]).unwrap().path(), "/api/agents/w%201");
    assert_eq!(serve.token, "tok");
    // Another serve answers on that port now: this serve.json is stale.
    let (_d, home) = home_with(Some(&serve_json(std::process::id(), port, "i-2")));
    assert!(live_serve(&home).await.unwrap().is_none());
}

#[tokio::test]
async fn a_server_with_the_instance_but_not_the_proof_is_refused() {
    if std::env::var_os("CICY_API_TOKEN").is_some() {
        return;
    }
    for (proof_token, our_token) in [(None, Some("tok")), (Some("other"), Some("tok")), (Some("tok"), None)] {
        let port = health_server("i-1", proof_token).await;
        let (dir, home) = home_with(Some(&serve_json(std::process::id(), port, "i-1")));
        if let Some(t) = our_token {
            std::fs::write(dir.path().join("api_token"), t).unwrap();
        }
        let e = live_serve(&home).await.expect_err("refused");
        let serve_json = dir.path().join("serve.json");
        let why = match our_token {
            Some(_) => "did not prove that it knows the API token".to_string(),
            None => "could not be asked to prove that it knows the API token: there is none here (CICY_API_TOKEN or api_token)".to_string(),
        };
        assert_eq!(
            e.to_string(),
            format!(
                "the program on 127.0.0.1:{port} that {} names (pid {}) {why}, so neither the token nor the message was sent to it; if serve is not running, remove {}; if it runs with another token, set CICY_API_TOKEN to that token; --local runs in this process",
                serve_json.display(),
                std::process::id(),
                serve_json.display()
            ),
            "{proof_token:?} {our_token:?}"
        );
    }
}
