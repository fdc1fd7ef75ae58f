//! `cicy-agent create` as users run it, real processes: id allocation when a default workspace
//! is already taken, and parallel creates on one fresh `$CICY_HOME`.

use cicy_test_support::cli::{cicy, command};

/// `cicy-agent ls` as (id, title, workspace) per agent.
async fn roster(home: &std::path::Path) -> Vec<(String, String, String)> {
    let o = cicy(home, "", &["ls"], None).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    o.stdout
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 6, "{l}");
            (f[0].to_string(), f[1].to_string(), f[4].to_string())
        })
        .collect()
}

#[tokio::test]
async fn a_default_create_skips_an_id_whose_workspace_another_agent_took() {
    let h = tempfile::tempdir().unwrap();
    let w2 = h.path().join("workers/w-2");
    let o = cicy(h.path(), "", &["create", "squatter", "--workspace", w2.to_str().unwrap()], None).await;
    assert_eq!((o.code, o.stdout.as_str(), o.stderr.as_str()), (0, "w-1\n", ""));
    // w-2's default workspace is w-1's: the next default create gets w-3, and every one after.
    for (title, id) in [("next", "w-3"), ("after", "w-4")] {
        let o = cicy(h.path(), "", &["create", title], None).await;
        assert_eq!((o.code, o.stdout.as_str(), o.stderr.as_str()), (0, format!("{id}\n").as_str(), ""));
    }
    let ws = |id: &str| h.path().join("workers").join(id).to_str().unwrap().to_string();
    assert_eq!(
        roster(h.path()).await,
        vec![
            ("w-1".to_string(), "squatter".to_string(), ws("w-2")),
            ("w-3".to_string(), "next".to_string(), ws("w-3")),
            ("w-4".to_string(), "after".to_string(), ws("w-4")),
        ]
    );
    // The squatter's AGENTS.md is its own, not overwritten by a later agent.
    let agents_md = std::fs::read_to_string(w2.join("AGENTS.md")).unwrap();
    assert!(agents_md.starts_with("# Role\n\nYou are squatter (agent w-1)"), "{agents_md}");
    assert!(!h.path().join("workers/w-1").exists());
}

#[tokio::test]
async fn a_workspace_that_holds_the_home_or_another_agents_workspace_is_refused() {
    let outer = tempfile::tempdir().unwrap();
    let home = outer.path().join("home");
    let o = cicy(&home, "", &["create", "first"], None).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "w-1\n"), "{}", o.stderr);
    let the_home = format!("the cicy home {} (its API token, registry, roles and every agent's files)", home.display());
    let w1 = format!("the workspace of agent w-1 ({})", home.join("workers/w-1").display());
    let only_workers = format!("; only {} is for workspaces there", home.join("workers/<name>").display());
    for (ws, why) in [
        (home.clone(), format!("holds {the_home}")),
        (outer.path().to_path_buf(), format!("holds {the_home}")),
        (home.join("roles/assistant"), format!("is inside {the_home}{only_workers}")),
        (home.join("skills"), format!("is inside {the_home}{only_workers}")),
        (home.join("workers/w-1/.cicy/memory"), format!("is inside {w1}")),
        (home.join("workers/w-1/sub"), format!("is inside {w1}")),
    ] {
        let o = cicy(&home, "", &["create", "greedy", "--workspace", ws.to_str().unwrap()], None).await;
        let expected = format!("error: {} {why}; give this agent a workspace of its own outside it\n", ws.display());
        assert_eq!((o.code, o.stdout.as_str(), o.stderr.as_str()), (2, "", expected.as_str()), "{}", ws.display());
    }
    // A workspace beside the home is fine.
    let beside = outer.path().join("project");
    let o = cicy(&home, "", &["create", "beside", "--workspace", beside.to_str().unwrap()], None).await;
    assert_eq!((o.code, o.stdout.as_str()), (0, "w-2\n"), "{}", o.stderr);
    assert_eq!(roster(&home).await.len(), 2);
}

/// The process holding a read lock on the registry's SHARED byte range (SQLite's unix VFS: a
/// POSIX read lock on 510 bytes from 2 past the PENDING byte at 1 GiB), if another than this one.
fn shared_lock_holder(db: &std::fs::File) -> Option<i32> {
    use std::os::fd::AsRawFd;
    // SAFETY: `flock` is plain data; zeroed is a valid value before the fields are set.
    let mut probe: libc::flock = unsafe { std::mem::zeroed() };
    probe.l_type = libc::F_WRLCK as libc::c_short;
    probe.l_whence = libc::SEEK_SET as libc::c_short;
    probe.l_start = 0x4000_0002;
    probe.l_len = 510;
    // SAFETY: a valid open descriptor and a valid `flock` that outlives the call.
    let rc = unsafe { libc::fcntl(db.as_raw_fd(), libc::F_GETLK, &mut probe) };
    assert_eq!(rc, 0, "F_GETLK: {}", std::io::Error::last_os_error());
    (i32::from(probe.l_type) != libc::F_UNLCK).then_some(probe.l_pid)
}

/// Another process is in a write transaction on a new registry when `create` switches it to WAL:
/// SQLite reports that switch `database is locked` at once, past the busy timeout. The writer
/// ends only once create has tried twice (its read lock seen, gone, and seen again), so before
/// the fix create has already failed by then.
#[tokio::test]
async fn a_create_waits_while_another_process_writes_a_new_registry() {
    let h = tempfile::tempdir().unwrap();
    let db = h.path().join("cicy.db");
    let writer = rusqlite::Connection::open(&db).unwrap();
    writer.execute_batch("BEGIN IMMEDIATE").unwrap();
    // Kept open to the end: closing any descriptor of the file drops this process's SQLite locks.
    let probe = std::fs::File::open(&db).unwrap();
    let mut child = command(h.path(), "", &["create", "Ada"]).spawn().unwrap();
    let pid = i32::try_from(child.id().unwrap()).unwrap();
    let (mut attempts, mut locked) = (0, false);
    while attempts < 2 && child.try_wait().unwrap().is_none() {
        let now = shared_lock_holder(&probe) == Some(pid);
        attempts += usize::from(now && !locked);
        locked = now;
        tokio::task::yield_now().await;
    }
    writer.execute_batch("COMMIT").unwrap();
    let out = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stdout).as_ref(), stderr.as_ref()), (Some(0), "w-1\n", ""));
    assert_eq!(attempts, 2);
    drop(probe);
    assert_eq!(
        roster(h.path()).await,
        vec![("w-1".to_string(), "Ada".to_string(), h.path().join("workers/w-1").to_str().unwrap().to_string())]
    );
}

/// Parallel creates per trial; 6–8 in parallel failed 2 trials in 12 before the fix (the WAL
/// switch of a new registry reports `database is locked` at once, with no busy wait).
const PARALLEL: usize = 8;
const TRIALS: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_creates_on_a_fresh_home_all_succeed_with_distinct_ids() {
    for trial in 0..TRIALS {
        let h = tempfile::tempdir().unwrap();
        let runs: Vec<_> = (0..PARALLEL)
            .map(|i| {
                let home = h.path().to_path_buf();
                tokio::spawn(async move { cicy(&home, "", &["create", &format!("a{i}")], None).await })
            })
            .collect();
        let mut ids = Vec::new();
        for r in runs {
            let o = r.await.unwrap();
            assert_eq!((o.code, o.stderr.as_str()), (0, ""), "trial {trial}");
            ids.push(o.stdout.trim_end().to_string());
        }
        ids.sort_by_key(|id| id.trim_start_matches("w-").parse::<u32>().unwrap());
        let want: Vec<String> = (1..=PARALLEL).map(|n| format!("w-{n}")).collect();
        assert_eq!(ids, want, "trial {trial}");
        let listed: Vec<String> = roster(h.path()).await.into_iter().map(|(id, _, _)| id).collect();
        assert_eq!(listed, want, "trial {trial}");
    }
}
