//! The cost of the wish guard's `run` check (docs/design.md §13), a bench binary. No target is set by
//! docs/design.md; the figure tells a caller (the idle tick checks hand-written ledger lines at
//! pickup, docs/design.md §13) what one check costs: parsing the line as bash and classifying every
//! command in it. No gateway call is involved.
//!
//! `guard_check_run_simple`: `echo hi > notes.txt`. `guard_check_run_compound`: a realistic
//! longer line with a `cd`, a pipeline, a `$(…)`, a `bash -c` text and redirects.
//! `guard_never_killed`: `git status`.
//!
//! Run: `cargo bench --bench guard`. docs/benchmarks.md quotes the figures.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is how it fails

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};

use cicy::autonomy::guard::{check_run, never_killed, GuardCtx};

const COMPOUND: &str =
    "cd sub && cargo test 2>&1 | tail -n 20 > test.log; echo \"done $(date +%s)\" >> log.txt && bash -c 'wc -l test.log > count.txt'";

fn bench(c: &mut Criterion) {
    let ctx = GuardCtx { workspace: Path::new("/home/u/.cicy/workers/w-1"), home: Path::new("/home/u/.cicy") };
    assert_eq!(check_run(COMPOUND, &ctx), Ok(()));
    c.bench_function("guard_check_run_simple", |b| b.iter(|| check_run(black_box("echo hi > notes.txt"), &ctx)));
    c.bench_function("guard_check_run_compound", |b| b.iter(|| check_run(black_box(COMPOUND), &ctx)));
    c.bench_function("guard_never_killed", |b| b.iter(|| never_killed(black_box("git status"), &ctx)));
}

criterion_group!(benches, bench);
criterion_main!(benches);
