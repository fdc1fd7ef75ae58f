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
    assert!(live_serve(&home).await.is_none());
    let (_d, home) = home_with(Some("{\"pid\": 1, \"port\""));
    assert!(live_serve(&home).await.is_none());
}

#[tokio::test]
async fn no_live_serve_with_a_dead_pid() {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let (_d, home) = home_with(Some(&serve_json(pid, free_port(), "i-1")));
    assert!(!pid_alive(pid.into()));
    assert!(live_serve(&home).await.is_none());
    for pid in [0, -1] {
        assert!(!pid_alive(pid), "{pid}");
    }
}

#[tokio::test]
async fn no_live_serve_when_nobody_answers_on_the_port() {
    let (_d, home) = home_with(Some(&serve_json(std::process::id(), free_port(), "i-1")));
    assert!(pid_alive(std::process::id().into()));
    assert!(live_serve(&home).await.is_none());
}

/// A server on 127.0.0.1:0 that answers `/api/health` for `instance`.
async fn health_server(instance: &'static str) -> u16 {
    let app = axum::Router::new().route(
        "/api/health",
        axum::routing::get(move || async move {
            axum::Json(json!({"ok": true, "instance_id": instance, "pid": std::process::id(), "agents": 0}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

#[tokio::test]
async fn a_live_serve_is_the_one_whose_health_names_its_instance() {
    let port = health_server("i-1").await;
    let (dir, home) = home_with(Some(&serve_json(std::process::id(), port, "i-1")));
    std::fs::write(dir.path().join("api_token"), "tok\n").unwrap();
    let serve = live_serve(&home).await.expect("live");
    assert_eq!(serve.base.as_str(), format!("http://127.0.0.1:{port}/"));
    assert_eq!(serve.url(&["api", "agents", "w 1"]).unwrap().path(), "/api/agents/w%201");
    if std::env::var_os("CICY_API_TOKEN").is_none() {
        assert_eq!(serve.token.as_deref(), Some("tok"));
    }
    // Another serve answers on that port now: this serve.json is stale.
    let (_d, home) = home_with(Some(&serve_json(std::process::id(), port, "i-2")));
    assert!(live_serve(&home).await.is_none());
}
