//! Unit tests of `conversation.rs` against a real `cicy.db` in a temporary home.

use super::*;
use crate::messages::store::testutil::store_with;

fn ids(roster: &[RosterEntry]) -> Vec<(&str, &str)> {
    roster.iter().map(|r| (r.id.as_str(), r.name.as_str())).collect()
}

#[test]
fn a_direct_conversation_is_one_per_pair_in_either_order() {
    let (_dir, mut store) = store_with(&["Ada"]);
    let a = store.direct("w-1", "human:ann").unwrap();
    let b = store.direct("human:ann", "w-1").unwrap();
    assert_eq!(a, b);
    assert_eq!((a.kind, a.name.as_str(), a.created_by.as_str()), (ConvKind::Direct, DIRECT_NAME, "w-1"));
    assert_eq!(uuid::Uuid::parse_str(&a.id).unwrap().get_version_num(), 4);
    let other = store.direct("w-1", "w-2").unwrap();
    assert_ne!(other.id, a.id);
    let members: Vec<String> = store.members(&a.id).unwrap().into_iter().map(|m| m.principal).collect();
    assert_eq!(members, ["human:ann", "w-1"]);
    assert_eq!(store.direct("w-1", "w-1").unwrap_err().to_string(), "a direct conversation needs two different principals; got w-1 twice");
    assert_eq!(store.direct("w-1", "ann").unwrap_err().to_string(), "`ann` is not a principal: give an agent id (w-<n>) or human:<name>");
    assert_eq!(
        store.add_member(&a.id, "w-3", Visibility::Visible).unwrap_err().to_string(),
        format!("conversation {} is direct: its two members are fixed", a.id)
    );
}

#[test]
fn two_connections_asking_for_the_same_pair_at_once_get_one_conversation() {
    let (dir, _store) = store_with(&["Ada", "Bob"]);
    let askers: Vec<_> = [("w-1", "w-2"), ("w-2", "w-1")]
        .into_iter()
        .map(|(a, b)| {
            let home = crate::home::Home::at(dir.path());
            std::thread::spawn(move || {
                let mut s = MessageStore::open(&home).unwrap();
                (0..20).map(|_| s.direct(a, b).unwrap().id).collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all: Vec<String> = askers.into_iter().flat_map(|t| t.join().unwrap()).collect();
    all.dedup();
    assert_eq!(all.len(), 1, "{all:?}");
}

#[test]
fn a_group_has_its_requester_and_resolves_by_name_for_members_only() {
    let (_dir, mut store) = store_with(&["Ada", "Bob", "Cy"]);
    let g = store.create_group("w-1", " ops ", "the ops room", &["w-2", "w-1", "human:ann"]).unwrap();
    assert_eq!((g.kind, g.name.as_str(), g.description.as_str()), (ConvKind::Group, "ops", "the ops room"));
    let members: Vec<String> = store.members(&g.id).unwrap().into_iter().map(|m| m.principal).collect();
    assert_eq!(members, ["human:ann", "w-1", "w-2"]);
    assert_eq!(store.resolve_group("w-2", "ops").unwrap().id, g.id);
    let not_found = "group 'ops' was not found in this workspace, or this agent is not a member";
    assert_eq!(store.resolve_group("w-3", "ops").unwrap_err().to_string(), not_found);
    assert_eq!(
        store.resolve_group("w-1", "dev").unwrap_err().to_string(),
        "group 'dev' was not found in this workspace, or this agent is not a member"
    );
    assert_eq!(
        store.resolve_group("w-1", &g.id).unwrap_err().to_string(),
        format!("group '{}' was not found in this workspace, or this agent is not a member", g.id),
        "an id is looked up as a name"
    );
    store.remove_member(&g.id, "w-2").unwrap();
    assert_eq!(store.resolve_group("w-2", "ops").unwrap_err().to_string(), not_found);
    assert_eq!(store.remove_member(&g.id, "w-2").unwrap_err().to_string(), format!("w-2 is not an active member of conversation {}", g.id));
    store.add_member(&g.id, "w-2", Visibility::Visible).unwrap();
    assert_eq!(store.resolve_group("w-2", "ops").unwrap().id, g.id);
}

#[test]
fn a_name_is_refused_for_overlapping_members_and_two_matches_are_ambiguous() {
    let (_dir, mut store) = store_with(&["Ada", "Bob", "Cy"]);
    let first = store.create_group("w-1", "ops", "", &["w-2"]).unwrap();
    assert_eq!(
        store.create_group("w-3", "ops", "", &["w-2"]).unwrap_err().to_string(),
        format!("group name 'ops' is already used by group {}, of which w-2 is a member; choose another name", first.id)
    );
    let second = store.create_group("w-3", "ops", "", &[]).unwrap();
    assert_eq!(store.resolve_group("w-3", "ops").unwrap().id, second.id);
    assert!(matches!(store.add_member(&second.id, "w-1", Visibility::Visible), Err(StoreError::GroupNameTaken { .. })));
    // A file written otherwise (by hand, or a future version) can still hold two.
    store.conn.execute("INSERT INTO member (conv_id, principal) VALUES (?1, 'w-1')", [&second.id]).unwrap();
    assert_eq!(store.resolve_group("w-1", "ops").unwrap_err().to_string(), "group name 'ops' is ambiguous in this workspace");
}

#[test]
fn group_names_are_what_an_envelope_shows_verbatim() {
    let (_dir, mut store) = store_with(&[]);
    let long = "x".repeat(121);
    for (name, problem) in [
        ("  ", "is empty"),
        ("a|b", "contains a control character or '|'"),
        ("a\nb", "contains a control character or '|'"),
        (long.as_str(), "is longer than 120 characters"),
    ] {
        assert_eq!(store.create_group("w-1", name, "", &[]).unwrap_err().to_string(), format!("group name '{name}' {problem}"));
    }
    assert_eq!(store.create_group("w-1", &"é".repeat(120), "", &[]).unwrap().name.chars().count(), 120);
}

#[test]
fn the_roster_lists_active_visible_registered_agents_by_lowercase_name_then_id() {
    let (_dir, mut store) = store_with(&["bob", "alice", "Alice", "Zed", "Hidden", "Gone"]);
    let g = store.create_group("w-1", "g", "", &["w-2", "w-3", "w-4", "w-6", "w-7", "human:ann"]).unwrap();
    store.add_member(&g.id, "w-5", Visibility::Internal).unwrap();
    store.remove_member(&g.id, "w-4").unwrap();
    store.conn.execute("DELETE FROM agent_config WHERE id = 'w-6'", []).unwrap();
    let roster = store.roster(&g.id).unwrap();
    assert_eq!(ids(&roster), [("w-2", "alice"), ("w-3", "Alice"), ("w-1", "bob")]);
    assert!(roster.iter().all(|r| r.kind == "agent" && r.host.is_none()));
    assert_eq!(store.roster("no-such-conv").unwrap(), []);
}

#[test]
fn display_names_are_titles_human_names_or_a_short_id() {
    let (_dir, store) = store_with(&["Ada"]);
    assert_eq!(store.display_name("w-1").unwrap(), "Ada");
    assert_eq!(store.display_name("human:ann lee").unwrap(), "ann lee");
    assert_eq!(store.display_name("w-123456789").unwrap(), "w-123456");
    assert_eq!(store.conversation("nope").unwrap_err().to_string(), "conversation nope does not exist");
}
