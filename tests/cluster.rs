//! Cluster mode's engine (docs/cluster.md) against real `nats-server`s on 127.0.0.1: the check
//! that refuses a server too old to fire scheduled messages, shard leases (one holder, renewal,
//! expiry, a stale owner refused) and node heartbeats.

use std::time::{Duration, Instant};

use cicy_cluster::placement;
use cicy_cluster::{Engine, Keeper, KeeperConfig, LeaseError, Leases, Nodes, Owned, Wakes};
use cicy_test_support::cli;
use cicy_test_support::nats::{NatsCluster, NatsServer, Server};

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

    // Each server of a list is checked on its own: one too old among good ones is always found.
    let mixed = format!("{},{}", current.url(), old.url());
    for _ in 0..3 {
        let out = check(&mixed);
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.starts_with(&format!("error: the NATS server at {} is version 2.10.26", old.url())), "{stderr}");
    }
    let two = format!("{0}, {0}", current.url());
    let out = check(&two);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 9, "{stdout}");
    assert_eq!(stdout.lines().last(), Some("ok: cluster mode can run on these 2 servers"));
    // A password in a URL never reaches a message; TLS (this server has none) is an error, not a panic.
    let port = current.url().rsplit(':').next().unwrap().to_string();
    let out = check(&format!("tls://u:secret@127.0.0.1:{port}"));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("error: cannot connect to the NATS server at tls://***@127.0.0.1:"), "{stderr}");
    assert!(!stderr.contains("secret") && !stderr.contains("panicked"), "{stderr}");

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
    let leases = Leases::open(&engine, ttl, 1).await.unwrap();
    assert_eq!(leases.holder(5).await.unwrap(), None);

    let mut a = leases.acquire(5, "node-a").await.unwrap();
    assert_eq!(leases.holder(5).await.unwrap(), Some(("node-a".to_string(), a.revision)));
    match leases.acquire(5, "node-b").await {
        Err(LeaseError::Held { shard: 5, holder }) => assert_eq!(holder, "node-a"),
        other => panic!("a held shard was taken: {other:?}"),
    }
    let first = a.revision;
    // Taken before the renewal is sent, so the engine's clock for it starts later than this.
    let renewed = Instant::now();
    leases.renew(&mut a).await.unwrap();
    assert!(a.revision > first, "a renewal moves the epoch on");
    // Another shard is another lease.
    let other = leases.acquire(6, "node-b").await.unwrap();

    // node-a stops renewing: its lease ends one TTL after the last renewal, and node-b gets it.
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
    // Shard 6's lease, taken once and never renewed, ends as well.
    while leases.holder(6).await.unwrap().is_some() {
        assert!(renewed.elapsed() < Duration::from_secs(15), "shard 6's lease never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(matches!(leases.release(other).await, Err(LeaseError::Lost { shard: 6, .. })));
}

#[tokio::test]
async fn live_nodes_are_the_ones_whose_heartbeat_is_fresh() {
    let server = NatsServer::start(Server::Current);
    let engine = Engine::connect(server.url()).await.unwrap();
    let nodes = Nodes::open(&engine, Duration::from_secs(1), 1).await.unwrap();
    assert!(nodes.live().await.unwrap().is_empty());
    nodes.heartbeat("node-b", "http://127.0.0.1:1").await.unwrap();
    nodes.heartbeat("node-a", "http://127.0.0.1:2").await.unwrap();
    assert_eq!(nodes.live().await.unwrap(), ["node-a", "node-b"]);
    nodes.leave("node-b").await.unwrap();
    assert_eq!(nodes.live().await.unwrap(), ["node-a"]);
    // A second engine (another node's) sees the same, and a bucket opened again keeps its entries.
    let again = Nodes::open(&Engine::connect(server.url()).await.unwrap(), Duration::from_secs(1), 1).await.unwrap();
    // node-a's last heartbeat, so a slow machine's steps above cannot have let it expire.
    let last_beat = Instant::now();
    nodes.heartbeat("node-a", "http://127.0.0.1:2").await.unwrap();
    assert_eq!(again.live().await.unwrap(), ["node-a"]);
    // node-a stops its heartbeats: it is gone once its TTL has passed, and not before.
    while !nodes.live().await.unwrap().is_empty() {
        assert!(last_beat.elapsed() < Duration::from_secs(15), "a node without heartbeats stayed live");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(last_beat.elapsed() >= Duration::from_secs(1), "it was gone {:?} after its last heartbeat", last_beat.elapsed());
}

/// A keeper of the test: small shards and times so a failover takes seconds.
fn keeper_config(node: &str) -> KeeperConfig {
    KeeperConfig {
        node: node.to_string(),
        about: format!("http://127.0.0.1/{node}"),
        shards: 16,
        ttl: Duration::from_secs(2),
        renew_every: Duration::from_millis(250),
        fence_after: Duration::from_millis(1500),
        replicas: 3,
    }
}

/// Connects to the cluster and starts a keeper, retrying while JetStream elects its leader.
async fn start_keeper(urls: &str, config: KeeperConfig) -> Keeper {
    let since = Instant::now();
    loop {
        let engine = Engine::connect(urls).await.unwrap();
        match Keeper::start(&engine, config.clone()).await {
            Ok(k) => return k,
            Err(e) => {
                assert!(since.elapsed() < Duration::from_secs(30), "JetStream never became ready: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Waits until `cond` holds on the keepers' published shards.
async fn until(what: &str, keepers: &[&Keeper], cond: impl Fn(&[Owned]) -> bool) -> Duration {
    let since = Instant::now();
    loop {
        let owned: Vec<Owned> = keepers.iter().map(|k| k.owned().borrow().clone()).collect();
        if cond(&owned) {
            return since.elapsed();
        }
        assert!(since.elapsed() < Duration::from_secs(20), "{what}: never happened; owned: {owned:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn names(n: &[&str]) -> Vec<String> {
    n.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_share_the_shards_a_killed_one_is_taken_over_and_a_stopped_one_hands_off() {
    let cluster = NatsCluster::start();
    let urls = cluster.urls();
    let a = start_keeper(&urls, keeper_config("node-a")).await;
    let b = start_keeper(&urls, keeper_config("node-b")).await;
    let c = start_keeper(&urls, keeper_config("node-c")).await;
    let all = names(&["node-a", "node-b", "node-c"]);
    let expected = |node: &str, live: &[String]| -> Vec<u32> { placement::shards_of(node, live, 16) };
    let shards = |o: &Owned| o.keys().copied().collect::<Vec<u32>>();

    // Every shard has exactly the owner rendezvous hashing gives it.
    until("the shards spread", &[&a, &b, &c], |o| {
        shards(&o[0]) == expected("node-a", &all) && shards(&o[1]) == expected("node-b", &all) && shards(&o[2]) == expected("node-c", &all)
    })
    .await;
    let engine = Engine::connect(&urls).await.unwrap();
    let leases = Leases::open(&engine, Duration::from_secs(2), 3).await.unwrap();
    for s in 0..16 {
        let (holder, _) = leases.holder(s).await.unwrap().unwrap();
        assert_eq!(Some(holder.as_str()), placement::owner_of(s, &all), "shard {s}");
    }
    let before: Owned = a.owned().borrow().clone();

    // node-a is killed: it gives nothing up; b and c own its shards once its lease and its
    // heartbeat expire, each at a higher epoch.
    a.abort();
    let bc = names(&["node-b", "node-c"]);
    let took = until("node-a's shards taken over", &[&b, &c], |o| {
        shards(&o[0]) == expected("node-b", &bc) && shards(&o[1]) == expected("node-c", &bc)
    })
    .await;
    eprintln!("node-a's {} shards owned again {took:?} after its kill (TTL 2 s)", before.len());
    for (shard, old_epoch) in &before {
        let now = b.owned().borrow().get(shard).copied().or_else(|| c.owned().borrow().get(shard).copied()).unwrap();
        assert!(now > *old_epoch, "shard {shard}: epoch {now} after {old_epoch}");
    }

    // node-c stops cleanly: its leases are free at once (no wait for the TTL), and b takes them.
    let c_shards = shards(&c.owned().borrow());
    c.stop().await;
    for s in &c_shards {
        assert_eq!(leases.holder(*s).await.unwrap(), None, "shard {s} was handed off");
    }
    until("node-c's shards taken over", &[&b], |o| o[0].len() == 16).await;
    b.stop().await;
    for s in 0..16 {
        assert_eq!(leases.holder(s).await.unwrap(), None);
    }
    assert!(Nodes::open(&engine, Duration::from_secs(2), 3).await.unwrap().live().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_renew_stops_working_on_its_shards_before_they_can_pass() {
    let server = NatsServer::start(Server::Current);
    let k = start_keeper(server.url(), KeeperConfig { replicas: 1, ..keeper_config("node-a") }).await;
    until("the shards taken", &[&k], |o| o[0].len() == 16).await;
    // The engine goes away: no renewal can succeed any more.
    drop(server);
    let fenced = until("the shards dropped", &[&k], |o| o[0].is_empty()).await;
    // Dropped after the fence (1.5 s since the last renewal) and before the TTL (2 s) could let
    // another node take them; the bound allows one round (250 ms) and a renewal's own timeout.
    assert!(fenced < Duration::from_secs(2), "fenced after {fenced:?}");
    k.abort();
}

/// A time `secs` from now as the engine's schedules take it (RFC 3339, UTC, whole seconds).
fn in_secs(secs: i64) -> String {
    let at = time::OffsetDateTime::now_utc() + time::Duration::seconds(secs);
    at.replace_nanosecond(0).unwrap().format(&time::format_description::well_known::Rfc3339).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_todo_wake_fires_once_at_its_time_a_cancelled_one_never_and_a_rescheduled_one_at_the_new_time() {
    let server = NatsServer::start(Server::Current);
    let engine = Engine::connect(server.url()).await.unwrap();
    let wakes = Wakes::open(&engine, 1).await.unwrap();
    let scheduled = Instant::now();
    wakes.schedule("w-1", 1, &in_secs(2)).await.unwrap();
    wakes.schedule("w-1", 2, &in_secs(2)).await.unwrap();
    wakes.cancel("w-1", 2).await.unwrap();
    // Scheduled far off, then again sooner: the second schedule replaces the first.
    wakes.schedule("w-2", 7, &in_secs(3600)).await.unwrap();
    wakes.schedule("w-2", 7, &in_secs(3)).await.unwrap();

    let mut fired = Box::pin(wakes.fired("test").await.unwrap());
    let mut got = Vec::new();
    while got.len() < 2 {
        let f = tokio::time::timeout(Duration::from_secs(15), futures_util::StreamExt::next(&mut fired))
            .await
            .expect("the wakes fired")
            .unwrap()
            .unwrap();
        got.push((f.agent.clone(), f.todo, scheduled.elapsed()));
        f.ack().await.unwrap();
    }
    assert_eq!(got.iter().map(|(a, t, _)| (a.as_str(), *t)).collect::<Vec<_>>(), [("w-1", 1), ("w-2", 7)]);
    // Not before their (whole-second) times, less one second of rounding.
    assert!(got[0].2 >= Duration::from_secs(1), "{got:?}");
    assert!(got[1].2 >= Duration::from_secs(2), "{got:?}");
    // Nothing more comes: the cancelled one never fires, the fired ones do not fire again.
    assert!(tokio::time::timeout(Duration::from_secs(3), futures_util::StreamExt::next(&mut fired)).await.is_err());
    assert_eq!(wakes.fired_count("w-1", 1).await.unwrap(), 1);
    assert_eq!(wakes.fired_count("w-1", 2).await.unwrap(), 0);
    assert_eq!(wakes.fired_count("w-2", 7).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_fires_once_when_its_stream_leader_is_killed_before_it() {
    let mut cluster = NatsCluster::start();
    let urls = cluster.urls();
    let since = Instant::now();
    let (engine, wakes) = loop {
        let engine = Engine::connect(&urls).await.unwrap();
        match Wakes::open(&engine, 3).await {
            Ok(w) => break (engine, w),
            Err(e) => {
                assert!(since.elapsed() < Duration::from_secs(30), "JetStream never became ready: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    wakes.schedule("w-1", 1, &in_secs(4)).await.unwrap();
    // The handler's consumer exists before the failure, as an owner's does.
    let mut fired = Box::pin(wakes.fired("test").await.unwrap());
    // kill -9 of the server leading the stream, before the wake is due.
    let mut stream = engine.jetstream().get_stream(cicy_cluster::wakes::STREAM).await.unwrap();
    let leader = stream.info().await.unwrap().cluster.as_ref().and_then(|c| c.leader.clone()).expect("the stream has a leader");
    let index: usize = leader.trim_start_matches('s').parse::<usize>().unwrap() - 1;
    // Dropping a fixture server kills it with SIGKILL (std's `Child::kill`).
    drop(cluster.servers.remove(index));

    // The engine fires it once a new leader leads the stream.
    loop {
        if let Ok(1) = wakes.fired_count("w-1", 1).await {
            break;
        }
        assert!(since.elapsed() < Duration::from_secs(90), "the wake never fired");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let in_stream = since.elapsed();
    // While a new leader is elected the consumer reports errors (missed heartbeats, timeouts);
    // a handler goes on reading.
    let f = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match futures_util::StreamExt::next(&mut fired).await {
                Some(Ok(f)) => return f,
                Some(Err(e)) => eprintln!("while the leader is elected: {e}"),
                None => panic!("the consumer ended"),
            }
        }
    })
    .await
    .expect("the wake fired");
    assert_eq!((f.agent.as_str(), f.todo), ("w-1", 1));
    f.ack().await.unwrap();
    eprintln!(
        "the wake fired {in_stream:?} and was delivered {:?} after scheduling (due after 4 s; leader {leader} killed)",
        since.elapsed()
    );
    let again = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            if let Some(Ok(f)) = futures_util::StreamExt::next(&mut fired).await {
                return f;
            }
        }
    });
    assert!(again.await.is_err(), "it fired twice");
    assert_eq!(wakes.fired_count("w-1", 1).await.unwrap(), 1);
}
