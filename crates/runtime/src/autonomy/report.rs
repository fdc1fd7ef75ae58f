//! The autonomy report of docs/design.md §13 "Reports" (the idle seed's briefing lines "⑩ 我留给自己的
//! (最多 3 条)、⑪ 现在要做的、⑫ 被挤压的(被挤掉几次 / 多久没做)"): what the agent left for
//! itself, what runs or would run now, what waits for a person, and what keeps being squeezed
//! out. `intents <id> status` prints [`Report::text`]; `GET /api/agents/{id}/autonomy` serves it
//! as JSON.
//!
//! Owns gathering the report's inputs from the files ([`load`]), building it ([`Report::build`])
//! and its text. It judges only, runs nothing and writes nothing (idle: "只判不执行").

use std::path::Path;

use serde::Serialize;

use crate::home::Home;
use crate::registry::{AgentRecord, Registry, RegistryError};
use crate::role::{self, RoleError};
use crate::wake::db::{WakeDb, WakeDbError};

use super::lease::Lease;
use super::ledger::{unix_of, By, Folded, Intent, Ledger, LedgerError, Needs, Skipped};
use super::plan::{self, Decision, Inputs, RoutineRuns, DAY_SECS};
use super::priority::{Priorities, PriorityError};
use super::settings::{self, AutonomyConfig, SwitchError};

/// idle: "⑩ 我留给自己的(最多 3 条)": at most three of the agent's own intents are listed.
pub const MINE_SHOWN: usize = 3;

/// **[chosen]** The text report cuts an intent's `what` after this many characters (the JSON
/// keeps all of it; a wish may be 2000).
pub const WHAT_SHOWN_CHARS: usize = 60;

/// One of the agent's own open intents (⑩).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mine {
    pub id: String,
    pub priority: u8,
    pub what: String,
    /// `pending`, `running` or `interrupted`.
    pub status: &'static str,
    /// `none`, `human` or `external`.
    pub needs: &'static str,
}

/// An open intent that waits for a person or an outside condition (idle: "要你点头 / 要外部条件").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Waiting {
    pub id: String,
    pub what: String,
    /// `human` or `external`.
    pub needs: &'static str,
    /// "needs your approval" or "needs an external condition".
    pub label: &'static str,
}

/// An open intent that was preempted at least once or is undone a day after it was wished (⑫).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Squeezed {
    pub id: String,
    pub what: String,
    /// Preemptions in a row (the ledger's `preempted_count`).
    pub preempted_count: u32,
    /// The class that preempted it last (`human`, `alarm`, `task`, …).
    pub preempted_by: Option<String>,
    /// Hours since the wish, one decimal; `None` when its `at` does not parse.
    pub hours: Option<f64>,
}

/// The report. Times are the caller's `now`; nothing in it is read again while rendering.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Whether a tick may run anything: the role's `autonomy.enabled`, the agent's switch and a
    /// readable priority table.
    pub enabled: bool,
    /// Why not, when not enabled (the file and the problem, or the switch that is off).
    pub off_reason: Option<String>,
    /// The heartbeat, seconds.
    pub tick_secs: u64,
    /// The job autonomy runs now, as serve's lease row says.
    pub lease: Option<Lease>,
    /// ⑩: the agent's own unfinished intents, at most [`MINE_SHOWN`], by priority then age.
    pub mine: Vec<Mine>,
    /// How many of the agent's own unfinished intents there are in all.
    pub mine_total: usize,
    /// ⑪: the leased job when there is one, else what a tick would pick now (the
    /// `tick --dry-run` line without its `[dry-run] ` prefix).
    pub now: String,
    pub waiting: Vec<Waiting>,
    /// ⑫: most preempted first, then the longest undone.
    pub squeezed: Vec<Squeezed>,
    /// Ledger lines that could not be read (they are ignored, not repaired).
    pub skipped: Vec<Skipped>,
}

/// What [`Report::build`] reads; the caller has read the files.
pub struct Sources<'a> {
    pub folded: &'a Folded,
    /// The table, or why it could not be read.
    pub priorities: Result<&'a Priorities, &'a PriorityError>,
    pub config: &'a AutonomyConfig,
    /// The agent's switch, or why it could not be read.
    pub switch_on: Result<bool, SwitchError>,
    pub routines: &'a RoutineRuns,
    pub lease: Option<Lease>,
    /// Unix seconds.
    pub now: i64,
}

impl Report {
    /// Builds the report. The priority table and the switch are only needed for ⑪: when one
    /// cannot be read the agent is off, and the report says why.
    pub fn build(src: Sources<'_>) -> Report {
        let Sources { folded, priorities, config, switch_on, routines, lease, now } = src;
        let mut unfinished: Vec<&Intent> = folded.intents.iter().filter(|i| !i.status.is_final()).collect();
        unfinished.sort_by(|a, b| a.priority.cmp(&b.priority).then_with(|| a.at.cmp(&b.at)).then_with(|| a.id.cmp(&b.id)));
        let own: Vec<&Intent> = unfinished.iter().copied().filter(|i| i.by == By::Agent).collect();
        let mine = own
            .iter()
            .take(MINE_SHOWN)
            .map(|i| Mine {
                id: i.id.clone(),
                priority: i.priority,
                what: i.what.clone(),
                status: i.status.as_str(),
                needs: i.needs.as_str(),
            })
            .collect();
        let waiting = unfinished.iter().filter(|i| plan::waits_for_approval(i)).map(|i| waiting(i)).collect();
        let mut squeezed: Vec<Squeezed> = unfinished
            .iter()
            .filter_map(|i| {
                let age = unix_of(&i.at).map(|at| now - at);
                let long = age.is_some_and(|a| a >= DAY_SECS);
                (i.preempted_count > 0 || long).then(|| Squeezed {
                    id: i.id.clone(),
                    what: i.what.clone(),
                    preempted_count: i.preempted_count,
                    preempted_by: i.preempted_by.clone(),
                    hours: age.map(|a| (a as f64 / 360.0).round() / 10.0),
                })
            })
            .collect();
        squeezed.sort_by(|a, b| {
            b.preempted_count.cmp(&a.preempted_count).then_with(|| b.hours.unwrap_or(0.0).total_cmp(&a.hours.unwrap_or(0.0)))
        });
        let decision = decide(folded, priorities, config, switch_on, routines, now);
        let (enabled, off_reason) = match &decision {
            Decision::Off { why } => (false, Some(why.clone())),
            Decision::Run(_) | Decision::Rest => (true, None),
        };
        let now_line = match &lease {
            Some(lease) => leased_line(lease, folded),
            None => decision.dry_run_line().trim_start_matches("[dry-run] ").to_string(),
        };
        Report {
            enabled,
            off_reason,
            tick_secs: config.tick().as_secs(),
            lease,
            mine,
            mine_total: own.len(),
            now: now_line,
            waiting,
            squeezed,
            skipped: folded.skipped.clone(),
        }
    }

    /// The report as `intents <id> status` prints it: one line per section, `none` when a
    /// section is empty, and a last line about unreadable ledger lines when there are any.
    ///
    /// ```text
    /// autonomy: on (tick every 30 s)
    /// ⑩ mine (2): i1 [5] tidy the notes folder (pending); i3 [4] sum up the week (interrupted)
    /// ⑪ now: run intent i1 (priority 5): tidy the notes folder — `ls notes`
    /// waiting: i4 ask before pruning old logs — needs your approval
    /// ⑫ squeezed: i3 preempted 3× (last by human), wished 26.5 h ago
    /// ```
    pub fn text(&self) -> String {
        let mut out = match &self.off_reason {
            None => format!("autonomy: on (tick every {} s)\n", self.tick_secs),
            Some(why) => format!("autonomy: off ({why})\n"),
        };
        let mine: Vec<String> = self.mine.iter().map(|m| format!("{} [{}] {} ({})", m.id, m.priority, short(&m.what), m.status)).collect();
        let count = if self.mine_total > self.mine.len() {
            format!("{} of {}", self.mine.len(), self.mine_total)
        } else {
            self.mine_total.to_string()
        };
        match mine.is_empty() {
            true => out.push_str("⑩ mine: none\n"),
            false => out.push_str(&format!("⑩ mine ({count}): {}\n", mine.join("; "))),
        }
        out.push_str(&format!("⑪ now: {}\n", self.now));
        let waiting: Vec<String> = self.waiting.iter().map(|w| format!("{} {} — {}", w.id, short(&w.what), w.label)).collect();
        out.push_str(&format!("waiting: {}\n", none_or(&waiting)));
        let squeezed: Vec<String> = self.squeezed.iter().map(squeezed_text).collect();
        out.push_str(&format!("⑫ squeezed: {}\n", none_or(&squeezed)));
        if !self.skipped.is_empty() {
            let lines: Vec<String> = self.skipped.iter().map(|s| s.line.to_string()).collect();
            out.push_str(&format!("ledger: skipped unreadable line(s) {} (see `intents <id> ls --json`)\n", lines.join(", ")));
        }
        out
    }
}

/// [`plan::decide`], off with the reason when the table or the switch cannot be read.
fn decide(
    folded: &Folded,
    priorities: Result<&Priorities, &PriorityError>,
    config: &AutonomyConfig,
    switch_on: Result<bool, SwitchError>,
    routines: &RoutineRuns,
    now: i64,
) -> Decision {
    match (priorities, switch_on) {
        (Err(e), _) => Decision::Off { why: e.to_string() },
        (_, Err(e)) => Decision::Off { why: e.to_string() },
        (Ok(priorities), Ok(switch_on)) => plan::decide(&Inputs { folded, priorities, config, switch_on, routines, now }),
    }
}

fn waiting(i: &Intent) -> Waiting {
    let label = match i.needs {
        Needs::Human => "needs your approval",
        Needs::External => "needs an external condition",
        // `waits_for_approval` lets no `none` through; say what it is rather than guess.
        Needs::None => "needs nothing",
    };
    Waiting { id: i.id.clone(), what: i.what.clone(), needs: i.needs.as_str(), label }
}

fn squeezed_text(s: &Squeezed) -> String {
    let mut parts = vec![s.id.clone()];
    if s.preempted_count > 0 {
        let by = s.preempted_by.as_deref().map(|b| format!(" (last by {b})")).unwrap_or_default();
        parts.push(format!("preempted {}×{by},", s.preempted_count));
    }
    match s.hours {
        Some(h) => parts.push(format!("wished {h:.1} h ago")),
        None => parts.push("wished at an unreadable time".into()),
    }
    parts.join(" ")
}

/// ⑪ while a job holds the lease: the intent's line as the dry run words it, or the routine.
fn leased_line(lease: &Lease, folded: &Folded) -> String {
    let since = format!("since {}{}", lease.started_at, lease.pid.map(|p| format!(", pid {p}")).unwrap_or_default());
    let intent = lease.job.strip_prefix("intent:").and_then(|id| folded.get(id));
    match intent {
        Some(i) => {
            let how = i.run.as_deref().map_or_else(|| "a model turn".to_string(), |r| format!("`{r}`"));
            format!("running intent {} (priority {}): {} — {how} ({since})", i.id, lease.priority, short(&i.what))
        }
        None => format!("running {} (priority {}) ({since})", lease.job, lease.priority),
    }
}

fn short(what: &str) -> String {
    let one_line = what.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(WHAT_SHOWN_CHARS) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

fn none_or(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join("; ")
    }
}

/// Reads what a report needs from `workspace` (the ledger, the priority table, the switch, the
/// routines' last starts) and builds it; `config` is the role's `autonomy:` block and `lease`
/// the row from `cicy.db`. Also returns the folded ledger (the API lists every intent).
///
/// Errors: the ledger exists but cannot be read. An unreadable table or switch is not an
/// error: the report says autonomy is off and why.
pub fn load(workspace: &Path, config: &AutonomyConfig, lease: Option<Lease>, now: i64) -> Result<(Report, Folded), LedgerError> {
    let folded = Ledger::of_workspace(workspace).read()?;
    let priorities = Priorities::load(workspace);
    let switch_on = settings::switch_on(workspace);
    let routines = RoutineRuns::load(workspace);
    let report =
        Report::build(Sources { folded: &folded, priorities: priorities.as_ref(), config, switch_on, routines: &routines, lease, now });
    Ok((report, folded))
}

/// Why an agent's report could not be built; each error names its file.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Role(#[from] RoleError),
    #[error(transparent)]
    Db(#[from] WakeDbError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// The role's `autonomy:` block for `record` (its meta.yaml, read now).
///
/// Errors: the role's meta.yaml cannot be read or is invalid.
pub fn role_config(home: &Home, record: &AgentRecord) -> Result<AutonomyConfig, RoleError> {
    Ok(role::load_meta(home, &record.role_template)?.autonomy)
}

/// Agent `id`'s report at `now` (unix seconds) from its registry row, its role, its lease in
/// `cicy.db` and its workspace's files, with the folded ledger.
///
/// Errors: an unknown agent, a role or `cicy.db` that cannot be read, an unreadable ledger.
pub fn of_agent(home: &Home, id: &str, now: i64) -> Result<(Report, Folded), ReportError> {
    let registry = Registry::open(&home.db_path())?;
    let record = registry.get(id)?;
    let config = role_config(home, &record)?;
    // A lease outlives a `kill -9` of serve until the next start clears it: not a job that runs.
    let lease = WakeDb::from_registry(registry)?.lease_of(id)?.filter(|_| crate::instance::serve_running(home));
    let (mut report, folded) = load(&record.workspace, &config, lease, now)?;
    if report.lease.is_none() {
        // ⑪ as the next tick would see it, idle checks included (`intents <id> tick --dry-run`).
        let line = super::tick::tick_in(home, &record, super::tick::Mode::DryRun).tick.dry_run_line();
        report.now = line.trim_start_matches("[dry-run] ").to_string();
    }
    Ok((report, folded))
}

impl Report {
    /// The report as `GET /api/agents/{id}/autonomy` and `intents <id> status --json` give it:
    /// its fields plus `intents`, every intent's latest state in the order first wished.
    pub fn to_json(&self, intents: &[Intent]) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let serde_json::Value::Object(m) = &mut v {
            m.insert("intents".into(), serde_json::to_value(intents).unwrap_or_default());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autonomy::ledger::Status;

    const NOW: i64 = 1_796_100_000;

    fn rfc(unix: i64) -> String {
        chrono::DateTime::from_timestamp(unix, 0).unwrap().format("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// A realistic ledger: two own wishes, one a person's that waits, one squeezed three times,
    /// a finished one, a dropped one, an old one, and a hand-broken line.
    fn ledger() -> Folded {
        let line = |id: &str, at: i64, by: &str, what: &str, status: &str, priority: u8, extra: &str| {
            format!(r#"{{"id":"{id}","at":"{}","by":"{by}","what":"{what}","priority":{priority},"status":"{status}"{extra}}}"#, rfc(at))
        };
        let text = [
            line("i1", NOW - 3600, "self", "tidy the notes folder", "pending", 5, r#","run":"ls notes""#),
            line(
                "i2",
                NOW - 95_400,
                "self",
                "sum up the week's decisions in notes/week.md",
                "interrupted",
                4,
                r#","preempted_count":3,"preempted_by":"human""#,
            ),
            line(
                "i3",
                NOW - 600,
                "human",
                "prune logs older than a month",
                "pending",
                5,
                r#","needs":"human","run":"find logs -mtime +30 -delete""#,
            ),
            "{not json".to_string(),
            line("i4", NOW - 500, "self", "done already", "done", 5, r#","done_at":"x""#),
            line(
                "i5",
                NOW - 400,
                "self",
                "a very long wish that goes on and on about reorganising every folder of the workspace by topic",
                "pending",
                7,
                "",
            ),
            line("i6", NOW - 300, "self", "a fourth own wish", "pending", 6, r#","needs":"external""#),
            line("i7", NOW - 200, "human", "dropped by a person", "dropped", 5, ""),
        ]
        .join("\n");
        Folded::parse(&format!("{text}\n"))
    }

    fn build(folded: &Folded, lease: Option<Lease>, switch_on: Result<bool, SwitchError>) -> Report {
        Report::build(Sources {
            folded,
            priorities: Ok(&Priorities::default()),
            config: &AutonomyConfig::default(),
            switch_on,
            routines: &RoutineRuns::default(),
            lease,
            now: NOW,
        })
    }

    #[test]
    fn the_text_of_a_realistic_ledger() {
        let f = ledger();
        insta::assert_snapshot!("report_text", build(&f, None, Ok(true)).text());
        let lease = Lease {
            agent_id: "w-1".into(),
            job: "intent:i2".into(),
            pid: Some(4242),
            pgid: Some(4242),
            priority: 4,
            started_at: rfc(NOW - 60),
        };
        insta::assert_snapshot!("report_text_leased_and_off", build(&f, Some(lease), Ok(false)).text());
    }

    #[test]
    fn the_sections_pick_by_owner_priority_and_age() {
        let f = ledger();
        let r = build(&f, None, Ok(true));
        let ids = |v: Vec<&str>| v.into_iter().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(r.mine.iter().map(|m| m.id.clone()).collect::<Vec<_>>(), ids(vec!["i2", "i1", "i6"]));
        assert_eq!(r.mine_total, 4);
        assert_eq!(r.now, "run intent i2 (priority 4): sum up the week's decisions in notes/week.md — a model turn");
        assert_eq!(
            r.waiting.iter().map(|w| (w.id.as_str(), w.label)).collect::<Vec<_>>(),
            vec![("i3", "needs your approval"), ("i6", "needs an external condition")]
        );
        assert_eq!(
            r.squeezed,
            vec![Squeezed {
                id: "i2".into(),
                what: "sum up the week's decisions in notes/week.md".into(),
                preempted_count: 3,
                preempted_by: Some("human".into()),
                hours: Some(26.5),
            }]
        );
        assert_eq!(r.skipped.len(), 1);
        assert_eq!(r.skipped[0].line, 4);
    }

    #[test]
    fn an_empty_ledger_rests_and_an_unreadable_table_is_off_with_its_reason() {
        let empty = Folded::default();
        let r = build(&empty, None, Ok(true));
        assert_eq!(
            r.text(),
            "autonomy: on (tick every 30 s)\n⑩ mine: none\n⑪ now: rest (nothing wanted and runnable)\nwaiting: none\n⑫ squeezed: none\n"
        );
        let bad = PriorityError::Bad { path: "ws/.cicy/sched-priority.json".into(), problem: "not a JSON object".into() };
        let r = Report::build(Sources {
            folded: &empty,
            priorities: Err(&bad),
            config: &AutonomyConfig::default(),
            switch_on: Ok(true),
            routines: &RoutineRuns::default(),
            lease: None,
            now: NOW,
        });
        assert!(!r.enabled);
        let why = r#"ws/.cicy/sched-priority.json: not a JSON object (expected an object like {"alarm":1,"human":1,"daemon":2,"task":3,"intent":5,"selfcheck":8,"recall":9,"web":10})"#;
        assert_eq!(r.now, format!("off ({why})"));
        assert!(r.text().starts_with(&format!("autonomy: off ({why})\n")));
    }

    #[test]
    fn load_reads_the_files_and_reports_a_bad_switch_as_off() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let ledger = Ledger::of_workspace(ws);
        let mut i = ledger_intent();
        ledger.append(vec![i.clone()]).unwrap();
        i.status = Status::Done;
        ledger.append(vec![i]).unwrap();
        let (r, folded) = load(ws, &AutonomyConfig::default(), None, NOW).unwrap();
        assert_eq!((r.enabled, r.mine_total, folded.intents.len()), (true, 0, 1));
        std::fs::write(settings::switch_path(ws), "garbage").unwrap();
        let (r, _) = load(ws, &AutonomyConfig::default(), None, NOW).unwrap();
        assert!(r.off_reason.unwrap().contains("autonomy.json"));
    }

    #[test]
    fn a_long_what_is_cut_on_a_character_and_kept_on_one_line() {
        let long = format!("{}\nnext", "é".repeat(70));
        assert_eq!(short(&long), format!("{}…", "é".repeat(WHAT_SHOWN_CHARS)));
        assert_eq!(short("two\n  lines"), "two lines");
    }

    fn ledger_intent() -> Intent {
        Folded::parse(r#"{"id":"i1","at":"2026-12-01T10:00:00Z","by":"self","what":"x","priority":5,"status":"pending"}"#).intents.remove(0)
    }
}
