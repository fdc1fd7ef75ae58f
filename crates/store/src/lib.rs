//! What cicy keeps on disk: the home's layout, atomic writes, fsyncs and locks, the agent
//! registry (`cicy.db`, its schema and migrations, the workspace index), a conversation's history
//! files, the per-agent event logs and their live bus, the outbox a tool shell sends through, and
//! the one serve of a home (its lock, `serve.json` and API token).
//!
//! Owns: file formats and the crash safety of every write here (tmp + fsync + rename, torn tails
//! cut, bad lines set aside). It must not know of agents' roles, the turn loop, the gateway or
//! HTTP: callers hand it plain values and the protocol's types.

pub mod eventlog;
pub mod fsutil;
pub mod history;
pub mod home;
pub mod instance;
pub mod lock;
pub mod outbox;
pub mod registry;
