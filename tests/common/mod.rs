//! Shared helpers of the integration tests (each `tests/*.rs` file says `mod common;`).
//!
//! Owns: test fixtures only; nothing here is part of the product.

// Every test file compiles this module on its own and uses only part of it.
#![allow(dead_code)]

pub mod browser;
pub mod cli;
pub mod crash;
pub mod fixture;
pub mod gateway;
pub mod history;
pub mod mcp;
pub mod proxy;
pub mod referee;
pub mod serve;
pub mod wait;
pub mod wake;
