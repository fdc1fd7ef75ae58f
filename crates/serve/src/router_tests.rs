//! The router without a socket: requests go through `router(hub)` with `tower::ServiceExt::
//! oneshot`, so a route's answer (status and exact body) is tested without binding a port.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use tower::ServiceExt;

use super::actor::Shared;
use super::*;

const PORT: u16 = 8008;
const TOKEN: &str = "router-test-token";

/// A hub of an empty home: no agent, nothing listening.
fn hub(home: &Home) -> Hub {
    let (scheduler, _unstarted) = scheduler::channel();
    let (new_agents, _provisioned) = tokio::sync::mpsc::unbounded_channel::<AgentRecord>();
    Hub {
        port: PORT,
        token: TOKEN.into(),
        instance_id: "instance-1".into(),
        agents: Arc::default(),
        shared: Shared {
            home: home.clone(),
            http: reqwest::Client::new(),
            global: cicy_store::eventlog::GlobalFeed::starting_now(),
            session_idle: Duration::from_secs(600),
            scheduler,
            wake_limits: wake_job::WakeLimits::default(),
            drained: drain::DrainTargets { cron: Arc::default(), new_agents },
            ticks: tick_worker::TickWorker::start().unwrap(),
        },
        shutdown: CancellationToken::new(),
        watch: Arc::default(),
    }
}

/// Sends `req` through `app`; the status and the body's bytes.
async fn send(app: &Router, req: Request<Body>) -> (StatusCode, String) {
    let response = app.clone().oneshot(req).await.unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

fn get(path: &str, host: &str, token: Option<&str>) -> Request<Body> {
    let mut req = Request::get(path).header(header::HOST, host);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    req.body(Body::empty()).unwrap()
}

#[tokio::test]
async fn the_api_answers_without_a_socket_and_refuses_a_missing_token_and_a_foreign_host() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path());
    home.ensure().unwrap();
    let host = format!("127.0.0.1:{PORT}");
    let app = router(hub(&home));

    assert_eq!(send(&app, get("/api/agents", &host, Some(TOKEN))).await, (StatusCode::OK, "[]".to_string()));
    assert_eq!(
        send(&app, get("/api/agents", &host, None)).await,
        (
            StatusCode::UNAUTHORIZED,
            r#"{"error":"unauthorized","message":"missing or wrong bearer token (Authorization: Bearer <token>; see CICY_API_TOKEN or $CICY_HOME/api_token)"}"#
                .to_string()
        )
    );
    assert_eq!(
        send(&app, get("/api/agents", "evil.example:8008", Some(TOKEN))).await,
        (
            StatusCode::FORBIDDEN,
            r#"{"error":"forbidden_host","message":"the Host header must name this server on 127.0.0.1 or localhost"}"#.to_string()
        )
    );
    assert_eq!(
        send(&app, get("/api/nope", &host, Some(TOKEN))).await,
        (StatusCode::NOT_FOUND, r#"{"error":"not_found","message":"no such route"}"#.to_string())
    );
    let (status, body) = send(&app, get("/api/agents/w-404", &host, Some(TOKEN))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}
