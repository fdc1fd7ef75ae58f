//! A recording pass-through proxy: forwards every request (its method, path, headers and body)
//! to a real gateway and streams the answer back unchanged, keeping the requests so tests can
//! compare the bytes sent.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Router;
use futures_util::TryStreamExt;

/// (method, path, body) of each request received.
type Recorded = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

#[derive(Clone)]
struct Shared {
    upstream: String,
    bodies: Recorded,
    http: reqwest::Client,
}

pub struct RecordingProxy {
    addr: SocketAddr,
    bodies: Recorded,
    server: tokio::task::JoinHandle<()>,
}

impl RecordingProxy {
    pub async fn start(upstream: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let bodies: Recorded = Arc::new(Mutex::new(Vec::new()));
        let shared = Shared { upstream: upstream.trim_end_matches('/').to_string(), bodies: bodies.clone(), http: reqwest::Client::new() };
        let app = Router::new().fallback(forward).with_state(shared);
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("proxy");
        });
        Self { addr, bodies, server }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// (method, path, body) of every request, in order.
    pub fn requests(&self) -> Vec<(String, String, Vec<u8>)> {
        self.bodies.lock().expect("bodies").clone()
    }
}

impl Drop for RecordingProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn forward(State(s): State<Shared>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let headers = req.headers().clone();
    let body = match axum::body::to_bytes(req.into_body(), usize::MAX).await {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    s.bodies.lock().expect("bodies").push((method.to_string(), path.clone(), body.to_vec()));
    let mut up = s.http.request(method, format!("{}{}", s.upstream, path)).body(body);
    for (k, v) in headers.iter() {
        if k != "host" && k != "content-length" {
            up = up.header(k.as_str(), v.as_bytes());
        }
    }
    match up.send().await {
        Ok(resp) => {
            let mut builder = Response::builder().status(resp.status().as_u16());
            if let Some(ct) = resp.headers().get("content-type") {
                builder = builder.header("content-type", ct.as_bytes());
            }
            let stream = resp.bytes_stream().map_err(std::io::Error::other);
            builder.body(Body::from_stream(stream)).unwrap_or_else(|e| error(StatusCode::BAD_GATEWAY, e.to_string()))
        }
        Err(e) => error(StatusCode::BAD_GATEWAY, e.to_string()),
    }
}

fn error(status: StatusCode, msg: String) -> Response {
    let mut r = Response::new(Body::from(msg));
    *r.status_mut() = status;
    r
}
