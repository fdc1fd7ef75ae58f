//! The shim `<ws>/.cicy/send` and the environment tool processes get (docs/design.md §11, Choruz
//! B2): `CICY_SEND`, `CICY_OUTBOX_DIR`, `CICY_WORKSPACE`, `CICY_AGENT_ID` and the `CHORUZ_SEND`,
//! `CHORUZ_OUTBOX_DIR`, `CHORUZ_WORKSPACE` aliases, so Choruz-taught scripts work unchanged.

use std::ffi::OsString;
use std::fs::{self, Permissions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{Outbox, OutboxError};
use crate::fsutil::sync_dir;

/// The variable the shim sets to its own `$0`, so `outbox-send` finds the outbox beside it.
pub const SHIM_ENV: &str = "CICY_SHIM";

/// `<ws>/.cicy/send`.
pub fn shim_path(workspace: &Path) -> PathBuf {
    workspace.join(".cicy").join("send")
}

/// The shim's bytes for the executable `exe`: a POSIX `sh` script that passes its own path in
/// [`SHIM_ENV`] and `exec`s `exe outbox-send "$@"`.
pub fn shim_script(exe: &Path) -> Vec<u8> {
    let mut s = b"#!/bin/sh\n# cicy outbox shim, rewritten by cicy-agent when stale: `send '<json>'` queues one command.\nCICY_SHIM=\"$0\"\nexport CICY_SHIM\nexec ".to_vec();
    s.extend_from_slice(&sh_quote(exe.as_os_str().as_bytes()));
    s.extend_from_slice(b" outbox-send \"$@\"\n");
    s
}

/// Writes the shim for `exe` into `workspace` (mode 0755, atomically) unless it is already
/// there with exactly these bytes; returns its path.
pub fn ensure_shim(workspace: &Path, exe: &Path) -> Result<PathBuf, OutboxError> {
    let path = shim_path(workspace);
    let script = shim_script(exe);
    let current = fs::metadata(&path).ok().filter(|m| m.permissions().mode() & 0o777 == 0o755);
    if current.is_some() && fs::read(&path).is_ok_and(|b| b == script) {
        return Ok(path);
    }
    let dir = workspace.join(".cicy");
    let io = OutboxError::io(&path);
    fs::create_dir_all(&dir).map_err(OutboxError::io(&dir))?;
    // The mode is set on the temp file, so the shim is never visible unexecutable.
    let mut tmp = tempfile::Builder::new()
        .prefix(".send-")
        .permissions(Permissions::from_mode(0o755))
        .tempfile_in(&dir)
        .map_err(OutboxError::io(&dir))?;
    let written = tmp.write_all(&script).and_then(|()| tmp.as_file().sync_all());
    written.map_err(OutboxError::io(&path))?;
    tmp.persist(&path).map_err(|e| io(e.error))?;
    sync_dir(&dir).map_err(OutboxError::io(&dir))?;
    Ok(path)
}

/// The outbox variables of a tool process of agent `agent_id` in `workspace` whose shim is
/// `shim`, in a fixed order.
pub fn tool_env(workspace: &Path, agent_id: &str, shim: &Path) -> Vec<(&'static str, OsString)> {
    let outbox = Outbox::of_workspace(workspace).root().as_os_str().to_os_string();
    let (ws, send) = (workspace.as_os_str().to_os_string(), shim.as_os_str().to_os_string());
    vec![
        ("CICY_SEND", send.clone()),
        ("CICY_OUTBOX_DIR", outbox.clone()),
        ("CICY_WORKSPACE", ws.clone()),
        ("CICY_AGENT_ID", agent_id.into()),
        ("CHORUZ_SEND", send),
        ("CHORUZ_OUTBOX_DIR", outbox),
        ("CHORUZ_WORKSPACE", ws),
    ]
}

/// Ensures the shim of the running executable in `workspace` and returns [`tool_env`]. A shim
/// that cannot be written is logged: the variables are still set, and a call to `$CICY_SEND`
/// then fails visibly in the tool's output.
pub fn prepare(workspace: &Path, agent_id: &str) -> Vec<(&'static str, OsString)> {
    let ensured =
        std::env::current_exe().map_err(|e| e.to_string()).and_then(|exe| ensure_shim(workspace, &exe).map_err(|e| e.to_string()));
    if let Err(e) = ensured {
        tracing::warn!(error = %e, "outbox: cannot write the shim");
    }
    tool_env(workspace, agent_id, &shim_path(workspace))
}

/// `bytes` in single quotes for `sh`, a `'` inside written `'\''`.
fn sh_quote(bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![b'\''];
    for &b in bytes {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_shim_execs_the_binary_quoted() {
        let script = String::from_utf8(shim_script(Path::new("/opt/it's/cicy-agent"))).unwrap();
        assert_eq!(
            script,
            "#!/bin/sh\n# cicy outbox shim, rewritten by cicy-agent when stale: `send '<json>'` queues one command.\nCICY_SHIM=\"$0\"\nexport CICY_SHIM\nexec '/opt/it'\\''s/cicy-agent' outbox-send \"$@\"\n"
        );
    }

    #[test]
    fn a_missing_or_stale_shim_is_rewritten_executable() {
        let ws = tempfile::tempdir().unwrap();
        let path = ensure_shim(ws.path(), Path::new("/bin/a")).unwrap();
        assert_eq!(path, ws.path().join(".cicy/send"));
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o755);
        let before = fs::metadata(&path).unwrap().ino();
        ensure_shim(ws.path(), Path::new("/bin/a")).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().ino(), before, "an up-to-date shim is left alone");
        ensure_shim(ws.path(), Path::new("/bin/b")).unwrap();
        assert_eq!(fs::read(&path).unwrap(), shim_script(Path::new("/bin/b")));
        fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        ensure_shim(ws.path(), Path::new("/bin/b")).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o755);
        assert_eq!(fs::read_dir(ws.path().join(".cicy")).unwrap().count(), 1, "no temp file left");
    }

    #[test]
    fn tool_env_names_the_shim_outbox_workspace_and_agent() {
        let env = tool_env(Path::new("/w"), "w-1", Path::new("/w/.cicy/send"));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.to_str().unwrap())).collect();
        assert_eq!(
            env,
            [
                ("CICY_SEND", "/w/.cicy/send"),
                ("CICY_OUTBOX_DIR", "/w/.cicy/outbox"),
                ("CICY_WORKSPACE", "/w"),
                ("CICY_AGENT_ID", "w-1"),
                ("CHORUZ_SEND", "/w/.cicy/send"),
                ("CHORUZ_OUTBOX_DIR", "/w/.cicy/outbox"),
                ("CHORUZ_WORKSPACE", "/w"),
            ]
        );
    }
}
