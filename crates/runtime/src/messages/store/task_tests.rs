//! Unit tests of `task.rs` against a real `cicy.db` in a temporary home.

use super::*;
use crate::messages::store::testutil::store_with;

/// A store with agents Ada (w-1), bob (w-2), Bob (w-3) and Cy (w-4, not a member) and the
/// group `g` of the first three and human ann.
fn board() -> (tempfile::TempDir, MessageStore, String) {
    let (dir, mut store) = store_with(&["Ada", "bob", "Bob", "Cy"]);
    let g = store.create_group("w-1", "g", "", &["w-2", "w-3", "human:ann"]).unwrap();
    (dir, store, g.id)
}

fn new<'a>(conv: &'a str, title: &'a str, key: &'a str) -> NewTask<'a> {
    NewTask { conv_id: conv, requester: "w-1", title, idempotency_key: key, ..NewTask::default() }
}

fn code<T: std::fmt::Debug>(r: Result<T, TaskError>) -> (&'static str, String) {
    let e = r.unwrap_err();
    (e.code.as_str(), e.message)
}

#[test]
fn the_same_idempotency_key_gives_the_same_task_and_another_title_conflicts() {
    let (_dir, mut store, g) = board();
    let first = store.task_create(&new(&g, "write the plan", "k1")).unwrap();
    assert!(!first.existed);
    let t = &first.task;
    assert_eq!((t.task_key.as_str(), t.status, t.created_by.as_str(), t.assignee.as_deref()), ("T-1", TaskStatus::Todo, "w-1", None));
    let again = store.task_create(&new(&g, " write the plan ", "k1")).unwrap();
    assert_eq!((again.existed, &again.task), (true, t));
    assert_eq!(
        code(store.task_create(&new(&g, "something else", "k1"))),
        ("idempotency_conflict", "idempotency_key 'k1' was used for task T-1 titled 'write the plan'".to_string())
    );
    let second =
        store.task_create(&NewTask { status: Some(TaskStatus::Blocked), context_label: Some("q4"), ..new(&g, "review", "k2") }).unwrap();
    assert_eq!(
        (second.task.task_key.as_str(), second.task.status, second.task.context_label.as_deref()),
        ("T-2", TaskStatus::Blocked, Some("q4"))
    );
    assert_eq!(store.tasks(&g).unwrap().iter().map(|t| t.title.as_str()).collect::<Vec<_>>(), ["write the plan", "review"]);
}

#[test]
fn a_refused_create_names_its_code() {
    let (_dir, mut store, g) = board();
    store.task_create(&NewTask { task_key: Some("T-2"), ..new(&g, "a", "k1") }).unwrap();
    assert_eq!(store.task_create(&new(&g, "b", "k2")).unwrap().task.task_key, "T-3", "T-2 is taken, so the next free key");
    assert_eq!(code(store.task_create(&new(&g, "  ", "k"))).0, "missing_title");
    assert_eq!(code(store.task_create(&new(&g, "t", " "))), ("validation_failed", "task_create needs an idempotency_key".to_string()));
    assert_eq!(
        code(store.task_create(&NewTask { task_key: Some("T-2"), ..new(&g, "c", "k3") })),
        ("validation_failed", format!("task_key 'T-2' is already used in conversation {g}"))
    );
    assert_eq!(code(store.task_create(&new("nope", "t", "k"))), ("not_found", "conversation nope does not exist".to_string()));
    assert_eq!(
        code(store.task_create(&NewTask { requester: "w-4", ..new(&g, "t", "k") })),
        ("forbidden", format!("w-4 is not an active member of conversation {g}"))
    );
    assert_eq!(
        code(store.task_create(&NewTask { assignee: Some("Cy"), ..new(&g, "t", "k") })),
        ("invalid_assignee", format!("assignee 'Cy' is not a visible agent of conversation {g}"))
    );
    assert_eq!(
        code(store.task_create(&NewTask { assignee: Some("@BOB"), ..new(&g, "t", "k") })),
        ("invalid_assignee", format!("assignee '@BOB' matches 2 agents of conversation {g} (w-2, w-3); give an id"))
    );
    assert_eq!(code(store.task_create(&NewTask { assignee: Some("human:ann"), ..new(&g, "t", "k") })).0, "invalid_assignee");
    let by_name = store.task_create(&NewTask { assignee: Some("@ada"), ..new(&g, "t", "k4") }).unwrap();
    let by_id = store.task_create(&NewTask { assignee: Some("w-3"), ..new(&g, "u", "k5") }).unwrap();
    assert_eq!((by_name.task.assignee.as_deref(), by_id.task.assignee.as_deref()), (Some("w-1"), Some("w-3")));
}

#[test]
fn updates_find_the_task_by_id_or_key_and_clear_a_finished_block() {
    let (_dir, mut store, g) = board();
    let t = store.task_create(&new(&g, "ship", "k1")).unwrap().task;
    let by_key = TaskRef { task_key: Some("T-1"), task_id: None };
    let u = |task, status, reason| TaskUpdate { conv_id: &g, requester: "w-2", task, status, blocked_reason: reason, context_label: None };
    let blocked = store.task_update(&u(by_key, Some(TaskStatus::Blocked), Some("waiting for review"))).unwrap();
    assert_eq!((blocked.status, blocked.blocked_reason.as_deref()), (TaskStatus::Blocked, Some("waiting for review")));
    let labelled = store
        .task_update(&TaskUpdate { context_label: Some("sprint 3"), ..u(TaskRef { task_id: Some(&t.id), task_key: None }, None, None) })
        .unwrap();
    assert_eq!((labelled.blocked_reason.as_deref(), labelled.context_label.as_deref()), (Some("waiting for review"), Some("sprint 3")));
    let moving = store.task_update(&u(by_key, Some(TaskStatus::InProgress), None)).unwrap();
    assert_eq!((moving.status, moving.blocked_reason, moving.context_label.as_deref()), (TaskStatus::InProgress, None, Some("sprint 3")));
    assert_eq!(
        code(store.task_update(&u(TaskRef::default(), Some(TaskStatus::Done), None))),
        ("missing_task", "give task_id or task_key".to_string())
    );
    assert_eq!(
        code(store.task_update(&u(TaskRef { task_id: Some(&t.id), task_key: Some("T-9") }, Some(TaskStatus::Done), None))),
        ("task_not_found", format!("no task with task_id '{}' and task_key 'T-9' in conversation {g}", t.id))
    );
    assert_eq!(
        code(store.task_update(&u(by_key, None, None))),
        ("validation_failed", "task_update needs status, blocked_reason or context_label".to_string())
    );
    assert_eq!(code(store.task_update(&TaskUpdate { requester: "w-4", ..u(by_key, Some(TaskStatus::Done), None) })).0, "forbidden");
}

#[test]
fn a_transfer_sets_the_assignee_and_open_tasks_leave_out_done_and_others() {
    let (_dir, mut store, g) = board();
    for (title, key) in [("a", "k1"), ("b", "k2"), ("c", "k3")] {
        store.task_create(&NewTask { assignee: Some("w-2"), ..new(&g, title, key) }).unwrap();
    }
    let u =
        |key| TaskUpdate { conv_id: &g, requester: "w-1", task: TaskRef { task_key: Some(key), task_id: None }, ..TaskUpdate::default() };
    assert_eq!(code(store.task_transfer(&u("T-1"), None)), ("missing_assignee", "task_transfer needs an assignee".to_string()));
    assert_eq!(code(store.task_transfer(&u("T-1"), Some("nobody"))).0, "invalid_assignee");
    let moved = store.task_transfer(&u("T-1"), Some("Ada")).unwrap();
    assert_eq!((moved.assignee.as_deref(), moved.status), (Some("w-1"), TaskStatus::Todo));
    store.task_transfer(&TaskUpdate { status: Some(TaskStatus::Done), ..u("T-2") }, Some("w-2")).unwrap();
    let open = store.open_tasks_of("w-2", &g).unwrap();
    assert_eq!(open, [TaskSummary { task_key: "T-3".into(), title: "c".into(), status: TaskStatus::Todo }]);
    assert_eq!(store.open_tasks_of("w-1", &g).unwrap().len(), 1);
}

#[test]
fn statuses_and_codes_have_their_protocol_texts() {
    for s in ["todo", "in_progress", "blocked", "done"] {
        assert_eq!(TaskStatus::parse(s).unwrap().as_str(), s);
    }
    assert_eq!(
        code(TaskStatus::parse("doing")),
        ("validation_failed", "status 'doing' is not one of todo, in_progress, blocked, done".to_string())
    );
    assert_eq!(serde_json::to_string(&TaskErrorCode::IdempotencyConflict).unwrap(), "\"idempotency_conflict\"");
    assert_eq!(
        TaskError::new(TaskErrorCode::MissingTarget, "give group or conversation_id").to_string(),
        "missing_target: give group or conversation_id"
    );
    assert_eq!(TaskError::from(StoreError::GroupAmbiguous { group: "g".into() }).code, TaskErrorCode::GroupNotFound);
}
