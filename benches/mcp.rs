//! An MCP tool call through cicy's pool against the same server's own time (issue 11): the
//! reference server `@modelcontextprotocol/server-everything` (see `crates/test-support/src/mcp.rs`),
//! its `echo` tool, three ways:
//!
//! - `pool_call`: `Pool::call` as a turn's tool call runs it (slot lookup, timeout, cancel
//!   select, rmcp request, result wording);
//! - `rmcp_call`: the same request on a bare rmcp client session (the SDK alone);
//! - `stdio_round_trip`: the same `tools/call` line written to the server's stdin and its
//!   answer line read back, no SDK: the server's own time plus the pipe, the floor.
//!
//! Overhead of cicy = `pool_call` − `rmcp_call`; of the SDK = `rmcp_call` − `stdio_round_trip`.
//! Run: `cargo bench --bench mcp`. docs/benchmarks.md quotes the figures.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is how it fails

use std::collections::BTreeMap;
use std::process::Stdio;

use cicy::event::Emitter;
use cicy::mcp::{McpServerConfig, Pool};
use criterion::{criterion_group, criterion_main, Criterion};
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

fn args() -> serde_json::Map<String, serde_json::Value> {
    json!({"message": "bench"}).as_object().unwrap().clone()
}

fn command(entry: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("node");
    cmd.args([entry, "stdio"]).stderr(Stdio::null()).kill_on_drop(true);
    cmd
}

/// A server spoken to in raw JSON lines, after the `initialize` handshake.
struct Raw {
    _child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: BufReader<tokio::process::ChildStdout>,
    next_id: u64,
}

impl Raw {
    async fn start(entry: &str) -> Self {
        let mut child = command(entry).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut raw = Self { _child: child, stdin, stdout, next_id: 1 };
        let init = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}});
        raw.request("initialize", init).await;
        raw.stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n").await.unwrap();
        raw
    }

    /// Sends one request and reads lines until its answer (skipping notifications).
    async fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).unwrap();
        line.push(b'\n');
        self.stdin.write_all(&line).await.unwrap();
        loop {
            let mut answer = String::new();
            self.stdout.read_line(&mut answer).await.unwrap();
            let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
            if v["id"] == json!(id) {
                return v;
            }
        }
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let entry = cicy_test_support::mcp::server_entry();
    let dir = tempfile::tempdir().unwrap();
    let pool = Pool::new(dir.path().into(), Vec::new());
    let servers = BTreeMap::from([(
        "everything".to_string(),
        McpServerConfig { command: "node".into(), args: vec![entry.into(), "stdio".into()], env: BTreeMap::new(), timeout_secs: 60 },
    )]);
    let cancel = CancellationToken::new();
    let listed = rt.block_on(pool.tools(&servers, &Emitter::new("bench", |_| {}), &cancel));
    assert!(!listed.is_empty());
    let client = rt.block_on(async {
        let (transport, _) = TokioChildProcess::builder(command(entry)).stderr(Stdio::null()).spawn().unwrap();
        ().serve(transport).await.unwrap()
    });
    let raw = tokio::sync::Mutex::new(rt.block_on(Raw::start(entry)));

    let mut group = c.benchmark_group("mcp_echo");
    group.bench_function("pool_call", |b| {
        b.to_async(&rt).iter(|| async {
            let out = pool.call("everything", "echo", args(), &cancel).await;
            assert_eq!(out.content, "Echo: bench");
        })
    });
    group.bench_function("rmcp_call", |b| {
        b.to_async(&rt).iter(|| async {
            let mut params = CallToolRequestParams::new("echo");
            params.arguments = Some(args());
            client.peer().call_tool(params).await.unwrap();
        })
    });
    group.bench_function("stdio_round_trip", |b| {
        b.to_async(&rt).iter(|| async {
            let answer = raw.lock().await.request("tools/call", json!({"name": "echo", "arguments": args()})).await;
            assert_eq!(answer["result"]["content"][0]["text"], "Echo: bench");
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
