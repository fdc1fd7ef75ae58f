//! The file tools (docs/design.md §12): the path-escape corpus with zero escapes (nothing outside the
//! workspace read, listed or written), the `.cicy/` write guard, `edit_file`'s match rule, and a
//! real turn against the scripted gateway whose next request carries the tools' exact results.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use cicy::event::TurnOutcome;
use cicy::tools::files::call;
use cicy::tools::ToolOutput;
use cicy::turn;
use cicy_test_support::fixture::{collector, TestHome};
use cicy_test_support::gateway::*;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// Text only the files outside the workspace hold; no tool result may ever contain it.
const SECRET: &str = "TOP-SECRET-OUTSIDE";

/// A workspace `ws` next to a folder `outside`, with links of every kind.
struct Corpus {
    _root: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

impl Corpus {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        let outside = root.path().join("outside");
        std::fs::create_dir_all(outside.join("sub")).unwrap();
        std::fs::write(outside.join("secret.txt"), format!("{SECRET}\n")).unwrap();
        std::fs::write(outside.join("f"), format!("{SECRET} swapped\n")).unwrap();
        std::fs::write(outside.join("sub/deep.txt"), format!("{SECRET} deep\n")).unwrap();
        for d in ["sub", ".cicy/history", ".cicy/outbox", ".cicy/events", ".cicy/checkpoints", ".cicy/memory", "d/e"] {
            std::fs::create_dir_all(ws.join(d)).unwrap();
        }
        std::fs::write(ws.join("sub/real.txt"), "inside\n").unwrap();
        std::fs::write(ws.join(".cicy/history/current.json"), "{\"messages\": []}\n").unwrap();
        std::fs::write(ws.join("d/f"), "inside-d\n").unwrap();
        std::fs::write(ws.join("d/e/f"), "inside-d-e\n").unwrap();
        symlink("/etc", ws.join("etc")).unwrap();
        symlink(&outside, ws.join("out")).unwrap();
        symlink("../outside", ws.join("rel_out")).unwrap();
        symlink(outside.join("created-by-escape"), ws.join("dang")).unwrap();
        symlink("sub/real.txt", ws.join("inner")).unwrap();
        symlink("sub", ws.join("innerdir")).unwrap();
        symlink(".cicy/history", ws.join("h")).unwrap();
        symlink(".cicy", ws.join("c")).unwrap();
        Self { _root: root, ws, outside }
    }

    fn run(&self, tool: &str, input: Value) -> ToolOutput {
        let out = call(tool, &input, &self.ws, &CancellationToken::new());
        assert!(!out.content.contains(SECRET), "{tool} {input} leaked: {}", out.content);
        out
    }

    /// Every path under `outside` with its bytes (folders as `/`), to prove nothing changed.
    fn outside_snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(dir: &Path, base: &Path, into: &mut BTreeMap<PathBuf, Vec<u8>>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                let rel = path.strip_prefix(base).unwrap().to_path_buf();
                if path.is_dir() {
                    into.insert(rel, b"/".to_vec());
                    walk(&path, base, into);
                } else {
                    into.insert(rel, std::fs::read(&path).unwrap());
                }
            }
        }
        let mut snapshot = BTreeMap::new();
        walk(&self.outside, &self.outside, &mut snapshot);
        snapshot
    }
}

fn out_of_bounds(p: &str) -> ToolOutput {
    ToolOutput::error(format!("error: path out of bounds: {p}"))
}

#[test]
fn the_escape_corpus_is_refused_and_nothing_outside_is_read_or_written() {
    let c = Corpus::new();
    let before = c.outside_snapshot();
    let abs_outside = c.outside.join("secret.txt").display().to_string();
    let etc_before = std::fs::read_dir("/etc").unwrap().count();

    for p in [
        "../outside/secret.txt",
        "/etc/passwd",
        "~/.ssh/id_rsa",
        "etc/passwd",
        "out/secret.txt",
        "rel_out/secret.txt",
        "dang",
        "out/sub/deep.txt",
        abs_outside.as_str(),
    ] {
        assert_eq!(c.run("read_file", json!({"path": p})), out_of_bounds(p), "read_file {p}");
        assert_eq!(c.run("edit_file", json!({"path": p, "old_string": SECRET, "new_string": "x"})), out_of_bounds(p), "edit_file {p}");
    }
    for p in [
        "../outside/new.txt",
        "/tmp/cicy-escape.txt",
        "~/cicy-escape.txt",
        "etc/cicy-escape",
        "out/new.txt",
        "out/sub/made/new.txt",
        "rel_out/new.txt",
        "dang",
        "out/secret.txt",
    ] {
        assert_eq!(c.run("write_file", json!({"path": p, "content": "escaped"})), out_of_bounds(p), "write_file {p}");
    }
    for p in ["..", "/etc", "~", "etc", "out", "rel_out", "out/sub"] {
        assert_eq!(c.run("ls", json!({"path": p})), out_of_bounds(p), "ls {p}");
        assert_eq!(c.run("glob", json!({"pattern": "**/*", "path": p})), out_of_bounds(p), "glob {p}");
        assert_eq!(c.run("grep", json!({"pattern": "SECRET", "path": p})), out_of_bounds(p), "grep {p}");
    }
    // Walking the whole workspace meets the links but neither follows nor reads through them.
    assert_eq!(c.run("grep", json!({"pattern": "SECRET|root:"})), ToolOutput::ok("no matches"));
    assert_eq!(
        c.run("glob", json!({"pattern": "**/*"})),
        ToolOutput::ok(".cicy/\n.cicy/memory/\nc\nd/\nd/e/\nd/e/f\nd/f\ndang\netc\nh\ninner\ninnerdir\nout\nrel_out\nsub/\nsub/real.txt")
    );
    assert_eq!(c.outside_snapshot(), before, "nothing outside changed");
    assert!(!Path::new("/tmp/cicy-escape.txt").exists() && !Path::new("/etc/cicy-escape").exists());
    assert_eq!(std::fs::read_dir("/etc").unwrap().count(), etc_before);
}

#[test]
fn a_folder_swapped_for_a_link_between_two_calls_is_refused() {
    let c = Corpus::new();
    let before = c.outside_snapshot();
    assert_eq!(c.run("read_file", json!({"path": "d/f"})), ToolOutput::ok("1|inside-d"));
    assert_eq!(c.run("read_file", json!({"path": "d/e/f"})), ToolOutput::ok("1|inside-d-e"));
    assert_eq!(c.run("ls", json!({"path": "d"})), ToolOutput::ok("[dir]  e/\n[file] f (9 bytes)"));
    // Between two calls the folder becomes a link to outside, which holds the same names.
    std::fs::rename(c.ws.join("d"), c.ws.join("d-old")).unwrap();
    symlink(&c.outside, c.ws.join("d")).unwrap();
    std::fs::create_dir_all(c.outside.join("e")).unwrap();
    std::fs::write(c.outside.join("e/f"), format!("{SECRET} e\n")).unwrap();
    let before = {
        let mut b = before;
        b.insert("e".into(), b"/".to_vec());
        b.insert("e/f".into(), format!("{SECRET} e\n").into_bytes());
        b
    };
    for p in ["d/f", "d/e/f"] {
        assert_eq!(c.run("read_file", json!({"path": p})), out_of_bounds(p));
        assert_eq!(c.run("write_file", json!({"path": p, "content": "escaped"})), out_of_bounds(p));
        assert_eq!(c.run("edit_file", json!({"path": p, "old_string": SECRET, "new_string": "x"})), out_of_bounds(p));
        assert_eq!(c.run("grep", json!({"pattern": "SECRET", "path": p})), out_of_bounds(p));
    }
    assert_eq!(c.run("write_file", json!({"path": "d/e/new/x", "content": "escaped"})), out_of_bounds("d/e/new/x"));
    assert_eq!(c.run("ls", json!({"path": "d/e"})), out_of_bounds("d/e"));
    assert_eq!(c.run("glob", json!({"pattern": "*", "path": "d"})), out_of_bounds("d"));
    assert_eq!(c.outside_snapshot(), before, "nothing outside changed");
}

#[test]
fn links_that_stay_inside_work() {
    let c = Corpus::new();
    let inside_abs = c.ws.join("sub/real.txt").display().to_string();
    assert_eq!(c.run("read_file", json!({"path": "inner"})), ToolOutput::ok("1|inside"));
    assert_eq!(c.run("read_file", json!({"path": "innerdir/real.txt"})), ToolOutput::ok("1|inside"));
    assert_eq!(c.run("read_file", json!({"path": inside_abs})), ToolOutput::ok("1|inside"));
    assert_eq!(c.run("read_file", json!({"path": "sub/../innerdir/./real.txt"})), ToolOutput::ok("1|inside"));
    assert_eq!(
        c.run("write_file", json!({"path": "innerdir/new.txt", "content": "n\n"})),
        ToolOutput::ok("created innerdir/new.txt (2 bytes)")
    );
    assert_eq!(std::fs::read_to_string(c.ws.join("sub/new.txt")).unwrap(), "n\n");
    assert_eq!(c.run("ls", json!({"path": "innerdir"})), ToolOutput::ok("[file] new.txt (2 bytes)\n[file] real.txt (7 bytes)"));
    assert_eq!(c.run("glob", json!({"pattern": "*.txt", "path": "innerdir"})), ToolOutput::ok("innerdir/new.txt\ninnerdir/real.txt"));
    assert_eq!(c.run("grep", json!({"pattern": "ins", "path": "innerdir"})), ToolOutput::ok("innerdir/real.txt:1|inside"));
    assert_eq!(c.run("grep", json!({"pattern": "ins", "path": "inner"})), ToolOutput::ok("inner:1|inside"));
    // The runtime's history is readable, only not writable.
    assert_eq!(c.run("read_file", json!({"path": "h/current.json"})), ToolOutput::ok("1|{\"messages\": []}"));
}

fn refused(p: &str) -> ToolOutput {
    ToolOutput::error(format!("error: write refused: {p} is inside .cicy/, which the runtime owns"))
}

#[test]
fn writes_into_the_runtime_state_are_refused_however_they_are_reached() {
    let c = Corpus::new();
    for d in [".cicy/running", ".cicy/skills/mine"] {
        std::fs::create_dir_all(c.ws.join(d)).unwrap();
    }
    for (f, body) in [
        (".cicy/turn.lock", "123\n"),
        (".cicy/plan.json", "[]\n"),
        (".cicy/memory/note.md", "mine\n"),
        (".cicy/running/123.json", "{}\n"),
        (".cicy/skills/mine/SKILL.md", "guarded\n"),
    ] {
        std::fs::write(c.ws.join(f), body).unwrap();
    }
    let before = std::fs::read_dir(c.ws.join(".cicy")).unwrap().count();
    for p in [
        ".cicy/turn.lock",
        ".cicy/plan.json",
        ".cicy/memory/note.md",
        ".cicy/memory/new.md",
        ".cicy/running/123.json",
        ".cicy/skills/mine/SKILL.md",
        ".cicy/skills/new/SKILL.md",
        ".cicy/history/current.json",
        ".cicy/history/sub/new.json",
        ".cicy/outbox/o.md",
        ".cicy/events/e",
        ".cicy/new.txt",
        ".cicy",
        "./.cicy/turn.lock",
        "a/../.cicy/turn.lock",
        "innerdir/../.cicy/history/x",
        "h/current.json",
        "c/turn.lock",
        "c/skills/mine/SKILL.md",
        "c/checkpoints/1/meta.json",
        "c/newdir/x",
    ] {
        assert_eq!(c.run("write_file", json!({"path": p, "content": "{}"})), refused(p), "write_file {p}");
    }
    let abs = c.ws.join(".cicy/plan.json").display().to_string();
    assert_eq!(c.run("write_file", json!({"path": abs, "content": "{}"})), refused(&abs));
    for p in [".cicy/turn.lock", "c/memory/note.md", "h/current.json", ".cicy/skills/mine/SKILL.md"] {
        assert_eq!(c.run("edit_file", json!({"path": p, "old_string": "1", "new_string": "2"})), refused(p), "edit_file {p}");
    }
    for (f, body) in [
        (".cicy/turn.lock", "123\n"),
        (".cicy/plan.json", "[]\n"),
        (".cicy/memory/note.md", "mine\n"),
        (".cicy/running/123.json", "{}\n"),
        (".cicy/skills/mine/SKILL.md", "guarded\n"),
        (".cicy/history/current.json", "{\"messages\": []}\n"),
    ] {
        assert_eq!(std::fs::read_to_string(c.ws.join(f)).unwrap(), body, "{f} is unchanged");
    }
    assert_eq!(std::fs::read_dir(c.ws.join(".cicy")).unwrap().count(), before, "nothing new in .cicy");
    assert!(
        !c.ws.join(".cicy/history/sub").exists() && !c.ws.join(".cicy/checkpoints/1").exists() && !c.ws.join(".cicy/skills/new").exists()
    );
    assert!(!c.ws.join(".cicy/memory/new.md").exists() && !c.ws.join("a").exists());
    // Reading the runtime's state stays allowed.
    assert_eq!(c.run("read_file", json!({"path": ".cicy/turn.lock"})), ToolOutput::ok("1|123"));
    assert_eq!(c.run("read_file", json!({"path": "c/memory/note.md"})), ToolOutput::ok("1|mine"));
}

#[test]
fn a_refused_write_creates_no_folder_where_the_state_folder_is_missing() {
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    std::fs::create_dir_all(ws.join(".cicy/history")).unwrap();
    symlink(".cicy", ws.join("c")).unwrap();
    symlink(".", ws.join("self")).unwrap();
    let run = |p: &str| call("write_file", &json!({"path": p, "content": "{}"}), &ws, &CancellationToken::new());
    for p in [".cicy/checkpoints/x/meta.json", "c/checkpoints/x/meta.json", "self/.cicy/checkpoints/x/meta.json"] {
        assert_eq!(run(p), refused(p));
    }
    assert_eq!(std::fs::read_dir(ws.join(".cicy")).unwrap().map(|e| e.unwrap().file_name()).collect::<Vec<_>>(), ["history"]);
    // No `.cicy` at all: neither it nor anything under it is made.
    std::fs::remove_dir_all(ws.join(".cicy")).unwrap();
    for p in [".cicy/checkpoints/x/meta.json", "self/.cicy/checkpoints/x/meta.json", "self/.cicy"] {
        assert_eq!(run(p), refused(p));
    }
    assert!(std::fs::symlink_metadata(ws.join(".cicy")).is_err(), "no .cicy was made");
    assert_eq!(run("notes/x.md"), ToolOutput::ok("created notes/x.md (2 bytes)"));
}

#[test]
fn edit_file_needs_exactly_one_match() {
    let c = Corpus::new();
    std::fs::write(c.ws.join("code.rs"), "let a = 1;\nlet b = 1;\n").unwrap();
    let edit = |old: &str| c.run("edit_file", json!({"path": "code.rs", "old_string": old, "new_string": "2;"}));
    assert_eq!(edit("3;"), ToolOutput::error("error: old_string not found in code.rs"));
    assert_eq!(
        edit("1;"),
        ToolOutput::error("error: old_string occurs 2 times in code.rs; include more surrounding text so it matches exactly once")
    );
    assert_eq!(std::fs::read_to_string(c.ws.join("code.rs")).unwrap(), "let a = 1;\nlet b = 1;\n");
    assert_eq!(edit("b = 1;").content, "edited code.rs (1 replacement, 18 bytes)");
    assert_eq!(std::fs::read_to_string(c.ws.join("code.rs")).unwrap(), "let a = 1;\nlet 2;\n");
}

fn tool_results(body: &[u8]) -> Vec<Value> {
    let body: Value = serde_json::from_slice(body).unwrap();
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    last["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| json!([b["content"], b.get("is_error")]))
        .collect()
}

#[tokio::test]
async fn a_turn_writes_edits_and_reads_through_the_file_tools() {
    let gw = ScriptedGateway::start().await;
    gw.push(Reply::sse(anthropic_tool_uses(&[
        ("t1", "write_file", r#"{"path":"notes/a.txt","content":"alpha\nbeta\n"}"#),
        ("t2", "read_file", r#"{"path":"~/.ssh/id_rsa"}"#),
    ])));
    gw.push(Reply::sse(anthropic_tool_use("t3", "edit_file", r#"{"path":"notes/a.txt","old_string":"beta","new_string":"gamma"}"#)));
    gw.push(Reply::sse(anthropic_tool_uses(&[
        ("t4", "read_file", r#"{"path":"notes/a.txt"}"#),
        ("t5", "grep", r#"{"pattern":"gam","context_lines":0}"#),
        ("t6", "write_file", r#"{"path":".cicy/history/x.json","content":"{}"}"#),
        ("t7", "write_file", r#"{"path":".cicy/checkpoints/x/meta.json","content":"{}"}"#),
        ("t8", "write_file", r#"{"path":"newdir/","content":"x"}"#),
        ("t9", "write_file", r#"{"path":"","content":"x"}"#),
    ])));
    gw.push(Reply::sse(anthropic_text("Done.")));
    let t = TestHome::new(&gw.url(), 0);
    t.write_role("filer", "[files]", 200);
    let id = t.create("filer", None);
    let mut s = t.open(&id);
    let (em, _ev) = collector(&id);
    let outcome = turn::run_turn(&mut s, "make notes", &em, &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome, TurnOutcome::Completed);

    let reqs = gw.requests();
    assert_eq!(reqs.len(), 4);
    let first: Value = serde_json::from_slice(&reqs[0].body).unwrap();
    let names: Vec<&str> = first["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["edit_file", "glob", "grep", "ls", "read_file", "write_file"]);
    assert_eq!(
        tool_results(&reqs[1].body),
        [json!(["created notes/a.txt (11 bytes)", null]), json!(["error: path out of bounds: ~/.ssh/id_rsa", true])]
    );
    assert_eq!(tool_results(&reqs[2].body), [json!(["edited notes/a.txt (1 replacement, 12 bytes)", null])]);
    assert_eq!(
        tool_results(&reqs[3].body),
        [
            json!(["1|alpha\n2|gamma", null]),
            json!(["notes/a.txt:2|gamma", null]),
            json!(["error: write refused: .cicy/history/x.json is inside .cicy/, which the runtime owns", true]),
            json!(["error: write refused: .cicy/checkpoints/x/meta.json is inside .cicy/, which the runtime owns", true]),
            json!(["error: newdir/ names a folder; write_file needs a file path", true]),
            json!(["invalid input: \"path\" must not be empty", true])
        ]
    );
    assert_eq!(std::fs::read_to_string(t.workspace(&id).join("notes/a.txt")).unwrap(), "alpha\ngamma\n");
    assert!(!t.workspace(&id).join(".cicy/history/x.json").exists());
    assert!(!t.workspace(&id).join(".cicy/checkpoints").exists(), "a refused write makes no folder");
    assert!(!t.workspace(&id).join("newdir").exists());
}
