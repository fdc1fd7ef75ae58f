//! Conversations: canonical messages, the history files and the invariants every request obeys.
//! The message types, invariants and outcome markers live in `cicy-protocol`,
//! the history files in `cicy-store`; this module gathers them under one name.

pub use cicy_protocol::{invariants, message, outcome};
pub use cicy_store::history;
