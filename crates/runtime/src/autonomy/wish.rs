//! Writing to the ledger on a person's or the agent's word (docs/design.md §13 "wish", "needs",
//! "Off"): a new wish, checked by the guardrails before it is written; `approve` and `drop` of
//! an intent; and the pickup check of a line nobody checked (one written by hand).
//!
//! Owns the wish's validation, the `checked` mark of a line that passed the guardrails, and the
//! lines these changes append. Must not touch: what the guardrails refuse (`super::guard`), the
//! tick, running anything.

use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use super::guard::{self, GuardCtx, Judge, Refusal};
use super::key::{GuardKey, KeyError};
use super::ledger::{By, Intent, Ledger, LedgerError, Needs, Status};
use super::priority::{Class, Priorities, PriorityError, WISH_PRIORITIES};

/// **[chosen]** At most 2000 characters in `what` (and in `why`): a wish is a sentence or a
/// paragraph, and both go to the guard's judge whole.
pub const MAX_WHAT_CHARS: usize = 2000;

/// The key of [`Intent::extra`] that marks a line the guardrails passed: hex HMAC-SHA256, under
/// the home's [`GuardKey`], of `what \0 why \0 run \0 needs` (an absent field is empty). A line
/// edited or written past the guardrails (by hand, or by an agent's shell) has no valid mark
/// and is checked again at pickup; a `needs` changed by hand is not an approval.
pub const CHECKED_KEY: &str = "checked";

/// A wish as the `wish` tool or `cicy-agent wish` gives it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WishInput {
    pub what: String,
    pub why: Option<String>,
    /// A bash command line; `None`: the intent is a model turn.
    pub run: Option<String>,
    /// 4–7 ([`WISH_PRIORITIES`]); `None`: the table's `intent` priority, kept within 4–7.
    pub priority: Option<u8>,
    /// Seconds from a start before the intent may start again.
    pub min_gap: u64,
    pub needs: Needs,
}

/// A wish, an approval or a drop that was not written. Each names the field, or the intent and
/// the ledger file.
#[derive(Debug, thiserror::Error)]
pub enum WishError {
    #[error("what: is blank; say what the intent is")]
    BlankWhat,
    #[error("{field}: {chars} characters; at most {MAX_WHAT_CHARS}")]
    TooLong { field: &'static str, chars: usize },
    #[error("priority: {0} is outside 4–7 (a wish ranks between `task` 3 and `selfcheck` 8; smaller runs first)")]
    Priority(u8),
    #[error("run: is blank; give a command, or leave run out for a model turn")]
    BlankRun,
    /// The default priority comes from the table, which cannot be read.
    #[error("{0} (a wish without a priority takes the table's `intent` one)")]
    Table(#[from] PriorityError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("what: one line without control characters (a newline, a tab) is needed; put details in why")]
    ControlInWhat,
    #[error(transparent)]
    Key(#[from] KeyError),
    /// Cancelled while the guardrails' judge was asked; nothing was written.
    #[error("cancelled before the wish was checked; nothing written")]
    Cancelled,
    #[error("{path}: no intent {id}")]
    Unknown { path: PathBuf, id: String },
    #[error("{path}: intent {id} is already {status}; only an unfinished intent can be {action}")]
    Finished { path: PathBuf, id: String, status: &'static str, action: &'static str },
}

/// The `checked` value of `intent` as it reads now (see [`CHECKED_KEY`]).
pub fn checked_value(key: &GuardKey, intent: &Intent) -> String {
    key.mark(&[&intent.what, intent.why.as_deref().unwrap_or(""), intent.run.as_deref().unwrap_or(""), intent.needs.as_str()])
}

/// Whether the guardrails passed this intent as it reads now (its `checked` is the mark of its
/// `what`, `why`, `run` and `needs`).
pub fn is_checked(key: &GuardKey, intent: &Intent) -> bool {
    intent.extra.get(CHECKED_KEY).and_then(|v| v.as_str()) == Some(checked_value(key, intent).as_str())
}

fn mark_checked(key: &GuardKey, intent: &mut Intent) {
    let value = checked_value(key, intent);
    intent.extra.insert(CHECKED_KEY.to_string(), value.into());
}

/// docs/design.md §13 "Hand-written lines are checked at pickup": runs the guardrails on an intent
/// that is not [`is_checked`] and returns it with `checked` set, for the tick to append before
/// it starts the intent.
///
/// Errors: the guardrails' [`Refusal`] (append [`refused`] of it; the intent must not run).
pub async fn check_at_pickup(
    key: &GuardKey,
    intent: &Intent,
    ctx: &GuardCtx<'_>,
    judge: &Judge<'_>,
    cancel: &CancellationToken,
) -> Result<Intent, Refusal> {
    guard::check(&intent.what, intent.why.as_deref(), intent.run.as_deref(), ctx, judge, cancel).await?;
    let mut checked = intent.clone();
    mark_checked(key, &mut checked);
    Ok(checked)
}

/// The line of `intent` refused by the guardrails: status `refused`, `refused_reason` = the
/// refusal's text (`<class>: <reason>`), `done_at` = `now` (RFC 3339).
pub fn refused(intent: &Intent, refusal: &Refusal, now: &str) -> Intent {
    let mut line = intent.clone();
    line.status = Status::Refused;
    line.refused_reason = Some(refusal.to_string());
    line.done_at = Some(now.to_string());
    line.extra.remove(CHECKED_KEY);
    line
}

/// Validates `input`, runs the guardrails on it, and appends one line to the ledger of
/// `workspace`: status `pending` with `checked`, or `refused` with the reason. A judge that
/// cannot be asked refuses (the guardrails' rule), and that line is written too. `home` is
/// `$CICY_HOME` (the guardrails refuse writes to its config and roles).
///
/// Errors: a field ([`WishError::BlankWhat`], [`WishError::TooLong`],
/// [`WishError::Priority`], [`WishError::BlankRun`]) or an unreadable priority table, before
/// anything is asked or written; [`WishError::Cancelled`]; the ledger cannot be written.
pub async fn wish(
    workspace: &Path,
    home: &Path,
    by: By,
    input: WishInput,
    judge: &Judge<'_>,
    cancel: &CancellationToken,
) -> Result<Intent, WishError> {
    let (mut intent, key) =
        crate::fsutil::blocking(|| -> Result<_, WishError> { Ok((validate(workspace, by, input)?, GuardKey::load_or_create(home)?)) })?;
    let ctx = GuardCtx { workspace, home };
    let verdict = guard::check(&intent.what, intent.why.as_deref(), intent.run.as_deref(), &ctx, judge, cancel).await;
    if cancel.is_cancelled() {
        return Err(WishError::Cancelled);
    }
    // The id is taken under the ledger's lock, after the judge: two wishes judged at once
    // still get two ids.
    crate::fsutil::blocking(|| {
        Ledger::of_workspace(workspace).update(|folded| {
            intent.id = folded.next_id();
            intent.at = crate::fsutil::now_rfc3339();
            let line = match &verdict {
                Ok(()) => {
                    mark_checked(&key, &mut intent);
                    intent
                }
                Err(refusal) => refused(&intent, refusal, &intent.at),
            };
            Ok::<_, WishError>((vec![line.clone()], line))
        })
    })
}

/// The intent `input` asks for, without id and time yet.
fn validate(workspace: &Path, by: By, input: WishInput) -> Result<Intent, WishError> {
    let WishInput { what, why, run, priority, min_gap, needs } = input;
    let what = what.trim().to_string();
    if what.is_empty() {
        return Err(WishError::BlankWhat);
    }
    if what.chars().any(char::is_control) {
        return Err(WishError::ControlInWhat);
    }
    let why = why.map(|w| w.trim().to_string()).filter(|w| !w.is_empty());
    for (field, text) in [("what", Some(&what)), ("why", why.as_ref())] {
        let chars = text.map_or(0, |t| t.chars().count());
        if chars > MAX_WHAT_CHARS {
            return Err(WishError::TooLong { field, chars });
        }
    }
    if run.as_deref().is_some_and(|r| r.trim().is_empty()) {
        return Err(WishError::BlankRun);
    }
    let priority = match priority {
        Some(p) if WISH_PRIORITIES.contains(&p) => p,
        Some(p) => return Err(WishError::Priority(p)),
        None => Priorities::load(workspace)?.of(Class::Intent).clamp(*WISH_PRIORITIES.start(), *WISH_PRIORITIES.end()),
    };
    Ok(Intent { why, run, priority, min_gap, needs, ..Intent::new(String::new(), String::new(), by, what) })
}

/// `intents <id> approve <iid>`: sets `needs` to `none`, so the tick may run the intent, and
/// marks it with the home's key when it passed the guardrails as it was. An intent that needs
/// nothing already is returned as it is, nothing written.
///
/// Errors: [`WishError::Unknown`], [`WishError::Finished`] (done, failed, refused, dropped),
/// the key or the ledger cannot be read or written.
pub fn approve(workspace: &Path, home: &Path, iid: &str) -> Result<Intent, WishError> {
    let key = GuardKey::load_or_create(home)?;
    change(workspace, iid, "approved", |i| {
        (i.needs != Needs::None).then(|| {
            let passed = is_checked(&key, i);
            let mut line = Intent { needs: Needs::None, ..i.clone() };
            if passed {
                mark_checked(&key, &mut line);
            }
            line
        })
    })
}

/// `intents <id> drop <iid>`: status `dropped`, `done_at` now; the tick never runs it again. A
/// running intent's process is serve's to stop.
///
/// Errors: [`WishError::Unknown`], [`WishError::Finished`] (naming its status), the ledger
/// cannot be read or written.
pub fn drop(workspace: &Path, iid: &str) -> Result<Intent, WishError> {
    change(workspace, iid, "dropped", |i| {
        Some(Intent { status: Status::Dropped, done_at: Some(crate::fsutil::now_rfc3339()), ..i.clone() })
    })
}

/// Appends `edit`'s line for the unfinished intent `iid` (none when it returns `None`).
fn change(workspace: &Path, iid: &str, action: &'static str, edit: impl FnOnce(&Intent) -> Option<Intent>) -> Result<Intent, WishError> {
    let ledger = Ledger::of_workspace(workspace);
    let path = ledger.path().to_path_buf();
    ledger.update(|folded| {
        let Some(intent) = folded.get(iid) else {
            return Err(WishError::Unknown { path, id: iid.to_string() });
        };
        if intent.status.is_final() {
            return Err(WishError::Finished { path, id: iid.to_string(), status: intent.status.as_str(), action });
        }
        match edit(intent) {
            Some(line) => Ok((vec![line.clone()], line)),
            None => Ok((Vec::new(), intent.clone())),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autonomy::ledger::Folded;

    fn input(what: &str) -> WishInput {
        WishInput { what: what.into(), ..WishInput::default() }
    }

    #[test]
    fn validation_names_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let err = |i: WishInput| validate(ws, By::Human, i).unwrap_err().to_string();
        assert_eq!(err(input("  \n")), "what: is blank; say what the intent is");
        assert_eq!(err(input(&"x".repeat(2001))), "what: 2001 characters; at most 2000");
        assert_eq!(err(WishInput { why: Some("é".repeat(2001)), ..input("x") }), "why: 2001 characters; at most 2000");
        assert_eq!(
            err(WishInput { priority: Some(3), ..input("x") }),
            "priority: 3 is outside 4–7 (a wish ranks between `task` 3 and `selfcheck` 8; smaller runs first)"
        );
        assert_eq!(
            err(WishInput { run: Some(" ".into()), ..input("x") }),
            "run: is blank; give a command, or leave run out for a model turn"
        );
        let ok = validate(ws, By::Agent, WishInput { why: Some("  ".into()), ..input(" tidy ") }).unwrap();
        assert_eq!((ok.what.as_str(), ok.why, ok.priority, ok.status), ("tidy", None, 5, Status::Pending));
        assert_eq!(validate(ws, By::Agent, input(&"é".repeat(2000))).unwrap().what.chars().count(), 2000);
    }

    #[test]
    fn the_default_priority_is_the_tables_kept_within_four_to_seven() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let table = crate::autonomy::priority::table_path(ws);
        std::fs::create_dir_all(table.parent().unwrap()).unwrap();
        for (intent, want) in [(6, 6), (2, 4), (9, 7)] {
            std::fs::write(&table, format!(r#"{{"intent":{intent}}}"#)).unwrap();
            assert_eq!(validate(ws, By::Human, input("x")).unwrap().priority, want);
        }
        std::fs::write(&table, "nope").unwrap();
        let e = validate(ws, By::Human, input("x")).unwrap_err().to_string();
        assert!(e.contains("sched-priority.json") && e.ends_with("(a wish without a priority takes the table's `intent` one)"), "{e}");
        assert_eq!(validate(ws, By::Human, WishInput { priority: Some(4), ..input("x") }).unwrap().priority, 4);
    }

    #[test]
    fn checked_follows_the_fields_so_a_hand_edit_is_checked_again() {
        let home = tempfile::tempdir().unwrap();
        let key = GuardKey::load_or_create(home.path()).unwrap();
        let mut i =
            validate(Path::new("/nonexistent"), By::Agent, WishInput { priority: Some(5), run: Some("ls".into()), ..input("list") })
                .unwrap();
        i.id = "i1".into();
        assert!(!is_checked(&key, &i));
        mark_checked(&key, &mut i);
        assert!(is_checked(&key, &i));
        assert_eq!(i.extra[CHECKED_KEY], key.mark(&["list", "", "ls", "none"]));
        let back = Folded::parse(&i.to_line().unwrap()).intents.remove(0);
        assert!(is_checked(&key, &back));
        // what \0 why \0 run \0 needs: moving text between fields, or any edit, breaks the mark.
        let moved = Intent { why: Some("ls".into()), run: None, ..back.clone() };
        assert!(!is_checked(&key, &moved));
        let other_home = tempfile::tempdir().unwrap();
        assert!(!is_checked(&GuardKey::load_or_create(other_home.path()).unwrap(), &back), "another home's key");
        let edited = Intent { run: Some("rm -rf notes".into()), ..back };
        assert!(!is_checked(&key, &edited));
        let r = refused(&edited, &Refusal { class: "delete memory".into(), reason: "no".into() }, "2026-12-02T08:00:00Z");
        assert_eq!(
            (r.status, r.refused_reason.as_deref(), r.done_at.as_deref()),
            (Status::Refused, Some("delete memory: no"), Some("2026-12-02T08:00:00Z"))
        );
        assert!(!r.extra.contains_key(CHECKED_KEY));
        let e = validate(Path::new("/nonexistent"), By::Agent, WishInput { priority: Some(5), ..input("two\nlines") }).unwrap_err();
        assert!(matches!(e, WishError::ControlInWhat), "{e}");
    }

    fn seeded(ws: &Path) -> Ledger {
        let ledger = Ledger::of_workspace(ws);
        let lines = [
            r#"{"id":"i1","at":"2026-12-01T10:00:00Z","by":"human","what":"prune logs","priority":5,"needs":"human","status":"pending"}"#,
            r#"{"id":"i2","at":"2026-12-01T10:00:00Z","by":"self","what":"tidy","priority":5,"status":"done"}"#,
        ];
        ledger.append(Folded::parse(&lines.join("\n")).intents).unwrap();
        ledger
    }

    #[test]
    fn approve_sets_needs_none_once_and_refuses_finished_or_unknown_ids() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = seeded(dir.path());
        let path = ledger.path().display().to_string();
        assert_eq!(approve(dir.path(), dir.path(), "i1").unwrap().needs, Needs::None);
        let lines = std::fs::read_to_string(ledger.path()).unwrap().lines().count();
        assert_eq!(approve(dir.path(), dir.path(), "i1").unwrap().needs, Needs::None);
        assert_eq!(std::fs::read_to_string(ledger.path()).unwrap().lines().count(), lines, "a second approve writes nothing");
        assert_eq!(ledger.read().unwrap().get("i1").unwrap().needs, Needs::None);
        assert_eq!(approve(dir.path(), dir.path(), "i9").unwrap_err().to_string(), format!("{path}: no intent i9"));
        assert_eq!(
            approve(dir.path(), dir.path(), "i2").unwrap_err().to_string(),
            format!("{path}: intent i2 is already done; only an unfinished intent can be approved")
        );
    }

    #[test]
    fn drop_finishes_an_intent_with_done_at_and_says_the_status_of_a_finished_one() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = seeded(dir.path());
        let path = ledger.path().display().to_string();
        let dropped = drop(dir.path(), "i1").unwrap();
        assert_eq!(dropped.status, Status::Dropped);
        assert!(dropped.done_at.as_deref().and_then(crate::autonomy::ledger::unix_of).is_some());
        assert_eq!(ledger.read().unwrap().get("i1").unwrap().status, Status::Dropped);
        assert_eq!(
            drop(dir.path(), "i1").unwrap_err().to_string(),
            format!("{path}: intent i1 is already dropped; only an unfinished intent can be dropped")
        );
        assert_eq!(drop(dir.path(), "x").unwrap_err().to_string(), format!("{path}: no intent x"));
    }
}
