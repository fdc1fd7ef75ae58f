//! The producer, `cicy-agent outbox-send '<json>'` (Choruz B3 with docs/design.md §11's choices):
//! validate, stage in `tmp/`, number under a `flock` on `.lock`, publish into `new/`.
//!
//! It opens nothing but the outbox's own files: no registry, no home, no async runtime, so a
//! call costs a process start and a few file operations.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rand::distr::{Alphanumeric, SampleString};

use super::{Outbox, OutboxError};
use crate::fsutil::sync_dir;

/// A `.lock` *directory* (a Choruz `mkdir` lock) older than this is a leftover of a killed
/// helper and is removed (docs/design.md §11 [chosen]); a younger one is waited for.
pub const STALE_LOCK_DIR: Duration = Duration::from_secs(10);

/// How long to wait between looks at a young `.lock` directory (Choruz B3 polls every 10 ms).
const LOCK_DIR_POLL: Duration = Duration::from_millis(10);

/// The outbox the producer writes to: `$CICY_OUTBOX_DIR` when absolute (Choruz B3 step 2);
/// else `outbox/` beside the shim, whose path the shim passes as `$CICY_SHIM` (the shim is
/// `<ws>/.cicy/send`, so this is `<ws>/.cicy/outbox` whatever the cwd); else
/// `$CICY_WORKSPACE/.cicy/outbox` when that is absolute (the binary run without the shim).
/// Arguments are the values of those three variables.
pub fn resolve_dir(outbox_dir: Option<&OsStr>, shim: Option<&OsStr>, workspace: Option<&OsStr>) -> Result<Outbox, OutboxError> {
    if let Some(dir) = outbox_dir.map(Path::new).filter(|p| p.is_absolute()) {
        return Ok(Outbox::at(dir));
    }
    if let Some(dir) = shim.map(Path::new).and_then(Path::parent) {
        // `$0` of a shim run as `send` from its own folder has an empty parent: that is `.`.
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        return Ok(Outbox::at(dir.join("outbox")));
    }
    match workspace.map(Path::new).filter(|p| p.is_absolute()) {
        Some(ws) => Ok(Outbox::of_workspace(ws)),
        None => Err(OutboxError::NoOutbox),
    }
}

/// Checks that `json` is a command: it parses, is an object, and has a non-empty string
/// `type` (docs/design.md §11 [chosen]; Choruz's helper checks nothing).
pub fn validate(json: &str) -> Result<(), OutboxError> {
    let invalid = |reason: String| OutboxError::Invalid { reason };
    let value: serde_json::Value = serde_json::from_str(json).map_err(|e| invalid(format!("the argument is not JSON ({e})")))?;
    let object = value.as_object().ok_or_else(|| invalid("the argument must be a JSON object".into()))?;
    match object.get("type") {
        Some(serde_json::Value::String(t)) if !t.trim().is_empty() => Ok(()),
        Some(other) => Err(invalid(format!("\"type\" must be a non-empty string, got {other}"))),
        None => Err(invalid("the command has no \"type\" (e.g. {\"type\":\"send\",\"content\":\"hi\"})".into())),
    }
}

impl Outbox {
    /// Queues `json` (validated by [`validate`]) as `new/cmd-<seq20>-cmd-XXXXXX.json` holding
    /// `json` and a newline, and returns that path. The seq is `.seq` + 1 (missing or empty →
    /// 0), written back as 20 digits and a newline before the rename, both under the lock, so
    /// name order is publish order (Choruz B3 steps 3–6).
    ///
    /// Errors: [`OutboxError::Invalid`] (nothing written), [`OutboxError::BadSeq`] (nothing
    /// published, the staged file removed), [`OutboxError::Io`].
    pub fn send(&self, json: &str) -> Result<PathBuf, OutboxError> {
        validate(json)?;
        let (tmp_dir, new_dir) = (self.tmp_dir(), self.new_dir());
        for dir in [&tmp_dir, &new_dir] {
            fs::create_dir_all(dir).map_err(OutboxError::io(dir))?;
        }
        let (staged, base) = stage(&tmp_dir, json)?;
        let published = self.publish(&staged, &base);
        if published.is_err() {
            // Choruz leaves the staged file behind; nothing would ever clean it.
            let _ = fs::remove_file(&staged);
        }
        published
    }

    /// Numbers and renames the staged file `staged` (basename `base`) under the lock.
    fn publish(&self, staged: &Path, base: &str) -> Result<PathBuf, OutboxError> {
        let (root, new_dir) = (self.root(), self.new_dir());
        let target = {
            let _lock = self.lock()?;
            let seq_path = self.seq_path();
            let seq = read_seq(&seq_path)?;
            let next = seq.checked_add(1).ok_or_else(|| OutboxError::BadSeq { path: seq_path.clone(), value: seq.to_string() })?;
            write_seq(root, &seq_path, next)?;
            let target = new_dir.join(format!("cmd-{next:020}-{base}.json"));
            fs::rename(staged, &target).map_err(OutboxError::io(&target))?;
            target
        };
        // Both renames are made durable after the lock is released (their order is fixed
        // already), folder by folder: the first fsync commits the journal with both renames in
        // it on ext4, so the second finds little to do (each costs milliseconds on a busy disk).
        sync_dir(&new_dir).map_err(OutboxError::io(&new_dir))?;
        sync_dir(root).map_err(OutboxError::io(root))?;
        Ok(target)
    }

    /// Takes the producers' lock, waiting as long as another holds it. The kernel releases a
    /// `flock` when its holder dies, even by `kill -9`, which Choruz's `mkdir` lock does not.
    fn lock(&self) -> Result<File, OutboxError> {
        let path = self.lock_path();
        let file = loop {
            match OpenOptions::new().create(true).truncate(false).write(true).open(&path) {
                Ok(file) => break file,
                Err(e) if e.kind() == io::ErrorKind::IsADirectory => clear_lock_dir(&path)?,
                Err(e) => return Err(OutboxError::Io { path, source: e }),
            }
        };
        loop {
            // SAFETY: flock only reads the descriptor, which `file` keeps open for the call.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(file);
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINTR) {
                return Err(OutboxError::Io { path, source: err });
            }
        }
    }
}

/// Writes `json\n` to a new `tmp/cmd-XXXXXX` (6 random ASCII letters and digits, like
/// `mktemp`), fsynced so a published file is never empty after a crash; returns its path and
/// basename.
fn stage(tmp_dir: &Path, json: &str) -> Result<(PathBuf, String), OutboxError> {
    loop {
        let base = format!("cmd-{}", Alphanumeric.sample_string(&mut rand::rng(), 6));
        let path = tmp_dir.join(&base);
        let mut file = match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(OutboxError::Io { path, source: e }),
        };
        let written = file.write_all(json.as_bytes()).and_then(|()| file.write_all(b"\n")).and_then(|()| file.sync_data());
        if let Err(e) = written {
            let _ = fs::remove_file(&path);
            return Err(OutboxError::Io { path, source: e });
        }
        return Ok((path, base));
    }
}

/// Replaces `.seq` with `n` as 20 digits and a newline (Choruz B3 step 5): a temp file in the
/// outbox, fsynced, renamed over it (docs/design.md §2; the folder is fsynced by the caller).
fn write_seq(root: &Path, seq_path: &Path, n: u64) -> Result<(), OutboxError> {
    let mut tmp = tempfile::Builder::new().prefix(".seq-").tempfile_in(root).map_err(OutboxError::io(root))?;
    let written = tmp.write_all(format!("{n:020}\n").as_bytes()).and_then(|()| tmp.as_file().sync_data());
    written.map_err(OutboxError::io(seq_path))?;
    tmp.persist(seq_path).map_err(|e| OutboxError::Io { path: seq_path.to_path_buf(), source: e.error })?;
    Ok(())
}

/// Removes a `.lock` directory once it is [`STALE_LOCK_DIR`] old; until then waits a poll
/// interval (a live Choruz helper holds it and removes it itself).
fn clear_lock_dir(path: &Path) -> Result<(), OutboxError> {
    let age = fs::metadata(path).and_then(|m| m.modified()).map(|t| SystemTime::now().duration_since(t).unwrap_or_default());
    match age {
        Ok(age) if age >= STALE_LOCK_DIR => match fs::remove_dir(path) {
            Ok(()) => Ok(()),
            // Another producer removed it first.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(OutboxError::Io { path: path.to_path_buf(), source: e }),
        },
        Ok(_) => {
            std::thread::sleep(LOCK_DIR_POLL);
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(OutboxError::Io { path: path.to_path_buf(), source: e }),
    }
}

/// The number in the first line of `.seq`; a missing or blank file is 0, and a last line
/// without its newline reads fine (Choruz's `read` fails on it and restarts at 1).
fn read_seq(path: &Path) -> Result<u64, OutboxError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            return Err(OutboxError::BadSeq { path: path.to_path_buf(), value: "(not UTF-8)".into() })
        }
        Err(e) => return Err(OutboxError::Io { path: path.to_path_buf(), source: e }),
    };
    let line = text.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        return Ok(0);
    }
    // `u64::from_str` takes a leading `+`; a seq is digits only.
    match line.bytes().all(|b| b.is_ascii_digit()).then(|| line.parse::<u64>().ok()).flatten() {
        Some(n) => Ok(n),
        None => Err(OutboxError::BadSeq { path: path.to_path_buf(), value: line.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox() -> (tempfile::TempDir, Outbox) {
        let dir = tempfile::tempdir().unwrap();
        let ob = Outbox::at(dir.path().join("outbox"));
        (dir, ob)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_send_numbers_the_file_and_keeps_its_bytes() {
        let (_d, ob) = outbox();
        let first = ob.send(r#"{"type":"send","content":"hi"}"#).unwrap();
        let second = ob.send(r#"{"type":"send","content":"again"}"#).unwrap();
        let first_name = first.file_name().unwrap().to_str().unwrap();
        assert!(first_name.starts_with("cmd-00000000000000000001-cmd-"), "{first_name}");
        assert_eq!(first_name.len(), "cmd-00000000000000000001-cmd-XXXXXX.json".len());
        assert!(second.file_name().unwrap().to_str().unwrap().starts_with("cmd-00000000000000000002-cmd-"));
        assert_eq!(fs::read_to_string(&first).unwrap(), "{\"type\":\"send\",\"content\":\"hi\"}\n");
        assert_eq!(fs::read_to_string(ob.seq_path()).unwrap(), "00000000000000000002\n");
        assert!(names(&ob.tmp_dir()).is_empty());
    }

    #[test]
    fn seq_without_newline_or_blank_continues_and_garbage_stops() {
        let (_d, ob) = outbox();
        fs::create_dir_all(ob.root()).unwrap();
        fs::write(ob.seq_path(), "41").unwrap();
        let p = ob.send(r#"{"type":"x"}"#).unwrap();
        assert!(p.file_name().unwrap().to_str().unwrap().starts_with("cmd-00000000000000000042-"));
        fs::write(ob.seq_path(), "  \n").unwrap();
        assert!(ob.send(r#"{"type":"x"}"#).unwrap().to_str().unwrap().contains("cmd-00000000000000000001-"));
        for bad in ["x", "+5", "-1", "99999999999999999999"] {
            fs::write(ob.seq_path(), bad).unwrap();
            let e = ob.send(r#"{"type":"x"}"#).unwrap_err();
            assert_eq!(e.to_string(), format!("{}: not a sequence number: {bad:?}", ob.seq_path().display()));
        }
        assert_eq!(names(&ob.new_dir()).len(), 2);
        assert!(names(&ob.tmp_dir()).is_empty());
        assert_eq!(fs::read_to_string(ob.seq_path()).unwrap(), "99999999999999999999");
    }

    #[test]
    fn a_non_command_is_refused_before_anything_is_written() {
        let (_d, ob) = outbox();
        let cases = [
            ("{", "outbox-send: the argument is not JSON (EOF while parsing an object at line 1 column 1)"),
            ("[1]", "outbox-send: the argument must be a JSON object"),
            (r#"{"content":"hi"}"#, "outbox-send: the command has no \"type\" (e.g. {\"type\":\"send\",\"content\":\"hi\"})"),
            (r#"{"type":" "}"#, "outbox-send: \"type\" must be a non-empty string, got \" \""),
            (r#"{"type":1}"#, "outbox-send: \"type\" must be a non-empty string, got 1"),
        ];
        for (json, text) in cases {
            assert_eq!(ob.send(json).unwrap_err().to_string(), text);
        }
        assert!(!ob.root().exists());
    }

    #[test]
    fn a_stale_lock_directory_is_removed_and_a_young_one_waited_for() {
        let (_d, ob) = outbox();
        fs::create_dir_all(ob.lock_path()).unwrap();
        let old = SystemTime::now() - Duration::from_secs(11);
        File::open(ob.lock_path()).unwrap().set_modified(old).unwrap();
        ob.send(r#"{"type":"x"}"#).unwrap();
        assert!(ob.lock_path().is_file());

        fs::remove_file(ob.lock_path()).unwrap();
        fs::create_dir(ob.lock_path()).unwrap();
        let lock_dir = ob.lock_path();
        // A live helper's lock: removed by its owner, after which the send goes ahead.
        let owner = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            fs::remove_dir(lock_dir).unwrap();
        });
        ob.send(r#"{"type":"x"}"#).unwrap();
        owner.join().unwrap();
        assert_eq!(fs::read_to_string(ob.seq_path()).unwrap(), "00000000000000000002\n");
    }

    #[test]
    fn the_outbox_is_chosen_from_the_environment_in_order() {
        let os = |s: &'static str| Some(OsStr::new(s));
        assert_eq!(resolve_dir(os("/o"), os("/w/.cicy/send"), os("/w")).unwrap(), Outbox::at("/o"));
        assert_eq!(resolve_dir(os("rel"), os("/w/.cicy/send"), None).unwrap(), Outbox::at("/w/.cicy/outbox"));
        assert_eq!(resolve_dir(None, os("send"), None).unwrap(), Outbox::at("./outbox"));
        assert_eq!(resolve_dir(None, None, os("/w")).unwrap(), Outbox::at("/w/.cicy/outbox"));
        assert!(matches!(resolve_dir(None, None, os("w")), Err(OutboxError::NoOutbox)));
    }
}
