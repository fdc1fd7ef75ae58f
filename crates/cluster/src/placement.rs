//! Where an agent lives: its shard (a fixed hash of its id) and the live node that owns the
//! shard (rendezvous hashing: every node scores every shard and the highest score wins, so when
//! a node joins or leaves, only the shards it wins or held move).
//!
//! The hash is SHA-256, not std's `Hash`, so every node of every build agrees on it.

use sha2::{Digest, Sha256};

/// **[chosen]** The number of shards of a cluster: fixed for its life (an agent's shard never
/// changes), many more than nodes so that shards spread evenly, few enough that each node
/// renews every lease it holds within a heartbeat.
pub const SHARDS: u32 = 64;

fn score(parts: &[&[u8]]) -> u64 {
    let mut h = Sha256::new();
    for p in parts {
        // Length-prefixed, so ("ab", "c") and ("a", "bc") differ.
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The shard of agent `agent_id` among `shards`.
pub fn shard_of(agent_id: &str, shards: u32) -> u32 {
    (score(&[b"agent", agent_id.as_bytes()]) % u64::from(shards.max(1))) as u32
}

/// The node of `nodes` that owns `shard`: the highest score, ties to the smaller name.
pub fn owner_of(shard: u32, nodes: &[String]) -> Option<&str> {
    let shard = shard.to_be_bytes();
    nodes
        .iter()
        .map(|n| (score(&[b"node", n.as_bytes(), &shard]), n))
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(a.1)))
        .map(|(_, n)| n.as_str())
}

/// The shards of `shards` that `node` owns among `nodes` (ascending).
pub fn shards_of(node: &str, nodes: &[String], shards: u32) -> Vec<u32> {
    (0..shards).filter(|s| owner_of(*s, nodes) == Some(node)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_hash_is_fixed_across_builds() {
        // Pinned: a change here would move every agent of a running cluster.
        let pinned: Vec<u32> = ["w-1", "w-2", "w-3", "w-100"].iter().map(|a| shard_of(a, SHARDS)).collect();
        assert_eq!(pinned, PINNED_SHARDS);
        assert_eq!(owner_of(0, &names(&["a", "b", "c"])), Some(PINNED_OWNER_OF_0));
        assert_eq!(owner_of(0, &[]), None);
    }

    const PINNED_SHARDS: [u32; 4] = [40, 36, 29, 62];
    const PINNED_OWNER_OF_0: &str = "b";

    #[test]
    fn every_shard_has_one_owner_and_three_nodes_share_them_evenly() {
        let nodes = names(&["n1", "n2", "n3"]);
        let counts: Vec<usize> = nodes.iter().map(|n| shards_of(n, &nodes, SHARDS).len()).collect();
        assert_eq!(counts.iter().sum::<usize>(), SHARDS as usize);
        assert!(counts.iter().all(|c| (12..=32).contains(c)), "{counts:?}");
    }

    proptest! {
        #[test]
        fn a_node_leaving_moves_only_its_own_shards(n in 2usize..8, gone in 0usize..8) {
            let nodes: Vec<String> = (0..n).map(|i| format!("node-{i}")).collect();
            let gone = &nodes[gone % n];
            let left: Vec<String> = nodes.iter().filter(|x| *x != gone).cloned().collect();
            for s in 0..SHARDS {
                let before = owner_of(s, &nodes).unwrap();
                let after = owner_of(s, &left).unwrap();
                if before != gone.as_str() {
                    prop_assert_eq!(before, after);
                }
            }
        }
    }
}
