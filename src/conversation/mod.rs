//! Conversations: canonical messages, the history files and the invariants every request obeys.

pub mod history;
pub mod invariants;
pub mod message;
pub mod outcome;
