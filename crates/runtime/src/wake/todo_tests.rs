//! Unit tests of `todo.rs` against a real `cicy.db` in a temporary home.

use super::*;
use crate::home::Home;

const NOW: i64 = 1_790_000_000;

fn open() -> (tempfile::TempDir, WakeDb) {
    let dir = tempfile::tempdir().unwrap();
    let db = WakeDb::open(&Home::at(dir.path())).unwrap();
    (dir, db)
}

fn at(local: &str, unix: i64) -> At {
    At { local: local.to_string(), unix }
}

/// (id, text, status, at_unix, attempt) of each todo.
fn brief(todos: &[Todo]) -> Vec<(u32, &str, TodoStatus, i64, u32)> {
    todos.iter().map(|t| (t.id, t.text.as_str(), t.status, t.at_unix, t.attempt)).collect()
}

#[test]
fn ids_are_max_plus_one_per_agent_and_a_pending_duplicate_is_returned() {
    use TodoStatus::*;
    let (_d, mut db) = open();
    let a = at("2026-12-01T09:00", 100);
    assert_eq!(db.todo_add("w-1", "water plants", &a).unwrap(), Added { id: 1, existed: false });
    assert_eq!(db.todo_add("w-1", " water plants\n", &a).unwrap(), Added { id: 1, existed: true });
    assert_eq!(db.todo_add("w-1", "water plants", &at("2026-12-01T09:01", 160)).unwrap(), Added { id: 2, existed: false });
    assert_eq!(db.todo_add("w-2", "water plants", &a).unwrap(), Added { id: 1, existed: false });
    db.todo_done("w-1", 1).unwrap();
    // Done is not pending: the same text and time again is a new todo.
    assert_eq!(db.todo_add("w-1", "water plants", &a).unwrap(), Added { id: 3, existed: false });
    db.todo_remove("w-1", 3).unwrap();
    // A removed max id is not reused.
    assert_eq!(db.todo_add("w-1", "call", &a).unwrap(), Added { id: 4, existed: false });
    assert!(matches!(db.todo_add("w-1", " \n", &a), Err(WakeDbError::BlankText)));
    assert_eq!(brief(&db.todo_list("w-1", false).unwrap()), [(2, "water plants", Pending, 160, 0), (4, "call", Pending, 100, 0)]);
    assert_eq!(
        brief(&db.todo_list("w-1", true).unwrap()),
        [(1, "water plants", Done, 100, 0), (2, "water plants", Pending, 160, 0), (4, "call", Pending, 100, 0)]
    );
    let first = &db.todo_list("w-1", true).unwrap()[0];
    assert_eq!((first.created.len(), first.done_at.as_ref().map(String::len)), (20, Some(20)));
}

#[test]
fn a_todo_is_one_line() {
    let (_d, mut db) = open();
    let added = db.todo_add("w-1", "multi\nline\r\ntext", &at("2026-12-01T09:00", 100)).unwrap();
    assert_eq!(db.todo_list("w-1", false).unwrap()[0].text, "multi line  text");
    assert_eq!(added.id, 1);
}

#[test]
fn done_and_remove_refuse_an_unknown_or_finished_todo() {
    let (_d, mut db) = open();
    db.todo_add("w-1", "a", &at("2026-12-01T09:00", 100)).unwrap();
    let done = db.todo_done("w-1", 1).unwrap();
    assert_eq!((done.id, done.text.as_str(), done.status), (1, "a", TodoStatus::Done));
    assert_eq!(db.todo_done("w-1", 1).unwrap_err().to_string(), "agent w-1 has no todo #1 (see `cicy-agent todo w-1 ls`)");
    assert_eq!(db.todo_remove("w-1", 1).unwrap().status, TodoStatus::Removed);
    assert!(matches!(db.todo_remove("w-1", 1), Err(WakeDbError::NoSuchTodo { id: 1, .. })));
    assert!(matches!(db.todo_done("w-1", 7), Err(WakeDbError::NoSuchTodo { id: 7, .. })));
    assert!(matches!(db.todo_remove("w-2", 1), Err(WakeDbError::NoSuchTodo { id: 1, .. })));
    assert!(db.todo_list("w-1", true).unwrap().is_empty());
}

#[test]
fn claiming_takes_every_due_todo_in_one_transaction() {
    use TodoStatus::*;
    let (dir, mut a) = open();
    let mut b = WakeDb::open(&Home::at(dir.path())).unwrap();
    a.todo_add("w-1", "late", &at("2026-12-01T09:02", NOW - 10)).unwrap();
    a.todo_add("w-1", "early", &at("2026-12-01T09:01", NOW - 100)).unwrap();
    a.todo_add("w-1", "future", &at("2026-12-01T09:03", NOW + 1)).unwrap();
    a.todo_add("w-2", "other agent", &at("2026-12-01T09:00", NOW - 100)).unwrap();

    // While b holds the write lock, a's claim fails whole: nothing is claimed.
    b.conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    a.conn.busy_timeout(std::time::Duration::ZERO).unwrap();
    assert!(matches!(a.todo_claim_due("w-1", NOW), Err(WakeDbError::Sql { .. })));
    b.conn.execute_batch("ROLLBACK").unwrap();
    assert!(b.todo_claimed("w-1").unwrap().is_empty());

    // A reader whose snapshot began before the claim sees none claimed; after, all of them.
    b.conn.execute_batch("BEGIN").unwrap();
    assert_eq!(b.todo_claimed("w-1").unwrap().len(), 0);
    let claimed = a.todo_claim_due("w-1", NOW).unwrap();
    assert_eq!(brief(&claimed), [(2, "early", Claimed, NOW - 100, 0), (1, "late", Claimed, NOW - 10, 0)]);
    assert_eq!(b.todo_claimed("w-1").unwrap().len(), 0);
    b.conn.execute_batch("COMMIT").unwrap();
    assert_eq!(brief(&b.todo_claimed("w-1").unwrap()), [(1, "late", Claimed, NOW - 10, 0), (2, "early", Claimed, NOW - 100, 0)]);

    // Never twice.
    assert!(b.todo_claim_due("w-1", NOW).unwrap().is_empty());
    assert_eq!(a.todo_next_due("w-1").unwrap().map(|t| t.id), Some(3));
    assert_eq!(a.todo_next_due_all().unwrap(), [(NOW - 100, "w-2".to_string()), (NOW + 1, "w-1".to_string())]);
}

#[test]
fn a_finished_wake_marks_its_todos_done() {
    let (_d, mut db) = open();
    db.todo_add("w-1", "a", &at("2026-12-01T09:00", NOW)).unwrap();
    db.todo_claim_due("w-1", NOW).unwrap();
    assert!(db.todo_finish("w-1", &[1], true, NOW).unwrap().is_empty());
    assert_eq!(brief(&db.todo_list("w-1", true).unwrap()), [(1, "a", TodoStatus::Done, NOW, 0)]);
    assert_eq!(db.todo_next_due("w-1").unwrap(), None);
}

#[test]
fn a_failed_wake_adds_attempt_retries_with_doubling_delays() {
    use TodoStatus::*;
    let (_d, mut db) = open();
    db.todo_add("w-1", "check mail", &at("2026-12-01T09:00", NOW)).unwrap();
    db.todo_add("w-1", "x (attempt 3)", &at("2026-12-01T09:00", NOW)).unwrap();
    db.todo_add("w-1", "y (attempt 9)", &at("2026-12-01T09:00", NOW)).unwrap();
    db.todo_add("w-1", "z (attempt 10)", &at("2026-12-01T09:00", NOW)).unwrap();
    db.todo_add("w-1", "removed meanwhile", &at("2026-12-01T09:00", NOW)).unwrap();
    db.todo_claim_due("w-1", NOW).unwrap();
    db.todo_remove("w-1", 5).unwrap();
    let retries = db.todo_finish("w-1", &[1, 2, 3, 4, 5], false, NOW).unwrap();
    assert_eq!(
        brief(&retries),
        [
            (6, "check mail (attempt 1)", Pending, NOW + 2 * 60, 1),
            (7, "x (attempt 4)", Pending, NOW + 16 * 60, 4),
            (8, "y (attempt 10)", Pending, NOW + 1024 * 60, 10),
            (9, "z (attempt 11)", Pending, NOW + 1440 * 60, 11),
        ]
    );
    assert_eq!(retries[0].at_local, at_of_unix(NOW + 120).local);
    assert_eq!(
        brief(&db.todo_list("w-1", true).unwrap())[..4],
        [
            (1, "check mail", Done, NOW, 0),
            (2, "x (attempt 3)", Done, NOW, 0),
            (3, "y (attempt 9)", Done, NOW, 0),
            (4, "z (attempt 10)", Done, NOW, 0)
        ]
    );

    // The same failure again while the retry is pending adds nothing (cryo dedupe).
    db.todo_add("w-1", "check mail", &at("2026-12-01T09:00", NOW)).unwrap();
    db.todo_claim_due("w-1", NOW).unwrap();
    assert!(db.todo_finish("w-1", &[10], false, NOW).unwrap().is_empty());
    assert_eq!(db.todo_list("w-1", false).unwrap().len(), 4);
}

#[test]
fn the_attempt_suffix_is_parsed_only_when_well_formed() {
    assert_eq!(split_attempt("x (attempt 3)"), ("x", 3));
    assert_eq!(split_attempt("a (attempt 1) (attempt 2)"), ("a (attempt 1)", 2));
    assert_eq!(split_attempt("x (attempt )"), ("x (attempt )", 0));
    assert_eq!(split_attempt("x (attempt 3a)"), ("x (attempt 3a)", 0));
    assert_eq!(split_attempt("x (attempt 99999999999)"), ("x (attempt 99999999999)", 0));
    assert_eq!(split_attempt("x"), ("x", 0));
}

fn todo(id: u32, text: &str, status: TodoStatus) -> Todo {
    Todo {
        id,
        text: text.to_string(),
        at_local: "2026-12-01T09:00".to_string(),
        at_unix: NOW,
        status,
        attempt: 0,
        created: "2026-11-30T08:00:00Z".to_string(),
        done_at: None,
    }
}

#[test]
fn the_prompt_section_shows_open_todos_then_the_last_three_done() {
    use TodoStatus::*;
    let todos = [
        todo(1, "d1", Done),
        todo(2, "p2", Pending),
        todo(3, "d3", Done),
        todo(4, "r4", Removed),
        todo(5, "c5", Claimed),
        todo(6, "d6", Done),
        todo(7, "d7", Done),
        todo(8, "d8", Done),
    ];
    assert_eq!(
        prompt_section(&todos).unwrap(),
        "2. [ ] p2 (at: 2026-12-01T09:00)\n5. [~] c5 (at: 2026-12-01T09:00)\n(2 older done todos not shown)\n6. [x] d6 (at: 2026-12-01T09:00)\n7. [x] d7 (at: 2026-12-01T09:00)\n8. [x] d8 (at: 2026-12-01T09:00)"
    );
    assert_eq!(prompt_section(&todos[..2]).unwrap(), "2. [ ] p2 (at: 2026-12-01T09:00)\n1. [x] d1 (at: 2026-12-01T09:00)");
    assert_eq!(prompt_section(&[todo(4, "r4", Removed)]).unwrap(), "No todos.");
    assert_eq!(todo_line(&todo(4, "r4", Removed)), "4. [-] r4 (at: 2026-12-01T09:00)");
}

#[test]
fn a_prompt_section_over_2048_bytes_is_dropped() {
    // Each line is `N. [ ] ` + text + ` (at: 2026-12-01T09:00)`: 7 + 80 + 23 = 110 bytes.
    let line_text = "t".repeat(80);
    let fits: Vec<Todo> = (1..=9).map(|i| todo(i, &line_text, TodoStatus::Pending)).collect();
    let mut exact = fits.clone();
    // 9 lines of 110 bytes + 8 newlines = 998; a newline and a 10th line (`10. [ ] `, text,
    // the 23-byte tail) bring it to exactly 2048.
    exact.push(todo(10, &"u".repeat(2048 - 998 - 1 - 8 - 23), TodoStatus::Pending));
    assert_eq!(prompt_section(&exact).unwrap().len(), 2048);
    exact.last_mut().unwrap().text.push('u');
    assert_eq!(prompt_section(&exact), None);
    assert_eq!(prompt_section(&fits).unwrap().len(), 998);
}
