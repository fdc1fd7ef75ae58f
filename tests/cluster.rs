//! Cluster mode's engine (docs/cluster.md) against real `nats-server`s on 127.0.0.1: the check
//! that refuses a server too old to fire scheduled messages, shard leases (one holder, renewal,
//! expiry, a stale owner refused) and node heartbeats.

use std::time::{Duration, Instant};

use cicy_cluster::{Engine, LeaseError, Leases, Nodes};
use cicy_test_support::cli;
use cicy_test_support::nats::{NatsServer, Server};

fn check(cluster: &str) -> std::process::Output {
    std::process::Command::new(cli::bin()).args(["cluster", "check", "--cluster", cluster]).env_remove("CICY_CLUSTER_URL").output().unwrap()
}

#[test]
fn the_check_passes_on_the_pinned_server_and_refuses_a_too_old_one_by_name() {
    let current = NatsServer::start(Server::Current);
    let out = check(current.url());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    assert!(lines[0].starts_with(&format!("server: {} (", current.url())), "{stdout}");
    assert_eq!(
        &lines[1..],
        [
            "version: 2.15.1 (cluster mode needs 2.14.0 or newer)",
            "jetstream: yes",
            "message schedules: kept",
            "ok: cluster mode can run on this server"
        ]
    );

    let old = NatsServer::start(Server::Old);
    let out = check(old.url());
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!(
            "error: the NATS server at {} is version 2.10.26; cluster mode needs 2.14.0 or newer (older servers never fire scheduled \
             messages, so todos would not wake): install one with scripts/nats-server.sh\n",
            old.url()
        )
    );

    // Nothing listens on the pinned server's port once it is stopped.
    let url = current.url().to_string();
    drop(current);
    let out = check(&url);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with(&format!("error: cannot connect to the NATS server at {url}: ")), "{stderr}");
    let out = check(" , ");
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "error: bad cluster URL \" , \": no server named (expected nats://HOST:PORT, several separated by commas)\n"
    );
}

#[tokio::test]
async fn a_shard_lease_has_one_holder_expires_unrenewed_and_refuses_its_stale_owner() {
    let server = NatsServer::start(Server::Current);
    let engine = Engine::connect(server.url()).await.unwrap();
    let ttl = Duration::from_secs(1);
    let leases = Leases::open(&engine, ttl).await.unwrap();
    assert_eq!(leases.holder(5).await.unwrap(), None);

    let mut a = leases.acquire(5, "node-a").await.unwrap();
    assert_eq!(leases.holder(5).await.unwrap(), Some(("node-a".to_string(), a.revision)));
    match leases.acquire(5, "node-b").await {
        Err(LeaseError::Held { shard: 5, holder }) => assert_eq!(holder, "node-a"),
        other => panic!("a held shard was taken: {other:?}"),
    }
    let first = a.revision;
    leases.renew(&mut a).await.unwrap();
    assert!(a.revision > first, "a renewal moves the epoch on");
    // Another shard is another lease.
    let other = leases.acquire(6, "node-b").await.unwrap();

    // node-a stops renewing: its lease ends one TTL after the last renewal, and node-b gets it.
    let renewed = Instant::now();
    let b = loop {
        match leases.acquire(5, "node-b").await {
            Ok(b) => break b,
            Err(LeaseError::Held { .. }) => {
                assert!(renewed.elapsed() < Duration::from_secs(15), "the lease never expired");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert!(renewed.elapsed() >= ttl, "the lease ended {:?} after its renewal, before its TTL", renewed.elapsed());
    assert!(b.revision > a.revision, "the new owner's epoch is above the old one's");

    // The stale owner can neither renew nor give up what is node-b's now.
    let stale = a.clone();
    assert!(matches!(leases.renew(&mut a).await, Err(LeaseError::Lost { shard: 5, revision }) if revision == stale.revision));
    assert!(matches!(leases.release(stale).await, Err(LeaseError::Lost { shard: 5, .. })));
    assert_eq!(leases.holder(5).await.unwrap(), Some(("node-b".to_string(), b.revision)));

    // A release frees the shard at once.
    leases.release(b).await.unwrap();
    assert_eq!(leases.holder(5).await.unwrap(), None);
    leases.acquire(5, "node-c").await.unwrap();
    // Shard 6's lease, taken once and never renewed, ended as well.
    assert!(matches!(leases.release(other).await, Err(LeaseError::Lost { shard: 6, .. })));
    assert_eq!(leases.holder(6).await.unwrap(), None);
}

#[tokio::test]
async fn live_nodes_are_the_ones_whose_heartbeat_is_fresh() {
    let server = NatsServer::start(Server::Current);
    let engine = Engine::connect(server.url()).await.unwrap();
    let nodes = Nodes::open(&engine, Duration::from_secs(1)).await.unwrap();
    assert!(nodes.live().await.unwrap().is_empty());
    nodes.heartbeat("node-b", "http://127.0.0.1:1").await.unwrap();
    nodes.heartbeat("node-a", "http://127.0.0.1:2").await.unwrap();
    assert_eq!(nodes.live().await.unwrap(), ["node-a", "node-b"]);
    nodes.leave("node-b").await.unwrap();
    assert_eq!(nodes.live().await.unwrap(), ["node-a"]);
    // A second engine (another node's) sees the same, and a bucket opened again keeps its entries.
    let again = Nodes::open(&Engine::connect(server.url()).await.unwrap(), Duration::from_secs(1)).await.unwrap();
    assert_eq!(again.live().await.unwrap(), ["node-a"]);
    // node-a stops its heartbeats: it is gone within a few TTLs.
    let since = Instant::now();
    while !nodes.live().await.unwrap().is_empty() {
        assert!(since.elapsed() < Duration::from_secs(15), "a node without heartbeats stayed live");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(since.elapsed() >= Duration::from_millis(500), "it was gone after {:?}", since.elapsed());
}
