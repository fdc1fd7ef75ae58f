//! The CLI with a running serve (docs/design.md §9 "CLI ↔ serve"): `chat`, `retry`, `compact` and
//! `clear` go through HTTP when `serve.json` names a live serve of the home and run in-process
//! otherwise (a dead pid, `--local`), with the same output and exit codes either way; Ctrl-C
//! cancels through the API. Real `cicy-agent` processes against the scripted gateway.

use std::path::Path;

use cicy_test_support::cli::{command, Out};
use cicy_test_support::fixture::TestHome;
use cicy_test_support::gateway::{anthropic_text, Reply, ScriptedGateway};
use cicy_test_support::serve::Serve;

/// Runs `cicy-agent <args>` with no gateway in its own environment or config: only a serve
/// (which has one) can answer, so a success proves the command went through it.
async fn cicy_without_gateway(home: &Path, args: &[&str]) -> Out {
    let mut cmd = command(home, "unused", args);
    cmd.env_remove("CICY_GATEWAY_URL");
    let out = cmd.output().await.unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn cicy_local(home: &Path, gateway: &str, args: &[&str]) -> Out {
    let out = command(home, gateway, args).output().await.unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `s` with every UUID (`8-4-4-4-12` hex digits) replaced by `<uuid>`: two homes name their
/// conversations differently.
fn mask_uuids(s: &str) -> String {
    let shape = [8, 4, 4, 4, 12];
    let mut out = String::new();
    let mut rest = s;
    'scan: while !rest.is_empty() {
        let mut i = 0;
        for (k, n) in shape.iter().enumerate() {
            let part = rest.get(i..i + n);
            if !part.is_some_and(|p| p.chars().all(|c| c.is_ascii_hexdigit())) {
                break;
            }
            i += n;
            if k < 4 {
                if rest.get(i..i + 1) != Some("-") {
                    break;
                }
                i += 1;
            } else {
                out.push_str("<uuid>");
                rest = &rest[i..];
                continue 'scan;
            }
        }
        let c = rest.chars().next().unwrap();
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A home with agent w-1 whose config names no gateway (the serve gets it from its env).
fn home(gw: &ScriptedGateway) -> TestHome {
    let t = TestHome::new(&gw.url(), 0);
    assert_eq!(t.create("tester", None), "w-1");
    std::fs::write(t.home.config_path(), "gateway:\n  model: test-model\n  max_retries: 0\n").unwrap();
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_serve_and_in_process_print_the_same_and_exit_the_same() {
    let gw = ScriptedGateway::start().await;
    gw.fallback(|_| Reply::sse(anthropic_text("Same answer, both ways.")));
    gw.on_aux(Reply::sse(anthropic_text("The user said hi twice.")));
    let (remote, local) = (home(&gw), home(&gw));
    let s = Serve::start(remote.root(), &gw.url(), &[]).await;
    let steps: [&[&str]; 6] = [
        &["chat", "w-1", "hi"],
        &["chat", "w-1", "hi again", "--json"],
        &["retry", "w-1"],
        &["compact", "w-1"],
        &["clear", "w-1"],
        &["chat", "w-1", "/compact"],
    ];
    // The archive's name carries the second it was made in, which two runs need not share.
    let archive = regex::Regex::new(r"current\.\d+\.json").unwrap();
    for args in steps {
        let a = cicy_without_gateway(remote.root(), args).await;
        let mut local_args = args.to_vec();
        local_args.push("--local");
        let b = cicy_local(local.root(), &gw.url(), &local_args).await;
        let mask = |t: &str| archive.replace_all(&mask_uuids(t), "current.<unix>.json").into_owned();
        assert_eq!((a.code, mask(&a.stderr)), (b.code, mask(&b.stderr)), "{args:?}: exit code and stderr");
        if args.contains(&"--json") {
            let strip = |s: &str| -> Vec<serde_json::Value> {
                s.lines()
                    .map(|l| {
                        let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                        v.as_object_mut().unwrap().remove("seq");
                        if v["type"] == "turn_started" {
                            v.as_object_mut().unwrap().remove("turn_id");
                            v.as_object_mut().unwrap().remove("conv_id");
                        }
                        v
                    })
                    .collect()
            };
            assert_eq!(strip(&a.stdout), strip(&b.stdout), "{args:?}: the same events");
        } else {
            assert_eq!(a.stdout, b.stdout, "{args:?}: stdout");
        }
    }
    assert_eq!(s.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serve_json_whose_pid_is_dead_means_in_process() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_text("In process.")));
    let t = TestHome::new(&gw.url(), 0);
    let id = t.create("tester", None);
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let pid = dead.id();
    dead.wait().unwrap();
    std::fs::write(
        t.root().join("serve.json"),
        format!(r#"{{"pid": {pid}, "port": 9, "instance_id": "gone", "started_at": "2026-01-01T00:00:00Z"}}"#),
    )
    .unwrap();
    let o = cicy_local(t.root(), &gw.url(), &["chat", &id, "hello"]).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "In process.\n"), "{}", o.stderr);
    assert_eq!(gw.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_of_a_chat_through_serve_cancels_the_turn_in_serve() {
    let gw = ScriptedGateway::start().await;
    let (held, _gate) = Reply::gated(anthropic_text("never"));
    gw.push(held);
    let t = home(&gw);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let mut cmd = command(t.root(), "unused", &["chat", "w-1", "wait for me"]);
    cmd.env_remove("CICY_GATEWAY_URL");
    let child = cmd.spawn().unwrap();
    gw.wait_for_requests(1).await;
    // SAFETY: SIGINT to the child this test started.
    unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGINT) };
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("· turn ended: cancelled"));
    let (_, row) = s.get("/api/agents/w-1").await;
    assert_eq!(row["busy"], false);
    let current = t.current_json("w-1");
    assert!(current["messages"].as_array().unwrap().last().unwrap().to_string().contains("cancelled"));
    assert_eq!(s.stop().await, 0);
}

/// After a kill -9 of serve, another program listens on its port (here a recording server in
/// this test) and answers `/api/health` with serve's `instance_id` while the pid in serve.json
/// is alive (here this test's own): it gets the health question only, never the token or the
/// message, and the CLI says why instead of running the turn in-process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impostor_on_serves_port_gets_neither_the_token_nor_the_message() {
    let gw = ScriptedGateway::start().await;
    let t = home(&gw);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let info = std::fs::read_to_string(t.root().join("serve.json")).unwrap();
    s.kill9().await;
    let mut info: serde_json::Value = serde_json::from_str(&info).unwrap();
    let instance = info["instance_id"].as_str().unwrap().to_string();
    let impostor = ScriptedGateway::start().await;
    let health = serde_json::json!({"ok": true, "instance_id": instance, "pid": 1, "agents": 1, "proof": "0".repeat(64)});
    impostor.route(move |r| {
        (r.path == "/api/health").then(|| Reply::Status {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: health.to_string(),
        })
    });
    let port: u16 = impostor.url().rsplit(':').next().unwrap().parse().unwrap();
    info["port"] = port.into();
    info["pid"] = std::process::id().into();
    std::fs::write(t.root().join("serve.json"), info.to_string()).unwrap();
    let token = std::fs::read_to_string(t.root().join("api_token")).unwrap();

    let o = cicy_without_gateway(t.root(), &["chat", "w-1", "the secret plan"]).await;
    let serve_json = t.root().join("serve.json");
    assert_eq!(
        (o.code, o.stdout.as_str(), o.stderr.as_str()),
        (
            2,
            "",
            format!(
                "error: the program on 127.0.0.1:{port} that {} names (pid {}) did not prove that it knows the API token, so neither the token nor the message was sent to it; if serve is not running, remove {}; if it runs with another token, set CICY_API_TOKEN to that token; --local runs in this process\n",
                serve_json.display(),
                std::process::id(),
                serve_json.display()
            )
            .as_str()
        )
    );
    let seen = impostor.requests();
    assert_eq!(seen.iter().map(|r| (r.method.as_str(), r.path.as_str())).collect::<Vec<_>>(), [("GET", "/api/health")]);
    assert_eq!(seen[0].header("authorization"), None);
    assert!(seen[0].body.is_empty());
    for r in &seen {
        let all = format!("{:?} {}", r.headers, String::from_utf8_lossy(&r.body));
        assert!(!all.contains(token.trim()) && !all.contains("secret plan"), "{all}");
    }
    // Nothing ran in-process either: the agent's conversation was never started.
    assert!(gw.requests().is_empty());
}

/// serve killed with kill -9 while a chat streams through it: the CLI says that serve stopped
/// and that the turn is healed, exits 1 (a failed line), and serve's next start heals it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_killed_mid_answer_is_reported_as_stopped_and_exits_1() {
    let gw = ScriptedGateway::start().await;
    let deltas = ["Half an ".to_string(), "answer".to_string()];
    let (slow, _gate) = Reply::paused(cicy_test_support::gateway::anthropic_text_deltas(&deltas), 4);
    gw.push(slow);
    let t = home(&gw);
    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let pid = s.pid;
    let mut cmd = command(t.root(), "unused", &["chat", "w-1", "tell me"]);
    cmd.env_remove("CICY_GATEWAY_URL");
    let mut child = cmd.spawn().unwrap();
    let seen = cicy_test_support::cli::read_until(child.stdout.as_mut().unwrap(), "Half an ").await;
    s.kill9().await;
    let out = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(seen, "Half an ");
    assert_eq!(
        stderr.lines().last(),
        Some(format!("error: serve (pid {pid}) stopped while the reply was streaming; the turn is healed and marked cancelled when the agent is next opened (at serve's next start, or by the next `chat`)").as_str()),
        "{stderr}"
    );
    assert!(!stderr.contains("decoding"), "{stderr}");

    let s = Serve::start(t.root(), &gw.url(), &[]).await;
    let (status, history) = s.get("/api/cicy/history?agent_id=w-1").await;
    assert_eq!(status, 200, "{history}");
    let last = history["messages"].as_array().unwrap().last().unwrap().to_string();
    assert!(last.contains("cancelled"), "{history}");
    assert_eq!(s.stop().await, 0);
}

/// What an operator must act on reaches stderr without `CICY_LOG`: under a watch cap of 1, the
/// second agent's inbox is polled and serve says so; a start and a clean stop print no other
/// warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_fallback_warning_is_printed_by_default() {
    use tokio::io::AsyncBufReadExt;
    let gw = ScriptedGateway::start().await;
    let t = home(&gw);
    assert_eq!(t.create("tester", None), "w-2");
    let mut cmd = command(t.root(), &gw.url(), &["serve", "--port", "0", "--max-inbox-watches", "1"]);
    cmd.env_remove("CICY_LOG").env_remove("CICY_WATCH_MAX").env_remove("CICY_WATCH_POLL");
    let mut child = cmd.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    // Once serve.json is written serve stops cleanly on SIGTERM.
    assert!(cicy_test_support::wait::appears_within(&t.root().join("serve.json"), std::time::Duration::from_secs(60)).await);
    let inbox = t.workspace("w-2").join(".cicy/messages/inbox");
    let warning = format!(
        "inbox watch: the cap of 1 inotify watches (CICY_WATCH_MAX) is reached; {} and every later inbox are polled every 2s",
        inbox.display()
    );
    let mut seen = Vec::new();
    let found = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let hit = line.ends_with(&warning) && line.contains(" WARN ");
            seen.push(line);
            if hit {
                return;
            }
        }
    })
    .await;
    assert!(found.is_ok(), "no warning within 60 s: {seen:#?}");
    // SAFETY: SIGTERM to the child this test started.
    assert_eq!(unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGTERM) }, 0);
    let rest = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            seen.push(line);
        }
        child.wait().await.unwrap().code()
    };
    assert_eq!(tokio::time::timeout(std::time::Duration::from_secs(30), rest).await.expect("serve stops on SIGTERM"), Some(0));
    let warnings: Vec<&String> = seen.iter().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect();
    assert_eq!(warnings.len(), 1, "{seen:#?}");
}

/// serve's own lines on stderr, start to stop: where it listens (the line scripts read, first
/// and unchanged), the dashboard link that logs in (a token of one's own encoded), that a
/// signal is stopping it, and that it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_prints_the_dashboard_link_and_says_when_it_stops() {
    use tokio::io::AsyncBufReadExt;
    let gw = ScriptedGateway::start().await;
    let t = home(&gw);
    for (token, signal, name) in [(None, libc::SIGTERM, "SIGTERM"), (Some("tok+en&1"), libc::SIGINT, "SIGINT")] {
        let mut cmd = command(t.root(), &gw.url(), &["serve", "--port", "0"]);
        cmd.env_remove("CICY_LOG");
        match token {
            Some(tok) => cmd.env("CICY_API_TOKEN", tok),
            None => cmd.env_remove("CICY_API_TOKEN"),
        };
        let mut child = cmd.spawn().unwrap();
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = Vec::new();
        let two = async {
            while seen.len() < 2 {
                seen.push(lines.next_line().await.unwrap().expect("serve printed its lines"));
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(60), two).await.expect("serve started");
        let info: serde_json::Value = serde_json::from_slice(&std::fs::read(t.root().join("serve.json")).unwrap()).unwrap();
        let (port, pid) = (info["port"].as_u64().unwrap(), info["pid"].as_u64().unwrap());
        assert_eq!(pid, u64::from(child.id().unwrap()));
        let link_token = match token {
            Some(_) => "tok%2Ben%261".to_string(),
            None => std::fs::read_to_string(t.root().join("api_token")).unwrap().trim().to_string(),
        };
        // SAFETY: a signal to the child this test started.
        assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
        let rest = async {
            while let Some(line) = lines.next_line().await.unwrap() {
                seen.push(line);
            }
            child.wait().await.unwrap().code()
        };
        assert_eq!(tokio::time::timeout(std::time::Duration::from_secs(30), rest).await.expect("serve stops"), Some(0));
        assert_eq!(
            seen,
            [
                format!("cicy-agent serve: listening on http://127.0.0.1:{port} (pid {pid})"),
                format!("cicy-agent serve: dashboard: http://127.0.0.1:{port}/?token={link_token} (open it in a browser on this machine)"),
                format!("cicy-agent serve: {name} received: stopping (running turns are cancelled)"),
                "cicy-agent serve: stopped".to_string(),
            ]
        );
        assert!(!t.root().join("serve.json").exists(), "a clean stop removes serve.json");
    }
}
