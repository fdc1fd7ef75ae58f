//! cicy: a headless role-agent runtime.
//!
//! Agents are created from role templates, keep their identity in an editable AGENTS.md, and
//! hold conversations against an AI gateway through a turn loop with tools, byte-stable prompts
//! and history files that survive a crash. The design is `docs/design.md`; `docs/architecture.md`
//! lists the crates.
//!
//! This package is the facade and the command line: its library re-exports the runtime and
//! `serve` under the paths the tests and benches use (`cicy::agent`, `cicy::serve`, …), its
//! binary `cicy-agent` is the CLI (`src/cli`), the one part of cicy that prints.

pub use cicy_runtime::*;
pub use cicy_serve as serve;
