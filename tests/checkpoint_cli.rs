//! `cicy-agent checkpoint …` as a user runs it (docs/design.md §12 "Checkpoints"): real processes, a
//! temporary `$CICY_HOME`, the scripted gateway; a save killed with SIGKILL mid-way.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cicy_test_support::cli::{command, event_types, Out};
use cicy_test_support::gateway::*;
use cicy_test_support::wait::Fifo;
use serde_json::Value;

async fn cicy(home: &Path, gateway: &str, args: &[&str]) -> Out {
    cicy_test_support::cli::cicy(home, gateway, args, None).await
}

fn ws(home: &Path) -> PathBuf {
    home.join("workers/w-1")
}

fn checkpoints(home: &Path) -> PathBuf {
    ws(home).join(".cicy/checkpoints")
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    n.sort();
    n
}

/// An agent `w-1` and a gateway answering every main request with `answer <n>`.
async fn setup() -> (tempfile::TempDir, ScriptedGateway) {
    let gw = ScriptedGateway::start().await;
    gw.fallback(|n| Reply::sse(anthropic_text(&format!("answer {n}"))));
    let h = tempfile::tempdir().unwrap();
    let o = cicy(h.path(), &gw.url(), &["create", "Ada", "--role-template", "concierge"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    (h, gw)
}

async fn chat(h: &Path, gw: &ScriptedGateway, text: &str) {
    let o = cicy(h, &gw.url(), &["chat", "w-1", text]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
}

#[tokio::test]
async fn save_ls_load_rm_round_trip_the_messages_byte_for_byte() {
    let (h, gw) = setup().await;
    let h = h.path();
    chat(h, &gw, "one").await;
    chat(h, &gw, "two").await;
    std::fs::write(ws(h).join(".cicy/plan.json"), "{\"todos\":[]}\n").unwrap();
    let o = cicy(h, &gw.url(), &["checkpoint", "w-1", "save", "--label", "first"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let first = o.stdout.trim_end().to_string();
    let saved = json(&checkpoints(h).join(&first).join("current.json"));
    let conv = saved["conversation_id"].as_str().unwrap().to_string();
    let meta = json(&checkpoints(h).join(&first).join("meta.json"));
    let saved_at = meta["saved_at"].as_str().unwrap();
    assert_eq!(
        meta,
        serde_json::json!({"checkpoint_id": first, "label": "first", "saved_at": saved_at, "schema_version": 1,
                           "conv_id": conv, "message_count": 4, "pending": 0, "steering": 0})
    );
    let o = cicy(h, &gw.url(), &["checkpoint", "w-1", "ls"]).await;
    assert_eq!(o.stdout, format!("{first}\tfirst\t{saved_at}\t4 messages\t{conv}\n"));

    chat(h, &gw, "three").await;
    std::fs::write(ws(h).join("AGENTS.md"), "edited\n").unwrap();
    std::fs::remove_file(ws(h).join(".cicy/plan.json")).unwrap();
    let o = cicy(h, &gw.url(), &["checkpoint", "w-1", "load", &first]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let now = json(&ws(h).join(".cicy/history/current.json"));
    let new_conv = now["conversation_id"].as_str().unwrap();
    assert_ne!(new_conv, conv);
    let listed = cicy(h, &gw.url(), &["checkpoint", "w-1", "ls"]).await.stdout;
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2);
    let before = lines[0].split('\t').next().unwrap();
    assert_eq!(o.stdout, format!("loaded {first} as conversation {new_conv} (4 messages); the state before is checkpoint {before}\n"));
    assert_eq!(lines[0].split('\t').skip(1).step_by(2).collect::<Vec<_>>(), ["before-load", "6 messages"]);
    assert_eq!(lines[1], format!("{first}\tfirst\t{saved_at}\t4 messages\t{conv}"));
    assert_eq!(serde_json::to_vec_pretty(&now["messages"]).unwrap(), serde_json::to_vec_pretty(&saved["messages"]).unwrap());
    let agents_md = std::fs::read_to_string(checkpoints(h).join(&first).join("AGENTS.md")).unwrap();
    assert_eq!(std::fs::read_to_string(ws(h).join("AGENTS.md")).unwrap(), agents_md);
    assert_eq!(std::fs::read_to_string(ws(h).join(".cicy/plan.json")).unwrap(), "{\"todos\":[]}\n");

    // The next turn sends the restored history: "one", "two" and their answers, then "four".
    let before_next = gw.requests().len();
    chat(h, &gw, "four").await;
    let req = &gw.requests()[before_next];
    let texts: Vec<String> = cicy_test_support::history::wire_messages(req).iter().map(|m| m.plain_text()).collect();
    assert_eq!(texts[0], "<role>\n# Role\n\nYou are Ada (agent w-1), the concierge.\n</role>\none");
    assert_eq!(texts[1..], ["answer 0", "two", "answer 1", "four"]);

    let o = cicy(h, &gw.url(), &["checkpoint", "w-1", "rm", before]).await;
    assert_eq!((o.code, o.stdout.clone()), (0, format!("removed {before}\n")));
    assert_eq!(names(&checkpoints(h)), [first]);
    let o = cicy(h, &gw.url(), &["checkpoint", "w-1", "rm", before]).await;
    assert_eq!((o.code, o.stderr), (2, format!("error: no checkpoint `{before}` (see `checkpoint <id> ls`)\n")));
}

#[tokio::test]
async fn load_and_save_are_refused_with_exit_1_while_a_turn_holds_the_lock() {
    let (h, gw) = setup().await;
    let h = h.path();
    let o = cicy(h, &gw.url(), &["checkpoint", "w-1", "save"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let id = o.stdout.trim_end().to_string();
    let lock = cicy::lock::TurnLock::try_acquire(&ws(h), "w-1").unwrap();
    for args in [vec!["checkpoint", "w-1", "load", id.as_str()], vec!["checkpoint", "w-1", "save"]] {
        let o = cicy(h, &gw.url(), &args).await;
        assert_eq!(
            (o.code, o.stdout.as_str(), o.stderr.as_str()),
            (1, "", "error: a turn is running for w-1; try again when it has ended\n")
        );
    }
    drop(lock);
    assert_eq!(names(&checkpoints(h)), [id]);
}

#[tokio::test]
async fn the_tenth_prompt_of_a_conversation_saves_an_auto_checkpoint() {
    let (h, gw) = setup().await;
    let h = h.path();
    for i in 1..=9 {
        chat(h, &gw, &format!("q{i}")).await;
    }
    assert!(!checkpoints(h).exists());
    let o = cicy(h, &gw.url(), &["chat", "w-1", "ten", "--json"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let listed = cicy(h, &gw.url(), &["checkpoint", "w-1", "ls"]).await.stdout;
    let id = listed.split('\t').next().unwrap();
    assert_eq!(listed.split('\t').skip(1).step_by(2).collect::<Vec<_>>(), ["auto", "20 messages"]);
    let saved = format!("system: checkpoint {id} saved (auto, every 10 turns)");
    let types = event_types(&o.stdout);
    let at = types.iter().position(|t| *t == saved).expect("the auto checkpoint event");
    assert_eq!(types[at + 1], "turn_ended");
}

#[tokio::test]
async fn a_save_killed_mid_way_leaves_no_checkpoint() {
    let (h, gw) = setup().await;
    let h = h.path();
    chat(h, &gw, "one").await;
    // AGENTS.md is a named pipe: the save blocks on it after copying the history.
    std::fs::remove_file(ws(h).join("AGENTS.md")).unwrap();
    let fifo = Fifo::new(ws(h).join("AGENTS.md"));
    let mut child = command(h, &gw.url(), &["checkpoint", "w-1", "save"]).spawn().unwrap();
    let path = fifo.path.clone();
    // Opening the pipe for writing returns once the save has opened it for reading.
    let writer = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::task::spawn_blocking(move || std::fs::OpenOptions::new().write(true).open(path).unwrap()),
    )
    .await
    .expect("the save reached AGENTS.md")
    .unwrap();
    child.start_kill().unwrap();
    let status = child.wait().await.unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
    drop(writer);

    let left = names(&checkpoints(h));
    assert_eq!(left.len(), 1);
    assert!(left[0].starts_with(".tmp-"), "{left:?}");
    assert_eq!(names(&checkpoints(h).join(&left[0])), ["current.json", "reply.json"]);
    let o = cicy(h, &gw.url(), &["checkpoint", "w-1", "ls"]).await;
    assert_eq!(
        (o.code, o.stdout.as_str(), o.stderr.as_str()),
        (0, "", "no checkpoints yet for w-1 (`cicy-agent checkpoint w-1 save` makes one)\n")
    );

    std::fs::remove_file(ws(h).join("AGENTS.md")).unwrap();
    std::fs::write(ws(h).join("AGENTS.md"), "# Ada\n").unwrap();
    let o = cicy(h, &gw.url(), &["checkpoint", "w-1", "save"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(names(&checkpoints(h)), [o.stdout.trim_end().to_string()]);
}

#[tokio::test]
async fn a_corrupt_checkpoint_is_refused_with_nothing_changed() {
    let (h, gw) = setup().await;
    let h = h.path();
    chat(h, &gw, "one").await;
    std::fs::create_dir_all(ws(h).join(".cicy/memory")).unwrap();
    std::fs::write(ws(h).join(".cicy/memory/fact_a.md"), "A\n").unwrap();
    let o = cicy(h, &gw.url(), &["checkpoint", "w-1", "save"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let id = o.stdout.trim_end().to_string();
    let cp = checkpoints(h).join(&id);
    chat(h, &gw, "two").await;
    std::fs::write(ws(h).join("AGENTS.md"), "edited\n").unwrap();
    let link = || std::fs::read_link(ws(h).join(".cicy/history/current.json")).unwrap();
    let active = link();

    // memory/ replaced by a file.
    std::fs::remove_dir_all(cp.join("memory")).unwrap();
    std::fs::write(cp.join("memory"), "x").unwrap();
    let o = cicy(h, &gw.url(), &["checkpoint", "w-1", "load", &id]).await;
    let refused = format!("error: {}: not a folder; the checkpoint was not loaded and nothing was changed\n", cp.join("memory").display());
    assert_eq!((o.code, o.stdout.as_str(), o.stderr.as_str()), (2, "", refused.as_str()));
    // current.json deleted while meta.json says 2 messages: not an empty conversation.
    std::fs::remove_file(cp.join("memory")).unwrap();
    std::fs::remove_file(cp.join("current.json")).unwrap();
    let o = cicy(h, &gw.url(), &["checkpoint", "w-1", "load", &id]).await;
    let refused = format!(
        "error: {}: missing, but meta.json says the conversation had 2 messages; the checkpoint was not loaded and nothing was changed\n",
        cp.join("current.json").display()
    );
    assert_eq!((o.code, o.stdout.as_str(), o.stderr.as_str()), (2, "", refused.as_str()));

    assert_eq!(link(), active);
    assert_eq!(std::fs::read_to_string(ws(h).join("AGENTS.md")).unwrap(), "edited\n");
    assert_eq!(names(&checkpoints(h)), [id]);
}

#[tokio::test]
async fn a_label_with_a_control_character_is_refused() {
    let (h, gw) = setup().await;
    let h = h.path();
    let o = cicy(h, &gw.url(), &["checkpoint", "w-1", "save", "--label", "a\tb\nc"]).await;
    let refused =
        "error: bad label \"a\\tb\\nc\": it must not be empty or contain control characters (tab, newline), which break `checkpoint ls`\n";
    assert_eq!((o.code, o.stdout.as_str(), o.stderr.as_str()), (2, "", refused));
    assert!(!checkpoints(h).exists());
}
