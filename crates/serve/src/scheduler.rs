//! The todo scheduler of `serve` (docs/design.md §10 "Scheduler"): one task for every agent, never a
//! timer per agent.
//!
//! Owns an ordered set of `(at_unix, agent)`, the earliest pending todo of each agent, loaded
//! from `cicy.db` in one query at start. It sleeps until the first entry, in slices of at most
//! 60 s *(cryo)*, and asks that agent's actor for a wake; the actor claims what is due. A todo
//! change (a tool, a route, a wake's end) re-reads that agent's earliest todo; each 60 s slice
//! re-reads them all, so a change made by another process (`todo --local`) is seen within a
//! minute. Must not touch todos (the actor's wake claims them) or the inbox.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use cicy_runtime::wake::db::{WakeDb, WakeDbError};
use cicy_runtime::wake::message::Reason;
use cicy_store::fsutil;

/// cryo: the scheduler never sleeps longer than this before looking at the clock again.
pub(super) const SLICE: Duration = Duration::from_secs(60);

/// The address of the scheduler task.
#[derive(Clone)]
pub(super) struct Scheduler {
    tx: mpsc::UnboundedSender<String>,
}

impl Scheduler {
    /// `agent`'s todos changed: its earliest pending todo is read again.
    pub(super) fn changed(&self, agent: &str) {
        let _ = self.tx.send(agent.to_string());
    }
}

/// What the scheduler asks of an agent's actor.
pub(super) type WakeFn = Arc<dyn Fn(&str, Reason) + Send + Sync>;

/// The scheduler's queue before its task starts: changes sent meanwhile wait in it.
pub(super) struct Unstarted {
    rx: mpsc::UnboundedReceiver<String>,
}

/// The scheduler's address and its queue, so that actors can hold the address before the
/// task starts (it must start after them: its first act may be to wake one).
pub(super) fn channel() -> (Scheduler, Unstarted) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Scheduler { tx }, Unstarted { rx })
}

/// Loads every agent's earliest pending todo and starts the task. Todos already due at start
/// wake with reason `recovery` *(cryo: on restart an overdue todo runs now)*.
///
/// Errors: `cicy.db` cannot be read (serve must not start without its schedule).
pub(super) fn start(queue: Unstarted, db: WakeDb, wake: WakeFn, stop: CancellationToken) -> Result<(), WakeDbError> {
    let initial = db.todo_next_due_all()?;
    let rx = queue.rx;
    let boot = unix_now();
    let mut plan = Plan::default();
    let mut overdue = HashSet::new();
    for (at, agent) in initial {
        if at <= boot {
            overdue.insert(agent.clone());
        }
        plan.set(&agent, Some(at));
    }
    tokio::spawn(run(Arc::new(Mutex::new(db)), plan, overdue, wake, rx, stop));
    Ok(())
}

/// The earliest pending todo of each agent, ordered by time.
#[derive(Default)]
struct Plan {
    order: BTreeSet<(i64, String)>,
    at: HashMap<String, i64>,
}

impl Plan {
    fn set(&mut self, agent: &str, at: Option<i64>) {
        if let Some(old) = self.at.remove(agent) {
            self.order.remove(&(old, agent.to_string()));
        }
        if let Some(at) = at {
            self.order.insert((at, agent.to_string()));
            self.at.insert(agent.to_string(), at);
        }
    }

    /// Removes and returns the entries due at `now`.
    fn take_due(&mut self, now: i64) -> Vec<(i64, String)> {
        let mut due = Vec::new();
        while let Some(first) = self.order.first().cloned() {
            if first.0 > now {
                break;
            }
            self.order.remove(&first);
            self.at.remove(&first.1);
            due.push(first);
        }
        due
    }

    fn first_at(&self) -> Option<i64> {
        self.order.first().map(|(at, _)| *at)
    }
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// How long until unix second `at` (zero when past), at most [`SLICE`].
fn until(at: Option<i64>) -> Duration {
    let Some(at) = at else { return SLICE };
    let target = UNIX_EPOCH + Duration::from_secs(at.max(0) as u64);
    target.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO).min(SLICE)
}

/// `overdue`: the agents whose earliest todo was already due when serve started; their first
/// wake is a `recovery`, any later one (a past `--at` given while serve runs included) `todo`.
async fn run(
    db: Arc<Mutex<WakeDb>>,
    mut plan: Plan,
    mut overdue: HashSet<String>,
    wake: WakeFn,
    mut rx: mpsc::UnboundedReceiver<String>,
    stop: CancellationToken,
) {
    loop {
        for (_, agent) in plan.take_due(unix_now()) {
            wake(&agent, if overdue.remove(&agent) { Reason::Recovery } else { Reason::Todo });
        }
        let first = plan.first_at();
        let slice_ends = first.is_none_or(|at| at - unix_now() >= SLICE.as_secs() as i64);
        tokio::select! {
            () = tokio::time::sleep(until(first)) => {
                if slice_ends {
                    reload_all(&db, &mut plan);
                }
            }
            Some(agent) = rx.recv() => {
                let mut agents = vec![agent];
                while let Ok(more) = rx.try_recv() {
                    agents.push(more);
                }
                agents.sort();
                agents.dedup();
                reload(&db, &mut plan, &agents);
            }
            () = stop.cancelled() => return,
        }
    }
}

fn reload(db: &Mutex<WakeDb>, plan: &mut Plan, agents: &[String]) {
    let found: Vec<(String, Option<i64>)> = fsutil::blocking(|| {
        let db = db.lock().unwrap_or_else(|p| p.into_inner());
        agents
            .iter()
            .map(|a| match db.todo_next_due(a) {
                Ok(t) => (a.clone(), t.map(|t| t.at_unix)),
                Err(e) => {
                    tracing::error!(agent = %a, error = %e, "cannot read the next todo; trying again in a minute");
                    (a.clone(), None)
                }
            })
            .collect()
    });
    for (agent, at) in found {
        plan.set(&agent, at);
    }
}

fn reload_all(db: &Mutex<WakeDb>, plan: &mut Plan) {
    let all = fsutil::blocking(|| db.lock().unwrap_or_else(|p| p.into_inner()).todo_next_due_all());
    match all {
        Ok(all) => {
            let mut fresh = Plan::default();
            for (at, agent) in all {
                fresh.set(&agent, Some(at));
            }
            *plan = fresh;
        }
        Err(e) => tracing::error!(error = %e, "cannot read the todo schedule; keeping the one loaded"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_keeps_one_entry_per_agent_in_time_order_and_gives_what_is_due() {
        let mut p = Plan::default();
        p.set("w-2", Some(200));
        p.set("w-1", Some(100));
        p.set("w-3", Some(300));
        p.set("w-2", Some(50));
        assert_eq!(p.first_at(), Some(50));
        assert_eq!(p.take_due(100), vec![(50, "w-2".to_string()), (100, "w-1".to_string())]);
        p.set("w-3", None);
        assert_eq!(p.first_at(), None);
        assert!(p.at.is_empty());
    }

    #[test]
    fn a_slice_is_at_most_a_minute_and_a_past_time_is_now() {
        assert_eq!(until(None), SLICE);
        assert_eq!(until(Some(unix_now() + 3600)), SLICE);
        assert_eq!(until(Some(0)), Duration::ZERO);
    }
}
