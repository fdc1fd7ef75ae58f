//! `cicy-agent create` at scale, a bench binary: 10,000 creates one after another through the
//! CLI binary on one `CICY_HOME` (target < 2 min on 2 cores), each checking its workspace
//! against every agent before it through the registry's workspace index. Prints the total and
//! the median wall of one create at 10 agents and at 10,000, which should be about the same, and
//! the wall of a `--workspace` create refused because it lies inside the last agent's workspace.
//!
//! Run: `cargo bench --bench create` (`CICY_BENCH_CREATES=1000` for a shorter run;
//! `CICY_BENCH_BIN=<path>` to time another build of `cicy-agent`, e.g. an older one). Figures go
//! to stdout; docs/benchmarks.md quotes them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is how it fails
// A bench reports its figures on the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How many of the first and the last creates the medians are taken over.
const WINDOW: usize = 100;

fn create(bin: &Path, home: &Path, args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new(bin).arg("create").args(args).env("CICY_HOME", home).env("HOME", home).stdin(Stdio::null()).output().unwrap();
    (out, start.elapsed())
}

fn median_ms(walls: &[Duration]) -> f64 {
    let mut v = walls.to_vec();
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("create: bench");
        return;
    }
    // `cargo test --all-targets` runs bench binaries without `--bench`: only a compile check.
    if !std::env::args().any(|a| a == "--bench") {
        println!("create bench: skipped (run it with `cargo bench --bench create`)");
        return;
    }
    let creates: usize = std::env::var("CICY_BENCH_CREATES").ok().map_or(10_000, |n| n.parse().unwrap());
    assert!(creates >= 2 * WINDOW, "CICY_BENCH_CREATES must be at least {}", 2 * WINDOW);
    let bin = std::env::var_os("CICY_BENCH_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cicy-agent")), PathBuf::from);
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let started = Instant::now();
    let walls: Vec<Duration> = (1..=creates)
        .map(|n| {
            let (out, wall) = create(&bin, &home, &[&format!("agent {n}")]);
            assert_eq!(String::from_utf8_lossy(&out.stdout), format!("w-{n}\n"), "{}", String::from_utf8_lossy(&out.stderr));
            wall
        })
        .collect();
    let total = started.elapsed();
    let inside = home.join(format!("workers/w-{creates}/sub"));
    let (out, refused) = create(&bin, &home, &["greedy", "--workspace", inside.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("is inside the workspace of agent w-{creates}")), "{stderr}");
    println!(
        "{creates} creates through the CLI: {:.1} s in all (target < 2 min for 10,000); one create: median {:.2} ms at the first {WINDOW}, {:.2} ms at the last {WINDOW}; a refused --workspace at {creates} agents: {:.2} ms",
        total.as_secs_f64(),
        median_ms(&walls[..WINDOW]),
        median_ms(&walls[creates - WINDOW..]),
        refused.as_secs_f64() * 1000.0
    );
}
