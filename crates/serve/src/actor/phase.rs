//! What an actor is doing: idle, running a job, or waiting for a turn lock another process
//! holds. One value, so that what belongs to a state (the running job's task, an autonomy
//! job's preemption and what waits for it to give way, the work waiting for the lock) exists
//! only in that state.

use std::time::Instant;

use tokio::task::JoinHandle;

use super::super::intent_job::Preemption;
use super::super::job::{JobOut, Work};
use cicy_runtime::autonomy::tick::AutoJob;

pub(super) enum Phase {
    Idle,
    /// A job runs in its own task, holding the session.
    Running(Running),
    /// The work found the turn lock held by another process; it is tried again at `at`.
    WaitingLock {
        work: Work,
        at: Instant,
    },
}

pub(super) struct Running {
    pub work: Work,
    pub handle: JoinHandle<JobOut>,
    /// Set when the work is an autonomy job.
    pub auto: Option<AutoRun>,
}

/// A running autonomy job: what it is, who preempts it, and what waits for it.
pub(super) struct AutoRun {
    pub job: Box<AutoJob>,
    pub preemption: Preemption,
    /// `/compact` or `/clear` asked while it ran: it runs when the job has given way.
    pub after: Option<Work>,
    /// The next 0.5 s look for what must stop it; kept across the actor's loop turns, so a
    /// client asking often (status polls) does not keep pushing it back.
    pub poll_at: Option<Instant>,
}

/// A job that ended, taken out of [`Phase::Running`].
pub(super) struct Ended {
    pub work: Work,
    pub auto: Option<AutoRun>,
    pub out: Result<JobOut, tokio::task::JoinError>,
}

impl Phase {
    /// Running `work` in `handle`.
    pub(super) fn running(work: Work, handle: JoinHandle<JobOut>) -> Phase {
        let auto = match &work {
            Work::Auto(job, preemption) => Some(AutoRun { job: job.clone(), preemption: preemption.clone(), after: None, poll_at: None }),
            _ => None,
        };
        Phase::Running(Running { work, handle, auto })
    }

    /// The running autonomy job, if that is what runs.
    pub(super) fn auto(&self) -> Option<&AutoRun> {
        match self {
            Phase::Running(Running { auto, .. }) => auto.as_ref(),
            Phase::Idle | Phase::WaitingLock { .. } => None,
        }
    }

    pub(super) fn auto_mut(&mut self) -> Option<&mut AutoRun> {
        match self {
            Phase::Running(Running { auto, .. }) => auto.as_mut(),
            Phase::Idle | Phase::WaitingLock { .. } => None,
        }
    }

    /// An autonomy job runs and no `/compact` or `/clear` waits for it yet.
    pub(super) fn auto_free(&self) -> bool {
        self.auto().is_some_and(|a| a.after.is_none())
    }

    /// When the work waiting for the lock is tried again.
    pub(super) fn retry_at(&self) -> Option<Instant> {
        match self {
            Phase::WaitingLock { at, .. } => Some(*at),
            Phase::Idle | Phase::Running(_) => None,
        }
    }

    /// The work waiting for the lock, leaving the phase idle; `None` (and the phase as it was)
    /// in any other phase.
    pub(super) fn take_waiting(&mut self) -> Option<Work> {
        match std::mem::replace(self, Phase::Idle) {
            Phase::WaitingLock { work, .. } => Some(work),
            other => {
                *self = other;
                None
            }
        }
    }
}

/// Waits for the running job and leaves the phase idle; never resolves in another phase.
/// Cancel-safe: dropped before the job ends, it leaves the phase as it was.
pub(super) async fn join(phase: &mut Phase) -> Option<Ended> {
    let out = match phase {
        Phase::Running(running) => (&mut running.handle).await,
        Phase::Idle | Phase::WaitingLock { .. } => return std::future::pending().await,
    };
    match std::mem::replace(phase, Phase::Idle) {
        Phase::Running(Running { work, auto, .. }) => Some(Ended { work, auto, out }),
        // Nothing else touches the phase while this borrows it.
        other @ (Phase::Idle | Phase::WaitingLock { .. }) => {
            *phase = other;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobEnd;

    #[tokio::test]
    async fn a_job_ends_into_idle_and_waiting_work_is_taken_only_from_its_phase() {
        let handle = tokio::spawn(async { JobOut { session: None, end: JobEnd::LockBusy } });
        let mut phase = Phase::running(Work::Clear, handle);
        assert!(phase.auto().is_none() && !phase.auto_free() && phase.retry_at().is_none());
        assert!(phase.take_waiting().is_none());
        assert!(matches!(phase, Phase::Running(_)), "a running job is left running");
        let ended = join(&mut phase).await.unwrap();
        assert!(matches!(ended.work, Work::Clear) && ended.auto.is_none());
        assert!(matches!(ended.out, Ok(JobOut { session: None, end: JobEnd::LockBusy })));
        assert!(matches!(phase, Phase::Idle));
        let idle_join = tokio::time::timeout(std::time::Duration::from_millis(20), join(&mut phase)).await;
        assert!(idle_join.is_err(), "nothing ends while idle");
        let at = Instant::now();
        phase = Phase::WaitingLock { work: Work::Retry, at };
        assert_eq!(phase.retry_at(), Some(at));
        assert!(matches!(phase.take_waiting(), Some(Work::Retry)));
        assert!(matches!(phase, Phase::Idle));
    }
}
