//! Tool process groups that a crash of `cicy-agent` left running, and killing them later.
//!
//! Owns `<workspace>/.cicy/running/<pgid>.json`: one record per running tool process group,
//! written (atomically) right after the group starts and removed when it ends, and [`reap`],
//! which the next start of the agent runs, holding the turn lock, to kill the groups whose
//! records a `kill -9` left behind. A group is killed only if it is provably the one recorded:
//! same boot, and its leader (if still there) has the recorded start time. Linux only (reads
//! `/proc`). It knows nothing of what the tools do, of the turn loop or of the terminal; the
//! caller shows the [`Reaped`] notes.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// `<workspace>/.cicy/running`: where running tools' process groups are recorded.
pub fn records_dir(workspace: &Path) -> PathBuf {
    workspace.join(".cicy").join("running")
}

/// Errors recording a running group.
#[derive(Debug, thiserror::Error)]
pub enum ReaperError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: {problem}")]
    Proc { path: PathBuf, problem: String },
}

/// The file `<pgid>.json`. `start_time` is the leader's field 22 of `/proc/<pid>/stat` (clock
/// ticks after boot, proc(5)); with `boot_id` (`/proc/sys/kernel/random/boot_id`) it tells the
/// recorded group from a later process that got the same id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    pgid: i32,
    start_time: u64,
    boot_id: String,
    /// What ran, for the note: `shell: <command>` on one line.
    label: String,
    /// RFC 3339 UTC.
    started_at: String,
}

/// A written record; dropping it removes the file (the group has ended or been killed).
#[derive(Debug)]
pub struct Recorded {
    path: PathBuf,
}

impl Recorded {
    /// Records group `pgid`, whose leader (pid `pgid`) has just been spawned and not yet reaped,
    /// in `dir`. `label` is cut to one line of at most [`LABEL_MAX_CHARS`] characters.
    ///
    /// Errors: the leader's `/proc` entry cannot be read or parsed; the file cannot be written.
    pub fn write(dir: &Path, pgid: i32, label: &str) -> Result<Self, ReaperError> {
        let stat_path = PathBuf::from(format!("/proc/{pgid}/stat"));
        let stat = match read_stat(pgid) {
            Ok(Some(stat)) => stat,
            Ok(None) => return Err(ReaperError::Proc { path: stat_path, problem: "no such process".into() }),
            Err(source) => return Err(ReaperError::Io { path: stat_path, source }),
        };
        let record = Record {
            pgid,
            start_time: stat.start_time,
            boot_id: boot_id(),
            label: one_line(label),
            started_at: cicy_store::fsutil::now_rfc3339(),
        };
        let path = dir.join(format!("{pgid}.json"));
        let bytes = serde_json::to_vec(&record).map_err(|e| ReaperError::Io { path: path.clone(), source: e.into() })?;
        cicy_store::fsutil::write_atomic(&path, &bytes).map_err(|source| ReaperError::Io { path: path.clone(), source })?;
        Ok(Self { path })
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        remove(&self.path);
    }
}

/// Labels longer than this many characters are cut, with `…`.
pub const LABEL_MAX_CHARS: usize = 120;

/// What [`reap`] did about one record worth telling the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reaped {
    /// The group was still alive, provably the recorded one, and got SIGKILL.
    Killed { pgid: i32, label: String },
    /// A record or the folder could not be read; `problem` says what and what was done.
    Failed { problem: String },
}

impl fmt::Display for Reaped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reaped::Killed { pgid, label } => {
                write!(f, "killed the process group {pgid} of a tool left running by an interrupted turn ({label})")
            }
            Reaped::Failed { problem } => write!(f, "checking for tools left running: {problem}"),
        }
    }
}

/// Kills (SIGKILL, no grace: nothing waits for their output any more) every recorded group in
/// `dir` that is still alive and provably the recorded one, and removes every record. A record
/// whose group is gone, or whose id now names another process (another boot, or a leader with
/// another start time), is removed without a signal. Call it only while no tool of this agent
/// runs, i.e. holding the turn lock. A missing folder is nothing to do.
pub fn reap(dir: &Path) -> Vec<Reaped> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => return vec![Reaped::Failed { problem: format!("{}: {e}", dir.display()) }],
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    let mut notes = Vec::new();
    for path in paths {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.starts_with(".tmp-") {
            // A record write that a crash interrupted: its group was never recorded.
            remove(&path);
            continue;
        }
        match read_record(&path) {
            Ok(record) => {
                if let Some(note) = reap_one(&record) {
                    notes.push(note);
                }
                remove(&path);
            }
            Err(problem) => {
                let problem = match cicy_store::fsutil::move_aside(&path) {
                    Ok(to) => format!("{problem}; moved it aside to {}", to.display()),
                    Err(e) => format!("{problem}; could not move it aside: {e}"),
                };
                notes.push(Reaped::Failed { problem });
            }
        }
    }
    notes
}

fn read_record(path: &Path) -> Result<Record, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let record: Record = serde_json::from_slice(&bytes).map_err(|e| format!("{} is not a running-tool record: {e}", path.display()))?;
    // kill(-1) would signal every process we may signal, kill(0) our own group.
    if record.pgid <= 1 {
        return Err(format!("{}: process group {} is not a tool's", path.display(), record.pgid));
    }
    Ok(record)
}

fn reap_one(record: &Record) -> Option<Reaped> {
    if record.boot_id != boot_id() {
        return None;
    }
    match read_stat(record.pgid) {
        // The id now names another process: the recorded leader has ended, and with it (the
        // id could not be reused while the group had members) the whole group.
        Ok(Some(leader)) if leader.start_time != record.start_time => return None,
        // Unreadable /proc: nothing can be proved, so nothing is signalled.
        Err(_) => return None,
        // The recorded leader, or no leader but possibly members of its group.
        Ok(_) => {}
    }
    // SAFETY: getpgrp has no preconditions.
    if record.pgid == unsafe { libc::getpgrp() } || live_members(record.pgid) == 0 {
        return None;
    }
    // SAFETY: kill(2) has no memory effects; pgid > 1 (checked on read), so -pgid names only
    // that group. ESRCH (it ended meanwhile) is fine.
    unsafe {
        libc::kill(-record.pgid, libc::SIGKILL);
    }
    Some(Reaped::Killed { pgid: record.pgid, label: record.label.clone() })
}

/// The fields of `/proc/<pid>/stat` the reaper reads (proc(5)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    /// Field 3: `R`, `S`, `Z` (zombie), …
    state: char,
    /// Field 5.
    pgrp: i32,
    /// Field 22: clock ticks after boot.
    start_time: u64,
}

/// `None` when there is no such process.
fn read_stat(pid: i32) -> io::Result<Option<Stat>> {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => parse_stat(&text)
            .map(Some)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("unexpected /proc/{pid}/stat: {text}"))),
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound) || e.raw_os_error() == Some(libc::ESRCH) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Parses `pid (comm) state ppid pgrp …`; `comm` may hold spaces and `)`, so fields are counted
/// from the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat { state: fields.first()?.chars().next()?, pgrp: fields.get(2)?.parse().ok()?, start_time: fields.get(19)?.parse().ok()? })
}

/// How many processes of group `pgid` are alive (zombies have ended and are not counted).
fn live_members(pgid: i32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter_map(|pid| read_stat(pid).ok().flatten())
        .filter(|stat| stat.pgrp == pgid && !matches!(stat.state, 'Z' | 'X' | 'x'))
        .count()
}

/// The start time (clock ticks after boot) of process `pid`, `None` when it is gone or its
/// `/proc` entry cannot be read: what tells a group's leader from a later process with its id.
pub(crate) fn start_time(pid: i32) -> Option<u64> {
    read_stat(pid).ok().flatten().map(|stat| stat.start_time)
}

/// This boot's id, or empty when the kernel does not say.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_owned()).unwrap_or_default()
}

fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(LABEL_MAX_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a running-tool record");
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::os::unix::process::{CommandExt, ExitStatusExt};

    /// `sleep 600` as the leader of its own group, killed and reaped when dropped.
    pub(crate) struct Sleeper(pub(crate) std::process::Child);

    impl Sleeper {
        pub(crate) fn start() -> Self {
            Self(std::process::Command::new("sleep").arg("600").process_group(0).spawn().unwrap())
        }

        pub(crate) fn pgid(&self) -> i32 {
            self.0.id() as i32
        }
    }

    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
        names.sort();
        names
    }

    #[test]
    fn a_record_holds_the_leader_start_time_and_goes_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let sleeper = Sleeper::start();
        let pgid = sleeper.pgid();
        let recorded = Recorded::write(dir.path(), pgid, "shell: sleep\n  600").unwrap();
        let path = dir.path().join(format!("{pgid}.json"));
        let record: Record = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let stat = read_stat(pgid).unwrap().unwrap();
        assert_eq!((record.pgid, record.start_time, record.label.as_str()), (pgid, stat.start_time, "shell: sleep 600"));
        assert_eq!((stat.pgrp, record.boot_id.len()), (pgid, 36));
        drop(recorded);
        assert_eq!(files(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn a_live_recorded_group_is_killed_and_said_so() {
        let dir = tempfile::tempdir().unwrap();
        let mut sleeper = Sleeper::start();
        let pgid = sleeper.pgid();
        std::mem::forget(Recorded::write(dir.path(), pgid, "shell: sleep 600").unwrap());
        let notes = reap(dir.path());
        assert_eq!(notes, [Reaped::Killed { pgid, label: "shell: sleep 600".into() }]);
        assert_eq!(
            notes[0].to_string(),
            format!("killed the process group {pgid} of a tool left running by an interrupted turn (shell: sleep 600)")
        );
        assert_eq!(sleeper.0.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert_eq!(files(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn a_recorded_id_whose_start_time_differs_is_not_killed() {
        let dir = tempfile::tempdir().unwrap();
        let mut sleeper = Sleeper::start();
        let pgid = sleeper.pgid();
        let start_time = read_stat(pgid).unwrap().unwrap().start_time;
        for (start_time, boot_id) in [(start_time + 1, boot_id()), (start_time, "another-boot".to_owned())] {
            let record = Record { pgid, start_time, boot_id, label: "shell: sleep 600".into(), started_at: String::new() };
            std::fs::write(dir.path().join(format!("{pgid}.json")), serde_json::to_vec(&record).unwrap()).unwrap();
            assert_eq!(reap(dir.path()), []);
            assert_eq!(files(dir.path()), Vec::<String>::new());
            assert!(sleeper.0.try_wait().unwrap().is_none(), "the sleeper was signalled");
        }
    }

    #[test]
    fn a_group_that_has_ended_is_forgotten_quietly() {
        let dir = tempfile::tempdir().unwrap();
        let mut sleeper = Sleeper::start();
        let pgid = sleeper.pgid();
        std::mem::forget(Recorded::write(dir.path(), pgid, "shell: sleep 600").unwrap());
        sleeper.0.kill().unwrap();
        // Waits for the exit but leaves the zombie (WNOWAIT): a zombie has ended and is not
        // signalled.
        // SAFETY: `info` is a valid out-parameter for the call.
        let waited = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PID, pgid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT)
        };
        assert_eq!((waited, read_stat(pgid).unwrap().map(|s| s.state)), (0, Some('Z')));
        assert_eq!(reap(dir.path()), []);
        assert_eq!(files(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn bad_records_are_moved_aside_and_reported_and_temp_files_removed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("12.json"), b"{oops").unwrap();
        std::fs::write(dir.path().join(".tmp-abc"), b"{").unwrap();
        let record = Record { pgid: 1, start_time: 0, boot_id: boot_id(), label: "x".into(), started_at: String::new() };
        std::fs::write(dir.path().join("1.json"), serde_json::to_vec(&record).unwrap()).unwrap();
        let notes: Vec<String> = reap(dir.path()).iter().map(ToString::to_string).collect();
        let names = files(dir.path());
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names[0].starts_with("1.json.corrupt-") && names[1].starts_with("12.json.corrupt-"), "{names:?}");
        let d = dir.path().display();
        assert_eq!(
            notes,
            [
                format!("checking for tools left running: {d}/1.json: process group 1 is not a tool's; moved it aside to {d}/{}", names[0]),
                format!(
                    "checking for tools left running: {d}/12.json is not a running-tool record: key must be a string at line 1 column 2; moved it aside to {d}/{}",
                    names[1]
                ),
            ]
        );
        assert_eq!(reap(&dir.path().join("missing")), []);
    }

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let text = "77 (a) b) (c) S 1 77 77 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 123456 8 9 10\n";
        assert_eq!(parse_stat(text), Some(Stat { state: 'S', pgrp: 77, start_time: 123_456 }));
        assert_eq!(parse_stat("77 (x) S 1"), None);
        assert_eq!(one_line(&"é".repeat(130)), format!("{}…", "é".repeat(120)));
    }
}
