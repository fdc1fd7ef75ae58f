//! The one `serve` of a home (docs/design.md §9): `serve.lock`, `serve.json` and the API token.
//!
//! Owns `$CICY_HOME/serve.lock` (an exclusive `flock` held for the process's life, so the
//! kernel frees it even after `kill -9`), `$CICY_HOME/serve.json` (who holds it and where it
//! listens) and `$CICY_HOME/api_token`. Must not touch agents, routes or sockets.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::fsutil;
use crate::home::Home;

/// Errors starting a serve.
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    /// Another serve holds this home's `serve.lock` (docs/design.md §9: the second exits 2).
    #[error("serve already running (pid {pid}, port {port})")]
    AlreadyRunning { pid: String, port: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} is empty: put a token in it, or delete it to have serve make one")]
    EmptyToken { path: PathBuf },
    /// A token with a character outside printable ASCII could never pass the bearer check: an
    /// HTTP header carries it only as ASCII (and a browser refuses to send anything else).
    #[error("the API token from {from} has a character outside printable ASCII (no spaces): use letters, digits and punctuation only")]
    BadToken { from: String },
}

/// `serve.json` *(docs/design.md §9)*: `{pid, port, instance_id, started_at}`, 0600.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServeInfo {
    pub pid: u32,
    pub port: u16,
    /// A UUIDv4 per start: a client checks `/api/health` answers with it, so a recycled pid or
    /// port of another process is never taken for this serve.
    pub instance_id: String,
    /// RFC 3339 UTC.
    pub started_at: String,
}

/// The held `serve.lock`; dropping it (or the process dying) lets another serve start.
#[derive(Debug)]
pub struct ServeLock {
    _file: File,
    info_path: PathBuf,
}

/// `$CICY_HOME/serve.json`.
pub fn info_path(home: &Home) -> PathBuf {
    home.root().join("serve.json")
}

/// Reads `serve.json`; `None` when it is missing or unparsable (a stale or torn file must never
/// stop a CLI command).
pub fn read_info(home: &Home) -> Option<ServeInfo> {
    let bytes = std::fs::read(info_path(home)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Whether the serve that `serve.json` names is still running (a `kill -9` leaves the file).
pub fn serve_running(home: &Home) -> bool {
    read_info(home).is_some_and(|info| pid_alive(i64::from(info.pid)))
}

/// Whether a process `pid` exists. Pids ≤ 0 name process groups (or every process), never a
/// serve, so they count as dead.
pub fn pid_alive(pid: i64) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 only checks that the process exists and may be signalled;
    // pid > 0 names exactly one process.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

impl ServeLock {
    /// Takes `$CICY_HOME/serve.lock` without waiting.
    ///
    /// Errors: [`InstanceError::AlreadyRunning`] with the holder's pid and port from
    /// `serve.json` (before it is written: the pid in `serve.lock`, port `not bound yet`);
    /// [`InstanceError::Io`].
    pub fn acquire(home: &Home) -> Result<Self, InstanceError> {
        let path = home.root().join("serve.lock");
        let io = |source| InstanceError::Io { path: path.clone(), source };
        std::fs::create_dir_all(home.root()).map_err(io)?;
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io)?;
        loop {
            // SAFETY: flock only reads the descriptor, which `file` keeps open for the call.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                // The holder's pid in the lock file names it to a serve started in the same
                // instant, before serve.json exists.
                file.set_len(0)
                    .and_then(|()| std::io::Write::write_all(&mut &file, std::process::id().to_string().as_bytes()))
                    .map_err(io)?;
                return Ok(Self { _file: file, info_path: info_path(home) });
            }
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EWOULDBLOCK) => {
                    let info = read_info(home);
                    let locker = || std::fs::read_to_string(&path).ok().map(|p| p.trim().to_string()).filter(|p| !p.is_empty());
                    return Err(InstanceError::AlreadyRunning {
                        pid: info.as_ref().map(|i| i.pid.to_string()).or_else(locker).unwrap_or_else(|| "?".to_string()),
                        port: info.as_ref().map_or("not bound yet".to_string(), |i| i.port.to_string()),
                    });
                }
                _ => return Err(io(err)),
            }
        }
    }

    /// Writes `serve.json` (atomically, 0600) once the socket is bound.
    pub fn publish(&self, info: &ServeInfo) -> Result<(), InstanceError> {
        let bytes = serde_json::to_vec_pretty(info).map_err(|e| self.io(e.into()))?;
        fsutil::write_atomic(&self.info_path, &bytes).map_err(|e| self.io(e))?;
        set_private(&self.info_path).map_err(|e| self.io(e))
    }

    /// Removes `serve.json` at a clean exit (a stale one is harmless: its pid is dead or its
    /// instance id does not answer).
    pub fn withdraw(&self) {
        let _ = std::fs::remove_file(&self.info_path);
    }

    fn io(&self, source: std::io::Error) -> InstanceError {
        InstanceError::Io { path: self.info_path.clone(), source }
    }
}

/// The API token: `CICY_API_TOKEN` *(cicy)* when set and not empty, else
/// `$CICY_HOME/api_token`, made once as 32 random bytes in hex, 0600 **[chosen]**.
///
/// Errors: [`InstanceError::EmptyToken`] for an empty file (never replaced: a user put it
/// there); [`InstanceError::BadToken`] for a token with a character outside printable ASCII
/// (0x21–0x7e); [`InstanceError::Io`].
pub fn api_token(home: &Home, from_env: Option<String>) -> Result<String, InstanceError> {
    if let Some(t) = from_env.filter(|t| !t.trim().is_empty()) {
        return printable(t.trim(), || "CICY_API_TOKEN".to_string());
    }
    let path = home.root().join("api_token");
    let io = |source| InstanceError::Io { path: path.clone(), source };
    match std::fs::read_to_string(&path) {
        Ok(t) if t.trim().is_empty() => Err(InstanceError::EmptyToken { path }),
        Ok(t) => printable(t.trim(), || path.display().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut bytes = [0u8; 32];
            rand::rng().fill_bytes(&mut bytes);
            let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            fsutil::write_atomic(&path, format!("{token}\n").as_bytes()).map_err(io)?;
            set_private(&path).map_err(io)?;
            Ok(token)
        }
        Err(e) => Err(io(e)),
    }
}

/// `token` as it is when every byte is printable ASCII (0x21–0x7e), else
/// [`InstanceError::BadToken`] naming where it came from.
fn printable(token: &str, from: impl FnOnce() -> String) -> Result<String, InstanceError> {
    if token.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(token.to_string())
    } else {
        Err(InstanceError::BadToken { from: from() })
    }
}

fn set_private(path: &Path) -> std::io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_first_holder() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        let first = ServeLock::acquire(&home).unwrap();
        let err = ServeLock::acquire(&home).unwrap_err();
        assert_eq!(err.to_string(), format!("serve already running (pid {}, port not bound yet)", std::process::id()));
        let info = ServeInfo { pid: 42, port: 8008, instance_id: "i".into(), started_at: "t".into() };
        first.publish(&info).unwrap();
        assert_eq!(ServeLock::acquire(&home).unwrap_err().to_string(), "serve already running (pid 42, port 8008)");
        let mode = std::fs::metadata(info_path(&home)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(read_info(&home), Some(info));
        drop(first);
        assert!(ServeLock::acquire(&home).is_ok());
    }

    #[test]
    fn the_token_file_is_made_once_private_and_the_env_wins() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        let made = api_token(&home, None).unwrap();
        assert_eq!(made.len(), 64);
        assert!(made.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(api_token(&home, None).unwrap(), made);
        let mode = std::fs::metadata(dir.path().join("api_token")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(api_token(&home, Some("from-env".into())).unwrap(), "from-env");
        std::fs::write(dir.path().join("api_token"), " \n").unwrap();
        assert!(matches!(api_token(&home, None), Err(InstanceError::EmptyToken { .. })));
        let err = api_token(&home, Some("café token€".into())).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the API token from CICY_API_TOKEN has a character outside printable ASCII (no spaces): use letters, digits and punctuation only"
        );
        std::fs::write(dir.path().join("api_token"), "ab\u{200b}cd\n").unwrap();
        assert!(matches!(api_token(&home, None), Err(InstanceError::BadToken { from }) if from.ends_with("api_token")));
    }
}
