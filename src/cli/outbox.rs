//! `cicy-agent outbox-send '<json>'` (docs/design.md §11): the producer behind the shim
//! `<ws>/.cicy/send`. It runs before the home, the registry or logging are set up, so a call
//! costs little more than a process start.

use std::process::ExitCode;

use cicy::outbox::send::resolve_dir;
use cicy::outbox::shim::SHIM_ENV;
use cicy::outbox::OutboxError;

/// Queues `json`; prints nothing on success. Exit 2: not a command (bad JSON, no `type`) or
/// no outbox to write to, nothing written; exit 1: anything else (an unreadable `.seq`, a
/// failed write), the error naming the file.
pub(super) fn send(json: &str) -> ExitCode {
    let var = std::env::var_os;
    let sent = resolve_dir(var("CICY_OUTBOX_DIR").as_deref(), var(SHIM_ENV).as_deref(), var("CICY_WORKSPACE").as_deref())
        .and_then(|outbox| outbox.send(json));
    match sent {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            match e {
                OutboxError::Invalid { .. } | OutboxError::NoOutbox => ExitCode::from(2),
                OutboxError::BadSeq { .. } | OutboxError::Io { .. } => ExitCode::from(1),
            }
        }
    }
}
