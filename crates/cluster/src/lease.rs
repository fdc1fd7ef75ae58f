//! Shard leases: `shard.<k>` in the KV bucket `cicy_leases` names the node that owns shard k.
//! A node takes a free shard by creating the key, keeps it by updating the key at the revision
//! it last wrote (every renewal, well inside the bucket's TTL), and gives it up by deleting the
//! key at that revision. The engine expires a lease that is not renewed, and refuses any write
//! at an older revision: a node that lost its lease cannot renew it by mistake, and the
//! revision it holds is its epoch as the shard's owner.

use std::time::Duration;

use async_nats::jetstream::kv;
use bytes::Bytes;

use crate::engine::Engine;

/// The bucket of the shard leases.
pub const BUCKET: &str = "cicy_leases";

/// Why a lease could not be taken, kept or given up.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("shard {shard} is leased to {holder}")]
    Held { shard: u32, holder: String },
    #[error("the lease of shard {shard} at revision {revision} is lost: it expired or another node holds it now")]
    Lost { shard: u32, revision: u64 },
    #[error("JetStream at {url}: {what} of shard {shard}: {reason}")]
    Engine { url: String, what: &'static str, shard: u32, reason: String },
}

/// A lease a node holds: its shard, and the revision of its last write (its epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub shard: u32,
    pub node: String,
    pub revision: u64,
}

/// The shard leases of a cluster.
#[derive(Debug, Clone)]
pub struct Leases {
    kv: kv::Store,
    ttl: Duration,
    urls: String,
}

impl Leases {
    /// Opens (creating it when missing) the bucket whose leases expire `ttl` after their last
    /// renewal, kept on `replicas` servers; every node must give the same `ttl` and `replicas`.
    pub async fn open(engine: &Engine, ttl: Duration, replicas: usize) -> Result<Leases, crate::EngineError> {
        let kv = engine.bucket(BUCKET, ttl, replicas).await?;
        Ok(Leases { kv, ttl, urls: engine.urls().to_string() })
    }

    /// How long a lease lives after its last renewal.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Takes `shard` for `node` when no node holds it.
    pub async fn acquire(&self, shard: u32, node: &str) -> Result<Lease, LeaseError> {
        match self.kv.create(key(shard), Bytes::copy_from_slice(node.as_bytes())).await {
            Ok(revision) => Ok(Lease { shard, node: node.to_string(), revision }),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                let holder = self.holder(shard).await?.map_or_else(|| "another node (its lease just ended)".to_string(), |(n, _)| n);
                Err(LeaseError::Held { shard, holder })
            }
            Err(e) => Err(self.error("taking the lease", shard, &e)),
        }
    }

    /// Renews `lease`: its TTL starts again and its revision moves on. [`LeaseError::Lost`]
    /// when the lease expired or another node took the shard since.
    pub async fn renew(&self, lease: &mut Lease) -> Result<(), LeaseError> {
        match self.kv.update(key(lease.shard), Bytes::copy_from_slice(lease.node.as_bytes()), lease.revision).await {
            Ok(revision) => {
                lease.revision = revision;
                Ok(())
            }
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                Err(LeaseError::Lost { shard: lease.shard, revision: lease.revision })
            }
            Err(e) => Err(self.error("renewing the lease", lease.shard, &e)),
        }
    }

    /// Gives `lease` up, so another node may take the shard at once. [`LeaseError::Lost`] when
    /// it was no longer this node's.
    pub async fn release(&self, lease: Lease) -> Result<(), LeaseError> {
        let Err(e) = self.kv.delete_expect_revision(key(lease.shard), Some(lease.revision)).await else { return Ok(()) };
        // The client does not always tell a refused revision from other publish errors: the
        // lease's state does.
        let ours = self.holder(lease.shard).await?.is_some_and(|(n, r)| n == lease.node && r == lease.revision);
        if e.kind() == kv::DeleteErrorKind::WrongLastRevision || !ours {
            return Err(LeaseError::Lost { shard: lease.shard, revision: lease.revision });
        }
        Err(self.error("giving the lease up", lease.shard, &e))
    }

    /// The node holding `shard` and the revision of its lease, if any.
    pub async fn holder(&self, shard: u32) -> Result<Option<(String, u64)>, LeaseError> {
        let entry = self.kv.entry(key(shard)).await.map_err(|e| self.error("reading the lease", shard, &e))?;
        Ok(entry.filter(|e| e.operation == kv::Operation::Put).map(|e| (String::from_utf8_lossy(&e.value).into_owned(), e.revision)))
    }

    /// Every change of the bucket from now on (an expired lease comes as a delete marker).
    pub(crate) async fn watch(&self) -> Result<kv::Watch, crate::EngineError> {
        self.kv.watch_all().await.map_err(|e| crate::EngineError::jetstream(&self.urls, "watching the leases", e))
    }

    fn error(&self, what: &'static str, shard: u32, e: &dyn std::fmt::Display) -> LeaseError {
        LeaseError::Engine { url: self.urls.clone(), what, shard, reason: e.to_string() }
    }
}

fn key(shard: u32) -> String {
    format!("shard.{shard}")
}
