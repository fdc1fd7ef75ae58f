//! Conversations: canonical messages, the history files and the invariants every request obeys.
//! The message types, invariants and outcome markers live in `cicy-protocol`.

pub use cicy_protocol::{invariants, message, outcome};

pub mod history;
