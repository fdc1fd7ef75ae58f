//! The watchdog: one small `/bin/sh` process per cicy process, whose only job is to SIGKILL the
//! process groups cicy started (tools, hooks, intents, MCP servers) and had not ended yet when
//! cicy dies, however it dies (`kill -9` included), so a tool dies with its runtime.
//!
//! cicy holds the only write end of a pipe (close-on-exec, so no child inherits it) whose read
//! end is the watchdog's stdin, and writes a line for each group it starts (`+ <pgid> <start>`)
//! and ends (`- <pgid> <start>`), `start` being the leader's start time (field 22 of
//! `/proc/<pid>/stat`). When cicy dies the kernel closes the write end; the watchdog reads EOF
//! and kills each group still listed, unless its id now names a leader with another start time
//! (a reused id, left alone as `super::reaper` does). A line costs one `write(2)`; the watchdog
//! is started at the first group. It runs in a process group of its own, so a Ctrl-C at the
//! terminal, meant for cicy, does not reach it.
//!
//! The reaper at the next start of the agent stays the second line, for a watchdog that died
//! with cicy (a `kill -9` of both) or could not be told. Owns the watchdog process and its pipe;
//! it must not signal anything itself (`super::process` and the watchdog do).

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};

/// Lists the groups it is told of until EOF, then kills those whose leader, if any, is the one
/// recorded. POSIX sh with builtins only (the environment is empty); `comm` in `stat` may hold
/// spaces and `)`, so fields are counted from the last `)`: field 22 is the 20th after it.
const SCRIPT: &str = r#"live=' '
while read -r op pgid start; do
  case $op in
    +) live="$live$pgid:$start " ;;
    -) case $live in *" $pgid:$start "*) live="${live%% $pgid:$start *} ${live#* $pgid:$start }" ;; esac ;;
  esac
done
for group in $live; do
  pgid=${group%%:*}
  stat=
  { read -r stat < "/proc/$pgid/stat"; } 2>/dev/null
  if [ -n "$stat" ]; then
    set -- ${stat##*)}
    [ "${20}" = "${group#*:}" ] || continue
  fi
  kill -s KILL -- "-$pgid" 2>/dev/null
done
"#;

/// A group the watchdog is told of for as long as this lives (dropping it tells it the group
/// ended). Create it right after the leader's spawn, while the leader cannot have been reaped.
#[derive(Debug)]
pub(crate) struct Watched {
    pgid: i32,
    start: u64,
}

impl Watched {
    /// Tells the watchdog of group `pgid` (> 1), whose leader (pid `pgid`) is running. `None`
    /// when the leader's start time cannot be read (it is gone) or the watchdog cannot be told;
    /// the group then has only the reaper, and a warning says so.
    pub(crate) fn new(pgid: i32) -> Option<Self> {
        let start = super::reaper::start_time(pgid)?;
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        state.live.insert(pgid, start);
        if state.tell(&entry('+', pgid, start)) {
            return Some(Self { pgid, start });
        }
        state.live.remove(&pgid);
        None
    }
}

fn entry(op: char, pgid: i32, start: u64) -> String {
    format!("{op} {pgid} {start}\n")
}

impl Drop for Watched {
    fn drop(&mut self) {
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        state.live.remove(&self.pgid);
        state.tell(&entry('-', self.pgid, self.start));
    }
}

static STATE: Mutex<State> = Mutex::new(State { watchdog: None, live: BTreeMap::new() });

/// The watchdog and the groups it must know, to tell a new one if it has to be restarted.
struct State {
    watchdog: Option<Watchdog>,
    live: BTreeMap<i32, u64>,
}

impl State {
    /// Writes `line` to the watchdog, starting it (again) when there is none or it has died; a
    /// restarted one is first told every group still live. `false` (with a warning) when it
    /// cannot be.
    fn tell(&mut self, line: &str) -> bool {
        if let Some(watchdog) = &mut self.watchdog {
            match watchdog.send(line) {
                Ok(()) => return true,
                // A full pipe: the watchdog is stopped or far behind. Waiting would block this
                // thread on it, so the line is given up and the reaper covers that group.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    tracing::warn!(
                        "the tool watchdog is not reading; a tool left running by a crash now is only killed at the agent's next start"
                    );
                    return false;
                }
                Err(_) => watchdog.end(),
            }
        }
        let started = Watchdog::spawn().and_then(|mut watchdog| {
            for (pgid, start) in &self.live {
                watchdog.send(&entry('+', *pgid, *start))?;
            }
            Ok(watchdog)
        });
        match started {
            Ok(watchdog) => {
                self.watchdog = Some(watchdog);
                // The new one was just told every live group, this line's included.
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the tool watchdog; a tool left running by a crash is only killed at the agent's next start");
                false
            }
        }
    }
}

/// A running watchdog and the write end of its stdin.
struct Watchdog {
    child: Child,
    pipe: io::PipeWriter,
}

impl Watchdog {
    fn spawn() -> io::Result<Self> {
        let (read, pipe) = io::pipe()?;
        // Non-blocking: a watchdog that stopped reading must not stall a tool call (see `tell`).
        // SAFETY: fcntl on a descriptor this function owns; no memory is passed.
        if unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let child = Command::new("/bin/sh")
            .args(["-c", SCRIPT, "cicy-watchdog"])
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        Ok(Self { child, pipe })
    }

    /// One line, in one `write(2)`: shorter than `PIPE_BUF`, so it is never split.
    fn send(&mut self, line: &str) -> io::Result<()> {
        match self.pipe.write(line.as_bytes())? {
            n if n == line.len() => Ok(()),
            _ => Err(io::Error::new(io::ErrorKind::WriteZero, "a short write to the tool watchdog")),
        }
    }

    /// Reaps a watchdog that has died (a write failed), so no zombie stays behind.
    fn end(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::super::reaper::tests::Sleeper;
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn at_eof_the_watchdog_kills_the_live_groups_it_was_told_of_and_only_those() {
        let (mut live, mut ended, mut reused) = (Sleeper::start(), Sleeper::start(), Sleeper::start());
        let started = |s: &Sleeper| super::super::reaper::start_time(s.pgid()).unwrap();
        let mut watchdog = Watchdog::spawn().unwrap();
        for (op, s, start) in [
            ('+', &live, started(&live)),
            ('+', &ended, started(&ended)),
            ('-', &ended, started(&ended)),
            // The id now names a leader with another start time.
            ('+', &reused, started(&reused) + 1),
        ] {
            watchdog.send(&entry(op, s.pgid(), start)).unwrap();
        }
        // What a dying cicy does: its end of the pipe closes.
        let Watchdog { mut child, pipe } = watchdog;
        drop(pipe);
        assert!(child.wait().unwrap().success());
        assert_eq!(live.0.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(ended.0.try_wait().unwrap().is_none(), "an ended group was signalled");
        assert!(reused.0.try_wait().unwrap().is_none(), "a reused id was signalled");
    }
}
