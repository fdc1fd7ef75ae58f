//! The types every other cicy crate speaks: canonical conversation messages and the invariants a
//! message list obeys, the outcome markers, the prompt a turn sends (before any wire style), the
//! typed events the turn loop and `serve` emit, and plan items.
//!
//! Owns: types, their serde forms (the bytes of history files, event logs and SSE frames), and
//! pure functions over them (a path inside a workspace is one). It must not touch files, the
//! network, processes or the clock, and it depends on no other cicy crate.

pub mod event;
pub mod invariants;
pub mod message;
pub mod outcome;
pub mod plan;
pub mod prompt;
