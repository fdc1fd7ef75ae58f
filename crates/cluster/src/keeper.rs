//! A node's shard keeper: one task that, every [`KeeperConfig::renew_every`], says the node is
//! alive, works out which shards it should own among the live nodes (rendezvous hashing), renews
//! the leases of those it holds, gives up those another node should own now, and takes those
//! that are free. What the node owns is published on a `watch` channel for serve to follow.
//!
//! Self-fencing: a lease the keeper could not renew for [`KeeperConfig::fence_after`] (less than
//! the TTL) is dropped from what the node owns, before the engine can let another node take it,
//! so the node stops working on the shard while it may still be its owner, never after. The
//! drop runs on its own timer, and a round never runs past the next fence instant, so an engine
//! that stops answering cannot delay it.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::engine::{Engine, EngineError};
use crate::lease::{Lease, LeaseError, Leases};
use crate::nodes::Nodes;
use crate::placement::{self, SHARDS};

/// How a node keeps its shards.
#[derive(Debug, Clone)]
pub struct KeeperConfig {
    /// The node's name, unique in the cluster.
    pub node: String,
    /// What the node says of itself in its heartbeat (its HTTP address).
    pub about: String,
    pub shards: u32,
    /// How long a heartbeat and a lease live after their last write.
    pub ttl: Duration,
    pub renew_every: Duration,
    /// A lease not renewed for this long is no longer worked on (less than `ttl`).
    pub fence_after: Duration,
    /// Servers keeping each bucket entry (3 in a real cluster).
    pub replicas: usize,
}

impl KeeperConfig {
    /// **[chosen]** The defaults of a real cluster: 64 shards, 10 s leases renewed every 3 s,
    /// fenced after 7 s without a renewal, R3.
    pub fn new(node: &str, about: &str) -> KeeperConfig {
        KeeperConfig {
            node: node.to_string(),
            about: about.to_string(),
            shards: SHARDS,
            ttl: Duration::from_secs(10),
            renew_every: Duration::from_secs(3),
            fence_after: Duration::from_secs(7),
            replicas: 3,
        }
    }
}

/// The shards a node owns now, each with its lease's revision (the node's epoch as its owner).
pub type Owned = BTreeMap<u32, u64>;

/// A running keeper.
#[derive(Debug)]
pub struct Keeper {
    owned: watch::Receiver<Owned>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Keeper {
    /// Opens the buckets and starts the keeper's task; the first round runs at once.
    pub async fn start(engine: &Engine, config: KeeperConfig) -> Result<Keeper, EngineError> {
        let nodes = Nodes::open(engine, config.ttl, config.replicas).await?;
        let leases = Leases::open(engine, config.ttl, config.replicas).await?;
        let (owned_tx, owned) = watch::channel(Owned::new());
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(run(State { config, nodes, leases, held: BTreeMap::new(), owned: owned_tx }, stop_rx));
        Ok(Keeper { owned, stop, task })
    }

    /// What the node owns, as it changes.
    pub fn owned(&self) -> watch::Receiver<Owned> {
        self.owned.clone()
    }

    /// Stops cleanly: every lease given up and the node's heartbeat removed, so the other nodes
    /// take its shards at their next round instead of after the TTL.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// Stops the task without giving anything up, as a killed node would: its leases and its
    /// heartbeat expire after the TTL.
    pub fn abort(self) {
        self.task.abort();
    }
}

/// A held lease and when it was last renewed.
struct Held {
    lease: Lease,
    renewed: Instant,
}

struct State {
    config: KeeperConfig,
    nodes: Nodes,
    leases: Leases,
    held: BTreeMap<u32, Held>,
    owned: watch::Sender<Owned>,
}

async fn run(mut state: State, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(state.config.renew_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A lease or a heartbeat that ends (expired, given up) starts a round at once, so a shard
    // whose owner died is taken when the engine expires its lease, not up to a round later.
    let mut endings = match (state.nodes.watch().await, state.leases.watch().await) {
        (Ok(nodes), Ok(leases)) => Some(futures_util::stream::select(nodes, leases)),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(node = %state.config.node, error = %e, "cannot watch the buckets; shards move at the rounds only");
            None
        }
    };
    loop {
        let fence_at = state.fence_at();
        tokio::select! {
            // First, so that a round never starts with a lease already overdue.
            biased;
            () = sleep_until(fence_at) => state.fence_overdue(),
            _ = tick.tick() => state.round().await,
            ended = next_ending(&mut endings) => {
                if ended {
                    state.round().await;
                    tick.reset();
                }
            }
            _ = stop.changed() => break,
        }
    }
    state.give_up().await;
}

/// Sleeps until `at`; forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The next change of the watched buckets: `true` for an ending (a delete or purge marker),
/// `false` for a write. Pending forever without a watch; a watch that fails or ends is dropped.
async fn next_ending<S>(endings: &mut Option<S>) -> bool
where
    S: futures_util::Stream<Item = Result<async_nats::jetstream::kv::Entry, async_nats::jetstream::kv::WatcherError>> + Unpin,
{
    let Some(stream) = endings else { return std::future::pending().await };
    match futures_util::StreamExt::next(stream).await {
        Some(Ok(entry)) => entry.operation != async_nats::jetstream::kv::Operation::Put,
        Some(Err(e)) => {
            tracing::warn!(error = %e, "watching the buckets failed; shards move at the rounds only");
            *endings = None;
            false
        }
        None => {
            *endings = None;
            false
        }
    }
}

impl State {
    /// When the first held lease is due to be fenced.
    fn fence_at(&self) -> Option<Instant> {
        self.held.values().map(|h| h.renewed + self.config.fence_after).min()
    }

    /// Drops the leases not renewed for `fence_after` from what the node owns.
    fn fence_overdue(&mut self) {
        let fence_after = self.config.fence_after;
        let node = &self.config.node;
        self.held.retain(|shard, h| {
            let keep = h.renewed.elapsed() < fence_after;
            if !keep {
                tracing::warn!(node = %node, shard, "fencing: no renewal in time, the shard is no longer worked on");
            }
            keep
        });
        self.publish();
    }

    /// One round, every step bounded by one deadline: a round's length or the next fence
    /// instant, whichever comes first. A lease left overdue is fenced at its end.
    async fn round(&mut self) {
        let node = self.config.node.clone();
        let round_end = Instant::now() + self.config.renew_every;
        let deadline = self.fence_at().map_or(round_end, |f| f.min(round_end));
        match tokio::time::timeout_at(deadline, self.nodes.heartbeat(&node, &self.config.about)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(node = %node, error = %e, "cannot send the heartbeat"),
            Err(_) => tracing::warn!(node = %node, "the heartbeat timed out"),
        }
        // Without the list of live nodes, keep what is held (renewals still fence) and take nothing.
        let wanted: Option<Vec<u32>> = match tokio::time::timeout_at(deadline, self.nodes.live()).await {
            Ok(Ok(mut live)) => {
                if !live.contains(&node) {
                    live.push(node.clone());
                }
                Some(placement::shards_of(&node, &live, self.config.shards))
            }
            Ok(Err(e)) => {
                tracing::warn!(node = %node, error = %e, "cannot list the live nodes");
                None
            }
            Err(_) => {
                tracing::warn!(node = %node, "listing the live nodes timed out");
                None
            }
        };
        self.renew_or_hand_off(wanted.as_deref(), deadline).await;
        if let Some(wanted) = &wanted {
            for shard in wanted.iter().copied().filter(|s| !self.held.contains_key(s)).collect::<Vec<_>>() {
                match tokio::time::timeout_at(deadline, self.leases.acquire(shard, &node)).await {
                    Ok(Ok(lease)) => {
                        tracing::info!(node = %node, shard, epoch = lease.revision, "took a shard");
                        self.held.insert(shard, Held { lease, renewed: Instant::now() });
                    }
                    // A take of ours that timed out after the engine made it (or this node's
                    // previous run): the lease is this node's, at its current revision.
                    Ok(Err(LeaseError::Held { holder, .. })) if holder == node => {
                        if let Ok(Ok(Some((_, revision)))) = tokio::time::timeout_at(deadline, self.leases.holder(shard)).await {
                            let lease = Lease { shard, node: node.clone(), revision };
                            self.held.insert(shard, Held { lease, renewed: Instant::now() });
                        }
                    }
                    // Its old owner has not given it up yet: taken at a later round.
                    Ok(Err(LeaseError::Held { .. })) => {}
                    Ok(Err(e)) => tracing::warn!(node = %node, shard, error = %e, "cannot take a shard"),
                    Err(_) => tracing::warn!(node = %node, shard, "taking a shard timed out"),
                }
            }
        }
        self.fence_overdue();
    }

    /// Renews each held lease that is still wanted (all when `wanted` is unknown) and gives up
    /// the others; drops a lease that is lost. The renewals run at once, each bounded by
    /// `deadline`; a lease whose renewal failed stays held until it is fenced.
    async fn renew_or_hand_off(&mut self, wanted: Option<&[u32]>, deadline: Instant) {
        let node = self.config.node.clone();
        let (keep, hand_off): (Vec<Held>, Vec<Held>) =
            std::mem::take(&mut self.held).into_values().partition(|h| wanted.is_none_or(|w| w.contains(&h.lease.shard)));
        let leases = &self.leases;
        let handed = futures_util::future::join_all(hand_off.into_iter().map(|h| async move {
            let shard = h.lease.shard;
            (shard, tokio::time::timeout_at(deadline, leases.release(h.lease)).await)
        }));
        let renewed = futures_util::future::join_all(keep.into_iter().map(|mut h| async move {
            let r = tokio::time::timeout_at(deadline, leases.renew(&mut h.lease)).await;
            (h, r)
        }));
        let (handed, renewed) = tokio::join!(handed, renewed);
        for (shard, r) in handed {
            match r {
                Ok(Ok(())) => tracing::info!(node = %node, shard, "handed a shard off"),
                Ok(Err(e)) => tracing::warn!(node = %node, shard, error = %e, "handing a shard off"),
                Err(_) => tracing::warn!(node = %node, shard, "handing a shard off timed out; its lease expires"),
            }
        }
        for (mut held, r) in renewed {
            let shard = held.lease.shard;
            match r {
                Ok(Ok(())) => {
                    held.renewed = Instant::now();
                    self.held.insert(shard, held);
                }
                Ok(Err(LeaseError::Lost { .. })) => tracing::warn!(node = %node, shard, "lost a shard's lease"),
                Ok(Err(e)) => {
                    tracing::warn!(node = %node, shard, error = %e, "cannot renew a lease; trying again next round");
                    self.held.insert(shard, held);
                }
                Err(_) => {
                    tracing::warn!(node = %node, shard, "renewing a lease timed out; trying again next round");
                    self.held.insert(shard, held);
                }
            }
        }
    }

    fn publish(&self) {
        let now: Owned = self.held.iter().map(|(s, h)| (*s, h.lease.revision)).collect();
        self.owned.send_if_modified(|owned| {
            if *owned == now {
                return false;
            }
            *owned = now;
            true
        });
    }

    async fn give_up(&mut self) {
        let node = self.config.node.clone();
        for (shard, held) in std::mem::take(&mut self.held) {
            if let Err(e) = self.leases.release(held.lease).await {
                tracing::warn!(node = %node, shard, error = %e, "giving a shard up at stop");
            }
        }
        self.publish();
        if let Err(e) = self.nodes.leave(&node).await {
            tracing::warn!(node = %node, error = %e, "leaving the cluster");
        }
    }
}
