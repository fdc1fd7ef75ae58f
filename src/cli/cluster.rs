//! `cicy-agent cluster check`: whether the NATS servers named by `--cluster` (or
//! `CICY_CLUSTER_URL`) can carry cluster mode (docs/cluster.md), and what they are. Each server
//! of the list is checked on a connection of its own: the client of a list reaches only one.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use cicy_cluster::{split_urls, Engine, MIN_SERVER};

#[derive(Debug, clap::Subcommand)]
pub(super) enum Action {
    /// Connect to each server and check it: version >= 2.14, JetStream, message schedules kept.
    Check {
        /// The cluster's NATS servers: nats://HOST:PORT, several separated by commas.
        #[arg(long, env = "CICY_CLUSTER_URL")]
        cluster: String,
    },
}

pub(super) fn run(action: Action) -> Result<ExitCode> {
    let Action::Check { cluster } = action;
    let urls = split_urls(&cluster)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut out = std::io::stdout().lock();
    for url in &urls {
        let report = rt.block_on(async {
            let engine = Engine::connect(url).await?;
            engine.check().await
        })?;
        writeln!(out, "server: {} ({})", report.url, report.server_name)?;
        writeln!(out, "version: {} (cluster mode needs {MIN_SERVER} or newer)", report.version)?;
        writeln!(out, "jetstream: yes")?;
        writeln!(out, "message schedules: kept")?;
    }
    match urls.len() {
        1 => writeln!(out, "ok: cluster mode can run on this server")?,
        n => writeln!(out, "ok: cluster mode can run on these {n} servers")?,
    }
    Ok(ExitCode::SUCCESS)
}
