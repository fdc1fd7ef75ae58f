//! The Maildir outbox under measurement (docs/design.md §11 Numbers), a bench binary:
//!
//! - `cicy-agent outbox-send '<json>'`: wall time of the whole process, median and p90 of 50
//!   (target < 5 ms), next to the library's `Outbox::send` alone (the process start is the rest),
//!   in the temp folder and on tmpfs (where the producer's four fsyncs cost nothing);
//! - draining 10,000 queued commands with a no-op handler: commands per second;
//! - in a real serve with the scripted gateway: a group `send` queued in an idle agent's outbox
//!   until the other member's `turn_started` (median and p90 of 20; target < 100 ms).
//!
//! Run: `cargo bench --bench outbox`. Figures go to stdout; docs/benchmarks.md quotes them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is how it fails
// A bench reports its figures on the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cicy::outbox::{Outbox, PROCESSING_STALE_AFTER};

const SENDS: usize = 50;
const QUEUED: usize = 10_000;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Median and p90 in ms.
fn median_p90(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    (ms(v[v.len() / 2]), ms(v[(v.len() * 9) / 10]))
}

/// Sends into a temporary folder under `parent` (the default temp folder when `None`), labelled
/// `label` in the output.
fn process_send(parent: Option<&Path>, label: &str) {
    let dir = match parent {
        Some(p) => tempfile::tempdir_in(p).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let ob = Outbox::at(dir.path().join("outbox"));
    let walls: Vec<Duration> = (0..SENDS)
        .map(|i| {
            let start = Instant::now();
            let status = Command::new(env!("CARGO_BIN_EXE_cicy-agent"))
                .args(["outbox-send", &format!(r#"{{"type":"send","group":"ops","content":"message {i}"}}"#)])
                .env("CICY_OUTBOX_DIR", ob.root())
                .stdout(Stdio::null())
                .status()
                .unwrap();
            let wall = start.elapsed();
            assert!(status.success());
            wall
        })
        .collect();
    let (median, p90) = median_p90(walls);
    println!("outbox-send process on {label}, {SENDS} calls: median {median:.2} ms, p90 {p90:.2} ms (target < 5 ms)");
    let lib: Vec<Duration> = (0..SENDS)
        .map(|i| {
            let start = Instant::now();
            ob.send(&format!(r#"{{"type":"send","content":"lib {i}"}}"#)).unwrap();
            start.elapsed()
        })
        .collect();
    let (median, p90) = median_p90(lib);
    println!("Outbox::send in-process on {label}, {SENDS} calls: median {median:.2} ms, p90 {p90:.2} ms");
}

fn drain_ten_thousand() {
    let dir = tempfile::tempdir().unwrap();
    let ob = Outbox::at(dir.path().join("outbox"));
    std::fs::create_dir_all(ob.new_dir()).unwrap();
    // Queued as the producer names them, without its fsyncs: only the drain is measured.
    for i in 1..=QUEUED {
        let name = format!("cmd-{i:020}-cmd-bench{}.json", i % 10);
        std::fs::write(ob.new_dir().join(name), format!("{{\"type\":\"send\",\"content\":\"message {i}\"}}\n")).unwrap();
    }
    let start = Instant::now();
    let stats = ob.drain(PROCESSING_STALE_AFTER, |_| None);
    let wall = start.elapsed();
    assert_eq!(stats.processed, QUEUED);
    println!("drain of {QUEUED} queued commands, no-op handler: {:.0} ms, {:.0} commands/s", ms(wall), QUEUED as f64 / wall.as_secs_f64());
}

const HOPS: usize = 20;

/// A group send from an idle agent's outbox to the other member's `turn_started`.
async fn send_to_turn_started() {
    use cicy_test_support::gateway::{anthropic_text, Reply, ScriptedGateway};
    let gw = ScriptedGateway::start().await;
    gw.fallback(|_| Reply::sse(anthropic_text("ok")));
    let t = cicy_test_support::fixture::TestHome::new(&gw.url(), 0);
    t.write_role("waker", "[core, wake]", 20);
    let (a, b) = (t.create("waker", None), t.create("waker", None));
    cicy::messages::groups::create(&t.home, "ada", "ops", "", &[a.clone(), b.clone()]).unwrap();
    let s = cicy_test_support::serve::Serve::start(t.root(), &gw.url(), &[]).await;
    let ob = Outbox::of_workspace(&t.workspace(&a));
    let mut events = s.events(&b, None).await;
    let mut took = Vec::with_capacity(HOPS);
    for i in 0..HOPS {
        let start = Instant::now();
        ob.send(&format!("{{\"type\":\"send\",\"group\":\"ops\",\"content\":\"ping {i}\"}}")).unwrap();
        events.until("turn_started").await;
        took.push(start.elapsed());
        events.until("done").await;
    }
    let (median, p90) = median_p90(took);
    println!("outbox file in an idle agent -> the group member's turn_started, {HOPS} sends: median {median:.1} ms, p90 {p90:.1} ms");
    s.stop().await;
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("outbox: bench");
        return;
    }
    // `cargo test --all-targets` runs bench binaries without `--bench`: only a compile check.
    if !std::env::args().any(|a| a == "--bench") {
        println!("outbox bench: skipped (run it with `cargo bench --bench outbox`)");
        return;
    }
    process_send(None, "the temp folder");
    // tmpfs makes fsync free: what is left is the process start and the file operations.
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        process_send(Some(shm), "tmpfs (/dev/shm)");
    }
    drain_ten_thousand();
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(send_to_turn_started());
}
