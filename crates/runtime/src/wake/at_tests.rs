//! Unit tests of `at.rs`: every accepted and refused form of docs/design.md §10 "Tests", DST.

use chrono::{TimeZone, Utc};
use chrono_tz::Europe::Berlin;

use super::*;

/// 2026-11-30 10:15:42 in Berlin (UTC+1, winter time).
fn now() -> DateTime<chrono_tz::Tz> {
    Berlin.with_ymd_and_hms(2026, 11, 30, 10, 15, 42).single().unwrap()
}

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> i64 {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).single().unwrap().timestamp()
}

fn at(local: &str, unix: i64) -> At {
    At { local: local.to_string(), unix }
}

#[test]
fn relative_forms_keep_the_second_and_show_the_minute() {
    let base = now().timestamp();
    assert_eq!(parse_at_in("+30 min", now()).unwrap(), at("2026-11-30T10:45", base + 1800));
    assert_eq!(parse_at_in("30 minutes", now()).unwrap(), at("2026-11-30T10:45", base + 1800));
    assert_eq!(parse_at_in("1 minute", now()).unwrap(), at("2026-11-30T10:16", base + 60));
    assert_eq!(parse_at_in("5 mins", now()).unwrap(), at("2026-11-30T10:20", base + 300));
    assert_eq!(parse_at_in("2 hrs", now()).unwrap(), at("2026-11-30T12:15", base + 7200));
    assert_eq!(parse_at_in("+1 hour", now()).unwrap(), at("2026-11-30T11:15", base + 3600));
    assert_eq!(parse_at_in("3 days", now()).unwrap(), at("2026-12-03T10:15", base + 3 * 86_400));
    assert_eq!(parse_at_in("1 week", now()).unwrap(), at("2026-12-07T10:15", base + 7 * 86_400));
    assert_eq!(parse_at_in("0 min", now()).unwrap(), at("2026-11-30T10:15", base));
    assert_eq!(base, utc(2026, 11, 30, 9, 15, 42));
}

#[test]
fn absolute_forms_are_local_times_with_the_seconds_given() {
    let nine_thirty = at("2026-12-01T09:30", utc(2026, 12, 1, 8, 30, 0));
    assert_eq!(parse_at_in("2026-12-01", now()).unwrap(), at("2026-12-01T00:00", utc(2026, 11, 30, 23, 0, 0)));
    assert_eq!(parse_at_in("2026-12-01 09:30", now()).unwrap(), nine_thirty);
    assert_eq!(parse_at_in("2026-12-01T09:30", now()).unwrap(), nine_thirty);
    assert_eq!(parse_at_in("2026-12-01T09:30:00", now()).unwrap(), nine_thirty);
    // The seconds are kept: a todo never fires before the second the user wrote.
    assert_eq!(parse_at_in("2026-12-01 09:30:15", now()).unwrap(), at("2026-12-01T09:30:15", utc(2026, 12, 1, 8, 30, 15)));
    assert_eq!(parse_at_in("2026-12-01T09:30:59", now()).unwrap(), at("2026-12-01T09:30:59", utc(2026, 12, 1, 8, 30, 59)));
    // Summer time: UTC+2.
    assert_eq!(parse_at_in("2026-07-01T12:00", now()).unwrap(), at("2026-07-01T12:00", utc(2026, 7, 1, 10, 0, 0)));
}

#[test]
fn a_past_time_is_accepted_as_due_now() {
    assert_eq!(parse_at_in("2020-01-01", now()).unwrap(), at("2020-01-01T00:00", utc(2019, 12, 31, 23, 0, 0)));
}

#[test]
fn every_other_form_is_refused_with_the_list_of_forms() {
    let refused = [
        "tomorrow",
        "30min",
        "+30  min",
        "-5 min",
        "2026-13-01",
        "",
        "+30 min ",
        " +30 min",
        "30 minss",
        "30 Min",
        "++30 min",
        "+ min",
        "99999999999999999999 min",
        "2026-02-30",
        "2026-12-01T24:00",
        "2026-12-01 09:60",
        "2026-12-01 09:30:60",
        "2026-12-01T9:30",
        "2026-12-01T09:30Z",
        "2026-12-01_09:30",
        "2026-12-01 ",
        "26-12-01",
        "in 5 min",
        "5 mïn",
        "2026-12-0é",
    ];
    for expr in refused {
        assert!(parse_at_in(expr, now()).is_err(), "{expr:?} must be refused");
    }
    assert_eq!(
        parse_at_in("tomorrow", now()).unwrap_err().to_string(),
        r#"invalid time "tomorrow": use "+N <unit>" (unit minute|min|hour|hr|day|week, optional s), "YYYY-MM-DDTHH:MM[:SS]", "YYYY-MM-DD HH:MM[:SS]" or "YYYY-MM-DD""#
    );
}

#[test]
fn a_time_in_the_dst_gap_becomes_the_next_valid_minute() {
    // Berlin, 2026-03-29: 02:00 jumps to 03:00 (01:00 UTC).
    let three = at("2026-03-29T03:00", utc(2026, 3, 29, 1, 0, 0));
    assert_eq!(parse_at_in("2026-03-29 02:30", now()).unwrap(), three);
    assert_eq!(parse_at_in("2026-03-29T02:00:30", now()).unwrap(), at("2026-03-29T03:00:30", utc(2026, 3, 29, 1, 0, 30)));
    assert_eq!(parse_at_in("2026-03-29 01:59", now()).unwrap(), at("2026-03-29T01:59", utc(2026, 3, 29, 0, 59, 0)));
}

#[test]
fn an_ambiguous_time_in_the_fold_is_the_earlier_instant() {
    // Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    assert_eq!(parse_at_in("2026-10-25 02:30", now()).unwrap(), at("2026-10-25T02:30", utc(2026, 10, 25, 0, 30, 0)));
    assert_eq!(parse_at_in("2026-10-25 03:00", now()).unwrap(), at("2026-10-25T03:00", utc(2026, 10, 25, 2, 0, 0)));
}

#[test]
fn a_relative_day_is_86400_seconds_across_a_dst_change() {
    let before = Berlin.with_ymd_and_hms(2026, 3, 28, 12, 0, 0).single().unwrap();
    assert_eq!(parse_at_in("+1 day", before).unwrap(), at("2026-03-29T13:00", utc(2026, 3, 29, 11, 0, 0)));
}

#[test]
fn a_unix_time_shows_its_local_minute() {
    assert_eq!(at_of_unix_in(utc(2026, 12, 1, 8, 30, 45), &Berlin), at("2026-12-01T09:30", utc(2026, 12, 1, 8, 30, 45)));
    assert_eq!(at_of_unix_in(0, &Utc), at("1970-01-01T00:00", 0));
}

#[test]
fn the_time_command_prints_now_or_the_expression() {
    let now = time_command(None).unwrap();
    assert!(shaped(&now, "dddd-dd-ddTdd:dd:dd"), "{now}");
    assert_eq!(time_command(Some("2026-12-01 09:30:15")).unwrap(), "2026-12-01T09:30:15");
    assert_eq!(time_command(Some("2026-12-01 09:30")).unwrap(), "2026-12-01T09:30");
    assert!(time_command(Some("30min")).unwrap_err().to_string().starts_with("invalid time \"30min\": "));
}
