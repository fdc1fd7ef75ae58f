//! The secret behind a ledger line's `checked` mark (docs/design.md §13 "Hand-written lines are
//! checked at pickup"): `$CICY_HOME/autonomy.key`, 32 random bytes, mode 0600, made on first
//! use. The mark is HMAC-SHA256 under it, so a line written past the guardrails (by hand, or
//! by an agent's own shell appending to its ledger) cannot carry a valid mark and is checked
//! when a tick picks it up.
//!
//! Owns the file and the mark's computation. Must not touch the ledger.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// The key's length in bytes.
pub const KEY_BYTES: usize = 32;

/// `$CICY_HOME/autonomy.key`.
pub fn key_path(home: &Path) -> PathBuf {
    home.join("autonomy.key")
}

/// The key could not be read or made; nothing is marked (and nothing unmarked runs).
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {len} bytes, expected {KEY_BYTES}; move it aside to make a new key (every intent is then checked again at pickup)")]
    Length { path: PathBuf, len: usize },
}

/// The loaded key.
#[derive(Clone)]
pub struct GuardKey([u8; KEY_BYTES]);

impl std::fmt::Debug for GuardKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GuardKey(…)")
    }
}

impl GuardKey {
    /// Reads the home's key, making it first when there is none (two processes at once: one
    /// makes it, both read the same).
    ///
    /// Errors: the file cannot be made or read, or does not hold exactly [`KEY_BYTES`] bytes
    /// (it is left as it is).
    pub fn load_or_create(home: &Path) -> Result<Self, KeyError> {
        let path = key_path(home);
        let io = |source| KeyError::Io { path: path.clone(), source };
        let made = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path);
        match made {
            Ok(mut file) => {
                let mut key = [0u8; KEY_BYTES];
                rand::rng().fill_bytes(&mut key);
                file.write_all(&key).and_then(|()| file.sync_all()).map_err(io)?;
                if let Some(dir) = path.parent() {
                    crate::fsutil::sync_dir(dir).map_err(io)?;
                }
                Ok(Self(key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let mut bytes = Vec::new();
                std::fs::File::open(&path).and_then(|mut f| f.read_to_end(&mut bytes)).map_err(io)?;
                let key: [u8; KEY_BYTES] =
                    bytes.as_slice().try_into().map_err(|_| KeyError::Length { path: path.clone(), len: bytes.len() })?;
                Ok(Self(key))
            }
            Err(e) => Err(io(e)),
        }
    }

    /// Hex HMAC-SHA256 of `parts` joined by NUL bytes.
    pub fn mark(&self, parts: &[&str]) -> String {
        // HMAC takes a key of any length; new_from_slice cannot fail for it.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.0) else { return String::new() };
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                mac.update(b"\0");
            }
            mac.update(part.as_bytes());
        }
        mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_made_once_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let a = GuardKey::load_or_create(dir.path()).unwrap();
        let b = GuardKey::load_or_create(dir.path()).unwrap();
        assert_eq!(a.mark(&["x", "y"]), b.mark(&["x", "y"]));
        assert_ne!(a.mark(&["x", "y"]), a.mark(&["xy"]));
        assert_eq!(a.mark(&["x"]).len(), 64);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(key_path(dir.path())).unwrap().permissions().mode() & 0o777, 0o600);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(GuardKey::load_or_create(other.path()).unwrap().mark(&["x"]), a.mark(&["x"]), "another home, another key");
    }

    #[test]
    fn a_damaged_key_is_an_error_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(key_path(dir.path()), b"short").unwrap();
        let e = GuardKey::load_or_create(dir.path()).unwrap_err().to_string();
        assert!(e.contains("5 bytes, expected 32"), "{e}");
        assert_eq!(std::fs::read(key_path(dir.path())).unwrap(), b"short");
    }
}
