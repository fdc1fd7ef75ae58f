//! Time expressions of `todo add --at` and `cicy-agent time` (docs/design.md §10 "Todos"; the
//! grammar is cryo's `cryo-agent time`).
//!
//! Owns parsing an expression into a local wall-clock time and its unix second, and the local
//! "now" text. Must not touch: the database, the scheduler.

use chrono::{DateTime, Local, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, TimeZone, Timelike, Utc};

/// The local minute format of a todo's `at` (cryo `WAKE_TIME_FMT`).
const MINUTE_FMT: &str = "%Y-%m-%dT%H:%M";

/// The format of an absolute `at` given with seconds: they are kept, so a todo never fires
/// up to 59 s before the time the user wrote.
const SECOND_FMT: &str = "%Y-%m-%dT%H:%M:%S";

/// How far past a DST gap the next valid minute is searched: real gaps are at most a few hours.
const GAP_SEARCH_MINUTES: i64 = 24 * 60;

/// A todo's due time: the local wall-clock time and its unix second.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct At {
    /// Local time, `YYYY-MM-DDTHH:MM`, or `YYYY-MM-DDTHH:MM:SS` for an absolute form given with
    /// a second other than 0; a relative form shows the minute its `unix` falls in.
    pub local: String,
    /// Seconds since the Unix epoch: exact for relative forms (now + offset), the instant of
    /// `local` for absolute forms.
    pub unix: i64,
}

/// An expression that is none of the accepted forms.
#[derive(Debug, thiserror::Error)]
pub enum AtError {
    /// The message names the expression and lists every accepted form.
    #[error("invalid time \"{expr}\": use \"+N <unit>\" (unit minute|min|hour|hr|day|week, optional s), \"YYYY-MM-DDTHH:MM[:SS]\", \"YYYY-MM-DD HH:MM[:SS]\" or \"YYYY-MM-DD\"")]
    Invalid { expr: String },
}

/// Parses `expr` against `now` in the system zone (chrono `Local`, which honours `TZ`).
///
/// Forms: `[+]N <unit>` (unit `minute|min|hour|hr|day|week`, optional trailing `s`, exactly one
/// space, N ≥ 0; a day is 86,400 s and a week 7 days), `YYYY-MM-DDTHH:MM[:SS]`,
/// `YYYY-MM-DD HH:MM[:SS]`, `YYYY-MM-DD` (midnight). A time in the past is accepted (due now).
/// A wall-clock time in a DST gap becomes the next valid minute; an ambiguous one (the fold)
/// the earlier instant.
///
/// Errors: [`AtError::Invalid`] for anything else, including out-of-range fields.
pub fn parse_at(expr: &str, now: DateTime<Local>) -> Result<At, AtError> {
    parse_at_in(expr, now)
}

/// [`parse_at`] in the zone of `now` (tests use a fixed zone for DST cases).
pub fn parse_at_in<Tz: TimeZone>(expr: &str, now: DateTime<Tz>) -> Result<At, AtError> {
    let invalid = || AtError::Invalid { expr: expr.to_string() };
    let tz = now.timezone();
    if expr.get(..10).is_some_and(is_date) {
        let naive = parse_absolute(expr).ok_or_else(invalid)?;
        let at = resolve_local(&tz, naive).ok_or_else(invalid)?;
        return Ok(local_of(&at));
    }
    let offset = parse_relative(expr).ok_or_else(invalid)?;
    let unix = now.timestamp().checked_add(offset).ok_or_else(invalid)?;
    let at = DateTime::<Utc>::from_timestamp(unix, 0).ok_or_else(invalid)?.with_timezone(&tz);
    Ok(At { local: at.naive_local().format(MINUTE_FMT).to_string(), unix })
}

/// The local minute of a unix time in the system zone; `unix` is kept as given. A time outside
/// chrono's range (about ±262,000 years) is shown as the epoch's minute.
pub fn at_of_unix(unix: i64) -> At {
    at_of_unix_in(unix, &Local)
}

/// [`at_of_unix`] in zone `tz`.
pub fn at_of_unix_in<Tz: TimeZone>(unix: i64, tz: &Tz) -> At {
    let at = DateTime::<Utc>::from_timestamp(unix, 0).unwrap_or_default().with_timezone(tz);
    At { local: at.naive_local().format(MINUTE_FMT).to_string(), unix }
}

/// Now in the system zone, `YYYY-MM-DDTHH:MM:SS`.
pub fn now_local_iso() -> String {
    Local::now().format("%Y-%m-%dT%H:%M:%S").to_string()
}

/// `cicy-agent time [expr]`: no expression → [`now_local_iso`]; else the expression's local
/// time (`YYYY-MM-DDTHH:MM`, `:SS` when an absolute form gave them). Errors: [`AtError::Invalid`].
pub fn time_command(expr: Option<&str>) -> Result<String, AtError> {
    match expr {
        None => Ok(now_local_iso()),
        Some(e) => Ok(parse_at(e, Local::now())?.local),
    }
}

/// `[+]N <unit>` → seconds, or `None`.
fn parse_relative(expr: &str) -> Option<i64> {
    let rest = expr.strip_prefix('+').unwrap_or(expr);
    let (n, unit) = rest.split_once(' ')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let unit_secs = match unit.strip_suffix('s').unwrap_or(unit) {
        "minute" | "min" => 60,
        "hour" | "hr" => 3600,
        "day" => 86_400,
        "week" => 7 * 86_400,
        _ => return None,
    };
    n.parse::<i64>().ok()?.checked_mul(unit_secs)
}

/// Whether `s` is shaped `DDDD-DD-DD` (the fields are checked by chrono afterwards).
fn is_date(s: &str) -> bool {
    shaped(s, "dddd-dd-dd")
}

/// Whether `s` matches `pattern` byte for byte, `d` standing for an ASCII digit.
fn shaped(s: &str, pattern: &str) -> bool {
    s.len() == pattern.len() && s.bytes().zip(pattern.bytes()).all(|(c, p)| if p == b'd' { c.is_ascii_digit() } else { c == p })
}

/// The absolute forms → a naive local time (seconds kept), or `None`.
fn parse_absolute(expr: &str) -> Option<NaiveDateTime> {
    let num = |range: std::ops::Range<usize>| expr.get(range)?.parse::<u32>().ok();
    let date = NaiveDate::from_ymd_opt(num(0..4)? as i32, num(5..7)?, num(8..10)?)?;
    let time = match expr.len() {
        10 => NaiveTime::MIN,
        16 | 19 => {
            let sep = if expr.as_bytes()[10] == b'T' { "T" } else { " " };
            let pattern = if expr.len() == 16 { "dddd-dd-ddXdd:dd" } else { "dddd-dd-ddXdd:dd:dd" };
            if !shaped(expr, &pattern.replace('X', sep)) {
                return None;
            }
            let secs = if expr.len() == 19 { num(17..19)? } else { 0 };
            // A leap second `:60` is refused.
            NaiveTime::from_hms_opt(num(11..13)?, num(14..16)?, secs)?
        }
        _ => return None,
    };
    Some(date.and_time(time))
}

/// A local wall-clock time as an instant: the earlier of a fold, the next valid minute after a
/// gap (**[chosen]** in docs/design.md §10).
fn resolve_local<Tz: TimeZone>(tz: &Tz, naive: NaiveDateTime) -> Option<DateTime<Tz>> {
    for minutes in 0..=GAP_SEARCH_MINUTES {
        let candidate = naive.checked_add_signed(TimeDelta::minutes(minutes))?;
        match tz.from_local_datetime(&candidate) {
            LocalResult::Single(t) => return Some(t),
            LocalResult::Ambiguous(a, b) => return Some(if a <= b { a } else { b }),
            LocalResult::None => {}
        }
    }
    None
}

fn local_of<Tz: TimeZone>(t: &DateTime<Tz>) -> At {
    let naive = t.naive_local();
    let fmt = if naive.second() == 0 { MINUTE_FMT } else { SECOND_FMT };
    At { local: naive.format(fmt).to_string(), unix: t.timestamp() }
}

#[cfg(test)]
#[path = "at_tests.rs"]
mod tests;
