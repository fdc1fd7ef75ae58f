//! Fixtures shared by the integration tests (`tests/tests.rs`) and the benches: the recording
//! test gateway, test homes, a running `serve`, the CLI binary, waits on files and processes.
//!
//! Owns: test fixtures only; nothing here is part of the product, and the product never depends
//! on it. It must not reach into `tests/` or `benches/` (no `#[path]`): what both need lives here.
// Test code: a panic is how a fixture fails its test.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A fixture tells the test's output what it saw (the referee's complaint, a crash run's steps).
#![allow(clippy::print_stderr)]

pub mod browser;
pub mod cli;
pub mod crash;
pub mod fixture;
pub mod gateway;
pub mod history;
pub mod mcp;
pub mod nats;
pub mod proxy;
pub mod referee;
pub mod sample;
pub mod serve;
pub use cicy_test_wait as wait;
pub mod wake;
