//! What an idle tick would do (docs/design.md §13 "Tick", "Starvation"): the pure decision, from the
//! folded ledger, the priority table, the role's settings and the clock.
//!
//! Owns the order *(idle)* — own intents > self-check > recall > web > rest —, which intent
//! wins (smallest priority, then the oldest wish, then the id), `min_gap` (from the last
//! start), what waits for a person, and the starvation rule: three preemptions in a row or 24 h
//! undone raise an intent's priority by one, at most once a day, never above `task`.
//! Must not touch: files (the caller reads and appends), processes, the guardrails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ledger::{unix_of, Folded, Intent, Needs};
use super::priority::{Class, Priorities};
use super::settings::{AutonomyConfig, Routine};

/// idle: a day, the starvation window and the cap on promotions.
pub const DAY_SECS: i64 = 24 * 3600;
/// idle: preemptions in a row that promote an intent.
pub const PREEMPTIONS_TO_PROMOTE: u32 = 3;

/// What a tick runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Pick {
    Intent(Box<Intent>),
    Routine { class: Class, routine: Routine },
}

impl Pick {
    /// The job's name in the lease and the log: `intent:<id>` or the routine's class.
    pub fn job(&self) -> String {
        match self {
            Pick::Intent(i) => format!("intent:{}", i.id),
            Pick::Routine { class, .. } => class.as_str().to_string(),
        }
    }

    pub fn priority(&self, table: &Priorities) -> u8 {
        match self {
            Pick::Intent(i) => i.priority,
            Pick::Routine { class, .. } => table.of(*class),
        }
    }

    /// The command, if the job is one; `None`: a model turn.
    pub fn run(&self) -> Option<&str> {
        match self {
            Pick::Intent(i) => i.run.as_deref(),
            Pick::Routine { routine, .. } => routine.run.as_deref(),
        }
    }
}

/// What a tick decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Autonomy is off; `why` says which switch.
    Off {
        why: String,
    },
    Run(Pick),
    /// Nothing wanted and runnable.
    Rest,
}

impl Decision {
    /// The line `intents <id> tick --dry-run` prints.
    pub fn dry_run_line(&self) -> String {
        match self {
            Decision::Off { why } => format!("[dry-run] off ({why})"),
            Decision::Rest => "[dry-run] rest (nothing wanted and runnable)".to_string(),
            Decision::Run(Pick::Intent(i)) => {
                let how = i.run.as_deref().map_or_else(|| "a model turn".to_string(), |r| format!("`{r}`"));
                format!("[dry-run] run intent {} (priority {}): {} — {how}", i.id, i.priority, i.what)
            }
            Decision::Run(Pick::Routine { class, routine }) => {
                let how = routine.run.as_deref().map_or_else(|| "a model turn".to_string(), |r| format!("`{r}`"));
                format!("[dry-run] run {}: {how}", class.as_str())
            }
        }
    }
}

/// When each routine last started (unix seconds), kept in `<workspace>/.cicy/autonomy-state.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutineRuns {
    #[serde(default)]
    pub last_start: BTreeMap<String, i64>,
}

/// `<workspace>/.cicy/autonomy-state.json`.
pub fn routine_runs_path(workspace: &Path) -> PathBuf {
    workspace.join(".cicy").join("autonomy-state.json")
}

impl RoutineRuns {
    /// Reads the file; missing or unreadable is "never ran" (the worst case is one routine run
    /// early, and the file is rewritten at the next routine start).
    pub fn load(workspace: &Path) -> Self {
        std::fs::read(routine_runs_path(workspace)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    /// Records that `class` started at `now` (atomic write).
    ///
    /// Errors: the file cannot be written.
    pub fn record(workspace: &Path, class: Class, now: i64) -> std::io::Result<()> {
        let mut runs = Self::load(workspace);
        runs.last_start.insert(class.as_str().to_string(), now);
        let bytes = serde_json::to_vec(&runs).map_err(std::io::Error::other)?;
        crate::fsutil::write_atomic(&routine_runs_path(workspace), &bytes)
    }
}

/// Everything a decision reads.
pub struct Inputs<'a> {
    pub folded: &'a Folded,
    pub priorities: &'a Priorities,
    pub config: &'a AutonomyConfig,
    /// The agent's own switch (`intents <id> off`).
    pub switch_on: bool,
    pub routines: &'a RoutineRuns,
    /// Unix seconds.
    pub now: i64,
}

/// Decides what a tick runs. An intent is a candidate when it is `pending` or `interrupted`,
/// needs nothing, and `min_gap` has passed since its last start.
pub fn decide(inp: &Inputs<'_>) -> Decision {
    if !inp.config.enabled() {
        return Decision::Off { why: "autonomy.enabled: false in the role's meta.yaml".into() };
    }
    if !inp.switch_on {
        return Decision::Off { why: "switched off with `intents <id> off`".into() };
    }
    if let Some(i) = runnable(inp.folded, inp.now).min_by(|a, b| order(a, b)) {
        return Decision::Run(Pick::Intent(Box::new(i.clone())));
    }
    for (class, routine) in inp.config.routines() {
        let last = inp.routines.last_start.get(class.as_str()).copied();
        if last.is_none_or(|l| inp.now - l >= i64::try_from(routine.every()).unwrap_or(i64::MAX)) {
            return Decision::Run(Pick::Routine { class, routine: routine.clone() });
        }
    }
    Decision::Rest
}

fn runnable(folded: &Folded, now: i64) -> impl Iterator<Item = &Intent> {
    folded.intents.iter().filter(move |i| i.is_open() && i.needs == Needs::None && gap_passed(i, now))
}

/// Whether `min_gap` has passed since the intent's last start *(idle: counted from the start,
/// so a run killed half-way does not start again at once)*.
pub fn gap_passed(i: &Intent, now: i64) -> bool {
    match i.started_at.as_deref().and_then(unix_of) {
        Some(started) => now - started >= i64::try_from(i.min_gap).unwrap_or(i64::MAX),
        None => true,
    }
}

fn order(a: &Intent, b: &Intent) -> std::cmp::Ordering {
    a.priority.cmp(&b.priority).then_with(|| a.at.cmp(&b.at)).then_with(|| a.id.cmp(&b.id))
}

/// The intents the starvation rule raises now, as the lines to append: priority − 1 and
/// `promoted` = now. An open intent qualifies with [`PREEMPTIONS_TO_PROMOTE`] preemptions in a
/// row or a wish older than a day, when it was not promoted in the last day and is below
/// `task`'s priority *(idle)*.
pub fn promotions(folded: &Folded, priorities: &Priorities, now: i64, now_text: &str) -> Vec<Intent> {
    let floor = priorities.promotion_floor();
    folded
        .intents
        .iter()
        .filter(|i| i.is_open() && i.priority > floor)
        .filter(|i| i.preempted_count >= PREEMPTIONS_TO_PROMOTE || i.at_unix().is_some_and(|at| now - at >= DAY_SECS))
        .filter(|i| i.promoted.as_deref().and_then(unix_of).is_none_or(|p| now - p >= DAY_SECS))
        .map(|i| Intent { priority: i.priority - 1, promoted: Some(now_text.to_string()), ..i.clone() })
        .collect()
}

impl Intent {
    fn at_unix(&self) -> Option<i64> {
        unix_of(&self.at)
    }
}

/// Whether `needs` keeps the intent for a person; such intents are reported, never run.
pub fn waits_for_approval(i: &Intent) -> bool {
    i.is_open() && i.needs != Needs::None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autonomy::ledger::{By, Status};

    const T0: i64 = 1_796_000_000;

    fn rfc(unix: i64) -> String {
        chrono::DateTime::from_timestamp(unix, 0).unwrap().format("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    fn intent(id: &str, priority: u8) -> Intent {
        Intent { run: Some("true".into()), priority, ..Intent::new(id.into(), rfc(T0), By::Agent, format!("do {id}")) }
    }

    fn decide_at(intents: Vec<Intent>, config: &AutonomyConfig, routines: &RoutineRuns, now: i64) -> Decision {
        let folded = Folded { intents, skipped: vec![] };
        decide(&Inputs { folded: &folded, priorities: &Priorities::default(), config, switch_on: true, routines, now })
    }

    #[test]
    fn the_smallest_priority_wins_then_the_oldest_and_finished_or_waiting_ones_never_run() {
        let c = AutonomyConfig::default();
        let r = RoutineRuns::default();
        let done = Intent { status: Status::Done, ..intent("i1", 4) };
        let human = Intent { needs: Needs::Human, ..intent("i2", 4) };
        let later = Intent { at: rfc(T0 + 5), ..intent("i3", 5) };
        let older = intent("i4", 5);
        let got = decide_at(vec![done, human.clone(), later, older], &c, &r, T0 + 10);
        assert!(matches!(&got, Decision::Run(Pick::Intent(i)) if i.id == "i4"), "{got:?}");
        assert_eq!(decide_at(vec![human], &c, &r, T0 + 10), Decision::Rest);
        assert_eq!(Decision::Rest.dry_run_line(), "[dry-run] rest (nothing wanted and runnable)");
    }

    #[test]
    fn min_gap_counts_from_the_last_start() {
        let c = AutonomyConfig::default();
        let r = RoutineRuns::default();
        let i = Intent { status: Status::Interrupted, min_gap: 60, started_at: Some(rfc(T0)), ..intent("i1", 5) };
        assert_eq!(decide_at(vec![i.clone()], &c, &r, T0 + 59), Decision::Rest);
        assert!(matches!(decide_at(vec![i], &c, &r, T0 + 60), Decision::Run(_)));
    }

    #[test]
    fn routines_come_after_intents_in_order_and_wait_their_period() {
        let c: AutonomyConfig = serde_yaml::from_str("recall: {run: r, every_secs: 100}\nselfcheck: {run: s, every_secs: 100}").unwrap();
        let mut r = RoutineRuns::default();
        assert!(matches!(decide_at(vec![intent("i1", 7)], &c, &r, T0), Decision::Run(Pick::Intent(_))));
        assert!(matches!(decide_at(vec![], &c, &r, T0), Decision::Run(Pick::Routine { class: Class::Selfcheck, .. })));
        r.last_start.insert("selfcheck".into(), T0);
        assert!(matches!(decide_at(vec![], &c, &r, T0 + 1), Decision::Run(Pick::Routine { class: Class::Recall, .. })));
        r.last_start.insert("recall".into(), T0);
        assert_eq!(decide_at(vec![], &c, &r, T0 + 99), Decision::Rest);
    }

    #[test]
    fn off_switches_win() {
        let c: AutonomyConfig = serde_yaml::from_str("enabled: false").unwrap();
        let got = decide_at(vec![intent("i1", 5)], &c, &RoutineRuns::default(), T0);
        assert_eq!(got.dry_run_line(), "[dry-run] off (autonomy.enabled: false in the role's meta.yaml)");
    }

    #[test]
    fn three_preemptions_promote_once_a_day_and_never_above_task() {
        let p = Priorities::default();
        let mut i = Intent { status: Status::Interrupted, preempted_count: 3, ..intent("i1", 5) };
        let f = |i: &Intent| Folded { intents: vec![i.clone()], skipped: vec![] };
        let now = T0 + 3600;
        let up = promotions(&f(&i), &p, now, &rfc(now));
        assert_eq!(up.len(), 1);
        assert_eq!((up[0].priority, up[0].promoted.as_deref()), (4, Some(rfc(now).as_str())));
        i = up[0].clone();
        i.preempted_count = 4;
        assert!(promotions(&f(&i), &p, now + 600, &rfc(now + 600)).is_empty(), "a fourth preemption the same day");
        assert_eq!(promotions(&f(&i), &p, now + DAY_SECS, &rfc(now + DAY_SECS))[0].priority, 3);
        i.priority = 3;
        assert!(promotions(&f(&i), &p, now + 3 * DAY_SECS, &rfc(now)).is_empty(), "never above task");
        let two = Intent { preempted_count: 2, ..intent("i2", 5) };
        assert!(promotions(&f(&two), &p, T0 + 60, &rfc(T0)).is_empty());
        assert_eq!(promotions(&f(&two), &p, T0 + DAY_SECS, &rfc(T0))[0].priority, 4, "a day undone");
    }
}
