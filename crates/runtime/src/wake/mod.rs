//! Hibernate and wake (docs/design.md §10, from cryo): todos, the inbox, reply obligations, and the
//! wake turn's message, tools and fallbacks.
//!
//! Owns the state a wake reads and writes (the `todo` and `obligation` tables of `cicy.db`, the
//! message files under `<ws>/.cicy/messages/`, `<ws>/.cicy/wake.json`). Must not touch: when a
//! wake happens (the scheduler and the inbox watch are `cicy-serve`'s), the turn loop's steps.

pub mod at;
pub mod claim;
pub mod db;
pub mod deliver;
pub mod inbox;
pub mod message;
pub mod obligation;
pub mod run;
pub mod state;
pub mod todo;
pub mod tools;

use std::path::PathBuf;

/// Errors of a wake step; each names the file, table or value at fault.
#[derive(Debug, thiserror::Error)]
pub enum WakeError {
    #[error(transparent)]
    Db(#[from] db::WakeDbError),
    #[error(transparent)]
    Inbox(#[from] inbox::InboxError),
    #[error(transparent)]
    Registry(#[from] crate::registry::RegistryError),
    #[error(transparent)]
    Route(#[from] crate::messages::route::RouteError),
    /// Boxed: the master/worker errors hold the agent layer's, which holds this one.
    #[error(transparent)]
    Coordinate(Box<crate::messages::coordinate::CoordError>),
    #[error("no agent `{to}` to send to (see `cicy-agent ls`)")]
    NoRecipient { to: String },
    #[error("`{to}` is not a recipient: give `human`, an agent id (w-<n>) or a name without control characters")]
    BadRecipient { to: String },
    #[error("{path}: {message}")]
    State { path: PathBuf, message: String },
}
