//! cicy's cluster engine (docs/cluster.md): the connection to NATS JetStream and the checks a
//! server must pass before cluster mode runs on it, which shard an agent is in and which live
//! node owns that shard (rendezvous hashing), the nodes' heartbeats, the shard leases whose
//! revisions are the owners' epochs and the keeper that holds a node's, and todo wakes as the
//! engine's scheduled messages.
//!
//! Owns the JetStream names cicy uses here (the KV buckets `cicy_nodes` and `cicy_leases`, the
//! streams `CICY_WAKES` and `CICY_PROBE_*`) and what their entries mean. Everything distributed
//! is the engine's (expiry, compare-and-set by revision, scheduled messages); this crate adds no
//! consensus of its own. It must not know of agents' turns, files or HTTP: serve asks it who
//! owns what and holds the leases it is given.

pub mod engine;
pub mod keeper;
pub mod lease;
pub mod nodes;
pub mod placement;
pub mod wakes;

pub use engine::{redact, split_urls, Engine, EngineError, ServerReport, Version, MIN_SERVER};
pub use keeper::{Keeper, KeeperConfig, Owned};
pub use lease::{Lease, LeaseError, Leases};
pub use nodes::Nodes;
pub use wakes::{Fired, Wakes};
