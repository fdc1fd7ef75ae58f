//! One running MCP server: the child process and its rmcp client session.
//!
//! Owns starting a server (spawn in the workspace without the gateway's API key variables,
//! stderr appended to `<workspace>/.cicy/logs/mcp-<server>.log`, `initialize` within the
//! server's timeout) and telling whether it is still alive. The child is in its own process
//! group (a Ctrl-C at the terminal cancels the turn, not the server); the group is killed when
//! the connection is dropped or its start fails. Restarts and backoff are the pool's.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rmcp::service::{ClientInitializeError, Peer, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};

use super::config::McpServerConfig;
use super::McpError;
use crate::watchdog::Watched;

/// The log file of server `name`'s stderr: `<workspace>/.cicy/logs/mcp-<name>.log`.
pub fn log_path(workspace: &Path, name: &str) -> PathBuf {
    workspace.join(".cicy").join("logs").join(format!("mcp-{name}.log"))
}

/// A started and initialized server. Dropping it ends the session and kills the server's
/// process group.
pub(super) struct Connection {
    service: RunningService<RoleClient, ()>,
    group: Option<Group>,
}

/// The process group of a server (its leader's pid: the child is started with
/// `process_group(0)`), SIGKILLed when dropped, so a server started through a wrapper (`npx`,
/// `sh -c`) leaves no process behind. rmcp kills and reaps the leader itself; this reaches the
/// rest of the group. The group id stays taken while any member lives, so the kill cannot reach
/// another group unless all members are gone and the id was reused in between. The watchdog
/// (`crate::watchdog`) kills the group if cicy dies before dropping it.
#[derive(Debug)]
struct Group {
    pid: u32,
    _watched: Option<Watched>,
}

impl Group {
    fn of(pid: u32) -> Self {
        let watched = libc::pid_t::try_from(pid).ok().filter(|&pgid| pgid > 1).and_then(Watched::new);
        Self { pid, _watched: watched }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let Ok(pgid) = libc::pid_t::try_from(self.pid) else {
            return;
        };
        // SAFETY: kill takes a pid (negative: a process group) and a signal number. ESRCH (the
        // group is gone) is the common case after a crash and needs nothing.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("pid", &self.pid()).finish_non_exhaustive()
    }
}

impl Connection {
    /// Starts server `name` and runs `initialize`, all within its `timeout_secs`. A line
    /// `--- <time> starting <command> <args…>` goes into the log first, so each start's stderr
    /// can be told apart. A start that fails kills the child's process group.
    ///
    /// Errors: [`McpError::Log`] when the log file cannot be opened, [`McpError::Spawn`] when
    /// the program cannot be started, [`McpError::ExitedAtStart`] when the server closed its
    /// pipes (it exited) before answering, [`McpError::Initialize`] when the handshake fails
    /// otherwise and [`McpError::Timeout`] when it does not finish in time.
    pub(super) async fn start(name: &str, config: &McpServerConfig, workspace: &Path, hidden_env: &[String]) -> Result<Self, McpError> {
        let path = log_path(workspace, name);
        let header = format!("--- {} starting {} {}\n", cicy_store::fsutil::now_rfc3339(), config.command, config.args.join(" "));
        let log = cicy_store::fsutil::blocking(|| open_log(&path, &header)).map_err(|source| McpError::Log { path, source })?;
        let mut cmd = tokio::process::Command::new(&config.command);
        cmd.args(&config.args).current_dir(workspace).kill_on_drop(true).process_group(0);
        for var in hidden_env {
            cmd.env_remove(var);
        }
        cmd.envs(&config.env);
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|source| McpError::Spawn { command: config.command.clone(), source })?;
        let group = transport.id().map(Group::of);
        let secs = config.timeout_secs;
        let service = match tokio::time::timeout(Duration::from_secs(secs), ().serve(transport)).await {
            Ok(Ok(service)) => service,
            // The pipe ended (read or write side): the process is gone or about to be (rmcp
            // drops it), and why is in its stderr. rmcp's wording depends on which side it hit
            // first, so it is not repeated.
            Ok(Err(ClientInitializeError::ConnectionClosed(_) | ClientInitializeError::TransportError { .. })) => {
                return Err(McpError::ExitedAtStart { log: format!(".cicy/logs/mcp-{name}.log") });
            }
            Ok(Err(e)) => return Err(McpError::Initialize(e.to_string())),
            Err(_) => return Err(McpError::Timeout { what: "initialize".into(), secs }),
        };
        Ok(Self { service, group })
    }

    /// Whether the session still runs: the process has not closed its end and rmcp has not
    /// stopped the session.
    pub(super) fn alive(&self) -> bool {
        !self.service.is_closed() && !self.service.peer().is_transport_closed()
    }

    /// A handle to send requests on; requests need no lock on the connection.
    pub(super) fn peer(&self) -> Peer<RoleClient> {
        self.service.peer().clone()
    }

    /// The server's process id, when the OS gave one.
    pub(super) fn pid(&self) -> Option<u32> {
        self.group.as_ref().map(|g| g.pid)
    }
}

/// Opens (creating it and its folder) the log for appending and writes `header`.
fn open_log(path: &Path, header: &str) -> std::io::Result<std::fs::File> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    file.write_all(header.as_bytes())?;
    Ok(file)
}
