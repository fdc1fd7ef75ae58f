//! The file tools' path confinement under measurement (docs/design.md §12 Numbers: path check
//! < 20 µs), a criterion bench:
//!
//! - `check_and_open`: a 5-deep relative path checked (`Workspace::resolve`) and opened beneath
//!   the already open workspace (`openat2(RESOLVE_BENEATH)`, then `fstat`): the path check;
//! - `refuse_link_to_outside`: the same for a path through a symlink to outside (refused);
//! - `open_workspace_check_and_open`: plus opening the workspace, as each tool call does;
//! - `write_guard`: the folder of a 5-deep write opened and walked up to the workspace by
//!   identity (the `.cicy` write guard);
//! - `read_file_call`: a whole `read_file` of a 10-line file through `files::call`.
//!
//! Run: `cargo bench --bench files`. Figures go to stdout; docs/benchmarks.md quotes them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is how it fails

use std::hint::black_box;
use std::path::Path;

use cicy::tools::files::read::open_regular;
use cicy::tools::files::sandbox::Workspace;
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const DEEP: &str = "src/a/b/c/file.txt";

fn setup(root: &Path) {
    std::fs::create_dir_all(root.join("src/a/b/c")).unwrap();
    std::fs::create_dir_all(root.join(".cicy/history")).unwrap();
    let text: String = (1..=10).map(|n| format!("line {n}\n")).collect();
    std::fs::write(root.join(DEEP), text).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("out")).unwrap();
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let ws = Workspace::open(dir.path()).unwrap();
    c.bench_function("check_and_open", |b| {
        b.iter(|| {
            let rel = ws.resolve(black_box(DEEP)).unwrap();
            black_box(open_regular(&ws, &rel, DEEP).unwrap())
        })
    });
    c.bench_function("refuse_link_to_outside", |b| {
        b.iter(|| {
            let rel = ws.resolve(black_box("out/passwd")).unwrap();
            black_box(open_regular(&ws, &rel, "out/passwd").unwrap_err())
        })
    });
    c.bench_function("open_workspace_check_and_open", |b| {
        b.iter(|| {
            let ws = Workspace::open(dir.path()).unwrap();
            let rel = ws.resolve(black_box(DEEP)).unwrap();
            black_box(open_regular(&ws, &rel, DEEP).unwrap())
        })
    });
    c.bench_function("write_guard", |b| {
        b.iter(|| {
            let rel = ws.resolve(black_box(DEEP)).unwrap();
            black_box(ws.parent_for_write(&rel, DEEP).unwrap())
        })
    });
    let cancel = CancellationToken::new();
    let input = json!({"path": DEEP});
    c.bench_function("read_file_call", |b| b.iter(|| black_box(cicy::tools::files::call("read_file", &input, dir.path(), &cancel))));
}

criterion_group!(benches, bench);
criterion_main!(benches);
