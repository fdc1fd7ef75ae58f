//! Idle autonomy (DESIGN.md §13).

pub mod guard;
