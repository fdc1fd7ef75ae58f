//! The live nodes of a cluster: each node puts `node.<name>` into the KV bucket `cicy_nodes`
//! every heartbeat, the bucket forgets an entry [`Nodes::ttl`] after its last put, and the live
//! nodes are the keys left.

use std::time::Duration;

use async_nats::jetstream::kv;
use bytes::Bytes;
use futures_util::TryStreamExt;

use crate::engine::{Engine, EngineError};

/// The bucket of the nodes' heartbeats.
pub const BUCKET: &str = "cicy_nodes";

/// The nodes' heartbeats, in the engine.
#[derive(Debug, Clone)]
pub struct Nodes {
    kv: kv::Store,
    ttl: Duration,
    urls: String,
}

impl Nodes {
    /// Opens (creating it when missing) the bucket whose entries live `ttl` after their last
    /// heartbeat, kept on `replicas` servers. Every node of a cluster must give the same `ttl`
    /// and `replicas`: the engine refuses a second configuration of one bucket.
    pub async fn open(engine: &Engine, ttl: Duration, replicas: usize) -> Result<Nodes, EngineError> {
        let kv = engine.bucket(BUCKET, ttl, replicas).await?;
        Ok(Nodes { kv, ttl, urls: engine.urls().to_string() })
    }

    /// How long a node stays live after its last heartbeat.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Says `node` is alive now, with `about` (what the node says of itself, e.g. its HTTP
    /// address) as the entry's value.
    pub async fn heartbeat(&self, node: &str, about: &str) -> Result<(), EngineError> {
        self.kv
            .put(key(node), Bytes::copy_from_slice(about.as_bytes()))
            .await
            .map_err(|e| EngineError::jetstream(&self.urls, "a heartbeat", e))?;
        Ok(())
    }

    /// Says `node` has left: it is no longer live, without waiting for its entry to expire.
    pub async fn leave(&self, node: &str) -> Result<(), EngineError> {
        self.kv.delete(key(node)).await.map_err(|e| EngineError::jetstream(&self.urls, "leaving", e))
    }

    /// The live nodes, by name, sorted.
    pub async fn live(&self) -> Result<Vec<String>, EngineError> {
        let keys = self.kv.keys().await.map_err(|e| EngineError::jetstream(&self.urls, "listing the nodes", e))?;
        let mut names: Vec<String> = keys
            .try_collect::<Vec<String>>()
            .await
            .map_err(|e| EngineError::jetstream(&self.urls, "listing the nodes", e))?
            .into_iter()
            .filter_map(|k| k.strip_prefix("node.").map(str::to_string))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Every change of the bucket from now on (a node's expiry comes as a delete marker).
    pub(crate) async fn watch(&self) -> Result<kv::Watch, EngineError> {
        self.kv.watch_all().await.map_err(|e| EngineError::jetstream(&self.urls, "watching the nodes", e))
    }
}

fn key(node: &str) -> String {
    format!("node.{node}")
}
