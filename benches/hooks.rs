//! The hook round trip of DESIGN.md §12 Numbers (target < 10 ms), a bench binary.
//!
//! `hook_round_trip`: one `before_prompt` hook point with one hook, a tiny `/bin/sh` script that
//! reads its JSON stdin and prints a `modify` action: building the stdin, spawning the process
//! in its own group (recorded for the reaper, as in a turn), writing stdin, reading stdout and
//! stderr, waiting for the exit, parsing the action, emitting the `hook` event. The process start
//! of `/bin/sh` is most of it.
//!
//! Run: `cargo bench --bench hooks`. The README quotes the figure.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is how it fails

use std::os::unix::fs::PermissionsExt;

use criterion::{criterion_group, criterion_main, Criterion};
use tokio_util::sync::CancellationToken;

use cicy::event::Emitter;
use cicy::hooks::{Hooks, TurnIds};
use cicy::tools::ToolContext;

fn round_trip(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (role, ws) = (dir.path().join("role"), dir.path().join("ws"));
    std::fs::create_dir_all(role.join("hooks")).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    let script = role.join("hooks/tiny.sh");
    std::fs::write(&script, "#!/bin/sh\ncat >/dev/null\necho '{\"action\":\"modify\",\"text\":\"changed\"}'\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let meta = cicy::role::parse_meta("hooks:\n  before_prompt: [{command: hooks/tiny.sh}]\n", "meta.yaml").unwrap();
    let ctx = ToolContext {
        workspace: ws.clone(),
        skills_dir: dir.path().join("skills"),
        cancel: CancellationToken::new(),
        hidden_env: vec!["CICY_API_KEY".into()],
        env: Vec::new(),
        running_dir: Some(ws.join(".cicy/running")),
        wake: None,
        events: None,
    };
    let events = Emitter::new("w-1", |_| {});
    let ids = TurnIds { agent_id: "w-1", conv_id: "c-1", turn_id: "t-1", workspace: &ws };
    let hooks = Hooks::new(&meta.hooks, role, || ctx, &events, ids);
    assert_eq!(rt.block_on(hooks.before_prompt(false, "hello")).unwrap(), "changed");

    let mut group = c.benchmark_group("hooks");
    group.sample_size(50);
    group.bench_function("hook_round_trip", |b| {
        b.to_async(&rt).iter(|| async { hooks.before_prompt(false, "hello").await.unwrap() });
    });
    group.finish();
}

criterion_group!(benches, round_trip);
criterion_main!(benches);
