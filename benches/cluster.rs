//! Cluster mode's engine, a bench binary, on three `nats-server`s routed into one JetStream
//! cluster on 127.0.0.1 with R3 buckets (the servers of `scripts/nats-server.sh`):
//! - lease renewals: the wall of one renewal (an update at the held revision, replicated to
//!   three servers), median and p99 over many, one after another;
//! - failover with the real defaults (64 shards, 10 s TTL, rounds every 3 s, three keepers):
//!   from killing one keeper to the two others owning all 64 shards (target ≤ TTL + 2 s);
//! - durable events/s: event-sized messages (300 bytes) published to an R3 file stream of
//!   per-agent subjects, one and 256 unacknowledged at a time, on servers with the default fsync
//!   interval and then on servers with `sync_interval: always` (the documented setting).
//!
//! Run: `cargo bench --bench cluster` (`CICY_BENCH_FAILOVERS=N` runs, default 3). Figures go to
//! stdout; docs/benchmarks.md quotes them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is how it fails
// A bench reports its figures on the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::{Duration, Instant};

use cicy_cluster::{Engine, Keeper, KeeperConfig, Leases};
use cicy_test_support::nats::NatsCluster;

const RENEWALS: usize = 2000;

async fn engine(urls: &str) -> Engine {
    Engine::connect(urls).await.unwrap()
}

/// Starts a keeper, retrying while JetStream elects its meta leader.
async fn keeper(urls: &str, config: KeeperConfig) -> Keeper {
    let since = Instant::now();
    loop {
        match Keeper::start(&engine(urls).await, config.clone()).await {
            Ok(k) => return k,
            Err(e) => {
                assert!(since.elapsed() < Duration::from_secs(60), "JetStream never became ready: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize].as_secs_f64() * 1000.0
}

async fn renewals(urls: &str) {
    let since = Instant::now();
    let leases = loop {
        match Leases::open(&engine(urls).await, Duration::from_secs(10), 3).await {
            Ok(l) => break l,
            Err(e) => {
                assert!(since.elapsed() < Duration::from_secs(60), "JetStream never became ready: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let mut lease = leases.acquire(0, "bench").await.unwrap();
    let mut walls = Vec::with_capacity(RENEWALS);
    for _ in 0..RENEWALS {
        let start = Instant::now();
        leases.renew(&mut lease).await.unwrap();
        walls.push(start.elapsed());
    }
    leases.release(lease).await.unwrap();
    walls.sort();
    println!("lease renewal, R3: median {:.2} ms, p99 {:.2} ms over {RENEWALS}", percentile(&walls, 0.5), percentile(&walls, 0.99));
}

async fn failover(urls: &str) -> Duration {
    let nodes = ["node-a", "node-b", "node-c"];
    let mut keepers = Vec::new();
    for n in nodes {
        keepers.push(keeper(urls, KeeperConfig::new(n, "bench")).await);
    }
    let all_owned = |ks: &[Keeper]| ks.iter().map(|k| k.owned().borrow().len()).sum::<usize>() == 64;
    let since = Instant::now();
    while !all_owned(&keepers) {
        assert!(since.elapsed() < Duration::from_secs(60), "the shards never spread");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed = keepers.remove(0);
    let held = killed.owned().borrow().len();
    killed.abort();
    let killed_at = Instant::now();
    while !all_owned(&keepers) {
        assert!(killed_at.elapsed() < Duration::from_secs(60), "the killed keeper's shards were never taken over");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = killed_at.elapsed();
    println!("failover: {held} shards of a killed keeper owned again after {:.2} s (TTL 10 s, rounds 3 s)", took.as_secs_f64());
    for k in keepers {
        k.stop().await;
    }
    took
}

/// Events per second acknowledged by an R3 file stream on `urls`, with `window` publishes
/// awaiting their acknowledgement at a time (1: each waits for the one before).
async fn events_per_second(urls: &str, window: usize) -> f64 {
    let events: usize = if window == 1 { 2_000 } else { 20_000 };
    let since = Instant::now();
    let js = engine(urls).await.jetstream().clone();
    let config = async_nats::jetstream::stream::Config {
        name: "CICY_EV_BENCH".into(),
        subjects: vec!["cicy.ev.>".into()],
        num_replicas: 3,
        ..Default::default()
    };
    loop {
        match js.get_or_create_stream(config.clone()).await {
            Ok(_) => break,
            Err(e) => {
                assert!(since.elapsed() < Duration::from_secs(60), "JetStream never became ready: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    let payload = bytes::Bytes::from(vec![b'x'; 300]);
    let start = Instant::now();
    let mut acks = std::collections::VecDeque::with_capacity(window);
    for i in 0..events {
        let ack = js.publish(format!("cicy.ev.w-{}", i % 100), payload.clone()).await.unwrap();
        acks.push_back(ack);
        if acks.len() == window {
            acks.pop_front().unwrap().await.unwrap();
        }
    }
    for ack in acks {
        ack.await.unwrap();
    }
    events as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("cluster: bench");
        return;
    }
    // `cargo test --all-targets` runs bench binaries without `--bench`: only a compile check.
    if !std::env::args().any(|a| a == "--bench") {
        println!("cluster bench: skipped (run it with `cargo bench --bench cluster`)");
        return;
    }
    let runs: usize = std::env::var("CICY_BENCH_FAILOVERS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let cluster = NatsCluster::start();
        let urls = cluster.urls();
        renewals(&urls).await;
        let mut walls = Vec::new();
        for _ in 0..runs {
            walls.push(failover(&urls).await);
        }
        walls.sort();
        println!("failover over {runs} runs: {:.2}–{:.2} s (target ≤ 12 s)", walls[0].as_secs_f64(), walls[walls.len() - 1].as_secs_f64());
        for window in [1, 256] {
            println!("durable events, R3, default fsync interval, {window} in flight: {:.0}/s", events_per_second(&urls, window).await);
        }
        drop(cluster);
        let durable = NatsCluster::durable();
        for window in [1, 256] {
            println!(
                "durable events, R3, sync_interval: always, {window} in flight: {:.0}/s",
                events_per_second(&durable.urls(), window).await
            );
        }
    });
}
