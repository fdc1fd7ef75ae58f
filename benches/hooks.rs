//! The hook round trip of docs/design.md §12 Numbers (target < 10 ms), a bench binary.
//!
//! `hook_round_trip`: one `before_prompt` hook point with one hook, a tiny `/bin/sh` script that
//! reads its JSON stdin and prints a `modify` action: building the stdin, spawning the process
//! in its own group (recorded for the reaper, as in a turn), writing stdin, reading stdout and
//! stderr, waiting for the exit, parsing the action, emitting the `hook` event. The process start
//! of `/bin/sh` is most of it. `hook_round_trip_unrecorded`: the same without the reaper's record
//! (an atomic, fsynced file write and its removal), to show what that costs.
//!
//! Run: `cargo bench --bench hooks`. docs/benchmarks.md quotes the figure.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is how it fails

use std::os::unix::fs::PermissionsExt;

use criterion::{criterion_group, criterion_main, Criterion};
use tokio_util::sync::CancellationToken;

use cicy::event::Emitter;
use cicy::hooks::{Hooks, TurnIds};
use cicy::tools::ToolContext;

/// A role folder with `hooks/tiny.sh` and a workspace under `dir`; the hooks of one turn, the
/// hook's process group recorded for the reaper when `record` (as in a turn).
fn setup(dir: &std::path::Path, record: bool) -> Hooks {
    let (role, ws) = (dir.join("role"), dir.join("ws"));
    std::fs::create_dir_all(role.join("hooks")).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    let script = role.join("hooks/tiny.sh");
    // Reads its one JSON line with the shell's own `read` (no second process).
    std::fs::write(
        &script,
        "#!/bin/sh
read -r line
echo '{\"action\":\"modify\",\"text\":\"changed\"}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let meta = cicy::role::parse_meta("hooks:\n  before_prompt: [{command: hooks/tiny.sh}]\n", "meta.yaml").unwrap();
    let ctx = ToolContext {
        workspace: ws.clone(),
        skills_dir: dir.join("skills"),
        cancel: CancellationToken::new(),
        hidden_env: vec!["CICY_API_KEY".into()],
        env: Vec::new(),
        running_dir: record.then(|| ws.join(".cicy/running")),
        events: None,
        subagent: None,
        user: None,
        skill_guard: None,
        extensions: http::Extensions::new(),
    };
    let events = Emitter::new("w-1", |_| {});
    let ids = TurnIds { agent_id: "w-1", conv_id: "c-1", turn_id: "t-1", workspace: &ws };
    Hooks::new(&meta.hooks, role, || ctx, &events, ids)
}

fn round_trip(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut group = c.benchmark_group("hooks");
    group.sample_size(50);
    for (name, record) in [("hook_round_trip", true), ("hook_round_trip_unrecorded", false)] {
        let dir = tempfile::tempdir().unwrap();
        let hooks = setup(dir.path(), record);
        assert_eq!(rt.block_on(hooks.before_prompt(false, "hello")).unwrap(), "changed");
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| async { hooks.before_prompt(false, "hello").await.unwrap() });
        });
    }
    group.finish();
}

criterion_group!(benches, round_trip);
criterion_main!(benches);
