//! Hibernate and wake (DESIGN.md §10, from cryo): todos, the inbox, reply obligations, and the
//! wake turn's message, tools and fallbacks.
//!
//! Owns the state a wake reads and writes (the `todo` and `obligation` tables of `cicy.db`, the
//! message files under `<ws>/.cicy/messages/`). Must not touch: when a wake happens (the
//! scheduler and the inbox watch are `crate::serve`'s), the turn loop's steps.

pub mod at;
pub mod db;
pub mod inbox;
pub mod obligation;
pub mod todo;
