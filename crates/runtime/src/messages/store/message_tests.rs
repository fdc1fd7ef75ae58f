//! Unit tests of `message.rs` against a real `cicy.db` in a temporary home.

use super::*;
use crate::home::Home;
use crate::messages::store::testutil::store_with;
use crate::messages::store::Visibility;

fn text<'a>(conv: &'a str, sender: &'a str, content: &'a str) -> NewMessage<'a> {
    NewMessage { conv_id: conv, sender, content, content_type: None, metadata: Map::new(), thread: None, deliver: true }
}

fn seqs(msgs: &[Message]) -> Vec<i64> {
    msgs.iter().map(|m| m.seq).collect()
}

#[test]
fn concurrent_posters_on_two_connections_get_seq_one_to_n_without_gaps() {
    let (dir, mut store) = store_with(&["Ada", "Bob"]);
    let g = store.create_group("w-1", "g", "", &["w-2"]).unwrap();
    let posters: Vec<_> = ["w-1", "w-2"]
        .into_iter()
        .map(|sender| {
            let (home, conv) = (Home::at(dir.path()), g.id.clone());
            std::thread::spawn(move || {
                let mut s = MessageStore::open(&home).unwrap();
                (0..40).map(|i| s.post(&text(&conv, sender, &format!("{sender} {i}"))).unwrap().seq).collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all: Vec<i64> = posters.into_iter().flat_map(|p| p.join().unwrap()).collect();
    all.sort();
    assert_eq!(all, (1..=80).collect::<Vec<_>>());
    let page = store.messages(&g.id, None, 100).unwrap();
    assert_eq!(seqs(&page.messages), (1..=80).collect::<Vec<_>>());
    for sender in ["w-1", "w-2"] {
        let own: Vec<usize> =
            page.messages.iter().filter(|m| m.sender == sender).map(|m| m.content.rsplit(' ').next().unwrap().parse().unwrap()).collect();
        assert_eq!(own, (0..40).collect::<Vec<_>>(), "each poster's messages keep its order");
    }
}

#[test]
fn a_reply_to_a_reply_points_at_the_root_and_an_unknown_target_is_refused() {
    let (_dir, mut store) = store_with(&["Ada", "Bob"]);
    let g = store.create_group("w-1", "ops", "", &["w-2"]).unwrap();
    let other = store.create_group("w-1", "dev", "", &[]).unwrap();
    let root = store.post(&text(&g.id, "w-1", "root")).unwrap();
    let r1 = store.post(&NewMessage { thread: Some(&root.id), ..text(&g.id, "w-2", "r1") }).unwrap();
    let r2 = store.post(&NewMessage { thread: Some(&r1.id), ..text(&g.id, "w-1", "r2") }).unwrap();
    assert_eq!(
        (root.thread_root, r1.thread_root.as_deref(), r2.thread_root.as_deref()),
        (None, Some(root.id.as_str()), Some(root.id.as_str()))
    );
    assert_eq!(
        store.post(&NewMessage { thread: Some("nope"), ..text(&g.id, "w-1", "x") }).unwrap_err().to_string(),
        "thread target 'nope' was not found in group 'ops'"
    );
    assert_eq!(
        store.post(&NewMessage { thread: Some(&root.id), ..text(&other.id, "w-1", "x") }).unwrap_err().to_string(),
        format!("thread target '{}' was not found in group 'dev'", root.id),
        "a message of another conversation is not a thread target"
    );
    assert_eq!(store.messages(&g.id, None, 10).unwrap().messages.len(), 3, "refused posts leave no row");
    let thread = store.thread(&r2.id, None).unwrap();
    assert_eq!(thread.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(), ["root", "r1", "r2"]);
    let earlier = store.thread(&root.id, Some(r2.seq)).unwrap();
    assert_eq!(earlier.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(), ["root", "r1"]);
    let dm = store.direct("w-1", "w-2").unwrap();
    assert_eq!(
        store.post(&NewMessage { thread: Some("nope"), ..text(&dm.id, "w-1", "x") }).unwrap_err().to_string(),
        format!("thread target 'nope' was not found in group '{}'", dm.id)
    );
}

#[test]
fn a_thread_is_its_root_and_the_latest_nineteen_replies() {
    let (_dir, mut store) = store_with(&["Ada"]);
    let g = store.create_group("w-1", "g", "", &[]).unwrap();
    let root = store.post(&text(&g.id, "w-1", "root")).unwrap();
    for i in 0..25 {
        store.post(&NewMessage { thread: Some(&root.id), ..text(&g.id, "w-1", &format!("r{i}")) }).unwrap();
    }
    let t = store.thread(&root.id, None).unwrap();
    assert_eq!(t.len(), 20);
    assert_eq!((t[0].content.as_str(), t[1].content.as_str(), t[19].content.as_str()), ("root", "r6", "r24"));
}

#[test]
fn pages_of_250_messages_cover_each_once_newest_page_first() {
    let (_dir, mut store) = store_with(&["Ada"]);
    let g = store.create_group("w-1", "g", "", &[]).unwrap();
    // 250 commits without an fsync each: durability is not what this test is about.
    store.conn.pragma_update(None, "synchronous", "OFF").unwrap();
    for i in 1..=250 {
        store.post(&text(&g.id, "w-1", &format!("m{i}"))).unwrap();
    }
    let mut pages = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let page = store.messages(&g.id, before.as_deref(), 100).unwrap();
        pages.push(seqs(&page.messages));
        match page.before {
            Some(c) => before = Some(c),
            None => break,
        }
    }
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [100, 100, 50]);
    assert_eq!(pages[0], (151..=250).collect::<Vec<_>>(), "the newest page first, oldest first within it");
    let mut all: Vec<i64> = pages.into_iter().rev().flatten().collect();
    assert_eq!(all, (1..=250).collect::<Vec<_>>());
    all.dedup();
    assert_eq!(all.len(), 250);
    let exact = store.messages(&g.id, None, 50).unwrap();
    assert_eq!(exact.before.as_deref(), Some("s201"));
    assert_eq!(store.messages(&g.id, None, 0).unwrap_err().to_string(), "message page limit 0 is out of range: give 1 to 100");
    assert!(matches!(store.messages(&g.id, None, 101), Err(StoreError::BadLimit { limit: 101 })));
    assert_eq!(
        store.messages(&g.id, Some("42"), 10).unwrap_err().to_string(),
        "`42` is not a cursor of a message list (pass back the `before` of a page)"
    );
    assert_eq!(store.messages(&g.id, Some("s1"), 10).unwrap(), Page { messages: vec![], before: None });
}

#[test]
fn every_other_active_agent_member_gets_a_pending_delivery_that_only_moves_forward() {
    let (_dir, mut store) = store_with(&["Ada", "Bob", "Cy", "Dee"]);
    let g = store.create_group("w-1", "g", "", &["w-2", "w-3", "human:ann"]).unwrap();
    store.add_member(&g.id, "w-4", Visibility::Internal).unwrap();
    store.remove_member(&g.id, "w-3").unwrap();
    let mut meta = Map::new();
    meta.insert("broadcast".into(), Value::Bool(true));
    let m = store.post(&NewMessage { metadata: meta.clone(), content_type: Some("attachment"), ..text(&g.id, "w-1", "hi") }).unwrap();
    assert_eq!(store.message(&m.id).unwrap(), m);
    assert_eq!((m.metadata, m.content_type.as_str()), (meta, "attachment"));
    let who = |store: &MessageStore| -> Vec<(String, DeliveryState)> {
        store.deliveries(&m.id).unwrap().into_iter().map(|d| (d.agent_id, d.state)).collect()
    };
    assert_eq!(who(&store), [("w-2".into(), DeliveryState::Pending), ("w-4".into(), DeliveryState::Pending)]);
    assert_eq!(seqs(&store.pending_for("w-2").unwrap()), [1]);
    store.mark_deliveries("w-2", &[&m.id], DeliveryState::Claimed, Some(7)).unwrap();
    store.mark_deliveries("w-2", &[&m.id], DeliveryState::Claimed, None).unwrap();
    assert_eq!(store.pending_for("w-2").unwrap(), []);
    store.mark_deliveries("w-2", &[&m.id], DeliveryState::Answered, None).unwrap();
    let d = &store.deliveries(&m.id).unwrap()[0];
    assert_eq!((d.state, d.obligation_id, d.file.as_deref()), (DeliveryState::Answered, Some(7), None));
    assert_eq!(
        store.mark_deliveries("w-2", &[&m.id], DeliveryState::Pending, None).unwrap_err().to_string(),
        format!("delivery of message {} to w-2 is answered; it cannot become pending", m.id)
    );
    assert_eq!(
        store.mark_deliveries("w-4", &[&m.id, "nope"], DeliveryState::Claimed, None).unwrap_err().to_string(),
        "message nope has no delivery to w-4"
    );
    assert_eq!(who(&store)[1], ("w-4".into(), DeliveryState::Pending), "a refused batch changes nothing");
    assert_eq!(
        store.post(&text(&g.id, "w-3", "x")).unwrap_err().to_string(),
        format!("w-3 is not an active member of conversation {}", g.id)
    );
    assert_eq!(store.message("nope").unwrap_err().to_string(), "message nope does not exist");
}
