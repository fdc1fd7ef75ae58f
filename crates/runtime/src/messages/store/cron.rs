//! Cron jobs of agents (docs/design.md §11 `set_cron`; Choruz B7): the `cron_job` rows and when
//! each runs next.
//!
//! Owns the rows and the two schedule forms: a `schedule` with a space is a 5-field cron
//! expression (read by the `croner` crate, its next time computed in local time — Choruz
//! takes now + 1 minute **[chosen]**), anything else is `every` `<n>s|m|h|d` (no unit, or any
//! other last character: the whole string is minutes, as Choruz reads it). Must not touch
//! the inbox: serve fires a due job by writing the agent's inbox file.

use std::str::FromStr;

use chrono::TimeZone;
use rusqlite::{params, OptionalExtension};

use super::{MessageStore, StoreError};

/// `cron_job.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CronKind {
    /// A 5-field cron expression (`*/5 * * * *`).
    Cron,
    /// A fixed period (`30s`, `5m`, `2h`, `1d`, `10` = 10 minutes).
    Every,
}

impl CronKind {
    /// The kind of `schedule` (Choruz B7: a space makes it a cron expression).
    pub fn of(schedule: &str) -> Self {
        if schedule.trim().contains(' ') {
            Self::Cron
        } else {
            Self::Every
        }
    }

    /// The column's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cron => "cron",
            Self::Every => "every",
        }
    }
}

/// One row of `cron_job`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronJob {
    pub agent_id: String,
    /// The conversation the job belongs to (the one its `set_cron` answered).
    pub conv_id: String,
    /// Unique per agent: a second `set_cron` of the name replaces the job.
    pub name: String,
    pub kind: CronKind,
    pub schedule: String,
    pub message: String,
    /// Unix seconds.
    pub next_run: i64,
}

/// The first run of `schedule` after `now` (unix seconds).
///
/// Errors: [`StoreError::BadSchedule`] naming the schedule: a cron expression that is not 5
/// fields or does not parse, a period that is not a positive whole number of its unit.
pub fn next_run(schedule: &str, now: i64) -> Result<i64, StoreError> {
    let schedule = schedule.trim();
    let bad = |reason: String| StoreError::BadSchedule { schedule: schedule.to_string(), reason };
    match CronKind::of(schedule) {
        CronKind::Every => {
            let (digits, unit) = match schedule.char_indices().last() {
                Some((i, c @ ('s' | 'm' | 'h' | 'd'))) => (&schedule[..i], c),
                _ => (schedule, 'm'),
            };
            let n: i64 = digits.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                bad("is not a period: give <n>s, <n>m, <n>h or <n>d (a bare number is minutes), or a 5-field cron expression".into())
            })?;
            let unit_secs = match unit {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                _ => 86_400,
            };
            n.checked_mul(unit_secs).and_then(|d| now.checked_add(d)).ok_or_else(|| bad("is too long a period".into()))
        }
        CronKind::Cron => {
            let fields = schedule.split_whitespace().count();
            if fields != 5 {
                return Err(bad(format!("has {fields} fields; a cron expression has 5 (minute hour day month weekday)")));
            }
            let cron = croner::Cron::from_str(schedule).map_err(|e| bad(e.to_string()))?;
            let start = chrono::Local.timestamp_opt(now, 0).single().ok_or_else(|| bad(format!("no local time for {now}")))?;
            let next = cron.find_next_occurrence(&start, false).map_err(|e| bad(e.to_string()))?;
            Ok(next.timestamp())
        }
    }
}

const CRON_COLUMNS: &str = "agent_id, conv_id, name, kind, schedule, message, next_run";

type RawCron = (CronJob, String);

fn read_cron(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawCron> {
    let job = CronJob {
        agent_id: r.get(0)?,
        conv_id: r.get(1)?,
        name: r.get(2)?,
        kind: CronKind::Every,
        schedule: r.get(4)?,
        message: r.get(5)?,
        next_run: r.get(6)?,
    };
    Ok((job, r.get(3)?))
}

impl MessageStore {
    /// Creates or replaces `agent`'s job `name` in `conv`, first run after `now`; returns it.
    ///
    /// Errors: [`StoreError::BadSchedule`], [`StoreError::NoConversation`], [`StoreError::Sql`].
    pub fn cron_set(
        &mut self,
        agent: &str,
        conv: &str,
        name: &str,
        schedule: &str,
        message: &str,
        now: i64,
    ) -> Result<CronJob, StoreError> {
        let next = next_run(schedule, now)?;
        self.conversation(conv)?;
        let kind = CronKind::of(schedule);
        self.conn
            .execute(
                "INSERT INTO cron_job (agent_id, conv_id, name, kind, schedule, message, next_run)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (agent_id, name) DO UPDATE SET conv_id = ?2, kind = ?4, schedule = ?5, message = ?6, next_run = ?7",
                params![agent, conv, name, kind.as_str(), schedule.trim(), message, next],
            )
            .map_err(|e| self.sql_err(e))?;
        Ok(CronJob {
            agent_id: agent.to_string(),
            conv_id: conv.to_string(),
            name: name.to_string(),
            kind,
            schedule: schedule.trim().to_string(),
            message: message.to_string(),
            next_run: next,
        })
    }

    /// The jobs whose `next_run` is at or before `now`, earliest first.
    ///
    /// Errors: [`StoreError::BadRow`] (a kind no cicy writes), [`StoreError::Sql`].
    pub fn cron_due(&self, now: i64) -> Result<Vec<CronJob>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {CRON_COLUMNS} FROM cron_job WHERE next_run <= ?1 ORDER BY next_run, agent_id, name"))
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt.query_map([now], read_cron).map_err(|e| self.sql_err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (mut job, kind) = row.map_err(|e| self.sql_err(e))?;
            job.kind = match kind.as_str() {
                "cron" => CronKind::Cron,
                "every" => CronKind::Every,
                other => return Err(self.bad_row("cron_job", &format!("{}/{}", job.agent_id, job.name), format!("kind `{other}`"))),
            };
            out.push(job);
        }
        Ok(out)
    }

    /// The earliest `next_run` of all jobs, if any.
    ///
    /// Errors: [`StoreError::Sql`].
    pub fn cron_next_at(&self) -> Result<Option<i64>, StoreError> {
        self.conn
            .query_row("SELECT MIN(next_run) FROM cron_job", [], |r| r.get::<_, Option<i64>>(0))
            .optional()
            .map(Option::flatten)
            .map_err(|e| self.sql_err(e))
    }

    /// Sets the next run of `job` to its first run after `now` (a job missed while serve was
    /// down fires once, not once per missed period **[chosen]**).
    ///
    /// Errors: [`StoreError::BadSchedule`] (the row's schedule no longer parses), [`StoreError::Sql`].
    pub fn cron_advance(&mut self, job: &CronJob, now: i64) -> Result<i64, StoreError> {
        let next = next_run(&job.schedule, now)?;
        self.conn
            .execute("UPDATE cron_job SET next_run = ?3 WHERE agent_id = ?1 AND name = ?2", params![job.agent_id, job.name, next])
            .map_err(|e| self.sql_err(e))?;
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::store::testutil::store_with;

    #[test]
    fn periods_take_their_unit_and_a_bare_number_is_minutes() {
        assert_eq!(next_run("30s", 1000).unwrap(), 1030);
        assert_eq!(next_run("5m", 1000).unwrap(), 1300);
        assert_eq!(next_run("2h", 0).unwrap(), 7200);
        assert_eq!(next_run("1d", 0).unwrap(), 86_400);
        assert_eq!(next_run("10", 0).unwrap(), 600);
        let err = next_run("10x", 0).unwrap_err().to_string();
        assert_eq!(
            err,
            "schedule '10x' is not a period: give <n>s, <n>m, <n>h or <n>d (a bare number is minutes), or a 5-field cron expression"
        );
        assert!(next_run("0s", 0).is_err());
    }

    #[test]
    fn a_cron_expression_gets_its_real_next_time() {
        let now = chrono::Local::now().timestamp();
        let next = next_run("*/5 * * * *", now).unwrap();
        let local = chrono::Local.timestamp_opt(next, 0).unwrap();
        assert!(next > now && next <= now + 300, "{next} vs {now}");
        assert_eq!((chrono::Timelike::minute(&local) % 5, chrono::Timelike::second(&local)), (0, 0));
        assert_eq!(
            next_run("* * * *", now).unwrap_err().to_string(),
            "schedule '* * * *' has 4 fields; a cron expression has 5 (minute hour day month weekday)"
        );
        assert!(next_run("61 * * * *", now).is_err());
    }

    #[test]
    fn jobs_are_set_replaced_due_and_advanced() {
        let (_dir, mut store) = store_with(&["Ann"]);
        let g = store.create_group("w-1", "ops", "", &[]).unwrap();
        store.cron_set("w-1", &g.id, "tick", "10s", "ping", 100).unwrap();
        let job = store.cron_set("w-1", &g.id, "tick", "5s", "pong", 100).unwrap();
        assert_eq!((job.kind, job.next_run), (CronKind::Every, 105));
        assert_eq!(store.cron_next_at().unwrap(), Some(105));
        assert!(store.cron_due(104).unwrap().is_empty());
        let due = store.cron_due(105).unwrap();
        assert_eq!(due, vec![job.clone()]);
        assert_eq!(store.cron_advance(&due[0], 200).unwrap(), 205);
        assert_eq!(store.cron_next_at().unwrap(), Some(205));
        assert!(matches!(store.cron_set("w-1", "nope", "x", "1m", "m", 0), Err(StoreError::NoConversation { .. })));
    }
}
