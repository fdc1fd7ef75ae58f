//! `cicy-agent wish …` and `cicy-agent intents …` as a user runs them, the `wish` tool through a
//! turn, and `GET /api/agents/{id}/autonomy` (docs/design.md §13): real processes, a temporary
//! `$CICY_HOME`, the scripted gateway as the guardrails' judge.

use std::path::{Path, PathBuf};

use cicy::autonomy::guard::{GuardCtx, Judge, JUDGE_SYSTEM_TEXT};
use cicy::autonomy::key::GuardKey;
use cicy::autonomy::ledger::{By, Folded, Intent, Status};
use cicy::autonomy::wish::{check_at_pickup, is_checked, refused, wish, WishError, WishInput, CHECKED_KEY};
use cicy::gateway::{ApiStyle, GatewayClient, GatewaySettings};
use cicy_test_support::cli::{cicy, Out};
use cicy_test_support::fixture::{collector, TestHome};
use cicy_test_support::gateway::*;
use cicy_test_support::history::{body, split_aux};
use cicy_test_support::serve::Serve;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// Nothing listens here: a judge that is down.
const NO_GATEWAY: &str = "http://127.0.0.1:9";
const ALLOW: &str = r#"{"verdict":"allow","class":"none","reason":"tidying is fine"}"#;
const PUSH: &str = "push: `git push` publishes commits to another repository";

async fn create(home: &Path) -> PathBuf {
    let o = cicy(home, NO_GATEWAY, &["create", "Ada"], None).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "w-1\n"), "{}", o.stderr);
    home.join("workers/w-1")
}

fn judge(answer: &str) -> Reply {
    Reply::sse(anthropic_text(answer))
}

fn ok(o: &Out, stdout: &str) {
    assert_eq!((o.code, o.stdout.as_str(), o.stderr.as_str()), (0, stdout, ""), "{}", o.stderr);
}

fn ledger(ws: &Path) -> PathBuf {
    ws.join(".cicy/intents.jsonl")
}

/// The ledger's lines as JSON; `at` and `line_at` are checked to be RFC 3339 times and taken
/// out, so the rest compares exactly.
fn lines(ws: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(ledger(ws)).unwrap();
    text.lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            let m = v.as_object_mut().unwrap();
            for key in ["at", "line_at"] {
                let t = m.remove(key).unwrap();
                assert!(chrono::DateTime::parse_from_rfc3339(t.as_str().unwrap()).is_ok(), "{key}: {t}");
            }
            if let Some(done) = m.get("done_at").and_then(Value::as_str) {
                assert!(chrono::DateTime::parse_from_rfc3339(done).is_ok(), "done_at: {done}");
                m.insert("done_at".into(), json!("<time>"));
            }
            v
        })
        .collect()
}

/// A full ledger line with these fields over the defaults of a fresh `pending` wish.
fn line(fields: Value) -> Value {
    let mut v = json!({
        "id": "i1", "by": "human", "what": "", "priority": 5, "min_gap": 0, "needs": "none", "status": "pending",
        "done_at": null, "result": null, "preempted_by": null, "preempted_count": 0, "promoted": null,
        "refused_reason": null, "started_at": null,
    });
    for (k, val) in fields.as_object().unwrap() {
        v[k] = val.clone();
    }
    v
}

#[tokio::test]
async fn a_wish_is_judged_then_written_pending_with_checked_or_refused_with_its_reason() {
    let gw = ScriptedGateway::start().await;
    let h = tempfile::tempdir().unwrap();
    let ws = create(h.path()).await;
    gw.on_aux(judge(ALLOW));
    let o = cicy(
        h.path(),
        &gw.url(),
        &["wish", "w-1", "tidy the notes folder", "--why", "it is a mess", "--run", "ls notes", "--min-gap", "10m", "--priority", "6"],
        None,
    )
    .await;
    ok(&o, "i1 pending\n");
    let reqs = gw.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].header("x-cicy-aux"), Some("guard"));
    let b = body(&reqs[0]);
    assert_eq!(b["system"][0]["text"], JUDGE_SYSTEM_TEXT);
    assert_eq!(b["messages"][0]["content"][0]["text"], "what: tidy the notes folder\nwhy: it is a mess\n");

    // A refused command costs no judge call; the judge's own refusal is written the same way.
    let o = cicy(h.path(), &gw.url(), &["wish", "w-1", "publish the notes", "--run", "git push origin main"], None).await;
    assert_eq!((o.code, o.stdout.as_str()), (1, format!("i2 refused: {PUSH}\n").as_str()), "{}", o.stderr);
    assert_eq!(gw.requests().len(), 1);
    gw.on_aux(judge(r#"{"verdict":"refuse","class":"model","reason":"it switches the agent's model"}"#));
    let o = cicy(h.path(), &gw.url(), &["wish", "w-1", "move yourself to a bigger model"], None).await;
    assert_eq!((o.code, o.stdout.as_str()), (1, "i3 refused: model: it switches the agent's model\n"), "{}", o.stderr);

    // The mark is keyed by the home's secret: a line cannot be marked without it.
    let checked = GuardKey::load_or_create(h.path()).unwrap().mark(&["tidy the notes folder", "it is a mess", "ls notes", "none"]);
    assert_eq!(
        lines(&ws),
        vec![
            line(
                json!({"what": "tidy the notes folder", "why": "it is a mess", "run": "ls notes", "priority": 6, "min_gap": 600, "checked": checked})
            ),
            line(
                json!({"id": "i2", "what": "publish the notes", "run": "git push origin main", "status": "refused", "done_at": "<time>", "refused_reason": PUSH})
            ),
            line(
                json!({"id": "i3", "what": "move yourself to a bigger model", "status": "refused", "done_at": "<time>", "refused_reason": "model: it switches the agent's model"})
            ),
        ]
    );
    // A bad field is refused before anything is asked or written.
    let o = cicy(h.path(), &gw.url(), &["wish", "w-1", "x", "--priority", "3"], None).await;
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (2, "error: priority: 3 is outside 4–7 (a wish ranks between `task` 3 and `selfcheck` 8; smaller runs first)\n")
    );
    let o = cicy(h.path(), &gw.url(), &["wish", "w-1", "x", "--min-gap", "soon"], None).await;
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("`soon` is not a duration"), "{}", o.stderr);
    assert_eq!((gw.requests().len(), lines(&ws).len()), (2, 3));
}

#[tokio::test]
async fn a_judge_that_is_down_refuses_and_the_line_says_why() {
    let h = tempfile::tempdir().unwrap();
    let ws = create(h.path()).await;
    let o = cicy(h.path(), NO_GATEWAY, &["wish", "w-1", "tidy the notes folder"], None).await;
    assert_eq!(o.code, 1, "{}", o.stderr);
    let printed = o.stdout.strip_prefix("i1 refused: ").unwrap().trim_end().to_string();
    assert!(printed.starts_with("judge: the guard judge call failed: "), "{printed}");
    assert_eq!(
        lines(&ws),
        vec![line(json!({"what": "tidy the notes folder", "status": "refused", "done_at": "<time>", "refused_reason": printed}))]
    );
}

#[tokio::test]
async fn needs_human_waits_until_approved_then_drop_off_on_rm_and_ls() {
    let gw = ScriptedGateway::start().await;
    gw.on_aux(judge(ALLOW));
    let h = tempfile::tempdir().unwrap();
    let home = h.path();
    let ws = create(home).await;
    let intents = |args: &'static [&'static str]| {
        let mut all = vec!["intents", "w-1"];
        all.extend_from_slice(args);
        let url = gw.url();
        async move { cicy(home, &url, &all, None).await }
    };
    ok(&intents(&["ls"]).await, "No intents. (Write one with `cicy-agent wish w-1 \"…\"`.)\n");
    let o = cicy(home, &gw.url(), &["wish", "w-1", "prune old logs", "--run", "ls logs", "--needs", "human"], None).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "i1 pending\n"));
    assert_eq!(o.stderr, "note: it needs human: it is only reported until `cicy-agent intents w-1 approve i1`\n");
    ok(
        &intents(&["status"]).await,
        "autonomy: on (tick every 30 s)\n⑩ mine: none\n⑪ now: rest (nothing wanted and runnable)\nwaiting: i1 prune old logs — needs your approval\n⑫ squeezed: none\n",
    );
    ok(&intents(&["tick", "--dry-run"]).await, "[dry-run] rest (nothing wanted and runnable)\n");

    ok(&intents(&["approve", "i1"]).await, "i1 approved: needs none; it runs when w-1 is idle\n");
    ok(&intents(&["tick", "--dry-run"]).await, "[dry-run] run intent i1 (priority 5): prune old logs — `ls logs`\n");
    ok(&intents(&["off"]).await, "autonomy off for w-1 (its other scheduling goes on)\n");
    ok(&intents(&["tick", "--dry-run"]).await, "[dry-run] off (switched off with `intents <id> off`)\n");
    assert!(intents(&["status"])
        .await
        .stdout
        .starts_with("autonomy: off (switched off with `intents <id> off`)\n⑩ mine: none\n⑪ now: off (switched off"));
    ok(&intents(&["on"]).await, "autonomy on for w-1\n");
    let o = intents(&["tick"]).await;
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (2, "error: tick: only `tick --dry-run` runs here; `cicy-agent serve` runs the ticks (every 30 s while the agent is idle)\n")
    );

    ok(&intents(&["drop", "i1"]).await, "i1 dropped\n");
    let path = ledger(&ws).display().to_string();
    let o = intents(&["drop", "i1"]).await;
    assert_eq!((o.code, o.stderr), (2, format!("error: {path}: intent i1 is already dropped; only an unfinished intent can be dropped\n")));
    let o = intents(&["approve", "i9"]).await;
    assert_eq!((o.code, o.stderr), (2, format!("error: {path}: no intent i9\n")));
    ok(&intents(&["ls"]).await, "i1\tdropped\tp5\tby human\tprune old logs\trun: ls logs\n");
    let o = intents(&["ls", "--json"]).await;
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!((v["ledger"].as_str(), v["skipped"].clone()), (Some(path.as_str()), json!([])));
    let only = &v["intents"][0];
    assert_eq!((only["id"].as_str(), only["status"].as_str(), only["needs"].as_str()), (Some("i1"), Some("dropped"), Some("none")));
    assert!(only["done_at"].is_string());
    assert_eq!(
        lines(&ws).iter().map(|l| (l["status"].as_str().unwrap(), l["needs"].as_str().unwrap())).collect::<Vec<_>>(),
        [("pending", "human"), ("pending", "none"), ("dropped", "none")]
    );

    let o = intents(&["rm"]).await;
    let moved = o.stdout.strip_prefix("moved the ledger to ").unwrap().trim_end().to_string();
    assert!(moved.starts_with(&format!("{path}.removed-")), "{moved}");
    assert_eq!(std::fs::read_to_string(&moved).unwrap().lines().count(), 3);
    ok(&intents(&["ls"]).await, "No intents. (Write one with `cicy-agent wish w-1 \"…\"`.)\n");
    ok(&intents(&["rm"]).await, &format!("no ledger to remove ({path})\n"));
}

#[tokio::test]
async fn the_wish_tool_writes_by_self_through_a_turn() {
    let gw = ScriptedGateway::start().await;
    let t = TestHome::new(&gw.url(), 0);
    t.write_role("wisher", "[core, autonomy]", 10);
    let id = t.create("wisher", None);
    gw.on_aux(judge(ALLOW));
    gw.push(Reply::sse(anthropic_tool_uses(&[
        ("t1", "wish", r#"{"what": "tidy the notes folder", "run": "ls notes", "priority": 6, "min_gap": 60, "needs": "external"}"#),
        ("t2", "wish", r#"{"what": "publish the notes", "run": "git push origin main"}"#),
    ])));
    gw.push(Reply::sse(anthropic_text("Noted.")));
    let mut s = t.open(&id);
    let (events, _) = collector(&id);
    cicy::turn::run_turn(&mut s, "note what you want to do later", &events, &CancellationToken::new()).await.unwrap();

    let (aux, main) = split_aux(&gw.requests());
    let tools: Vec<String> = body(&main[0])["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(tools, ["shell", "skill", "wish"]);
    assert_eq!(aux.len(), 1, "the refused command asked no judge");
    assert_eq!(aux[0].header("x-cicy-aux"), Some("guard"));
    assert_eq!(body(&aux[0])["messages"][0]["content"][0]["text"], "what: tidy the notes folder\nwhy: (none)\n");
    assert_eq!(body(&aux[0])["model"], "test-model");
    let results = body(&main[1])["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    assert_eq!(results[0]["content"], "wished i1 (pending; needs external: it is only reported until a person approves it)");
    assert_eq!(results[0].get("is_error"), None);
    assert_eq!(results[1]["content"], format!("refused i2: {PUSH}"));
    assert_eq!(results[1]["is_error"], true);
    let checked = GuardKey::load_or_create(t.root()).unwrap().mark(&["tidy the notes folder", "", "ls notes", "external"]);
    assert_eq!(
        lines(&t.workspace(&id)),
        vec![
            line(
                json!({"by": "self", "what": "tidy the notes folder", "run": "ls notes", "priority": 6, "min_gap": 60, "needs": "external", "checked": checked})
            ),
            line(
                json!({"id": "i2", "by": "self", "what": "publish the notes", "run": "git push origin main", "status": "refused", "done_at": "<time>", "refused_reason": PUSH})
            ),
        ]
    );
}

#[tokio::test]
async fn the_autonomy_route_serves_the_report_and_every_intent() {
    let gw = ScriptedGateway::start().await;
    gw.on_aux(judge(ALLOW));
    let h = tempfile::tempdir().unwrap();
    let home = h.path();
    let ws = create(home).await;
    let o = cicy(home, &gw.url(), &["wish", "w-1", "ask before pruning logs", "--needs", "human", "--priority", "4"], None).await;
    assert_eq!(o.stdout, "i1 pending\n");
    let o = cicy(home, &gw.url(), &["wish", "w-1", "publish", "--run", "git push"], None).await;
    assert_eq!(o.code, 1);
    // A hand-broken line is skipped and reported.
    let mut text = std::fs::read_to_string(ledger(&ws)).unwrap();
    text.push_str("{not json\n");
    std::fs::write(ledger(&ws), &text).unwrap();

    let serve = Serve::start(home, &gw.url(), &[]).await;
    let (status, v) = serve.get("/api/agents/w-1/autonomy").await;
    assert_eq!(status, 200, "{v}");
    let mut report = v.clone();
    let intents = report.as_object_mut().unwrap().remove("intents").unwrap();
    let why = report["skipped"][0]["why"].clone();
    assert_eq!(
        report,
        json!({
            "enabled": true, "off_reason": null, "tick_secs": 30, "lease": null, "mine": [], "mine_total": 0,
            "now": "rest (nothing wanted and runnable)",
            "waiting": [{"id": "i1", "what": "ask before pruning logs", "needs": "human", "label": "needs your approval"}],
            "squeezed": [], "skipped": [{"line": 3, "why": why}],
        })
    );
    let got: Vec<(&str, &str)> =
        intents.as_array().unwrap().iter().map(|i| (i["id"].as_str().unwrap(), i["status"].as_str().unwrap())).collect();
    assert_eq!(got, [("i1", "pending"), ("i2", "refused")]);
    assert_eq!(intents[1]["refused_reason"], PUSH);
    let cli = cicy(home, &gw.url(), &["intents", "w-1", "status", "--json"], None).await;
    assert_eq!(serde_json::from_str::<Value>(&cli.stdout).unwrap(), v, "the CLI and the API give the same JSON");
    let (status, v) = serve.get("/api/agents/w-9/autonomy").await;
    assert_eq!(v, json!({"error": "not_found", "message": "no agent `w-9` (see `cicy-agent ls`)"}), "{status}");
    assert_eq!(status, 404);
    let no_token = reqwest::Client::builder().no_proxy().build().unwrap().get(serve.url("/api/agents/w-1/autonomy")).send().await.unwrap();
    assert_eq!(no_token.status().as_u16(), 401);
    assert_eq!(serve.stop().await, 0);
}

/// What serve's tick calls for a line written by hand: it is not checked, the pickup check
/// judges it and returns it marked, and a refused one becomes its `refused` line.
#[tokio::test]
async fn a_hand_written_line_is_checked_at_pickup() {
    let gw = ScriptedGateway::start().await;
    gw.on_aux(judge(ALLOW));
    let client = GatewayClient::new(GatewaySettings::new(gw.url(), ApiStyle::Anthropic)).unwrap();
    let j = Judge { client: &client, model: "test-model", agent_id: "w-1" };
    let dir = tempfile::tempdir().unwrap();
    let (ws, home) = (dir.path().join("ws"), dir.path().join("home"));
    let ctx = GuardCtx { workspace: &ws, home: &home };
    let cancel = CancellationToken::new();
    let by_hand = r#"{"id":"i7","at":"2026-12-01T10:00:00Z","by":"human","what":"tidy the notes folder","run":"ls notes","priority":5,"status":"pending"}"#;
    let hand = Folded::parse(by_hand).intents.remove(0);
    std::fs::create_dir_all(&home).unwrap();
    let key = GuardKey::load_or_create(&home).unwrap();
    assert!(!is_checked(&key, &hand));
    let checked = check_at_pickup(&key, &hand, &ctx, &j, &cancel).await.unwrap();
    assert!(is_checked(&key, &checked));
    assert_eq!(checked.extra[CHECKED_KEY], key.mark(&["tidy the notes folder", "", "ls notes", "none"]));
    // A mark made without the key (a plain SHA-256, say, by an agent's shell) is no mark.
    let forged = Intent {
        extra: [(
            CHECKED_KEY.to_string(),
            json!(format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(b"tidy the notes folder\0\0ls notes"))),
        )]
        .into_iter()
        .collect(),
        ..hand.clone()
    };
    assert!(!is_checked(&key, &forged));
    let unneeded = Intent { needs: cicy::autonomy::ledger::Needs::Human, ..checked.clone() };
    assert!(!is_checked(&key, &unneeded), "needs is part of the mark: a hand edit of it is no approval");
    assert_eq!(gw.requests().len(), 1);

    let pushing = Intent { run: Some("git push origin main".into()), ..checked };
    assert!(!is_checked(&key, &pushing), "an edited run is checked again");
    let refusal = check_at_pickup(&key, &pushing, &ctx, &j, &cancel).await.unwrap_err();
    assert_eq!(refusal.to_string(), PUSH);
    assert_eq!(gw.requests().len(), 1, "a refused command asks no judge");
    let line = refused(&pushing, &refusal, "2026-12-02T08:00:00Z");
    assert_eq!((line.status, line.refused_reason.as_deref(), line.extra.get(CHECKED_KEY)), (Status::Refused, Some(PUSH), None));

    // A wish cancelled while it is judged writes nothing.
    cancel.cancel();
    let e = wish(&ws, &home, By::Agent, WishInput { what: "x".into(), ..WishInput::default() }, &j, &cancel).await.unwrap_err();
    assert!(matches!(e, WishError::Cancelled), "{e}");
    assert!(!ledger(&ws).exists());
}
